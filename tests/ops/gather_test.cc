// Gather (docs/semantics.md, Gather) against the independent reference in reference.h: randomized
// over dtypes, ranks, axes, index dtypes and index patterns, on the CPU and on CUDA
// (tests/device_runner.h; skipped where no GPU is usable), plus the PyTorch/Paddle doc examples and
// every error docs/semantics.md names. On a GPU also: every dtype in one batch of the CUDA
// executor, byte for byte the CPU's, and an out-of-range index flagged by the device without
// spoiling the next batch.
#include "kernels/gather.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/streaming_store.h"
#include "kernels/cuda/executor.h"
#include "kernels/device_call.h"
#include "kernels/index_ops.h"
#include "tests/device_runner.h"
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
using testing::SeededGen;
using testing::TensorFromValues;
using testing::TestDevice;
using testing::ToDoubles;

struct GatherCase {
  Tensor input;
  Tensor index;
  int64_t axis = 0;
  bool broadcast = false;
  std::string description;
};

// kGatherSeedSalt salts every generator this file seeds, keeping its random inputs apart from the
// other suites' (testing::SeededGen).
constexpr uint64_t kGatherSeedSalt = 0x6a7e;

// A random valid Gather call. Without broadcast the index is no larger than the input in the
// non-axis dimensions; with broadcast each non-axis pair of sizes is equal or has a 1.
GatherCase RandomGatherCase(DataType dtype, bool broadcast, absl::BitGen& gen) {
  const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, broadcast ? 1 : 0, 4);
  const int64_t max_size = rank >= 4 ? 4 : 5;
  const int64_t walk_rank = std::max<int64_t>(rank, 1);
  const int64_t axis = absl::Uniform<int64_t>(gen, 0, walk_rank);
  Shape input_shape(rank);
  Shape index_shape(rank);
  for (int64_t d = 0; d < rank; ++d) {
    if (d == axis) continue;
    const int64_t size = testing::RandomDimSize(gen, max_size);
    if (broadcast) {
      const int choice = absl::Uniform(gen, 0, 3);
      input_shape[d] = choice == 1 ? 1 : size;
      index_shape[d] = choice == 2 ? 1 : size;
    } else {
      input_shape[d] = size;
      index_shape[d] = absl::Bernoulli(gen, 0.5)
                           ? size
                           : absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, size);
    }
  }
  IndexPattern pattern = testing::RandomIndexPattern(gen);
  int64_t axis_size = 1;
  if (rank > 0) {
    input_shape[axis] = testing::RandomDimSize(gen, max_size);
    axis_size = input_shape[axis];
    index_shape[axis] =
        axis_size == 0 ? 0 : absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, 6);
    if (pattern == IndexPattern::kUnique)
      index_shape[axis] = std::min(index_shape[axis], axis_size);
  }
  const DataType index_dtype = absl::Bernoulli(gen, 0.5) ? DataType::kInt32 : DataType::kInt64;
  testing::ValueOptions values;
  values.nan_fraction = 0.05;
  values.signed_zero_fraction = 0.05;
  GatherCase c;
  c.input = RandomTensor(dtype, input_shape, gen, values);
  c.index = RandomIndex(index_dtype, index_shape, axis, axis_size, pattern, gen);
  c.axis = absl::Bernoulli(gen, 0.3) ? axis - walk_rank : axis;
  c.broadcast = broadcast;
  c.description =
      absl::StrCat("input ", testing::reference_internal::ShapeString(input_shape), " index ",
                   testing::reference_internal::ShapeString(index_shape), " (",
                   std::string(DataTypeName(index_dtype)), ", ", testing::IndexPatternName(pattern),
                   ") axis ", c.axis, broadcast ? " broadcast" : "");
  return c;
}

// ExpectGatherMatchesReference runs `c` on the runner's device (a case with no GPU form is
// skipped, and counted) and compares the result with the reference's.
void ExpectGatherMatchesReference(const GatherCase& c, DeviceRunner& runner) {
  SCOPED_TRACE(c.description);
  absl::StatusOr<Tensor> actual = runner.Run(GatherArgs{
      .input = c.input.view(), .index = c.index.view(), .axis = c.axis, .broadcast = c.broadcast});
  if (HasNoDeviceForm(actual.status())) return;
  absl::StatusOr<Tensor> expected =
      ReferenceGather(c.input.view(), c.axis, c.index.view(), c.broadcast);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(actual.ok()) << actual.status();
  ExpectTensorsNear(*actual, *expected);
}

// Over dtype x device: the same cases on the CPU and on CUDA.
class GatherRandomTest : public testing::DeviceTest<DataType> {
 protected:
  DataType dtype() const { return leading_param(); }
};

