// IntDivider divides unsigned integers by a divisor fixed before a loop, with a multiply-high, a
// subtraction, an addition and two shifts instead of a division: the GPU has no integer divider,
// and nvcc turns a 64-bit `/` or `%` by a runtime value into a call of a subroutine of dozens of
// instructions (tests/cuda_sass_test.py checks that the kernels make none). The method is
// Granlund and Montgomery's ("Division by Invariant Integers using Multiplication", PLDI 1994,
// section 4), which PyTorch's IntDivider and CUTLASS's FastDivmod also use; this is a rewrite,
// valid for every dividend and every divisor >= 1 of the type, 64-bit included.
//
//   const IntDivider<uint32_t> size(7);   // on the host, with the launch's arguments
//   const auto [row, column] = size.DivMod(position);  // in the kernel: position / 7, % 7
//
// Usable from host and device code alike; the constructor runs on the host only.
#ifndef TENSOROPS_KERNELS_INT_DIVIDER_H_
#define TENSOROPS_KERNELS_INT_DIVIDER_H_

#include <bit>
#include <cstdint>
#include <type_traits>

#include "kernels/half.h"

namespace tensorops {

// IntDivider<U> (U = uint32_t or uint64_t) divides by `divisor`, which must be >= 1 (the default
// is 1). Divide(n) == n / divisor and DivMod(n) == {n / divisor, n % divisor} for every n.
template <typename U>
class IntDivider {
  static_assert(std::is_same_v<U, uint32_t> || std::is_same_v<U, uint64_t>);

 public:
  static constexpr int kBits = 8 * sizeof(U);

  struct QuotientRemainder {
    U quotient;
    U remainder;
  };

  IntDivider() = default;

  // With l = ceil(log2(divisor)), the magic number is floor(2^N * (2^l - divisor) / divisor) + 1
  // (N = kBits), which fits in N bits because 2^l < 2 * divisor. The product needs 2N bits.
  explicit IntDivider(U divisor) : divisor_(divisor) {
    const int log2_ceil = divisor <= 1 ? 0 : kBits - std::countl_zero(static_cast<U>(divisor - 1));
    using Wide = std::conditional_t<sizeof(U) == 4, uint64_t, unsigned __int128>;
    const Wide excess = (Wide{1} << log2_ceil) - divisor;  // 2^l - divisor < divisor
    magic_ = static_cast<U>((excess << kBits) / divisor + 1);
    shift_small_ = log2_ceil > 0 ? 1 : 0;
    shift_rest_ = static_cast<uint8_t>(log2_ceil > 0 ? log2_ceil - 1 : 0);
  }

  TENSOROPS_HOST_DEVICE U divisor() const { return divisor_; }

  // The high half t of n * magic is within one divisor of n / divisor from below; the average of t
  // and n, taken as t + (n - t) / 2 so that it cannot overflow, shifted by l - 1 is the quotient.
  // A divisor of 1 has magic 1 and no shifts: t = 0, and the quotient is n itself.
  TENSOROPS_HOST_DEVICE U Divide(U n) const {
    const U t = MultiplyHigh(n, magic_);
    return (t + ((n - t) >> shift_small_)) >> shift_rest_;
  }

  TENSOROPS_HOST_DEVICE QuotientRemainder DivMod(U n) const {
    const U quotient = Divide(n);
    return {quotient, n - quotient * divisor_};
  }

 private:
  TENSOROPS_HOST_DEVICE static U MultiplyHigh(U a, U b) {
#if defined(__CUDA_ARCH__)
    if constexpr (sizeof(U) == 4) {
      return __umulhi(a, b);
    } else {
      return __umul64hi(a, b);
    }
#else
    if constexpr (sizeof(U) == 4) {
      return static_cast<U>((uint64_t{a} * b) >> 32);
    } else {
      return static_cast<U>((static_cast<unsigned __int128>(a) * b) >> 64);
    }
#endif
  }

  U divisor_ = 1;
  U magic_ = 1;
  uint8_t shift_small_ = 0;
  uint8_t shift_rest_ = 0;
};

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_INT_DIVIDER_H_
