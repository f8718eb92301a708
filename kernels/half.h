// Storage types for the 16-bit floating dtypes: IEEE binary16 (`Float16`) and bfloat16
// (`BFloat16`). Both hold raw bits; arithmetic happens after conversion to float, which is exact,
// and results are rounded back to nearest-even once.
//
//   Float16 h(1.5f);
//   float f = static_cast<float>(h);  // 1.5f
//
// The conversions are plain integer code usable from host and device (`__host__ __device__` under
// nvcc), with no dependence on F16C or CUDA's cuda_fp16.h.
#ifndef TENSOROPS_KERNELS_HALF_H_
#define TENSOROPS_KERNELS_HALF_H_

#include <bit>
#include <cstdint>

#if defined(__CUDACC__)
#define TENSOROPS_HOST_DEVICE __host__ __device__
#else
#define TENSOROPS_HOST_DEVICE
#endif

namespace tensorops {

namespace internal {

TENSOROPS_HOST_DEVICE inline uint32_t FloatBits(float value) {
  return std::bit_cast<uint32_t>(value);
}
TENSOROPS_HOST_DEVICE inline float BitsToFloat(uint32_t bits) { return std::bit_cast<float>(bits); }

// Rounds a float to binary16 bits, nearest-even, with overflow to infinity, gradual underflow to
// subnormals, and NaN kept quiet with its sign.
TENSOROPS_HOST_DEVICE inline uint16_t FloatToHalfBits(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // Inf or NaN.
    return sign | (magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u);
  }
  if (magnitude >= 0x477ff000u) {  // Rounds to a value >= 65520: overflow.
    return sign | 0x7c00u;
  }
  if (magnitude < 0x38800000u) {  // Below the smallest normal half (2^-14): subnormal or zero.
    if (magnitude < 0x33000000u) return sign;  // Below half of the smallest subnormal (2^-25).
    const uint32_t exponent = magnitude >> 23;
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exponent;  // 14..24 for the exponents that reach here.
    uint32_t half = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (half & 1u))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
  uint32_t half = (magnitude - 0x38000000u) >> 13;
  const uint32_t remainder = magnitude & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (half & 1u))) ++half;
  return sign | static_cast<uint16_t>(half);
}

TENSOROPS_HOST_DEVICE inline float HalfBitsToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1fu) {  // Inf or NaN.
    return BitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  }
  if (exponent != 0) {
    return BitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  }
  if (mantissa == 0) return BitsToFloat(sign);
  // Subnormal half: normalize into a float.
  uint32_t float_exponent = 113u;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --float_exponent;
  }
  return BitsToFloat(sign | (float_exponent << 23) | ((mantissa & 0x3ffu) << 13));
}

// Rounds a float to bfloat16 bits, nearest-even; NaN stays a quiet NaN with its sign.
TENSOROPS_HOST_DEVICE inline uint16_t FloatToBFloat16Bits(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

TENSOROPS_HOST_DEVICE inline float BFloat16BitsToFloat(uint16_t bits) {
  return BitsToFloat(static_cast<uint32_t>(bits) << 16);
}

}  // namespace internal

// Float16 is an IEEE 754 binary16 value in its storage form.
struct Float16 {
  uint16_t bits = 0;

  Float16() = default;
  TENSOROPS_HOST_DEVICE explicit Float16(float value) : bits(internal::FloatToHalfBits(value)) {}
  TENSOROPS_HOST_DEVICE explicit operator float() const { return internal::HalfBitsToFloat(bits); }
  TENSOROPS_HOST_DEVICE static Float16 FromBits(uint16_t raw) {
    Float16 value;
    value.bits = raw;
    return value;
  }
};

// BFloat16 is a bfloat16 value (the top half of a float32) in its storage form.
struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  TENSOROPS_HOST_DEVICE explicit BFloat16(float value)
      : bits(internal::FloatToBFloat16Bits(value)) {}
  TENSOROPS_HOST_DEVICE explicit operator float() const {
    return internal::BFloat16BitsToFloat(bits);
  }
  TENSOROPS_HOST_DEVICE static BFloat16 FromBits(uint16_t raw) {
    BFloat16 value;
    value.bits = raw;
    return value;
  }
};

static_assert(sizeof(Float16) == 2 && sizeof(BFloat16) == 2);

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_HALF_H_
