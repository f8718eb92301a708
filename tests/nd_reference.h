// An independent reference for GatherNd and ScatterNd (docs/semantics.md, GatherNd and ScatterNd),
// in both forms: TensorFlow's (`batch_dims`, whole slices when k < rank) and the `axes` form of the
// compiler design's gather_nd(dims=axes).
//
//   absl::StatusOr<Tensor> expected = testing::ReferenceGatherNd(x.view(), idx.view(),
//                                                               /*axes=*/{}, /*batch_dims=*/1);
//   absl::StatusOr<Tensor> updated = testing::ReferenceScatterNd(
//       x.view(), /*shape=*/{}, idx.view(), src.view(), /*axes=*/{2, -1}, /*batch_dims=*/0,
//       Reduction::kSum, /*include_self=*/true);
//
// Written from docs/semantics.md alone; it shares no code with kernels/ (not NdPlan, not its offset
// formula): for every position b of B = index.shape[:-1] it reads the k coordinates of index row b,
// builds the addressed coordinates of the input (TensorFlow form: b[:batch_dims] + the k
// coordinates, followed by every coordinate of the trailing slice; axes form: b with b_{d_j}
// replaced by coordinate j) and goes through the views' own strides. Reductions reuse
// tests/reference.h (float64 / complex<double> / wrapping int64 accumulators, one rounding at the
// end). Inputs docs/semantics.md rejects give INVALID_ARGUMENT with the reference's own wording;
// tests check the kernels' wording separately.
#ifndef TENSOROPS_TESTS_ND_REFERENCE_H_
#define TENSOROPS_TESTS_ND_REFERENCE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/reduction.h"
#include "kernels/tensor.h"
#include "tests/reference.h"

