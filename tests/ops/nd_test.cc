// GatherNd and ScatterNd (docs/semantics.md, GatherNd and ScatterNd) against the independent
// reference written below in this file: randomized over dtype (x reduction x include_self for
// ScatterNd), both forms (TensorFlow's with batch_dims and k from 0 to rank, and the axes form with
// negative and unsorted axes), input ranks 0-5, int32/int64 and strided indices, duplicate-heavy
// and negative index values, empty B, zero-size dimensions and ScatterNd's shape-only zeros;
// ~1M-element cases for the parallel paths (ASSIGN last-writer-wins, SUM under heavy duplicates,
// slice sizes 1 and large); the TensorFlow, Paddle and compiler-design examples; the identities of
// docs/semantics.md with Gather and Scatter; and every error these ops give, with its message. The
// randomized suites, the large ScatterNd calls and the equalities run on the CPU and on CUDA
// (tests/device_runner.h; skipped where no GPU is usable, and call by call where CUDA has no form
// for a call, e.g. ScatterNd's general form); on a GPU also: GatherNd's TensorFlow form of every
// dtype byte for byte the CPU's.
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/streaming_store.h"
#include "kernels/device_call.h"
#include "kernels/dispatch.h"
#include "kernels/gather.h"
#include "kernels/nd_ops.h"
#include "kernels/reduction.h"
#include "kernels/scatter.h"
#include "kernels/tensor.h"
#include "tbb/task_arena.h"
#include "tests/device_runner.h"
#include "tests/extremum_rule.h"
#include "tests/reference.h"

// ---------------------------------------------------------------------------------------------
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

namespace tensorops {
namespace {

using testing::DeviceRunner;
using testing::DoublesIfOk;
using testing::ExpectSameBytes;
using testing::ExpectTensorsNear;
using testing::HasNoDeviceForm;
using ::testing::HasSubstr;
using testing::IndexPattern;
using testing::IndexTensor;
using testing::LaidOutTensor;
using testing::RandomIndex;
using testing::RandomTensor;
using testing::ReferenceGatherNd;
using testing::ReferenceScatterNd;
using testing::SeededGen;
using testing::TensorFromValues;
using testing::TestDevice;
using testing::ToDoubles;
using testing::ToleranceFor;
using testing::reference_internal::Count;
using testing::reference_internal::ShapeString;

// kNdSeedSalt salts every generator this file seeds, keeping its random inputs apart from the
// other suites' (testing::SeededGen).
constexpr uint64_t kNdSeedSalt = 0x9d0;

// An operand and, when `gapped`, a non-contiguous view of the same values (testing::SteppedCopy).
struct Operand {
  Tensor tensor;
  LaidOutTensor gapped_copy;
  bool gapped = false;

  TensorView view() const { return gapped ? gapped_copy.view : tensor.view(); }
};

Operand MakeOperand(Tensor tensor, bool gapped) {
  Operand operand;
  operand.gapped = gapped && tensor.rank() > 0;
  if (operand.gapped) operand.gapped_copy = testing::SteppedCopy(tensor);
  operand.tensor = std::move(tensor);
  return operand;
}

// A random shape of `rank`, sizes shrinking as the rank grows, some zero.
Shape RandomShape(absl::BitGen& gen, int64_t rank) {
  const int64_t max_size = rank >= 4 ? 3 : (rank == 3 ? 4 : 6);
  Shape shape(rank);
  for (int64_t d = 0; d < rank; ++d) shape[d] = testing::RandomDimSize(gen, max_size);
  return shape;
}

// NdIndex builds an index of shape `positions + [k]` whose coordinate j is valid for a dimension
// of size `sizes[j]`, drawn with `pattern` (kUnique: distinct along B's first dimension, where
// that fits). A zero size needs an empty B.
Tensor NdIndex(DataType dtype, const Shape& positions, const std::vector<int64_t>& sizes,
               IndexPattern pattern, absl::BitGen& gen) {
  const int64_t k = static_cast<int64_t>(sizes.size());
  const int64_t rows = Count(positions);
  std::vector<int64_t> values(static_cast<size_t>(rows * k), 0);
  for (int64_t j = 0; j < k; ++j) {
    IndexPattern component_pattern = pattern;
    if (pattern == IndexPattern::kUnique && (positions.empty() || positions[0] > sizes[j])) {
      component_pattern = IndexPattern::kRandom;
    }
    const Tensor component =
        RandomIndex(DataType::kInt64, positions, 0, sizes[j], component_pattern, gen);
    for (int64_t row = 0; row < rows; ++row) {
      values[row * k + j] = component.data_as<int64_t>()[row];
    }
  }
  Shape shape = positions;
  shape.push_back(k);
  return IndexTensor(shape, values, dtype);
}

// The layout of an Nd call: the addressed tensor (GatherNd's input, ScatterNd's result), B and
// the form's arguments.
struct NdLayout {
  Shape target_shape;
  Shape positions;
  // As passed: empty for the TensorFlow form; otherwise possibly negative and unsorted.
  std::vector<int64_t> axes;
  int64_t batch_dims = 0;
  // Per coordinate: the size of the dimension it addresses.
  std::vector<int64_t> component_sizes;
  // TensorFlow form: target_shape[batch_dims + k:].
  Shape slice_shape;

  Shape IndexShape() const {
    Shape shape = positions;
    shape.push_back(static_cast<int64_t>(component_sizes.size()));
    return shape;
  }
  std::string Describe() const {
    return absl::StrCat("target ", ShapeString(target_shape), " index ", ShapeString(IndexShape()),
                        axes.empty() ? absl::StrCat(" batch_dims ", batch_dims)
                                     : absl::StrCat(" axes [", absl::StrJoin(axes, ", "), "]"));
  }
};

// Empties B when some addressed dimension is empty (no index value would be valid there):
// `zero_dim` is the B dimension to zero, or -1 to append a size-0 dimension.
void EmptyPositionsIfNeeded(NdLayout& layout, int64_t zero_dim) {
  const bool empty_axis = std::find(layout.component_sizes.begin(), layout.component_sizes.end(),
                                    0) != layout.component_sizes.end();
  if (!empty_axis || Count(layout.positions) == 0) return;
  if (zero_dim < 0) {
    layout.positions.push_back(0);
  } else {
    layout.positions[zero_dim] = 0;
  }
}

// TensorFlow form: rank 0-5, batch_dims and k anywhere valid (k = 0 takes whole slices), B = the
// batch dims plus 0-2 more dimensions.
NdLayout RandomTensorFlowLayout(absl::BitGen& gen) {
  NdLayout layout;
  const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, 5);
  layout.target_shape = RandomShape(gen, rank);
  layout.batch_dims =
      absl::Bernoulli(gen, 0.5) ? 0 : absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, rank);
  const int64_t k = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, rank - layout.batch_dims);
  layout.positions =
      Shape(layout.target_shape.begin(), layout.target_shape.begin() + layout.batch_dims);
  const int64_t extra = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, 2);
  for (int64_t d = 0; d < extra; ++d) layout.positions.push_back(testing::RandomDimSize(gen, 4));
  for (int64_t j = 0; j < k; ++j) {
    layout.component_sizes.push_back(layout.target_shape[layout.batch_dims + j]);
  }
  EmptyPositionsIfNeeded(layout,
                         extra > 0 ? static_cast<int64_t>(layout.positions.size()) - 1 : -1);
  layout.slice_shape =
      Shape(layout.target_shape.begin() + layout.batch_dims + k, layout.target_shape.end());
  return layout;
}

// Axes form: rank 0-5, 1..rank distinct axes in random order, some negative; B may exceed the
// target along the indexed axes and fits inside it elsewhere. A rank-0 target is addressed like
// PyTorch's scalars: as shape [1], axes [0] or [-1], B = [].
NdLayout RandomAxesLayout(absl::BitGen& gen) {
  NdLayout layout;
  const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, 5);
  layout.target_shape = RandomShape(gen, rank);
  if (rank == 0) {
    layout.axes = {absl::Bernoulli(gen, 0.5) ? 0 : -1};
    layout.component_sizes = {1};
    return layout;
  }
  const int64_t k = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, rank);
  std::vector<int64_t> order(static_cast<size_t>(rank));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), gen);
  order.resize(static_cast<size_t>(k));
  layout.positions = Shape(rank);
  for (int64_t d = 0; d < rank; ++d) {
    const bool indexed = std::find(order.begin(), order.end(), d) != order.end();
    if (indexed) {
      layout.positions[d] = testing::RandomDimSize(gen, 5);
    } else {
      layout.positions[d] =
          absl::Bernoulli(gen, 0.6)
              ? layout.target_shape[d]
              : absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, layout.target_shape[d]);
    }
  }
  for (int64_t axis : order) {
    layout.axes.push_back(absl::Bernoulli(gen, 0.4) ? axis - rank : axis);
    layout.component_sizes.push_back(layout.target_shape[axis]);
  }
  for (int64_t axis : order) {
    if (layout.target_shape[axis] == 0) EmptyPositionsIfNeeded(layout, axis);
  }
  return layout;
}

// ExpectGatherNdMatchesReference runs GatherNd on `input` and `index` in `layout`'s form on the
// runner's device (a case with no GPU form is skipped, and counted) and compares the result with
// the reference's.
void ExpectGatherNdMatchesReference(const TensorView& input, const TensorView& index,
                                    const NdLayout& layout, DeviceRunner& runner) {
  const absl::StatusOr<Tensor> actual = runner.Run(GatherNdArgs{
      .input = input, .index = index, .axes = layout.axes, .batch_dims = layout.batch_dims});
  if (HasNoDeviceForm(actual.status())) return;
  const absl::StatusOr<Tensor> expected =
      ReferenceGatherNd(input, index, layout.axes, layout.batch_dims);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(actual.ok()) << actual.status();
  ExpectTensorsNear(*actual, *expected);
}

// ---------------------------------------------------------------------------------------------
// GatherNd, randomized.

// Over dtype x device: the same cases on the CPU and on CUDA.
class GatherNdRandomTest : public testing::DeviceTest<DataType> {
 protected:
  DataType dtype() const { return leading_param(); }

  void ExpectMatchesReference(const NdLayout& layout, absl::BitGen& gen) {
    const IndexPattern pattern = testing::RandomIndexPattern(gen);
    const DataType index_dtype = absl::Bernoulli(gen, 0.5) ? DataType::kInt32 : DataType::kInt64;
    const Operand input =
        MakeOperand(RandomTensor(dtype(), layout.target_shape, gen, {.nan_fraction = 0.05}),
                    absl::Bernoulli(gen, 0.25));
    const Operand index =
        MakeOperand(NdIndex(index_dtype, layout.positions, layout.component_sizes, pattern, gen),
                    absl::Bernoulli(gen, 0.25));
    SCOPED_TRACE(absl::StrCat(layout.Describe(), input.gapped ? " (strided input)" : "", " ",
                              std::string(DataTypeName(index_dtype)), " ",
                              testing::IndexPatternName(pattern),
                              index.gapped ? " (strided index)" : ""));
    ExpectGatherNdMatchesReference(input.view(), index.view(), layout, runner());
  }
};

TEST_P(GatherNdRandomTest, TensorFlowFormMatchesReference) {
  for (uint64_t seed = 0; seed < 300; ++seed) {
    absl::BitGen gen = SeededGen(static_cast<uint64_t>(dtype()) * 100003 + seed, kNdSeedSalt);
    ExpectMatchesReference(RandomTensorFlowLayout(gen), gen);
  }
}

TEST_P(GatherNdRandomTest, AxesFormMatchesReference) {
  for (uint64_t seed = 0; seed < 300; ++seed) {
    absl::BitGen gen =
        SeededGen(static_cast<uint64_t>(dtype()) * 100003 + seed + 50000, kNdSeedSalt);
    ExpectMatchesReference(RandomAxesLayout(gen), gen);
  }
}

TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(GatherNdRandomTest, ::testing::ValuesIn(kAllDataTypes),
                                      testing::DataTypeParamName);

// A result of cpu::kStreamingMinBytes and more has its slices copied with streaming stores, the
// 16-byte aligned middle of each slice streamed and its ends copied plainly. Rows of 2047 int32
// put every slice's start at a different alignment; plain loops give the expected rows. Every
// element is a different hash of its position, none with a zero byte, so a byte left unwritten
// in the fresh (zeroed) result shows.
TEST(GatherNdTest, SlicesOfResultsLargerThanTheCacheMatchPlainLoops) {
  absl::BitGen gen = SeededGen(31337, kNdSeedSalt);
  constexpr int64_t kRows = 1000;
  constexpr int64_t kCols = 2047;
  const int64_t positions = cpu::kStreamingMinBytes / (kCols * 4) + 3;
  Tensor input(DataType::kInt32, {kRows, kCols});
  const auto value_at = [](int64_t i) {
    return static_cast<int32_t>((static_cast<uint32_t>(i) * 2654435761u) | 0x01010101u);
  };
  for (int64_t i = 0; i < kRows * kCols; ++i) input.data_as<int32_t>()[i] = value_at(i);
  Tensor index(DataType::kInt64, {positions, 1});
  int64_t* rows = index.data_as<int64_t>();
  for (int64_t p = 0; p < positions; ++p) rows[p] = absl::Uniform<int64_t>(gen, -kRows, kRows);
  absl::StatusOr<Tensor> out = GatherNd({.input = input.view(), .index = index.view()});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->shape(), Shape({positions, kCols}));
  int64_t mismatches = 0;
  for (int64_t p = 0; p < positions && mismatches < 5; ++p) {
    const int64_t row = rows[p] < 0 ? rows[p] + kRows : rows[p];
    for (int64_t c = 0; c < kCols; ++c) {
      const int32_t actual = out->data_as<int32_t>()[p * kCols + c];
      if (actual != value_at(row * kCols + c)) {
        ++mismatches;
        ADD_FAILURE() << "out[" << p << ", " << c << "] = " << actual << ", expected "
                      << value_at(row * kCols + c);
        break;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// ScatterNd, randomized.

// A ScatterNd call and everything the reference needs for it.
struct ScatterNdCase {
  NdLayout layout;
  // Absent: zeros of layout.target_shape in the source's dtype.
  std::optional<Operand> input;
  Operand index;
  Operand source;
  Reduction reduce = Reduction::kAssign;
  bool include_self = true;
  std::string description;

  ScatterNdArgs Args() const {
    ScatterNdArgs args{.index = index.view(),
                       .source = source.view(),
                       .axes = layout.axes,
                       .batch_dims = layout.batch_dims,
                       .reduce = reduce,
                       .include_self = include_self};
    if (input.has_value()) {
      args.input = input->view();
    } else {
      args.shape = layout.target_shape;
    }
    return args;
  }
  absl::StatusOr<Tensor> Reference() const {
    std::optional<TensorView> input_view;
    if (input.has_value()) input_view = input->view();
    return ReferenceScatterNd(input_view, input.has_value() ? Shape{} : layout.target_shape,
                              index.view(), source.view(), layout.axes, layout.batch_dims, reduce,
                              include_self);
  }
  // At most this many values are reduced into one element.
  int64_t MaxTerms() const { return Count(layout.positions) + 1; }
};

ScatterNdCase RandomScatterNdCase(DataType dtype, Reduction reduce, bool include_self,
                                  bool axes_form, absl::BitGen& gen) {
  ScatterNdCase c;
  c.reduce = reduce;
  c.include_self = include_self;
  c.layout = axes_form ? RandomAxesLayout(gen) : RandomTensorFlowLayout(gen);
  Shape source_shape = c.layout.positions;
  if (axes_form) {
    for (int64_t& size : source_shape) {
      if (absl::Bernoulli(gen, 0.3))
        size += absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 2);
    }
  } else {
    source_shape.insert(source_shape.end(), c.layout.slice_shape.begin(),
                        c.layout.slice_shape.end());
  }
  const testing::ValueOptions values = testing::ValuesForReduction(reduce);
  // Without an input, `shape = []` means rank-0 zeros.
  const bool zeros = absl::Bernoulli(gen, 0.2);
  if (!zeros) {
    c.input = MakeOperand(RandomTensor(dtype, c.layout.target_shape, gen, values),
                          absl::Bernoulli(gen, 0.25));
  }
  const IndexPattern pattern = testing::RandomIndexPattern(gen);
  const DataType index_dtype = absl::Bernoulli(gen, 0.5) ? DataType::kInt32 : DataType::kInt64;
  c.index =
      MakeOperand(NdIndex(index_dtype, c.layout.positions, c.layout.component_sizes, pattern, gen),
                  absl::Bernoulli(gen, 0.2));
  c.source =
      MakeOperand(RandomTensor(dtype, source_shape, gen, values), absl::Bernoulli(gen, 0.25));
  c.description =
      absl::StrCat(c.layout.Describe(), zeros ? " (zeros of shape)" : "",
                   c.input.has_value() && c.input->gapped ? " (strided input)" : "", " src ",
                   ShapeString(source_shape), c.source.gapped ? " (strided)" : "", " ",
                   std::string(DataTypeName(index_dtype)), " ", testing::IndexPatternName(pattern),
                   c.index.gapped ? " (strided index)" : "");
  return c;
}

// ExpectScatterNdMatchesReference runs `c` on the runner's device (a case with no GPU form is
// skipped, and counted) and compares the result with the reference's.
void ExpectScatterNdMatchesReference(const ScatterNdCase& c, DeviceRunner& runner) {
  SCOPED_TRACE(c.description);
  const absl::StatusOr<Tensor> actual = runner.Run(c.Args());
  if (HasNoDeviceForm(actual.status())) return;
  testing::ExpectReductionResult("scatter_nd", c.source.tensor.dtype(), c.reduce, c.MaxTerms(),
                                 actual, c.Reference());
}

// Over dtype x reduction x include_self x device: the same cases on the CPU and on CUDA (where a
// dtype and reduction without a GPU kernel, complex128 PROD, skips).
class ScatterNdRandomTest : public testing::DeviceDtypeReductionTest {};

TEST_P(ScatterNdRandomTest, TensorFlowFormMatchesReference) {
  for (uint64_t seed = 0; seed < 80; ++seed) {
    absl::BitGen gen = SeededGen(ParamSeed() * 7919 + seed, kNdSeedSalt);
    ExpectScatterNdMatchesReference(
        RandomScatterNdCase(dtype(), reduce(), include_self(), /*axes_form=*/false, gen), runner());
  }
}

TEST_P(ScatterNdRandomTest, AxesFormMatchesReference) {
  for (uint64_t seed = 0; seed < 80; ++seed) {
    absl::BitGen gen = SeededGen(ParamSeed() * 7919 + seed + 300000, kNdSeedSalt);
    ExpectScatterNdMatchesReference(
        RandomScatterNdCase(dtype(), reduce(), include_self(), /*axes_form=*/true, gen), runner());
  }
}

TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(ScatterNdRandomTest, testing::AllDtypeReductionParams(),
                                      testing::DtypeReductionParamName);

// ---------------------------------------------------------------------------------------------
// Large calls: ~1M addressed elements or more, so the kernels' parallel paths run.

struct LargeLayout {
  const char* name;
  Shape target_shape;
  Shape positions;
  std::vector<int64_t> axes;
  int64_t batch_dims;
};

NdLayout FromLarge(const LargeLayout& large) {
  NdLayout layout;
  layout.target_shape = large.target_shape;
  layout.positions = large.positions;
  layout.axes = large.axes;
  layout.batch_dims = large.batch_dims;
  const int64_t rank = static_cast<int64_t>(large.target_shape.size());
  if (large.axes.empty()) {
    // Every dimension but the last is a batch dimension or indexed: slices are the last one.
    const int64_t k = rank - large.batch_dims - 1;
    for (int64_t j = 0; j < k; ++j) {
      layout.component_sizes.push_back(large.target_shape[large.batch_dims + j]);
    }
    layout.slice_shape =
        Shape(large.target_shape.begin() + large.batch_dims + k, large.target_shape.end());
  } else {
    for (int64_t axis : large.axes) {
      layout.component_sizes.push_back(large.target_shape[axis < 0 ? axis + rank : axis]);
    }
  }
  return layout;
}

// The TensorFlow-form layouts here take slices of the last dimension ("elements": of size 1).
const LargeLayout kLargeGatherLayouts[] = {
    {"elements", {1024, 1024, 1}, {1 << 20}, {}, 0},
    {"slices of 4096, batch_dims 1", {16, 64, 4096}, {16, 16}, {}, 1},
    {"axes [-1]", {512, 2048}, {512, 2048}, {-1}, 0},
    {"axes [2, 0]", {64, 128, 128}, {64, 128, 128}, {2, 0}, 0},
};

TEST(GatherNdLargeTest, MatchesReference) {
  uint64_t seed = 0;
  for (const LargeLayout& large : kLargeGatherLayouts) {
    for (DataType dtype : {DataType::kFloat32, DataType::kInt16}) {
      absl::BitGen gen = SeededGen(1000 + seed++, kNdSeedSalt);
      const NdLayout layout = FromLarge(large);
      SCOPED_TRACE(
          absl::StrCat(large.name, " ", layout.Describe(), " ", std::string(DataTypeName(dtype))));
      const Tensor input = RandomTensor(dtype, layout.target_shape, gen);
      const Tensor index =
          NdIndex(seed % 2 == 0 ? DataType::kInt32 : DataType::kInt64, layout.positions,
                  layout.component_sizes,
                  seed % 3 == 0 ? IndexPattern::kDuplicateHeavy : IndexPattern::kRandom, gen);
      DeviceRunner cpu(TestDevice::kCpu);
      ASSERT_NO_FATAL_FAILURE(
          ExpectGatherNdMatchesReference(input.view(), index.view(), layout, cpu));
    }
  }
}

const LargeLayout kLargeScatterLayouts[] = {
    // 1M single-element updates onto 64k elements.
    {"elements", {256, 256, 1}, {1 << 20}, {}, 0},
    // 128 rows of 16384 onto 64 rows (2M updated elements).
    {"rows of 16384", {64, 16384}, {128}, {}, 0},
    // batch_dims 1, k 1: [64, 64] rows of 512 onto [64, 32, 512] (2M updated elements).
    {"rows of 512, batch_dims 1", {64, 32, 512}, {64, 64}, {}, 1},
    // Scatter along axis 0 in the axes form: 1M updates.
    {"axes [0]", {1024, 1024}, {1024, 1024}, {0}, 0},
    // 24 rows of 65536 onto 4 rows: slices large enough to be split themselves.
    {"rows of 65536", {4, 65536}, {24}, {}, 0},
};

// Per reduction: every large layout, duplicate-heavy indices where the values allow (PROD's
// products of ~250k factors would leave float range), float32 sources, and for ASSIGN and SUM
// int64 sources too (ASSIGN's numbered 0, 1, 2, ... so that the last writer is unambiguous).
// A large ScatterNd call on `large`. `zeros`: no input. int64 ASSIGN sources are numbered 0, 1, 2,
// ... so that the last writer is unambiguous.
ScatterNdCase LargeScatterNdCase(const LargeLayout& large, DataType dtype, Reduction reduce,
                                 bool include_self, bool zeros, IndexPattern pattern,
                                 DataType index_dtype, absl::BitGen& gen) {
  ScatterNdCase c;
  c.reduce = reduce;
  c.include_self = include_self;
  c.layout = FromLarge(large);
  Shape source_shape = c.layout.positions;
  source_shape.insert(source_shape.end(), c.layout.slice_shape.begin(), c.layout.slice_shape.end());
  const testing::ValueOptions values = testing::ValuesForReduction(reduce);
  if (!zeros) {
    c.input = MakeOperand(RandomTensor(dtype, c.layout.target_shape, gen, values), false);
  }
  c.index = MakeOperand(
      NdIndex(index_dtype, c.layout.positions, c.layout.component_sizes, pattern, gen), false);
  if (dtype == DataType::kInt64 && reduce == Reduction::kAssign) {
    Tensor numbered(dtype, source_shape);
    std::iota(numbered.data_as<int64_t>(), numbered.data_as<int64_t>() + numbered.numel(),
              int64_t{0});
    c.source = MakeOperand(std::move(numbered), false);
  } else {
    c.source = MakeOperand(RandomTensor(dtype, source_shape, gen, values), false);
  }
  c.description = absl::StrCat(large.name, " ", c.layout.Describe(), " ",
                               std::string(DataTypeName(dtype)), " ", zeros ? "zeros " : "",
                               testing::IndexPatternName(pattern), " include_self ", include_self);
  return c;
}

void ExpectLargeScatterNdMatchesReference(const ScatterNdCase& c, DeviceRunner& runner) {
  SCOPED_TRACE(c.description);
  const absl::StatusOr<Tensor> actual = runner.Run(c.Args());
  if (HasNoDeviceForm(actual.status())) return;
  // Quarter-step values keep sums exact; products and means round once or a few times.
  testing::ExpectReductionResult("scatter_nd", c.source.tensor.dtype(), c.reduce,
                                 /*max_terms=*/64, actual, c.Reference());
}

// Over reduction x device (on CUDA only the single-axis layout has a GPU form).
// The AMAX/AMIN rule of docs/semantics.md for NaNs and signed zeros (tests/extremum_rule.h) through
// ScatterNd, in the TensorFlow form with k = 1 (planned as a Scatter along one axis) and k = 2 (the
// general form, CPU only): column p of the updates holds order p of a case's values, all reduced
// into element p of the input's last dimension.
class ScatterNdExtremumRuleTest : public testing::DeviceTest<DataType> {
 protected:
  DataType dtype() const { return leading_param(); }
};

TEST_P(ScatterNdExtremumRuleTest, NanAndSignedZeroBitsIgnoreTheOrderOfUpdates) {
  for (const testing::ExtremumCase& rule_case : testing::ExtremumCases(dtype())) {
    const std::vector<std::vector<uint64_t>> orders = testing::AllOrders(rule_case.sources);
    const int64_t columns = static_cast<int64_t>(orders.size());
    const int64_t rows = static_cast<int64_t>(rule_case.sources.size());
    Tensor updates(dtype(), {rows, columns});
    for (int64_t p = 0; p < columns; ++p) {
      for (int64_t k = 0; k < rows; ++k) testing::SetBits(updates, k * columns + p, orders[p][k]);
    }
    for (int64_t components : {1, 2}) {
      Shape input_shape(components, 1);
      input_shape.push_back(columns);
      Tensor input(dtype(), input_shape);
      for (int64_t p = 0; p < columns; ++p) testing::SetBits(input, p, rule_case.input);
      Tensor index = Tensor::Zeros(DataType::kInt64, {rows, components});
      for (Reduction reduce : {Reduction::kAmax, Reduction::kAmin}) {
        for (bool include_self : {true, false}) {
          SCOPED_TRACE(absl::StrCat(rule_case.name, " k ", components, " ",
                                    std::string(ReductionName(reduce)), " include_self ",
                                    include_self));
          absl::StatusOr<Tensor> out = runner().Run(ScatterNdArgs{.input = input.view(),
                                                                  .index = index.view(),
                                                                  .source = updates.view(),
                                                                  .reduce = reduce,
                                                                  .include_self = include_self});
          if (HasNoDeviceForm(out.status())) continue;
          ASSERT_TRUE(out.ok()) << out.status();
          const uint64_t expected = testing::SpecExtremum(dtype(), reduce, rule_case.input,
                                                          rule_case.sources, include_self);
          for (int64_t p = 0; p < columns; ++p) {
            ASSERT_EQ(testing::BitsAt(*out, p), expected) << "order " << p;
          }
        }
      }
    }
  }
}

TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(ScatterNdExtremumRuleTest,
                                      ::testing::ValuesIn(testing::kExtremumDtypes),
                                      testing::DataTypeParamName);

class ScatterNdLargeTest : public testing::DeviceTest<Reduction> {};

TEST_P(ScatterNdLargeTest, MatchesReference) {
  const Reduction reduce = leading_param();
  uint64_t seed = 0;
  for (const LargeLayout& large : kLargeScatterLayouts) {
    for (DataType dtype : {DataType::kInt64, DataType::kFloat32}) {
      ++seed;
      if (dtype == DataType::kInt64 && reduce != Reduction::kAssign && reduce != Reduction::kSum) {
        continue;
      }
      absl::BitGen gen = SeededGen(2000 + 100 * static_cast<uint64_t>(reduce) + seed, kNdSeedSalt);
      ExpectLargeScatterNdMatchesReference(
          LargeScatterNdCase(
              large, dtype, reduce,
              /*include_self=*/(seed + static_cast<uint64_t>(reduce)) % 2 == 0,
              /*zeros=*/seed % 4 == 1,
              reduce == Reduction::kProd ? IndexPattern::kRandom : IndexPattern::kDuplicateHeavy,
              seed % 2 == 0 ? DataType::kInt32 : DataType::kInt64, gen),
          runner());
    }
  }
}

TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(ScatterNdLargeTest,
                                      ::testing::ValuesIn(testing::kAllReductions),
                                      testing::ReductionParamName);

// The kernels size their work split by the caller's task arena: in a 16-slot arena ScatterNd
// deals destinations to 64 buckets whatever this machine's core count, the split a 16-core
// server runs.
TEST(ScatterNdArenaTest, SixteenSlotArenaMatchesReference) {
  tbb::task_arena arena(16);
  uint64_t seed = 0;
  for (const LargeLayout& large : {kLargeScatterLayouts[0], kLargeScatterLayouts[2]}) {
    for (Reduction reduce : {Reduction::kAssign, Reduction::kSum}) {
      for (IndexPattern pattern : {IndexPattern::kDuplicateHeavy, IndexPattern::kRandom}) {
        absl::BitGen gen = SeededGen(3000 + seed++, kNdSeedSalt);
        const ScatterNdCase c =
            LargeScatterNdCase(large, DataType::kInt64, reduce, /*include_self=*/seed % 2 == 0,
                               /*zeros=*/false, pattern, DataType::kInt64, gen);
        absl::StatusOr<Tensor> actual;
        arena.execute([&] { actual = ScatterNd(c.Args()); });
        SCOPED_TRACE(c.description);
        testing::ExpectReductionResult("scatter_nd", DataType::kInt64, reduce, 1, actual,
                                       c.Reference());
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The identities of docs/semantics.md.

// idx[..., None]: the same data with a trailing dimension of size 1.
TensorView WithTrailingOne(const TensorView& index) {
  Shape shape = index.shape();
  shape.push_back(1);
  Shape strides = index.strides();
  strides.push_back(1);
  return TensorView(index.dtype(), shape, strides, index.data());
}

// A random Gather/Scatter-shaped call of rank 1-5: index within the input off the axis, and, when
// `unique`, within it along the axis too with distinct values along every line.
struct AlongAxisCase {
  Shape input_shape;
  Shape index_shape;
  int64_t axis = 0;  // Possibly negative.
  Tensor index;
  std::string description;
};

AlongAxisCase RandomAlongAxisCase(absl::BitGen& gen, bool unique) {
  AlongAxisCase c;
  const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 5);
  c.input_shape = RandomShape(gen, rank);
  const int64_t axis = absl::Uniform<int64_t>(gen, 0, rank);
  const int64_t axis_size = c.input_shape[axis];
  c.index_shape = Shape(rank);
  for (int64_t d = 0; d < rank; ++d) {
    if (d == axis) {
      c.index_shape[d] = axis_size == 0 ? 0
                         : unique ? absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, axis_size)
                                  : absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, 5);
    } else {
      c.index_shape[d] =
          absl::Bernoulli(gen, 0.6)
              ? c.input_shape[d]
              : absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, c.input_shape[d]);
    }
  }
  IndexPattern pattern = unique ? IndexPattern::kUnique : testing::RandomIndexPattern(gen);
  if (pattern == IndexPattern::kUnique && c.index_shape[axis] > axis_size) {
    pattern = IndexPattern::kRandom;
  }
  const DataType index_dtype = absl::Bernoulli(gen, 0.5) ? DataType::kInt32 : DataType::kInt64;
  c.index = RandomIndex(index_dtype, c.index_shape, axis, axis_size, pattern, gen);
  c.axis = absl::Bernoulli(gen, 0.4) ? axis - rank : axis;
  c.description =
      absl::StrCat("input ", ShapeString(c.input_shape), " index ", ShapeString(c.index_shape), " ",
                   std::string(DataTypeName(index_dtype)), " ", testing::IndexPatternName(pattern),
                   " axis ", c.axis);
  return c;
}

// Over dtype x device: both sides of each equality on the instance's device.
class NdEqualityTest : public testing::DeviceTest<DataType> {
 protected:
  DataType dtype() const { return leading_param(); }
};

// Gather(x, ax, idx) == GatherNd(x, idx[..., None], axes=[ax]).
TEST_P(NdEqualityTest, GatherEqualsGatherNdWithOneAxis) {
  for (uint64_t seed = 0; seed < 60; ++seed) {
    absl::BitGen gen = SeededGen(static_cast<uint64_t>(dtype()) * 31 + seed + 700000, kNdSeedSalt);
    const AlongAxisCase c = RandomAlongAxisCase(gen, /*unique=*/false);
    SCOPED_TRACE(c.description);
    const Tensor input = RandomTensor(dtype(), c.input_shape, gen, {.nan_fraction = 0.05});
    const absl::StatusOr<Tensor> gathered =
        runner().Run(GatherArgs{.input = input.view(), .index = c.index.view(), .axis = c.axis});
    const absl::StatusOr<Tensor> gathered_nd = runner().Run(GatherNdArgs{
        .input = input.view(), .index = WithTrailingOne(c.index.view()), .axes = {c.axis}});
    if (HasNoDeviceForm(gathered.status()) || HasNoDeviceForm(gathered_nd.status())) continue;
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    ASSERT_TRUE(gathered_nd.ok()) << gathered_nd.status();
    ExpectTensorsNear(*gathered_nd, *gathered);
  }
}

// Scatter(x, ax, idx, src, ASSIGN) == ScatterNd(x, idx[..., None], src, axes=[ax]) for idx unique
// along ax; src may be larger than idx (its leading block is read by both).
TEST_P(NdEqualityTest, ScatterAssignEqualsScatterNdWithOneAxis) {
  for (uint64_t seed = 0; seed < 60; ++seed) {
    absl::BitGen gen = SeededGen(static_cast<uint64_t>(dtype()) * 31 + seed + 800000, kNdSeedSalt);
    const AlongAxisCase c = RandomAlongAxisCase(gen, /*unique=*/true);
    Shape source_shape = c.index_shape;
    for (int64_t& size : source_shape) {
      if (absl::Bernoulli(gen, 0.3))
        size += absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 2);
    }
    SCOPED_TRACE(absl::StrCat(c.description, " src ", ShapeString(source_shape)));
    const Tensor input = RandomTensor(dtype(), c.input_shape, gen, {.nan_fraction = 0.05});
    const Tensor source = RandomTensor(dtype(), source_shape, gen, {.nan_fraction = 0.05});
    const absl::StatusOr<Tensor> scattered =
        runner().Run(ScatterArgs{.input = input.view(),
                                 .index = c.index.view(),
                                 .source = source.view(),
                                 .axis = c.axis,
                                 .reduce = Reduction::kAssign});
    const absl::StatusOr<Tensor> scattered_nd =
        runner().Run(ScatterNdArgs{.input = input.view(),
                                   .index = WithTrailingOne(c.index.view()),
                                   .source = source.view(),
                                   .axes = {c.axis},
                                   .reduce = Reduction::kAssign});
    if (HasNoDeviceForm(scattered.status()) || HasNoDeviceForm(scattered_nd.status())) continue;
    ASSERT_TRUE(scattered.ok()) << scattered.status();
    ASSERT_TRUE(scattered_nd.ok()) << scattered_nd.status();
    ExpectTensorsNear(*scattered_nd, *scattered);
  }
}

TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(NdEqualityTest, ::testing::ValuesIn(kAllDataTypes),
                                      testing::DataTypeParamName);

// Beyond the list of docs/semantics.md, the same equality holds for every reduction and for
// duplicate indices, since both ops define ASSIGN's duplicates as last-in-row-major-order.
class NdScatterEqualityTest : public testing::DeviceDtypeReductionTest {};

TEST_P(NdScatterEqualityTest, ScatterEqualsScatterNdWithOneAxis) {
  if (!testing::ReductionDefined(dtype(), reduce())) GTEST_SKIP();
  for (uint64_t seed = 0; seed < 8; ++seed) {
    absl::BitGen gen = SeededGen(ParamSeed() * 131 + seed + 900000, kNdSeedSalt);
    const AlongAxisCase c = RandomAlongAxisCase(gen, /*unique=*/false);
    SCOPED_TRACE(c.description);
    const testing::ValueOptions values = testing::ValuesForReduction(reduce());
    const Tensor input = RandomTensor(dtype(), c.input_shape, gen, values);
    const Tensor source = RandomTensor(dtype(), c.index_shape, gen, values);
    const absl::StatusOr<Tensor> scattered =
        runner().Run(ScatterArgs{.input = input.view(),
                                 .index = c.index.view(),
                                 .source = source.view(),
                                 .axis = c.axis,
                                 .reduce = reduce(),
                                 .include_self = include_self()});
    const absl::StatusOr<Tensor> scattered_nd =
        runner().Run(ScatterNdArgs{.input = input.view(),
                                   .index = WithTrailingOne(c.index.view()),
                                   .source = source.view(),
                                   .axes = {c.axis},
                                   .reduce = reduce(),
                                   .include_self = include_self()});
    if (HasNoDeviceForm(scattered.status()) || HasNoDeviceForm(scattered_nd.status())) continue;
    ASSERT_TRUE(scattered.ok()) << scattered.status();
    ASSERT_TRUE(scattered_nd.ok()) << scattered_nd.status();
    ExpectTensorsNear(*scattered_nd, *scattered,
                      ToleranceFor(dtype(), reduce(), Count(c.index_shape) + 1));
  }
}

TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(NdScatterEqualityTest, testing::AllDtypeReductionParams(),
                                      testing::DtypeReductionParamName);

// ---------------------------------------------------------------------------------------------
// Hand cases from the TensorFlow and Paddle documentation and the compiler design's gather_nd.

Shape ShapeOf(const absl::StatusOr<Tensor>& tensor) {
  return tensor.ok() ? tensor->shape() : Shape{-1};
}

// GatherNd through the kernel, checked against the reference too.
absl::StatusOr<Tensor> GatherNdChecked(const GatherNdArgs& args) {
  absl::StatusOr<Tensor> actual = GatherNd(args);
  const absl::StatusOr<Tensor> expected =
      ReferenceGatherNd(args.input, args.index, args.axes, args.batch_dims);
  EXPECT_EQ(actual.ok(), expected.ok()) << actual.status() << " vs " << expected.status();
  if (actual.ok() && expected.ok()) ExpectTensorsNear(*actual, *expected);
  return actual;
}

absl::StatusOr<Tensor> ScatterNdChecked(const ScatterNdArgs& args) {
  absl::StatusOr<Tensor> actual = ScatterNd(args);
  const absl::StatusOr<Tensor> expected =
      ReferenceScatterNd(args.input, args.shape, args.index, args.source, args.axes,
                         args.batch_dims, args.reduce, args.include_self);
  EXPECT_EQ(actual.ok(), expected.ok()) << actual.status() << " vs " << expected.status();
  if (actual.ok() && expected.ok()) {
    ExpectTensorsNear(*actual, *expected,
                      ToleranceFor(args.source.dtype(), args.reduce, args.index.numel() + 1));
  }
  return actual;
}

// The TensorFlow docs' letters as numbers: a=1, b=2, c=3, d=4; a0=10, b0=20, c0=30, d0=40,
// a1=11, b1=21, c1=31, d1=41.
TEST(GatherNdTest, TensorFlowDocExamples) {
  const Tensor matrix = TensorFromValues(DataType::kFloat32, {2, 2}, {1, 2, 3, 4});
  // tf.gather_nd([['a', 'b'], ['c', 'd']], [[0, 0], [1, 1]]) == ['a', 'd'].
  const Tensor diagonal = IndexTensor({2, 2}, {0, 0, 1, 1});
  absl::StatusOr<Tensor> out = GatherNdChecked({.input = matrix.view(), .index = diagonal.view()});
  EXPECT_EQ(ShapeOf(out), Shape({2}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({1, 4}));
  // Indices [[1], [0]]: the rows swapped.
  const Tensor rows = IndexTensor({2, 1}, {1, 0}, DataType::kInt32);
  out = GatherNdChecked({.input = matrix.view(), .index = rows.view()});
  EXPECT_EQ(ShapeOf(out), Shape({2, 2}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({3, 4, 1, 2}));
  // Indices [[1]]: [['c', 'd']].
  const Tensor one_row = IndexTensor({1, 1}, {1});
  out = GatherNdChecked({.input = matrix.view(), .index = one_row.view()});
  EXPECT_EQ(ShapeOf(out), Shape({1, 2}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({3, 4}));
  // Indices [[[0, 0]], [[0, 1]]] on a matrix: [['a'], ['b']].
  const Tensor nested = IndexTensor({2, 1, 2}, {0, 0, 0, 1});
  out = GatherNdChecked({.input = matrix.view(), .index = nested.view()});
  EXPECT_EQ(ShapeOf(out), Shape({2, 1}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({1, 2}));

  const Tensor cube =
      TensorFromValues(DataType::kFloat32, {2, 2, 2}, {10, 20, 30, 40, 11, 21, 31, 41});
  // Indices [[1]]: [[['a1', 'b1'], ['c1', 'd1']]].
  out = GatherNdChecked({.input = cube.view(), .index = one_row.view()});
  EXPECT_EQ(ShapeOf(out), Shape({1, 2, 2}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({11, 21, 31, 41}));
  // Indices [[0, 1], [1, 0]]: [['c0', 'd0'], ['a1', 'b1']].
  const Tensor pairs = IndexTensor({2, 2}, {0, 1, 1, 0});
  out = GatherNdChecked({.input = cube.view(), .index = pairs.view()});
  EXPECT_EQ(ShapeOf(out), Shape({2, 2}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({30, 40, 11, 21}));
  // Indices [[0, 0, 1], [1, 0, 1]]: ['b0', 'b1'].
  const Tensor triples = IndexTensor({2, 3}, {0, 0, 1, 1, 0, 1});
  out = GatherNdChecked({.input = cube.view(), .index = triples.view()});
  EXPECT_EQ(ShapeOf(out), Shape({2}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({20, 21}));
}

TEST(GatherNdTest, TensorFlowBatchDimsExamples) {
  const Tensor cube =
      TensorFromValues(DataType::kInt32, {2, 2, 2}, {10, 20, 30, 40, 11, 21, 31, 41});
  // tf.gather_nd(indices=[[1], [0]], params=cube, batch_dims=1) == [['c0', 'd0'], ['a1', 'b1']].
  const Tensor rows = IndexTensor({2, 1}, {1, 0});
  absl::StatusOr<Tensor> out =
      GatherNdChecked({.input = cube.view(), .index = rows.view(), .batch_dims = 1});
  EXPECT_EQ(ShapeOf(out), Shape({2, 2}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({30, 40, 11, 21}));
  // indices=[[[1]], [[0]]]: [[['c0', 'd0']], [['a1', 'b1']]].
  const Tensor nested = IndexTensor({2, 1, 1}, {1, 0});
  out = GatherNdChecked({.input = cube.view(), .index = nested.view(), .batch_dims = 1});
  EXPECT_EQ(ShapeOf(out), Shape({2, 1, 2}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({30, 40, 11, 21}));
  // indices=[[[1, 0]], [[0, 1]]]: [['c0'], ['b1']].
  const Tensor pairs = IndexTensor({2, 1, 2}, {1, 0, 0, 1});
  out = GatherNdChecked({.input = cube.view(), .index = pairs.view(), .batch_dims = 1});
  EXPECT_EQ(ShapeOf(out), Shape({2, 1}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({30, 21}));
  // batch_dims = 2 with k = 1: per (i, j), element idx[i, j, 0] of cube[i, j].
  const Tensor last = IndexTensor({2, 2, 1}, {1, 0, -1, -2});
  out = GatherNdChecked({.input = cube.view(), .index = last.view(), .batch_dims = 2});
  EXPECT_EQ(ShapeOf(out), Shape({2, 2}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({20, 30, 21, 31}));
}

TEST(GatherNdTest, PaddleDocExample) {
  // x = [[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 10], [11, 12]]]
  const Tensor x =
      TensorFromValues(DataType::kInt64, {2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  const Tensor first = IndexTensor({1, 1}, {1});
  absl::StatusOr<Tensor> out = GatherNdChecked({.input = x.view(), .index = first.view()});
  EXPECT_EQ(ShapeOf(out), Shape({1, 3, 2}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({7, 8, 9, 10, 11, 12}));
  const Tensor second = IndexTensor({1, 2}, {0, 2});
  out = GatherNdChecked({.input = x.view(), .index = second.view()});
  EXPECT_EQ(ShapeOf(out), Shape({1, 2}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({5, 6}));
  const Tensor third = IndexTensor({1, 3}, {1, 2, 1});
  out = GatherNdChecked({.input = x.view(), .index = third.view()});
  EXPECT_EQ(ShapeOf(out), Shape({1}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({12}));
}

TEST(GatherNdTest, EmptyCoordinatesTakeWholeSlices) {
  // k = 0: every row of B takes all of x (TensorFlow and ONNX allow it).
  const Tensor x = TensorFromValues(DataType::kFloat64, {2, 2}, {1, 2, 3, 4});
  const Tensor none = IndexTensor({3, 0}, {});
  absl::StatusOr<Tensor> out = GatherNdChecked({.input = x.view(), .index = none.view()});
  EXPECT_EQ(ShapeOf(out), Shape({3, 2, 2}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}));
  // A scalar input with k = 0.
  const Tensor scalar = TensorFromValues(DataType::kFloat64, {}, {7});
  out = GatherNdChecked({.input = scalar.view(), .index = none.view()});
  EXPECT_EQ(ShapeOf(out), Shape({3}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({7, 7, 7}));
  // A rank-1 index with k = 0 returns x itself.
  const Tensor empty_row = IndexTensor({0}, {});
  out = GatherNdChecked({.input = x.view(), .index = empty_row.view()});
  EXPECT_EQ(ShapeOf(out), Shape({2, 2}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({1, 2, 3, 4}));
}

TEST(GatherNdTest, NegativeIndicesCountFromTheEnd) {
  const Tensor x = TensorFromValues(DataType::kUInt8, {2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor index = IndexTensor({3, 2}, {-1, -1, -2, 0, 1, -3}, DataType::kInt32);
  EXPECT_EQ(DoublesIfOk(GatherNdChecked({.input = x.view(), .index = index.view()})),
            std::vector<double>({6, 1, 4}));
}

TEST(GatherNdTest, EmptyPositionsAndEmptySlices) {
  const Tensor x = TensorFromValues(DataType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor no_rows = IndexTensor({0, 1}, {});
  absl::StatusOr<Tensor> out = GatherNdChecked({.input = x.view(), .index = no_rows.view()});
  EXPECT_EQ(ShapeOf(out), Shape({0, 3}));
  const Tensor empty_x = Tensor::Zeros(DataType::kFloat32, {2, 0});
  const Tensor rows = IndexTensor({2, 1}, {1, -2});
  out = GatherNdChecked({.input = empty_x.view(), .index = rows.view()});
  EXPECT_EQ(ShapeOf(out), Shape({2, 0}));
  // An empty addressed axis admits no index value, but no rows means nothing to check.
  const Tensor empty_rows = Tensor::Zeros(DataType::kFloat32, {0, 3});
  out = GatherNdChecked({.input = empty_rows.view(), .index = no_rows.view()});
  EXPECT_EQ(ShapeOf(out), Shape({0, 3}));
  // No coordinates and empty slices: an index of 2^50 positions carries no bytes, and there is
  // nothing to check, read or write (once 2^50 empty copies, or a position table of 2^53 bytes).
  const Tensor empty_input = Tensor::Zeros(DataType::kFloat32, {0});
  const Tensor no_coordinates = IndexTensor({int64_t{1} << 50, 0}, {});
  // (Not against the reference, which walks every position.)
  out = GatherNd({.input = empty_input.view(), .index = no_coordinates.view()});
  EXPECT_EQ(ShapeOf(out), Shape({int64_t{1} << 50, 0}));
  const Tensor no_updates = Tensor::Zeros(DataType::kFloat32, {int64_t{1} << 50, 0});
  absl::StatusOr<Tensor> scattered = ScatterNd({.input = empty_input.view(),
                                                .index = no_coordinates.view(),
                                                .source = no_updates.view(),
                                                .reduce = Reduction::kSum});
  ASSERT_TRUE(scattered.ok()) << scattered.status();
  EXPECT_EQ(scattered->shape(), Shape({0}));
}

// The compiler design's gather_nd(dims=axes): A = range(12).reshape([4, 3]), index = [[0, 1, 1],
// [3, 2, 0]]; gather_nd(dims=[d], input=A, index=index.unsqueeze(-1)) is gather(A, dim=d, index).
TEST(GatherNdTest, SeedGatherNdWithDims) {
  const Tensor a =
      TensorFromValues(DataType::kFloat32, {4, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  const Tensor index = IndexTensor({2, 3, 1}, {0, 1, 1, 3, 2, 0});
  absl::StatusOr<Tensor> b1 =
      GatherNdChecked({.input = a.view(), .index = index.view(), .axes = {0}});
  EXPECT_EQ(ShapeOf(b1), Shape({2, 3}));
  EXPECT_EQ(DoublesIfOk(b1), std::vector<double>({0, 4, 5, 9, 7, 2}));
  const Tensor columns = IndexTensor({2, 3, 1}, {0, 1, 1, 0, 2, 0});
  absl::StatusOr<Tensor> b2 =
      GatherNdChecked({.input = a.view(), .index = columns.view(), .axes = {-1}});
  EXPECT_EQ(DoublesIfOk(b2), std::vector<double>({0, 1, 1, 3, 5, 3}));
  // Two dims, listed in reverse: out[i, j] = A[index[i, j, 1], index[i, j, 0]].
  const Tensor both = IndexTensor({2, 2, 2}, {2, 3, 0, 0, 1, 1, -1, -4});
  absl::StatusOr<Tensor> b3 =
      GatherNdChecked({.input = a.view(), .index = both.view(), .axes = {1, 0}});
  EXPECT_EQ(ShapeOf(b3), Shape({2, 2}));
  EXPECT_EQ(DoublesIfOk(b3), std::vector<double>({11, 0, 4, 2}));
  // B smaller than A off the indexed axis: only A's leading columns are addressed.
  const Tensor narrow = IndexTensor({1, 2, 1}, {3, 1});
  absl::StatusOr<Tensor> b4 =
      GatherNdChecked({.input = a.view(), .index = narrow.view(), .axes = {0}});
  EXPECT_EQ(ShapeOf(b4), Shape({1, 2}));
  EXPECT_EQ(DoublesIfOk(b4), std::vector<double>({9, 4}));
}

TEST(ScatterNdTest, SeedScatterNdWithDims) {
  // C = zeros(4, 3); scatter(C, dim=0, index, src=B_1) == scatter_nd(dims=[0], ...).
  const Tensor c = Tensor::Zeros(DataType::kFloat32, {4, 3});
  const Tensor index = IndexTensor({2, 3, 1}, {0, 1, 1, 3, 2, 0});
  const Tensor b1 = TensorFromValues(DataType::kFloat32, {2, 3}, {0, 4, 5, 9, 7, 2});
  const std::vector<double> b3 = {0, 0, 2, 0, 4, 5, 0, 7, 0, 9, 0, 0};
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked(
                {.input = c.view(), .index = index.view(), .source = b1.view(), .axes = {0}})),
            b3);
  // The same with the input absent: zeros of `shape`.
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked(
                {.shape = {4, 3}, .index = index.view(), .source = b1.view(), .axes = {0}})),
            b3);
}

TEST(ScatterNdTest, TensorFlowDocExamples) {
  const Tensor zeros = Tensor::Zeros(DataType::kInt32, {8});
  const Tensor index = IndexTensor({4, 1}, {4, 3, 1, 7});
  const Tensor updates = TensorFromValues(DataType::kInt32, {4}, {9, 10, 11, 12});
  // tf.scatter_nd(indices, updates, shape=[8]).
  EXPECT_EQ(DoublesIfOk(
                ScatterNdChecked({.shape = {8}, .index = index.view(), .source = updates.view()})),
            std::vector<double>({0, 11, 0, 10, 9, 0, 0, 12}));
  // tf.tensor_scatter_nd_update / _add / _max / _min on [1..8].
  const Tensor tensor = TensorFromValues(DataType::kInt32, {8}, {1, 2, 3, 4, 5, 6, 7, 8});
  ScatterNdArgs args{.input = tensor.view(), .index = index.view(), .source = updates.view()};
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked(args)), std::vector<double>({1, 11, 3, 10, 9, 6, 7, 12}));
  args.reduce = Reduction::kSum;
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked(args)), std::vector<double>({1, 13, 3, 14, 14, 6, 7, 20}));
  const Tensor mixed = TensorFromValues(DataType::kInt32, {4}, {4, 10, -1, 12});
  args.source = mixed.view();
  args.reduce = Reduction::kAmax;
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked(args)), std::vector<double>({1, 2, 3, 10, 5, 6, 7, 12}));
  args.reduce = Reduction::kAmin;
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked(args)), std::vector<double>({1, -1, 3, 4, 4, 6, 7, 8}));
  // tf.scatter_nd with slices: indices [[0], [2]] put two 4x4 blocks into a 4x4x4 zeros.
  std::vector<double> blocks(32);
  std::iota(blocks.begin(), blocks.end(), 1.0);
  const Tensor block_updates = TensorFromValues(DataType::kFloat32, {2, 4, 4}, blocks);
  const Tensor block_index = IndexTensor({2, 1}, {0, 2});
  absl::StatusOr<Tensor> out = ScatterNdChecked(
      {.shape = {4, 4, 4}, .index = block_index.view(), .source = block_updates.view()});
  EXPECT_EQ(ShapeOf(out), Shape({4, 4, 4}));
  std::vector<double> expected(64, 0.0);
  std::iota(expected.begin(), expected.begin() + 16, 1.0);
  std::iota(expected.begin() + 32, expected.begin() + 48, 17.0);
  EXPECT_EQ(DoublesIfOk(out), expected);
}

TEST(ScatterNdTest, PaddleScatterNdAddDocExamples) {
  // Case 1: ref = [0, 1, 2, 3, 4, 5], index = [[1], [2], [3], [1]], updates = [9, 10, 11, 12]
  // -> [0, 22, 12, 14, 4, 5].
  const Tensor ref = TensorFromValues(DataType::kFloat32, {6}, {0, 1, 2, 3, 4, 5});
  const Tensor index = IndexTensor({4, 1}, {1, 2, 3, 1});
  const Tensor updates = TensorFromValues(DataType::kFloat32, {4}, {9, 10, 11, 12});
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked({.input = ref.view(),
                                          .index = index.view(),
                                          .source = updates.view(),
                                          .reduce = Reduction::kSum})),
            std::vector<double>({0, 22, 12, 14, 4, 5}));
  // Case 2: ref = [[65, 17], [-14, -25]], index = [[], []], updates =
  // [[[-1, -2], [1, 2]], [[3, 4], [-3, -4]]] -> [[67, 19], [-16, -27]].
  const Tensor ref2 = TensorFromValues(DataType::kInt64, {2, 2}, {65, 17, -14, -25});
  const Tensor empty_rows = IndexTensor({2, 0}, {});
  const Tensor updates2 =
      TensorFromValues(DataType::kInt64, {2, 2, 2}, {-1, -2, 1, 2, 3, 4, -3, -4});
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked({.input = ref2.view(),
                                          .index = empty_rows.view(),
                                          .source = updates2.view(),
                                          .reduce = Reduction::kSum})),
            std::vector<double>({67, 19, -16, -27}));
}

// paddle.scatter_nd_add(x[3, 5, 9, 10], index [[1, 1], [0, 1], [1, 3]], updates[3, 9, 10]) and
// paddle.scatter_nd(index, updates, shape=[3, 5, 9, 10]): x, updates numbered.
TEST(ScatterNdTest, PaddleScatterNdAddAndScatterNdShapes) {
  std::vector<double> x_values(3 * 5 * 9 * 10);
  std::iota(x_values.begin(), x_values.end(), 0.0);
  std::vector<double> update_values(3 * 9 * 10);
  std::iota(update_values.begin(), update_values.end(), 10000.0);
  const Tensor x = TensorFromValues(DataType::kFloat64, {3, 5, 9, 10}, x_values);
  const Tensor updates = TensorFromValues(DataType::kFloat64, {3, 9, 10}, update_values);
  const Tensor index = IndexTensor({3, 2}, {1, 1, 0, 1, 1, 3});
  const int64_t targets[] = {1 * 5 + 1, 0 * 5 + 1, 1 * 5 + 3};
  std::vector<double> added = x_values;
  std::vector<double> scattered(x_values.size(), 0.0);
  for (int64_t row = 0; row < 3; ++row) {
    for (int64_t e = 0; e < 90; ++e) {
      added[targets[row] * 90 + e] += update_values[row * 90 + e];
      scattered[targets[row] * 90 + e] += update_values[row * 90 + e];
    }
  }
  absl::StatusOr<Tensor> out = ScatterNdChecked({.input = x.view(),
                                                 .index = index.view(),
                                                 .source = updates.view(),
                                                 .reduce = Reduction::kSum});
  EXPECT_EQ(ShapeOf(out), Shape({3, 5, 9, 10}));
  EXPECT_EQ(DoublesIfOk(out), added);
  out = ScatterNdChecked({.shape = {3, 5, 9, 10},
                          .index = index.view(),
                          .source = updates.view(),
                          .reduce = Reduction::kSum});
  EXPECT_EQ(DoublesIfOk(out), scattered);
}

TEST(ScatterNdTest, AssignDuplicatesLastWriterWins) {
  const Tensor x = TensorFromValues(DataType::kFloat32, {2, 2}, {0, 0, 0, 0});
  const Tensor index = IndexTensor({2, 2, 2}, {1, 1, 0, 0, -1, -1, 1, 1});
  const Tensor source = TensorFromValues(DataType::kFloat32, {2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked(
                {.input = x.view(), .index = index.view(), .source = source.view()})),
            std::vector<double>({2, 0, 0, 4}));
  // Slices: rows 0, 1, 0 -> row 0 from the third slice.
  const Tensor rows = IndexTensor({3, 1}, {0, 1, -2});
  const Tensor slices = TensorFromValues(DataType::kFloat32, {3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked(
                {.input = x.view(), .index = rows.view(), .source = slices.view()})),
            std::vector<double>({5, 6, 3, 4}));
}

TEST(ScatterNdTest, IncludeSelfAndMean) {
  const Tensor x = TensorFromValues(DataType::kInt32, {3}, {-3, 5, 7});
  const Tensor index = IndexTensor({3, 1}, {0, 1, 1});
  const Tensor source = TensorFromValues(DataType::kInt32, {3}, {-4, 2, 4});
  ScatterNdArgs args{.input = x.view(),
                     .index = index.view(),
                     .source = source.view(),
                     .reduce = Reduction::kMean};
  // PyTorch: the mean of -3 and -4 is -4; (5 + 2 + 4) / 3 floors to 3.
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked(args)), std::vector<double>({-4, 3, 7}));
  args.include_self = false;
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked(args)), std::vector<double>({-4, 3, 7}));
  args.reduce = Reduction::kProd;
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked(args)), std::vector<double>({-4, 8, 7}));
  args.include_self = true;
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked(args)), std::vector<double>({12, 40, 7}));
  // Zeros of `shape` without include_self: the untouched element stays 0.
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked({.shape = {3},
                                          .index = index.view(),
                                          .source = source.view(),
                                          .reduce = Reduction::kAmin,
                                          .include_self = false})),
            std::vector<double>({-4, 2, 0}));
}

