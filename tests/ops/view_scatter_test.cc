// SelectScatter, SliceScatter and DiagonalScatter (docs/semantics.md) against the independent
// reference written below in this file: randomized over dtype x op, ranks, axes (negative too),
// Python slice bounds, diagonal offsets (past the edge too), zero-size dimensions and strided
// input/src views, one large case per op for the parallel copies; plus the PyTorch doc examples,
// the identities of docs/semantics.md and every error. These ops only copy, so results must match
// byte for byte. The randomized suite and the equalities run on the CPU and on CUDA
// (tests/device_runner.h; skipped where no GPU is usable); on a GPU also: each op of every dtype
// byte for byte the CPU's.
#include "kernels/view_scatter.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/tensor.h"
#include "tests/device_runner.h"
#include "tests/reference.h"

// ---------------------------------------------------------------------------------------------
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

namespace tensorops {
namespace {

using ::testing::AllOf;
using testing::ExpectInvalidArgument;
using testing::ExpectSameBytes;
using testing::HasNoDeviceForm;
using ::testing::HasSubstr;
using testing::LaidOutTensor;
using testing::RandomTensor;
using testing::ReferenceDiagonal;
using testing::ReferenceDiagonalScatter;
using testing::ReferenceDiagonalShape;
using testing::ReferenceSelectScatter;
using testing::ReferenceSliceLength;
using testing::ReferenceSliceScatter;
using testing::SeededGen;
using testing::TensorFromValues;
using testing::TestDevice;
using testing::ToDoubles;
using testing::reference_internal::ShapeString;

enum class Op { kSelect, kSlice, kDiagonal };

const char* OpName(Op op) {
  switch (op) {
    case Op::kSelect:
      return "select";
    case Op::kSlice:
      return "slice";
    case Op::kDiagonal:
      return "diagonal";
  }
  return "?";
}

// kViewScatterSeedSalt salts every generator this file seeds, keeping its random inputs apart from
// the other suites' (testing::SeededGen).
constexpr uint64_t kViewScatterSeedSalt = 0x51ce;

// A random tensor viewed in one of a few layouts, to exercise the kernels' strided paths:
// contiguous, every other element of a buffer twice as long in the last dimension, or (for a
// leading dimension) broadcast from one row with stride 0. The values are drawn straight into the
// buffer, gaps included.
LaidOutTensor RandomLaidOut(DataType dtype, const Shape& shape, absl::BitGen& gen) {
  testing::ValueOptions values;
  values.nan_fraction = 0.05;
  values.signed_zero_fraction = 0.05;
  const int layout = shape.empty() ? 0 : absl::Uniform(gen, 0, 4);
  if (layout == 1) {  // Stepped along the last dimension.
    Shape buffer_shape = shape;
    buffer_shape.back() *= 2;
    LaidOutTensor laid_out{RandomTensor(dtype, buffer_shape, gen, values), {}};
    Shape strides = testing::RowMajorStrides(buffer_shape);
    strides.back() = 2;
    laid_out.view = TensorView(dtype, shape, strides, laid_out.buffer.data());
    return laid_out;
  }
  if (layout == 2 && shape.size() >= 2) {  // Broadcast along the first dimension.
    Shape buffer_shape = shape;
    buffer_shape[0] = 1;
    LaidOutTensor laid_out{RandomTensor(dtype, buffer_shape, gen, values), {}};
    Shape strides = testing::RowMajorStrides(buffer_shape);
    strides[0] = 0;
    laid_out.view = TensorView(dtype, shape, strides, laid_out.buffer.data());
    return laid_out;
  }
  LaidOutTensor laid_out{RandomTensor(dtype, shape, gen, values), {}};
  laid_out.view = laid_out.buffer.view();
  return laid_out;
}

Shape RandomShape(absl::BitGen& gen, int64_t rank, int64_t max_size) {
  Shape shape;
  for (int64_t d = 0; d < rank; ++d) {
    shape.push_back(absl::Bernoulli(gen, 0.08)
                        ? 0
                        : absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, max_size));
  }
  return shape;
}

std::optional<int64_t> RandomBound(absl::BitGen& gen, int64_t size) {
  if (absl::Bernoulli(gen, 0.2)) return std::nullopt;
  return absl::Uniform<int64_t>(absl::IntervalClosed, gen, -size - 3, size + 3);
}

// --------------------------------------------------------------------------------------------
// Randomized against the reference.

// Over dtype x op x device: the same cases on the CPU and on CUDA.
class ViewScatterRandomTest : public testing::DeviceTest<std::tuple<DataType, Op>> {};

TEST_P(ViewScatterRandomTest, MatchesReference) {
  // Copies, not a structured binding: the lambdas below capture them (clang 14 cannot capture
  // bindings).
  const auto param = leading_param();
  const DataType dtype = std::get<0>(param);
  const Op op = std::get<1>(param);
  absl::BitGen gen =
      SeededGen(static_cast<uint64_t>(dtype) * 7 + static_cast<uint64_t>(op), kViewScatterSeedSalt);
  for (int trial = 0; trial < 150; ++trial) {
    const int64_t min_rank = op == Op::kDiagonal ? 2 : 1;
    const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, min_rank, 5);
    Shape shape = RandomShape(gen, rank, rank <= 3 ? 6 : 3);
    const int64_t axis = absl::Uniform<int64_t>(gen, -rank, rank);
    const int64_t axis_wrapped = axis < 0 ? axis + rank : axis;
    const LaidOutTensor input_storage = [&] {
      if (op == Op::kSelect && shape[axis_wrapped] == 0) shape[axis_wrapped] = 2;
      return RandomLaidOut(dtype, shape, gen);
    }();
    const TensorView& input = input_storage.view;

    std::string what;
    Shape src_shape;
    std::optional<int64_t> start, end;
    int64_t index = 0, step = 1, offset = 0, axis1 = 0, axis2 = 1;
    switch (op) {
      case Op::kSelect: {
        const int64_t size = shape[axis_wrapped];
        index = absl::Uniform<int64_t>(gen, -size, size);
        src_shape = shape;
        src_shape.erase(src_shape.begin() + axis_wrapped);
        what = absl::StrCat("axis ", axis, " index ", index);
        break;
      }
      case Op::kSlice: {
        const int64_t size = shape[axis_wrapped];
        start = RandomBound(gen, size);
        end = RandomBound(gen, size);
        step = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 3);
        src_shape = shape;
        src_shape[axis_wrapped] = ReferenceSliceLength(size, start, end, step);
        what = absl::StrCat("axis ", axis, " start ", start ? absl::StrCat(*start) : "none",
                            " end ", end ? absl::StrCat(*end) : "none", " step ", step);
        break;
      }
      case Op::kDiagonal: {
        axis1 = axis;
        do {
          axis2 = absl::Uniform<int64_t>(gen, -rank, rank);
        } while ((axis2 < 0 ? axis2 + rank : axis2) == axis_wrapped);
        const int64_t size1 = shape[axis_wrapped];
        const int64_t size2 = shape[axis2 < 0 ? axis2 + rank : axis2];
        offset = absl::Uniform<int64_t>(absl::IntervalClosed, gen, -size1 - 2, size2 + 2);
        src_shape = ReferenceDiagonalShape(shape, offset, axis1, axis2);
        what = absl::StrCat("offset ", offset, " axis1 ", axis1, " axis2 ", axis2);
        break;
      }
    }
    const LaidOutTensor src_storage = RandomLaidOut(dtype, src_shape, gen);
    const TensorView& src = src_storage.view;
    SCOPED_TRACE(absl::StrCat("trial ", trial, ": input ", ShapeString(shape), " src ",
                              ShapeString(src_shape), " ", what));

