// IndexSelect and IndexReduce (docs/semantics.md, IndexSelect and IndexReduce) against the
// independent reference written below in this file: randomized over dtype x reduction x
// include_self, ranks 0-5, every axis (negative too), int32/int64 and strided indices,
// duplicate-heavy/negative/empty indices, zero-size dimensions, alpha, and one ~300k-element case
// per reduction, on the CPU and on CUDA (tests/device_runner.h; skipped where no GPU is usable);
// plus the PyTorch doc examples, every error with its message, and IndexSelect == Gather of the
// broadcast index on both devices.
#include "kernels/index_ops.h"

#include <complex>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/gather.h"
#include "kernels/reduction.h"
#include "kernels/scatter.h"
#include "kernels/tensor.h"
#include "tests/device_runner.h"
#include "tests/extremum_rule.h"
#include "tests/reference.h"

// ---------------------------------------------------------------------------------------------
// An independent reference for IndexSelect and IndexReduce (docs/semantics.md, IndexSelect and
// IndexReduce), written from docs/semantics.md and PyTorch's documentation alone. It shares no code
// with kernels/ (not the Gather/Scatter plans, not their kernels): it loops over every output
// position (IndexSelect) or every source position (IndexReduce), reads the 1-D index directly, and
// accumulates in float64 / complex<double> / wrapping 64-bit integers with the element helpers of
// tests/reference.h.
//
//   absl::StatusOr<Tensor> expected = testing::ReferenceIndexReduce(
//       x.view(), 0, idx.view(), src.view(), Reduction::kSum, /*include_self=*/true,
//       /*alpha=*/2.0);

namespace tensorops::testing {

namespace index_reference_internal {

// The 1-D index (rank 0 = one entry) read as int64 values, or INVALID_ARGUMENT.
inline absl::StatusOr<std::vector<int64_t>> IndexValues(const char* op, const TensorView& index) {
  using reference_internal::Invalid;
  if (index.rank() > 1) return Invalid(absl::StrCat(op, ": index must be 1-D"));
  if (index.dtype() != DataType::kInt32 && index.dtype() != DataType::kInt64) {
    return Invalid(absl::StrCat(op, ": index must be int32 or int64"));
  }
  std::vector<int64_t> values;
  const int64_t count = index.rank() == 0 ? 1 : index.shape()[0];
  for (int64_t k = 0; k < count; ++k) {
    values.push_back(reference_internal::LoadIndex(index, index.rank() == 0 ? Shape{} : Shape{k}));
  }
  return values;
}

// `shape` with rank 0 read as [1], the way PyTorch's index ops treat scalars.
inline Shape WalkShapeOf(const Shape& shape) { return shape.empty() ? Shape{1} : shape; }

}  // namespace index_reference_internal

// ReferenceIndexSelect: out.shape = x.shape with `axis` sized len(idx) (rank 0 stays rank 0, with
// exactly one index); out[i] = x[i with i_ax := idx[i_ax]]. Index values are checked at every
// output position that reads them.
inline absl::StatusOr<Tensor> ReferenceIndexSelect(const TensorView& input, int64_t axis,
                                                   const TensorView& index) {
  using namespace reference_internal;  // NOLINT
  absl::StatusOr<std::vector<int64_t>> values =
      index_reference_internal::IndexValues("index_select", index);
  if (!values.ok()) return values.status();
  absl::StatusOr<int64_t> ax = NormalizedAxis("index_select", axis, input.rank());
  if (!ax.ok()) return ax.status();
  const int64_t count = static_cast<int64_t>(values->size());
  if (input.rank() == 0 && count != 1) {
    return Invalid("index_select: a scalar input takes exactly one index");
  }
  const Shape input_shape = index_reference_internal::WalkShapeOf(input.shape());
  Shape out_shape = input_shape;
  out_shape[*ax] = count;
  const int64_t axis_size = input_shape[*ax];
  const int64_t width = ByteWidth(input.dtype());
  Tensor result(input.dtype(), input.rank() == 0 ? Shape{} : out_shape);
  for (int64_t position = 0; position < Count(out_shape); ++position) {
    Shape coordinates = Unravel(position, out_shape);
    const int64_t value = (*values)[coordinates[*ax]];
    if (value < -axis_size || value >= axis_size) {
      return Invalid(absl::StrCat("index_select: index[", coordinates[*ax], "] = ", value,
                                  " is out of range for size ", axis_size));
    }
    coordinates[*ax] = value < 0 ? value + axis_size : value;
    const int64_t offset = input.rank() == 0 ? 0 : OffsetOf(input, coordinates);
    std::memcpy(static_cast<char*>(result.data()) + position * width,
                static_cast<const char*>(input.data()) + offset * width,
                static_cast<size_t>(width));
  }
  return result;
}

// ReferenceIndexReduce: out = x, then for every position j of src (row-major),
// out[j with j_ax := idx[j_ax]] (+)= alpha * src[j], with the include_self, MEAN, bool and
// ASSIGN (last in row-major order wins) rules. `alpha` must be 1 unless reduce is SUM; integer
// dtypes take its real part truncated, bool "alpha != 0".
inline absl::StatusOr<Tensor> ReferenceIndexReduce(const TensorView& input, int64_t axis,
                                                   const TensorView& index, const TensorView& src,
                                                   Reduction reduce, bool include_self,
                                                   std::complex<double> alpha = 1.0) {
  using namespace reference_internal;  // NOLINT
  const DataType dtype = input.dtype();
  const Kind kind = KindOf(dtype);
  absl::StatusOr<std::vector<int64_t>> values =
      index_reference_internal::IndexValues("index_reduce", index);
  if (!values.ok()) return values.status();
  if (src.dtype() != dtype) return Invalid("index_reduce: src dtype differs from input dtype");
  if (IsComplexKind(kind) && (reduce == Reduction::kAmax || reduce == Reduction::kAmin)) {
    return Invalid("index_reduce: AMAX/AMIN are not defined for complex");
  }
  if (kind == Kind::kBool && reduce == Reduction::kMean) {
    return Invalid("index_reduce: MEAN is not defined for bool");
  }
  if (alpha != std::complex<double>(1.0) && reduce != Reduction::kSum) {
    return Invalid("index_reduce: alpha is only defined for SUM");
  }
  absl::StatusOr<int64_t> ax = NormalizedAxis("index_reduce", axis, input.rank());
  if (!ax.ok()) return ax.status();
  const Shape x_shape = index_reference_internal::WalkShapeOf(input.shape());
  const Shape src_shape = index_reference_internal::WalkShapeOf(src.shape());
  if (x_shape.size() != src_shape.size()) return Invalid("index_reduce: src rank != input rank");
  const int64_t rank = static_cast<int64_t>(x_shape.size());
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t expected = d == *ax ? static_cast<int64_t>(values->size()) : x_shape[d];
    if (src_shape[d] != expected) return Invalid("index_reduce: src shape mismatch");
  }
  const int64_t axis_size = x_shape[*ax];
  const int64_t out_count = Count(x_shape);
  std::vector<Element> accumulators(static_cast<size_t>(out_count));
  std::vector<int64_t> counts(static_cast<size_t>(out_count), include_self ? 1 : 0);
  for (int64_t position = 0; position < out_count; ++position) {
    const Shape coordinates = Unravel(position, x_shape);
    accumulators[position] =
        LoadElement(dtype, input.data(), input.rank() == 0 ? 0 : OffsetOf(input, coordinates));
  }
  for (int64_t position = 0; position < Count(src_shape); ++position) {
    const Shape coordinates = Unravel(position, src_shape);
    const int64_t value = (*values)[coordinates[*ax]];
    if (value < -axis_size || value >= axis_size) {
      return Invalid(absl::StrCat("index_reduce: index[", coordinates[*ax], "] = ", value,
                                  " is out of range for size ", axis_size));
    }
    int64_t dest = 0;
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t coordinate =
          d == *ax ? (value < 0 ? value + axis_size : value) : coordinates[d];
      dest = dest * x_shape[d] + coordinate;
    }
    Element source =
        LoadElement(dtype, src.data(), src.rank() == 0 ? 0 : OffsetOf(src, coordinates));
    if (alpha == std::complex<double>(1.0)) {
      // Unscaled: complex NaN * 1 would turn (nan, b) into (nan, nan).
    } else if (kind == Kind::kBool) {
      source.integer = source.integer && alpha.real() != 0.0;
    } else if (IsIntegerKind(kind)) {
      source.integer =
          static_cast<int64_t>(static_cast<uint64_t>(source.integer) *
                               static_cast<uint64_t>(static_cast<int64_t>(alpha.real())));
    } else if (IsComplexKind(kind)) {
      source.number *= alpha;
    } else {
      source.number *= alpha.real();
    }
    if (counts[dest] == 0) {
      accumulators[dest] = source;
    } else {
      Combine(kind, reduce, accumulators[dest], source);
    }
    ++counts[dest];
  }
  return reference_internal::FinishReduction(dtype, input.shape(), reduce, accumulators, counts);
}

}  // namespace tensorops::testing

