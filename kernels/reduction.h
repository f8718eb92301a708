// Reductions of Scatter and the ops built like it, as small functors that CPU and CUDA code share.
//
//   SumOp{}(dest, value);   // dest = dest + value
//
// Each functor combines a destination element with one source element already converted to the
// destination's type (float for float16/bfloat16 accumulation). `Identity<Op, T>()` is the value a
// destination starts from when `include_self` is false.
#ifndef TENSOROPS_KERNELS_REDUCTION_H_
#define TENSOROPS_KERNELS_REDUCTION_H_

#include <bit>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <type_traits>

#include "kernels/dtype.h"
#include "kernels/half.h"

namespace tensorops {

// Reduction is the `reduce` argument of the ops (docs/semantics.md, Reductions).
enum class Reduction { kAssign, kSum, kProd, kMean, kAmax, kAmin };

// ReductionName returns the upper-case name docs/semantics.md uses ("SUM").
std::string_view ReductionName(Reduction reduction);

// ParseReduction accepts the names of docs/semantics.md and client aliases (case-insensitive):
// assign/update, sum/add, prod/mul/multiply, mean, amax/max, amin/min. nullopt for anything else.
std::optional<Reduction> ParseReduction(std::string_view name);

namespace internal {

// Comparable returns the value ordered comparisons use: float for the 16-bit floats.
template <typename T>
TENSOROPS_HOST_DEVICE inline auto Comparable(T value) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(value);
  } else {
    return value;
  }
}

// Pick returns `take ? a : b`, selecting the 16-bit floats by their bits: on the structs GCC
// selected between the two operands' addresses (the source spilled to the stack, a cmov of
// pointers, a load through the result), which put a store-to-load round trip on every update of
// a bfloat16 AMAX/AMIN (1 MiB last-axis Scatter: 270 µs against 77 µs for ASSIGN).
template <typename T>
TENSOROPS_HOST_DEVICE inline T Pick(bool take, T a, T b) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return T::FromBits(take ? a.bits : b.bits);
  } else {
    return take ? a : b;
  }
}

// RawBits returns the storage bits of a floating value as an unsigned integer: what "the NaN with
// the greatest bit pattern" of docs/semantics.md (Reductions) compares.
template <typename T>
TENSOROPS_HOST_DEVICE inline auto RawBits(T value) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return value.bits;
  } else if constexpr (sizeof(T) == 4) {
    return std::bit_cast<uint32_t>(value);
  } else {
    return std::bit_cast<uint64_t>(value);
  }
}

// Replaces says whether `value` takes the place of `dest` in AMAX (kMax) or AMIN, by the rule of
// docs/semantics.md (Reductions), which makes the result independent of the order of the updates: a
// NaN beats every number, and of two NaNs the one with the greater bit pattern wins; otherwise the
// larger (smaller) value wins, with -0.0 < +0.0. Every case selects one of the two operands by a
// total order, so the reduction is commutative and associative bit for bit.
template <bool kMax, typename T>
TENSOROPS_HOST_DEVICE inline bool Replaces(T dest, T value) {
  const auto comparable_value = Comparable(value);
  const auto comparable_dest = Comparable(dest);
  if constexpr (std::is_floating_point_v<decltype(comparable_value)>) {
    // Equal or unordered (a NaN on either side) are the only cases the bits decide, and rare in
    // real data: one comparison tells them apart, so the common case stays a compare and a select
    // (maxss on x86). Deciding every update with the bits, branch-free, made a float32 AMAX Scatter
    // 10x slower (GCC turned the longer select into a mispredicted branch).
#if defined(__CUDA_ARCH__)
    const bool decided_by_bits =
        !(comparable_value < comparable_dest) && !(comparable_value > comparable_dest);
#else
    const bool decided_by_bits = !__builtin_islessgreater(comparable_value, comparable_dest);
#endif
    if (decided_by_bits) [[unlikely]] {
      const bool value_nan = comparable_value != comparable_value;
      const bool dest_nan = comparable_dest != comparable_dest;
      const auto value_bits = RawBits(value);
      const auto dest_bits = RawBits(dest);
      if (value_nan || dest_nan) return value_nan && (!dest_nan || value_bits > dest_bits);
      // Equal values: the same bits, or the two zeros.
      constexpr int kSignShift = static_cast<int>(sizeof(value_bits)) * 8 - 1;
      const bool value_negative = (value_bits >> kSignShift) != 0;
      const bool dest_negative = (dest_bits >> kSignShift) != 0;
      return kMax ? dest_negative && !value_negative : value_negative && !dest_negative;
    }
  }
  return kMax ? comparable_value > comparable_dest : comparable_value < comparable_dest;
}

}  // namespace internal

// AssignOp: the last value written wins.
struct AssignOp {
  template <typename T>
  TENSOROPS_HOST_DEVICE void operator()(T& dest, T value) const {
    dest = value;
  }
};

namespace internal {

// Wrapping is the type integer sums and products are computed in: the unsigned form of T's
// promoted type, so that they wrap around modulo 2^bits as PyTorch's do. In a signed type an
// overflow would be undefined behaviour. Other types compute in T.
template <typename T, typename = void>
struct Wrapping {
  using type = T;
};
template <typename T>
struct Wrapping<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  using type = std::make_unsigned_t<decltype(+T{})>;
};

}  // namespace internal

