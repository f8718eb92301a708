// The GPU paths of issue 38 items 4-6 against the CPU's bytes, in 32-bit and (forced) 64-bit
// indexing: IndexSelect's and Gather's row copies (rows of every item size, in 16-, 8-, 4-, 2- and
// 1-byte units, short rows on one thread and long ones on a whole block, an out-of-range index),
// MaskedScatter with contiguous, broadcast and strided masks (mask bytes other than 0 and 1
// included, a source that runs out), and Scatter's ASSIGN (duplicate-heavy indices, which take its
// second pass, and indices without duplicates, which end after the first), with the init step's
// plain copy and memset; ScatterNd's row reduction. GPU only: skipped, with the reason, where no
// GPU is usable.
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/random/random.h"
#include "gtest/gtest.h"
#include "kernels/cuda/index_walk.h"
#include "kernels/cuda/launch.h"
#include "kernels/gather.h"
#include "kernels/index_ops.h"
#include "kernels/masked_scatter.h"
#include "kernels/nd_ops.h"
#include "kernels/scatter.h"
#include "tests/device_runner.h"
#include "tests/reference.h"

namespace tensorops {
namespace {

using testing::ExpectCudaGivesTheCpusBytes;
using testing::IndexPattern;
using testing::RandomIndex;
using testing::RandomTensor;
using testing::RoundingValues;
using testing::RunOn;
using testing::TestDevice;

// One dtype of each item size the kernels instantiate: 1, 2, 4, 8 and 16 bytes.
constexpr DataType kEveryItemSize[] = {DataType::kInt8, DataType::kFloat16, DataType::kFloat32,
                                       DataType::kInt64, DataType::kComplex128};

// The parameter: whether the 64-bit kernels are forced.
class CudaFastPathsTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    testing::SkipUnlessAvailable(TestDevice::kCuda);
    if (GetParam()) wide_.emplace();
  }

  absl::BitGen gen_{std::seed_seq{3846}};

 private:
  std::optional<cuda::ScopedWideIndexingForTesting> wide_;
};

// ExpectTheCpusError: the call fails on both devices with the CPU's error (the GPU's flag, then
// the CPU re-run that names the index or the counts).
template <typename Plan>
void ExpectTheCpusError(const absl::StatusOr<Plan>& plan) {
  ASSERT_TRUE(plan.ok()) << plan.status();
  const absl::StatusOr<Tensor> cpu = RunOn(TestDevice::kCpu, *plan);
  ASSERT_FALSE(cpu.ok());
  const absl::StatusOr<Tensor> gpu = RunOn(TestDevice::kCuda, *plan);
  EXPECT_EQ(gpu.status(), cpu.status());
}

// Columns `first` to `first + cols` of `wide` ([rows, wide_cols]): rows `wide_cols` elements
// apart, so that the row copy's unit can be no wider than that stride allows. (Their start stays
// aligned on the device: the executor copies a view's memory from its first element.)
TensorView Columns(const Tensor& wide, int64_t first, int64_t cols) {
  const Shape shape = {wide.shape()[0], cols};
  const Shape strides = {wide.shape()[1], 1};
  return TensorView(wide.dtype(), shape, strides,
                    static_cast<const char*>(wide.data()) + first * ItemSize(wide.dtype()));
}

TEST_P(CudaFastPathsTest, IndexSelectCopiesRowsOfEveryItemSizeAndLength) {
  // 1-3 elements fall to the element kernel; 8-100 take a few threads per row (16-byte units
  // where the row's bytes allow, else 8, 4, 2 or 1); 5000 takes a whole block, several trips.
  for (DataType dtype : kEveryItemSize) {
    for (int64_t cols : {1, 3, 8, 17, 33, 64, 100, 256, 5000}) {
      const Tensor input = RandomTensor(dtype, {40, cols}, gen_);
      for (DataType index_dtype : {DataType::kInt32, DataType::kInt64}) {
        const Tensor index = RandomIndex(index_dtype, {60}, 0, 40, IndexPattern::kRandom, gen_);
        SCOPED_TRACE(::testing::Message() << DataTypeName(dtype) << " cols " << cols << " "
                                          << DataTypeName(index_dtype));
        ExpectCudaGivesTheCpusBytes(
            PlanIndexSelect({.input = input.view(), .index = index.view(), .axis = 0}));
      }
      // Rows 3 elements apart more than their length: units no wider than the stride allows.
      const Tensor wide = RandomTensor(dtype, {40, cols + 3}, gen_);
      const Tensor index = RandomIndex(DataType::kInt64, {25}, 0, 40, IndexPattern::kRandom, gen_);
      SCOPED_TRACE(::testing::Message() << DataTypeName(dtype) << " cols " << cols << " strided");
      ExpectCudaGivesTheCpusBytes(
          PlanIndexSelect({.input = Columns(wide, 1, cols), .index = index.view(), .axis = 0}));
    }
  }
}

