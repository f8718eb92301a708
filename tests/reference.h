// An independent reference for Gather and Scatter (docs/semantics.md, Gather and Scatter), plus the
// random inputs, the dtype-aware comparison and the small helpers (seeded generators, strided
// copies, error checks, parameter names) the kernel tests share.
//
//   absl::StatusOr<Tensor> expected =
//       testing::ReferenceScatter(x.view(), 1, idx.view(), src.view(), Reduction::kSum,
//                                 /*include_self=*/true, /*broadcast=*/false);
//   ExpectTensorsNear(*actual, *expected, ToleranceFor(DataType::kFloat32, Reduction::kSum, 4));
//
// The reference is written from docs/semantics.md alone and shares no code with kernels/ beyond the
// container types (Tensor, TensorView, DataType, Shape, the Reduction enum): its own dtype table,
// its own float16/bfloat16 conversion (frexp/ldexp rounding, not bit twiddling), its own
// broadcasting. It walks every position with plain loops (unravel the row-major position into
// coordinates, compute the other tensor's coordinates, then its offset through the view's strides),
// accumulates in float64 / complex<double> / wrapping 64-bit integers, and rounds once to the dtype
// at the end. It is slow on purpose; callers keep inputs to a few hundred thousand elements.
#ifndef TENSOROPS_TESTS_REFERENCE_H_
#define TENSOROPS_TESTS_REFERENCE_H_

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/random/bit_gen_ref.h"
#include "absl/random/distributions.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/dtype.h"
#include "kernels/reduction.h"
#include "kernels/tensor.h"

namespace tensorops::testing {

namespace reference_internal {

// What the reference needs to know about a dtype, kept apart from kernels/dtype.cc on purpose.
enum class Kind {
  kBool,
  kSigned,
  kUnsigned,
  kHalf,
  kBFloat,
  kSingle,
  kDouble,
  kComplex64,
  kComplex128
};

inline Kind KindOf(DataType dtype) {
  switch (dtype) {
    case DataType::kBool:
      return Kind::kBool;
    case DataType::kUInt8:
      return Kind::kUnsigned;
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kInt32:
    case DataType::kInt64:
      return Kind::kSigned;
    case DataType::kFloat16:
      return Kind::kHalf;
    case DataType::kBFloat16:
      return Kind::kBFloat;
    case DataType::kFloat32:
      return Kind::kSingle;
    case DataType::kFloat64:
      return Kind::kDouble;
    case DataType::kComplex64:
      return Kind::kComplex64;
    case DataType::kComplex128:
      return Kind::kComplex128;
  }
  return Kind::kDouble;
}

inline int64_t ByteWidth(DataType dtype) {
  switch (dtype) {
    case DataType::kBool:
    case DataType::kUInt8:
    case DataType::kInt8:
      return 1;
    case DataType::kInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
    case DataType::kComplex64:
      return 8;
    case DataType::kComplex128:
      return 16;
  }
  return 1;
}

inline bool IsIntegerKind(Kind kind) {
  return kind == Kind::kBool || kind == Kind::kSigned || kind == Kind::kUnsigned;
}
inline bool IsComplexKind(Kind kind) {
  return kind == Kind::kComplex64 || kind == Kind::kComplex128;
}

// A 16-bit binary floating format: float16 has 10 fraction and 5 exponent bits, bfloat16 7 and 8.
struct MiniFloatFormat {
  int fraction_bits;
  int exponent_bits;
};
inline constexpr MiniFloatFormat kHalfFormat{10, 5};
inline constexpr MiniFloatFormat kBFloatFormat{7, 8};

// MiniFloatToDouble decodes the bits arithmetically: (1 + f / 2^m) * 2^(e - bias).
inline double MiniFloatToDouble(uint16_t bits, MiniFloatFormat format) {
  const int bias = (1 << (format.exponent_bits - 1)) - 1;
  const int max_field = (1 << format.exponent_bits) - 1;
  const int field = (bits >> format.fraction_bits) & max_field;
  const int fraction = bits & ((1 << format.fraction_bits) - 1);
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (field == max_field) {
    return fraction != 0 ? std::numeric_limits<double>::quiet_NaN()
                         : sign * std::numeric_limits<double>::infinity();
  }
  if (field == 0) return sign * std::ldexp(fraction, 1 - bias - format.fraction_bits);
  return sign *
         std::ldexp(fraction + (1 << format.fraction_bits), field - bias - format.fraction_bits);
}

// DoubleToMiniFloat rounds to nearest, ties to even, by scaling the magnitude so that one unit in
// the last place of the target is 1, rounding that to an integer with nearbyint, and re-encoding
// the (now exactly representable) result with frexp. Overflow gives infinity.
inline uint16_t DoubleToMiniFloat(double value, MiniFloatFormat format) {
  const int bias = (1 << (format.exponent_bits - 1)) - 1;
  const int max_field = (1 << format.exponent_bits) - 1;
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const uint16_t infinity = static_cast<uint16_t>(max_field << format.fraction_bits);
  if (std::isnan(value)) {
    return static_cast<uint16_t>(sign | infinity | (1 << (format.fraction_bits - 1)));
  }
  if (std::isinf(value)) return sign | infinity;
  const double magnitude = std::fabs(value);
  if (magnitude == 0.0) return sign;
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude in [2^(exponent-1), 2^exponent)
  const int min_normal_exponent = 1 - bias;
  const int quantum_exponent = std::max(exponent - 1, min_normal_exponent) - format.fraction_bits;
  const int saved_mode = std::fegetround();
  std::fesetround(FE_TONEAREST);
  const double units = std::nearbyint(std::ldexp(magnitude, -quantum_exponent));
  std::fesetround(saved_mode);
  const double rounded = std::ldexp(units, quantum_exponent);
  if (rounded == 0.0) return sign;
  int rounded_exponent = 0;
  const double mantissa = std::frexp(rounded, &rounded_exponent);  // [0.5, 1)
  const int field = rounded_exponent - 1 + bias;
  if (field >= max_field) return sign | infinity;
  if (field <= 0) {  // Subnormal: a multiple of the smallest subnormal.
    return static_cast<uint16_t>(
        sign | static_cast<uint16_t>(std::ldexp(rounded, format.fraction_bits + bias - 1)));
  }
  const auto fraction =
      static_cast<uint16_t>(std::ldexp(mantissa * 2.0 - 1.0, format.fraction_bits));
  return static_cast<uint16_t>(sign | (field << format.fraction_bits) | fraction);
}

// One element, widened: `number` for floating and complex dtypes, `integer` for bool and integers.
struct Element {
  std::complex<double> number;
  int64_t integer = 0;
};

inline Element LoadElement(DataType dtype, const void* base, int64_t offset) {
  const char* address = static_cast<const char*>(base) + offset * ByteWidth(dtype);
  Element element;
  switch (dtype) {
    case DataType::kBool: {
      uint8_t raw;
      std::memcpy(&raw, address, 1);
      element.integer = raw != 0;
      break;
    }
    case DataType::kUInt8: {
      uint8_t raw;
      std::memcpy(&raw, address, 1);
      element.integer = raw;
      break;
    }
    case DataType::kInt8: {
      int8_t raw;
      std::memcpy(&raw, address, 1);
      element.integer = raw;
      break;
    }
    case DataType::kInt16: {
      int16_t raw;
      std::memcpy(&raw, address, 2);
      element.integer = raw;
      break;
    }
    case DataType::kInt32: {
      int32_t raw;
      std::memcpy(&raw, address, 4);
      element.integer = raw;
      break;
    }
    case DataType::kInt64: {
      int64_t raw;
      std::memcpy(&raw, address, 8);
      element.integer = raw;
      break;
    }
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      uint16_t raw;
      std::memcpy(&raw, address, 2);
      element.number =
          MiniFloatToDouble(raw, dtype == DataType::kFloat16 ? kHalfFormat : kBFloatFormat);
      break;
    }
    case DataType::kFloat32: {
      float raw;
      std::memcpy(&raw, address, 4);
      element.number = raw;
      break;
    }
    case DataType::kFloat64: {
      double raw;
      std::memcpy(&raw, address, 8);
      element.number = raw;
      break;
    }
    case DataType::kComplex64: {
      float raw[2];
      std::memcpy(raw, address, 8);
      element.number = {raw[0], raw[1]};
      break;
    }
    case DataType::kComplex128: {
      double raw[2];
      std::memcpy(raw, address, 16);
      element.number = {raw[0], raw[1]};
      break;
    }
  }
  return element;
}

// StoreElement rounds once to the dtype; integers wrap modulo 2^bits as PyTorch's casts do.
inline void StoreElement(DataType dtype, void* base, int64_t offset, const Element& element) {
  char* address = static_cast<char*>(base) + offset * ByteWidth(dtype);
  const auto wrapped = static_cast<uint64_t>(element.integer);
  switch (dtype) {
    case DataType::kBool: {
      const uint8_t raw = element.integer != 0;
      std::memcpy(address, &raw, 1);
      break;
    }
    case DataType::kUInt8:
    case DataType::kInt8: {
      const auto raw = static_cast<uint8_t>(wrapped);
      std::memcpy(address, &raw, 1);
      break;
    }
    case DataType::kInt16: {
      const auto raw = static_cast<uint16_t>(wrapped);
      std::memcpy(address, &raw, 2);
      break;
    }
    case DataType::kInt32: {
      const auto raw = static_cast<uint32_t>(wrapped);
      std::memcpy(address, &raw, 4);
      break;
    }
    case DataType::kInt64:
      std::memcpy(address, &wrapped, 8);
      break;
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      const uint16_t raw = DoubleToMiniFloat(
          element.number.real(), dtype == DataType::kFloat16 ? kHalfFormat : kBFloatFormat);
      std::memcpy(address, &raw, 2);
      break;
    }
    case DataType::kFloat32: {
      const auto raw = static_cast<float>(element.number.real());
      std::memcpy(address, &raw, 4);
      break;
    }
    case DataType::kFloat64: {
      const double raw = element.number.real();
      std::memcpy(address, &raw, 8);
      break;
    }
    case DataType::kComplex64: {
      const float raw[2] = {static_cast<float>(element.number.real()),
                            static_cast<float>(element.number.imag())};
      std::memcpy(address, raw, 8);
      break;
    }
    case DataType::kComplex128: {
      const double raw[2] = {element.number.real(), element.number.imag()};
      std::memcpy(address, raw, 16);
      break;
    }
  }
}

