#include "kernels/shape.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tensorops {

int64_t NumElements(ShapeSpan shape) {
  // A zero anywhere makes the count 0, even where the sizes before it overflow int64 together: a
  // valid shape such as (2^40, 2^40, 0) (found by fuzz/npy_fuzzer).
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t count = 1;
  for (int64_t size : shape) count *= size;
  return count;
}

absl::StatusOr<int64_t> CheckedNumElements(ShapeSpan shape, std::string_view what) {
  int64_t count = 1;
  bool overflow = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: shape[%d] = %d is negative (sizes must be >= 0)", what, d, shape[d]));
    }
    // Keep multiplying after an overflow only to find a later zero, which makes the count 0.
    if (__builtin_mul_overflow(count, shape[d], &count)) overflow = true;
  }
  if (overflow && std::find(shape.begin(), shape.end(), 0) == shape.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: shape %s has more elements than fit in int64", what, ShapeToString(shape)));
  }
  return overflow ? 0 : count;
}

Shape ContiguousStrides(ShapeSpan shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    // A valid shape's element count fits int64, so the product overflows only when another size
    // is zero: such a tensor has no element to address, and any stride serves.
    if (__builtin_mul_overflow(stride, shape[d], &stride)) stride = 0;
  }
  return strides;
}

std::string ShapeToString(ShapeSpan shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<Shape> BroadcastShapes(std::string_view op, std::string_view lhs_name, ShapeSpan lhs,
                                      std::string_view rhs_name, ShapeSpan rhs) {
  const size_t rank = std::max(lhs.size(), rhs.size());
  Shape result(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t l = i < lhs.size() ? lhs[lhs.size() - 1 - i] : 1;
    const int64_t r = i < rhs.size() ? rhs[rhs.size() - 1 - i] : 1;
    if (l != r && l != 1 && r != 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: cannot broadcast %s of shape %s with %s of shape %s (sizes %d and %d at dimension "
          "%d from the right must be equal or 1)",
          op, lhs_name, ShapeToString(lhs), rhs_name, ShapeToString(rhs), l, r, i));
    }
    result[rank - 1 - i] = l == 1 ? r : l;
  }
  return result;
}

bool CanBroadcastTo(ShapeSpan from, ShapeSpan to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d) {
    if (from[d] != to[lead + d] && from[d] != 1) return false;
  }
  return true;
}

Shape BroadcastStrides(ShapeSpan from, ShapeSpan from_strides, ShapeSpan to) {
  Shape strides(to.size(), 0);
  const size_t lead = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d) {
    strides[lead + d] = (from[d] == 1 && to[lead + d] != 1) ? 0 : from_strides[d];
  }
  return strides;
}

absl::StatusOr<int64_t> NormalizeAxis(std::string_view op, std::string_view arg, int64_t axis,
                                      int64_t rank) {
  const int64_t bound = std::max<int64_t>(rank, 1);
  if (axis < -bound || axis >= bound) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s = %d is out of range for a tensor of rank %d (expected %d <= %s < %d)", op, arg,
        axis, rank, -bound, arg, bound));
  }
  return axis < 0 ? axis + bound : axis;
}

Shape UnravelIndex(int64_t linear, ShapeSpan shape) {
  Shape coords(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] > 0) {
      coords[d] = linear % shape[d];
      linear /= shape[d];
    }
  }
  return coords;
}

}  // namespace tensorops