namespace tensorops {
namespace {

using testing::DeviceRunner;
using testing::DoublesIfOk;
using testing::ExpectInvalidArgument;
using testing::ExpectTensorsNear;
using testing::HasNoDeviceForm;
using testing::IndexPattern;
using testing::IndexTensor;
using testing::LaidOutTensor;
using testing::RandomIndex;
using testing::RandomTensor;
using testing::ReferenceIndexReduce;
using testing::ReferenceIndexSelect;
using testing::SeededGen;
using testing::SteppedCopy;
using testing::TensorFromComplex;
using testing::TensorFromValues;
using testing::ToDoubles;
using testing::ToleranceFor;
using testing::reference_internal::ShapeString;

// kIndexOpsSeedSalt salts every generator this file seeds, keeping its random inputs apart from the
// other suites' (testing::SeededGen).
constexpr uint64_t kIndexOpsSeedSalt = 0x1d3;

// The random shape of an input: rank 0-5, sizes shrinking with the rank, some zero.
Shape RandomInputShape(absl::BitGen& gen, int64_t rank) {
  const int64_t max_size = rank >= 4 ? 3 : (rank == 3 ? 4 : 7);
  Shape shape(rank);
  for (int64_t d = 0; d < rank; ++d) {
    shape[d] = absl::Bernoulli(gen, 0.05)
                   ? 0
                   : absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, max_size);
  }
  return shape;
}

// A random 1-D index valid for an axis of `axis_size` (empty when the axis is), of random length,
// sometimes rank 0, sometimes strided.
struct RandomIndexCase {
  Tensor tensor;
  LaidOutTensor strided;
  bool use_strided = false;
  std::string description;

  TensorView view() const { return use_strided ? strided.view : tensor.view(); }
};

RandomIndexCase MakeRandomIndex(absl::BitGen& gen, int64_t axis_size, bool scalar_input) {
  RandomIndexCase index;
  IndexPattern pattern = testing::RandomIndexPattern(gen);
  int64_t length = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, 7);
  if (absl::Bernoulli(gen, 0.08)) length = 0;
  if (pattern == IndexPattern::kUnique) length = std::min(length, axis_size);
  if (axis_size == 0) length = 0;
  const bool rank0 = scalar_input || (length > 0 && absl::Bernoulli(gen, 0.08));
  if (scalar_input) length = 1;
  const DataType dtype = absl::Bernoulli(gen, 0.5) ? DataType::kInt32 : DataType::kInt64;
  const Shape shape = rank0 ? Shape{} : Shape{length};
  index.tensor = RandomIndex(dtype, shape, 0, axis_size, pattern, gen);
  index.use_strided = !rank0 && absl::Bernoulli(gen, 0.25);
  if (index.use_strided) index.strided = SteppedCopy(index.tensor);
  index.description =
      absl::StrCat("index ", ShapeString(shape), " ", std::string(DataTypeName(dtype)), " ",
                   testing::IndexPatternName(pattern), index.use_strided ? " strided" : "");
  return index;
}

// ---------------------------------------------------------------------------------------------
// IndexSelect, randomized.

// Over dtype x device: the same cases on the CPU and on CUDA.
class IndexSelectRandomTest : public testing::DeviceTest<DataType> {};

TEST_P(IndexSelectRandomTest, MatchesReference) {
  const DataType dtype = leading_param();
  for (uint64_t seed = 0; seed < 300; ++seed) {
    absl::BitGen gen = SeededGen(static_cast<uint64_t>(dtype) * 100003 + seed, kIndexOpsSeedSalt);
    const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, 5);
    const int64_t walk_rank = std::max<int64_t>(rank, 1);
    const Shape input_shape = RandomInputShape(gen, rank);
    const int64_t axis = absl::Uniform<int64_t>(gen, 0, walk_rank);
    const int64_t axis_size = rank == 0 ? 1 : input_shape[axis];
    const RandomIndexCase index = MakeRandomIndex(gen, axis_size, rank == 0);
    const Tensor input = RandomTensor(dtype, input_shape, gen, {.nan_fraction = 0.05});
    const bool strided_input = rank > 0 && absl::Bernoulli(gen, 0.25);
    const LaidOutTensor stepped = SteppedCopy(input);
    const TensorView input_view = strided_input ? stepped.view : input.view();
    const int64_t signed_axis = absl::Bernoulli(gen, 0.4) ? axis - walk_rank : axis;
    SCOPED_TRACE(absl::StrCat("input ", ShapeString(input_shape), strided_input ? " strided" : "",
                              " axis ", signed_axis, " ", index.description));

    const absl::StatusOr<Tensor> actual = runner().Run(
        IndexSelectArgs{.input = input_view, .index = index.view(), .axis = signed_axis});
    if (HasNoDeviceForm(actual.status())) continue;
    const absl::StatusOr<Tensor> expected =
        ReferenceIndexSelect(input_view, signed_axis, index.view());
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_TRUE(actual.ok()) << actual.status();
    ExpectTensorsNear(*actual, *expected);
  }
}