// SumOp adds; on bool it is logical or (as PyTorch). Integers wrap around on overflow.
struct SumOp {
  template <typename T>
  TENSOROPS_HOST_DEVICE void operator()(T& dest, T value) const {
    if constexpr (std::is_same_v<T, bool>) {
      dest = dest || value;
    } else {
      using Wide = typename internal::Wrapping<T>::type;
      dest = static_cast<T>(static_cast<Wide>(dest) + static_cast<Wide>(value));
    }
  }
};

// ProdOp multiplies; on bool it is logical and. Integers wrap around on overflow.
struct ProdOp {
  template <typename T>
  TENSOROPS_HOST_DEVICE void operator()(T& dest, T value) const {
    if constexpr (std::is_same_v<T, bool>) {
      dest = dest && value;
    } else {
      using Wide = typename internal::Wrapping<T>::type;
      dest = static_cast<T>(static_cast<Wide>(dest) * static_cast<Wide>(value));
    }
  }
};

// MaxOp keeps the larger value; a NaN on either side wins (propagates), the NaN with the greatest
// bit pattern among several, and max(-0.0, +0.0) = +0.0 (internal::Replaces). It keeps the bits of
// the operand it selects. Bool: logical or.
struct MaxOp {
  template <typename T>
  TENSOROPS_HOST_DEVICE void operator()(T& dest, T value) const {
    if constexpr (std::is_same_v<T, bool>) {
      dest = dest || value;
    } else {
      // An unconditional store of a select: the compiler emits a branchless blend, where a
      // conditional store would mispredict on random data.
      dest = internal::Pick(internal::Replaces</*kMax=*/true>(dest, value), value, dest);
    }
  }
};

// MinOp keeps the smaller value; a NaN on either side wins (propagates), the NaN with the greatest
// bit pattern among several, and min(-0.0, +0.0) = -0.0 (internal::Replaces). It keeps the bits of
// the operand it selects. Bool: logical and.
struct MinOp {
  template <typename T>
  TENSOROPS_HOST_DEVICE void operator()(T& dest, T value) const {
    if constexpr (std::is_same_v<T, bool>) {
      dest = dest && value;
    } else {
      dest = internal::Pick(internal::Replaces</*kMax=*/false>(dest, value), value, dest);
    }
  }
};

// Identity returns the neutral element of `Op` for T: 0 for sums, 1 for products, the lowest value
// (-inf for floats) for maxima and the highest (+inf) for minima.
template <typename Op, typename T>
TENSOROPS_HOST_DEVICE inline T Identity() {
  if constexpr (std::is_same_v<Op, ProdOp>) {
    if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) return T(1.0f);
    return T(1);
  } else if constexpr (std::is_same_v<Op, MaxOp> || std::is_same_v<Op, MinOp>) {
    constexpr bool kMax = std::is_same_v<Op, MaxOp>;
    if constexpr (std::is_same_v<T, bool>) {
      return !kMax;
    } else if constexpr (std::is_same_v<T, Float16>) {
      return Float16::FromBits(kMax ? 0xfc00 : 0x7c00);
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      return BFloat16::FromBits(kMax ? 0xff80 : 0x7f80);
    } else if constexpr (std::is_floating_point_v<T>) {
      return kMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
    } else {
      return kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
    }
  } else {
    if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) return T(0.0f);
    return T(0);
  }
}

// DispatchReduction calls `fn(op)` with the functor of `reduction`; MEAN reduces with SumOp (the
// division by the count happens afterwards).
template <typename Fn>
decltype(auto) DispatchReduction(Reduction reduction, Fn&& fn) {
  switch (reduction) {
    case Reduction::kAssign:
      return fn(AssignOp{});
    case Reduction::kSum:
    case Reduction::kMean:
      return fn(SumOp{});
    case Reduction::kProd:
      return fn(ProdOp{});
    case Reduction::kAmax:
      return fn(MaxOp{});
    case Reduction::kAmin:
      return fn(MinOp{});
  }
  return fn(AssignOp{});
}

// FloorDivide divides with the quotient rounded toward negative infinity (PyTorch's integer mean:
// the mean of -3 and -4 is -4). `divisor` > 0.
template <typename T>
TENSOROPS_HOST_DEVICE inline T FloorDivide(T dividend, int64_t divisor) {
#if !defined(__CUDA_ARCH__)
  // On the host, a double division where it is exact: 4x faster than the 64-bit integer division
  // (which made the division pass 70% of an int64 Scatter MEAN). Both operands convert exactly
  // below 2^53, and the correctly rounded quotient q of a / n then lies within |a| * 2^-53 < 1/n
  // of the exact one, while a quotient that is not an integer lies at least 1/n from the integers
  // around it: q never reaches another integer, and flooring q floors a / n.
  constexpr int64_t kExact = int64_t{1} << 53;
  const int64_t wide = static_cast<int64_t>(dividend);
  if (wide > -kExact && wide < kExact && divisor <= kExact) {
    const double q = static_cast<double>(wide) / static_cast<double>(divisor);
    // Truncation rounds toward zero: one above the floor where q is negative and not whole.
    const int64_t truncated = static_cast<int64_t>(q);
    return static_cast<T>(truncated - (static_cast<double>(truncated) > q));
  }
#endif
  const int64_t quotient = static_cast<int64_t>(dividend) / divisor;
  if constexpr (std::is_signed_v<T>) {
    const bool inexact = quotient * divisor != static_cast<int64_t>(dividend);
    if (inexact && dividend < 0) return static_cast<T>(quotient - 1);
  }
  return static_cast<T>(quotient);
}

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_REDUCTION_H_