// WrapToDtype narrows an int64 the way a cast to `dtype` does, then widens it back.
inline int64_t WrapToDtype(DataType dtype, int64_t value) {
  switch (dtype) {
    case DataType::kBool:
      return value != 0;
    case DataType::kUInt8:
      return static_cast<uint8_t>(value);
    case DataType::kInt8:
      return static_cast<int8_t>(value);
    case DataType::kInt16:
      return static_cast<int16_t>(value);
    case DataType::kInt32:
      return static_cast<int32_t>(value);
    default:
      return value;
  }
}

inline int64_t Count(const Shape& shape) {
  int64_t count = 1;
  for (int64_t size : shape) count *= size;
  return count;
}

inline std::string ShapeString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Coordinates of row-major position `position` in `shape`, last dimension fastest.
inline Shape Unravel(int64_t position, const Shape& shape) {
  Shape coordinates(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    coordinates[d] = position % shape[d];
    position /= shape[d];
  }
  return coordinates;
}

// Offset, in elements, of `coordinates` in `view` (through the view's own strides).
inline int64_t OffsetOf(const TensorView& view, const Shape& coordinates) {
  int64_t offset = 0;
  for (size_t d = 0; d < coordinates.size(); ++d) offset += coordinates[d] * view.strides()[d];
  return offset;
}

// NumPy broadcasting of `from` to `to` (right-aligned, sizes equal or 1).
inline bool Broadcastable(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d) {
    if (from[d] != 1 && from[d] != to[lead + d]) return false;
  }
  return true;
}

// The coordinates in a tensor of shape `from` that broadcasting maps `coordinates` of `to` onto.
inline Shape BroadcastCoordinates(const Shape& coordinates, const Shape& from) {
  Shape result(from.size(), 0);
  const size_t lead = coordinates.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d) result[d] = from[d] == 1 ? 0 : coordinates[lead + d];
  return result;
}

inline int64_t LoadIndex(const TensorView& index, const Shape& coordinates) {
  const char* address = static_cast<const char*>(index.data());
  const int64_t offset = OffsetOf(index, coordinates);
  if (index.dtype() == DataType::kInt32) {
    int32_t value;
    std::memcpy(&value, address + offset * 4, 4);
    return value;
  }
  int64_t value;
  std::memcpy(&value, address + offset * 8, 8);
  return value;
}