TEST_P(CudaFastPathsTest, IndexSelectAlongAMiddleAxisCopiesRows) {
  // Rows of 24 elements under two outer dimensions: the rows' walk has rank 2.
  for (DataType dtype : kEveryItemSize) {
    const Tensor input = RandomTensor(dtype, {4, 30, 24}, gen_);
    const Tensor index =
        RandomIndex(DataType::kInt32, {45}, 0, 30, IndexPattern::kDuplicateHeavy, gen_);
    SCOPED_TRACE(DataTypeName(dtype));
    ExpectCudaGivesTheCpusBytes(
        PlanIndexSelect({.input = input.view(), .index = index.view(), .axis = 1}));
  }
}

TEST_P(CudaFastPathsTest, GatherWithAnIndexBroadcastAlongRowsCopiesRows) {
  for (DataType dtype : kEveryItemSize) {
    const Tensor input = RandomTensor(dtype, {50, 48}, gen_);
    const Tensor index = RandomIndex(DataType::kInt64, {70, 1}, 0, 50, IndexPattern::kRandom, gen_);
    SCOPED_TRACE(DataTypeName(dtype));
    ExpectCudaGivesTheCpusBytes(
        PlanGather({.input = input.view(), .index = index.view(), .axis = 0, .broadcast = true}));
  }
}

TEST_P(CudaFastPathsTest, AnOutOfRangeRowIsTheCpusError) {
  const Tensor input = RandomTensor(DataType::kFloat32, {40, 64}, gen_);
  for (int64_t bad : {40, -41}) {
    Tensor index = RandomIndex(DataType::kInt64, {30}, 0, 40, IndexPattern::kRandom, gen_);
    index.data_as<int64_t>()[17] = bad;
    ExpectTheCpusError(PlanIndexSelect({.input = input.view(), .index = index.view(), .axis = 0}));
  }
}

TEST_P(CudaFastPathsTest, MaskedScatterWithContiguousBroadcastAndStridedMasks) {
  const Shape shape = {6, 50, 7};
  for (DataType dtype : kEveryItemSize) {
    const Tensor input = RandomTensor(dtype, shape, gen_);
    const Tensor source = RandomTensor(dtype, {6 * 50 * 7}, gen_);
    // A mask as the input, broadcast along each end, a scalar, and a transposed (strided) one.
    const Tensor contiguous = RandomTensor(DataType::kBool, shape, gen_);
    const Tensor rows = RandomTensor(DataType::kBool, {50, 1}, gen_);
    const Tensor columns = RandomTensor(DataType::kBool, {1, 1, 7}, gen_);
    Tensor scalar(DataType::kBool, Shape{});
    scalar.data_as<bool>()[0] = true;
    const Tensor square = RandomTensor(DataType::kBool, {7, 50}, gen_);
    const TensorView transposed(DataType::kBool, {50, 7}, {1, 50}, square.data());
    for (const TensorView& mask :
         {contiguous.view(), rows.view(), columns.view(), scalar.view(), transposed}) {
      SCOPED_TRACE(::testing::Message()
                   << DataTypeName(dtype) << " mask " << ShapeToString(mask.shape()));
      ExpectCudaGivesTheCpusBytes(
          PlanMaskedScatter({.input = input.view(), .mask = mask, .source = source.view()}));
    }
  }
}

TEST_P(CudaFastPathsTest, MaskBytesOtherThanZeroAndOneAreTrue) {
  // A bool tensor from the wire may hold any byte; the CPU counts every nonzero one as true.
  const Tensor input = RandomTensor(DataType::kFloat32, {300}, gen_);
  const Tensor source = RandomTensor(DataType::kFloat32, {300}, gen_);
  for (const Shape& mask_shape : {Shape{300}, Shape{1}}) {
    Tensor mask(DataType::kBool, mask_shape);
    auto* bytes = static_cast<uint8_t*>(mask.data());
    for (int64_t i = 0; i < mask.numel(); ++i) {
      bytes[i] = static_cast<uint8_t>(i % 3 == 0 ? 0 : (i % 3 == 1 ? 2 : 255));
    }
    ExpectCudaGivesTheCpusBytes(
        PlanMaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()}));
  }
}