// IndexSelect(x, ax, idx) == Gather(x, ax, idx broadcast), as the definitions in docs/semantics.md
// imply, with the broadcast index materialized as a real tensor (no stride tricks on the Gather
// side).
TEST_P(IndexSelectRandomTest, EqualsGatherOfMaterializedIndex) {
  const DataType dtype = leading_param();
  for (uint64_t seed = 0; seed < 40; ++seed) {
    absl::BitGen gen =
        SeededGen(static_cast<uint64_t>(dtype) * 7 + seed + 900000, kIndexOpsSeedSalt);
    const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 4);
    const Shape input_shape = RandomInputShape(gen, rank);
    const int64_t axis = absl::Uniform<int64_t>(gen, 0, rank);
    const RandomIndexCase index = MakeRandomIndex(gen, input_shape[axis], false);
    const Tensor input = RandomTensor(dtype, input_shape, gen);
    const std::vector<double> values = ToDoubles(index.tensor);
    Shape full_shape = input_shape;
    full_shape[axis] = static_cast<int64_t>(values.size());
    std::vector<int64_t> full_values(
        static_cast<size_t>(testing::reference_internal::Count(full_shape)));
    for (size_t position = 0; position < full_values.size(); ++position) {
      const Shape coordinates =
          testing::reference_internal::Unravel(static_cast<int64_t>(position), full_shape);
      full_values[position] = static_cast<int64_t>(values[coordinates[axis]]);
    }
    const Tensor full_index = IndexTensor(full_shape, full_values, index.tensor.dtype());
    SCOPED_TRACE(
        absl::StrCat("input ", ShapeString(input_shape), " axis ", axis, " ", index.description));
    absl::StatusOr<Tensor> selected =
        runner().Run(IndexSelectArgs{.input = input.view(), .index = index.view(), .axis = axis});
    absl::StatusOr<Tensor> gathered =
        runner().Run(GatherArgs{.input = input.view(), .index = full_index.view(), .axis = axis});
    if (HasNoDeviceForm(selected.status()) || HasNoDeviceForm(gathered.status())) continue;
    ASSERT_TRUE(selected.ok()) << selected.status();
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    ExpectTensorsNear(*selected, *gathered);
  }
}

TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(IndexSelectRandomTest, ::testing::ValuesIn(kAllDataTypes),
                                      testing::DataTypeParamName);

// Blocks of at least 64 bytes after the axis take the CPU's row copy (one memcpy per index value)
// instead of the element walk: every dtype, blocks on either side of that size, random, negative
// and duplicate-heavy indices, inputs strided before the axis, and an out-of-range index named as
// the walk names it.
// RowsCase is an input shape of rank 2 to 4 and an axis before its last dimension, which (1 to 80
// elements) makes the blocks after the axis from a few bytes to a few hundred: on both sides of
// the row paths' threshold.
struct RowsCase {
  Shape shape;
  int64_t axis = 0;
};
RowsCase RandomRowsCase(absl::BitGen& gen) {
  const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 2, 4);
  RowsCase rows{.shape = Shape(rank), .axis = absl::Uniform<int64_t>(gen, 0, rank - 1)};
  for (int64_t d = 0; d < rank; ++d) {
    rows.shape[d] = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 5);
  }
  rows.shape[rank - 1] = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 80);
  return rows;
}

TEST_P(IndexSelectRandomTest, RowsOfEveryLengthMatchTheReference) {
  const DataType dtype = leading_param();
  for (uint64_t seed = 0; seed < 40; ++seed) {
    absl::BitGen gen =
        SeededGen(static_cast<uint64_t>(dtype) * 31 + seed + 700000, kIndexOpsSeedSalt);
    const auto [input_shape, axis] = RandomRowsCase(gen);
    const IndexPattern pattern = testing::RandomIndexPattern(gen);
    const int64_t length = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 40);
    const Tensor index = RandomIndex(
        absl::Bernoulli(gen, 0.5) ? DataType::kInt32 : DataType::kInt64,
        {pattern == IndexPattern::kUnique ? std::min(length, input_shape[axis]) : length}, 0,
        input_shape[axis], pattern, gen);
    const Tensor input = RandomTensor(dtype, input_shape, gen);
    const bool strided_input = absl::Bernoulli(gen, 0.3);
    const LaidOutTensor stepped = SteppedCopy(input);
    const TensorView input_view = strided_input ? stepped.view : input.view();
    SCOPED_TRACE(absl::StrCat("input ", ShapeString(input_shape), strided_input ? " strided" : "",
                              " axis ", axis, " ", testing::IndexPatternName(pattern)));
    const absl::StatusOr<Tensor> actual =
        runner().Run(IndexSelectArgs{.input = input_view, .index = index.view(), .axis = axis});
    if (HasNoDeviceForm(actual.status())) continue;
    const absl::StatusOr<Tensor> expected = ReferenceIndexSelect(input_view, axis, index.view());
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_TRUE(actual.ok()) << actual.status();
    ExpectTensorsNear(*actual, *expected);
  }
  // An index out of range in the middle of a row copy.
  const Tensor input = Tensor::Zeros(dtype, {6, 3, 40});
  const Tensor index = IndexTensor({5}, {0, -6, 5, 9, 1});
  const absl::StatusOr<Tensor> bad =
      runner().Run(IndexSelectArgs{.input = input.view(), .index = index.view(), .axis = 0});
  if (!HasNoDeviceForm(bad.status())) {
    ExpectInvalidArgument(
        bad.status(),
        {"index_select: index[3] = 9 is out of range for axis 0 of input with size 6"});
  }
}

// ~300k output elements: the multi-threaded Gather walk.
TEST(IndexSelectTest, LargeMatchesReference) {
  absl::BitGen gen = SeededGen(4242, kIndexOpsSeedSalt);
  const Tensor input = RandomTensor(DataType::kFloat32, {60, 50, 100}, gen);
  const Tensor index =
      RandomIndex(DataType::kInt32, {64}, 0, 50, IndexPattern::kDuplicateHeavy, gen);
  const absl::StatusOr<Tensor> expected = ReferenceIndexSelect(input.view(), -2, index.view());
  const absl::StatusOr<Tensor> actual =
      IndexSelect({.input = input.view(), .index = index.view(), .axis = -2});
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(actual.ok()) << actual.status();
  EXPECT_EQ(actual->shape(), Shape({60, 64, 100}));
  ExpectTensorsNear(*actual, *expected);
}

// ---------------------------------------------------------------------------------------------
// IndexReduce, randomized.

// An IndexReduce call and everything the reference needs for it.
struct IndexReduceCase {
  Tensor input;
  LaidOutTensor strided_input;
  bool use_strided_input = false;
  RandomIndexCase index;
  Tensor source;
  LaidOutTensor strided_source;
  bool use_strided_source = false;
  int64_t axis = 0;
  Reduction reduce = Reduction::kAssign;
  bool include_self = true;
  Scalar alpha = Scalar(int64_t{1});
  std::complex<double> alpha_value = 1.0;
  int64_t max_terms = 1;
  std::string description;