    absl::StatusOr<Tensor> actual;
    switch (op) {
      case Op::kSelect:
        actual = runner().Run(
            SelectScatterArgs{.input = input, .src = src, .axis = axis, .index = index});
        break;
      case Op::kSlice:
        actual = runner().Run(SliceScatterArgs{
            .input = input, .src = src, .axis = axis, .start = start, .end = end, .step = step});
        break;
      case Op::kDiagonal:
        actual = runner().Run(DiagonalScatterArgs{
            .input = input, .src = src, .offset = offset, .axis1 = axis1, .axis2 = axis2});
        break;
    }
    if (HasNoDeviceForm(actual.status())) continue;
    Tensor expected;
    switch (op) {
      case Op::kSelect:
        expected = ReferenceSelectScatter(input, src, axis, index);
        break;
      case Op::kSlice:
        expected = ReferenceSliceScatter(input, src, axis, start, end, step);
        break;
      case Op::kDiagonal:
        expected = ReferenceDiagonalScatter(input, src, offset, axis1, axis2);
        break;
    }
    ASSERT_TRUE(actual.ok()) << actual.status();
    ExpectSameBytes(*actual, expected);
  }
}

std::string DtypeOpName(const ::testing::TestParamInfo<std::tuple<DataType, Op>>& info) {
  return absl::StrCat(std::string(DataTypeName(std::get<0>(info.param))), "_",
                      OpName(std::get<1>(info.param)));
}

TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(ViewScatterRandomTest,
                                      ::testing::Combine(::testing::ValuesIn(kAllDataTypes),
                                                         ::testing::Values(Op::kSelect, Op::kSlice,
                                                                           Op::kDiagonal)),
                                      DtypeOpName);

// --------------------------------------------------------------------------------------------
// Select and Slice windows of long slabs (at least 256 bytes after the axis), which the kernel
// writes in one pass from input or src: random outer and axis sizes, slice bounds and steps, with
// a fresh result and with the input's own memory as the result (in place).

class ViewScatterSlabTest : public ::testing::TestWithParam<DataType> {};

TEST_P(ViewScatterSlabTest, MatchesReferenceFreshAndInPlace) {
  const DataType dtype = GetParam();
  absl::BitGen gen = SeededGen(static_cast<uint64_t>(dtype) + 100, kViewScatterSeedSalt);
  const int64_t min_inner = 256 / ItemSize(dtype);
  for (int trial = 0; trial < 40; ++trial) {
    Shape shape;
    const int64_t outer_rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, 2);
    for (int64_t d = 0; d < outer_rank; ++d) {
      shape.push_back(absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 4));
    }
    const int64_t axis = outer_rank;
    shape.push_back(absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 9));
    if (absl::Bernoulli(gen, 0.5)) shape.push_back(absl::Uniform<int64_t>(gen, 1, 3));
    shape.push_back(absl::Uniform<int64_t>(absl::IntervalClosed, gen, min_inner, 2 * min_inner));
    const Tensor input = RandomTensor(dtype, shape, gen);

    const bool select = absl::Bernoulli(gen, 0.4);
    const int64_t size = shape[axis];
    const int64_t index = absl::Uniform<int64_t>(gen, -size, size);
    const std::optional<int64_t> start = RandomBound(gen, size);
    const std::optional<int64_t> end = RandomBound(gen, size);
    const int64_t step = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 3);
    Shape src_shape = shape;
    if (select) {
      src_shape.erase(src_shape.begin() + axis);
    } else {
      src_shape[axis] = ReferenceSliceLength(size, start, end, step);
    }
    const Tensor src = RandomTensor(dtype, src_shape, gen);
    SCOPED_TRACE(absl::StrCat(
        "trial ", trial, ": input ", ShapeString(shape), " axis ", axis,
        select ? absl::StrCat(" select ", index)
               : absl::StrCat(" slice ", start ? *start : -99, ":", end ? *end : 99, ":", step)));

    const absl::StatusOr<ViewScatterPlan> plan =
        select ? PlanSelectScatter(
                     {.input = input.view(), .src = src.view(), .axis = axis, .index = index})
               : PlanSliceScatter({.input = input.view(),
                                   .src = src.view(),
                                   .axis = axis,
                                   .start = start,
                                   .end = end,
                                   .step = step});
    ASSERT_TRUE(plan.ok()) << plan.status();
    const Tensor expected =
        select ? ReferenceSelectScatter(input.view(), src.view(), axis, index)
               : ReferenceSliceScatter(input.view(), src.view(), axis, start, end, step);

    Tensor fresh(dtype, shape);
    ASSERT_TRUE(cpu::ViewScatter(*plan, fresh.mutable_view()).ok());
    ExpectSameBytes(fresh, expected);

    Tensor in_place = Tensor::FromView(input.view());
    ViewScatterPlan in_place_plan = *plan;
    in_place_plan.input = in_place.view();
    ASSERT_TRUE(cpu::ViewScatter(in_place_plan, in_place.mutable_view()).ok());
    ExpectSameBytes(in_place, expected);
  }
}

INSTANTIATE_TEST_SUITE_P(AllDataTypes, ViewScatterSlabTest, ::testing::ValuesIn(kAllDataTypes),
                         [](const auto& info) { return std::string(DataTypeName(info.param)); });

// --------------------------------------------------------------------------------------------
// Large windows: the parallel copies (the input copy, and many outer positions of the window).