TEST(ScatterNdTest, AmaxAminPropagateNan) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = TensorFromValues(DataType::kFloat32, {3}, {nan, 1, 1});
  const Tensor index = IndexTensor({3, 1}, {0, 1, 2});
  const Tensor source = TensorFromValues(DataType::kFloat32, {3}, {5, nan, 0});
  for (Reduction reduce : {Reduction::kAmax, Reduction::kAmin}) {
    const std::vector<double> out = DoublesIfOk(ScatterNdChecked(
        {.input = x.view(), .index = index.view(), .source = source.view(), .reduce = reduce}));
    ASSERT_EQ(out.size(), 3u);
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_TRUE(std::isnan(out[1]));
    EXPECT_EQ(out[2], reduce == Reduction::kAmax ? 1 : 0);
  }
}

TEST(ScatterNdTest, BoolReductionsAreLogical) {
  const Tensor x = TensorFromValues(DataType::kBool, {4}, {0, 1, 0, 1});
  const Tensor index = IndexTensor({4, 1}, {0, 0, 1, 1});
  const Tensor source = TensorFromValues(DataType::kBool, {4}, {1, 0, 0, 0});
  ScatterNdArgs args{.input = x.view(), .index = index.view(), .source = source.view()};
  args.reduce = Reduction::kSum;
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked(args)), std::vector<double>({1, 1, 0, 1}));
  args.reduce = Reduction::kProd;
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked(args)), std::vector<double>({0, 0, 0, 1}));
  args.reduce = Reduction::kAmax;
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked(args)), std::vector<double>({1, 1, 0, 1}));
  args.reduce = Reduction::kAmin;
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked(args)), std::vector<double>({0, 0, 0, 1}));
}