inline absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

inline absl::StatusOr<int64_t> NormalizedAxis(const char* op, int64_t axis, int64_t rank) {
  const int64_t bound = rank == 0 ? 1 : rank;
  if (axis < -bound || axis >= bound) {
    return Invalid(absl::StrCat(op, ": axis = ", axis, " is out of range for rank ", rank));
  }
  return axis < 0 ? axis + bound : axis;
}

// Combine folds one more source value into an accumulator that already holds at least one value.
inline void Combine(Kind kind, Reduction reduce, Element& accumulator, const Element& value) {
  const bool integer = IsIntegerKind(kind);
  switch (reduce) {
    case Reduction::kAssign:
      accumulator = value;
      return;
    case Reduction::kSum:
    case Reduction::kMean:
      if (kind == Kind::kBool) {
        accumulator.integer = accumulator.integer || value.integer;
      } else if (integer) {
        accumulator.integer = static_cast<int64_t>(static_cast<uint64_t>(accumulator.integer) +
                                                   static_cast<uint64_t>(value.integer));
      } else {
        accumulator.number += value.number;
      }
      return;
    case Reduction::kProd:
      if (kind == Kind::kBool) {
        accumulator.integer = accumulator.integer && value.integer;
      } else if (integer) {
        accumulator.integer = static_cast<int64_t>(static_cast<uint64_t>(accumulator.integer) *
                                                   static_cast<uint64_t>(value.integer));
      } else {
        accumulator.number *= value.number;
      }
      return;
    case Reduction::kAmax:
    case Reduction::kAmin: {
      const bool max = reduce == Reduction::kAmax;
      if (integer) {
        accumulator.integer = max ? std::max(accumulator.integer, value.integer)
                                  : std::min(accumulator.integer, value.integer);
      } else if (std::isnan(accumulator.number.real()) || std::isnan(value.number.real())) {
        accumulator.number = std::numeric_limits<double>::quiet_NaN();
      } else {
        const double a = accumulator.number.real();
        const double b = value.number.real();
        accumulator.number = max ? (b > a ? b : a) : (b < a ? b : a);
      }
      return;
    }
  }
}

// FloorQuotient divides rounding toward negative infinity.
inline int64_t FloorQuotient(int64_t dividend, int64_t divisor) {
  int64_t quotient = dividend / divisor;
  if (quotient * divisor != dividend && ((dividend < 0) != (divisor < 0))) --quotient;
  return quotient;
}

// FinishReduction rounds every accumulator to `dtype` once, into a new tensor of `shape`, after
// dividing MEAN sums by their counts (floor division for integer dtypes, as PyTorch).
inline Tensor FinishReduction(DataType dtype, const Shape& shape, Reduction reduce,
                              const std::vector<Element>& accumulators,
                              const std::vector<int64_t>& counts) {
  const Kind kind = KindOf(dtype);
  Tensor result(dtype, shape);
  for (size_t position = 0; position < accumulators.size(); ++position) {
    Element element = accumulators[position];
    if (reduce == Reduction::kMean && counts[position] > 1) {
      if (IsIntegerKind(kind)) {
        element.integer = FloorQuotient(WrapToDtype(dtype, element.integer), counts[position]);
      } else {
        element.number /= static_cast<double>(counts[position]);
      }
    }
    StoreElement(dtype, result.data(), static_cast<int64_t>(position), element);
  }
  return result;
}

}  // namespace reference_internal

// ReferenceGather computes Gather (docs/semantics.md): out[i] = x[i with i_ax := idx[i]], out.shape
// = idx.shape (with broadcast, x and idx are first broadcast NumPy-style on every dimension but
// `axis`). Returns INVALID_ARGUMENT for any input docs/semantics.md rejects (message wording is its
// own).
inline absl::StatusOr<Tensor> ReferenceGather(const TensorView& input, int64_t axis,
                                              const TensorView& index, bool broadcast) {
  using namespace reference_internal;  // NOLINT
  if (index.dtype() != DataType::kInt32 && index.dtype() != DataType::kInt64) {
    return Invalid("gather: index must be int32 or int64");
  }
  if (input.rank() != index.rank()) return Invalid("gather: index rank differs from input rank");
  absl::StatusOr<int64_t> ax = NormalizedAxis("gather", axis, input.rank());
  if (!ax.ok()) return ax.status();
  const int64_t rank = input.rank();
  const Shape& x_shape = input.shape();
  const Shape& idx_shape = index.shape();
  Shape out_shape = idx_shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (d == *ax) continue;
    if (broadcast) {
      if (x_shape[d] != idx_shape[d] && x_shape[d] != 1 && idx_shape[d] != 1) {
        return Invalid(absl::StrCat("gather: cannot broadcast input ", ShapeString(x_shape),
                                    " with index ", ShapeString(idx_shape)));
      }
      out_shape[d] = idx_shape[d] == 1 ? x_shape[d] : idx_shape[d];
    } else if (idx_shape[d] > x_shape[d]) {
      return Invalid(absl::StrCat("gather: index.size(", d, ") > input.size(", d, ")"));
    }
  }
  const int64_t axis_size = rank == 0 ? 1 : x_shape[*ax];
  const int64_t count = Count(out_shape);
  const int64_t width = ByteWidth(input.dtype());
  Tensor result(input.dtype(), out_shape);
  for (int64_t position = 0; position < count; ++position) {
    const Shape coordinates = Unravel(position, out_shape);
    Shape idx_coordinates = coordinates;
    Shape x_coordinates = coordinates;
    for (int64_t d = 0; d < rank; ++d) {
      if (d == *ax) continue;
      if (idx_shape[d] == 1) idx_coordinates[d] = 0;
      if (x_shape[d] == 1) x_coordinates[d] = 0;
    }
    const int64_t value = LoadIndex(index, idx_coordinates);
    if (value < -axis_size || value >= axis_size) {
      return Invalid(absl::StrCat("gather: index", ShapeString(idx_coordinates), " = ", value,
                                  " is out of range for size ", axis_size));
    }
    if (rank > 0) x_coordinates[*ax] = value < 0 ? value + axis_size : value;
    std::memcpy(static_cast<char*>(result.data()) + position * width,
                static_cast<const char*>(input.data()) + OffsetOf(input, x_coordinates) * width,
                static_cast<size_t>(width));
  }
  return result;
}

