// The CUDA kernels in both index widths (kernels/cuda/index_walk.h): every call of a few elements
// takes the 32-bit kernels, and ScopedWideIndexingForTesting makes the same calls take the 64-bit
// ones, which otherwise only tensors of 2^31 elements reach. Each must give the CPU's bytes, for
// each kernel that walks: Gather (element and row forms), Scatter's pipeline (atomics, ASSIGN's
// winners, the sorted deterministic path), the view scatters' strided copy and window, the
// broadcast MaskedScatter, and GatherNd and ScatterNd's general forms. GPU only: skipped, with
// the reason, where no GPU is usable.
#include <cstdint>
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

}  // namespace
}  // namespace tensorops
