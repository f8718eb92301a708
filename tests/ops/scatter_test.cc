// Scatter (docs/semantics.md, Scatter) against the independent reference in reference.h: randomized
// over dtype x reduction x include_self, ranks, axes, index dtypes and patterns, tensor and scalar
// sources, with and without Paddle's broadcast, on the CPU and on CUDA (tests/device_runner.h;
// skipped where no GPU is usable); plus the PyTorch/Paddle doc examples, the reduction rules of
// docs/semantics.md one by one, every error it names, and Gather(Scatter(...)) == src on both
// devices. On a GPU also: every dtype and reduction byte for byte the CPU's on exact values, and
// deterministic float sums that repeat bit for bit.
#include "kernels/scatter.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <variant>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/reducing_scatter.h"
#include "kernels/cpu/streaming_store.h"
#include "kernels/device_call.h"
#include "kernels/dispatch.h"
#include "kernels/gather.h"
#include "tests/device_runner.h"
#include "tests/extremum_rule.h"
#include "tests/reference.h"

namespace tensorops {
namespace {

using testing::DeviceRunner;
using testing::ExpectSameBytes;
using testing::ExpectTensorsNear;
using testing::HasNoDeviceForm;
using ::testing::HasSubstr;
using testing::IndexPattern;
using testing::IndexTensor;
using testing::RandomIndex;
using testing::RandomTensor;
using testing::ReferenceGather;
using testing::ReferenceScatter;
using testing::SeededGen;
using testing::TensorFromComplex;
using testing::TensorFromValues;
using testing::TestDevice;
using testing::ToDoubles;
using testing::ToleranceFor;
using testing::reference_internal::ShapeString;

// kScatterSeedSalt salts every generator this file seeds, keeping its random inputs apart from the
// other suites' (testing::SeededGen).
constexpr uint64_t kScatterSeedSalt = 0x5ca7;

// A Scatter call and everything the reference needs for it.
struct ScatterCase {
  Tensor input;
  Tensor index;
  Tensor source;  // The source tensor, or the rank-0 scalar value when `use_value`.
  bool use_value = false;
  Scalar value;
  int64_t axis = 0;
  Reduction reduce = Reduction::kAssign;
  bool include_self = true;
  bool broadcast = false;
  int64_t max_terms = 1;  // Values reduced into one destination, at most (for the tolerance).
  std::string description;

  ScatterArgs Args() const {
    return ScatterArgs{.input = input.view(),
                       .index = index.view(),
                       .source = use_value ? std::variant<TensorView, Scalar>(value)
                                           : std::variant<TensorView, Scalar>(source.view()),
                       .axis = axis,
                       .reduce = reduce,
                       .include_self = include_self,
                       .broadcast = broadcast};
  }

  absl::StatusOr<Tensor> Reference() const {
    TensorView src = source.view();
    if (use_value && !broadcast) src = testing::BroadcastScalarView(source, index.shape());
    return ReferenceScatter(input.view(), axis, index.view(), src, reduce, include_self, broadcast);
  }
};

// A random scalar of `dtype`'s kind whose conversion is exact.
Scalar RandomScalar(DataType dtype, absl::BitGen& gen) {
  if (dtype == DataType::kBool) return Scalar(absl::Bernoulli(gen, 0.5));
  if (IsIntegral(dtype, false)) {
    return Scalar(
        absl::Uniform<int64_t>(absl::IntervalClosed, gen, dtype == DataType::kUInt8 ? 0 : -8, 8));
  }
  const double real = absl::Uniform<int>(absl::IntervalClosed, gen, -32, 32) * 0.25;
  if (IsComplex(dtype)) return Scalar(std::complex<double>(real, -0.5));
  return Scalar(real);
}

Tensor ScalarAsTensor(const Scalar& scalar, DataType dtype) {
  const Scalar::Value& value = scalar.value();
  if (const auto* c = std::get_if<std::complex<double>>(&value)) {
    return TensorFromComplex(dtype, {}, {*c});
  }
  double real = 0;
  if (const auto* b = std::get_if<bool>(&value)) real = *b;
  if (const auto* i = std::get_if<int64_t>(&value)) real = static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&value)) real = *d;
  return TensorFromValues(dtype, {}, {real});
}

// A random valid Scatter call. Without broadcast: index no larger than the input (but along the
// axis) and no larger than the source. With broadcast: either the index fits in the input and
// has sizes 1 or the input's off the axis (both broadcast to S), or it is longer along the axis
// (only the source broadcasts, to the index's shape).
ScatterCase RandomScatterCase(DataType dtype, Reduction reduce, bool include_self, bool broadcast,
                              absl::BitGen& gen) {
  ScatterCase c;
  c.reduce = reduce;
  c.include_self = include_self;
  c.broadcast = broadcast;
  const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, 4);
  const int64_t walk_rank = std::max<int64_t>(rank, 1);
  const int64_t max_size = rank >= 4 ? 4 : 5;
  const int64_t axis = absl::Uniform<int64_t>(gen, 0, walk_rank);
  IndexPattern pattern = testing::RandomIndexPattern(gen);
  Shape input_shape(rank);
  Shape index_shape(rank);
  Shape source_shape;
  for (int64_t d = 0; d < rank; ++d) input_shape[d] = testing::RandomDimSize(gen, max_size);
  int64_t axis_size = rank == 0 ? 1 : input_shape[axis];
  // With broadcast, the index is either inside the input (both broadcast to S) or longer along
  // the axis (which an empty axis cannot be, as no index value would be valid).
  const bool index_fits = !broadcast || rank == 0 || axis_size == 0 || absl::Bernoulli(gen, 0.7);
  for (int64_t d = 0; d < rank; ++d) {
    if (d == axis) continue;
    if (broadcast && index_fits) {
      index_shape[d] = absl::Bernoulli(gen, 0.5) && input_shape[d] > 0 ? 1 : input_shape[d];
    } else {
      index_shape[d] = absl::Bernoulli(gen, 0.5)
                           ? input_shape[d]
                           : absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, input_shape[d]);
    }
  }
  if (rank > 0) {
    if (axis_size == 0) {
      index_shape[axis] = 0;
    } else if (broadcast && !index_fits) {
      index_shape[axis] = axis_size + absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 3);
      if (pattern == IndexPattern::kUnique) pattern = IndexPattern::kRandom;
    } else if (pattern == IndexPattern::kUnique || broadcast) {
      index_shape[axis] = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, axis_size);
    } else {
      index_shape[axis] = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, 6);
    }
  }
  // Iteration shape and the source's shape.
  Shape iteration_shape = index_shape;
  if (broadcast && index_fits) {
    iteration_shape = input_shape;
    if (rank > 0) iteration_shape[axis] = index_shape[axis];
  }
  if (broadcast) {
    // Drop some leading dimensions and make some sizes 1.
    const int64_t dropped = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, rank);
    for (int64_t d = dropped; d < rank; ++d) {
      source_shape.push_back(absl::Bernoulli(gen, 0.3) ? 1 : iteration_shape[d]);
    }
  } else {
    for (int64_t d = 0; d < rank; ++d) {
      source_shape.push_back(index_shape[d] +
                             (absl::Bernoulli(gen, 0.3) ? absl::Uniform(gen, 1, 3) : 0));
    }
  }
  const DataType index_dtype = absl::Bernoulli(gen, 0.5) ? DataType::kInt32 : DataType::kInt64;
  const testing::ValueOptions values = testing::ValuesForReduction(reduce);
  c.input = RandomTensor(dtype, input_shape, gen, values);
  c.index = RandomIndex(index_dtype, index_shape, axis, axis_size, pattern, gen);
  c.use_value = absl::Bernoulli(gen, 0.15);
  if (c.use_value) {
    c.value = RandomScalar(dtype, gen);
    c.source = ScalarAsTensor(c.value, dtype);
  } else {
    c.source = RandomTensor(dtype, source_shape, gen, values);
  }
  c.axis = absl::Bernoulli(gen, 0.3) ? axis - walk_rank : axis;
  c.max_terms = (rank == 0 ? 1 : iteration_shape[axis]) + 1;
  c.description = absl::StrCat(
      "input ", ShapeString(input_shape), " index ", ShapeString(index_shape), " (",
      std::string(DataTypeName(index_dtype)), ", ", testing::IndexPatternName(pattern), ") ",
      c.use_value ? absl::StrCat("value ", c.value.ToString())
                  : absl::StrCat("src ", ShapeString(source_shape)),
      " axis ", c.axis, broadcast ? " broadcast" : "");
  return c;
}

// ExpectScatterMatchesReference runs `c` on the runner's device (a case with no GPU form is
// skipped, and counted) and compares the result with the reference's.
void ExpectScatterMatchesReference(const ScatterCase& c, DeviceRunner& runner) {
  SCOPED_TRACE(c.description);
  const absl::StatusOr<Tensor> actual = runner.Run(c.Args());
  if (HasNoDeviceForm(actual.status())) return;
  testing::ExpectReductionResult("scatter", c.input.dtype(), c.reduce, c.max_terms, actual,
                                 c.Reference());
}

// On the CPU.
void ExpectScatterMatchesReference(const ScatterCase& c) {
  DeviceRunner cpu(TestDevice::kCpu);
  ExpectScatterMatchesReference(c, cpu);
}

// Over dtype x reduction x include_self x device: the same cases on the CPU and on CUDA.
class ScatterRandomTest : public testing::DeviceDtypeReductionTest {};

TEST_P(ScatterRandomTest, MatchesReference) {
  for (uint64_t seed = 0; seed < 25; ++seed) {
    absl::BitGen gen = SeededGen(ParamSeed() * 7919 + seed, kScatterSeedSalt);
    ExpectScatterMatchesReference(
        RandomScatterCase(dtype(), reduce(), include_self(), /*broadcast=*/false, gen), runner());
  }
}

TEST_P(ScatterRandomTest, BroadcastMatchesReference) {
  for (uint64_t seed = 0; seed < 15; ++seed) {
    absl::BitGen gen = SeededGen(ParamSeed() * 7919 + seed + 500000, kScatterSeedSalt);
    ExpectScatterMatchesReference(
        RandomScatterCase(dtype(), reduce(), include_self(), /*broadcast=*/true, gen), runner());
  }
}

// ~300k index elements, so the multi-threaded walk runs; duplicate-heavy indices check that ASSIGN
// still resolves to the last writer in row-major order and that reductions do not race.
TEST_P(ScatterRandomTest, LargeMatchesReference) {
  struct Large {
    Shape input_shape;
    Shape index_shape;
    int64_t axis;
    IndexPattern pattern;
  };
  const Large cases[] = {
      {{64, 4800}, {600, 500}, 0, IndexPattern::kDuplicateHeavy},
      {{600, 500}, {600, 500}, -1, IndexPattern::kDuplicateHeavy},
      {{30, 100, 100}, {30, 100, 100}, 1, IndexPattern::kRandom},
      {{20, 50, 300}, {20, 50, 300}, 2, IndexPattern::kUnique},
  };
  const uint64_t which = ParamSeed() % std::size(cases);
  const Large& large = cases[which];
  absl::BitGen gen = SeededGen(ParamSeed() + 99, kScatterSeedSalt);
  ScatterCase c;
  c.reduce = reduce();
  c.include_self = include_self();
  const int64_t rank = static_cast<int64_t>(large.input_shape.size());
  const int64_t axis = large.axis < 0 ? large.axis + rank : large.axis;
  const testing::ValueOptions values = testing::ValuesForReduction(reduce());
  c.input = RandomTensor(dtype(), large.input_shape, gen, values);
  c.index = RandomIndex(which % 2 == 0 ? DataType::kInt64 : DataType::kInt32, large.index_shape,
                        axis, large.input_shape[axis], large.pattern, gen);
  c.source = RandomTensor(dtype(), large.index_shape, gen, values);
  c.axis = large.axis;
  c.max_terms = large.index_shape[axis] + 1;
  c.description = absl::StrCat("large case ", which);
  ExpectScatterMatchesReference(c, runner());
}

TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(ScatterRandomTest, testing::AllDtypeReductionParams(),
                                      testing::DtypeReductionParamName);

// A float16/bfloat16 case of the two tests below: a random input of `input_shape`, an int64 index
// of `index_shape` along `axis` (from the end when negative), a source of the index's shape.
ScatterCase HalfAccumulationCase(DataType dtype, Reduction reduce, bool include_self,
                                 const Shape& input_shape, const Shape& index_shape, int64_t axis,
                                 IndexPattern pattern, absl::BitGen& gen) {
  const int64_t rank = static_cast<int64_t>(input_shape.size());
  const int64_t dim = axis < 0 ? axis + rank : axis;
  const testing::ValueOptions values = testing::ValuesForReduction(reduce);
  ScatterCase c;
  c.reduce = reduce;
  c.include_self = include_self;
  c.input = RandomTensor(dtype, input_shape, gen, values);
  c.index = RandomIndex(DataType::kInt64, index_shape, dim, input_shape[dim], pattern, gen);
  c.source = RandomTensor(dtype, index_shape, gen, values);
  c.axis = axis;
  c.max_terms = index_shape[dim] + 1;
  c.description =
      absl::StrCat(std::string(DataTypeName(dtype)), " ", std::string(ReductionName(reduce)),
                   include_self ? " include_self" : "", " input ", ShapeString(input_shape),
                   " index ", ShapeString(index_shape), " axis ", axis);
  return c;
}

// float16/bfloat16 SUM, PROD and MEAN accumulate in a float32 shadow whose rows are padded when
// their length is a multiple of 256 elements (1 KiB), so the enumeration addresses the shadow, not
// the result, and the shadow's rows map back onto the result's. Shapes with such rows along every
// axis kind, without and with include_self (MEAN's counts share the shadow's layout). Along the
// last axis the index misses a line: one that reaches every line reduces line by line instead
// (the next test).
TEST(ScatterTest, HalfAccumulationThroughAPaddedShadowMatchesReference) {
  struct Padded {
    Shape input_shape;
    Shape index_shape;
    int64_t axis;
    IndexPattern pattern;
  };
  const Padded cases[] = {
      {{300, 512}, {300, 512}, 0, IndexPattern::kRandom},
      {{6, 40, 256}, {6, 40, 256}, 1, IndexPattern::kDuplicateHeavy},
      {{4, 256}, {3, 256}, -1, IndexPattern::kUnique},
  };
  absl::BitGen gen = SeededGen(2718, kScatterSeedSalt);
  for (const DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    for (const Reduction reduce : {Reduction::kSum, Reduction::kProd, Reduction::kMean}) {
      for (const bool include_self : {true, false}) {
        for (const Padded& padded : cases) {
          ExpectScatterMatchesReference(HalfAccumulationCase(dtype, reduce, include_self,
                                                             padded.input_shape, padded.index_shape,
                                                             padded.axis, padded.pattern, gen));
        }
      }
    }
  }
}

// float16/bfloat16 SUM, PROD and MEAN along the last axis, when the index reaches every line of
// the result, reduce each line in a shadow of its own of at most 4096 elements
// (ReducingScatter::RunLines); longer lines, and an index that misses lines, take the
// whole-result shadow. Both sides of each boundary, an index longer and shorter than the line, a
// transposed input (copied into the result first) and an in-place call.
TEST(ScatterTest, HalfAccumulationLineByLineMatchesReference) {
  struct Lines {
    Shape input_shape;
    Shape index_shape;
    IndexPattern pattern;
  };
  const Lines cases[] = {
      {{3, 4096}, {3, 4096}, IndexPattern::kDuplicateHeavy},  // the longest line on the stack
      {{2, 4097}, {2, 4097}, IndexPattern::kRandom},          // one longer: the whole shadow
      {{4, 6, 33}, {4, 6, 20}, IndexPattern::kDuplicateHeavy},
      {{4, 10}, {4, 25}, IndexPattern::kRandom},  // more updates per line than elements
      {{5, 40}, {4, 40}, IndexPattern::kUnique},  // misses a line: the whole shadow
      {{7}, {12}, IndexPattern::kDuplicateHeavy},
  };
  absl::BitGen gen = SeededGen(31415, kScatterSeedSalt);
  for (const DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    for (const Reduction reduce : {Reduction::kSum, Reduction::kProd, Reduction::kMean}) {
      for (const bool include_self : {true, false}) {
        SCOPED_TRACE(absl::StrCat(std::string(DataTypeName(dtype)), " ",
                                  std::string(ReductionName(reduce)),
                                  include_self ? " include_self" : ""));
        for (const Lines& lines : cases) {
          ExpectScatterMatchesReference(HalfAccumulationCase(dtype, reduce, include_self,
                                                             lines.input_shape, lines.index_shape,
                                                             /*axis=*/-1, lines.pattern, gen));
        }
        const testing::ValueOptions values = testing::ValuesForReduction(reduce);

        // Byte for byte what the whole-result shadow gives: the first two rows of a [3, 300] input
        // scattered by an index of all three rows (line by line) and of the first two (whole).
        Tensor rows = RandomTensor(dtype, {3, 300}, gen, values);
        Tensor rows_index =
            RandomIndex(DataType::kInt64, {3, 300}, 1, 300, IndexPattern::kDuplicateHeavy, gen);
        Tensor rows_source = RandomTensor(dtype, {3, 300}, gen, values);
        const absl::StatusOr<Tensor> by_line = Scatter({.input = rows.view(),
                                                        .index = rows_index.view(),
                                                        .source = rows_source.view(),
                                                        .axis = 1,
                                                        .reduce = reduce,
                                                        .include_self = include_self});
        const absl::StatusOr<Tensor> whole =
            Scatter({.input = rows.view(),
                     .index = TensorView(DataType::kInt64, {2, 300}, {300, 1}, rows_index.data()),
                     .source = TensorView(dtype, {2, 300}, {300, 1}, rows_source.data()),
                     .axis = 1,
                     .reduce = reduce,
                     .include_self = include_self});
        ASSERT_TRUE(by_line.ok()) << by_line.status();
        ASSERT_TRUE(whole.ok()) << whole.status();
        EXPECT_EQ(std::memcmp(by_line->data(), whole->data(), 2 * 300 * ItemSize(dtype)), 0);

        // The input transposed: a [6, 9] view of a [9, 6] tensor, scattered along its last axis.
        Tensor storage = RandomTensor(dtype, {9, 6}, gen, values);
        const TensorView transposed(dtype, {6, 9}, {1, 6}, storage.data());
        Tensor contiguous(dtype, {6, 9});
        CopyElements(transposed, contiguous.mutable_view());
        Tensor index = RandomIndex(DataType::kInt32, {6, 9}, 1, 9, IndexPattern::kRandom, gen);
        Tensor source = RandomTensor(dtype, {6, 9}, gen, values);
        const ScatterArgs args{.input = transposed,
                               .index = index.view(),
                               .source = source.view(),
                               .axis = 1,
                               .reduce = reduce,
                               .include_self = include_self};
        const absl::StatusOr<Tensor> expected = ReferenceScatter(
            contiguous.view(), 1, index.view(), source.view(), reduce, include_self, false);
        ASSERT_TRUE(expected.ok()) << expected.status();
        testing::ExpectReductionResult("scatter of a transposed input", dtype, reduce,
                                       /*max_terms=*/10, Scatter(args), expected);

        // In place: the result is the input, each line read into its shadow before it is written.
        Tensor result = contiguous.Clone();
        ScatterArgs in_place = args;
        in_place.input = result.view();
        const absl::StatusOr<ScatterPlan> plan = PlanScatter(in_place);
        ASSERT_TRUE(plan.ok()) << plan.status();
        ASSERT_TRUE(cpu::Scatter(*plan, result.mutable_view()).ok());
        testing::ExpectReductionResult("scatter in place", dtype, reduce, /*max_terms=*/10,
                                       absl::StatusOr<Tensor>(std::move(result)), expected);
      }
    }
  }
}

// Gather(Scatter(zeros, ax, idx, src, ASSIGN), ax, idx) == src for idx unique along ax
// (docs/semantics.md), both ops on the instance's device.
class ScatterGatherRoundTripTest : public testing::DeviceTest<DataType> {
 protected:
  DataType dtype() const { return leading_param(); }
};

TEST_P(ScatterGatherRoundTripTest, GatherOfScatterIsSource) {
  for (uint64_t seed = 0; seed < 30; ++seed) {
    absl::BitGen gen = SeededGen(static_cast<uint64_t>(dtype()) * 100 + seed + 7, kScatterSeedSalt);
    const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, 4);
    const int64_t axis = absl::Uniform<int64_t>(gen, 0, std::max<int64_t>(rank, 1));
    Shape input_shape(rank);
    Shape index_shape(rank);
    for (int64_t d = 0; d < rank; ++d) {
      input_shape[d] = testing::RandomDimSize(gen, 4);
      index_shape[d] = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, input_shape[d]);
    }
    const int64_t axis_size = rank == 0 ? 1 : input_shape[axis];
    Tensor zeros = Tensor::Zeros(dtype(), input_shape);
    Tensor index = RandomIndex(absl::Bernoulli(gen, 0.5) ? DataType::kInt32 : DataType::kInt64,
                               index_shape, axis, axis_size, IndexPattern::kUnique, gen);
    Tensor source = RandomTensor(dtype(), index_shape, gen);
    SCOPED_TRACE(absl::StrCat("input ", ShapeString(input_shape), " index ",
                              ShapeString(index_shape), " axis ", axis));
    absl::StatusOr<Tensor> scattered = runner().Run(ScatterArgs{
        .input = zeros.view(), .index = index.view(), .source = source.view(), .axis = axis});
    if (HasNoDeviceForm(scattered.status())) continue;
    ASSERT_TRUE(scattered.ok()) << scattered.status();
    absl::StatusOr<Tensor> gathered =
        runner().Run(GatherArgs{.input = scattered->view(), .index = index.view(), .axis = axis});
    if (HasNoDeviceForm(gathered.status())) continue;
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    ExpectTensorsNear(*gathered, source);
  }
}

TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(ScatterGatherRoundTripTest,
                                      ::testing::ValuesIn(kAllDataTypes),
                                      testing::DataTypeParamName);

// The AMAX/AMIN rule of docs/semantics.md for NaNs and signed zeros (tests/extremum_rule.h): every
// order of each case's sources, one order per destination, must give the bits the rule selects,
// with and without the input. On the CPU the updates of one destination arrive in row-major order;
// on CUDA in whatever order the atomics land, so the instance there also checks the kernels against
// the rule (and so against the CPU) byte for byte.
class ScatterExtremumRuleTest : public testing::DeviceTest<DataType> {
 protected:
  DataType dtype() const { return leading_param(); }
};