namespace reference_internal {
// ReferenceScatterCopy returns a contiguous copy of `input`, element by element.
inline Tensor ReferenceScatterCopy(const TensorView& input) {
  Tensor result(input.dtype(), input.shape());
  const int64_t width = ByteWidth(input.dtype());
  for (int64_t position = 0; position < Count(input.shape()); ++position) {
    const Shape coordinates = Unravel(position, input.shape());
    std::memcpy(static_cast<char*>(result.data()) + position * width,
                static_cast<const char*>(input.data()) + OffsetOf(input, coordinates) * width,
                static_cast<size_t>(width));
  }
  return result;
}
}  // namespace reference_internal

// ReferenceScatter computes Scatter (docs/semantics.md): out = x, then for every position i of the
// (possibly broadcast) index, out[i with i_ax := idx[i]] (+)= src[i]; `include_self` and
// MEAN/integer/bool rules as in "Reductions" of docs/semantics.md. A scalar `value` is passed as
// `src`: a rank-0 view with broadcast, or a view of idx's shape with zero strides without. Returns
// INVALID_ARGUMENT for any input docs/semantics.md rejects (message wording is its own).
inline absl::StatusOr<Tensor> ReferenceScatter(const TensorView& input, int64_t axis,
                                               const TensorView& index, const TensorView& src,
                                               Reduction reduce, bool include_self,
                                               bool broadcast) {
  using namespace reference_internal;  // NOLINT
  const DataType dtype = input.dtype();
  const Kind kind = KindOf(dtype);
  // Like PyTorch, an empty index skips the index checks (dtype, ranks, sizes); broadcasting still
  // has to be possible.
  const bool empty_index = Count(index.shape()) == 0;
  if (!empty_index && index.dtype() != DataType::kInt32 && index.dtype() != DataType::kInt64) {
    return Invalid("scatter: index must be int32 or int64");
  }
  if (src.dtype() != dtype) return Invalid("scatter: src dtype differs from input dtype");
  if (IsComplexKind(kind) && (reduce == Reduction::kAmax || reduce == Reduction::kAmin)) {
    return Invalid("scatter: AMAX/AMIN are not defined for complex");
  }
  if (kind == Kind::kBool && reduce == Reduction::kMean) {
    return Invalid("scatter: MEAN is not defined for bool");
  }
  absl::StatusOr<int64_t> ax = NormalizedAxis("scatter", axis, input.rank());
  if (!ax.ok()) return ax.status();
  if (empty_index && !broadcast) return ReferenceScatterCopy(input);
  if (input.rank() != index.rank()) return Invalid("scatter: index rank differs from input rank");
  const int64_t rank = input.rank();
  const Shape& x_shape = input.shape();
  const Shape& idx_shape = index.shape();
  // The iteration shape: the index's shape after broadcasting.
  Shape iteration_shape = idx_shape;
  if (broadcast) {
    bool index_fits = true;
    for (int64_t d = 0; d < rank; ++d) index_fits = index_fits && idx_shape[d] <= x_shape[d];
    if (index_fits) {
      Shape target = x_shape;
      if (rank > 0) target[*ax] = idx_shape[*ax];
      if (!Broadcastable(idx_shape, target)) {
        return Invalid(absl::StrCat("scatter: cannot broadcast index ", ShapeString(idx_shape),
                                    " to ", ShapeString(target)));
      }
      iteration_shape = target;
    }
    if (!Broadcastable(src.shape(), iteration_shape)) {
      return Invalid(absl::StrCat("scatter: cannot broadcast src ", ShapeString(src.shape()),
                                  " to ", ShapeString(iteration_shape)));
    }
  } else {
    if (src.rank() != rank) return Invalid("scatter: src rank differs from index rank");
    for (int64_t d = 0; d < rank; ++d) {
      if (idx_shape[d] > src.shape()[d]) {
        return Invalid(absl::StrCat("scatter: index.size(", d, ") > src.size(", d, ")"));
      }
    }
  }
  for (int64_t d = 0; d < rank && !empty_index; ++d) {
    if (d != *ax && iteration_shape[d] > x_shape[d]) {
      return Invalid(absl::StrCat("scatter: index.size(", d, ") > input.size(", d, ")"));
    }
  }
  const int64_t axis_size = rank == 0 ? 1 : x_shape[*ax];
  const int64_t out_count = Count(x_shape);
  std::vector<Element> accumulators(static_cast<size_t>(out_count));
  std::vector<int64_t> counts(static_cast<size_t>(out_count), 0);
  for (int64_t position = 0; position < out_count; ++position) {
    const Shape coordinates = Unravel(position, x_shape);
    accumulators[position] = LoadElement(dtype, input.data(), OffsetOf(input, coordinates));
    if (include_self) counts[position] = 1;
  }
  const int64_t iteration_count = Count(iteration_shape);
  for (int64_t position = 0; position < iteration_count; ++position) {
    const Shape coordinates = Unravel(position, iteration_shape);
    const Shape idx_coordinates =
        broadcast ? BroadcastCoordinates(coordinates, idx_shape) : coordinates;
    const int64_t value = LoadIndex(index, idx_coordinates);
    if (value < -axis_size || value >= axis_size) {
      return Invalid(absl::StrCat("scatter: index", ShapeString(idx_coordinates), " = ", value,
                                  " is out of range for size ", axis_size));
    }
    Shape dest_coordinates = coordinates;
    if (rank > 0) dest_coordinates[*ax] = value < 0 ? value + axis_size : value;
    int64_t dest = 0;
    for (int64_t d = 0; d < rank; ++d) dest = dest * x_shape[d] + dest_coordinates[d];
    const Shape src_coordinates =
        broadcast ? BroadcastCoordinates(coordinates, src.shape()) : coordinates;
    const Element source = LoadElement(dtype, src.data(), OffsetOf(src, src_coordinates));
    if (counts[dest] == 0) {
      accumulators[dest] = source;  // The first value of a reduction over the sources alone.
    } else {
      Combine(kind, reduce, accumulators[dest], source);
    }
    ++counts[dest];
  }
  return FinishReduction(dtype, x_shape, reduce, accumulators, counts);
}

// ---------------------------------------------------------------------------------------------
// Building tensors.

// RowMajorStrides returns contiguous strides for `shape`, in elements.
inline Shape RowMajorStrides(const Shape& shape) {
  Shape strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return strides;
}

