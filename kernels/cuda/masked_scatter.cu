// CUDA kernel of MaskedScatter (the prefix-sum design of Paddle's masked_scatter, after PyTorch's):
// an exclusive prefix sum of the mask with CUB (over the mask's bytes where it is not broadcast)
// gives each true position its source element, then
// one pass writes every result element: the source element at a true position, the input elsewhere.
// A source too small for the mask raises the error flag instead of reading past its end; the CPU
// re-run then names both counts.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cub/device/device_scan.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/walk.cuh"
#include "kernels/dispatch.h"
#include "thrust/iterator/counting_iterator.h"
#include "thrust/iterator/transform_iterator.h"

namespace tensorops::cuda {
namespace {

// MaskAt reads the (possibly broadcast) mask at a result position as 0 or 1. A Position of 32
// bits walks in 32 (WithScanTypes).
template <typename Position>
struct MaskAt {
  using Walked = std::make_unsigned_t<Position>;
  const bool* mask;
  IndexWalk<1, Walked> walk;
  __device__ Position operator()(int64_t position) const {
    typename IndexWalk<1, Walked>::Offset at[1];
    walk.Offsets(static_cast<Walked>(position), at);
    return mask[at[0]] ? 1 : 0;
  }
};

// MaskBit reads a mask element as 0 or 1, for a mask laid out like the result.
template <typename Position>
struct MaskBit {
  __device__ Position operator()(bool value) const { return value ? 1 : 0; }
};

// WithScanTypes calls `fn(flags, TypeTag<Position>{})` with the iterator the prefix sum reads (the
// mask's bytes themselves where the mask is laid out like the result, else each position through
// the broadcast walk, 13 times slower on an H100) and the type of the positions it writes (int32
// below 2^31 elements: half the bytes of int64). The kernels then walk in the unsigned type of the
// same width, so a call gets int32 positions where every offset it computes fits 32 bits (Fits32).
template <typename Fn>
decltype(auto) WithScanTypes(const MaskedScatterPlan& plan, Fn&& fn) {
  const int64_t count = NumElements(plan.result_shape);
  const bool fits32 =
      Fits32(MakeWalk<2>(plan.result_shape, {plan.input.strides(), plan.mask.strides()}), count);
  const auto with_position = [&]<typename Position>(TypeTag<Position> tag) {
    if (plan.mask.is_contiguous()) {
      return fn(
          thrust::make_transform_iterator(plan.mask.device_data_as<bool>(), MaskBit<Position>{}),
          tag);
    }
    return fn(thrust::make_transform_iterator(
                  thrust::counting_iterator<int64_t>(0),
                  MaskAt<Position>{plan.mask.device_data_as<bool>(),
                                   IndexWalk<1, std::make_unsigned_t<Position>>(
                                       MakeWalk<1>(plan.result_shape, {plan.mask.strides()}))}),
              tag);
  };
  if (fits32) return with_position(TypeTag<int32_t>{});
  return with_position(TypeTag<int64_t>{});
}

int64_t AlignUp(int64_t bytes) {
  return (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
}

template <typename Elem, typename Position>
__global__ void MaskedScatterKernel(IndexWalk<2, std::make_unsigned_t<Position>> walk,
                                    std::make_unsigned_t<Position> count,
                                    const Elem* __restrict__ input, const bool* __restrict__ mask,
                                    const Position* __restrict__ positions,
                                    const Elem* __restrict__ source, int64_t source_count,
                                    Elem* __restrict__ out, int32_t* error) {
  using Walked = std::make_unsigned_t<Position>;
  TENSOROPS_GRID_STRIDE_LOOP_OF(Walked, position, count) {
    typename IndexWalk<2, Walked>::Offset at[2];
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
  return WithScanTypes(
      plan,
      [&]<typename Flags, typename Position>(Flags flags,
                                             TypeTag<Position>) -> absl::StatusOr<int64_t> {
        size_t scan_bytes = 0;
        if (const cudaError_t error = cub::DeviceScan::ExclusiveSum(
                nullptr, scan_bytes, flags, static_cast<Position*>(nullptr), count);
            error != cudaSuccess) {
          return CubStatus("sizing masked_scatter's prefix sum", error);
        }
        return AlignUp(count * static_cast<int64_t>(sizeof(Position))) +
               static_cast<int64_t>(scan_bytes);
      });
}

absl::Status LaunchMaskedScatter(const MaskedScatterPlan& plan, void* result, void* workspace,
                                 int64_t workspace_bytes, int32_t* error_flag, void* stream) {
  const int64_t count = NumElements(plan.result_shape);
  if (count == 0) return absl::OkStatus();
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  return WithScanTypes(
      plan, [&]<typename Flags, typename Position>(Flags flags, TypeTag<Position>) -> absl::Status {
        auto* positions = static_cast<Position*>(workspace);
        const int64_t positions_bytes = AlignUp(count * static_cast<int64_t>(sizeof(Position)));
        char* scan_storage = static_cast<char*>(workspace) + positions_bytes;
        size_t scan_bytes = static_cast<size_t>(workspace_bytes - positions_bytes);
        if (cudaError_t error = cub::DeviceScan::ExclusiveSum(scan_storage, scan_bytes, flags,
                                                              positions, count, cuda_stream);
            error != cudaSuccess) {
          return CubStatus("masked_scatter's prefix sum", error);
        }
        const Walk<2> walk =
            MakeWalk<2>(plan.result_shape, {plan.input.strides(), plan.mask.strides()});
        return cpu::DispatchItemSize(ItemSize(plan.result_dtype), [&]<typename Elem>(
                                                                      TypeTag<Elem>) {
          using Walked = std::make_unsigned_t<Position>;
          MaskedScatterKernel<Elem, Position><<<GridFor(count), kThreadsPerBlock, 0, cuda_stream>>>(
              IndexWalk<2, Walked>(walk), static_cast<Walked>(count),
              static_cast<const Elem*>(plan.input.data()), plan.mask.device_data_as<bool>(),
              positions, static_cast<const Elem*>(plan.source.data()), plan.source.numel(),
              static_cast<Elem*>(result), error_flag);
          return LaunchStatus("masked_scatter");
        });
      });
}

}  // namespace tensorops::cuda