  TensorView input_view() const { return use_strided_input ? strided_input.view : input.view(); }
  TensorView source_view() const {
    return use_strided_source ? strided_source.view : source.view();
  }
  IndexReduceArgs Args() const {
    return IndexReduceArgs{.input = input_view(),
                           .index = index.view(),
                           .source = source_view(),
                           .axis = axis,
                           .reduce = reduce,
                           .include_self = include_self,
                           .alpha = alpha};
  }
  absl::StatusOr<Tensor> Reference() const {
    return ReferenceIndexReduce(input_view(), axis, index.view(), source_view(), reduce,
                                include_self, alpha_value);
  }
};

// An alpha PyTorch accepts for `dtype`, exact in every dtype: integral for integer dtypes, bool
// for bool, sometimes fractional or complex for floating ones.
void PickAlpha(DataType dtype, absl::BitGen& gen, IndexReduceCase& c) {
  if (dtype == DataType::kBool) {
    const bool value = absl::Bernoulli(gen, 0.7);
    c.alpha = Scalar(value);
    c.alpha_value = value ? 1.0 : 0.0;
    return;
  }
  static constexpr int64_t kIntegers[] = {-1, 2, 3, 0};
  const int64_t integer = kIntegers[absl::Uniform<size_t>(gen, 0, std::size(kIntegers))];
  if (IsIntegral(dtype, false) || absl::Bernoulli(gen, 0.5)) {
    c.alpha = Scalar(dtype == DataType::kUInt8 ? std::abs(integer) : integer);
    c.alpha_value = static_cast<double>(dtype == DataType::kUInt8 ? std::abs(integer) : integer);
  } else if (IsComplex(dtype) && absl::Bernoulli(gen, 0.5)) {
    c.alpha = Scalar(std::complex<double>(0.5, -1.0));
    c.alpha_value = {0.5, -1.0};
  } else {
    c.alpha = Scalar(-0.5);
    c.alpha_value = -0.5;
  }
}

IndexReduceCase RandomIndexReduceCase(DataType dtype, Reduction reduce, bool include_self,
                                      absl::BitGen& gen) {
  IndexReduceCase c;
  c.reduce = reduce;
  c.include_self = include_self;
  const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, 5);
  const int64_t walk_rank = std::max<int64_t>(rank, 1);
  const Shape input_shape = RandomInputShape(gen, rank);
  const int64_t axis = absl::Uniform<int64_t>(gen, 0, walk_rank);
  const int64_t axis_size = rank == 0 ? 1 : input_shape[axis];
  c.index = MakeRandomIndex(gen, axis_size, rank == 0);
  const int64_t length = c.index.tensor.numel();
  Shape source_shape = input_shape;
  if (rank > 0) source_shape[axis] = length;
  const testing::ValueOptions values = testing::ValuesForReduction(reduce);
  c.input = RandomTensor(dtype, input_shape, gen, values);
  c.source = RandomTensor(dtype, source_shape, gen, values);
  c.use_strided_input = rank > 0 && absl::Bernoulli(gen, 0.25);
  if (c.use_strided_input) c.strided_input = SteppedCopy(c.input);
  c.use_strided_source = rank > 0 && absl::Bernoulli(gen, 0.25);
  if (c.use_strided_source) c.strided_source = SteppedCopy(c.source);
  if (reduce == Reduction::kSum && absl::Bernoulli(gen, 0.3)) PickAlpha(dtype, gen, c);
  c.axis = absl::Bernoulli(gen, 0.4) ? axis - walk_rank : axis;
  c.max_terms = length + 1;
  c.description =
      absl::StrCat("input ", ShapeString(input_shape), c.use_strided_input ? " strided" : "",
                   " src ", ShapeString(source_shape), c.use_strided_source ? " strided" : "",
                   " axis ", c.axis, " ", c.index.description, " alpha ", c.alpha.ToString());
  return c;
}

// ExpectIndexReduceMatchesReference runs `c` on the runner's device (a case with no GPU form is
// skipped, and counted) and compares the result with the reference's.
void ExpectIndexReduceMatchesReference(const IndexReduceCase& c, DeviceRunner& runner) {
  SCOPED_TRACE(c.description);
  const absl::StatusOr<Tensor> actual = runner.Run(c.Args());
  if (HasNoDeviceForm(actual.status())) return;
  testing::ExpectReductionResult("index_reduce", c.input.dtype(), c.reduce, c.max_terms, actual,
                                 c.Reference());
}

// Over dtype x reduction x include_self x device: the same cases on the CPU and on CUDA.
class IndexReduceRandomTest : public testing::DeviceDtypeReductionTest {};

TEST_P(IndexReduceRandomTest, MatchesReference) {
  for (uint64_t seed = 0; seed < 150; ++seed) {
    absl::BitGen gen = SeededGen(ParamSeed() * 7919 + seed, kIndexOpsSeedSalt);
    ExpectIndexReduceMatchesReference(RandomIndexReduceCase(dtype(), reduce(), include_self(), gen),
                                      runner());
  }
}

TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(IndexReduceRandomTest, testing::AllDtypeReductionParams(),
                                      testing::DtypeReductionParamName);

// ~300k source elements per reduction, so the multi-threaded Scatter walk runs; duplicate-heavy
// indices check that ASSIGN keeps the last occurrence in index order and that nothing races.
// The AMAX/AMIN rule of docs/semantics.md for NaNs and signed zeros (tests/extremum_rule.h) through
// IndexReduce: column p of the source holds order p of a case's values, all reduced into element p
// of the input's one row, so every order must give the bits the rule selects.
class IndexReduceExtremumRuleTest : public testing::DeviceTest<DataType> {
 protected:
  DataType dtype() const { return leading_param(); }
};