TEST_P(GatherRandomTest, MatchesReference) {
  for (uint64_t seed = 0; seed < 60; ++seed) {
    absl::BitGen gen = SeededGen(seed * 131 + static_cast<uint64_t>(dtype()), kGatherSeedSalt);
    ExpectGatherMatchesReference(RandomGatherCase(dtype(), /*broadcast=*/false, gen), runner());
  }
}

TEST_P(GatherRandomTest, BroadcastMatchesReference) {
  for (uint64_t seed = 0; seed < 40; ++seed) {
    absl::BitGen gen =
        SeededGen(seed * 137 + static_cast<uint64_t>(dtype()) + 5000, kGatherSeedSalt);
    ExpectGatherMatchesReference(RandomGatherCase(dtype(), /*broadcast=*/true, gen), runner());
  }
}

// Large enough (~300k elements) for the multi-threaded walks, along the first, the last (where
// Gather may split the axis itself between threads) and a middle axis.
TEST_P(GatherRandomTest, LargeMatchesReference) {
  absl::BitGen gen = SeededGen(777 + static_cast<uint64_t>(dtype()), kGatherSeedSalt);
  struct Large {
    Shape input_shape;
    Shape index_shape;
    int64_t axis;
    IndexPattern pattern;
  };
  const Large cases[] = {
      {{640, 480}, {700, 480}, 0, IndexPattern::kRandom},
      {{300, 1000}, {300, 1000}, -1, IndexPattern::kDuplicateHeavy},
      {{30, 100, 100}, {30, 100, 90}, 1, IndexPattern::kUnique},
  };
  for (const Large& large : cases) {
    GatherCase c;
    c.input = RandomTensor(dtype(), large.input_shape, gen);
    const int64_t axis = large.axis < 0 ? large.axis + 2 : large.axis;
    c.index = RandomIndex(DataType::kInt64, large.index_shape, axis, large.input_shape[axis],
                          large.pattern, gen);
    c.axis = large.axis;
    c.description = absl::StrCat("large, axis ", large.axis);
    ExpectGatherMatchesReference(c, runner());
  }
}

TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(GatherRandomTest, ::testing::ValuesIn(kAllDataTypes),
                                      testing::DataTypeParamName);

// Results of cpu::kStreamingMinBytes and more are written with streaming stores along the last
// axis (4- and 8-byte elements, one line per run, 16 bytes per store from the line's first 16-byte
// boundary on; 2-byte ones with plain stores), which bypass the cache and are weakly ordered:
// every element must still arrive. Along the first axis (plain
// stores, runs along the inner dimension) an index of cpu::kRunPrefetchMinIndexBytes and more
// (every case's here, 16 MiB of int32 and more) has each next run's start prefetched. Lines of
// odd length start runs off a cache line. The expected values are computed here with plain loops;
// each element of the input is a hash of its own position, so a lost, stale or misplaced store
// shows.
int64_t PositionHash(int64_t position) {
  return static_cast<int64_t>((static_cast<uint64_t>(position) * 0x9E3779B97F4A7C15u) >> 1);
}