TEST_P(ScatterExtremumRuleTest, NanAndSignedZeroBitsIgnoreTheOrderOfUpdates) {
  for (const testing::ExtremumCase& rule_case : testing::ExtremumCases(dtype())) {
    const std::vector<std::vector<uint64_t>> orders = testing::AllOrders(rule_case.sources);
    const int64_t destinations = static_cast<int64_t>(orders.size());
    const int64_t per_destination = static_cast<int64_t>(rule_case.sources.size());
    // Destination d is input[d, 0]; row d of the source holds order d.
    Tensor input(dtype(), {destinations, 1});
    Tensor source(dtype(), {destinations, per_destination});
    for (int64_t d = 0; d < destinations; ++d) {
      testing::SetBits(input, d, rule_case.input);
      for (int64_t k = 0; k < per_destination; ++k) {
        testing::SetBits(source, d * per_destination + k, orders[d][k]);
      }
    }
    Tensor index = Tensor::Zeros(DataType::kInt64, {destinations, per_destination});
    for (Reduction reduce : {Reduction::kAmax, Reduction::kAmin}) {
      for (bool include_self : {true, false}) {
        SCOPED_TRACE(absl::StrCat(rule_case.name, " ", std::string(ReductionName(reduce)),
                                  " include_self ", include_self));
        absl::StatusOr<Tensor> out = runner().Run(ScatterArgs{.input = input.view(),
                                                              .index = index.view(),
                                                              .source = source.view(),
                                                              .axis = 1,
                                                              .reduce = reduce,
                                                              .include_self = include_self});
        ASSERT_TRUE(out.ok()) << out.status();
        const uint64_t expected = testing::SpecExtremum(dtype(), reduce, rule_case.input,
                                                        rule_case.sources, include_self);
        for (int64_t d = 0; d < destinations; ++d) {
          ASSERT_EQ(testing::BitsAt(*out, d), expected) << "order " << d;
        }
      }
    }
  }
}

TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(ScatterExtremumRuleTest,
                                      ::testing::ValuesIn(testing::kExtremumDtypes),
                                      testing::DataTypeParamName);

// ---------------------------------------------------------------------------------------------
// Hand cases from the PyTorch and Paddle docs and the reduction rules of docs/semantics.md.

// Runs Scatter and the reference; expects both to succeed and agree, returns the kernel's result.
Tensor ScatterOk(const ScatterArgs& args) {
  absl::StatusOr<Tensor> actual = Scatter(args);
  EXPECT_TRUE(actual.ok()) << actual.status();
  if (!actual.ok()) return Tensor();
  const TensorView* source_view = std::get_if<TensorView>(&args.source);
  if (source_view != nullptr) {
    absl::StatusOr<Tensor> expected =
        ReferenceScatter(args.input, args.axis, args.index, *source_view, args.reduce,
                         args.include_self, args.broadcast);
    EXPECT_TRUE(expected.ok()) << expected.status();
    if (expected.ok()) {
      ExpectTensorsNear(*actual, *expected,
                        ToleranceFor(args.input.dtype(), args.reduce, args.index.numel() + 1));
    }
  }
  return *std::move(actual);
}

TEST(ScatterTest, TorchScatterDocExamples) {
  // src = torch.arange(1, 11).reshape((2, 5)); index = torch.tensor([[0, 1, 2, 0]])
  // torch.zeros(3, 5, dtype=src.dtype).scatter_(0, index, src)
  Tensor source = TensorFromValues(DataType::kInt64, {2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  Tensor zeros = Tensor::Zeros(DataType::kInt64, {3, 5});
  Tensor index = IndexTensor({1, 4}, {0, 1, 2, 0});
  Tensor out = ScatterOk(ScatterArgs{
      .input = zeros.view(), .index = index.view(), .source = source.view(), .axis = 0});
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{1, 0, 0, 4, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0}));

  // index = torch.tensor([[0, 1, 2], [0, 1, 4]]); torch.zeros(3, 5).scatter_(1, index, src)
  Tensor index2 = IndexTensor({2, 3}, {0, 1, 2, 0, 1, 4});
  out = ScatterOk(ScatterArgs{
      .input = zeros.view(), .index = index2.view(), .source = source.view(), .axis = 1});
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{1, 2, 3, 0, 0, 6, 7, 0, 0, 8, 0, 0, 0, 0, 0}));

  // torch.full((2, 4), 2.).scatter_(1, torch.tensor([[2], [3]]), 1.23, reduce='multiply')
  Tensor twos = TensorFromValues(DataType::kFloat32, {2, 4}, std::vector<double>(8, 2.0));
  Tensor index3 = IndexTensor({2, 1}, {2, 3});
  out = ScatterOk(ScatterArgs{.input = twos.view(),
                              .index = index3.view(),
                              .source = Scalar(1.23),
                              .axis = 1,
                              .reduce = Reduction::kProd});
  const std::vector<double> product = ToDoubles(out);
  EXPECT_FLOAT_EQ(product[2], 2.46f);
  EXPECT_FLOAT_EQ(product[7], 2.46f);
  EXPECT_EQ(product[0], 2.0);
  EXPECT_EQ(product[3], 2.0);
  out = ScatterOk(ScatterArgs{.input = twos.view(),
                              .index = index3.view(),
                              .source = Scalar(1.23),
                              .axis = 1,
                              .reduce = Reduction::kSum});
  const std::vector<double> sum = ToDoubles(out);
  EXPECT_FLOAT_EQ(sum[2], 3.23f);
  EXPECT_FLOAT_EQ(sum[7], 3.23f);
  EXPECT_EQ(sum[6], 2.0);
}

TEST(ScatterTest, TorchScatterReduceDocExamples) {
  Tensor source = TensorFromValues(DataType::kFloat32, {6}, {1, 2, 3, 4, 5, 6});
  Tensor index = IndexTensor({6}, {0, 1, 0, 1, 2, 1});
  Tensor input = TensorFromValues(DataType::kFloat32, {4}, {1, 2, 3, 4});
  auto run = [&](const Tensor& x, Reduction reduce, bool include_self) {
    return ToDoubles(ScatterOk(ScatterArgs{.input = x.view(),
                                           .index = index.view(),
                                           .source = source.view(),
                                           .axis = 0,
                                           .reduce = reduce,
                                           .include_self = include_self}));
  };
  // input.scatter_reduce(0, index, src, reduce="sum") -> [5, 14, 8, 4] (1+1+3, 2+2+4+6, 3+5, 4).
  EXPECT_EQ(run(input, Reduction::kSum, true), (std::vector<double>{5, 14, 8, 4}));
  EXPECT_EQ(run(input, Reduction::kSum, false), (std::vector<double>{4, 12, 5, 4}));
  EXPECT_EQ(run(input, Reduction::kAmax, false), (std::vector<double>{3, 6, 5, 4}));
  Tensor input2 = TensorFromValues(DataType::kFloat32, {4}, {5, 4, 3, 2});
  EXPECT_EQ(run(input2, Reduction::kAmax, true), (std::vector<double>{5, 6, 5, 2}));
  EXPECT_EQ(run(input2, Reduction::kAmax, false), (std::vector<double>{3, 6, 5, 2}));
  // MEAN: (1 + 1 + 3) / 3, (2 + 2 + 4 + 6) / 4, (3 + 5) / 2, 4 untouched.
  const std::vector<double> mean = run(input, Reduction::kMean, true);
  EXPECT_FLOAT_EQ(mean[0], 5.0f / 3.0f);
  EXPECT_EQ(mean[1], 3.5);
  EXPECT_EQ(mean[2], 4.0);
  EXPECT_EQ(mean[3], 4.0);
  EXPECT_EQ(run(input, Reduction::kMean, false), (std::vector<double>{2, 4, 5, 4}));
  EXPECT_EQ(run(input, Reduction::kProd, true), (std::vector<double>{3, 96, 15, 4}));
  EXPECT_EQ(run(input, Reduction::kAmin, false), (std::vector<double>{1, 2, 5, 4}));
}

TEST(ScatterTest, PaddlePutAlongAxisBroadcastExample) {
  // paddle.put_along_axis(x=[[10,30,20],[60,40,50]], indices=[[0]], values=99, axis=0)
  Tensor input = TensorFromValues(DataType::kInt64, {2, 3}, {10, 30, 20, 60, 40, 50});
  Tensor index = IndexTensor({1, 1}, {0});
  Tensor out = ScatterOk(ScatterArgs{.input = input.view(),
                                     .index = index.view(),
                                     .source = Scalar(int64_t{99}),
                                     .axis = 0,
                                     .broadcast = true});
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{99, 99, 99, 60, 40, 50}));
  // The same with a rank-0 tensor source, which the reference checks too.
  Tensor value = TensorFromValues(DataType::kInt64, {}, {99});
  out = ScatterOk(ScatterArgs{.input = input.view(),
                              .index = index.view(),
                              .source = value.view(),
                              .axis = 0,
                              .broadcast = true});
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{99, 99, 99, 60, 40, 50}));
}

TEST(ScatterTest, BroadcastIndexLongerAlongAxisBroadcastsOnlyTheSource) {
  // Index [1, 4] along axis 1 of a [2, 3] input: longer than the input along the axis, so the
  // index is not broadcast; the source [1] broadcasts to the index's shape.
  Tensor input = TensorFromValues(DataType::kFloat32, {2, 3}, {0, 0, 0, 0, 0, 0});
  Tensor index = IndexTensor({1, 4}, {0, 2, 2, -1});
  Tensor source = TensorFromValues(DataType::kFloat32, {1}, {1.5});
  Tensor out = ScatterOk(ScatterArgs{.input = input.view(),
                                     .index = index.view(),
                                     .source = source.view(),
                                     .axis = 1,
                                     .reduce = Reduction::kSum,
                                     .broadcast = true});
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{1.5, 0, 4.5, 0, 0, 0}));
}

TEST(ScatterTest, AssignDuplicatesLastWriterWins) {
  Tensor input = TensorFromValues(DataType::kInt32, {3}, {0, 0, 0});
  Tensor index = IndexTensor({5}, {1, 1, 2, 1, -1});
  Tensor source = TensorFromValues(DataType::kInt32, {5}, {10, 20, 30, 40, 50});
  for (bool include_self : {true, false}) {
    Tensor out = ScatterOk(ScatterArgs{.input = input.view(),
                                       .index = index.view(),
                                       .source = source.view(),
                                       .axis = 0,
                                       .include_self = include_self});
    EXPECT_EQ(ToDoubles(out), (std::vector<double>{0, 40, 50}));
  }
}