TEST(ViewScatterLargeTest, SelectScatterMiddleAxis) {
  absl::BitGen gen = SeededGen(1, kViewScatterSeedSalt);
  const Tensor input = RandomTensor(DataType::kFloat32, {1024, 2, 1024}, gen);
  const Tensor src = RandomTensor(DataType::kFloat32, {1024, 1024}, gen);
  absl::StatusOr<Tensor> actual =
      SelectScatter({.input = input.view(), .src = src.view(), .axis = -2, .index = 1});
  ASSERT_TRUE(actual.ok()) << actual.status();
  ExpectSameBytes(*actual, ReferenceSelectScatter(input.view(), src.view(), -2, 1));
}

TEST(ViewScatterLargeTest, SliceScatterSteppedLastAxis) {
  absl::BitGen gen = SeededGen(2, kViewScatterSeedSalt);
  const Tensor input = RandomTensor(DataType::kComplex128, {1024, 2048}, gen);
  const Tensor src = RandomTensor(DataType::kComplex128, {1024, 1023}, gen);
  absl::StatusOr<Tensor> actual = SliceScatter(
      {.input = input.view(), .src = src.view(), .axis = 1, .start = -2046, .step = 2});
  ASSERT_TRUE(actual.ok()) << actual.status();
  ExpectSameBytes(*actual,
                  ReferenceSliceScatter(input.view(), src.view(), 1, -2046, std::nullopt, 2));
}

TEST(ViewScatterLargeTest, DiagonalScatterBatchedSwappedAxes) {
  absl::BitGen gen = SeededGen(3, kViewScatterSeedSalt);
  const Tensor input = RandomTensor(DataType::kInt16, {4096, 24, 24}, gen);
  const Tensor src = RandomTensor(DataType::kInt16, {4096, 24}, gen);
  absl::StatusOr<Tensor> actual = DiagonalScatter(
      {.input = input.view(), .src = src.view(), .offset = 0, .axis1 = 2, .axis2 = 1});
  ASSERT_TRUE(actual.ok()) << actual.status();
  ExpectSameBytes(*actual, ReferenceDiagonalScatter(input.view(), src.view(), 0, 2, 1));
}

TEST(ViewScatterLargeTest, BroadcastSrcIntoLongRow) {
  // A src broadcast along one long row: a single run split across cores.
  absl::BitGen gen = SeededGen(4, kViewScatterSeedSalt);
  const Tensor input = RandomTensor(DataType::kInt64, {3, 1 << 20}, gen);
  const Tensor scalar = TensorFromValues(DataType::kInt64, {1}, {5});
  const TensorView src(DataType::kInt64, {1 << 20}, {0}, scalar.data());
  absl::StatusOr<Tensor> actual =
      SelectScatter({.input = input.view(), .src = src, .axis = 0, .index = 1});
  ASSERT_TRUE(actual.ok()) << actual.status();
  ExpectSameBytes(*actual, ReferenceSelectScatter(input.view(), src, 0, 1));
}

// --------------------------------------------------------------------------------------------
// PyTorch's documentation examples.

std::vector<double> Zeros(int64_t count) { return std::vector<double>(count, 0.0); }
std::vector<double> Ones(int64_t count) { return std::vector<double>(count, 1.0); }

TEST(ViewScatterDocTest, SelectScatter) {
  // torch.select_scatter(torch.zeros(2, 2), torch.ones(2), 0, 0)
  const Tensor input = TensorFromValues(DataType::kFloat32, {2, 2}, Zeros(4));
  const Tensor src = TensorFromValues(DataType::kFloat32, {2}, Ones(2));
  absl::StatusOr<Tensor> out =
      SelectScatter({.input = input.view(), .src = src.view(), .axis = 0, .index = 0});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(ToDoubles(*out), (std::vector<double>{1, 1, 0, 0}));
}

TEST(ViewScatterDocTest, SliceScatterRows) {
  // torch.slice_scatter(torch.zeros(8, 8), torch.ones(2, 8), start=6)
  const Tensor input = TensorFromValues(DataType::kFloat32, {8, 8}, Zeros(64));
  const Tensor src = TensorFromValues(DataType::kFloat32, {2, 8}, Ones(16));
  absl::StatusOr<Tensor> out = SliceScatter({.input = input.view(), .src = src.view(), .start = 6});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> expected = Zeros(64);
  for (int i = 48; i < 64; ++i) expected[i] = 1;
  EXPECT_EQ(ToDoubles(*out), expected);
}