TEST(GatherTest, ResultsLargerThanTheCacheMatchPlainLoops) {
  absl::BitGen gen = SeededGen(4242, kGatherSeedSalt);
  for (const DataType dtype : {DataType::kInt16, DataType::kInt32, DataType::kInt64}) {
    const int64_t numel = cpu::kStreamingMinBytes / ItemSize(dtype) + 1001;
    for (const int64_t axis : {0, 1}) {
      const Shape shape = axis == 0 ? Shape{512, numel / 512} : Shape{numel / 1001, 1001};
      SCOPED_TRACE(absl::StrCat(std::string(DataTypeName(dtype)), " axis ", axis));
      Tensor input(dtype, shape);
      const int64_t count = input.numel();
      for (int64_t i = 0; i < count; ++i) {
        const int64_t hash = PositionHash(i);
        switch (dtype) {
          case DataType::kInt16:
            input.data_as<int16_t>()[i] = static_cast<int16_t>(hash);
            break;
          case DataType::kInt32:
            input.data_as<int32_t>()[i] = static_cast<int32_t>(hash);
            break;
          default:
            input.data_as<int64_t>()[i] = hash;
        }
      }
      const auto element = [dtype](const Tensor& tensor, int64_t i) -> int64_t {
        switch (dtype) {
          case DataType::kInt16:
            return tensor.data_as<int16_t>()[i];
          case DataType::kInt32:
            return tensor.data_as<int32_t>()[i];
          default:
            return tensor.data_as<int64_t>()[i];
        }
      };
      const int64_t axis_size = shape[axis];
      Tensor index(DataType::kInt32, shape);
      int32_t* values = index.data_as<int32_t>();
      // Mostly in [0, size), a few negative (wrapped by the slower loop).
      for (int64_t i = 0; i < count; ++i) {
        values[i] = static_cast<int32_t>(absl::Uniform<int64_t>(gen, 0, axis_size) -
                                         (absl::Bernoulli(gen, 0.001) ? axis_size : 0));
      }
      absl::StatusOr<Tensor> out =
          Gather(GatherArgs{.input = input.view(), .index = index.view(), .axis = axis});
      ASSERT_TRUE(out.ok()) << out.status();
      const int64_t cols = shape[1];
      int64_t mismatches = 0;
      for (int64_t i = 0; i < count && mismatches < 5; ++i) {
        const int64_t value = values[i] < 0 ? values[i] + axis_size : values[i];
        const int64_t row = i / cols, col = i % cols;
        const int64_t expected =
            element(input, axis == 0 ? value * cols + col : row * cols + value);
        const int64_t actual = element(*out, i);
        if (actual != expected) {
          ++mismatches;
          ADD_FAILURE() << "out[" << row << ", " << col << "] = " << actual << ", expected "
                        << expected;
        }
      }

      // An index out of range deep inside a run (along the last axis, among the indices of one
      // 16-byte store) is reported, by its position.
      const int64_t bad_row = shape[0] - 2, bad_col = cols / 2 + 1;
      values[bad_row * cols + bad_col] = static_cast<int32_t>(axis_size);
      absl::StatusOr<Tensor> bad =
          Gather(GatherArgs{.input = input.view(), .index = index.view(), .axis = axis});
      EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(bad.status().message(),
                  HasSubstr(absl::StrCat("index[", bad_row, ", ", bad_col, "] = ", axis_size)));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Hand cases.

TEST(GatherTest, TorchDocExample) {
  // torch.gather(torch.tensor([[1, 2], [3, 4]]), 1, torch.tensor([[0, 0], [1, 0]]))
  Tensor input = TensorFromValues(DataType::kInt64, {2, 2}, {1, 2, 3, 4});
  Tensor index = IndexTensor({2, 2}, {0, 0, 1, 0});
  absl::StatusOr<Tensor> out =
      Gather(GatherArgs{.input = input.view(), .index = index.view(), .axis = 1});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape(), Shape({2, 2}));
  EXPECT_EQ(ToDoubles(*out), (std::vector<double>{1, 1, 4, 3}));
}

TEST(GatherTest, NegativeIndicesCountFromTheEnd) {
  Tensor input = TensorFromValues(DataType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor index = IndexTensor({2, 2}, {-1, -3, 0, -2}, DataType::kInt32);
  absl::StatusOr<Tensor> out =
      Gather(GatherArgs{.input = input.view(), .index = index.view(), .axis = -1});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(ToDoubles(*out), (std::vector<double>{3, 1, 4, 5}));
}

TEST(GatherTest, IndexSmallerThanInputAndLongerAlongAxis) {
  // Index [1, 4] into input [3, 2] along axis 1: repeats allowed, only the first row is read.
  Tensor input = TensorFromValues(DataType::kInt16, {3, 2}, {10, 11, 20, 21, 30, 31});
  Tensor index = IndexTensor({1, 4}, {1, 0, 1, 1});
  absl::StatusOr<Tensor> out =
      Gather(GatherArgs{.input = input.view(), .index = index.view(), .axis = 1});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape(), Shape({1, 4}));
  EXPECT_EQ(ToDoubles(*out), (std::vector<double>{11, 10, 11, 11}));
}

TEST(GatherTest, PaddleTakeAlongAxisBroadcastExample) {
  // paddle.take_along_axis(x=[[1,2,3],[4,5,6],[7,8,9]], indices=[[0]], axis=0) -> [[1, 2, 3]]
  Tensor input = TensorFromValues(DataType::kFloat32, {3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor index = IndexTensor({1, 1}, {0});
  absl::StatusOr<Tensor> out = Gather(
      GatherArgs{.input = input.view(), .index = index.view(), .axis = 0, .broadcast = true});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape(), Shape({1, 3}));
  EXPECT_EQ(ToDoubles(*out), (std::vector<double>{1, 2, 3}));
}

TEST(GatherTest, BroadcastInputAgainstLargerIndex) {
  // Input [2, 1] broadcast along axis 1 to the index's 3 columns; gather along axis 0.
  Tensor input = TensorFromValues(DataType::kInt32, {2, 1}, {5, 7});
  Tensor index = IndexTensor({2, 3}, {1, 0, 1, 0, 0, -1});
  absl::StatusOr<Tensor> out = Gather(
      GatherArgs{.input = input.view(), .index = index.view(), .axis = 0, .broadcast = true});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape(), Shape({2, 3}));
  EXPECT_EQ(ToDoubles(*out), (std::vector<double>{7, 5, 7, 5, 5, 7}));
}

TEST(GatherTest, RankZero) {
  Tensor input = TensorFromValues(DataType::kFloat64, {}, {2.5});
  for (int64_t value : {0, -1}) {
    Tensor index = IndexTensor({}, {value});
    for (int64_t axis : {0, -1}) {
      absl::StatusOr<Tensor> out =
          Gather(GatherArgs{.input = input.view(), .index = index.view(), .axis = axis});
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(out->shape(), Shape{});
      EXPECT_EQ(ToDoubles(*out), (std::vector<double>{2.5}));
    }
  }
  Tensor bad = IndexTensor({}, {1});
  absl::StatusOr<Tensor> out =
      Gather(GatherArgs{.input = input.view(), .index = bad.view(), .axis = 0});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("gather: index = 1 is out of range"));
  EXPECT_FALSE(ReferenceGather(input.view(), 0, bad.view(), false).ok());
}

TEST(GatherTest, EmptyIndexGivesEmptyResult) {
  Tensor input = TensorFromValues(DataType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor index = IndexTensor({0, 3}, {});
  absl::StatusOr<Tensor> out =
      Gather(GatherArgs{.input = input.view(), .index = index.view(), .axis = 0});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape(), Shape({0, 3}));
  Tensor empty_input(DataType::kFloat32, {0, 3});
  Tensor empty_axis_index = IndexTensor({0, 2}, {});
  out =
      Gather(GatherArgs{.input = empty_input.view(), .index = empty_axis_index.view(), .axis = 0});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape(), Shape({0, 2}));
}