// TensorFromValues builds a tensor of `dtype` from real values (rounded once, integers truncated
// toward zero, bool = value != 0).
inline Tensor TensorFromValues(DataType dtype, const Shape& shape,
                               const std::vector<double>& values) {
  Tensor tensor(dtype, shape);
  for (size_t i = 0; i < values.size(); ++i) {
    reference_internal::Element element;
    element.number = values[i];
    element.integer = std::isfinite(values[i]) ? static_cast<int64_t>(values[i]) : 0;
    if (dtype == DataType::kBool) element.integer = values[i] != 0.0;
    reference_internal::StoreElement(dtype, tensor.data(), static_cast<int64_t>(i), element);
  }
  return tensor;
}

// TensorFromComplex builds a complex tensor.
inline Tensor TensorFromComplex(DataType dtype, const Shape& shape,
                                const std::vector<std::complex<double>>& values) {
  Tensor tensor(dtype, shape);
  for (size_t i = 0; i < values.size(); ++i) {
    reference_internal::Element element;
    element.number = values[i];
    reference_internal::StoreElement(dtype, tensor.data(), static_cast<int64_t>(i), element);
  }
  return tensor;
}

// IndexTensor builds an int32 or int64 tensor.
inline Tensor IndexTensor(const Shape& shape, const std::vector<int64_t>& values,
                          DataType dtype = DataType::kInt64) {
  Tensor tensor(dtype, shape);
  for (size_t i = 0; i < values.size(); ++i) {
    reference_internal::Element element;
    element.integer = values[i];
    reference_internal::StoreElement(dtype, tensor.data(), static_cast<int64_t>(i), element);
  }
  return tensor;
}

// ElementAsDouble reads element `position` (row-major) of a contiguous tensor as a real number.
inline double ElementAsDouble(const Tensor& tensor, int64_t position) {
  const reference_internal::Element element =
      reference_internal::LoadElement(tensor.dtype(), tensor.data(), position);
  return reference_internal::IsIntegerKind(reference_internal::KindOf(tensor.dtype()))
             ? static_cast<double>(element.integer)
             : element.number.real();
}

// ElementAsComplex reads element `position` of a contiguous tensor as a complex number.
inline std::complex<double> ElementAsComplex(const Tensor& tensor, int64_t position) {
  const reference_internal::Element element =
      reference_internal::LoadElement(tensor.dtype(), tensor.data(), position);
  return reference_internal::IsIntegerKind(reference_internal::KindOf(tensor.dtype()))
             ? std::complex<double>(static_cast<double>(element.integer))
             : element.number;
}

// ToDoubles returns every element of a contiguous tensor as a real number.
inline std::vector<double> ToDoubles(const Tensor& tensor) {
  std::vector<double> values(static_cast<size_t>(tensor.numel()));
  for (int64_t i = 0; i < tensor.numel(); ++i) values[i] = ElementAsDouble(tensor, i);
  return values;
}

// BroadcastScalarView views the single element of `scalar` at `shape` with zero strides (how the
// reference receives Scatter's scalar `value` without broadcast).
inline TensorView BroadcastScalarView(const Tensor& scalar, const Shape& shape) {
  return TensorView(scalar.dtype(), shape, Shape(shape.size(), 0), scalar.data());
}

// LaidOutTensor holds a buffer and a view into it that need not be contiguous (gaps, swapped or
// stride-0 dimensions): how the tests hand the kernels strided inputs. Moving it keeps the view
// valid, since the buffer's storage stays where it is.
struct LaidOutTensor {
  Tensor buffer;
  TensorView view;
};

// SteppedCopy copies the contiguous `values` into a zeroed buffer twice as long in the last
// dimension and views it with stride 2 there: a non-contiguous view of the same values. A rank-0
// tensor has no dimension to step along; it is copied and viewed contiguously.
inline LaidOutTensor SteppedCopy(const Tensor& values) {
  LaidOutTensor copy;
  if (values.rank() == 0) {
    copy.buffer = values.Clone();
    copy.view = copy.buffer.view();
    return copy;
  }
  Shape buffer_shape = values.shape();
  buffer_shape.back() *= 2;
  copy.buffer = Tensor::Zeros(values.dtype(), buffer_shape);
  const int64_t width = reference_internal::ByteWidth(values.dtype());
  for (int64_t i = 0; i < values.numel(); ++i) {
    std::memcpy(static_cast<char*>(copy.buffer.data()) + 2 * i * width,
                static_cast<const char*>(values.data()) + i * width, static_cast<size_t>(width));
  }
  Shape strides = RowMajorStrides(buffer_shape);
  strides.back() = 2;
  copy.view = TensorView(values.dtype(), values.shape(), strides, copy.buffer.data());
  return copy;
}

// ---------------------------------------------------------------------------------------------
// Random inputs.

// SeededGen returns a generator seeded with {seed, salt}. Each test file passes its own salt, so
// files that loop over the same seeds still draw different inputs, and every input is
// reproducible from its seed.
inline absl::BitGen SeededGen(uint64_t seed, uint64_t salt) {
  std::seed_seq sequence = {seed, salt};
  return absl::BitGen(sequence);
}

// RandomDimSize draws a dimension's size: 0 with probability 0.06, otherwise uniform in
// [1, max_size].
inline int64_t RandomDimSize(absl::BitGenRef gen, int64_t max_size) {
  if (absl::Bernoulli(gen, 0.06)) return 0;
  return absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, max_size);
}

// ValueOptions shape the values RandomTensor draws. Defaults: multiples of 1/4 in [-8, 8] for
// floating dtypes (exact in every dtype, so sums of up to ~500k of them are exact in float32),
// integers in [-8, 8] ([0, 16] for uint8), real and imaginary parts alike for complex.
struct ValueOptions {
  // Largest magnitude drawn.
  int magnitude = 8;
  // Fraction of floating elements that are NaN.
  double nan_fraction = 0.0;
  // Fraction of floating elements that are +0.0 or -0.0.
  double signed_zero_fraction = 0.0;
  // When > 0, values come from only this many distinct values (many duplicates).
  int distinct_values = 0;
  // Values from {±1, ±2, ±0.5, ±1.5} (mostly ±1; 0 once in a hundred; complex values purely real
  // or purely imaginary) so that long products stay in range.
  bool product_friendly = false;
};