TEST(ViewScatterDocTest, SliceScatterSteppedColumns) {
  // torch.slice_scatter(torch.zeros(8, 8), torch.ones(8, 2), dim=1, start=2, end=6, step=2)
  const Tensor input = TensorFromValues(DataType::kFloat32, {8, 8}, Zeros(64));
  const Tensor src = TensorFromValues(DataType::kFloat32, {8, 2}, Ones(16));
  absl::StatusOr<Tensor> out = SliceScatter(
      {.input = input.view(), .src = src.view(), .axis = 1, .start = 2, .end = 6, .step = 2});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> expected = Zeros(64);
  for (int row = 0; row < 8; ++row) expected[row * 8 + 2] = expected[row * 8 + 4] = 1;
  EXPECT_EQ(ToDoubles(*out), expected);
}

TEST(ViewScatterDocTest, DiagonalScatter) {
  // torch.diagonal_scatter(torch.zeros(3, 3), torch.ones(3), 0), then ones(2) at offsets 1, -1.
  const Tensor input = TensorFromValues(DataType::kFloat32, {3, 3}, Zeros(9));
  const Tensor three = TensorFromValues(DataType::kFloat32, {3}, Ones(3));
  const Tensor two = TensorFromValues(DataType::kFloat32, {2}, Ones(2));
  absl::StatusOr<Tensor> main_diagonal =
      DiagonalScatter({.input = input.view(), .src = three.view(), .offset = 0});
  ASSERT_TRUE(main_diagonal.ok()) << main_diagonal.status();
  EXPECT_EQ(ToDoubles(*main_diagonal), (std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1}));
  absl::StatusOr<Tensor> above =
      DiagonalScatter({.input = input.view(), .src = two.view(), .offset = 1});
  ASSERT_TRUE(above.ok()) << above.status();
  EXPECT_EQ(ToDoubles(*above), (std::vector<double>{0, 1, 0, 0, 0, 1, 0, 0, 0}));
  absl::StatusOr<Tensor> below =
      DiagonalScatter({.input = input.view(), .src = two.view(), .offset = -1});
  ASSERT_TRUE(below.ok()) << below.status();
  EXPECT_EQ(ToDoubles(*below), (std::vector<double>{0, 0, 0, 1, 0, 0, 0, 1, 0}));
}

TEST(ViewScatterDocTest, EmptyInputsAndWindows) {
  const Tensor input = TensorFromValues(DataType::kInt32, {0, 3}, {});
  const Tensor src = TensorFromValues(DataType::kInt32, {0}, {});
  absl::StatusOr<Tensor> select =
      SelectScatter({.input = input.view(), .src = src.view(), .axis = 1, .index = -3});
  ASSERT_TRUE(select.ok()) << select.status();
  EXPECT_EQ(select->shape(), (Shape{0, 3}));

  const Tensor square = TensorFromValues(DataType::kInt32, {2, 2}, {1, 2, 3, 4});
  const Tensor none = TensorFromValues(DataType::kInt32, {0}, {});
  absl::StatusOr<Tensor> past_edge =
      DiagonalScatter({.input = square.view(), .src = none.view(), .offset = 5});
  ASSERT_TRUE(past_edge.ok()) << past_edge.status();
  EXPECT_EQ(ToDoubles(*past_edge), (std::vector<double>{1, 2, 3, 4}));
  const Tensor no_rows = TensorFromValues(DataType::kInt32, {0, 2}, {});
  absl::StatusOr<Tensor> empty_slice = SliceScatter(
      {.input = square.view(), .src = no_rows.view(), .start = 5, .end = -9, .step = 3});
  ASSERT_TRUE(empty_slice.ok()) << empty_slice.status();
  EXPECT_EQ(ToDoubles(*empty_slice), (std::vector<double>{1, 2, 3, 4}));

  // A step past the slice is one element, as torch.slice takes it (its length once overflowed).
  const Tensor three = TensorFromValues(DataType::kInt32, {3}, {1, 2, 3});
  const Tensor one = TensorFromValues(DataType::kInt32, {1}, {9});
  absl::StatusOr<Tensor> huge_step = SliceScatter(
      {.input = three.view(), .src = one.view(), .step = std::numeric_limits<int64_t>::max()});
  ASSERT_TRUE(huge_step.ok()) << huge_step.status();
  EXPECT_EQ(ToDoubles(*huge_step), (std::vector<double>{9, 2, 3}));
}

// --------------------------------------------------------------------------------------------
// The identities of docs/semantics.md.

// Over dtype x device: both sides of each equality on the instance's device.
class ViewScatterEqualityTest : public testing::DeviceTest<DataType> {};