TEST_P(CudaFastPathsTest, MaskedScatterEdgesAreTheCpus) {
  const Tensor input = RandomTensor(DataType::kInt16, {40, 9}, gen_);
  // No true position: an empty source is enough.
  const Tensor none = Tensor::Zeros(DataType::kBool, {1, 9});
  const Tensor empty(DataType::kInt16, {0});
  ExpectCudaGivesTheCpusBytes(
      PlanMaskedScatter({.input = input.view(), .mask = none.view(), .source = empty.view()}));
  // A broadcast mask with more true positions than the source has elements.
  Tensor all = Tensor::Zeros(DataType::kBool, {1, 9});
  for (int64_t i = 0; i < 9; ++i) all.data_as<bool>()[i] = true;
  const Tensor short_source = RandomTensor(DataType::kInt16, {359}, gen_);
  ExpectTheCpusError(PlanMaskedScatter(
      {.input = input.view(), .mask = all.view(), .source = short_source.view()}));
}

TEST_P(CudaFastPathsTest, AssignKeepsTheLastIndexWithAndWithoutDuplicates) {
  for (DataType dtype : {DataType::kBool, DataType::kInt8, DataType::kFloat16, DataType::kFloat32,
                         DataType::kInt64, DataType::kComplex128}) {
    for (IndexPattern pattern :
         {IndexPattern::kUnique, IndexPattern::kRandom, IndexPattern::kDuplicateHeavy}) {
      SCOPED_TRACE(::testing::Message()
                   << DataTypeName(dtype) << " pattern " << static_cast<int>(pattern));
      // 31 x 40 updates into 60 x 45 along axis 0, the input contiguous (the init's plain copy).
      const Tensor input = RandomTensor(dtype, {60, 45}, gen_);
      const Tensor index = RandomIndex(DataType::kInt64, {31, 40}, 0, 60, pattern, gen_);
      const Tensor source = RandomTensor(dtype, {31, 40}, gen_);
      absl::StatusOr<ScatterPlan> plan = PlanScatter({.input = input.view(),
                                                      .index = index.view(),
                                                      .source = source.view(),
                                                      .axis = 0,
                                                      .reduce = Reduction::kAssign});
      ASSERT_TRUE(plan.ok()) << plan.status();
      testing::ExpectTheCpusBytesOnCuda(*plan);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(CudaFastPathsTest, IndexCopyWithManyBlocksOfUpdates) {
  // index_copy of 4096 rows of 64: a permutation (no duplicates: one pass), then the same rows
  // with every index drawn from four (most updates lose: the second pass decides).
  const Tensor input = RandomTensor(DataType::kFloat32, {4096, 64}, gen_);
  const Tensor source = RandomTensor(DataType::kFloat32, {4096, 64}, gen_);
  for (IndexPattern pattern : {IndexPattern::kUnique, IndexPattern::kDuplicateHeavy}) {
    const Tensor index = RandomIndex(DataType::kInt32, {4096}, 0, 4096, pattern, gen_);
    absl::StatusOr<ScatterPlan> plan = PlanIndexReduce({.input = input.view(),
                                                        .index = index.view(),
                                                        .source = source.view(),
                                                        .axis = 0,
                                                        .reduce = Reduction::kAssign});
    ASSERT_TRUE(plan.ok()) << plan.status();
    testing::ExpectTheCpusBytesOnCuda(*plan);
  }
}

TEST_P(CudaFastPathsTest, TheInitStepCopiesOrClearsTheResult) {
  // No updates at all: the result is the input's plain copy.
  const Tensor input = RandomTensor(DataType::kInt32, {12, 5}, gen_);
  const Tensor no_index(DataType::kInt64, {0, 5});
  const Tensor no_source(DataType::kInt32, {0, 5});
  for (Reduction reduce : {Reduction::kAssign, Reduction::kSum}) {
    absl::StatusOr<ScatterPlan> plan = PlanScatter({.input = input.view(),
                                                    .index = no_index.view(),
                                                    .source = no_source.view(),
                                                    .axis = 0,
                                                    .reduce = reduce});
    ASSERT_TRUE(plan.ok()) << plan.status();
    testing::ExpectTheCpusBytesOnCuda(*plan);
  }
  // ScatterNd without an input starts from zeros (a memset), and an int32 SUM out of place from a
  // plain copy: neither needs a shadow or counts.
  const Tensor index = RandomIndex(DataType::kInt64, {9, 1}, 0, 12, IndexPattern::kRandom, gen_);
  const Tensor rows = testing::SmallIntegerValues(gen_, DataType::kInt32, {9, 5});
  for (Reduction reduce : {Reduction::kAssign, Reduction::kSum}) {
    for (bool with_input : {false, true}) {
      ScatterNdArgs args{.index = index.view(), .source = rows.view(), .reduce = reduce};
      if (with_input) {
        args.input = input.view();
      } else {
        args.shape = {12, 5};
      }
      absl::StatusOr<NdPlan> plan = PlanScatterNd(args);
      ASSERT_TRUE(plan.ok()) << plan.status();
      testing::ExpectTheCpusBytesOnCuda(*plan);
    }
  }
}

// ScatterNd SUM and MEAN of float rows (UsesRowReduction): the positions sorted by row, each row
// reduced by one warp in the positions' order, so the CPU's bytes for any values, deterministic
// or not: every floating dtype, rows of a warp, of several, and of a ragged last step; unique,
// random and duplicate-heavy rows; with and without the input's values, or an input at all; a
// source that is every other element of its backing; and an out-of-range row.
TEST_P(CudaFastPathsTest, ScatterNdOfRowsReducesEachRowInTheCpusOrder) {
  constexpr int64_t kRows = 40;
  // Values whose sums round differently in every order: the CPU's bytes only in its order. The
  // second shape sends 300 positions to 2 rows: runs longer than a batch of 32 positions, of
  // lengths that are not multiples of the loads in flight.
  struct RowsCase {
    int64_t rows;
    int64_t slices;
  };
  for (const RowsCase rows_case : {RowsCase{kRows, kRows / 2}, RowsCase{2, 300}}) {
    for (DataType dtype :
         {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
      for (int64_t width : {32, 33, 256, 300}) {
        for (IndexPattern pattern :
             {IndexPattern::kUnique, IndexPattern::kRandom, IndexPattern::kDuplicateHeavy}) {
          if (pattern == IndexPattern::kUnique && rows_case.slices > rows_case.rows) continue;
          const int64_t rows = rows_case.rows;
          const int64_t slices = rows_case.slices;
          const Tensor input = RoundingValues(gen_, dtype, {rows, width}, false);
          const Tensor index = RandomIndex(DataType::kInt64, {slices, 1}, 0, rows, pattern, gen_);
          const Tensor backing = RoundingValues(gen_, dtype, {slices, 2 * width}, false);
          const TensorView source(dtype, {slices, width}, {2 * width, 2}, backing.view().data());
          for (Reduction reduce : {Reduction::kSum, Reduction::kMean}) {
            for (bool include_self : {true, false}) {
              for (bool with_input : {true, false}) {
                SCOPED_TRACE(::testing::Message()
                             << DataTypeName(dtype) << " rows " << rows << " slices " << slices
                             << " width " << width << " pattern " << static_cast<int>(pattern)
                             << " " << ReductionName(reduce) << " include_self " << include_self
                             << " input " << with_input);
                ScatterNdArgs args{.index = index.view(),
                                   .source = source,
                                   .reduce = reduce,
                                   .include_self = include_self};
                if (with_input) {
                  args.input = input.view();
                } else {
                  args.shape = {rows, width};
                }
                absl::StatusOr<NdPlan> plan = PlanScatterNd(args);
                ASSERT_TRUE(plan.ok()) << plan.status();
                ASSERT_TRUE(cuda::UsesRowReduction(cuda::SizesOf(*plan)));
                testing::ExpectTheCpusBytesOnCuda(*plan);
                if (HasFatalFailure()) return;
              }
            }
          }
        }
      }
    }
  }
  // A row out of range: the CPU's error.
  const Tensor input = RandomTensor(DataType::kFloat32, {kRows, 64}, gen_);
  Tensor index = RandomIndex(DataType::kInt64, {8, 1}, 0, kRows, IndexPattern::kRandom, gen_);
  index.mutable_view().data_as<int64_t>()[5] = kRows;
  const Tensor source = RandomTensor(DataType::kFloat32, {8, 64}, gen_);
  ExpectTheCpusError(PlanScatterNd({.input = input.view(),
                                    .index = index.view(),
                                    .source = source.view(),
                                    .reduce = Reduction::kSum}));
}

INSTANTIATE_TEST_SUITE_P(Widths, CudaFastPathsTest, ::testing::Bool(), testing::IndexWidthName);

}  // namespace
}  // namespace tensorops