// An out-of-place Scatter along the last axis with a result of cpu::kStreamingMinBytes and more
// copies each line of the input just before scattering into it: every line must end up as the
// input's line with its updates applied, also where the index is shorter than the line, and the
// cases that copy the whole input first (include_self = false) must agree. Plain loops give the
// expected values (the reference, element by element through its coordinates, would take most of
// a minute on these 8 Mi elements in the sanitized tree); int32, so sums are exact.
TEST(ScatterTest, LargeLastAxisResultsMatchPlainLoops) {
  absl::BitGen gen = SeededGen(1618, kScatterSeedSalt);
  constexpr int64_t kRows = 64;
  const int64_t cols = cpu::kStreamingMinBytes / (kRows * 4);
  const int64_t updates = cols - cols / 4;
  Tensor input(DataType::kInt32, {kRows, cols});
  for (int64_t i = 0; i < kRows * cols; ++i) {
    input.data_as<int32_t>()[i] = static_cast<int32_t>(absl::Uniform<uint32_t>(gen) % 1000);
  }
  Tensor index(DataType::kInt64, {kRows, updates});
  Tensor source(DataType::kInt32, {kRows, updates});
  for (int64_t i = 0; i < kRows * updates; ++i) {
    // Mostly in [0, cols), a few negative.
    index.data_as<int64_t>()[i] =
        absl::Uniform<int64_t>(gen, 0, cols) - (absl::Bernoulli(gen, 0.001) ? cols : 0);
    source.data_as<int32_t>()[i] = static_cast<int32_t>(absl::Uniform<uint32_t>(gen) % 1000);
  }
  struct Variant {
    Reduction reduce;
    bool include_self;
  };
  for (const Variant variant : {Variant{Reduction::kAssign, true}, Variant{Reduction::kSum, true},
                                Variant{Reduction::kSum, false}}) {
    SCOPED_TRACE(absl::StrCat(std::string(ReductionName(variant.reduce)),
                              variant.include_self ? " include_self" : ""));
    std::vector<int32_t> expected(input.data_as<int32_t>(),
                                  input.data_as<int32_t>() + kRows * cols);
    for (int64_t pass = variant.include_self ? 1 : 0; pass < 2; ++pass) {
      for (int64_t r = 0; r < kRows; ++r) {
        for (int64_t u = 0; u < updates; ++u) {
          const int64_t value = index.data_as<int64_t>()[r * updates + u];
          int32_t& dest = expected[r * cols + (value < 0 ? value + cols : value)];
          const int32_t update = source.data_as<int32_t>()[r * updates + u];
          if (pass == 0) {
            dest = 0;  // include_self = false: touched destinations start from the identity.
          } else {
            dest = variant.reduce == Reduction::kAssign ? update : dest + update;
          }
        }
      }
    }
    const absl::StatusOr<Tensor> out = Scatter(ScatterArgs{.input = input.view(),
                                                           .index = index.view(),
                                                           .source = source.view(),
                                                           .axis = 1,
                                                           .reduce = variant.reduce,
                                                           .include_self = variant.include_self});
    ASSERT_TRUE(out.ok()) << out.status();
    const int32_t* actual = out->data_as<int32_t>();
    int64_t mismatches = 0;
    for (int64_t i = 0; i < kRows * cols && mismatches < 5; ++i) {
      if (actual[i] != expected[i]) {
        ++mismatches;
        ADD_FAILURE() << "out[" << i / cols << ", " << i % cols << "] = " << actual[i]
                      << ", expected " << expected[i];
      }
    }
  }
}

// Last-writer-wins must hold in every kind of run: a contiguous source (runs with compile-time
// steps) and a strided one (runtime steps), within the loop's groups of four and across them.
TEST(ScatterTest, AssignDuplicatesLastWriterWinsInEveryKindOfRun) {
  constexpr int64_t kLength = 40;  // Ten groups of four: the last group decides.
  Tensor input = Tensor::Zeros(DataType::kInt32, {2, 3});
  std::vector<int64_t> values(2 * kLength);
  std::vector<double> source_values(2 * kLength);
  for (int64_t i = 0; i < 2 * kLength; ++i) {
    values[i] = (i * 7 / 3) % 3;
    source_values[i] = static_cast<double>(i + 1);
  }
  const Tensor index = IndexTensor({2, kLength}, values);
  const Tensor source = TensorFromValues(DataType::kInt32, {2, kLength}, source_values);
  const testing::LaidOutTensor strided_source = testing::SteppedCopy(source);
  for (const TensorView source_view : {source.view(), strided_source.view}) {
    const ScatterArgs args{
        .input = input.view(), .index = index.view(), .source = source_view, .axis = 1};
    absl::StatusOr<Tensor> expected =
        ReferenceScatter(args.input, 1, args.index, source_view, Reduction::kAssign, true, false);
    ASSERT_TRUE(expected.ok()) << expected.status();
    ExpectTensorsNear(ScatterOk(args), *expected);
  }
}

TEST(ScatterTest, IntegerMeanFloors) {
  Tensor zero = TensorFromValues(DataType::kInt32, {1}, {0});
  Tensor index = IndexTensor({2}, {0, 0});
  Tensor source = TensorFromValues(DataType::kInt32, {2}, {-3, -4});
  Tensor out = ScatterOk(ScatterArgs{.input = zero.view(),
                                     .index = index.view(),
                                     .source = source.view(),
                                     .reduce = Reduction::kMean,
                                     .include_self = false});
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{-4}));
  // include_self: (-4 - 3 - 4) / 3 = -3.67 -> -4.
  Tensor minus_four = TensorFromValues(DataType::kInt64, {1}, {-4});
  Tensor source64 = TensorFromValues(DataType::kInt64, {2}, {-3, -4});
  out = ScatterOk(ScatterArgs{.input = minus_four.view(),
                              .index = index.view(),
                              .source = source64.view(),
                              .reduce = Reduction::kMean});
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{-4}));
  // Positive: (1 + 2) / 2 = 1.
  Tensor uint_zero = TensorFromValues(DataType::kUInt8, {1}, {0});
  Tensor uint_source = TensorFromValues(DataType::kUInt8, {2}, {1, 2});
  out = ScatterOk(ScatterArgs{.input = uint_zero.view(),
                              .index = index.view(),
                              .source = uint_source.view(),
                              .reduce = Reduction::kMean,
                              .include_self = false});
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{1}));
}

// Integer sums and products wrap around modulo 2^bits, as PyTorch's do. Computed in the signed type
// they would overflow, which is undefined behaviour: found by store_fuzzer as an int32 SUM past
// 2^31 - 1.
TEST(ScatterTest, IntegerSumAndProdWrapAroundOnOverflow) {
  Tensor index = IndexTensor({2}, {0, 0});
  Tensor int32_max = TensorFromValues(DataType::kInt32, {1}, {2147483647});
  Tensor int32_ones = TensorFromValues(DataType::kInt32, {2}, {1, 1});
  Tensor out = ScatterOk(ScatterArgs{.input = int32_max.view(),
                                     .index = index.view(),
                                     .source = int32_ones.view(),
                                     .reduce = Reduction::kSum});
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{-2147483647.0}));

  Tensor int32_big = TensorFromValues(DataType::kInt32, {2}, {65536, 65537});
  Tensor int32_one = TensorFromValues(DataType::kInt32, {1}, {1});
  out = ScatterOk(ScatterArgs{.input = int32_one.view(),
                              .index = index.view(),
                              .source = int32_big.view(),
                              .reduce = Reduction::kProd});
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{65536}));  // 2^32 + 2^16 mod 2^32

  Tensor int16_max = TensorFromValues(DataType::kInt16, {1}, {32767});
  Tensor int16_source = TensorFromValues(DataType::kInt16, {2}, {2, 1});
  out = ScatterOk(ScatterArgs{.input = int16_max.view(),
                              .index = index.view(),
                              .source = int16_source.view(),
                              .reduce = Reduction::kProd});
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{-2}));  // 65534 - 2^16

  Tensor int64_max = IndexTensor({1}, {std::numeric_limits<int64_t>::max()});
  Tensor int64_source = IndexTensor({2}, {1, 1});
  out = ScatterOk(ScatterArgs{.input = int64_max.view(),
                              .index = index.view(),
                              .source = int64_source.view(),
                              .reduce = Reduction::kSum});
  int64_t sum = 0;
  std::memcpy(&sum, out.data(), sizeof(sum));
  EXPECT_EQ(sum, std::numeric_limits<int64_t>::min() + 1);
}

// Float PROD (float32, and float16/bfloat16 in their float32 shadow) must round every product as a
// float32 multiply does: the CPU kernel takes it in double and rounds it to float32 once, which
// must give the same bits also where products fall into the subnormals, round to a signed zero or
// overflow to infinity. Four destinations of 40 interleaved updates each: a product shrinking
// through the subnormals to zero from either sign, one growing past float32's range, one staying
// near 1. The expected bits come from a plain float32 loop over the stored values.
template <typename T>
void ExpectFloatProductsRoundAsFloat32(DataType dtype) {
  SCOPED_TRACE(std::string(DataTypeName(dtype)));
  constexpr int64_t kDestinations = 4;
  constexpr int64_t kUpdates = 40;
  const std::vector<double> starts = {1e-3, -1e-3, 1e3, 0.5};
  const std::vector<double> scales = {0.011, 0.03, 30.0, 1.0};
  std::vector<double> sources;
  std::vector<int64_t> indices;
  for (int64_t k = 0; k < kUpdates; ++k) {
    for (int64_t d = 0; d < kDestinations; ++d) {
      const double wobble = std::fmod(static_cast<double>(k * kDestinations + d) * 0.618, 1.0);
      const double sign = d < 2 && (k % 3 == 1) ? -1.0 : 1.0;
      const double factor = d == 3 ? 0.9 + 0.2 * wobble : scales[d] * (1.0 + 0.37 * wobble);
      sources.push_back(sign * factor);
      indices.push_back(d);
    }
  }
  Tensor input = TensorFromValues(dtype, {kDestinations}, starts);
  Tensor source = TensorFromValues(dtype, {kDestinations * kUpdates}, sources);
  Tensor index = IndexTensor({kDestinations * kUpdates}, indices);
  absl::StatusOr<Tensor> actual = Scatter(ScatterArgs{.input = input.view(),
                                                      .index = index.view(),
                                                      .source = source.view(),
                                                      .reduce = Reduction::kProd});
  ASSERT_TRUE(actual.ok()) << actual.status();

  Tensor expected(dtype, {kDestinations});
  bool reached_subnormal = false;
  bool reached_infinity = false;
  for (int64_t d = 0; d < kDestinations; ++d) {
    float product = static_cast<float>(input.data_as<T>()[d]);
    for (int64_t i = 0; i < index.numel(); ++i) {
      if (indices[i] != d) continue;
      product = product * static_cast<float>(source.data_as<T>()[i]);
      reached_subnormal |= std::fpclassify(product) == FP_SUBNORMAL;
    }
    reached_infinity |= std::isinf(product);
    expected.data_as<T>()[d] = T(product);
  }
  EXPECT_TRUE(reached_subnormal);
  EXPECT_TRUE(reached_infinity);
  ExpectSameBytes(*actual, expected);
}

TEST(ScatterTest, FloatProductsRoundAsFloat32MultipliesDo) {
  ExpectFloatProductsRoundAsFloat32<float>(DataType::kFloat32);
  ExpectFloatProductsRoundAsFloat32<BFloat16>(DataType::kBFloat16);
  ExpectFloatProductsRoundAsFloat32<Float16>(DataType::kFloat16);
}