TEST(GatherTest, StridedInputView) {
  // The input viewed transposed (strides {1, 3}) must read the same elements as a contiguous copy.
  Tensor storage = TensorFromValues(DataType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6});
  const TensorView transposed(DataType::kFloat32, {3, 2}, {1, 3}, storage.data());
  Tensor index = IndexTensor({3, 2}, {1, 0, 0, 0, -1, 1});
  absl::StatusOr<Tensor> expected = ReferenceGather(transposed, 1, index.view(), false);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(ToDoubles(*expected), (std::vector<double>{4, 1, 2, 2, 6, 6}));
  absl::StatusOr<Tensor> out =
      Gather(GatherArgs{.input = transposed, .index = index.view(), .axis = 1});
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectTensorsNear(*out, *expected);
}

TEST(GatherTest, TwoPhasePlanAndRun) {
  Tensor input =
      TensorFromValues(DataType::kBFloat16, {3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  Tensor index = IndexTensor({2, 4}, {2, 0, 1, -1, 0, 0, 2, 1}, DataType::kInt32);
  const GatherArgs args{.input = input.view(), .index = index.view(), .axis = 0};
  absl::StatusOr<GatherPlan> plan = PlanGather(args);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->result_dtype, DataType::kBFloat16);
  EXPECT_EQ(plan->result_shape, Shape({2, 4}));
  EXPECT_EQ(plan->axis, 0);
  EXPECT_EQ(plan->input_axis_size, 3);
  Tensor out(plan->result_dtype, plan->result_shape);
  ASSERT_TRUE(cpu::Gather(*plan, out.mutable_view()).ok());
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{8, 1, 6, 11, 0, 1, 10, 7}));
  absl::StatusOr<Tensor> expected = ReferenceGather(input.view(), 0, index.view(), false);
  ASSERT_TRUE(expected.ok());
  ExpectTensorsNear(out, *expected);

  // Planning succeeds without looking at index values; running reports them.
  Tensor bad_index = IndexTensor({1, 1}, {3});
  absl::StatusOr<GatherPlan> bad_plan =
      PlanGather(GatherArgs{.input = input.view(), .index = bad_index.view(), .axis = 0});
  ASSERT_TRUE(bad_plan.ok()) << bad_plan.status();
  Tensor bad_out(bad_plan->result_dtype, bad_plan->result_shape);
  const absl::Status status = cpu::Gather(*bad_plan, bad_out.mutable_view());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("gather: index[0, 0] = 3 is out of range"));
}

// ---------------------------------------------------------------------------------------------
// Errors: the kernel and the reference reject the same inputs, with messages in the form of
// docs/semantics.md.

