// An independent reference for SelectScatter, SliceScatter and DiagonalScatter (docs/semantics.md),
// and for the diagonal extraction the reference equality needs.
//
//   Tensor expected = testing::ReferenceSliceScatter(x.view(), s.view(), 1, -3, std::nullopt, 2);
//
// Written from docs/semantics.md and PyTorch's documented semantics alone, sharing no code with
// kernels/: no strides of the result, no window. Every result coordinate is visited with plain
// loops and the reference decides from the coordinates themselves whether it lies in the selected
// slice, the stepped slice or the diagonal, and which src coordinate lands there; elements move as
// raw bytes through each view's own strides. Arguments must be valid (the kernels' error paths are
// tested separately); sizes are kept to a few million elements.
#ifndef TENSOROPS_TESTS_VIEW_SCATTER_REFERENCE_H_
#define TENSOROPS_TESTS_VIEW_SCATTER_REFERENCE_H_

#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>

#include "kernels/tensor.h"
#include "tests/reference.h"

namespace tensorops::testing {

namespace view_scatter_internal {

// Python's rule for an axis or index in [-n, n).
inline int64_t Wrapped(int64_t value, int64_t n) { return value < 0 ? value + n : value; }

// CopyElementBytes copies the element at `from_coords` of `from` to `to_coords` of `to`.
inline void CopyElementBytes(const TensorView& from, const Shape& from_coords, void* to,
                             const Shape& to_shape, const Shape& to_coords) {
  const int64_t width = reference_internal::ByteWidth(from.dtype());
  int64_t to_offset = 0;
  for (size_t d = 0; d < to_coords.size(); ++d) to_offset = to_offset * to_shape[d] + to_coords[d];
  const int64_t from_offset = reference_internal::OffsetOf(from, from_coords);
  std::memcpy(static_cast<char*>(to) + to_offset * width,
              static_cast<const char*>(from.data()) + from_offset * width,
              static_cast<size_t>(width));
}

// ScatterByCoordinates builds input's shape and, for every coordinate, copies src at
// `src_coords_of(coords)` when that returns a value and input at `coords` otherwise.
inline Tensor ScatterByCoordinates(
    const TensorView& input, const TensorView& src,
    const std::function<std::optional<Shape>(const Shape&)>& src_coords_of) {
  const Shape shape = input.shape();
  Tensor result(input.dtype(), shape);
  const int64_t count = reference_internal::Count(shape);
  for (int64_t position = 0; position < count; ++position) {
    const Shape coords = reference_internal::Unravel(position, shape);
    if (const std::optional<Shape> src_coords = src_coords_of(coords)) {
      CopyElementBytes(src, *src_coords, result.data(), shape, coords);
    } else {
      CopyElementBytes(input, coords, result.data(), shape, coords);
    }
  }
  return result;
}

// Without returns `coords` with the entries at `first` and (if given) `second` removed.
inline Shape Without(const Shape& coords, int64_t first, int64_t second = -1) {
  Shape rest;
  for (int64_t d = 0; d < static_cast<int64_t>(coords.size()); ++d) {
    if (d != first && d != second) rest.push_back(coords[d]);
  }
  return rest;
}

// PythonBound is one bound of a Python slice over a sequence of length n: negative counts from
// the end, then it is clamped into [0, n].
inline int64_t PythonBound(std::optional<int64_t> bound, int64_t absent, int64_t n) {
  if (!bound.has_value()) return absent;
  int64_t value = *bound;
  if (value < 0) value += n;
  if (value < 0) value = 0;
  if (value > n) value = n;
  return value;
}

// DiagonalStarts returns where diagonal `offset` of a (size1 x size2) plane starts: (row, column).
inline std::pair<int64_t, int64_t> DiagonalStart(int64_t offset) {
  return offset >= 0 ? std::pair<int64_t, int64_t>{0, offset}
                     : std::pair<int64_t, int64_t>{-offset, 0};
}

}  // namespace view_scatter_internal

// ReferenceSliceLength counts the positions of 0..size-1 that the Python slice start:end:step
// (step > 0) picks.
inline int64_t ReferenceSliceLength(int64_t size, std::optional<int64_t> start,
                                    std::optional<int64_t> end, int64_t step) {
  const int64_t first = view_scatter_internal::PythonBound(start, 0, size);
  const int64_t stop = view_scatter_internal::PythonBound(end, size, size);
  int64_t length = 0;
  for (int64_t position = first; position < stop; position += step) ++length;
  return length;
}

// ReferenceDiagonalLength counts the positions k with (row + k, column + k) inside a
// (size1 x size2) plane, where (row, column) is where diagonal `offset` starts.
inline int64_t ReferenceDiagonalLength(int64_t size1, int64_t size2, int64_t offset) {
  const auto [row, column] = view_scatter_internal::DiagonalStart(offset);
  int64_t length = 0;
  while (row + length < size1 && column + length < size2) ++length;
  return length;
}

// ReferenceDiagonalShape is torch.diagonal's shape: input's other dimensions in order, then the
// diagonal.
inline Shape ReferenceDiagonalShape(const Shape& input_shape, int64_t offset, int64_t axis1,
                                    int64_t axis2) {
  const int64_t rank = static_cast<int64_t>(input_shape.size());
  axis1 = view_scatter_internal::Wrapped(axis1, rank);
  axis2 = view_scatter_internal::Wrapped(axis2, rank);
  Shape shape = view_scatter_internal::Without(input_shape, axis1, axis2);
  shape.push_back(ReferenceDiagonalLength(input_shape[axis1], input_shape[axis2], offset));
  return shape;
}

// ReferenceSelectScatter: out = input; out[..., index, ...] (at `axis`) = src.
inline Tensor ReferenceSelectScatter(const TensorView& input, const TensorView& src, int64_t axis,
                                     int64_t index) {
  const int64_t rank = input.rank();
  axis = view_scatter_internal::Wrapped(axis, rank);
  index = view_scatter_internal::Wrapped(index, input.shape()[axis]);
  return view_scatter_internal::ScatterByCoordinates(
      input, src, [&](const Shape& coords) -> std::optional<Shape> {
        if (coords[axis] != index) return std::nullopt;
        return view_scatter_internal::Without(coords, axis);
      });
}

// ReferenceSliceScatter: out = input; out[..., start:end:step, ...] (at `axis`) = src.
inline Tensor ReferenceSliceScatter(const TensorView& input, const TensorView& src, int64_t axis,
                                    std::optional<int64_t> start, std::optional<int64_t> end,
                                    int64_t step) {
  const int64_t rank = input.rank();
  axis = view_scatter_internal::Wrapped(axis, rank);
  const int64_t size = input.shape()[axis];
  const int64_t first = view_scatter_internal::PythonBound(start, 0, size);
  const int64_t stop = view_scatter_internal::PythonBound(end, size, size);
  return view_scatter_internal::ScatterByCoordinates(
      input, src, [&](const Shape& coords) -> std::optional<Shape> {
        const int64_t position = coords[axis];
        if (position < first || position >= stop || (position - first) % step != 0) {
          return std::nullopt;
        }
        Shape src_coords = coords;
        src_coords[axis] = (position - first) / step;
        return src_coords;
      });
}

// ReferenceDiagonalScatter: out = input; torch.diagonal(out, offset, axis1, axis2) = src.
inline Tensor ReferenceDiagonalScatter(const TensorView& input, const TensorView& src,
                                       int64_t offset, int64_t axis1, int64_t axis2) {
  const int64_t rank = input.rank();
  axis1 = view_scatter_internal::Wrapped(axis1, rank);
  axis2 = view_scatter_internal::Wrapped(axis2, rank);
  // Named copies, not a structured binding: lambdas capture bindings only from clang 16 on, and
  // the sanitizer build uses Debian's clang 14.
  const auto start = view_scatter_internal::DiagonalStart(offset);
  const int64_t row = start.first;
  const int64_t column = start.second;
  return view_scatter_internal::ScatterByCoordinates(
      input, src, [&](const Shape& coords) -> std::optional<Shape> {
        const int64_t along = coords[axis1] - row;
        if (along < 0 || coords[axis2] - column != along) return std::nullopt;
        Shape src_coords = view_scatter_internal::Without(coords, axis1, axis2);
        src_coords.push_back(along);
        return src_coords;
      });
}

// ReferenceDiagonal is torch.diagonal(input, offset, axis1, axis2), copied into a new tensor.
inline Tensor ReferenceDiagonal(const TensorView& input, int64_t offset, int64_t axis1,
                                int64_t axis2) {
  const int64_t rank = input.rank();
  axis1 = view_scatter_internal::Wrapped(axis1, rank);
  axis2 = view_scatter_internal::Wrapped(axis2, rank);
  const Shape shape = ReferenceDiagonalShape(input.shape(), offset, axis1, axis2);
  const auto [row, column] = view_scatter_internal::DiagonalStart(offset);
  Tensor result(input.dtype(), shape);
  const int64_t count = reference_internal::Count(shape);
  for (int64_t position = 0; position < count; ++position) {
    const Shape coords = reference_internal::Unravel(position, shape);
    Shape input_coords;
    size_t next = 0;
    for (int64_t d = 0; d < rank; ++d) {
      if (d == axis1) {
        input_coords.push_back(row + coords.back());
      } else if (d == axis2) {
        input_coords.push_back(column + coords.back());
      } else {
        input_coords.push_back(coords[next++]);
      }
    }
    view_scatter_internal::CopyElementBytes(input, input_coords, result.data(), shape, coords);
  }
  return result;
}

}  // namespace tensorops::testing

#endif  // TENSOROPS_TESTS_VIEW_SCATTER_REFERENCE_H_