// ValuesForReduction returns the ValueOptions the randomized reduction suites draw inputs with
// for `reduce`: 5% signed zeros; product-friendly values for PROD; 3% NaNs for ASSIGN, AMAX and
// AMIN.
inline ValueOptions ValuesForReduction(Reduction reduce) {
  ValueOptions values;
  values.signed_zero_fraction = 0.05;
  if (reduce == Reduction::kProd) values.product_friendly = true;
  if (reduce == Reduction::kAssign || reduce == Reduction::kAmax || reduce == Reduction::kAmin) {
    values.nan_fraction = 0.03;
  }
  return values;
}

// RandomTensor fills a contiguous tensor of `dtype` and `shape`.
inline Tensor RandomTensor(DataType dtype, const Shape& shape, absl::BitGenRef gen,
                           const ValueOptions& options = {}) {
  using reference_internal::Kind;
  const Kind kind = reference_internal::KindOf(dtype);
  Tensor tensor(dtype, shape);
  const int64_t count = tensor.numel();
  auto draw_real = [&]() -> double {
    if (options.product_friendly) {
      static constexpr double kFactors[] = {1,  -1, 1,  -1,  1,    -1,  1,
                                            -1, 2,  -2, 0.5, -0.5, 1.5, -1.5};
      if (absl::Bernoulli(gen, 0.01)) return 0.0;
      return kFactors[absl::Uniform<size_t>(gen, 0, std::size(kFactors))];
    }
    const int quarters = options.magnitude * 4;
    if (options.distinct_values > 0) {
      return absl::Uniform<int>(gen, 0, options.distinct_values) * 0.25 - 0.5;
    }
    return absl::Uniform<int>(absl::IntervalClosed, gen, -quarters, quarters) * 0.25;
  };
  for (int64_t i = 0; i < count; ++i) {
    reference_internal::Element element;
    if (kind == Kind::kBool) {
      element.integer = absl::Bernoulli(gen, 0.5);
    } else if (reference_internal::IsIntegerKind(kind)) {
      int64_t low = kind == Kind::kUnsigned ? 0 : -options.magnitude;
      int64_t high = kind == Kind::kUnsigned ? 2 * options.magnitude : options.magnitude;
      if (options.product_friendly) {
        low = kind == Kind::kUnsigned ? 0 : -2;
        high = 2;
      }
      if (options.distinct_values > 0) high = low + options.distinct_values - 1;
      element.integer = absl::Uniform<int64_t>(absl::IntervalClosed, gen, low, high);
    } else {
      double real = draw_real();
      double imag = reference_internal::IsComplexKind(kind) ? draw_real() : 0.0;
      if (options.product_friendly && imag != 0.0) {
        // Purely real or purely imaginary factors: long complex products stay exact and in range.
        if (absl::Bernoulli(gen, 0.5)) {
          real = 0.0;
        } else {
          imag = 0.0;
        }
      }
      if (options.nan_fraction > 0 && absl::Bernoulli(gen, options.nan_fraction)) {
        real = std::numeric_limits<double>::quiet_NaN();
      } else if (options.signed_zero_fraction > 0 &&
                 absl::Bernoulli(gen, options.signed_zero_fraction)) {
        real = absl::Bernoulli(gen, 0.5) ? 0.0 : -0.0;
      }
      element.number = {real, imag};
    }
    reference_internal::StoreElement(dtype, tensor.data(), i, element);
  }
  return tensor;
}

// IndexPattern says how RandomIndex picks values along the axis.
enum class IndexPattern {
  // Distinct destinations within every line along the axis (a random partial permutation),
  // some written as negative equivalents. Requires index.size(axis) <= axis_size.
  kUnique,
  // Uniform in [-axis_size, axis_size).
  kRandom,
  // Only 0 and 1 (and their negative forms): many duplicates.
  kDuplicateHeavy,
  // Uniform in [-axis_size, 0).
  kNegative,
};

// kAllIndexPatterns lists every IndexPattern, for tests that draw one at random.
inline constexpr IndexPattern kAllIndexPatterns[] = {IndexPattern::kUnique, IndexPattern::kRandom,
                                                     IndexPattern::kDuplicateHeavy,
                                                     IndexPattern::kNegative};

// kAllReductions lists every Reduction, in enum order.
inline constexpr Reduction kAllReductions[] = {Reduction::kAssign, Reduction::kSum,
                                               Reduction::kProd,   Reduction::kMean,
                                               Reduction::kAmax,   Reduction::kAmin};

// RandomIndexPattern draws one of kAllIndexPatterns, uniformly.
inline IndexPattern RandomIndexPattern(absl::BitGenRef gen) {
  return kAllIndexPatterns[absl::Uniform<size_t>(gen, 0, std::size(kAllIndexPatterns))];
}

inline const char* IndexPatternName(IndexPattern pattern) {
  switch (pattern) {
    case IndexPattern::kUnique:
      return "unique";
    case IndexPattern::kRandom:
      return "random";
    case IndexPattern::kDuplicateHeavy:
      return "duplicate-heavy";
    case IndexPattern::kNegative:
      return "negative";
  }
  return "?";
}

// TurningRunIndex returns the values of a [2, length] index whose rows are runs of indices into
// an axis of `size`: valid and non-negative before position `turn`, negative at `turn`, then mixed.
// With `bad` set, row 1 instead holds non-negative indices before `turn` and `*bad` at `turn`,
// the first out-of-range index in row-major order. The kernels visit valid non-negative indices
// on a fast path; these runs leave it at every position the tests ask for.
inline std::vector<int64_t> TurningRunIndex(int64_t size, int64_t length, int64_t turn,
                                            std::optional<int64_t> bad = std::nullopt) {
  std::vector<int64_t> values(static_cast<size_t>(2 * length));
  for (int64_t run = 0; run < 2; ++run) {
    for (int64_t k = 0; k < length; ++k) {
      values[run * length + k] =
          k < turn ? (k * 3 + run) % size : (k % 3 == 2 ? k % size : -1 - (k + run) % size);
    }
  }
  if (bad.has_value()) {
    for (int64_t k = 0; k < turn; ++k) values[length + k] = k % size;
    values[length + turn] = *bad;
  }
  return values;
}

