// The CUDA kernels in both index widths (kernels/cuda/index_walk.h): every call of a few elements
// takes the 32-bit kernels, and ScopedWideIndexingForTesting makes the same calls take the 64-bit
// ones, which otherwise only tensors of 2^31 elements reach. Each must give the CPU's bytes, for
// each kernel that walks: Gather (element and row forms), Scatter's pipeline (atomics, ASSIGN's
// winners, the sorted deterministic path), the view scatters' strided copy and window, the
// broadcast MaskedScatter, and GatherNd and ScatterNd's general forms. GPU only: skipped, with
// the reason, where no GPU is usable.
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/random/random.h"
#include "gtest/gtest.h"
#include "kernels/cuda/index_walk.h"
#include "kernels/gather.h"
#include "kernels/index_ops.h"
#include "kernels/masked_scatter.h"
#include "kernels/nd_ops.h"
#include "kernels/scatter.h"
#include "kernels/view_scatter.h"
#include "tests/device_runner.h"
#include "tests/reference.h"

namespace tensorops {
namespace {

using testing::ExpectCudaGivesTheCpusBytes;
using testing::IndexPattern;
using testing::RandomIndex;
using testing::RandomTensor;
using testing::RunOn;
using testing::TestDevice;

// The parameter: whether the 64-bit kernels are forced.
class CudaIndexWidthTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    testing::SkipUnlessAvailable(TestDevice::kCuda);
    if (GetParam()) wide_.emplace();
  }

  absl::BitGen gen_{std::seed_seq{38}};

 private:
  std::optional<cuda::ScopedWideIndexingForTesting> wide_;
};

// A view of `tensor` (shape [a, b]) as its transpose [b, a]: strides that no walk can merge.
TensorView Transposed(const Tensor& tensor) {
  const Shape shape = {tensor.shape()[1], tensor.shape()[0]};
  const Shape strides = {1, tensor.shape()[1]};
  return TensorView(tensor.dtype(), shape, strides, tensor.data());
}

// Uniform values in [-bound, bound) for every element of an int64 index tensor.
Tensor IndexValues(absl::BitGen& gen, const Shape& shape, const std::vector<int64_t>& bounds) {
  Tensor index(DataType::kInt64, shape);
  for (int64_t i = 0; i < index.numel(); ++i) {
    const int64_t bound = bounds[static_cast<size_t>(i) % bounds.size()];
    index.data_as<int64_t>()[i] = absl::Uniform<int64_t>(gen, -bound, bound);
  }
  return index;
}

TEST_P(CudaIndexWidthTest, GatherOfElementsAlongEachAxis) {
  const Tensor input = RandomTensor(DataType::kFloat32, {37, 53}, gen_);
  for (int64_t axis : {0, 1}) {
    for (DataType index_dtype : {DataType::kInt32, DataType::kInt64}) {
      const Tensor index = RandomIndex(index_dtype, {31, 29}, axis, input.shape()[axis],
                                       IndexPattern::kRandom, gen_);
      ExpectCudaGivesTheCpusBytes(
          PlanGather({.input = input.view(), .index = index.view(), .axis = axis}));
      // A transposed input: a walk of rank 2 for every operand.
      const Tensor transposed_index = RandomIndex(
          index_dtype, {19, 31}, axis, Transposed(input).size(axis), IndexPattern::kRandom, gen_);
      ExpectCudaGivesTheCpusBytes(
          PlanGather({.input = Transposed(input), .index = transposed_index.view(), .axis = axis}));
    }
  }
}

TEST_P(CudaIndexWidthTest, IndexSelectOfRows) {
  const Tensor input = RandomTensor(DataType::kFloat32, {300, 64}, gen_);
  const Tensor index = RandomIndex(DataType::kInt64, {100}, 0, 300, IndexPattern::kRandom, gen_);
  ExpectCudaGivesTheCpusBytes(
      PlanIndexSelect({.input = input.view(), .index = index.view(), .axis = 0}));
}