TEST_P(ViewScatterEqualityTest, SelectScatterIsSliceScatterOfUnsqueezedSrc) {
  const DataType dtype = leading_param();
  absl::BitGen gen = SeededGen(100 + static_cast<uint64_t>(dtype), kViewScatterSeedSalt);
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 4);
    Shape shape = RandomShape(gen, rank, 5);
    const int64_t axis = absl::Uniform<int64_t>(gen, -rank, rank);
    const int64_t wrapped_axis = axis < 0 ? axis + rank : axis;
    if (shape[wrapped_axis] == 0) shape[wrapped_axis] = 3;
    const int64_t size = shape[wrapped_axis];
    // The equality holds for every index but -1, whose Python slice -1:0 is empty (PyTorch rejects
    // that slice_scatter's src shape too; checked below): -1 is tested as size - 1.
    int64_t index = absl::Uniform<int64_t>(gen, -size, size);
    if (index == -1) index = size - 1;
    Shape src_shape = shape;
    src_shape.erase(src_shape.begin() + wrapped_axis);
    const Tensor input = RandomTensor(dtype, shape, gen);
    const Tensor src = RandomTensor(dtype, src_shape, gen);
    // s.unsqueeze(ax): the same bytes with a size-1 dimension at the (wrapped) axis.
    Shape unsqueezed_shape = src_shape;
    unsqueezed_shape.insert(unsqueezed_shape.begin() + wrapped_axis, 1);
    const TensorView unsqueezed(dtype, unsqueezed_shape, src.data());
    SCOPED_TRACE(absl::StrCat("input ", ShapeString(shape), " axis ", axis, " index ", index));

    absl::StatusOr<Tensor> selected = runner().Run(
        SelectScatterArgs{.input = input.view(), .src = src.view(), .axis = axis, .index = index});
    absl::StatusOr<Tensor> sliced = runner().Run(SliceScatterArgs{.input = input.view(),
                                                                  .src = unsqueezed,
                                                                  .axis = axis,
                                                                  .start = index,
                                                                  .end = index + 1,
                                                                  .step = 1});
    if (HasNoDeviceForm(selected.status()) || HasNoDeviceForm(sliced.status())) continue;
    ASSERT_TRUE(selected.ok()) << selected.status();
    ASSERT_TRUE(sliced.ok()) << sliced.status();
    ExpectSameBytes(*selected, *sliced);
  }
}

TEST(ViewScatterSliceBoundsTest, MinusOneToZeroIsEmpty) {
  const Tensor input = TensorFromValues(DataType::kFloat32, {2, 3}, Zeros(6));
  const Tensor src = TensorFromValues(DataType::kFloat32, {1, 3}, Ones(3));
  absl::StatusOr<Tensor> sliced = SliceScatter(
      {.input = input.view(), .src = src.view(), .axis = 0, .start = -1, .end = 0, .step = 1});
  EXPECT_THAT(sliced.status().message(), HasSubstr("= [0, 3]"));
}

TEST_P(ViewScatterEqualityTest, DiagonalScatterOfOwnDiagonalIsIdentity) {
  const DataType dtype = leading_param();
  absl::BitGen gen = SeededGen(200 + static_cast<uint64_t>(dtype), kViewScatterSeedSalt);
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 2, 4);
    const Shape shape = RandomShape(gen, rank, 5);
    const int64_t axis1 = absl::Uniform<int64_t>(gen, -rank, rank);
    int64_t axis2 = 0;
    do {
      axis2 = absl::Uniform<int64_t>(gen, -rank, rank);
    } while ((axis2 + rank) % rank == (axis1 + rank) % rank);
    const int64_t offset = absl::Uniform<int64_t>(absl::IntervalClosed, gen, -6, 6);
    const Tensor input = RandomTensor(dtype, shape, gen);
    const Tensor diagonal = ReferenceDiagonal(input.view(), offset, axis1, axis2);
    SCOPED_TRACE(absl::StrCat("input ", ShapeString(shape), " offset ", offset, " axes ", axis1,
                              ", ", axis2));
    absl::StatusOr<Tensor> out = runner().Run(DiagonalScatterArgs{.input = input.view(),
                                                                  .src = diagonal.view(),
                                                                  .offset = offset,
                                                                  .axis1 = axis1,
                                                                  .axis2 = axis2});
    if (HasNoDeviceForm(out.status())) continue;
    ASSERT_TRUE(out.ok()) << out.status();
    ExpectSameBytes(*out, input);
  }
}

TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(ViewScatterEqualityTest, ::testing::ValuesIn(kAllDataTypes),
                                      testing::DataTypeParamName);