absl::Status GatherError(const Tensor& input, const Tensor& index, int64_t axis,
                         bool broadcast = false) {
  const absl::StatusOr<Tensor> reference =
      ReferenceGather(input.view(), axis, index.view(), broadcast);
  EXPECT_FALSE(reference.ok()) << "the reference accepts this input";
  absl::StatusOr<Tensor> out = Gather(GatherArgs{
      .input = input.view(), .index = index.view(), .axis = axis, .broadcast = broadcast});
  if (out.ok()) return absl::OkStatus();
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  return out.status();
}

TEST(GatherErrorTest, IndexOutOfRangeNamesTheFirstOffender) {
  Tensor input(DataType::kFloat32, {4, 5});
  Tensor index = IndexTensor({3, 2}, {0, 4, -5, 7, 9, -6}, DataType::kInt32);
  const absl::Status status = GatherError(input, index, 1);
  EXPECT_EQ(status.message(),
            "gather: index[1, 1] = 7 is out of range for axis 1 of input with size 5 "
            "(expected -5 <= index < 5)");
  Tensor negative = IndexTensor({1, 2}, {2, -6});
  EXPECT_THAT(GatherError(input, negative, -1).message(),
              HasSubstr("gather: index[0, 1] = -6 is out of range for axis 1"));
  Tensor along_axis_zero = IndexTensor({1, 1}, {4});
  EXPECT_THAT(GatherError(input, along_axis_zero, 0).message(),
              HasSubstr("index[0, 0] = 4 is out of range for axis 0 of input with size 4"));
  Tensor empty_axis_input(DataType::kFloat32, {0, 5});
  Tensor any = IndexTensor({1, 1}, {0});
  EXPECT_THAT(GatherError(empty_axis_input, any, 0).message(), HasSubstr("with size 0"));
}

// In a walk split between threads, the error still names the first bad index in row-major order.
TEST(GatherErrorTest, FirstOffenderInLargeParallelWalk) {
  Tensor input(DataType::kInt32, {600, 500});
  std::memset(input.data(), 0, static_cast<size_t>(input.nbytes()));
  for (int64_t axis : {0, 1}) {
    absl::BitGen gen = SeededGen(99, kGatherSeedSalt);
    Tensor index = RandomIndex(DataType::kInt64, {600, 500}, axis, 500, IndexPattern::kRandom, gen);
    int64_t* values = index.data_as<int64_t>();
    values[599 * 500 + 10] = -1000;  // Late in row-major order, early along axis 1.
    values[123 * 500 + 456] = 1000;  // The first.
    values[200 * 500 + 3] = 2000;
    EXPECT_THAT(
        GatherError(input, index, axis).message(),
        HasSubstr(absl::StrCat("gather: index[123, 456] = 1000 is out of range for axis ", axis)));
  }
}

// The kernel checks each index of a run as it gathers, along the last axis (every position reads
// one line) and along the first (every position reads its own line) alike. In both, the extremes
// of the index types, the bounds themselves, and a bad index late in a long run must all be
// caught (and good runs with negatives wrapped).
TEST(GatherErrorTest, ExtremeIndicesInLongContiguousRunsAreCaught) {
  constexpr int64_t kLength = 1500;  // Long runs: a bad index far from their start.
  Tensor input(DataType::kInt32, {2, kLength});
  for (int64_t i = 0; i < 2 * kLength; ++i) input.data_as<int32_t>()[i] = static_cast<int32_t>(i);
  // Along axis 0 each run of the index's rows reads kLength different lines of `tall`.
  Tensor tall(DataType::kInt32, {kLength, kLength});
  for (const DataType dtype : {DataType::kInt32, DataType::kInt64}) {
    const int64_t low = dtype == DataType::kInt32 ? std::numeric_limits<int32_t>::min()
                                                  : std::numeric_limits<int64_t>::min();
    const int64_t high = dtype == DataType::kInt32 ? std::numeric_limits<int32_t>::max()
                                                   : std::numeric_limits<int64_t>::max();
    for (const int64_t axis : {0, 1}) {
      for (const int64_t bad : {low, high, -kLength - 1, kLength}) {
        for (const int64_t position : {int64_t{0}, int64_t{700}, kLength - 1}) {
          SCOPED_TRACE(absl::StrCat(std::string(DataTypeName(dtype)), " axis ", axis, " index ",
                                    bad, " at ", position));
          std::vector<int64_t> values(2 * kLength, -kLength);  // The lowest valid index.
          values[kLength + position] = bad;
          const Tensor index = IndexTensor({2, kLength}, values, dtype);
          EXPECT_THAT(
              GatherError(axis == 0 ? tall : input, index, axis).message(),
              HasSubstr(absl::StrCat("index[1, ", position, "] = ", bad, " is out of range")));
        }
      }
    }
    // The bounds themselves are good: -size wraps to 0, size - 1 stays.
    std::vector<int64_t> values(2 * kLength, kLength - 1);
    for (int64_t i = 0; i < 2 * kLength; i += 3) values[i] = -kLength;
    absl::StatusOr<Tensor> out = Gather({.input = input.view(),
                                         .index = IndexTensor({2, kLength}, values, dtype).view(),
                                         .axis = 1});
    ASSERT_TRUE(out.ok()) << out.status();
    for (int64_t i = 0; i < 2 * kLength; ++i) {
      const int64_t row = i / kLength;
      ASSERT_EQ(out->data_as<int32_t>()[i], row * kLength + (i % 3 == 0 ? 0 : kLength - 1)) << i;
    }
  }
}