TEST(ScatterNdTest, HalfPrecisionSumsAccumulateInFloat32) {
  // 2048 + 1 + 1 in float16: rounding per step would stay at 2048; float32 accumulation gives 2050.
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    const double big = dtype == DataType::kFloat16 ? 2048 : 256;
    const Tensor x = TensorFromValues(dtype, {1}, {big});
    const Tensor index = IndexTensor({2, 1}, {0, 0});
    const Tensor source = TensorFromValues(dtype, {2}, {1, 1});
    EXPECT_EQ(DoublesIfOk(ScatterNdChecked({.input = x.view(),
                                            .index = index.view(),
                                            .source = source.view(),
                                            .reduce = Reduction::kSum})),
              std::vector<double>({big + 2}))
        << DataTypeName(dtype);
  }
}

TEST(ScatterNdTest, ScalarTargets) {
  // TensorFlow form with k = 0 on a rank-0 input: every row updates the one element.
  const Tensor x = TensorFromValues(DataType::kFloat32, {}, {1});
  const Tensor none = IndexTensor({3, 0}, {});
  const Tensor source = TensorFromValues(DataType::kFloat32, {3}, {2, 3, 4});
  absl::StatusOr<Tensor> out = ScatterNdChecked({.input = x.view(),
                                                 .index = none.view(),
                                                 .source = source.view(),
                                                 .reduce = Reduction::kSum});
  EXPECT_EQ(ShapeOf(out), Shape({}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({10}));
  // Without an input, shape = [] is a rank-0 zeros (tf.scatter_nd(indices, updates, shape=[])).
  out =
      ScatterNdChecked({.index = none.view(), .source = source.view(), .reduce = Reduction::kSum});
  EXPECT_EQ(ShapeOf(out), Shape({}));
  EXPECT_EQ(DoublesIfOk(out), std::vector<double>({9}));
  // Axes form on a rank-0 input: the scalar acts as shape [1]; index [k = 1], B = [].
  const Tensor at = IndexTensor({1}, {-1});
  const Tensor five = TensorFromValues(DataType::kFloat32, {}, {5});
  for (const int64_t axis : {0, -1}) {
    out = ScatterNdChecked({.input = x.view(),
                            .index = at.view(),
                            .source = five.view(),
                            .axes = {axis},
                            .reduce = Reduction::kProd});
    EXPECT_EQ(ShapeOf(out), Shape({}));
    EXPECT_EQ(DoublesIfOk(out), std::vector<double>({5}));
  }
}

TEST(GatherNdTest, ScalarInputInTheAxesForm) {
  // Like Gather on a scalar: Gather(x, 0, idx) == GatherNd(x, idx[..., None], axes=[0]).
  const Tensor x = TensorFromValues(DataType::kInt8, {}, {-7});
  const Tensor at = IndexTensor({1}, {0}, DataType::kInt32);
  for (const int64_t axis : {0, -1}) {
    absl::StatusOr<Tensor> out =
        GatherNdChecked({.input = x.view(), .index = at.view(), .axes = {axis}});
    EXPECT_EQ(ShapeOf(out), Shape({}));
    EXPECT_EQ(DoublesIfOk(out), std::vector<double>({-7}));
  }
  const Tensor scalar_index = IndexTensor({}, {-1});
  EXPECT_EQ(DoublesIfOk(Gather(GatherArgs{.input = x.view(), .index = scalar_index.view()})),
            DoublesIfOk(GatherNdChecked({.input = x.view(), .index = at.view(), .axes = {0}})));
}

// Zero-stride views: every index row is the same (the most duplicated index there is), and a
// broadcast input.
TEST(ScatterNdTest, BroadcastViews) {
  const Tensor row = IndexTensor({1, 1}, {2});
  const TensorView same_rows(DataType::kInt64, Shape{5, 1}, Shape{0, 1}, row.data());
  const Tensor x = TensorFromValues(DataType::kInt32, {4}, {1, 1, 1, 1});
  const Tensor source = TensorFromValues(DataType::kInt32, {5}, {3, 1, 4, 1, 5});
  EXPECT_EQ(DoublesIfOk(
                ScatterNdChecked({.input = x.view(), .index = same_rows, .source = source.view()})),
            std::vector<double>({1, 1, 5, 1}));
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked({.input = x.view(),
                                          .index = same_rows,
                                          .source = source.view(),
                                          .reduce = Reduction::kSum})),
            std::vector<double>({1, 1, 15, 1}));
  const Tensor one = TensorFromValues(DataType::kInt32, {}, {9});
  const TensorView nines(DataType::kInt32, Shape{4}, Shape{0}, one.data());
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked({.input = nines,
                                          .index = same_rows,
                                          .source = source.view(),
                                          .reduce = Reduction::kAmin})),
            std::vector<double>({9, 9, 1, 9}));
  EXPECT_EQ(DoublesIfOk(GatherNdChecked({.input = nines, .index = same_rows})),
            std::vector<double>({9, 9, 9, 9, 9}));
}