namespace tensorops::testing {

namespace nd_reference_internal {

// How the rows of an index address a tensor of shape `target_shape` (the input of GatherNd, the
// result of ScatterNd).
struct Addressing {
  // B: the index's shape without its last dimension.
  Shape positions;
  // Per coordinate j of a row: the target dimension it addresses.
  std::vector<int64_t> component_axes;
  bool axes_form = false;
  // TensorFlow form: the leading dims shared by index and target.
  int64_t batch_dims = 0;
  // TensorFlow form: target_shape[batch_dims + k:], what every row addresses. Empty in the axes
  // form (one element per position).
  Shape slice_shape;
};

// Validates the index against the target's shape in either form.
inline absl::StatusOr<Addressing> Address(const char* op, const Shape& target_shape,
                                          const TensorView& index, const std::vector<int64_t>& axes,
                                          int64_t batch_dims) {
  using reference_internal::Invalid;
  using reference_internal::ShapeString;
  if (index.dtype() != DataType::kInt32 && index.dtype() != DataType::kInt64) {
    return Invalid(absl::StrCat(op, ": index must be int32 or int64"));
  }
  if (index.rank() < 1) return Invalid(absl::StrCat(op, ": index must have rank >= 1"));
  const int64_t rank = static_cast<int64_t>(target_shape.size());
  const int64_t k = index.shape().back();
  Addressing addressing;
  addressing.positions = Shape(index.shape().begin(), index.shape().end() - 1);
  const Shape& positions = addressing.positions;
  if (axes.empty()) {
    if (batch_dims < 0 || batch_dims >= index.rank()) {
      return Invalid(absl::StrCat(op, ": batch_dims out of range"));
    }
    if (batch_dims + k > rank) return Invalid(absl::StrCat(op, ": batch_dims + k > rank"));
    for (int64_t d = 0; d < batch_dims; ++d) {
      if (positions[d] != target_shape[d]) {
        return Invalid(absl::StrCat(op, ": batch dimension ", d, " differs: index ",
                                    ShapeString(index.shape()), ", input ",
                                    ShapeString(target_shape)));
      }
    }
    addressing.batch_dims = batch_dims;
    for (int64_t j = 0; j < k; ++j) addressing.component_axes.push_back(batch_dims + j);
    addressing.slice_shape = Shape(target_shape.begin() + batch_dims + k, target_shape.end());
    return addressing;
  }
  addressing.axes_form = true;
  if (batch_dims != 0) return Invalid(absl::StrCat(op, ": batch_dims with axes"));
  if (static_cast<int64_t>(axes.size()) != k) {
    return Invalid(absl::StrCat(op, ": len(axes) != index.shape[-1]"));
  }
  if (index.rank() != rank + 1) return Invalid(absl::StrCat(op, ": index.rank != rank + 1"));
  std::vector<bool> indexed(static_cast<size_t>(std::max<int64_t>(rank, 1)), false);
  for (int64_t axis : axes) {
    // A scalar target is addressed like PyTorch's scalars: as shape [1], axis 0 or -1.
    absl::StatusOr<int64_t> normalized = reference_internal::NormalizedAxis(op, axis, rank);
    if (!normalized.ok()) return normalized.status();
    if (indexed[*normalized]) return Invalid(absl::StrCat(op, ": duplicate axis ", axis));
    indexed[*normalized] = true;
    addressing.component_axes.push_back(*normalized);
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (!indexed[d] && positions[d] > target_shape[d]) {
      return Invalid(absl::StrCat(op, ": index.shape[", d, "] > input.shape[", d, "]"));
    }
  }
  return addressing;
}

// The target coordinates index row `row` (coordinates in B) addresses: in the TensorFlow form the
// first batch_dims + k coordinates (the slice's follow), in the axes form all of them. An index
// value outside [-size, size) gives INVALID_ARGUMENT naming it; callers walk rows in row-major
// order, so the first error is the first bad value in row-major order of the index.
inline absl::StatusOr<Shape> RowCoordinates(const char* op, const Addressing& addressing,
                                            const Shape& target_shape, const TensorView& index,
                                            const Shape& row) {
  int64_t row_offset = 0;
  for (size_t d = 0; d < row.size(); ++d) row_offset += row[d] * index.strides()[d];
  const int64_t component_stride = index.strides().back();
  Shape coordinates;
  if (addressing.axes_form) {
    coordinates = row;
  } else {
    coordinates = Shape(row.begin(), row.begin() + addressing.batch_dims);
  }
  for (size_t j = 0; j < addressing.component_axes.size(); ++j) {
    const int64_t axis = addressing.component_axes[j];
    const int64_t size = target_shape.empty() ? 1 : target_shape[axis];
    const int64_t value =
        reference_internal::LoadElement(index.dtype(), index.data(),
                                        row_offset + static_cast<int64_t>(j) * component_stride)
            .integer;
    if (value < -size || value >= size) {
      Shape where = row;
      where.push_back(static_cast<int64_t>(j));
      return reference_internal::Invalid(
          absl::StrCat(op, ": index", reference_internal::ShapeString(where), " = ", value,
                       " is out of range for axis ", axis, " of input with size ", size));
    }
    const int64_t wrapped = value < 0 ? value + size : value;
    if (addressing.axes_form) {
      if (!target_shape.empty()) coordinates[axis] = wrapped;
    } else {
      coordinates.push_back(wrapped);
    }
  }
  return coordinates;
}

// Offsets, through `strides` starting at dimension `first`, of every position of `slice_shape`
// in row-major order.
inline std::vector<int64_t> SliceOffsets(const Shape& slice_shape, const Shape& strides,
                                         size_t first) {
  const int64_t count = reference_internal::Count(slice_shape);
  std::vector<int64_t> offsets(static_cast<size_t>(count), 0);
  for (int64_t position = 0; position < count; ++position) {
    const Shape coordinates = reference_internal::Unravel(position, slice_shape);
    for (size_t d = 0; d < coordinates.size(); ++d) {
      offsets[position] += coordinates[d] * strides[first + d];
    }
  }
  return offsets;
}

inline int64_t StridedOffset(const Shape& coordinates, const Shape& strides) {
  int64_t offset = 0;
  for (size_t d = 0; d < coordinates.size(); ++d) offset += coordinates[d] * strides[d];
  return offset;
}

}  // namespace nd_reference_internal

// ReferenceGatherNd computes GatherNd (docs/semantics.md). `axes` empty: out.shape = B +
// x.shape[batch_dims + k:], out[b, s] = x[b[:batch_dims], idx[b, 0..k-1], s]. `axes` given
// (batch_dims must be 0): idx.rank == x.rank + 1, out.shape = B, out[i] = x[i with i_{axes[j]} :=
// idx[i, j]]. Index values are checked for every row (also when the slice is empty); the first bad
// one in row-major order of the index is reported.
inline absl::StatusOr<Tensor> ReferenceGatherNd(const TensorView& input, const TensorView& index,
                                                const std::vector<int64_t>& axes,
                                                int64_t batch_dims) {
  using namespace nd_reference_internal;  // NOLINT
  using reference_internal::ByteWidth;
  using reference_internal::Count;
  absl::StatusOr<Addressing> addressing =
      Address("gather_nd", input.shape(), index, axes, batch_dims);
  if (!addressing.ok()) return addressing.status();
  Shape out_shape = addressing->positions;
  out_shape.insert(out_shape.end(), addressing->slice_shape.begin(), addressing->slice_shape.end());
  const std::vector<int64_t> slice_offsets =
      SliceOffsets(addressing->slice_shape, input.strides(),
                   input.shape().size() - addressing->slice_shape.size());
  const int64_t slice_count = static_cast<int64_t>(slice_offsets.size());
  const int64_t width = ByteWidth(input.dtype());
  Tensor result(input.dtype(), out_shape);
  for (int64_t position = 0; position < Count(addressing->positions); ++position) {
    const Shape row = reference_internal::Unravel(position, addressing->positions);
    absl::StatusOr<Shape> coordinates =
        RowCoordinates("gather_nd", *addressing, input.shape(), index, row);
    if (!coordinates.ok()) return coordinates.status();
    const int64_t base = StridedOffset(*coordinates, input.strides());
    for (int64_t s = 0; s < slice_count; ++s) {
      std::memcpy(static_cast<char*>(result.data()) + (position * slice_count + s) * width,
                  static_cast<const char*>(input.data()) + (base + slice_offsets[s]) * width,
                  static_cast<size_t>(width));
    }
  }
  return result;
}

// ReferenceScatterNd computes ScatterNd (docs/semantics.md): out = input (or zeros of `shape` in
// the source's dtype when `input` is absent; `shape` must then be the only one given), then for
// every position b of B in row-major order, out[addressed by b] (+)= src[b, ...], with the
// reduction rules of docs/semantics.md. TensorFlow form: src.shape == B + out.shape[batch_dims +
// k:]. Axes form: src.rank == out.rank and B[d] <= src.shape[d]; src's leading block B is read.
inline absl::StatusOr<Tensor> ReferenceScatterNd(const std::optional<TensorView>& input,
                                                 const Shape& shape, const TensorView& index,
                                                 const TensorView& source,
                                                 const std::vector<int64_t>& axes,
                                                 int64_t batch_dims, Reduction reduce,
                                                 bool include_self) {
  using namespace nd_reference_internal;  // NOLINT
  using reference_internal::Count;
  using reference_internal::Element;
  using reference_internal::Invalid;
  using reference_internal::Kind;
  const char* op = "scatter_nd";
  if (input.has_value() && !shape.empty()) {
    return Invalid("scatter_nd: input and shape are both given");
  }
  for (int64_t size : shape) {
    if (size < 0) return Invalid("scatter_nd: negative size in shape");
  }
  const DataType dtype = input.has_value() ? input->dtype() : source.dtype();
  const Kind kind = reference_internal::KindOf(dtype);
  if (source.dtype() != dtype) return Invalid("scatter_nd: src dtype differs from input dtype");
  if (reference_internal::IsComplexKind(kind) &&
      (reduce == Reduction::kAmax || reduce == Reduction::kAmin)) {
    return Invalid("scatter_nd: AMAX/AMIN are not defined for complex");
  }
  if (kind == Kind::kBool && reduce == Reduction::kMean) {
    return Invalid("scatter_nd: MEAN is not defined for bool");
  }
  const Shape target_shape = input.has_value() ? input->shape() : shape;
  absl::StatusOr<Addressing> addressing = Address(op, target_shape, index, axes, batch_dims);
  if (!addressing.ok()) return addressing.status();
  const Shape& positions = addressing->positions;
  if (addressing->axes_form) {
    if (source.rank() != static_cast<int64_t>(target_shape.size())) {
      return Invalid("scatter_nd: src.rank != input.rank");
    }
    for (size_t d = 0; d < positions.size(); ++d) {
      if (positions[d] > source.shape()[d]) return Invalid("scatter_nd: index larger than src");
    }
  } else {
    Shape expected = positions;
    expected.insert(expected.end(), addressing->slice_shape.begin(), addressing->slice_shape.end());
    if (source.shape() != expected) return Invalid("scatter_nd: src shape mismatch");
  }

  const int64_t out_count = Count(target_shape);
  std::vector<Element> accumulators(static_cast<size_t>(out_count));  // Zeros.
  std::vector<int64_t> counts(static_cast<size_t>(out_count), include_self ? 1 : 0);
  if (input.has_value()) {
    for (int64_t position = 0; position < out_count; ++position) {
      const Shape coordinates = reference_internal::Unravel(position, target_shape);
      accumulators[position] = reference_internal::LoadElement(
          dtype, input->data(), StridedOffset(coordinates, input->strides()));
    }
  }
  const Shape out_strides = RowMajorStrides(target_shape);
  const size_t slice_first = target_shape.size() - addressing->slice_shape.size();
  const std::vector<int64_t> dest_offsets =
      SliceOffsets(addressing->slice_shape, out_strides, slice_first);
  const std::vector<int64_t> source_offsets =
      SliceOffsets(addressing->slice_shape, source.strides(), positions.size());
  for (int64_t position = 0; position < Count(positions); ++position) {
    const Shape row = reference_internal::Unravel(position, positions);
    absl::StatusOr<Shape> coordinates = RowCoordinates(op, *addressing, target_shape, index, row);
    if (!coordinates.ok()) return coordinates.status();
    const int64_t dest_base = StridedOffset(*coordinates, out_strides);
    const int64_t source_base = StridedOffset(row, source.strides());
    for (size_t s = 0; s < dest_offsets.size(); ++s) {
      const int64_t dest = dest_base + dest_offsets[s];
      const Element value =
          reference_internal::LoadElement(dtype, source.data(), source_base + source_offsets[s]);
      if (counts[dest] == 0) {
        accumulators[dest] = value;  // The first value of a reduction over the sources alone.
      } else {
        reference_internal::Combine(kind, reduce, accumulators[dest], value);
      }
      ++counts[dest];
    }
  }
  return reference_internal::FinishReduction(dtype, target_shape, reduce, accumulators, counts);
}

}  // namespace tensorops::testing

#endif  // TENSOROPS_TESTS_ND_REFERENCE_H_