// RandomIndex returns an index tensor of `shape` and `index_dtype` (int32 or int64) whose values
// are valid for an axis of `axis_size` (rank-0 shapes use axis 0 and size 1).
inline Tensor RandomIndex(DataType index_dtype, const Shape& shape, int64_t axis, int64_t axis_size,
                          IndexPattern pattern, absl::BitGenRef gen) {
  Tensor tensor(index_dtype, shape);
  const int64_t count = tensor.numel();
  std::vector<int64_t> values(static_cast<size_t>(count), 0);
  if (count > 0 && axis_size > 0) {
    if (pattern == IndexPattern::kUnique) {
      // Walk every line along `axis`: positions whose coordinate along it is 0 start a line.
      const int64_t rank = static_cast<int64_t>(shape.size());
      const int64_t line_length = rank == 0 ? 1 : shape[axis];
      const int64_t line_stride = rank == 0 ? 1 : RowMajorStrides(shape)[axis];
      std::vector<int64_t> permutation(static_cast<size_t>(axis_size));
      for (int64_t start = 0; start < count; ++start) {
        if (rank > 0 && (start / line_stride) % line_length != 0) continue;
        std::iota(permutation.begin(), permutation.end(), 0);
        for (int64_t k = 0; k < line_length; ++k) {  // Partial Fisher-Yates.
          const int64_t pick = absl::Uniform<int64_t>(gen, k, axis_size);
          std::swap(permutation[k], permutation[pick]);
          int64_t value = permutation[k];
          if (absl::Bernoulli(gen, 0.25)) value -= axis_size;
          values[start + k * line_stride] = value;
        }
      }
    } else {
      for (int64_t i = 0; i < count; ++i) {
        int64_t value = 0;
        switch (pattern) {
          case IndexPattern::kRandom:
            value = absl::Uniform<int64_t>(gen, -axis_size, axis_size);
            break;
          case IndexPattern::kDuplicateHeavy:
            value = absl::Uniform<int64_t>(gen, 0, std::min<int64_t>(axis_size, 2));
            if (absl::Bernoulli(gen, 0.2)) value -= axis_size;
            break;
          case IndexPattern::kNegative:
            value = absl::Uniform<int64_t>(gen, -axis_size, 0);
            break;
          case IndexPattern::kUnique:
            break;
        }
        values[i] = value;
      }
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    reference_internal::Element element;
    element.integer = values[i];
    reference_internal::StoreElement(index_dtype, tensor.data(), i, element);
  }
  return tensor;
}

// ---------------------------------------------------------------------------------------------
// Comparing.

// Tolerance for ExpectTensorsNear: exact (value equality, NaN == NaN, -0 == +0), or, per real
// component, |actual - expected| <= max(1, |expected|) * (relative + per_term * terms): one
// rounding to the output dtype plus an accumulation error that grows with the number of terms.
struct Tolerance {
  bool exact = true;
  // The output dtype's share: rounding the exact result once.
  double relative = 0.0;
  // The accumulator's share, per term reduced into one element.
  double per_term = 0.0;
  int64_t terms = 1;
};

// ToleranceFor returns the tolerance for a result of `dtype` reduced with `reduce` over at most
// `terms` values per element: exact for integers, bool, ASSIGN, AMAX and AMIN; otherwise relative
// 1e-5 (float32, complex64), 1e-12 (float64, complex128), 1e-2 (float16), 2e-2 (bfloat16), plus
// 1e-6 per term for the dtypes whose sums run in float32 (all but float64/complex128, which get
// 1e-14 per term). The per-term share is deliberately the
// accumulator's, not the output's: a float16 sum over 300 terms must still be right to float16
// precision, not to 300 x 1e-2.
inline Tolerance ToleranceFor(DataType dtype, Reduction reduce = Reduction::kAssign,
                              int64_t terms = 1) {
  using reference_internal::Kind;
  const Kind kind = reference_internal::KindOf(dtype);
  if (reference_internal::IsIntegerKind(kind) || reduce == Reduction::kAssign ||
      reduce == Reduction::kAmax || reduce == Reduction::kAmin) {
    return Tolerance{};
  }
  Tolerance tolerance;
  tolerance.exact = false;
  tolerance.terms = std::max<int64_t>(terms, 1);
  tolerance.per_term = 1e-6;
  switch (kind) {
    case Kind::kHalf:
      tolerance.relative = 1e-2;
      break;
    case Kind::kBFloat:
      tolerance.relative = 2e-2;
      break;
    case Kind::kSingle:
    case Kind::kComplex64:
      tolerance.relative = 1e-5;
      break;
    default:
      tolerance.relative = 1e-12;
      tolerance.per_term = 1e-14;
      break;
  }
  return tolerance;
}

// TensorsNear compares dtype, shape and every element; on failure it names the first mismatching
// coordinates (row-major), both values, and how many elements differ.
inline ::testing::AssertionResult TensorsNear(const TensorView& actual, const TensorView& expected,
                                              const Tolerance& tolerance = {}) {
  using namespace reference_internal;  // NOLINT
  if (actual.dtype() != expected.dtype()) {
    return ::testing::AssertionFailure() << "dtype " << static_cast<int>(actual.dtype())
                                         << " != expected " << static_cast<int>(expected.dtype());
  }
  if (actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure() << "shape " << ShapeString(actual.shape())
                                         << " != expected " << ShapeString(expected.shape());
  }
  const Kind kind = KindOf(actual.dtype());
  auto component_ok = [&](double a, double e) {
    if (std::isnan(e) || std::isnan(a)) return std::isnan(e) && std::isnan(a);
    if (tolerance.exact || std::isinf(e)) return a == e;
    return std::fabs(a - e) <=
           std::max(1.0, std::fabs(e)) *
               (tolerance.relative + tolerance.per_term * static_cast<double>(tolerance.terms));
  };
  const Shape& shape = actual.shape();
  const int64_t count = Count(shape);
  int64_t mismatches = 0;
  std::string first;
  for (int64_t position = 0; position < count; ++position) {
    const Shape coordinates = Unravel(position, shape);
    const Element a = LoadElement(actual.dtype(), actual.data(), OffsetOf(actual, coordinates));
    const Element e =
        LoadElement(expected.dtype(), expected.data(), OffsetOf(expected, coordinates));
    bool ok;
    std::string a_text;
    std::string e_text;
    if (IsIntegerKind(kind)) {
      ok = a.integer == e.integer;
      a_text = absl::StrCat(a.integer);
      e_text = absl::StrCat(e.integer);
    } else {
      ok = component_ok(a.number.real(), e.number.real()) &&
           component_ok(a.number.imag(), e.number.imag());
      a_text = IsComplexKind(kind) ? absl::StrCat("(", a.number.real(), ", ", a.number.imag(), ")")
                                   : absl::StrCat(a.number.real());
      e_text = IsComplexKind(kind) ? absl::StrCat("(", e.number.real(), ", ", e.number.imag(), ")")
                                   : absl::StrCat(e.number.real());
    }
    if (!ok) {
      if (mismatches == 0) {
        first = absl::StrCat("first mismatch at ", ShapeString(coordinates), ": actual ", a_text,
                             ", expected ", e_text);
      }
      ++mismatches;
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << first << " (" << mismatches << " of " << count << " elements differ; shape "
         << ShapeString(shape) << ", tolerance "
         << (tolerance.exact ? std::string("exact")
                             : absl::StrCat(tolerance.relative, " + ", tolerance.per_term, " x ",
                                            tolerance.terms, " terms"))
         << ")";
}

// ExpectTensorsNear is EXPECT_TRUE(TensorsNear(...)).
inline void ExpectTensorsNear(const Tensor& actual, const Tensor& expected,
                              const Tolerance& tolerance = {}) {
  EXPECT_TRUE(TensorsNear(actual.view(), expected.view(), tolerance));
}

// ExpectSameBytes requires equal dtype and shape and identical bytes (NaN payloads and signed
// zeros included), for the ops that only copy; on a mismatch it lets TensorsNear name the first
// differing element.
inline void ExpectSameBytes(const Tensor& actual, const Tensor& expected) {
  ASSERT_EQ(actual.dtype(), expected.dtype());
  ASSERT_EQ(actual.shape(), expected.shape());
  if (std::memcmp(actual.data(), expected.data(), static_cast<size_t>(actual.nbytes())) == 0) {
    return;
  }
  EXPECT_TRUE(TensorsNear(actual.view(), expected.view()));
  ADD_FAILURE() << "bytes differ";
}

// DoublesIfOk expects `result` to be OK and returns its elements as real numbers (ToDoubles), or
// nothing when it is an error.
inline std::vector<double> DoublesIfOk(const absl::StatusOr<Tensor>& result) {
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return {};
  return ToDoubles(*result);
}

// ExpectInvalidArgument expects `status` to be INVALID_ARGUMENT with every one of `parts` in its
// message.
inline void ExpectInvalidArgument(const absl::Status& status,
                                  const std::vector<std::string>& parts) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  for (const std::string& part : parts) EXPECT_THAT(status.message(), ::testing::HasSubstr(part));
}

// ExpectKernelRejects expects a kernel's `result` for an input the reference rejects to be an
// INVALID_ARGUMENT error, and returns its status (OK, after a failure, when the kernel accepted
// the input), for the caller to check the message.
inline absl::Status ExpectKernelRejects(const absl::StatusOr<Tensor>& result) {
  EXPECT_FALSE(result.ok()) << "the kernel accepts this input";
  if (result.ok()) return absl::OkStatus();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  return result.status();
}

// DataTypeParamName names a test parameterized over DataType by the dtype: "float32".
inline std::string DataTypeParamName(const ::testing::TestParamInfo<DataType>& info) {
  return std::string(DataTypeName(info.param));
}

// ReductionParamName names a test parameterized over Reduction by the reduction: "SUM".
inline std::string ReductionParamName(const ::testing::TestParamInfo<Reduction>& info) {
  return std::string(ReductionName(info.param));
}

// DtypeReductionTest is the fixture of the randomized suites parameterized over dtype x
// reduction x include_self, with a seed derived from the parameter so every case is reproducible.
using DtypeReductionParam = std::tuple<DataType, Reduction, bool>;

class DtypeReductionTest : public ::testing::TestWithParam<DtypeReductionParam> {
 protected:
  DataType dtype() const { return std::get<0>(GetParam()); }
  Reduction reduce() const { return std::get<1>(GetParam()); }
  bool include_self() const { return std::get<2>(GetParam()); }
  uint64_t ParamSeed() const {
    return static_cast<uint64_t>(dtype()) * 1000 + static_cast<uint64_t>(reduce()) * 10 +
           include_self();
  }
};

// AllDtypeReductionParams generates every DtypeReductionParam: each dtype x each reduction x
// include_self false and true, for INSTANTIATE_TEST_SUITE_P.
inline auto AllDtypeReductionParams() {
  return ::testing::Combine(::testing::ValuesIn(kAllDataTypes), ::testing::ValuesIn(kAllReductions),
                            ::testing::Bool());
}

// DtypeReductionParamName names a DtypeReductionTest case "float32_SUM_self".
inline std::string DtypeReductionParamName(
    const ::testing::TestParamInfo<DtypeReductionParam>& info) {
  return absl::StrCat(std::string(DataTypeName(std::get<0>(info.param))), "_",
                      std::string(ReductionName(std::get<1>(info.param))), "_",
                      std::get<2>(info.param) ? "self" : "noself");
}

// ReductionDefined is false for the (dtype, reduction) pairs docs/semantics.md rejects: AMAX/AMIN
// on complex and MEAN on bool.
inline bool ReductionDefined(DataType dtype, Reduction reduce) {
  const bool complex = dtype == DataType::kComplex64 || dtype == DataType::kComplex128;
  if (complex && (reduce == Reduction::kAmax || reduce == Reduction::kAmin)) return false;
  return !(dtype == DataType::kBool && reduce == Reduction::kMean);
}

// ExpectReductionResult checks a reducing op's `actual` result against the reference's
// `expected`: for a pair ReductionDefined rejects, both must fail, the op with INVALID_ARGUMENT
// "<op>: reduce = <NAME> ..."; otherwise both succeed and agree within the tolerance of
// `max_terms` combined terms.
inline void ExpectReductionResult(std::string_view op, DataType dtype, Reduction reduce,
                                  int64_t max_terms, const absl::StatusOr<Tensor>& actual,
                                  const absl::StatusOr<Tensor>& expected) {
  if (!ReductionDefined(dtype, reduce)) {
    EXPECT_FALSE(expected.ok());
    ASSERT_FALSE(actual.ok());
    EXPECT_EQ(actual.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        std::string(actual.status().message()),
        ::testing::HasSubstr(std::string(op) + ": reduce = " + std::string(ReductionName(reduce))));
    return;
  }
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(actual.ok()) << actual.status();
  ExpectTensorsNear(*actual, *expected, ToleranceFor(dtype, reduce, max_terms));
}

}  // namespace tensorops::testing

#endif  // TENSOROPS_TESTS_REFERENCE_H_