// --------------------------------------------------------------------------------------------
// Errors: INVALID_ARGUMENT naming the op, the argument and the value.

class ViewScatterErrorTest : public ::testing::Test {
 protected:
  Tensor scalar_ = TensorFromValues(DataType::kFloat32, {}, {1});
  Tensor matrix_ = TensorFromValues(DataType::kFloat32, {2, 3}, Zeros(6));
  Tensor vector2_ = TensorFromValues(DataType::kFloat32, {2}, Ones(2));
  Tensor vector3_ = TensorFromValues(DataType::kFloat32, {3}, Ones(3));
};

TEST_F(ViewScatterErrorTest, RankZeroInput) {
  ExpectInvalidArgument(SelectScatter({.input = scalar_.view(), .src = scalar_.view()}).status(),
                        {"select_scatter", "rank of input = 0", ">= 1"});
  ExpectInvalidArgument(SliceScatter({.input = scalar_.view(), .src = scalar_.view()}).status(),
                        {"slice_scatter", "rank of input = 0", ">= 1"});
  ExpectInvalidArgument(DiagonalScatter({.input = scalar_.view(), .src = scalar_.view()}).status(),
                        {"diagonal_scatter", "rank of input = 0", ">= 2"});
}

TEST_F(ViewScatterErrorTest, RankOneInputToDiagonalScatter) {
  ExpectInvalidArgument(DiagonalScatter({.input = vector3_.view(), .src = scalar_.view()}).status(),
                        {"diagonal_scatter", "rank of input = 1", ">= 2"});
}

TEST_F(ViewScatterErrorTest, BadAxis) {
  ExpectInvalidArgument(
      SelectScatter({.input = matrix_.view(), .src = vector3_.view(), .axis = 2}).status(),
      {"select_scatter", "axis = 2", "-2 <= axis < 2"});
  ExpectInvalidArgument(
      SliceScatter({.input = matrix_.view(), .src = matrix_.view(), .axis = -3}).status(),
      {"slice_scatter", "axis = -3", "-2 <= axis < 2"});
  ExpectInvalidArgument(
      DiagonalScatter({.input = matrix_.view(), .src = vector2_.view(), .axis1 = 5}).status(),
      {"diagonal_scatter", "axis1 = 5"});
  ExpectInvalidArgument(
      DiagonalScatter({.input = matrix_.view(), .src = vector2_.view(), .axis2 = -3}).status(),
      {"diagonal_scatter", "axis2 = -3"});
}

TEST_F(ViewScatterErrorTest, IndexOutOfRange) {
  ExpectInvalidArgument(
      SelectScatter({.input = matrix_.view(), .src = vector2_.view(), .axis = 1, .index = 5})
          .status(),
      {"select_scatter: index = 5 is out of range for axis 1 of input with size 3 "
       "(expected -3 <= index < 3)"});
  ExpectInvalidArgument(
      SelectScatter({.input = matrix_.view(), .src = vector3_.view(), .axis = 0, .index = -3})
          .status(),
      {"select_scatter", "index = -3", "size 2"});
  const Tensor empty_axis = TensorFromValues(DataType::kFloat32, {2, 0}, {});
  ExpectInvalidArgument(
      SelectScatter({.input = empty_axis.view(), .src = vector2_.view(), .axis = 1, .index = 0})
          .status(),
      {"select_scatter", "index = 0", "size 0"});
}

TEST_F(ViewScatterErrorTest, NonPositiveStep) {
  ExpectInvalidArgument(
      SliceScatter({.input = matrix_.view(), .src = matrix_.view(), .step = 0}).status(),
      {"slice_scatter: step = 0 must be positive"});
  ExpectInvalidArgument(
      SliceScatter({.input = matrix_.view(), .src = matrix_.view(), .step = -1}).status(),
      {"slice_scatter", "step = -1", "positive"});
}

TEST_F(ViewScatterErrorTest, SrcShapeMismatch) {
  ExpectInvalidArgument(
      SelectScatter({.input = matrix_.view(), .src = vector2_.view(), .axis = 0}).status(),
      {"select_scatter", "src shape = [2]", "[3]", "[2, 3]"});
  ExpectInvalidArgument(
      SliceScatter({.input = matrix_.view(), .src = matrix_.view(), .axis = 1, .start = 1})
          .status(),
      {"slice_scatter", "src shape = [2, 3]", "[2, 2]"});
  ExpectInvalidArgument(
      DiagonalScatter({.input = matrix_.view(), .src = vector3_.view(), .offset = 0}).status(),
      {"diagonal_scatter", "src shape = [3]", "= [2]"});
  // No broadcasting of src (PyTorch requires the exact shape).
  const Tensor one = TensorFromValues(DataType::kFloat32, {1}, {1});
  ExpectInvalidArgument(
      SelectScatter({.input = matrix_.view(), .src = one.view(), .axis = 0}).status(),
      {"select_scatter", "src shape = [1]", "[3]"});
}