// A run's indices are visited four at a time while they lie in [0, size); the first one outside
// hands the rest of the run to the loop that checks and wraps each index. The handover must be
// right wherever it falls: at every position of a group of four and in the tail, for a negative
// index (then wrapped) and for an out-of-range one (then reported), on a contiguous and on a
// strided index along the last axis, and on the first axis (each position its own line).
TEST(GatherTest, RunsTurningNegativeOrBadAtAnyPositionAreHandled) {
  constexpr int64_t kSize = 11;
  constexpr int64_t kLength = 13;  // Three groups of four and a tail of one.
  struct Layout {
    int64_t axis;
    bool strided_index;
  };
  for (const DataType dtype : {DataType::kInt32, DataType::kInt64}) {
    for (const Layout layout : {Layout{1, false}, Layout{1, true}, Layout{0, false}}) {
      // Each row of the [2, kLength] index is one run.
      const Shape input_shape = layout.axis == 1 ? Shape{2, kSize} : Shape{kSize, kLength};
      Tensor input(DataType::kInt32, input_shape);
      for (int64_t i = 0; i < input.numel(); ++i) {
        input.data_as<int32_t>()[i] = static_cast<int32_t>(i);
      }
      const auto gather = [&](const std::vector<int64_t>& values) {
        const Tensor index = IndexTensor({2, kLength}, values, dtype);
        const testing::LaidOutTensor stepped = testing::SteppedCopy(index);
        const TensorView index_view = layout.strided_index ? stepped.view : index.view();
        absl::StatusOr<Tensor> expected =
            ReferenceGather(input.view(), layout.axis, index_view, /*broadcast=*/false);
        absl::StatusOr<Tensor> actual =
            Gather(GatherArgs{.input = input.view(), .index = index_view, .axis = layout.axis});
        EXPECT_EQ(actual.ok(), expected.ok()) << actual.status() << " / " << expected.status();
        if (actual.ok() && expected.ok()) ExpectTensorsNear(*actual, *expected);
        return actual.status();
      };
      for (int64_t turn = 0; turn < kLength; ++turn) {
        SCOPED_TRACE(absl::StrCat(std::string(DataTypeName(dtype)), " axis ", layout.axis,
                                  layout.strided_index ? " strided" : "", " turn at ", turn));
        EXPECT_TRUE(gather(testing::TurningRunIndex(kSize, kLength, turn)).ok());
        for (const int64_t bad : {kSize, -kSize - 1}) {
          EXPECT_THAT(gather(testing::TurningRunIndex(kSize, kLength, turn, bad)).message(),
                      HasSubstr(absl::StrCat("index[1, ", turn, "] = ", bad, " is out of range")));
        }
      }
    }
  }
}

TEST(GatherErrorTest, IndexDtypeMustBeInt32OrInt64) {
  Tensor input(DataType::kFloat32, {3});
  Tensor float_index = TensorFromValues(DataType::kFloat32, {2}, {0, 1});
  const absl::Status status = GatherError(input, float_index, 0);
  EXPECT_THAT(status.message(), HasSubstr("gather"));
  EXPECT_THAT(status.message(), HasSubstr("index.dtype = float32"));
  Tensor int16_index = TensorFromValues(DataType::kInt16, {2}, {0, 1});
  EXPECT_THAT(GatherError(input, int16_index, 0).message(), HasSubstr("int16"));
}