TEST(ScatterNdTest, InputIsNotModified) {
  const Tensor x = TensorFromValues(DataType::kInt16, {2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor before = x.Clone();
  const Tensor index = IndexTensor({2, 2}, {0, 0, 1, 2});
  const Tensor source = TensorFromValues(DataType::kInt16, {2}, {7, 8});
  EXPECT_EQ(DoublesIfOk(ScatterNdChecked({.input = x.view(),
                                          .index = index.view(),
                                          .source = source.view(),
                                          .reduce = Reduction::kSum})),
            std::vector<double>({8, 2, 3, 4, 5, 14}));
  ExpectTensorsNear(x, before);
}

TEST(NdPlanTest, TwoPhasePlanAndRun) {
  const Tensor x = TensorFromValues(DataType::kFloat32, {2, 3, 4}, std::vector<double>(24, 1));
  const Tensor index = IndexTensor({2, 5, 1}, {0, 1, 2, 0, 1, 2, 1, 0, 2, 1});
  absl::StatusOr<NdPlan> plan =
      PlanGatherNd({.input = x.view(), .index = index.view(), .batch_dims = 1});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->op, "gather_nd");
  EXPECT_EQ(plan->result_dtype, DataType::kFloat32);
  EXPECT_EQ(plan->result_shape, Shape({2, 5, 4}));
  EXPECT_EQ(plan->slice_size, 4);
  EXPECT_EQ(plan->component_axes, Shape({1}));
  EXPECT_EQ(plan->component_sizes, Shape({3}));
  Tensor out(plan->result_dtype, plan->result_shape);
  EXPECT_TRUE(cpu::GatherNd(*plan, out.mutable_view()).ok());
  EXPECT_EQ(ToDoubles(out), std::vector<double>(40, 1));

  const Tensor source = TensorFromValues(DataType::kFloat32, {2, 5, 4}, std::vector<double>(40, 1));
  absl::StatusOr<NdPlan> scatter_plan = PlanScatterNd({.shape = {2, 3, 4},
                                                       .index = index.view(),
                                                       .source = source.view(),
                                                       .batch_dims = 1,
                                                       .reduce = Reduction::kSum});
  ASSERT_TRUE(scatter_plan.ok()) << scatter_plan.status();
  EXPECT_EQ(scatter_plan->op, "scatter_nd");
  EXPECT_EQ(scatter_plan->result_shape, Shape({2, 3, 4}));
  Tensor scattered(scatter_plan->result_dtype, scatter_plan->result_shape);
  EXPECT_TRUE(cpu::ScatterNd(*scatter_plan, scattered.mutable_view()).ok());
  // Batch 0 sends rows 0, 1, 2, 0, 1; batch 1 rows 2, 1, 0, 2, 1.
  std::vector<double> expected;
  for (double count : {2, 2, 1, 1, 2, 2}) expected.insert(expected.end(), 4, count);
  EXPECT_EQ(ToDoubles(scattered), expected);
}

// ---------------------------------------------------------------------------------------------
// Errors: INVALID_ARGUMENT naming the op, the argument, the value and the rule. The reference
// rejects the same inputs.

absl::Status GatherNdError(const GatherNdArgs& args) {
  EXPECT_FALSE(ReferenceGatherNd(args.input, args.index, args.axes, args.batch_dims).ok())
      << "the reference accepts this input";
  return testing::ExpectKernelRejects(GatherNd(args));
}

absl::Status ScatterNdError(const ScatterNdArgs& args) {
  EXPECT_FALSE(ReferenceScatterNd(args.input, args.shape, args.index, args.source, args.axes,
                                  args.batch_dims, args.reduce, args.include_self)
                   .ok())
      << "the reference accepts this input";
  return testing::ExpectKernelRejects(ScatterNd(args));
}

void ExpectMessageHas(const absl::Status& status, const std::vector<std::string>& parts) {
  for (const std::string& part : parts) EXPECT_THAT(status.message(), HasSubstr(part));
}

TEST(NdErrorTest, IndexOutOfRangeNamesTheFirstOffenderAndItsAxis) {
  const Tensor x = Tensor::Zeros(DataType::kFloat32, {4, 5, 6});
  // TensorFlow form, batch_dims 1: coordinate j addresses axis 1 + j.
  const Tensor index = IndexTensor({4, 2, 2},
                                   {0, 0, 1, 1, 2, 2, 3, 3,  //
                                    4, 6, -5, 0, 9, 9, 0, 0},
                                   DataType::kInt32);
  EXPECT_EQ(GatherNdError({.input = x.view(), .index = index.view(), .batch_dims = 1}).message(),
            "gather_nd: index[2, 0, 1] = 6 is out of range for axis 2 of input with size 6 "
            "(expected -6 <= index < 6)");
  // batch_dims 0: the same values address axes 0 and 1.
  const Tensor flat = IndexTensor({3, 2}, {3, -5, -5, 0, 9, 9});
  EXPECT_EQ(GatherNdError({.input = x.view(), .index = flat.view()}).message(),
            "gather_nd: index[1, 0] = -5 is out of range for axis 0 of input with size 4 "
            "(expected -4 <= index < 4)");
  // Axes form: coordinate j addresses axes[j].
  const Tensor axes_index = IndexTensor({1, 2, 1, 2}, {0, 4, 5, -7});
  EXPECT_EQ(
      GatherNdError({.input = x.view(), .index = axes_index.view(), .axes = {-1, 1}}).message(),
      "gather_nd: index[0, 1, 0, 1] = -7 is out of range for axis 1 of input with size 5 "
      "(expected -5 <= index < 5)");
  // ScatterNd, every reduction, with and without an input.
  const Tensor source = Tensor::Zeros(DataType::kFloat32, {3, 6});
  for (Reduction reduce : testing::kAllReductions) {
    EXPECT_EQ(
        ScatterNdError(
            {.input = x.view(), .index = flat.view(), .source = source.view(), .reduce = reduce})
            .message(),
        "scatter_nd: index[1, 0] = -5 is out of range for axis 0 of input with size 4 "
        "(expected -4 <= index < 4)");
  }
  // Without an input the addressed tensor is the output, and the message says so.
  EXPECT_EQ(ScatterNdError({.shape = {4, 5, 6},
                            .index = flat.view(),
                            .source = source.view(),
                            .reduce = Reduction::kSum,
                            .include_self = false})
                .message(),
            "scatter_nd: index[1, 0] = -5 is out of range for axis 0 of output with size 4 "
            "(expected -4 <= index < 4)");
  // A rank-0 input in the axes form has one element along its one axis.
  const Tensor scalar = Tensor::Zeros(DataType::kFloat32, {});
  const Tensor one = IndexTensor({1}, {1});
  EXPECT_EQ(GatherNdError({.input = scalar.view(), .index = one.view(), .axes = {-1}}).message(),
            "gather_nd: index[0] = 1 is out of range for axis 0 of input with size 1 "
            "(expected -1 <= index < 1)");
  // An empty addressed axis rejects every value.
  const Tensor empty_axis = Tensor::Zeros(DataType::kFloat32, {0, 3});
  const Tensor zero = IndexTensor({1, 1}, {0});
  EXPECT_THAT(GatherNdError({.input = empty_axis.view(), .index = zero.view()}).message(),
              HasSubstr("gather_nd: index[0, 0] = 0 is out of range for axis 0 of input with "
                        "size 0"));
}

TEST(NdErrorTest, FirstOffenderInLargeParallelWalk) {
  const Tensor x = Tensor::Zeros(DataType::kFloat32, {500, 600});
  const Tensor source = Tensor::Zeros(DataType::kFloat32, {300000});
  absl::BitGen gen = SeededGen(4242, kNdSeedSalt);
  Tensor index = NdIndex(DataType::kInt32, {300000}, {500, 600}, IndexPattern::kRandom, gen);
  int32_t* values = index.data_as<int32_t>();
  values[299999 * 2 + 0] = -1000;
  values[200000 * 2 + 0] = 2000;
  values[123456 * 2 + 1] = 1000;  // The first in row-major order.
  values[123457 * 2 + 0] = 3000;
  EXPECT_THAT(GatherNdError({.input = x.view(), .index = index.view()}).message(),
              HasSubstr("gather_nd: index[123456, 1] = 1000 is out of range for axis 1"));
  for (Reduction reduce : {Reduction::kAssign, Reduction::kSum, Reduction::kMean}) {
    for (bool include_self : {true, false}) {
      EXPECT_THAT(ScatterNdError({.input = x.view(),
                                  .index = index.view(),
                                  .source = source.view(),
                                  .reduce = reduce,
                                  .include_self = include_self})
                      .message(),
                  HasSubstr("scatter_nd: index[123456, 1] = 1000 is out of range for axis 1"));
    }
  }
}

TEST(NdErrorTest, IndexDtypeAndRank) {
  const Tensor x = Tensor::Zeros(DataType::kFloat32, {3, 4});
  const Tensor floats = TensorFromValues(DataType::kFloat32, {2, 1}, {0, 1});
  ExpectMessageHas(GatherNdError({.input = x.view(), .index = floats.view()}),
                   {"gather_nd: index.dtype = float32", "int32 or int64"});
  const Tensor source = Tensor::Zeros(DataType::kFloat32, {2, 4});
  ExpectMessageHas(
      ScatterNdError({.input = x.view(), .index = floats.view(), .source = source.view()}),
      {"scatter_nd: index.dtype = float32", "int32 or int64"});
  const Tensor scalar_index = IndexTensor({}, {0});
  ExpectMessageHas(GatherNdError({.input = x.view(), .index = scalar_index.view()}),
                   {"gather_nd: index has rank 0", "rank >= 1"});
  const Tensor scalar_source = Tensor::Zeros(DataType::kFloat32, {});
  ExpectMessageHas(
      ScatterNdError(
          {.input = x.view(), .index = scalar_index.view(), .source = scalar_source.view()}),
      {"scatter_nd", "index", "rank 0"});
}

TEST(NdErrorTest, TooManyCoordinates) {
  const Tensor x = Tensor::Zeros(DataType::kFloat32, {3, 4});
  const Tensor triples = IndexTensor({1, 3}, {0, 0, 0});
  ExpectMessageHas(GatherNdError({.input = x.view(), .index = triples.view()}),
                   {"gather_nd: index.shape[-1] = 3 is too large", "input has rank 2"});
  // With batch_dims the coordinates start later: batch_dims 1 + k 2 > rank 2.
  const Tensor pairs = IndexTensor({3, 2}, {0, 0, 0, 0, 0, 0});
  ExpectMessageHas(
      GatherNdError({.input = x.view(), .index = pairs.view(), .batch_dims = 1}),
      {"gather_nd: index.shape[-1] = 2 is too large", "batch_dims = 1", "input has rank 2"});
  const Tensor source = Tensor::Zeros(DataType::kFloat32, {1});
  ExpectMessageHas(
      ScatterNdError({.input = x.view(), .index = triples.view(), .source = source.view()}),
      {"scatter_nd", "3", "rank 2"});
}

TEST(NdErrorTest, BatchDims) {
  const Tensor x = Tensor::Zeros(DataType::kFloat32, {3, 4});
  const Tensor index = IndexTensor({3, 1}, {0, 0, 0});
  ExpectMessageHas(GatherNdError({.input = x.view(), .index = index.view(), .batch_dims = -1}),
                   {"gather_nd: batch_dims = -1", "0 <= batch_dims < 2"});
  // batch_dims must stay below index.rank (2).
  ExpectMessageHas(GatherNdError({.input = x.view(), .index = index.view(), .batch_dims = 2}),
                   {"gather_nd: batch_dims = 2", "0 <= batch_dims < 2"});
  // The batch dimensions of index and input must match: 2 vs 3.
  const Tensor short_batch = IndexTensor({2, 1}, {0, 0});
  ExpectMessageHas(GatherNdError({.input = x.view(), .index = short_batch.view(), .batch_dims = 1}),
                   {"gather_nd", "index.shape[0] = 2", "input.shape[0] = 3"});
  const Tensor source = Tensor::Zeros(DataType::kFloat32, {2});
  ExpectMessageHas(ScatterNdError({.input = x.view(),
                                   .index = short_batch.view(),
                                   .source = source.view(),
                                   .batch_dims = 1}),
                   {"scatter_nd", "index.shape[0] = 2", "input.shape[0] = 3"});
  const Tensor source3 = Tensor::Zeros(DataType::kFloat32, {3});
  ExpectMessageHas(
      ScatterNdError(
          {.input = x.view(), .index = index.view(), .source = source3.view(), .batch_dims = -2}),
      {"scatter_nd: batch_dims = -2"});
  // batch_dims belongs to the TensorFlow form.
  const Tensor axes_index = IndexTensor({3, 4, 1}, std::vector<int64_t>(12, 0));
  ExpectMessageHas(
      GatherNdError({.input = x.view(), .index = axes_index.view(), .axes = {0}, .batch_dims = 1}),
      {"gather_nd", "batch_dims = 1", "axes"});
}

TEST(NdErrorTest, Axes) {
  const Tensor x = Tensor::Zeros(DataType::kFloat32, {3, 4});
  const Tensor pairs = IndexTensor({3, 4, 2}, std::vector<int64_t>(24, 0));
  // One axis per coordinate.
  ExpectMessageHas(GatherNdError({.input = x.view(), .index = pairs.view(), .axes = {0}}),
                   {"gather_nd: axes has 1 entries but index.shape[-1] = 2"});
  // Distinct after wrapping.
  ExpectMessageHas(GatherNdError({.input = x.view(), .index = pairs.view(), .axes = {1, -1}}),
                   {"gather_nd: axes[1] = -1 repeats axis 1"});
  // In [-rank, rank).
  ExpectMessageHas(GatherNdError({.input = x.view(), .index = pairs.view(), .axes = {0, 2}}),
                   {"gather_nd: axes[1] = 2 is out of range", "-2 <= axes[1] < 2"});
  ExpectMessageHas(GatherNdError({.input = x.view(), .index = pairs.view(), .axes = {-3, 0}}),
                   {"gather_nd: axes[0] = -3 is out of range"});
  // idx.rank == x.rank + 1.
  const Tensor flat_pairs = IndexTensor({3, 2}, std::vector<int64_t>(6, 0));
  ExpectMessageHas(GatherNdError({.input = x.view(), .index = flat_pairs.view(), .axes = {0, 1}}),
                   {"gather_nd: index has rank 2", "input.rank + 1 = 3"});
  // B may not exceed the input off the indexed axes: B[1] = 5 > 4.
  const Tensor wide = IndexTensor({2, 5, 1}, std::vector<int64_t>(10, 0));
  ExpectMessageHas(GatherNdError({.input = x.view(), .index = wide.view(), .axes = {0}}),
                   {"gather_nd", "index.shape[1] = 5", "input.shape[1] = 4"});
  // ... but may exceed it along them.
  EXPECT_TRUE(GatherNd({.input = x.view(), .index = wide.view(), .axes = {1}}).ok());
  const Tensor source = Tensor::Zeros(DataType::kFloat32, {3, 4});
  ExpectMessageHas(
      ScatterNdError(
          {.input = x.view(), .index = pairs.view(), .source = source.view(), .axes = {0, 0}}),
      {"scatter_nd: axes[1] = 0 repeats axis 0"});
  const Tensor source_wide = Tensor::Zeros(DataType::kFloat32, {2, 5});
  ExpectMessageHas(
      ScatterNdError(
          {.input = x.view(), .index = wide.view(), .source = source_wide.view(), .axes = {0}}),
      {"scatter_nd", "index.shape[1] = 5", "input.shape[1] = 4"});
}

TEST(NdErrorTest, SourceShape) {
  const Tensor x = Tensor::Zeros(DataType::kFloat32, {4, 5});
  const Tensor rows = IndexTensor({3, 1}, {0, 1, 2});
  // TensorFlow form: exactly B + x.shape[batch_dims + k:] = [3, 5].
  for (const Shape& shape : {Shape{3, 4}, Shape{3, 6}, Shape{2, 5}, Shape{3}, Shape{3, 5, 1}}) {
    const Tensor source = Tensor::Zeros(DataType::kFloat32, shape);
    ExpectMessageHas(
        ScatterNdError({.input = x.view(), .index = rows.view(), .source = source.view()}),
        {"scatter_nd", "src", ShapeString(shape), "[3, 5]"});
  }
  // Axes form: rank of x and at least B everywhere.
  const Tensor index = IndexTensor({2, 3, 1}, std::vector<int64_t>(6, 0));
  const Tensor flat_source = Tensor::Zeros(DataType::kFloat32, {6});
  ExpectMessageHas(
      ScatterNdError(
          {.input = x.view(), .index = index.view(), .source = flat_source.view(), .axes = {1}}),
      {"scatter_nd", "src", "rank 1"});
  const Tensor small_source = Tensor::Zeros(DataType::kFloat32, {2, 2});
  ExpectMessageHas(
      ScatterNdError(
          {.input = x.view(), .index = index.view(), .source = small_source.view(), .axes = {1}}),
      {"scatter_nd", "index.shape[1] = 3", "src.shape[1] = 2"});
}

TEST(NdErrorTest, DtypesAndReductions) {
  const Tensor x = Tensor::Zeros(DataType::kFloat32, {4});
  const Tensor index = IndexTensor({2, 1}, {0, 1});
  const Tensor doubles = Tensor::Zeros(DataType::kFloat64, {2});
  ExpectMessageHas(
      ScatterNdError({.input = x.view(), .index = index.view(), .source = doubles.view()}),
      {"scatter_nd: src.dtype = float64", "float32"});
  for (DataType dtype : {DataType::kComplex64, DataType::kComplex128}) {
    const Tensor complex_source = Tensor::Zeros(dtype, {2});
    for (Reduction reduce : {Reduction::kAmax, Reduction::kAmin}) {
      ExpectMessageHas(ScatterNdError({.shape = {4},
                                       .index = index.view(),
                                       .source = complex_source.view(),
                                       .reduce = reduce}),
                       {absl::StrCat("scatter_nd: reduce = ", std::string(ReductionName(reduce))),
                        std::string(DataTypeName(dtype))});
    }
  }
  const Tensor bools = Tensor::Zeros(DataType::kBool, {4});
  const Tensor bool_source = Tensor::Zeros(DataType::kBool, {2});
  ExpectMessageHas(ScatterNdError({.input = bools.view(),
                                   .index = index.view(),
                                   .source = bool_source.view(),
                                   .reduce = Reduction::kMean}),
                   {"scatter_nd: reduce = MEAN", "bool"});
}

TEST(NdErrorTest, InputAndShape) {
  const Tensor x = Tensor::Zeros(DataType::kFloat32, {4});
  const Tensor index = IndexTensor({2, 1}, {0, 1});
  const Tensor source = Tensor::Zeros(DataType::kFloat32, {2});
  ExpectMessageHas(
      ScatterNdError(
          {.input = x.view(), .shape = {4}, .index = index.view(), .source = source.view()}),
      {"scatter_nd", "shape", "input"});
  ExpectMessageHas(
      ScatterNdError({.shape = {4, -1}, .index = index.view(), .source = source.view()}),
      {"scatter_nd", "shape", "-1"});
  // A shape whose element count overflows int64 is rejected before anything is allocated.
  const int64_t huge = int64_t{1} << 40;
  EXPECT_EQ(ScatterNd({.shape = {huge, huge}, .index = index.view(), .source = source.view()})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// On a GPU: byte for byte the CPU's (skipped where no GPU is usable).

class GatherNdCudaTest : public testing::CudaTest {};

// GatherNd's TensorFlow form (its own GPU kernel, not Gather's) of every dtype: pairs of
// coordinates, negatives included, each taking a slice of 7.
TEST_F(GatherNdCudaTest, TensorFlowFormMatchesTheCpu) {
  absl::BitGen gen = SeededGen(61, kNdSeedSalt);
  for (DataType dtype : kAllDataTypes) {
    SCOPED_TRACE(DataTypeName(dtype));
    const Tensor input = testing::SmallIntegerValues(gen, dtype, {50, 60, 7});
    Tensor index(DataType::kInt64, {40, 2});
    for (int64_t i = 0; i < 40; ++i) {
      index.data_as<int64_t>()[2 * i] = absl::Uniform<int64_t>(gen, -50, 50);
      index.data_as<int64_t>()[2 * i + 1] = absl::Uniform<int64_t>(gen, -60, 60);
    }
    const absl::StatusOr<NdPlan> plan =
        PlanGatherNd({.input = input.view(), .index = index.view()});
    ASSERT_TRUE(plan.ok()) << plan.status();
    const absl::StatusOr<Tensor> cpu = testing::RunOn(TestDevice::kCpu, *plan);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    const absl::StatusOr<Tensor> gpu = testing::RunOn(TestDevice::kCuda, *plan);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ExpectSameBytes(*gpu, *cpu);
  }
}

class ScatterNdCudaTest : public testing::CudaTest {};

// One ScatterNd call of `dtype` on a few destinations with many duplicate index rows, in the
// TensorFlow form (rows of 5 addressed by pairs of coordinates into [12, 4, 5]) or the axes form
// (elements of [12, 4, 5] addressed along axes 0 and 1 by an index of shape [12, 40, 5, 2]).
struct DuplicateHeavyNdCall {
  Tensor input;
  Tensor index;
  Tensor source;
  std::vector<int64_t> axes;
};

DuplicateHeavyNdCall MakeDuplicateHeavyNdCall(absl::BitGen& gen, DataType dtype, bool axes_form,
                                              const std::function<Tensor(const Shape&)>& values) {
  DuplicateHeavyNdCall call;
  call.input = testing::SmallIntegerValues(gen, dtype, {12, 4, 5});
  const Shape positions = axes_form ? Shape{12, 40, 5} : Shape{300};
  Shape index_shape = positions;
  index_shape.push_back(2);
  call.index = Tensor(DataType::kInt64, index_shape);
  int64_t* index = call.index.data_as<int64_t>();
  for (int64_t i = 0; i < call.index.numel(); i += 2) {
    index[i] = absl::Uniform<int64_t>(gen, -12, 12);
    index[i + 1] = absl::Uniform<int64_t>(gen, -4, 4);
  }
  Shape source_shape = positions;
  if (!axes_form) source_shape.push_back(5);
  call.source = values(source_shape);
  if (axes_form) call.axes = {0, 1};
  return call;
}

// Every dtype, reduction and include_self, in both general forms, on small integer values: every
// sum and mean is exact in any order, so even float results must equal the CPU's bit for bit (but
// for the signs of a complex product's zero parts, which depend on the order of the factors); with
// `deterministic` every result is the CPU's bytes. An index out of range is the CPU's error.
TEST_F(ScatterNdCudaTest, EveryDtypeAndReductionMatchesTheCpuInBothForms) {
  absl::BitGen gen = SeededGen(67, kNdSeedSalt);
  for (DataType dtype : kAllDataTypes) {
    for (Reduction reduce : testing::kAllReductions) {
      for (bool include_self : {true, false}) {
        for (bool axes_form : {false, true}) {
          if (!testing::ReductionDefined(dtype, reduce)) continue;
          SCOPED_TRACE(absl::StrCat(std::string(DataTypeName(dtype)), " ",
                                    std::string(ReductionName(reduce)), " include_self ",
                                    include_self, axes_form ? " axes form" : " TensorFlow form"));
          const DuplicateHeavyNdCall call =
              MakeDuplicateHeavyNdCall(gen, dtype, axes_form, [&](const Shape& shape) {
                // Products stay exact with factors of +-1 only (float16 has 11 bits).
                return reduce == Reduction::kProd ? testing::UnitFactors(dtype, shape)
                                                  : testing::SmallIntegerValues(gen, dtype, shape);
              });
          absl::StatusOr<NdPlan> plan = PlanScatterNd({.input = call.input.view(),
                                                       .index = call.index.view(),
                                                       .source = call.source.view(),
                                                       .axes = call.axes,
                                                       .reduce = reduce,
                                                       .include_self = include_self});
          ASSERT_TRUE(plan.ok()) << plan.status();
          ASSERT_FALSE(plan->single_axis_scatter.has_value());
          testing::ExpectTheCpusBytesOnCuda(*plan);
        }
      }
    }
  }
}

// A deterministic float SUM, MEAN or PROD of values whose rounding depends on the order (uniform,
// products near 1) gives the CPU's bytes and repeats them, in the zeros form too; an index out of
// range fails on the GPU as on the CPU.
TEST_F(ScatterNdCudaTest, DeterministicFloatReductionsGiveTheCpusBytes) {
  absl::BitGen gen = SeededGen(71, kNdSeedSalt);
  for (DataType dtype :
       {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat64, DataType::kComplex64}) {
    for (Reduction reduce : {Reduction::kSum, Reduction::kMean, Reduction::kProd}) {
      for (bool zeros : {false, true}) {
        SCOPED_TRACE(absl::StrCat(std::string(DataTypeName(dtype)), " ",
                                  std::string(ReductionName(reduce)), zeros ? " zeros" : ""));
        const DuplicateHeavyNdCall call =
            MakeDuplicateHeavyNdCall(gen, dtype, /*axes_form=*/false, [&](const Shape& shape) {
              return testing::RoundingValues(gen, dtype, shape, reduce == Reduction::kProd);
            });
        ScatterNdArgs args{
            .index = call.index.view(), .source = call.source.view(), .reduce = reduce};
        if (zeros) {
          args.shape = call.input.shape();
        } else {
          args.input = call.input.view();
        }
        absl::StatusOr<NdPlan> plan = PlanScatterNd(args);
        ASSERT_TRUE(plan.ok()) << plan.status();
        plan->deterministic = true;
        const absl::StatusOr<Tensor> cpu = testing::RunOn(TestDevice::kCpu, *plan);
        ASSERT_TRUE(cpu.ok()) << cpu.status();
        const absl::StatusOr<Tensor> first = testing::RunOn(TestDevice::kCuda, *plan);
        const absl::StatusOr<Tensor> second = testing::RunOn(TestDevice::kCuda, *plan);
        ASSERT_TRUE(first.ok()) << first.status();
        ASSERT_TRUE(second.ok()) << second.status();
        ExpectSameBytes(*first, *cpu);
        ExpectSameBytes(*second, *first);
      }
    }
  }
  // Row 7's second coordinate is out of range for a dimension of 4.
  DuplicateHeavyNdCall call = MakeDuplicateHeavyNdCall(
      gen, DataType::kFloat32, /*axes_form=*/false,
      [&](const Shape& shape) { return RandomTensor(DataType::kFloat32, shape, gen); });
  call.index.data_as<int64_t>()[2 * 7 + 1] = 4;
  const absl::StatusOr<NdPlan> plan = PlanScatterNd({.input = call.input.view(),
                                                     .index = call.index.view(),
                                                     .source = call.source.view(),
                                                     .reduce = Reduction::kSum});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const absl::StatusOr<Tensor> cpu = testing::RunOn(TestDevice::kCpu, *plan);
  const absl::StatusOr<Tensor> gpu = testing::RunOn(TestDevice::kCuda, *plan);
  EXPECT_EQ(cpu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu.status(), cpu.status());
}

}  // namespace
}  // namespace tensorops