// Along the last axis, float PROD into a small result interleaves the walk's lines four at a time,
// so that the chains of products into one destination overlap (kernels/cpu/scatter_impl.h). Each
// destination must still take its products in the order of its updates: byte for byte a plain
// float32 loop over each line, for line counts that leave 0 to 3 lines outside the groups, outer
// dimensions that coalesce, negative indices, include_self off, a walk large enough to run on
// several threads and a strided index (whose lines are not interleaved). A bad index in the third
// line of a group is still the one named.
template <typename T>
void ExpectInterleavedProductsMatchPlainLoops(DataType dtype) {
  // {4096, 2}: the largest result that interleaves (8192 elements), walked in 53,248 updates.
  const Shape shapes[] = {{8, 33}, {9, 5}, {3, 5, 7}, {1, 6}, {2, 7, 3}, {4096, 2}};
  absl::BitGen gen = SeededGen(2718, kScatterSeedSalt);
  for (const Shape& input_shape : shapes) {
    for (const bool include_self : {true, false}) {
      for (const bool strided : {false, true}) {
        const int64_t size = input_shape.back();
        const int64_t lines = NumElements(input_shape) / size;
        const int64_t length = size + 11;  // more updates per line than destinations
        Shape index_shape = input_shape;
        index_shape.back() = length;
        SCOPED_TRACE(absl::StrCat(std::string(DataTypeName(dtype)), " input ",
                                  ShapeString(input_shape), include_self ? " include_self" : "",
                                  strided ? " strided" : ""));
        std::vector<double> input_values;
        std::vector<double> source_values;
        std::vector<int64_t> indices;
        for (int64_t i = 0; i < lines * size; ++i) {
          input_values.push_back(absl::Uniform(gen, -2.0, 2.0));
        }
        for (int64_t i = 0; i < lines * length; ++i) {
          source_values.push_back(absl::Uniform(gen, -2.0, 2.0));
          // Duplicate-heavy: most updates meet in the first two or the last destination.
          const int64_t pick = absl::Uniform<int64_t>(gen, 0, 5);
          indices.push_back(pick < 2    ? pick % size
                            : pick == 2 ? -1
                                        : absl::Uniform(gen, -size, size));
        }
        const Tensor input = TensorFromValues(dtype, input_shape, input_values);
        const Tensor source = TensorFromValues(dtype, index_shape, source_values);
        const Tensor index = IndexTensor(index_shape, indices);
        const testing::LaidOutTensor stepped = testing::SteppedCopy(index);
        const absl::StatusOr<Tensor> actual =
            Scatter(ScatterArgs{.input = input.view(),
                                .index = strided ? stepped.view : index.view(),
                                .source = source.view(),
                                .axis = -1,
                                .reduce = Reduction::kProd,
                                .include_self = include_self});
        ASSERT_TRUE(actual.ok()) << actual.status();

        Tensor expected(dtype, input_shape);
        for (int64_t line = 0; line < lines; ++line) {
          std::vector<float> products(size);
          std::vector<bool> touched(size, false);
          for (int64_t j = 0; j < size; ++j) {
            products[j] = static_cast<float>(input.data_as<T>()[line * size + j]);
          }
          for (int64_t k = 0; k < length; ++k) {
            const int64_t at = line * length + k;
            const int64_t j = indices[at] < 0 ? indices[at] + size : indices[at];
            if (!include_self && !touched[j]) products[j] = 1.0f;
            touched[j] = true;
            products[j] = products[j] * static_cast<float>(source.data_as<T>()[at]);
          }
          for (int64_t j = 0; j < size; ++j)
            expected.data_as<T>()[line * size + j] = T(products[j]);
        }
        ExpectSameBytes(*actual, expected);
      }
    }
  }

  // An index out of range in the third line of the first group.
  const Tensor input = TensorFromValues(dtype, {8, 4}, std::vector<double>(32, 1.5));
  const Tensor source = TensorFromValues(dtype, {8, 6}, std::vector<double>(48, 0.5));
  std::vector<int64_t> indices(48, 1);
  indices[2 * 6 + 3] = 4;
  const Tensor index = IndexTensor({8, 6}, indices);
  const absl::StatusOr<Tensor> bad = Scatter(ScatterArgs{.input = input.view(),
                                                         .index = index.view(),
                                                         .source = source.view(),
                                                         .axis = 1,
                                                         .reduce = Reduction::kProd});
  EXPECT_THAT(bad.status().message(), HasSubstr("index[2, 3] = 4 is out of range"));
}

TEST(ScatterTest, InterleavedLastAxisProductsKeepEachDestinationsOrder) {
  ExpectInterleavedProductsMatchPlainLoops<float>(DataType::kFloat32);
  ExpectInterleavedProductsMatchPlainLoops<BFloat16>(DataType::kBFloat16);
  ExpectInterleavedProductsMatchPlainLoops<Float16>(DataType::kFloat16);
}

TEST(ScatterTest, IncludeSelfFalseKeepsUntouchedDestinations) {
  Tensor input = TensorFromValues(DataType::kFloat64, {4}, {7, 7, 7, 7});
  Tensor index = IndexTensor({2}, {1, 1});
  Tensor source = TensorFromValues(DataType::kFloat64, {2}, {2, 3});
  const std::vector<std::pair<Reduction, double>> expected = {
      {Reduction::kSum, 5},  {Reduction::kProd, 6}, {Reduction::kMean, 2.5},
      {Reduction::kAmax, 3}, {Reduction::kAmin, 2}, {Reduction::kAssign, 3}};
  for (const auto& [reduce, value] : expected) {
    SCOPED_TRACE(std::string(ReductionName(reduce)));
    Tensor out = ScatterOk(ScatterArgs{.input = input.view(),
                                       .index = index.view(),
                                       .source = source.view(),
                                       .reduce = reduce,
                                       .include_self = false});
    EXPECT_EQ(ToDoubles(out), (std::vector<double>{7, value, 7, 7}));
  }
}

TEST(ScatterTest, AmaxAminPropagateNan) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DataType dtype :
       {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
    for (Reduction reduce : {Reduction::kAmax, Reduction::kAmin}) {
      SCOPED_TRACE(
          absl::StrCat(std::string(DataTypeName(dtype)), " ", std::string(ReductionName(reduce))));
      Tensor index = IndexTensor({3}, {0, 0, 1});
      // A NaN source, first or last among the sources.
      Tensor input = TensorFromValues(dtype, {3}, {1, 2, 3});
      Tensor nan_first = TensorFromValues(dtype, {3}, {nan, 5, 4});
      Tensor nan_last = TensorFromValues(dtype, {3}, {5, 4, nan});
      for (bool include_self : {true, false}) {
        std::vector<double> out = ToDoubles(ScatterOk(ScatterArgs{.input = input.view(),
                                                                  .index = index.view(),
                                                                  .source = nan_first.view(),
                                                                  .reduce = reduce,
                                                                  .include_self = include_self}));
        EXPECT_TRUE(std::isnan(out[0]));
        EXPECT_EQ(out[1], include_self ? (reduce == Reduction::kAmax ? 4 : 2) : 4);
        EXPECT_EQ(out[2], 3);
        out = ToDoubles(ScatterOk(ScatterArgs{.input = input.view(),
                                              .index = index.view(),
                                              .source = nan_last.view(),
                                              .reduce = reduce,
                                              .include_self = include_self}));
        EXPECT_TRUE(std::isnan(out[1]));
      }
      // A NaN destination: kept with include_self, not part of the reduction without.
      Tensor nan_input = TensorFromValues(dtype, {3}, {nan, 2, nan});
      Tensor source = TensorFromValues(dtype, {3}, {5, 4, 6});
      std::vector<double> out = ToDoubles(ScatterOk(ScatterArgs{.input = nan_input.view(),
                                                                .index = index.view(),
                                                                .source = source.view(),
                                                                .reduce = reduce}));
      EXPECT_TRUE(std::isnan(out[0]));
      EXPECT_TRUE(std::isnan(out[2]));
      out = ToDoubles(ScatterOk(ScatterArgs{.input = nan_input.view(),
                                            .index = index.view(),
                                            .source = source.view(),
                                            .reduce = reduce,
                                            .include_self = false}));
      EXPECT_EQ(out[0], reduce == Reduction::kAmax ? 5 : 4);
      EXPECT_EQ(out[1], 6);
      EXPECT_TRUE(std::isnan(out[2]));
    }
  }
}

TEST(ScatterTest, BoolReductionsAreLogical) {
  Tensor input = TensorFromValues(DataType::kBool, {2}, {0, 1});
  Tensor index = IndexTensor({4}, {0, 0, 1, 1});
  Tensor source = TensorFromValues(DataType::kBool, {4}, {1, 0, 0, 0});
  auto run = [&](Reduction reduce, bool include_self) {
    return ToDoubles(ScatterOk(ScatterArgs{.input = input.view(),
                                           .index = index.view(),
                                           .source = source.view(),
                                           .reduce = reduce,
                                           .include_self = include_self}));
  };
  EXPECT_EQ(run(Reduction::kSum, true), (std::vector<double>{1, 1}));   // or
  EXPECT_EQ(run(Reduction::kProd, true), (std::vector<double>{0, 0}));  // and
  EXPECT_EQ(run(Reduction::kAmax, true), (std::vector<double>{1, 1}));  // or
  EXPECT_EQ(run(Reduction::kAmin, true), (std::vector<double>{0, 0}));  // and
  EXPECT_EQ(run(Reduction::kSum, false), (std::vector<double>{1, 0}));
  EXPECT_EQ(run(Reduction::kProd, false), (std::vector<double>{0, 0}));
  EXPECT_EQ(run(Reduction::kAssign, true), (std::vector<double>{0, 0}));
  // Many trues summed stay true (no wrap to false).
  Tensor many_index = IndexTensor({512}, std::vector<int64_t>(512, 0));
  Tensor trues = TensorFromValues(DataType::kBool, {512}, std::vector<double>(512, 1));
  Tensor falses = TensorFromValues(DataType::kBool, {1}, {0});
  EXPECT_EQ(ToDoubles(ScatterOk(ScatterArgs{.input = falses.view(),
                                            .index = many_index.view(),
                                            .source = trues.view(),
                                            .reduce = Reduction::kSum})),
            (std::vector<double>{1}));
}

TEST(ScatterTest, HalfPrecisionSumsAccumulateInFloat32) {
  // 4096 ones into one destination: a float16 accumulator would stall at 2048, bfloat16 at 256.
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    SCOPED_TRACE(std::string(DataTypeName(dtype)));
    Tensor zero = TensorFromValues(dtype, {1}, {0});
    Tensor index = IndexTensor({4096}, std::vector<int64_t>(4096, 0), DataType::kInt32);
    Tensor ones = TensorFromValues(dtype, {4096}, std::vector<double>(4096, 1.0));
    EXPECT_EQ(ToDoubles(ScatterOk(ScatterArgs{.input = zero.view(),
                                              .index = index.view(),
                                              .source = ones.view(),
                                              .reduce = Reduction::kSum})),
              (std::vector<double>{4096}));
    EXPECT_EQ(ToDoubles(ScatterOk(ScatterArgs{.input = zero.view(),
                                              .index = index.view(),
                                              .source = ones.view(),
                                              .reduce = Reduction::kMean,
                                              .include_self = false})),
              (std::vector<double>{1}));
    // 4096 * 2^-12 = 1 sums exactly in float32 (each term is exact in both 16-bit formats).
    Tensor small = TensorFromValues(dtype, {4096}, std::vector<double>(4096, 1.0 / 4096));
    EXPECT_EQ(ToDoubles(ScatterOk(ScatterArgs{.input = zero.view(),
                                              .index = index.view(),
                                              .source = small.view(),
                                              .reduce = Reduction::kSum})),
              (std::vector<double>{1}));
  }
}