TEST_F(ViewScatterErrorTest, DtypeMismatch) {
  const Tensor ints = TensorFromValues(DataType::kInt32, {3}, {1, 2, 3});
  ExpectInvalidArgument(SelectScatter({.input = matrix_.view(), .src = ints.view()}).status(),
                        {"select_scatter", "src dtype = int32", "float32"});
  const Tensor int_matrix = TensorFromValues(DataType::kInt64, {2, 3}, Zeros(6));
  ExpectInvalidArgument(SliceScatter({.input = matrix_.view(), .src = int_matrix.view()}).status(),
                        {"slice_scatter", "src dtype = int64", "float32"});
  const Tensor doubles = TensorFromValues(DataType::kFloat64, {2}, {1, 2});
  ExpectInvalidArgument(DiagonalScatter({.input = matrix_.view(), .src = doubles.view()}).status(),
                        {"diagonal_scatter", "src dtype = float64", "float32"});
}

TEST_F(ViewScatterErrorTest, SameDiagonalAxes) {
  ExpectInvalidArgument(
      DiagonalScatter({.input = matrix_.view(), .src = vector2_.view(), .axis1 = 0, .axis2 = -2})
          .status(),
      {"diagonal_scatter: axis1 = 0 and axis2 = -2 refer to the same dimension 0"});
}

TEST_F(ViewScatterErrorTest, SwappedAxesDiagonalLength) {
  absl::StatusOr<ViewScatterPlan> plan = PlanDiagonalScatter(
      {.input = matrix_.view(), .src = vector2_.view(), .offset = 1, .axis1 = 1, .axis2 = 0});
  // axis1 = 1 (size 3), axis2 = 0 (size 2), offset 1: the diagonal starts at axis2 = 1 and has
  // min(3, 2 - 1) = 1 element, so a src of 2 elements is rejected with the window's shape.
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), AllOf(HasSubstr("src shape = [2]"), HasSubstr("= [1]")));
}

// --------------------------------------------------------------------------------------------
// On a GPU: byte for byte the CPU's (skipped where no GPU is usable).

class ViewScatterCudaTest : public testing::CudaTest {};

// A select, a stepped slice and an offset diagonal of every dtype, each the CPU kernel's bytes.
TEST_F(ViewScatterCudaTest, ViewScattersMatchTheCpu) {
  absl::BitGen gen = SeededGen(51, kViewScatterSeedSalt);
  for (DataType dtype : kAllDataTypes) {
    SCOPED_TRACE(DataTypeName(dtype));
    const Tensor input = testing::SmallIntegerValues(gen, dtype, {6, 7, 8});
    const Tensor row = testing::SmallIntegerValues(gen, dtype, {6, 8});
    const Tensor slice = testing::SmallIntegerValues(gen, dtype, {6, 3, 8});
    // min(6, 8 - 1) elements along the diagonal.
    const Tensor diagonal = testing::SmallIntegerValues(gen, dtype, {7, 6});
    std::vector<absl::StatusOr<ViewScatterPlan>> plans;
    plans.push_back(
        PlanSelectScatter({.input = input.view(), .src = row.view(), .axis = 1, .index = -2}));
    plans.push_back(PlanSliceScatter(
        {.input = input.view(), .src = slice.view(), .axis = 1, .start = 1, .end = 7, .step = 2}));
    plans.push_back(PlanDiagonalScatter(
        {.input = input.view(), .src = diagonal.view(), .offset = 1, .axis1 = 0, .axis2 = 2}));
    for (const absl::StatusOr<ViewScatterPlan>& plan : plans) {
      ASSERT_TRUE(plan.ok()) << plan.status();
      const absl::StatusOr<Tensor> cpu = testing::RunOn(TestDevice::kCpu, *plan);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      const absl::StatusOr<Tensor> gpu = testing::RunOn(TestDevice::kCuda, *plan);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      ExpectSameBytes(*gpu, *cpu);
    }
  }
}

}  // namespace
}  // namespace tensorops