TEST_P(IndexReduceExtremumRuleTest, NanAndSignedZeroBitsIgnoreTheOrderOfUpdates) {
  for (const testing::ExtremumCase& rule_case : testing::ExtremumCases(dtype())) {
    const std::vector<std::vector<uint64_t>> orders = testing::AllOrders(rule_case.sources);
    const int64_t columns = static_cast<int64_t>(orders.size());
    const int64_t slices = static_cast<int64_t>(rule_case.sources.size());
    Tensor input(dtype(), {1, columns});
    Tensor source(dtype(), {slices, columns});
    for (int64_t p = 0; p < columns; ++p) {
      testing::SetBits(input, p, rule_case.input);
      for (int64_t k = 0; k < slices; ++k) testing::SetBits(source, k * columns + p, orders[p][k]);
    }
    Tensor index = Tensor::Zeros(DataType::kInt64, {slices});
    for (Reduction reduce : {Reduction::kAmax, Reduction::kAmin}) {
      for (bool include_self : {true, false}) {
        SCOPED_TRACE(absl::StrCat(rule_case.name, " ", std::string(ReductionName(reduce)),
                                  " include_self ", include_self));
        absl::StatusOr<Tensor> out = runner().Run(IndexReduceArgs{.input = input.view(),
                                                                  .index = index.view(),
                                                                  .source = source.view(),
                                                                  .axis = 0,
                                                                  .reduce = reduce,
                                                                  .include_self = include_self});
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

TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(IndexReduceExtremumRuleTest,
                                      ::testing::ValuesIn(testing::kExtremumDtypes),
                                      testing::DataTypeParamName);

class IndexReduceLargeTest : public testing::DeviceTest<Reduction> {};

TEST_P(IndexReduceLargeTest, MatchesReference) {
  const Reduction reduce = leading_param();
  absl::BitGen gen = SeededGen(777 + static_cast<uint64_t>(reduce), kIndexOpsSeedSalt);
  IndexReduceCase c;
  c.reduce = reduce;
  c.include_self = static_cast<int>(reduce) % 2 == 0;
  const DataType dtype = reduce == Reduction::kAssign ? DataType::kInt64 : DataType::kFloat32;
  const Shape input_shape = {32, 16, 200};
  const Shape source_shape = {32, 48, 200};
  c.input = RandomTensor(dtype, input_shape, gen, testing::ValuesForReduction(reduce));
  c.index.tensor = RandomIndex(DataType::kInt64, {48}, 0, 16, IndexPattern::kDuplicateHeavy, gen);
  c.source = RandomTensor(dtype, source_shape, gen, testing::ValuesForReduction(reduce));
  c.axis = 1;
  if (reduce == Reduction::kSum) {
    c.alpha = Scalar(2.0);
    c.alpha_value = 2.0;
  }
  c.max_terms = 49;
  c.description = absl::StrCat("large ", std::string(ReductionName(reduce)));
  ExpectIndexReduceMatchesReference(c, runner());
}

TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(IndexReduceLargeTest,
                                      ::testing::ValuesIn(testing::kAllReductions),
                                      testing::ReductionParamName);

// ---------------------------------------------------------------------------------------------
// Hand cases from the PyTorch documentation.

TEST(IndexSelectTest, PyTorchDocExample) {
  // x = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]; index_select(x, 0, [0, 2]) and (x, 1, ...).
  const Tensor x =
      TensorFromValues(DataType::kFloat32, {3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  const Tensor index = IndexTensor({2}, {0, 2});
  absl::StatusOr<Tensor> rows = IndexSelect({.input = x.view(), .index = index.view(), .axis = 0});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->shape(), Shape({2, 4}));
  EXPECT_EQ(DoublesIfOk(rows), std::vector<double>({0, 1, 2, 3, 8, 9, 10, 11}));
  absl::StatusOr<Tensor> columns =
      IndexSelect({.input = x.view(), .index = index.view(), .axis = 1});
  ASSERT_TRUE(columns.ok()) << columns.status();
  EXPECT_EQ(columns->shape(), Shape({3, 2}));
  EXPECT_EQ(DoublesIfOk(columns), std::vector<double>({0, 2, 4, 6, 8, 10}));
}

TEST(IndexSelectTest, NegativeDuplicateAndEmptyIndex) {
  const Tensor x = TensorFromValues(DataType::kInt16, {2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor index = IndexTensor({4}, {-1, 0, -1, 2}, DataType::kInt32);
  EXPECT_EQ(DoublesIfOk(IndexSelect({.input = x.view(), .index = index.view(), .axis = -1})),
            std::vector<double>({3, 1, 3, 3, 6, 4, 6, 6}));
  const Tensor empty = IndexTensor({0}, {});
  absl::StatusOr<Tensor> none = IndexSelect({.input = x.view(), .index = empty.view(), .axis = 1});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->shape(), Shape({2, 0}));
}

TEST(IndexSelectTest, ScalarInputAndScalarIndex) {
  // torch.index_select(torch.tensor(5.), 0, torch.tensor([0])) is tensor(5.): rank 0 stays rank 0.
  const Tensor scalar = TensorFromValues(DataType::kFloat64, {}, {5});
  for (const int64_t value : {0, -1}) {
    const Tensor index = IndexTensor({1}, {value});
    absl::StatusOr<Tensor> result =
        IndexSelect({.input = scalar.view(), .index = index.view(), .axis = -1});
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->rank(), 0);
    EXPECT_EQ(DoublesIfOk(result), std::vector<double>({5}));
  }
  // A rank-0 index is one index: the axis keeps size 1.
  const Tensor x = TensorFromValues(DataType::kUInt8, {3, 2}, {1, 2, 3, 4, 5, 6});
  const Tensor index = IndexTensor({}, {2});
  absl::StatusOr<Tensor> result = IndexSelect({.input = x.view(), .index = index.view()});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->shape(), Shape({1, 2}));
  EXPECT_EQ(DoublesIfOk(result), std::vector<double>({5, 6}));
}

TEST(IndexSelectTest, PlanBroadcastsTheIndexAlongAxis) {
  const Tensor x = Tensor::Zeros(DataType::kFloat32, {2, 5, 3});
  const Tensor index = IndexTensor({4}, {0, 1, 2, 3});
  absl::StatusOr<GatherPlan> plan =
      PlanIndexSelect({.input = x.view(), .index = index.view(), .axis = 1});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->op, "index_select");
  EXPECT_EQ(plan->result_shape, Shape({2, 4, 3}));
  EXPECT_EQ(plan->index.shape(), Shape({2, 4, 3}));
  EXPECT_EQ(plan->index.strides(), Shape({0, 1, 0}));
  EXPECT_EQ(plan->input.strides(), Shape({15, 0, 1}));
  EXPECT_EQ(plan->input_axis_stride, 3);
  EXPECT_EQ(plan->input_axis_size, 5);
  EXPECT_EQ(plan->original_index.shape(), Shape({4}));
}

Tensor Ones53() { return TensorFromValues(DataType::kFloat32, {5, 3}, std::vector<double>(15, 1)); }

// index_add of blocks of at least 64 bytes (float32/64, int32/64) takes the CPU's row adds instead
// of the element walk. They must give the walk's sums bit for bit: the same call as a Scatter SUM
// of the index materialized at the source's shape (which the row adds never take), and the
// reference, in place and not, with alpha, duplicate-heavy and negative indices, strided operands.
TEST(IndexReduceTest, RowAddsEqualTheElementWalkBitForBit) {
  for (const DataType dtype :
       {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kInt64}) {
    for (uint64_t seed = 0; seed < 30; ++seed) {
      absl::BitGen gen =
          SeededGen(static_cast<uint64_t>(dtype) * 17 + seed + 800000, kIndexOpsSeedSalt);
      const auto [input_shape, axis] = RandomRowsCase(gen);
      const IndexPattern pattern = absl::Bernoulli(gen, 0.5) ? IndexPattern::kDuplicateHeavy
                                                             : testing::RandomIndexPattern(gen);
      int64_t length = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 30);
      if (pattern == IndexPattern::kUnique) length = std::min(length, input_shape[axis]);
      const Tensor index =
          RandomIndex(DataType::kInt64, {length}, 0, input_shape[axis], pattern, gen);
      Shape source_shape = input_shape;
      source_shape[axis] = length;
      const Tensor input = RandomTensor(dtype, input_shape, gen);
      const Tensor source = RandomTensor(dtype, source_shape, gen);
      const LaidOutTensor stepped_source = SteppedCopy(source);
      const bool strided = absl::Bernoulli(gen, 0.3);
      const TensorView source_view = strided ? stepped_source.view : source.view();
      const int64_t alpha = absl::Bernoulli(gen, 0.3) ? 3 : 1;
      SCOPED_TRACE(absl::StrCat(std::string(DataTypeName(dtype)), " input ",
                                ShapeString(input_shape), " axis ", axis, " ",
                                testing::IndexPatternName(pattern), " alpha ", alpha,
                                strided ? " strided source" : ""));
      const IndexReduceArgs args{.input = input.view(),
                                 .index = index.view(),
                                 .source = source_view,
                                 .axis = axis,
                                 .alpha = Scalar(alpha)};
      const absl::StatusOr<Tensor> rows = IndexReduce(args);
      ASSERT_TRUE(rows.ok()) << rows.status();

      // The walk: Scatter SUM with the index written out at the source's shape.
      const std::vector<double> values = ToDoubles(index);
      std::vector<int64_t> full(static_cast<size_t>(NumElements(source_shape)));
      for (size_t position = 0; position < full.size(); ++position) {
        const Shape at =
            testing::reference_internal::Unravel(static_cast<int64_t>(position), source_shape);
        full[position] = static_cast<int64_t>(values[at[axis]]);
      }
      const Tensor full_index = IndexTensor(source_shape, full);
      absl::StatusOr<ScatterPlan> scaled = PlanIndexReduce(args);  // owns alpha * source
      ASSERT_TRUE(scaled.ok()) << scaled.status();
      const TensorView scaled_source =
          scaled->source_storage.has_value() ? scaled->source_storage->view() : source_view;
      const absl::StatusOr<Tensor> walk = Scatter({.input = input.view(),
                                                   .index = full_index.view(),
                                                   .source = scaled_source,
                                                   .axis = axis,
                                                   .reduce = Reduction::kSum});
      ASSERT_TRUE(walk.ok()) << walk.status();
      ASSERT_EQ(rows->nbytes(), walk->nbytes());
      EXPECT_EQ(std::memcmp(rows->data(), walk->data(), static_cast<size_t>(rows->nbytes())), 0);
      const absl::StatusOr<Tensor> expected = ReferenceIndexReduce(
          input.view(), axis, index.view(), source_view, Reduction::kSum, true, alpha);
      ASSERT_TRUE(expected.ok()) << expected.status();
      ExpectTensorsNear(*rows, *expected, ToleranceFor(dtype, Reduction::kSum, length + 1));

      // In place: the result is the input's own memory.
      Tensor in_place = input.Clone();
      absl::StatusOr<ScatterPlan> plan = PlanIndexReduce({.input = in_place.view(),
                                                          .index = index.view(),
                                                          .source = source_view,
                                                          .axis = axis,
                                                          .alpha = Scalar(alpha)});
      ASSERT_TRUE(plan.ok()) << plan.status();
      ASSERT_TRUE(cpu::Scatter(*plan, in_place.mutable_view()).ok());
      EXPECT_EQ(std::memcmp(in_place.data(), rows->data(), static_cast<size_t>(rows->nbytes())), 0);
    }
  }
  // An out-of-range index is named as the walk names it.
  const Tensor input = Tensor::Zeros(DataType::kFloat32, {4, 32});
  const Tensor index = IndexTensor({3}, {1, -4, 4});
  const Tensor source = Tensor::Zeros(DataType::kFloat32, {3, 32});
  ExpectInvalidArgument(
      IndexReduce({.input = input.view(), .index = index.view(), .source = source.view()}).status(),
      {"index_reduce: index[2] = 4 is out of range for axis 0 of input with size 4"});
}

TEST(IndexReduceTest, IndexAddDocExample) {
  const Tensor x = Ones53();
  const Tensor t = TensorFromValues(DataType::kFloat32, {3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  const Tensor index = IndexTensor({3}, {0, 4, 2});
  IndexReduceArgs args{.input = x.view(), .index = index.view(), .source = t.view()};
  EXPECT_EQ(DoublesIfOk(IndexReduce(args)),
            std::vector<double>({2, 3, 4, 1, 1, 1, 8, 9, 10, 1, 1, 1, 5, 6, 7}));
  // x.index_add_(0, index, t, alpha=-1) and alpha=2.
  args.alpha = Scalar(int64_t{-1});
  EXPECT_EQ(DoublesIfOk(IndexReduce(args)),
            std::vector<double>({0, -1, -2, 1, 1, 1, -6, -7, -8, 1, 1, 1, -3, -4, -5}));
  args.alpha = Scalar(2.0);
  EXPECT_EQ(DoublesIfOk(IndexReduce(args)),
            std::vector<double>({3, 5, 7, 1, 1, 1, 15, 17, 19, 1, 1, 1, 9, 11, 13}));
}

TEST(IndexReduceTest, IndexAddAlphaInIntegerAndComplexDtypes) {
  const Tensor x = TensorFromValues(DataType::kInt8, {3}, {100, 0, -1});
  const Tensor t = TensorFromValues(DataType::kInt8, {3}, {100, 5, 7});
  const Tensor index = IndexTensor({3}, {0, 1, 1});
  // int8 wraps: 100 + 2 * 100 = 300 -> 44.
  EXPECT_EQ(DoublesIfOk(IndexReduce({.input = x.view(),
                                     .index = index.view(),
                                     .source = t.view(),
                                     .alpha = Scalar(int64_t{2})})),
            std::vector<double>({44, 24, -1}));
  const Tensor cx = TensorFromComplex(DataType::kComplex64, {2}, {{1, 1}, {0, 0}});
  const Tensor ct = TensorFromComplex(DataType::kComplex64, {1}, {{2, 0}});
  const Tensor one = IndexTensor({1}, {1});
  absl::StatusOr<Tensor> result = IndexReduce({.input = cx.view(),
                                               .index = one.view(),
                                               .source = ct.view(),
                                               .alpha = Scalar(std::complex<double>(0, 1))});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(testing::ElementAsComplex(*result, 0), std::complex<double>(1, 1));
  EXPECT_EQ(testing::ElementAsComplex(*result, 1), std::complex<double>(0, 2));
}

TEST(IndexReduceTest, IndexCopyLastOccurrenceWins) {
  // x.index_copy_(0, [4, 0, 2, 4], t): row 4 takes t's last row.
  const Tensor x = Ones53();
  const Tensor t =
      TensorFromValues(DataType::kFloat32, {4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  const Tensor index = IndexTensor({4}, {4, 0, 2, -1});
  EXPECT_EQ(DoublesIfOk(IndexReduce({.input = x.view(),
                                     .index = index.view(),
                                     .source = t.view(),
                                     .reduce = Reduction::kAssign})),
            std::vector<double>({4, 5, 6, 1, 1, 1, 7, 8, 9, 1, 1, 1, 10, 11, 12}));
}

// The float32 rounding of `value`, as a double.
double AsFloat(double value) { return static_cast<float>(value); }

TEST(IndexReduceTest, IndexReduceDocExamples) {
  const Tensor x = TensorFromValues(DataType::kFloat32, {5, 3}, std::vector<double>(15, 2));
  const Tensor t =
      TensorFromValues(DataType::kFloat32, {4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  const Tensor index = IndexTensor({4}, {0, 4, 2, 0});
  IndexReduceArgs args{
      .input = x.view(), .index = index.view(), .source = t.view(), .reduce = Reduction::kProd};
  EXPECT_EQ(DoublesIfOk(IndexReduce(args)),
            std::vector<double>({20, 44, 72, 2, 2, 2, 14, 16, 18, 2, 2, 2, 8, 10, 12}));
  args.include_self = false;
  EXPECT_EQ(DoublesIfOk(IndexReduce(args)),
            std::vector<double>({10, 22, 36, 2, 2, 2, 7, 8, 9, 2, 2, 2, 4, 5, 6}));

  args.reduce = Reduction::kMean;
  args.include_self = true;
  EXPECT_EQ(DoublesIfOk(IndexReduce(args)),
            std::vector<double>({AsFloat(13.0 / 3), 5, AsFloat(17.0 / 3), 2, 2, 2, 4.5, 5, 5.5, 2,
                                 2, 2, 3, 3.5, 4}));
  args.include_self = false;
  EXPECT_EQ(DoublesIfOk(IndexReduce(args)),
            std::vector<double>({5.5, 6.5, 7.5, 2, 2, 2, 7, 8, 9, 2, 2, 2, 4, 5, 6}));

  args.reduce = Reduction::kAmax;
  args.include_self = true;
  EXPECT_EQ(DoublesIfOk(IndexReduce(args)),
            std::vector<double>({10, 11, 12, 2, 2, 2, 7, 8, 9, 2, 2, 2, 4, 5, 6}));
  args.reduce = Reduction::kAmin;
  EXPECT_EQ(DoublesIfOk(IndexReduce(args)),
            std::vector<double>({1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}));
  args.include_self = false;
  EXPECT_EQ(DoublesIfOk(IndexReduce(args)),
            std::vector<double>({1, 2, 3, 2, 2, 2, 7, 8, 9, 2, 2, 2, 4, 5, 6}));
}

TEST(IndexReduceTest, IntegerMeanFloors) {
  // PyTorch: the mean of -3 and -4 is -4.
  const Tensor x = TensorFromValues(DataType::kInt32, {1}, {-3});
  const Tensor t = TensorFromValues(DataType::kInt32, {1}, {-4});
  const Tensor index = IndexTensor({1}, {0});
  EXPECT_EQ(DoublesIfOk(IndexReduce({.input = x.view(),
                                     .index = index.view(),
                                     .source = t.view(),
                                     .reduce = Reduction::kMean})),
            std::vector<double>({-4}));
}

TEST(IndexReduceTest, EmptyIndexReturnsInput) {
  const Tensor x = TensorFromValues(DataType::kFloat32, {2, 2}, {1, 2, 3, 4});
  const Tensor t = Tensor(DataType::kFloat32, {2, 0});
  const Tensor index = IndexTensor({0}, {}, DataType::kInt32);
  EXPECT_EQ(DoublesIfOk(IndexReduce({.input = x.view(),
                                     .index = index.view(),
                                     .source = t.view(),
                                     .axis = 1,
                                     .reduce = Reduction::kProd,
                                     .include_self = false})),
            std::vector<double>({1, 2, 3, 4}));
}

TEST(IndexReduceTest, ScalarInput) {
  const Tensor x = TensorFromValues(DataType::kFloat32, {}, {3});
  const Tensor t = TensorFromValues(DataType::kFloat32, {}, {4});
  const Tensor index = IndexTensor({1}, {-1});
  absl::StatusOr<Tensor> result =
      IndexReduce({.input = x.view(), .index = index.view(), .source = t.view()});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->rank(), 0);
  EXPECT_EQ(DoublesIfOk(result), std::vector<double>({7}));
}

TEST(IndexReduceTest, PlanOwnsScaledSourceOnlyWhenAlphaIsNotOne) {
  const Tensor x = Ones53();
  const Tensor t = TensorFromValues(DataType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor index = IndexTensor({2}, {1, 3});
  absl::StatusOr<ScatterPlan> plan =
      PlanIndexReduce({.input = x.view(), .index = index.view(), .source = t.view()});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->op, "index_reduce");
  EXPECT_FALSE(plan->source_storage.has_value());
  EXPECT_EQ(plan->source.data(), t.data());
  EXPECT_EQ(plan->index.strides(), Shape({1, 0}));
  plan = PlanIndexReduce(
      {.input = x.view(), .index = index.view(), .source = t.view(), .alpha = Scalar(3.0)});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->source_storage.has_value());
  EXPECT_EQ(ToDoubles(*plan->source_storage), std::vector<double>({3, 6, 9, 12, 15, 18}));
  EXPECT_EQ(
      DoublesIfOk(IndexReduce(
          {.input = x.view(), .index = index.view(), .source = t.view(), .alpha = Scalar(3.0)})),
      std::vector<double>({1, 1, 1, 4, 7, 10, 1, 1, 1, 13, 16, 19, 1, 1, 1}));
}

// ---------------------------------------------------------------------------------------------
// Errors: INVALID_ARGUMENT naming the op, the argument, the value and the rule.

TEST(IndexSelectTest, Errors) {
  const Tensor x = Tensor::Zeros(DataType::kFloat32, {5, 4});
  const Tensor matrix = IndexTensor({2, 2}, {0, 1, 2, 3});
  ExpectInvalidArgument(IndexSelect({.input = x.view(), .index = matrix.view()}).status(),
                        {"index_select: index has rank 2", "[2, 2]", "1-D"});
  const Tensor floats = TensorFromValues(DataType::kFloat32, {2}, {0, 1});
  ExpectInvalidArgument(IndexSelect({.input = x.view(), .index = floats.view()}).status(),
                        {"index_select: index.dtype = float32", "int32 or int64"});
  const Tensor out_of_range = IndexTensor({4}, {0, 2, -4, 7});
  ExpectInvalidArgument(
      IndexSelect({.input = x.view(), .index = out_of_range.view()}).status(),
      {"index_select: index[3] = 7 is out of range for axis 0 of input with size 5",
       "-5 <= index < 5"});
  ExpectInvalidArgument(
      IndexSelect({.input = x.view(), .index = out_of_range.view(), .axis = -1}).status(),
      {"index_select: index[3] = 7 is out of range for axis 1 of input with size 4"});
  const Tensor negative = IndexTensor({2}, {1, -6}, DataType::kInt32);
  ExpectInvalidArgument(IndexSelect({.input = x.view(), .index = negative.view()}).status(),
                        {"index_select: index[1] = -6"});
  const Tensor ok_index = IndexTensor({1}, {0});
  ExpectInvalidArgument(
      IndexSelect({.input = x.view(), .index = ok_index.view(), .axis = 2}).status(),
      {"index_select", "axis = 2"});
  ExpectInvalidArgument(
      IndexSelect({.input = x.view(), .index = ok_index.view(), .axis = -3}).status(),
      {"index_select", "axis = -3"});
  // An empty axis takes no index at all.
  const Tensor empty_rows = Tensor::Zeros(DataType::kFloat32, {0, 3});
  ExpectInvalidArgument(
      IndexSelect({.input = empty_rows.view(), .index = ok_index.view()}).status(),
      {"index_select: index[0] = 0 is out of range for axis 0 of input with size 0"});
  const Tensor scalar = TensorFromValues(DataType::kFloat32, {}, {1});
  const Tensor two = IndexTensor({2}, {0, 0});
  ExpectInvalidArgument(IndexSelect({.input = scalar.view(), .index = two.view()}).status(),
                        {"index_select: index has 2 elements", "rank 0"});
  const Tensor one = IndexTensor({1}, {1});
  ExpectInvalidArgument(IndexSelect({.input = scalar.view(), .index = one.view()}).status(),
                        {"index_select: index[0] = 1 is out of range", "size 1"});
  ExpectInvalidArgument(
      IndexSelect({.input = scalar.view(), .index = one.view(), .axis = 1}).status(),
      {"index_select", "axis = 1"});
}

TEST(IndexReduceTest, Errors) {
  const Tensor x = Tensor::Zeros(DataType::kFloat32, {5, 4});
  const Tensor src = Tensor::Zeros(DataType::kFloat32, {2, 4});
  const Tensor index = IndexTensor({2}, {0, 1});
  const auto run = [&](IndexReduceArgs args) { return IndexReduce(args).status(); };

  const Tensor matrix = IndexTensor({2, 1}, {0, 1});
  ExpectInvalidArgument(run({.input = x.view(), .index = matrix.view(), .source = src.view()}),
                        {"index_reduce: index has rank 2", "1-D"});
  const Tensor floats = TensorFromValues(DataType::kFloat64, {2}, {0, 1});
  ExpectInvalidArgument(run({.input = x.view(), .index = floats.view(), .source = src.view()}),
                        {"index_reduce: index.dtype = float64", "int32 or int64"});
  const Tensor out_of_range = IndexTensor({2}, {1, -6}, DataType::kInt32);
  ExpectInvalidArgument(
      run({.input = x.view(), .index = out_of_range.view(), .source = src.view()}),
      {"index_reduce: index[1] = -6 is out of range for axis 0 of input with size 5"});
  const Tensor narrow = Tensor::Zeros(DataType::kFloat32, {2, 3});
  ExpectInvalidArgument(run({.input = x.view(), .index = index.view(), .source = narrow.view()}),
                        {"index_reduce: src.shape[1] = 3 does not match input.shape[1] = 4"});
  const Tensor long_src = Tensor::Zeros(DataType::kFloat32, {3, 4});
  ExpectInvalidArgument(run({.input = x.view(), .index = index.view(), .source = long_src.view()}),
                        {"index_reduce: src.shape[0] = 3 does not match the index's length 2"});
  const Tensor flat = Tensor::Zeros(DataType::kFloat32, {2});
  ExpectInvalidArgument(run({.input = x.view(), .index = index.view(), .source = flat.view()}),
                        {"index_reduce: src has rank 1 but input has rank 2"});
  const Tensor doubles = Tensor::Zeros(DataType::kFloat64, {2, 4});
  ExpectInvalidArgument(run({.input = x.view(), .index = index.view(), .source = doubles.view()}),
                        {"index_reduce: src.dtype = float64 does not match input.dtype = float32"});
  ExpectInvalidArgument(
      run({.input = x.view(), .index = index.view(), .source = src.view(), .axis = 2}),
      {"index_reduce", "axis = 2"});
  ExpectInvalidArgument(run({.input = x.view(),
                             .index = index.view(),
                             .source = src.view(),
                             .reduce = Reduction::kProd,
                             .alpha = Scalar(int64_t{2})}),
                        {"index_reduce: alpha = 2 is only defined for reduce = SUM", "PROD"});
  ExpectInvalidArgument(run({.input = x.view(),
                             .index = index.view(),
                             .source = src.view(),
                             .reduce = Reduction::kAssign,
                             .alpha = Scalar(0.5)}),
                        {"index_reduce: alpha = 0.5 is only defined for reduce = SUM", "ASSIGN"});
  // alpha == 1 is fine whatever the reduction.
  EXPECT_TRUE(IndexReduce({.input = x.view(),
                           .index = index.view(),
                           .source = src.view(),
                           .reduce = Reduction::kAmax,
                           .alpha = Scalar(1.0)})
                  .ok());

  // PyTorch's alpha rules: integral alpha for integral input, bool alpha only for bool input.
  const Tensor ix = Tensor::Zeros(DataType::kInt32, {5});
  const Tensor isrc = Tensor::Zeros(DataType::kInt32, {2});
  ExpectInvalidArgument(
      run({.input = ix.view(), .index = index.view(), .source = isrc.view(), .alpha = Scalar(2.5)}),
      {"index_reduce: alpha = 2.5", "integer", "int32"});
  ExpectInvalidArgument(run({.input = ix.view(),
                             .index = index.view(),
                             .source = isrc.view(),
                             .alpha = Scalar(false)}),
                        {"index_reduce: alpha = false", "bool"});
  const Tensor fsrc = Tensor::Zeros(DataType::kFloat32, {2, 4});
  ExpectInvalidArgument(run({.input = x.view(),
                             .index = index.view(),
                             .source = fsrc.view(),
                             .alpha = Scalar(std::complex<double>(1, 1))}),
                        {"index_reduce", "alpha"});

  const Tensor cx = Tensor::Zeros(DataType::kComplex64, {5});
  const Tensor csrc = Tensor::Zeros(DataType::kComplex64, {2});
  ExpectInvalidArgument(run({.input = cx.view(),
                             .index = index.view(),
                             .source = csrc.view(),
                             .reduce = Reduction::kAmax}),
                        {"index_reduce: reduce = AMAX is not defined for complex64"});
  const Tensor bx = Tensor::Zeros(DataType::kBool, {5});
  const Tensor bsrc = Tensor::Zeros(DataType::kBool, {2});
  ExpectInvalidArgument(run({.input = bx.view(),
                             .index = index.view(),
                             .source = bsrc.view(),
                             .reduce = Reduction::kMean}),
                        {"index_reduce: reduce = MEAN is not defined for bool"});
}

}  // namespace
}  // namespace tensorops