TEST(GatherErrorTest, RankMismatch) {
  Tensor input(DataType::kFloat32, {3, 4});
  Tensor index = IndexTensor({2}, {0, 1});
  const absl::Status status = GatherError(input, index, 0);
  EXPECT_THAT(status.message(), HasSubstr("gather"));
  EXPECT_THAT(status.message(), HasSubstr("rank 1"));
  EXPECT_THAT(status.message(), HasSubstr("rank 2"));
  Tensor index3 = IndexTensor({1, 1, 1}, {0});
  EXPECT_THAT(GatherError(input, index3, 0).message(), HasSubstr("rank 3"));
  EXPECT_THAT(GatherError(input, index3, 0, /*broadcast=*/true).message(), HasSubstr("rank"));
}

TEST(GatherErrorTest, AxisOutOfRange) {
  Tensor input(DataType::kFloat32, {3, 4});
  Tensor index = IndexTensor({1, 1}, {0});
  EXPECT_EQ(GatherError(input, index, 2).message(),
            "gather: axis = 2 is out of range for a tensor of rank 2 (expected -2 <= axis < 2)");
  EXPECT_THAT(GatherError(input, index, -3).message(), HasSubstr("axis = -3"));
}

TEST(GatherErrorTest, IndexLargerThanInputInNonAxisDimension) {
  Tensor input(DataType::kFloat32, {2, 4});
  Tensor index = IndexTensor({3, 1}, {0, 0, 0});
  const absl::Status status = GatherError(input, index, 1);
  EXPECT_THAT(status.message(), HasSubstr("gather"));
  EXPECT_THAT(status.message(), HasSubstr("index.shape[0] = 3"));
  EXPECT_THAT(status.message(), HasSubstr("input.shape[0] = 2"));
}

TEST(GatherErrorTest, BroadcastIncompatibleShapes) {
  Tensor input(DataType::kFloat32, {2, 4});
  Tensor index = IndexTensor({3, 1}, {0, 0, 0});
  const absl::Status status = GatherError(input, index, 1, /*broadcast=*/true);
  EXPECT_THAT(status.message(), HasSubstr("gather: cannot broadcast"));
  EXPECT_THAT(status.message(), HasSubstr("= 2"));
  EXPECT_THAT(status.message(), HasSubstr("= 3"));
}

// ---------------------------------------------------------------------------------------------
// On a GPU: the CUDA executor itself (skipped where no GPU is usable).

class GatherCudaTest : public testing::CudaTest {};

// One Gather of every dtype, all in one batch of the executor: each result is the CPU kernel's,
// byte for byte.
TEST_F(GatherCudaTest, EveryDtypeMatchesTheCpuInOneBatch) {
  absl::StatusOr<DeviceExecutor*> executor = testing::SharedCudaExecutor();
  ASSERT_TRUE(executor.ok()) << executor.status();
  absl::BitGen gen = SeededGen(31, kGatherSeedSalt);
  std::vector<Tensor> inputs, indices;
  for (DataType dtype : kAllDataTypes) {
    inputs.push_back(testing::SmallIntegerValues(gen, dtype, {37, 129}));
    indices.push_back(testing::UniformIndices(gen, {37, 300}, 129));
  }
  std::vector<GatherPlan> plans;
  for (size_t i = 0; i < inputs.size(); ++i) {
    absl::StatusOr<GatherPlan> plan =
        PlanGather({.input = inputs[i].view(), .index = indices[i].view(), .axis = 1});
    ASSERT_TRUE(plan.ok()) << plan.status();
    plans.push_back(*std::move(plan));
  }
  std::vector<Tensor> expected, results;
  std::vector<std::unique_ptr<DeviceCall>> calls;
  std::vector<const DeviceCall*> call_pointers;
  std::vector<void*> result_pointers;
  for (const GatherPlan& plan : plans) {
    absl::StatusOr<Tensor> cpu = testing::RunOn(TestDevice::kCpu, plan);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    expected.push_back(*std::move(cpu));
    calls.push_back(MakeDeviceCall(plan));
    ASSERT_NE(calls.back(), nullptr);
    call_pointers.push_back(calls.back().get());
    results.emplace_back(plan.result_dtype, plan.result_shape);
    ASSERT_EQ(calls.back()->result_bytes(), results.back().nbytes());
  }
  for (Tensor& result : results) result_pointers.push_back(result.data());
  const std::vector<DeviceOutcome> outcomes = (*executor)->RunBatch(call_pointers, result_pointers);
  ASSERT_EQ(outcomes.size(), plans.size());
  for (size_t i = 0; i < plans.size(); ++i) {
    SCOPED_TRACE(DataTypeName(plans[i].result_dtype));
    EXPECT_TRUE(outcomes[i].ok()) << outcomes[i].device_error;
    ExpectSameBytes(results[i], expected[i]);
  }
}

