// CUDA kernels of GatherNd and ScatterNd in their general form (the TensorFlow form, or the axes
// form over several axes; along a single axis they run as Gather and Scatter).
//
// GatherNd: one thread per result element, its position b and its element e of the slice; the
// index row of b gives the slice's first element.
//
// ScatterNd: one kernel resolves each position's index row into its slice's first element in the
// result (checking every coordinate), then Scatter's reduction pipeline (reducing_scatter.cuh)
// runs over the updates, one per slice element, numbered as the CPU numbers them: row-major over
// the positions, then along the slice. The same functors, atomics and sorted deterministic path as
// Scatter, so the same guarantees: exact integers, ASSIGN's last writer and AMAX/AMIN; the CPU's
// bytes for a `deterministic` float SUM, MEAN or PROD.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/reducing_scatter.cuh"
#include "kernels/cuda/walk.cuh"
#include "kernels/dispatch.h"
#include "kernels/status_macros.h"

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

NdAddressing MakeAddressing(const NdPlan& plan) {
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
  return at;
}

// SliceStart: the offset of position b's slice in the addressed tensor, or -1 (raising `*error`)
// when a coordinate of its index row is out of range.
template <typename Index>
__device__ __forceinline__ int64_t SliceStart(const NdAddressing& at, int64_t b, const Index* index,
                                              int32_t* error) {
  int64_t index_offset = 0;
  int64_t offset = 0;
  // b < the product of the sizes: the outermost coordinate is what the divisions leave.
  for (int d = at.rank - 1; d > 0; --d) {
    const int64_t coordinate = b % at.sizes[d];
    b /= at.sizes[d];
    index_offset += coordinate * at.index_strides[d];
    offset += coordinate * at.direct_strides[d];
  }
  if (at.rank > 0) {
    index_offset += b * at.index_strides[0];
    offset += b * at.direct_strides[0];
  }
  for (int j = 0; j < at.components; ++j) {
    const int64_t value = index[index_offset + j * at.component_step];
    if (!InRange(value, at.component_sizes[j])) {
      *error = 1;
      return -1;
    }
    offset += WrapIndex(value, at.component_sizes[j]) * at.component_strides[j];
  }
  return offset;
}

template <typename Elem, typename Index>
__global__ void GatherNdKernel(NdAddressing at, int64_t count, const Index* __restrict__ index,
                               const Elem* __restrict__ input, Elem* __restrict__ out,
                               int32_t* error) {
  TENSOROPS_GRID_STRIDE_LOOP(position, count) {
    const int64_t b = position / at.slice_size;
    const int64_t start = SliceStart(at, b, index, error);
    if (start < 0) continue;
    out[position] = input[start + position - b * at.slice_size];
  }
}

// ResolveKernel writes each position's slice start in the result, -1 for an index out of range.
template <typename Index>
__global__ void ResolveKernel(NdAddressing at, int64_t positions, const Index* __restrict__ index,
                              int64_t* __restrict__ starts, int32_t* error) {
  TENSOROPS_GRID_STRIDE_LOOP(b, positions) { starts[b] = SliceStart(at, b, index, error); }
}

// NdUpdates: ScatterNd's updates for the shared pipeline. Update u is element u % slice_size of
// position u / slice_size's slice, and element u of the source (viewed at the positions followed
// by the slice's shape) in row-major order.
struct NdUpdates {
  int64_t count = 0;
  int64_t slice_size = 1;
  const int64_t* starts = nullptr;
  Walk<1> source;

  __device__ __forceinline__ bool Locate(int64_t position, int64_t* from, int64_t* dest,
                                         int32_t* /*error*/) const {
    // ResolveKernel raised the error flag for a start of -1.
    const int64_t b = slice_size == 1 ? position : position / slice_size;
    const int64_t start = starts[b];
    if (start < 0) return false;
    *dest = start + (position - b * slice_size);
    int64_t at[1];
    source.Offsets(position, at);
    *from = at[0];
    return true;
  }
};

}  // namespace

absl::Status LaunchGatherNd(const NdPlan& plan, const void* input, const void* index, void* result,
                            int32_t* error_flag, void* stream) {
  const int64_t count = NumElements(plan.result_shape);
  if (count == 0) return absl::OkStatus();
  const NdAddressing at = MakeAddressing(plan);
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

absl::Status LaunchScatterNd(const NdPlan& plan, void* result, void* workspace,
                             int64_t workspace_bytes, int32_t* error_flag, void* stream) {
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  const ScatterSizes sizes = SizesOf(plan);
  const int64_t positions = NumElements(plan.positions);
  NdUpdates updates;
  updates.count = sizes.updates;
  updates.slice_size = plan.slice_size;
  updates.starts = static_cast<const int64_t*>(workspace);
  if (updates.count > 0) {
    updates.source = MakeWalk<1>(plan.source.shape(), {plan.source.strides()});
    TENSOROPS_RETURN_IF_ERROR(
        DispatchIndexType(plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) {
          ResolveKernel<Index><<<GridFor(positions), kThreadsPerBlock, 0, cuda_stream>>>(
              MakeAddressing(plan), positions, plan.index.device_data_as<Index>(),
              static_cast<int64_t*>(workspace), error_flag);
          return LaunchStatus(plan.op);
        }));
  }
  const ScatterJob job{.sizes = sizes,
                       .result_shape = plan.result_shape,
                       .input = plan.input,
                       .include_self = plan.include_self};
  const int64_t front = ScatterNdDestinationBytes(plan);
  char* const scatter_workspace = static_cast<char*>(workspace) + front;
  return DispatchDataType(plan.result_dtype, [&]<typename Host>(TypeTag<Host>) {
    using T = DeviceType<Host>;
    return DispatchReduction(plan.reduce, [&]<typename Op>(Op) -> absl::Status {
      if constexpr (std::is_same_v<Op, AssignOp> || kHasDeviceReduction<T, Op>) {
        return LaunchReducingScatter<T, Op>(job, updates, plan.source.device_data_as<T>(),
                                            static_cast<T*>(result), scatter_workspace,
                                            workspace_bytes - front, error_flag, cuda_stream);
      } else {
        return absl::InternalError("scatter_nd: a reduction without a GPU kernel passed planning");
      }
    });
  });
}

}  // namespace tensorops::cuda
