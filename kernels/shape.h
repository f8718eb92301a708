// Shapes, strides and the index arithmetic every op shares: 64-bit element counts with overflow
// checks, row-major strides, NumPy broadcasting, and axis/index normalization with Python's
// negative wrap.
//
//   Shape shape = {2, 3, 4};
//   ContiguousStrides(shape);                  // {12, 4, 1}
//   BroadcastShapes({3, 1}, {1, 4});           // {3, 4}
//   NormalizeAxis("gather", "axis", -1, 3);    // 2
//
// Errors are INVALID_ARGUMENT in the format of docs/semantics.md (Errors):
// "<op>: <argument> = <value> <rule>".
#ifndef TENSOROPS_KERNELS_SHAPE_H_
#define TENSOROPS_KERNELS_SHAPE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tensorops {

// kMaxRank is the largest rank the service accepts (docs/semantics.md, Tensors: rank 0..16).
inline constexpr int kMaxRank = 16;

// Shape holds sizes, or strides counted in elements, one per dimension.
using Shape = absl::InlinedVector<int64_t, 6>;
using ShapeSpan = absl::Span<const int64_t>;

// NumElements returns the product of `shape` (1 for rank 0). Callers that hold untrusted shapes
// use CheckedNumElements instead.
int64_t NumElements(ShapeSpan shape);

// CheckedNumElements returns the product of `shape`, or INVALID_ARGUMENT naming `what` when a size
// is negative or the product overflows int64.
absl::StatusOr<int64_t> CheckedNumElements(ShapeSpan shape, std::string_view what);

// ContiguousStrides returns the row-major strides of `shape`, in elements.
Shape ContiguousStrides(ShapeSpan shape);

// ShapeToString formats a shape the way error messages print it: "[2, 3]", "[]" for rank 0.
std::string ShapeToString(ShapeSpan shape);

// BroadcastShapes applies NumPy's rule to two shapes (right-aligned; each pair of sizes equal or
// one of them 1). On failure returns INVALID_ARGUMENT "<op>: cannot broadcast <lhs_name> of shape
// [..] with <rhs_name> of shape [..]".
absl::StatusOr<Shape> BroadcastShapes(std::string_view op, std::string_view lhs_name, ShapeSpan lhs,
                                      std::string_view rhs_name, ShapeSpan rhs);

// CanBroadcastTo is true when `from` broadcasts to exactly `to` under NumPy's rule.
bool CanBroadcastTo(ShapeSpan from, ShapeSpan to);

// BroadcastStrides returns the strides that view a tensor of shape `from` (strides
// `from_strides`) as shape `to`: 0 for every broadcast dimension. Requires CanBroadcastTo.
Shape BroadcastStrides(ShapeSpan from, ShapeSpan from_strides, ShapeSpan to);

// NormalizeAxis maps `axis` in [-rank, rank) to [0, rank). Rank 0 is treated as rank 1, as
// PyTorch does for scalars. Otherwise INVALID_ARGUMENT "<op>: <arg> = <axis> is out of range for
// a tensor of rank <rank> (expected -R <= <arg> < R)".
absl::StatusOr<int64_t> NormalizeAxis(std::string_view op, std::string_view arg, int64_t axis,
                                      int64_t rank);

// WrapIndex maps an index in [-size, size) to [0, size); the caller has range-checked it.
constexpr int64_t WrapIndex(int64_t index, int64_t size) {
  return index < 0 ? index + size : index;
}

// InRange is true when `index` lies in [-size, size).
constexpr bool InRange(int64_t index, int64_t size) { return index >= -size && index < size; }

// UnravelIndex returns the coordinates of row-major position `linear` in `shape`.
Shape UnravelIndex(int64_t linear, ShapeSpan shape);

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_SHAPE_H_