TEST(ScatterTest, ComplexSumProdMean) {
  using C = std::complex<double>;
  for (DataType dtype : {DataType::kComplex64, DataType::kComplex128}) {
    SCOPED_TRACE(std::string(DataTypeName(dtype)));
    Tensor input = TensorFromComplex(dtype, {2}, {C(1, 1), C(0, 0)});
    Tensor index = IndexTensor({3}, {0, 0, 1});
    Tensor source = TensorFromComplex(dtype, {3}, {C(0, 1), C(2, 0), C(3, -1)});
    auto run = [&](Reduction reduce) {
      Tensor out = ScatterOk(ScatterArgs{
          .input = input.view(), .index = index.view(), .source = source.view(), .reduce = reduce});
      return std::vector<C>{testing::ElementAsComplex(out, 0), testing::ElementAsComplex(out, 1)};
    };
    EXPECT_EQ(run(Reduction::kSum), (std::vector<C>{C(3, 2), C(3, -1)}));
    EXPECT_EQ(run(Reduction::kProd), (std::vector<C>{C(-2, 2), C(0, 0)}));
    const std::vector<C> mean = run(Reduction::kMean);
    EXPECT_NEAR(mean[0].real(), 1.0, 1e-6);
    EXPECT_NEAR(mean[0].imag(), 2.0 / 3.0, 1e-6);
    EXPECT_EQ(mean[1], C(1.5, -0.5));
    EXPECT_EQ(run(Reduction::kAssign), (std::vector<C>{C(2, 0), C(3, -1)}));
  }
}

TEST(ScatterTest, EmptyIndexReturnsInput) {
  Tensor input = TensorFromValues(DataType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor index = IndexTensor({0, 3}, {});
  Tensor source(DataType::kFloat32, {0, 3});
  for (Reduction reduce : testing::kAllReductions) {
    Tensor out = ScatterOk(ScatterArgs{.input = input.view(),
                                       .index = index.view(),
                                       .source = source.view(),
                                       .axis = 1,
                                       .reduce = reduce,
                                       .include_self = false});
    EXPECT_EQ(ToDoubles(out), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  }
  Tensor empty_input(DataType::kInt8, {0, 4});
  Tensor empty_source(DataType::kInt8, {0, 4});
  Tensor empty_index = IndexTensor({0, 4}, {});
  Tensor out = ScatterOk(ScatterArgs{.input = empty_input.view(),
                                     .index = empty_index.view(),
                                     .source = empty_source.view(),
                                     .axis = 0});
  EXPECT_EQ(out.shape(), Shape({0, 4}));
}

TEST(ScatterTest, RankZero) {
  Tensor input = TensorFromValues(DataType::kFloat32, {}, {2});
  Tensor source = TensorFromValues(DataType::kFloat32, {}, {3});
  for (int64_t value : {0, -1}) {
    Tensor index = IndexTensor({}, {value});
    for (Reduction reduce : testing::kAllReductions) {
      Tensor out = ScatterOk(ScatterArgs{.input = input.view(),
                                         .index = index.view(),
                                         .source = source.view(),
                                         .axis = -1,
                                         .reduce = reduce});
      EXPECT_EQ(out.shape(), Shape{});
    }
  }
  Tensor bad = IndexTensor({}, {1});
  absl::StatusOr<Tensor> out =
      Scatter(ScatterArgs{.input = input.view(), .index = bad.view(), .source = source.view()});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("scatter: index = 1 is out of range"));
}

TEST(ScatterTest, StridedViews) {
  // Input transposed and source broadcast along a dimension, as views with their own strides.
  Tensor storage = TensorFromValues(DataType::kFloat64, {2, 3}, {1, 2, 3, 4, 5, 6});
  const TensorView transposed(DataType::kFloat64, {3, 2}, {1, 3}, storage.data());
  Tensor row = TensorFromValues(DataType::kFloat64, {2}, {10, 20});
  const TensorView repeated(DataType::kFloat64, {3, 2}, {0, 1}, row.data());
  Tensor index = IndexTensor({3, 2}, {1, 0, 0, 0, 1, 1});
  for (Reduction reduce : testing::kAllReductions) {
    SCOPED_TRACE(std::string(ReductionName(reduce)));
    ScatterOk(ScatterArgs{.input = transposed,
                          .index = index.view(),
                          .source = repeated,
                          .axis = 1,
                          .reduce = reduce});
  }
  Tensor out = ScatterOk(ScatterArgs{.input = transposed,
                                     .index = index.view(),
                                     .source = repeated,
                                     .axis = 1,
                                     .reduce = Reduction::kSum});
  // transposed = [[1, 4], [2, 5], [3, 6]]; row i adds 10 at index[i][0], 20 at index[i][1].
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{21, 14, 32, 5, 3, 36}));
}

TEST(ScatterTest, TwoPhasePlanAndRun) {
  Tensor input = TensorFromValues(DataType::kInt16, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor index = IndexTensor({2, 2}, {2, 2, 0, -3}, DataType::kInt32);
  Tensor source = TensorFromValues(DataType::kInt16, {2, 2}, {10, 20, 30, 40});
  absl::StatusOr<ScatterPlan> plan = PlanScatter(ScatterArgs{.input = input.view(),
                                                             .index = index.view(),
                                                             .source = source.view(),
                                                             .axis = 1,
                                                             .reduce = Reduction::kSum});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->result_shape, Shape({2, 3}));
  Tensor out(plan->result_dtype, plan->result_shape);
  ASSERT_TRUE(cpu::Scatter(*plan, out.mutable_view()).ok());
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{1, 2, 33, 74, 5, 6}));
}

