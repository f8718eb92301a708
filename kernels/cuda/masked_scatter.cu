// CUDA kernel of MaskedScatter (the prefix-sum design of Paddle's masked_scatter, after PyTorch's):
// an exclusive prefix sum of the mask with CUB gives each true position its source element, then
// one pass writes every result element: the source element at a true position, the input elsewhere.
// A source too small for the mask raises the error flag instead of reading past its end; the CPU
// re-run then names both counts.
#include <cuda_runtime.h>

#include <cstdint>

#include "cub/device/device_scan.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/walk.cuh"
#include "kernels/dispatch.h"
#include "thrust/iterator/counting_iterator.h"
#include "thrust/iterator/transform_iterator.h"

namespace tensorops::cuda {
namespace {

// MaskAt reads the (possibly broadcast) mask at a result position as 0 or 1.
struct MaskAt {
  const bool* mask;
  Walk<1> walk;
  __device__ int64_t operator()(int64_t position) const {
    int64_t at[1];
    walk.Offsets(position, at);
    return mask[at[0]] ? 1 : 0;
  }
};

using MaskFlags = thrust::transform_iterator<MaskAt, thrust::counting_iterator<int64_t>>;

MaskFlags Flags(const MaskedScatterPlan& plan) {
  return MaskFlags(thrust::counting_iterator<int64_t>(0),
                   MaskAt{plan.mask.device_data_as<bool>(),
                          MakeWalk<1>(plan.result_shape, {plan.mask.strides()})});
}

int64_t AlignUp(int64_t bytes) {
  return (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
}

template <typename Elem>
__global__ void MaskedScatterKernel(Walk<2> walk, int64_t count, const Elem* __restrict__ input,
                                    const bool* __restrict__ mask,
                                    const int64_t* __restrict__ positions,
                                    const Elem* __restrict__ source, int64_t source_count,
                                    Elem* __restrict__ out, int32_t* error) {
  TENSOROPS_GRID_STRIDE_LOOP(position, count) {
    int64_t at[2];
    walk.Offsets(position, at);
    if (!mask[at[1]]) {
      out[position] = input[at[0]];
      continue;
    }
    const int64_t k = positions[position];
    if (k >= source_count) {
      *error = 1;
      continue;
    }
    out[position] = source[k];
  }
}

}  // namespace

absl::StatusOr<int64_t> MaskedScatterWorkspaceBytes(const MaskedScatterPlan& plan) {
  const int64_t count = NumElements(plan.result_shape);
  size_t scan_bytes = 0;
  if (const cudaError_t error = cub::DeviceScan::ExclusiveSum(
          nullptr, scan_bytes, Flags(plan), static_cast<int64_t*>(nullptr), count);
      error != cudaSuccess) {
    return CubStatus("sizing masked_scatter's prefix sum", error);
  }
  return AlignUp(count * static_cast<int64_t>(sizeof(int64_t))) + static_cast<int64_t>(scan_bytes);
}

absl::Status LaunchMaskedScatter(const MaskedScatterPlan& plan, void* result, void* workspace,
                                 int64_t workspace_bytes, int32_t* error_flag, void* stream) {
  const int64_t count = NumElements(plan.result_shape);
  if (count == 0) return absl::OkStatus();
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  auto* positions = static_cast<int64_t*>(workspace);
  const int64_t positions_bytes = AlignUp(count * static_cast<int64_t>(sizeof(int64_t)));
  char* scan_storage = static_cast<char*>(workspace) + positions_bytes;
  size_t scan_bytes = static_cast<size_t>(workspace_bytes - positions_bytes);
  if (cudaError_t error = cub::DeviceScan::ExclusiveSum(scan_storage, scan_bytes, Flags(plan),
                                                        positions, count, cuda_stream);
      error != cudaSuccess) {
    return CubStatus("masked_scatter's prefix sum", error);
  }
  const Walk<2> walk = MakeWalk<2>(plan.result_shape, {plan.input.strides(), plan.mask.strides()});
  return cpu::DispatchItemSize(ItemSize(plan.result_dtype), [&]<typename Elem>(TypeTag<Elem>) {
    MaskedScatterKernel<Elem><<<GridFor(count), kThreadsPerBlock, 0, cuda_stream>>>(
        walk, count, static_cast<const Elem*>(plan.input.data()), plan.mask.device_data_as<bool>(),
        positions, static_cast<const Elem*>(plan.source.data()), plan.source.numel(),
        static_cast<Elem*>(result), error_flag);
    return LaunchStatus("masked_scatter");
  });
}

}  // namespace tensorops::cuda
