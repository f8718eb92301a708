// CUDA kernel of GatherNd in its general form (the TensorFlow form, or the axes form over several
// axes; along a single axis GatherNd runs as Gather). One thread per result element: its position
// b and its element e of the slice; the index row of b gives the slice's first element.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/walk.cuh"
#include "kernels/dispatch.h"

namespace tensorops::cuda {
namespace {

// NdAddressing is NdPlan's addressing in fixed arrays (the CPU's Addressing, for the device).
struct NdAddressing {
  int rank = 0;
  int components = 0;
  int64_t component_step = 0;
  int64_t slice_size = 1;
  int64_t sizes[kMaxRank] = {};
  int64_t index_strides[kMaxRank] = {};
  int64_t direct_strides[kMaxRank] = {};
  int64_t component_sizes[kMaxRank] = {};
  int64_t component_strides[kMaxRank] = {};
};

template <typename Elem, typename Index>
__global__ void GatherNdKernel(NdAddressing at, int64_t count, const Index* __restrict__ index,
                               const Elem* __restrict__ input, Elem* __restrict__ out,
                               int32_t* error) {
  TENSOROPS_GRID_STRIDE_LOOP(position, count) {
    int64_t b = position / at.slice_size;
    const int64_t element = position - b * at.slice_size;
    int64_t index_offset = 0;
    int64_t offset = element;
    for (int d = at.rank - 1; d >= 0; --d) {
      const int64_t coordinate = b % at.sizes[d];
      b /= at.sizes[d];
      index_offset += coordinate * at.index_strides[d];
      offset += coordinate * at.direct_strides[d];
    }
    bool in_range = true;
    for (int j = 0; j < at.components; ++j) {
      const int64_t value = index[index_offset + j * at.component_step];
      if (!InRange(value, at.component_sizes[j])) {
        in_range = false;
        break;
      }
      offset += WrapIndex(value, at.component_sizes[j]) * at.component_strides[j];
    }
    if (!in_range) {
      *error = 1;
      continue;
    }
    out[position] = input[offset];
  }
}

}  // namespace

absl::Status LaunchGatherNd(const NdPlan& plan, const void* input, const void* index, void* result,
                            int32_t* error_flag, void* stream) {
  const int64_t count = NumElements(plan.result_shape);
  if (count == 0) return absl::OkStatus();
  NdAddressing at;
  at.rank = static_cast<int>(plan.positions.size());
  at.components = static_cast<int>(plan.component_sizes.size());
  at.component_step = plan.index.strides()[at.rank];
  at.slice_size = plan.slice_size;
  for (int d = 0; d < at.rank; ++d) {
    at.sizes[d] = plan.positions[d];
    at.index_strides[d] = plan.index.strides()[d];
    at.direct_strides[d] = plan.position_strides[d];
  }
  for (int j = 0; j < at.components; ++j) {
    at.component_sizes[j] = plan.component_sizes[j];
    at.component_strides[j] = plan.component_strides[j];
  }
  return cpu::DispatchItemSize(ItemSize(plan.result_dtype), [&]<typename Elem>(TypeTag<Elem>) {
    return DispatchIndexType(plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) {
      GatherNdKernel<Elem, Index>
          <<<GridFor(count), kThreadsPerBlock, 0, static_cast<cudaStream_t>(stream)>>>(
              at, count, static_cast<const Index*>(index), static_cast<const Elem*>(input),
              static_cast<Elem*>(result), error_flag);
      return LaunchStatus(plan.op);
    });
  });
}

}  // namespace tensorops::cuda