// The device flags an out-of-range index (the runner then returns the CPU kernel's error naming
// it, where an unflagged call would have returned a result), and the flag spoils no later batch.
TEST_F(GatherCudaTest, AnOutOfRangeIndexRaisesTheFlagAndTheNextBatchWorks) {
  Tensor input = Tensor::Zeros(DataType::kFloat32, {4});
  Tensor index = Tensor::Zeros(DataType::kInt64, {3});
  index.data_as<int64_t>()[1] = 4;
  absl::StatusOr<GatherPlan> plan = PlanGather({.input = input.view(), .index = index.view()});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const absl::StatusOr<Tensor> flagged = testing::RunOn(TestDevice::kCuda, *plan);
  EXPECT_EQ(flagged.status().code(), absl::StatusCode::kInvalidArgument) << flagged.status();
  EXPECT_THAT(flagged.status().message(), HasSubstr("gather: index[1] = 4 is out of range"));

  index.data_as<int64_t>()[1] = -4;
  const absl::StatusOr<Tensor> next = testing::RunOn(TestDevice::kCuda, *plan);
  ASSERT_TRUE(next.ok()) << next.status();
  const absl::StatusOr<Tensor> cpu = testing::RunOn(TestDevice::kCpu, *plan);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ExpectSameBytes(*next, *cpu);
}

// IndexSelect copies whole rows (a group of threads sized to the row, in units of up to 16 bytes)
// where its index holds along a contiguous run of at least 32 bytes: every dtype; rows of 16-byte
// multiples and of odd widths; rows along axis 0 and inside a batch (axis 1 of three); an input
// whose rows start 4 bytes apart from an alignment (a view from the second element); int32 and
// int64 indices with duplicates and negatives; and an out-of-range index, which the row kernel
// flags too.
TEST_F(GatherCudaTest, IndexSelectOfRowsMatchesTheCpu) {
  absl::BitGen gen = SeededGen(4343, kGatherSeedSalt);
  for (DataType dtype : kAllDataTypes) {
    for (const Shape& shape : {Shape{300, 64}, Shape{300, 37}, Shape{6, 50, 40}}) {
      for (bool offset_view : {false, true}) {
        SCOPED_TRACE(absl::StrCat(std::string(DataTypeName(dtype)), " ", ShapeToString(shape),
                                  offset_view ? " from the second element" : ""));
        const int64_t axis = shape.size() == 3 ? 1 : 0;
        Shape backing_shape = shape;
        backing_shape[0] += 1;
        const Tensor backing = testing::SmallIntegerValues(gen, dtype, backing_shape);
        // The view's rows start one element after the backing's (4 bytes off 16 for float32).
        const auto* first =
            static_cast<const char*>(backing.view().data()) + (offset_view ? ItemSize(dtype) : 0);
        const TensorView input(dtype, shape, ContiguousStrides(shape), first);
        Tensor index(absl::Bernoulli(gen, 0.5) ? DataType::kInt32 : DataType::kInt64, {500});
        for (int64_t i = 0; i < index.numel(); ++i) {
          const int64_t value = absl::Uniform<int64_t>(gen, -shape[axis], shape[axis]);
          if (index.dtype() == DataType::kInt32) {
            index.data_as<int32_t>()[i] = static_cast<int32_t>(value);
          } else {
            index.data_as<int64_t>()[i] = value;
          }
        }
        const absl::StatusOr<GatherPlan> plan =
            PlanIndexSelect({.input = input, .index = index.view(), .axis = axis});
        ASSERT_TRUE(plan.ok()) << plan.status();
        const absl::StatusOr<Tensor> cpu = testing::RunOn(TestDevice::kCpu, *plan);
        ASSERT_TRUE(cpu.ok()) << cpu.status();
        const absl::StatusOr<Tensor> gpu = testing::RunOn(TestDevice::kCuda, *plan);
        ASSERT_TRUE(gpu.ok()) << gpu.status();
        ExpectSameBytes(*gpu, *cpu);
      }
    }
  }
  const Tensor input = Tensor::Zeros(DataType::kFloat32, {10, 64});
  Tensor index = Tensor::Zeros(DataType::kInt64, {8});
  index.data_as<int64_t>()[5] = 10;
  const absl::StatusOr<GatherPlan> plan =
      PlanIndexSelect({.input = input.view(), .index = index.view()});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const absl::StatusOr<Tensor> gpu = testing::RunOn(TestDevice::kCuda, *plan);
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kInvalidArgument) << gpu.status();
  EXPECT_THAT(gpu.status().message(), HasSubstr("index[5] = 10"));
}

}  // namespace
}  // namespace tensorops