// A run's indices are visited four at a time while they lie in [0, size); the first one outside
// hands the rest of the run to the loop that checks and wraps each index. Wherever the handover
// falls, every update must land once and in order (ASSIGN's last writer wins across it), and a bad
// index must be reported: along the last axis with a contiguous and a strided index, and along
// the first axis (each position its own line).
TEST(ScatterTest, RunsTurningNegativeOrBadAtAnyPositionAreHandled) {
  constexpr int64_t kSize = 5;     // Small, so that the 13 updates of a run collide.
  constexpr int64_t kLength = 13;  // Three groups of four and a tail of one.
  struct Layout {
    int64_t axis;
    bool strided_index;
  };
  for (const Layout layout : {Layout{1, false}, Layout{1, true}, Layout{0, false}}) {
    // Each row of the [2, kLength] index is one run.
    const Shape input_shape = layout.axis == 1 ? Shape{2, kSize} : Shape{kSize, kLength};
    Tensor input(DataType::kInt32, input_shape);
    for (int64_t i = 0; i < input.numel(); ++i) input.data_as<int32_t>()[i] = 1000 + i;
    Tensor source(DataType::kInt32, {2, kLength});
    for (int64_t i = 0; i < source.numel(); ++i) source.data_as<int32_t>()[i] = i + 1;
    for (const Reduction reduce : {Reduction::kAssign, Reduction::kSum}) {
      const auto scatter = [&](const std::vector<int64_t>& values) {
        const Tensor index = IndexTensor({2, kLength}, values, DataType::kInt64);
        const testing::LaidOutTensor stepped = testing::SteppedCopy(index);
        const TensorView index_view = layout.strided_index ? stepped.view : index.view();
        absl::StatusOr<Tensor> expected =
            ReferenceScatter(input.view(), layout.axis, index_view, source.view(), reduce,
                             /*include_self=*/true, /*broadcast=*/false);
        absl::StatusOr<Tensor> actual = Scatter(ScatterArgs{.input = input.view(),
                                                            .index = index_view,
                                                            .source = source.view(),
                                                            .axis = layout.axis,
                                                            .reduce = reduce});
        EXPECT_EQ(actual.ok(), expected.ok()) << actual.status() << " / " << expected.status();
        if (actual.ok() && expected.ok()) ExpectTensorsNear(*actual, *expected);
        return actual.status();
      };
      for (int64_t turn = 0; turn < kLength; ++turn) {
        SCOPED_TRACE(absl::StrCat("axis ", layout.axis, layout.strided_index ? " strided " : " ",
                                  std::string(ReductionName(reduce)), " turn at ", turn));
        EXPECT_TRUE(scatter(testing::TurningRunIndex(kSize, kLength, turn)).ok());
        for (const int64_t bad : {kSize, -kSize - 1}) {
          EXPECT_THAT(scatter(testing::TurningRunIndex(kSize, kLength, turn, bad)).message(),
                      HasSubstr(absl::StrCat("index[1, ", turn, "] = ", bad, " is out of range")));
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Errors: the kernel and the reference reject the same inputs, with messages in the form of
// docs/semantics.md.

absl::Status ScatterError(const ScatterArgs& args) {
  if (const TensorView* source = std::get_if<TensorView>(&args.source)) {
    EXPECT_FALSE(ReferenceScatter(args.input, args.axis, args.index, *source, args.reduce,
                                  args.include_self, args.broadcast)
                     .ok())
        << "the reference accepts this input";
  }
  return testing::ExpectKernelRejects(Scatter(args));
}

TEST(ScatterErrorTest, IndexOutOfRangeNamesTheFirstOffender) {
  Tensor input(DataType::kFloat32, {5, 5});
  Tensor index = IndexTensor({5, 2}, {0, 1, 2, 3, 4, -5, 0, 7, -6, 9});
  Tensor source(DataType::kFloat32, {5, 2});
  std::memset(source.data(), 0, static_cast<size_t>(source.nbytes()));
  for (Reduction reduce : testing::kAllReductions) {
    const absl::Status status = ScatterError(ScatterArgs{.input = input.view(),
                                                         .index = index.view(),
                                                         .source = source.view(),
                                                         .axis = 1,
                                                         .reduce = reduce});
    EXPECT_EQ(status.message(),
              "scatter: index[3, 1] = 7 is out of range for axis 1 of input with size 5 "
              "(expected -5 <= index < 5)");
  }
  Tensor negative = IndexTensor({1, 2}, {-6, 0}, DataType::kInt32);
  EXPECT_THAT(
      ScatterError(
          ScatterArgs{
              .input = input.view(), .index = negative.view(), .source = source.view(), .axis = 0})
          .message(),
      HasSubstr("scatter: index[0, 0] = -6 is out of range for axis 0"));
  // With broadcast the error names the index as the caller sent it.
  Tensor broadcast_index = IndexTensor({1, 1}, {5});
  EXPECT_THAT(ScatterError(ScatterArgs{.input = input.view(),
                                       .index = broadcast_index.view(),
                                       .source = Scalar(1.0),
                                       .axis = 0,
                                       .broadcast = true})
                  .message(),
              HasSubstr("scatter: index[0, 0] = 5 is out of range for axis 0"));
}

TEST(ScatterErrorTest, FirstOffenderInLargeParallelWalk) {
  Tensor input = Tensor::Zeros(DataType::kFloat32, {600, 500});
  Tensor source = Tensor::Zeros(DataType::kFloat32, {600, 500});
  for (int64_t axis : {0, 1}) {
    for (Reduction reduce : {Reduction::kAssign, Reduction::kMean}) {
      for (bool include_self : {true, false}) {
        absl::BitGen gen = SeededGen(4242, kScatterSeedSalt);
        Tensor index =
            RandomIndex(DataType::kInt32, {600, 500}, axis, 500, IndexPattern::kRandom, gen);
        int32_t* values = index.data_as<int32_t>();
        values[599 * 500 + 10] = -1000;
        values[123 * 500 + 456] = 1000;  // The first in row-major order.
        values[200 * 500 + 3] = 2000;
        EXPECT_THAT(ScatterError(ScatterArgs{.input = input.view(),
                                             .index = index.view(),
                                             .source = source.view(),
                                             .axis = axis,
                                             .reduce = reduce,
                                             .include_self = include_self})
                        .message(),
                    HasSubstr(absl::StrCat("scatter: index[123, 456] = 1000 is out of range "
                                           "for axis ",
                                           axis)));
      }
    }
  }
}

TEST(ScatterErrorTest, IndexDtypeMustBeInt32OrInt64) {
  Tensor input(DataType::kFloat32, {3});
  Tensor float_index = TensorFromValues(DataType::kFloat32, {2}, {0, 1});
  Tensor source(DataType::kFloat32, {2});
  const absl::Status status = ScatterError(
      ScatterArgs{.input = input.view(), .index = float_index.view(), .source = source.view()});
  EXPECT_THAT(status.message(), HasSubstr("scatter"));
  EXPECT_THAT(status.message(), HasSubstr("index.dtype = float32"));
}

TEST(ScatterErrorTest, RankMismatch) {
  Tensor input(DataType::kFloat32, {3, 4});
  Tensor index = IndexTensor({2}, {0, 1});
  Tensor source(DataType::kFloat32, {2});
  absl::Status status = ScatterError(
      ScatterArgs{.input = input.view(), .index = index.view(), .source = source.view()});
  EXPECT_THAT(status.message(), HasSubstr("scatter"));
  EXPECT_THAT(status.message(), HasSubstr("rank 1"));
  EXPECT_THAT(status.message(), HasSubstr("rank 2"));
  // src's rank differs from the index's.
  Tensor index2 = IndexTensor({1, 2}, {0, 1});
  Tensor source3(DataType::kFloat32, {1, 2, 1});
  status = ScatterError(
      ScatterArgs{.input = input.view(), .index = index2.view(), .source = source3.view()});
  EXPECT_THAT(status.message(), HasSubstr("src has rank 3"));
  // Broadcast still needs index and input of one rank.
  status = ScatterError(ScatterArgs{
      .input = input.view(), .index = index.view(), .source = Scalar(1.0), .broadcast = true});
  EXPECT_THAT(status.message(), HasSubstr("rank"));
}

TEST(ScatterErrorTest, IndexLargerThanInputInNonAxisDimension) {
  Tensor input(DataType::kFloat32, {2, 4});
  Tensor index = IndexTensor({3, 1}, {0, 0, 0});
  Tensor source(DataType::kFloat32, {3, 1});
  const absl::Status status = ScatterError(ScatterArgs{
      .input = input.view(), .index = index.view(), .source = source.view(), .axis = 1});
  EXPECT_THAT(status.message(), HasSubstr("scatter: index.shape[0] = 3"));
  EXPECT_THAT(status.message(), HasSubstr("input.shape[0] = 2"));
}

TEST(ScatterErrorTest, IndexLargerThanSource) {
  Tensor input(DataType::kFloat32, {4, 4});
  Tensor index = IndexTensor({2, 3}, {0, 0, 0, 0, 0, 0});
  Tensor source(DataType::kFloat32, {2, 2});
  absl::Status status = ScatterError(ScatterArgs{
      .input = input.view(), .index = index.view(), .source = source.view(), .axis = 0});
  EXPECT_THAT(status.message(), HasSubstr("scatter: index.shape[1] = 3"));
  EXPECT_THAT(status.message(), HasSubstr("src.shape[1] = 2"));
  // Along the axis too.
  Tensor source2(DataType::kFloat32, {1, 3});
  status = ScatterError(ScatterArgs{
      .input = input.view(), .index = index.view(), .source = source2.view(), .axis = 0});
  EXPECT_THAT(status.message(), HasSubstr("index.shape[0] = 2"));
  EXPECT_THAT(status.message(), HasSubstr("src.shape[0] = 1"));
}

TEST(ScatterErrorTest, DtypeMismatch) {
  Tensor input(DataType::kFloat32, {3});
  Tensor index = IndexTensor({1}, {0});
  Tensor source(DataType::kFloat64, {1});
  const absl::Status status = ScatterError(
      ScatterArgs{.input = input.view(), .index = index.view(), .source = source.view()});
  EXPECT_THAT(status.message(), HasSubstr("scatter: src.dtype = float64"));
  EXPECT_THAT(status.message(), HasSubstr("float32"));
}

TEST(ScatterErrorTest, AxisOutOfRange) {
  Tensor input(DataType::kFloat32, {3, 4});
  Tensor index = IndexTensor({1, 1}, {0});
  Tensor source(DataType::kFloat32, {1, 1});
  EXPECT_EQ(
      ScatterError(
          ScatterArgs{
              .input = input.view(), .index = index.view(), .source = source.view(), .axis = 2})
          .message(),
      "scatter: axis = 2 is out of range for a tensor of rank 2 (expected -2 <= axis < 2)");
  EXPECT_THAT(
      ScatterError(
          ScatterArgs{
              .input = input.view(), .index = index.view(), .source = source.view(), .axis = -3})
          .message(),
      HasSubstr("axis = -3"));
}

TEST(ScatterErrorTest, UnsupportedReductions) {
  Tensor input(DataType::kComplex64, {3});
  Tensor index = IndexTensor({1}, {0});
  Tensor source(DataType::kComplex64, {1});
  for (Reduction reduce : {Reduction::kAmax, Reduction::kAmin}) {
    const absl::Status status = ScatterError(ScatterArgs{
        .input = input.view(), .index = index.view(), .source = source.view(), .reduce = reduce});
    EXPECT_THAT(status.message(),
                HasSubstr(absl::StrCat("scatter: reduce = ", std::string(ReductionName(reduce)))));
    EXPECT_THAT(status.message(), HasSubstr("complex64"));
  }
  Tensor bools(DataType::kBool, {3});
  Tensor bool_source(DataType::kBool, {1});
  const absl::Status status = ScatterError(ScatterArgs{.input = bools.view(),
                                                       .index = index.view(),
                                                       .source = bool_source.view(),
                                                       .reduce = Reduction::kMean});
  EXPECT_THAT(status.message(), HasSubstr("scatter: reduce = MEAN"));
  EXPECT_THAT(status.message(), HasSubstr("bool"));
}

TEST(ScatterErrorTest, BroadcastIncompatibleShapes) {
  Tensor input(DataType::kFloat32, {3, 3});
  // The index fits in the input, but [2, 2] cannot broadcast to S = [2, 3].
  Tensor index = IndexTensor({2, 2}, {0, 0, 0, 0});
  absl::Status status = ScatterError(ScatterArgs{
      .input = input.view(), .index = index.view(), .source = Scalar(1.0), .broadcast = true});
  EXPECT_THAT(status.message(), HasSubstr("scatter: index of shape [2, 2]"));
  EXPECT_THAT(status.message(), HasSubstr("[2, 3]"));
  // The source cannot broadcast to S.
  Tensor row_index = IndexTensor({1, 3}, {0, 1, 2});
  Tensor source(DataType::kFloat32, {2});
  status = ScatterError(ScatterArgs{.input = input.view(),
                                    .index = row_index.view(),
                                    .source = source.view(),
                                    .broadcast = true});
  EXPECT_THAT(status.message(), HasSubstr("scatter: src of shape [2]"));
  EXPECT_THAT(status.message(), HasSubstr("[1, 3]"));
  // Longer along the axis and larger than the input elsewhere: rejected after broadcasting.
  Tensor wide_index = IndexTensor({4, 4}, std::vector<int64_t>(16, 0));
  status = ScatterError(ScatterArgs{.input = input.view(),
                                    .index = wide_index.view(),
                                    .source = Scalar(1.0),
                                    .axis = 0,
                                    .broadcast = true});
  EXPECT_THAT(status.message(), HasSubstr("index.shape[1] = 4"));
}

TEST(ScatterErrorTest, ValueThatDoesNotFitTheDtype) {
  Tensor input(DataType::kUInt8, {3});
  Tensor index = IndexTensor({1}, {0});
  const absl::Status status = ScatterError(
      ScatterArgs{.input = input.view(), .index = index.view(), .source = Scalar(int64_t{300})});
  EXPECT_THAT(status.message(), HasSubstr("scatter: value = 300"));
  EXPECT_THAT(status.message(), HasSubstr("uint8"));
}

// MEAN counts arrivals in int32 when the updates bound every count below its range, else in
// int64; the two must agree. The enumeration here is small, and the int64 path is reached by
// declaring more updates than int32 can count (no test input could make that many). Float and
// integer means, with and without include_self, a destination nobody writes, and one that gets
// most updates.
TEST(ReducingScatterTest, MeanCountsInInt32AndInt64Agree) {
  absl::BitGen gen = SeededGen(77, kScatterSeedSalt);
  constexpr int64_t kDestinations = 97, kUpdates = 5000;
  std::vector<int64_t> offsets(kUpdates);
  std::vector<double> values(kUpdates);
  for (int64_t u = 0; u < kUpdates; ++u) {
    offsets[u] = absl::Bernoulli(gen, 0.5) ? 3 : absl::Uniform<int64_t>(gen, 0, kDestinations - 1);
    values[u] = absl::Uniform<double>(gen, -100, 100);
  }
  const auto mean = [&]<typename T>(TypeTag<T>, bool include_self, int64_t declared_updates) {
    std::vector<T> result(kDestinations);
    for (int64_t d = 0; d < kDestinations; ++d) result[d] = static_cast<T>(d - 40);
    cpu::ReducingScatter<T, SumOp> scatter(result.data(), Shape{kDestinations}, Reduction::kMean,
                                           include_self, declared_updates);
    EXPECT_TRUE(scatter.Run([&](const auto& apply) {
      for (int64_t u = 0; u < kUpdates; ++u) apply(offsets[u], static_cast<T>(values[u]));
      return true;
    }));
    return result;
  };
  const int64_t beyond_int32 = int64_t{1} << 40;
  for (const bool include_self : {false, true}) {
    SCOPED_TRACE(include_self ? "include_self" : "without self");
    const std::vector<float> floats = mean(TypeTag<float>{}, include_self, kUpdates);
    EXPECT_EQ(floats, mean(TypeTag<float>{}, include_self, beyond_int32));
    const std::vector<int64_t> ints = mean(TypeTag<int64_t>{}, include_self, kUpdates);
    EXPECT_EQ(ints, mean(TypeTag<int64_t>{}, include_self, beyond_int32));
    // Destination 96 gets no update and keeps its value; the rest against plain loops.
    EXPECT_EQ(ints[kDestinations - 1], kDestinations - 1 - 40);
    for (int64_t d = 0; d < kDestinations - 1; ++d) {
      double sum = include_self ? d - 40 : 0;
      int64_t integer_sum = include_self ? d - 40 : 0;
      int64_t count = include_self ? 1 : 0;
      for (int64_t u = 0; u < kUpdates; ++u) {
        if (offsets[u] != d) continue;
        sum += static_cast<float>(values[u]);
        integer_sum += static_cast<int64_t>(values[u]);
        ++count;
      }
      if (count == 0) continue;
      EXPECT_NEAR(floats[d], sum / static_cast<double>(count), 1e-3) << "destination " << d;
      EXPECT_EQ(ints[d], static_cast<int64_t>(std::floor(static_cast<double>(integer_sum) /
                                                         static_cast<double>(count))))
          << "destination " << d;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// On a GPU: bit-for-bit agreement and repeatability (skipped where no GPU is usable).

class ScatterCudaTest : public testing::CudaTest {};

// Every dtype, reduction and include_self on few destinations with many duplicate updates. The
// values are small integers, which make every sum and mean exact in any order: even float results
// must equal the CPU's bit for bit, but for the signs of a complex product's zero parts, which
// depend on the order of the factors. With `deterministic` every result is the CPU's bytes.
TEST_F(ScatterCudaTest, EveryDtypeAndReductionMatchesTheCpu) {
  absl::BitGen gen = SeededGen(41, kScatterSeedSalt);
  for (DataType dtype : kAllDataTypes) {
    for (Reduction reduce : testing::kAllReductions) {
      for (bool include_self : {true, false}) {
        if (!testing::ReductionDefined(dtype, reduce)) continue;
        SCOPED_TRACE(absl::StrCat(std::string(DataTypeName(dtype)), " ",
                                  std::string(ReductionName(reduce)), " include_self ",
                                  include_self));
        Tensor input = testing::SmallIntegerValues(gen, dtype, {16, 5});
        Tensor index = testing::UniformIndices(gen, {200, 5}, 16);
        // Products of 12 values of |v| <= 3 stay exact in float16 only when few are > 1: +-1.
        Tensor source = reduce == Reduction::kProd
                            ? testing::UnitFactors(dtype, {200, 5})
                            : testing::SmallIntegerValues(gen, dtype, {200, 5});
        absl::StatusOr<ScatterPlan> plan = PlanScatter({.input = input.view(),
                                                        .index = index.view(),
                                                        .source = source.view(),
                                                        .axis = 0,
                                                        .reduce = reduce,
                                                        .include_self = include_self});
        ASSERT_TRUE(plan.ok()) << plan.status();
        testing::ExpectTheCpusBytesOnCuda(*plan);
      }
    }
  }
}

// A deterministic float SUM, MEAN or PROD (sorted by destination, then each destination's run
// combined in the updates' order) gives the CPU's bytes and repeats them. Uniform values make the
// rounding depend on the order (products near 1, so that they neither overflow nor vanish).
TEST_F(ScatterCudaTest, DeterministicFloatReductionsGiveTheCpusBytes) {
  absl::BitGen gen = SeededGen(43, kScatterSeedSalt);
  for (DataType dtype : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16,
                         DataType::kFloat64, DataType::kComplex64, DataType::kComplex128}) {
    for (Reduction reduce : {Reduction::kSum, Reduction::kMean, Reduction::kProd}) {
      for (bool include_self : {true, false}) {
        SCOPED_TRACE(absl::StrCat(std::string(DataTypeName(dtype)), " ",
                                  std::string(ReductionName(reduce)), " include_self ",
                                  include_self));
        Tensor input = testing::SmallIntegerValues(gen, dtype, {64, 9});
        Tensor index = testing::UniformIndices(gen, {20000, 9}, 64);
        const Tensor source =
            testing::RoundingValues(gen, dtype, {20000, 9}, reduce == Reduction::kProd);
        absl::StatusOr<ScatterPlan> plan = PlanScatter({.input = input.view(),
                                                        .index = index.view(),
                                                        .source = source.view(),
                                                        .reduce = reduce,
                                                        .include_self = include_self});
        ASSERT_TRUE(plan.ok()) << plan.status();
        plan->deterministic = true;
        const absl::StatusOr<Tensor> cpu = testing::RunOn(TestDevice::kCpu, *plan);
        ASSERT_TRUE(cpu.ok()) << cpu.status();
        const absl::StatusOr<Tensor> first = testing::RunOn(TestDevice::kCuda, *plan);
        const absl::StatusOr<Tensor> second = testing::RunOn(TestDevice::kCuda, *plan);
        if (HasNoDeviceForm(first.status())) {
          EXPECT_FALSE(DeviceScatterSupported(dtype, reduce));
          continue;
        }
        ASSERT_TRUE(first.ok()) << first.status();
        ASSERT_TRUE(second.ok()) << second.status();
        ExpectSameBytes(*first, *cpu);
        ExpectSameBytes(*second, *first);
      }
    }
  }
}

// A skewed index (a few destinations take most updates, as rows of a popular embedding do): the
// deterministic reduction still gives the CPU's bytes.
TEST_F(ScatterCudaTest, DeterministicReductionsOfASkewedIndexGiveTheCpusBytes) {
  absl::BitGen gen = SeededGen(59, kScatterSeedSalt);
  constexpr int64_t kDestinations = 1000;
  constexpr int64_t kUpdates = 200000;
  Tensor index(DataType::kInt64, {kUpdates});
  std::vector<double> values(kUpdates);
  for (int64_t i = 0; i < kUpdates; ++i) {
    // u^6 piles the updates on the first destinations: destination 0 takes about a third.
    const double u = absl::Uniform<double>(gen, 0, 1);
    index.data_as<int64_t>()[i] = static_cast<int64_t>(std::pow(u, 6) * kDestinations);
    values[i] = absl::Uniform<double>(gen, -1, 1);
  }
  for (DataType dtype :
       {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat64, DataType::kComplex64}) {
    for (Reduction reduce : {Reduction::kSum, Reduction::kMean}) {
      for (bool include_self : {true, false}) {
        SCOPED_TRACE(absl::StrCat(std::string(DataTypeName(dtype)), " ",
                                  std::string(ReductionName(reduce)), " include_self ",
                                  include_self));
        Tensor input = testing::SmallIntegerValues(gen, dtype, {kDestinations});
        Tensor source = TensorFromValues(dtype, {kUpdates}, values);
        absl::StatusOr<ScatterPlan> plan = PlanScatter({.input = input.view(),
                                                        .index = index.view(),
                                                        .source = source.view(),
                                                        .reduce = reduce,
                                                        .include_self = include_self});
        ASSERT_TRUE(plan.ok()) << plan.status();
        plan->deterministic = true;
        const absl::StatusOr<Tensor> cpu = testing::RunOn(TestDevice::kCpu, *plan);
        ASSERT_TRUE(cpu.ok()) << cpu.status();
        const absl::StatusOr<Tensor> gpu = testing::RunOn(TestDevice::kCuda, *plan);
        ASSERT_TRUE(gpu.ok()) << gpu.status();
        ExpectSameBytes(*gpu, *cpu);
      }
    }
  }
}

// AMAX/AMIN under contention: 200,000 updates drawn from NaNs of several signs and payloads,
// zeros of both signs and a few numbers, into 8 destinations, so that thousands of
// compare-and-swaps race on each. The GPU must give the CPU's bytes (the rule of docs/semantics.md
// leaves no choice), and the 16-bit floats must keep the bits of the destinations no update reaches
// (no float shadow rewrites their NaNs).
TEST_F(ScatterCudaTest, AmaxAminUnderContentionGiveTheCpusBytes) {
  absl::BitGen gen = SeededGen(47, kScatterSeedSalt);
  for (DataType dtype : testing::kExtremumDtypes) {
    std::vector<uint64_t> pool;
    for (const testing::ExtremumCase& rule_case : testing::ExtremumCases(dtype)) {
      pool.push_back(rule_case.input);
      pool.insert(pool.end(), rule_case.sources.begin(), rule_case.sources.end());
    }
    constexpr int64_t kDestinations = 8;
    constexpr int64_t kUntouched = 5;
    constexpr int64_t kUpdates = 200000;
    Tensor input(dtype, {kDestinations + kUntouched});
    for (int64_t d = 0; d < input.numel(); ++d) {
      // Untouched NaNs with payloads a float round trip would not keep (signaling, low bits).
      testing::SetBits(input, d,
                       d < kDestinations ? pool[absl::Uniform<size_t>(gen, 0, pool.size())]
                                         : testing::NanBits(dtype, d % 2 == 0, false, d));
    }
    Tensor index(DataType::kInt64, {kUpdates});
    Tensor source(dtype, {kUpdates});
    for (int64_t i = 0; i < kUpdates; ++i) {
      index.data_as<int64_t>()[i] = absl::Uniform<int64_t>(gen, 0, kDestinations);
      testing::SetBits(source, i, pool[absl::Uniform<size_t>(gen, 0, pool.size())]);
    }
    for (Reduction reduce : {Reduction::kAmax, Reduction::kAmin}) {
      for (bool include_self : {true, false}) {
        SCOPED_TRACE(absl::StrCat(std::string(DataTypeName(dtype)), " ",
                                  std::string(ReductionName(reduce)), " include_self ",
                                  include_self));
        absl::StatusOr<ScatterPlan> plan = PlanScatter({.input = input.view(),
                                                        .index = index.view(),
                                                        .source = source.view(),
                                                        .reduce = reduce,
                                                        .include_self = include_self});
        ASSERT_TRUE(plan.ok()) << plan.status();
        const absl::StatusOr<Tensor> cpu = testing::RunOn(TestDevice::kCpu, *plan);
        const absl::StatusOr<Tensor> gpu = testing::RunOn(TestDevice::kCuda, *plan);
        ASSERT_TRUE(cpu.ok()) << cpu.status();
        ASSERT_TRUE(gpu.ok()) << gpu.status();
        ExpectSameBytes(*gpu, *cpu);
        for (int64_t d = kDestinations; d < input.numel(); ++d) {
          EXPECT_EQ(testing::BitsAt(*gpu, d), testing::BitsAt(input, d)) << "untouched " << d;
        }
      }
    }
  }
}

// The deterministic reduction of one destination with 100,000 float updates (CUB's ReduceByKey
// combined such a run's block partials in an order that varied from run to run). Twenty calls
// give the same bytes, the CPU's.
TEST_F(ScatterCudaTest, DeterministicSumOfOneLongRunRepeatsBitForBit) {
  absl::BitGen gen = SeededGen(53, kScatterSeedSalt);
  constexpr int64_t kUpdates = 100000;
  for (DataType dtype : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat64}) {
    for (Reduction reduce : {Reduction::kSum, Reduction::kMean}) {
      SCOPED_TRACE(
          absl::StrCat(std::string(DataTypeName(dtype)), " ", std::string(ReductionName(reduce))));
      Tensor input = Tensor::Zeros(dtype, {3});
      // Every update goes to element 1; the neighbours stay as they were.
      Tensor index(DataType::kInt64, {kUpdates});
      std::vector<double> values(kUpdates);
      for (int64_t i = 0; i < kUpdates; ++i) {
        index.data_as<int64_t>()[i] = 1;
        values[i] = absl::Uniform<double>(gen, 0, 1);
      }
      Tensor source = TensorFromValues(dtype, {kUpdates}, values);
      absl::StatusOr<ScatterPlan> plan = PlanScatter({.input = input.view(),
                                                      .index = index.view(),
                                                      .source = source.view(),
                                                      .reduce = reduce});
      ASSERT_TRUE(plan.ok()) << plan.status();
      plan->deterministic = true;
      const absl::StatusOr<Tensor> cpu = testing::RunOn(TestDevice::kCpu, *plan);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      const absl::StatusOr<Tensor> first = testing::RunOn(TestDevice::kCuda, *plan);
      ASSERT_TRUE(first.ok()) << first.status();
      for (int run = 1; run < 20; ++run) {
        const absl::StatusOr<Tensor> again = testing::RunOn(TestDevice::kCuda, *plan);
        ASSERT_TRUE(again.ok()) << again.status();
        ExpectSameBytes(*again, *first);
      }
      ExpectSameBytes(*first, *cpu);
      EXPECT_EQ(testing::ElementAsDouble(*first, 0), 0);
      EXPECT_EQ(testing::ElementAsDouble(*first, 2), 0);
    }
  }
}

}  // namespace
}  // namespace tensorops