TEST_P(CudaIndexWidthTest, ScatterWithEachKindOfReduction) {
  for (Reduction reduce :
       {Reduction::kAssign, Reduction::kSum, Reduction::kMean, Reduction::kAmax}) {
    for (DataType dtype : {DataType::kInt32, DataType::kFloat32, DataType::kBFloat16}) {
      // Transposed to [45, 23]: the scatter's init copy walks a strided input.
      const Tensor input = RandomTensor(dtype, {23, 45}, gen_);
      const Tensor index =
          RandomIndex(DataType::kInt64, {31, 40}, 1, 23, IndexPattern::kDuplicateHeavy, gen_);
      const Tensor source = RandomTensor(dtype, {31, 40}, gen_);
      absl::StatusOr<ScatterPlan> plan = PlanScatter({.input = Transposed(input),
                                                      .index = index.view(),
                                                      .source = source.view(),
                                                      .axis = 1,
                                                      .reduce = reduce});
      ASSERT_TRUE(plan.ok()) << plan.status();
      // The CPU's bytes from the atomics (exact values) and from the sorted path.
      testing::ExpectTheCpusBytesOnCuda(*plan);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(CudaIndexWidthTest, ViewScattersOfStridedInputs) {
  const Tensor input = RandomTensor(DataType::kFloat32, {30, 40}, gen_);
  const Tensor slice_src = RandomTensor(DataType::kFloat32, {40, 15}, gen_);
  ExpectCudaGivesTheCpusBytes(PlanSliceScatter(
      {.input = Transposed(input), .src = slice_src.view(), .axis = 1, .start = 1, .step = 2}));
  // A window of one contiguous row, which is copied as a plain run.
  const Tensor row_src = RandomTensor(DataType::kFloat32, {40}, gen_);
  ExpectCudaGivesTheCpusBytes(
      PlanSelectScatter({.input = input.view(), .src = row_src.view(), .axis = 0, .index = -3}));
  const Tensor diagonal_src = RandomTensor(DataType::kInt64, {30}, gen_);
  const Tensor square = RandomTensor(DataType::kInt64, {30, 40}, gen_);
  ExpectCudaGivesTheCpusBytes(PlanDiagonalScatter(
      {.input = square.view(), .src = diagonal_src.view(), .offset = 1, .axis1 = 0, .axis2 = 1}));
}

TEST_P(CudaIndexWidthTest, MaskedScatterWithABroadcastMask) {
  const Tensor input = RandomTensor(DataType::kFloat16, {6, 50, 7}, gen_);
  const Tensor mask = RandomTensor(DataType::kBool, {50, 1}, gen_);
  const Tensor source = RandomTensor(DataType::kFloat16, {6 * 50 * 7}, gen_);
  ExpectCudaGivesTheCpusBytes(
      PlanMaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()}));
}

TEST_P(CudaIndexWidthTest, GatherNdAndScatterNdGeneralForms) {
  const Tensor input = RandomTensor(DataType::kInt32, {4, 5, 6}, gen_);
  const Tensor index = IndexValues(gen_, {3, 8, 2}, {4, 5});
  ExpectCudaGivesTheCpusBytes(PlanGatherNd({.input = input.view(), .index = index.view()}));
  const Tensor source = RandomTensor(DataType::kInt32, {3, 8, 6}, gen_);
  for (Reduction reduce : {Reduction::kAssign, Reduction::kSum}) {
    absl::StatusOr<NdPlan> plan = PlanScatterNd(
        {.input = input.view(), .index = index.view(), .source = source.view(), .reduce = reduce});
    ASSERT_TRUE(plan.ok()) << plan.status();
    testing::ExpectTheCpusBytesOnCuda(*plan);
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, CudaIndexWidthTest, ::testing::Bool(), testing::IndexWidthName);

// MEAN keeps each destination's accumulator and count side by side in a cell of two, so its
// scratch is indexed up to twice the result's last offset. A float16 result of 2^30 + 4096
// elements still takes the 32-bit kernels (its offsets are below 2^31), and its cells' indices
// pass 2^31: they must be taken in 64 bits (they were not, until 2026-11-30). About 12 GiB of GPU
// memory: the result, its input and the cells.
class CudaLargeMeanTest : public testing::CudaTest {};

TEST_F(CudaLargeMeanTest, CellsPastTwoToTheThirtyOneKeepTheCpusBytes) {
  constexpr int64_t kElements = (int64_t{1} << 30) + 4096;
  constexpr int64_t kUpdates = 8192;
  // Small integers, so that sums in any order are exact: a pattern of 4096, copied out.
  Tensor input(DataType::kFloat16, {kElements});
  Float16* values = input.data_as<Float16>();
  for (int64_t i = 0; i < 4096; ++i) values[i] = Float16(static_cast<float>(i % 7 - 3));
  for (int64_t at = 4096; at < kElements; at += 4096) {
    std::memcpy(values + at, values, 4096 * sizeof(Float16));
  }
  // Half the updates land in the last 4096 elements, whose cells lie past 2^31, half anywhere.
  absl::BitGen gen{std::seed_seq{40}};
  Tensor index(DataType::kInt64, {kUpdates});
  for (int64_t i = 0; i < kUpdates; ++i) {
    index.data_as<int64_t>()[i] = i % 2 == 0
                                      ? absl::Uniform<int64_t>(gen, kElements - 4096, kElements)
                                      : absl::Uniform<int64_t>(gen, 0, kElements);
  }
  const Tensor source = testing::SmallIntegerValues(gen, DataType::kFloat16, {kUpdates});
  absl::StatusOr<ScatterPlan> plan = PlanScatter({.input = input.view(),
                                                  .index = index.view(),
                                                  .source = source.view(),
                                                  .reduce = Reduction::kMean});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const absl::StatusOr<Tensor> gpu = RunOn(TestDevice::kCuda, *plan);
  if (absl::IsResourceExhausted(gpu.status())) {
    GTEST_SKIP() << "the GPU has no room for this test: " << gpu.status();
  }
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const absl::StatusOr<Tensor> cpu = RunOn(TestDevice::kCpu, *plan);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  testing::ExpectSameBytes(*gpu, *cpu);
}

}  // namespace
}  // namespace tensorops
