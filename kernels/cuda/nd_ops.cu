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
// bytes for a `deterministic` float SUM, MEAN or PROD. A float SUM or MEAN of rows (slices of 32
// elements or more: UsesRowReduction) sorts the positions by row instead and reduces each row in
// one warp, in the CPU's order: the CPU's bytes, deterministic or not.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/reducing_scatter.cuh"
#include "kernels/cuda/walk.cuh"
#include "kernels/dispatch.h"
#include "kernels/status_macros.h"

namespace tensorops::cuda {
namespace {

// NdAddressing is NdPlan's addressing in fixed arrays (the CPU's Addressing, for the device), in
// `Position` (DispatchPosition), the position sizes and the slice size as IntDividers.
template <typename Position>
struct NdAddressing {
  using Offset = std::make_signed_t<Position>;
  int rank = 0;
  int components = 0;
  Offset component_step = 0;
  IntDivider<Position> slice_size;
  IntDivider<Position> sizes[kMaxRank] = {};
  Offset index_strides[kMaxRank] = {};
  Offset direct_strides[kMaxRank] = {};
  int64_t component_sizes[kMaxRank] = {};
  Offset component_strides[kMaxRank] = {};
};

template <typename Position>
NdAddressing<Position> MakeAddressing(const NdPlan& plan) {
  using Offset = std::make_signed_t<Position>;
  NdAddressing<Position> at;
  at.rank = static_cast<int>(plan.positions.size());
  at.components = static_cast<int>(plan.component_sizes.size());
  at.component_step = static_cast<Offset>(plan.index.strides()[at.rank]);
  at.slice_size = SizeDivider<Position>(plan.slice_size);
  for (int d = 0; d < at.rank; ++d) {
    at.sizes[d] = SizeDivider<Position>(plan.positions[d]);
    at.index_strides[d] = static_cast<Offset>(plan.index.strides()[d]);
    at.direct_strides[d] = static_cast<Offset>(plan.position_strides[d]);
  }
  for (int j = 0; j < at.components; ++j) {
    at.component_sizes[j] = plan.component_sizes[j];
    at.component_strides[j] = static_cast<Offset>(plan.component_strides[j]);
  }
  return at;
}

// NdFits32: whether a call may address in 32 bits: `count` kernel positions, and every offset into
// the index (at its strides) and the addressed tensor (`addressed` elements, contiguous) below
// 2^31.
bool NdFits32(const NdPlan& plan, int64_t count, int64_t addressed) {
  int64_t index_reach = 0;
  for (int64_t d = 0; d < plan.index.rank(); ++d) {
    index_reach += std::max<int64_t>(plan.index.size(d) - 1, 0) * std::abs(plan.index.strides()[d]);
  }
  return count <= kMaxOffset32 && addressed <= kMaxOffset32 && index_reach <= kMaxOffset32;
}

// SliceStart: the offset of position b's slice in the addressed tensor, or -1 (raising `*error`)
// when a coordinate of its index row is out of range. Index values are checked in 64 bits, as
// read; once in range they fit the offsets' type.
template <typename Position, typename Index>
__device__ __forceinline__ std::make_signed_t<Position> SliceStart(const NdAddressing<Position>& at,
                                                                   Position b, const Index* index,
                                                                   int32_t* error) {
  using Offset = std::make_signed_t<Position>;
  Offset index_offset = 0;
  Offset offset = 0;
  // b < the product of the sizes: the outermost coordinate is what the divisions leave.
  for (int d = at.rank - 1; d > 0; --d) {
    const auto [rest, coordinate] = at.sizes[d].DivMod(b);
    b = rest;
    index_offset += static_cast<Offset>(coordinate) * at.index_strides[d];
    offset += static_cast<Offset>(coordinate) * at.direct_strides[d];
  }
  if (at.rank > 0) {
    index_offset += static_cast<Offset>(b) * at.index_strides[0];
    offset += static_cast<Offset>(b) * at.direct_strides[0];
  }
  for (int j = 0; j < at.components; ++j) {
    const int64_t value = index[index_offset + j * at.component_step];
    if (!InRange(value, at.component_sizes[j])) {
      *error = 1;
      return -1;
    }
    offset +=
        static_cast<Offset>(WrapIndex(value, at.component_sizes[j])) * at.component_strides[j];
  }
  return offset;
}

template <typename Elem, typename Index, typename Position>
__global__ void GatherNdKernel(NdAddressing<Position> at, Position count,
                               const Index* __restrict__ index, const Elem* __restrict__ input,
                               Elem* __restrict__ out, int32_t* error) {
  TENSOROPS_GRID_STRIDE_LOOP_OF(Position, position, count) {
    const auto [b, element] = at.slice_size.DivMod(position);
    const auto start = SliceStart(at, b, index, error);
    if (start < 0) continue;
    out[position] = input[start + static_cast<std::make_signed_t<Position>>(element)];
  }
}

// ResolveKernel writes each position's slice start in the result, -1 for an index out of range.
template <typename Index, typename Position>
__global__ void ResolveKernel(NdAddressing<Position> at, Position positions,
                              const Index* __restrict__ index, int64_t* __restrict__ starts,
                              int32_t* error) {
  TENSOROPS_GRID_STRIDE_LOOP_OF(Position, b, positions) {
    starts[b] = SliceStart(at, b, index, error);
  }
}

// NdUpdates: ScatterNd's updates for the shared pipeline. Update u is element u % slice_size of
// position u / slice_size's slice, and element u of the source (viewed at the positions followed
// by the slice's shape) in row-major order.
template <typename PositionType>
struct NdUpdates {
  using Position = PositionType;
  using Offset = std::make_signed_t<Position>;
  int64_t count = 0;
  IntDivider<Position> slice_size;
  const int64_t* starts = nullptr;
  IndexWalk<1, Position> source;

  __device__ __forceinline__ bool Locate(Position position, Offset* from, Offset* dest,
                                         int32_t* /*error*/) const {
    // ResolveKernel raised the error flag for a start of -1.
    const auto [b, element] = slice_size.DivMod(position);
    const int64_t start = starts[b];
    if (start < 0) return false;
    *dest = static_cast<Offset>(start) + static_cast<Offset>(element);
    Offset at[1];
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
  const bool fits32 = NdFits32(plan, count, NumElements(plan.input.shape()));
  return cpu::DispatchItemSize(ItemSize(plan.result_dtype), [&]<typename Elem>(TypeTag<Elem>) {
    return DispatchIndexType(plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) {
      return DispatchPosition(fits32, [&]<typename Position>(TypeTag<Position>) {
        GatherNdKernel<Elem, Index, Position>
            <<<GridFor(count), kThreadsPerBlock, 0, static_cast<cudaStream_t>(stream)>>>(
                MakeAddressing<Position>(plan), static_cast<Position>(count),
                static_cast<const Index*>(index), static_cast<const Elem*>(input),
                static_cast<Elem*>(result), error_flag);
        return LaunchStatus(plan.op);
      });
    });
  });
}

absl::Status LaunchScatterNd(const NdPlan& plan, void* result, void* workspace,
                             int64_t workspace_bytes, int32_t* error_flag, void* stream) {
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  const ScatterSizes sizes = SizesOf(plan);
  const int64_t positions = NumElements(plan.positions);
  const Walk<1> source =
      sizes.updates > 0 ? MakeWalk<1>(plan.source.shape(), {plan.source.strides()}) : Walk<1>{};
  // The resolution addresses the result; the updates read the source and write the result.
  const bool fits32 = NdFits32(plan, std::max(positions, sizes.updates), sizes.numel) &&
                      Fits32(source, sizes.updates);
  const ScatterJob job{.sizes = sizes,
                       .result_shape = plan.result_shape,
                       .input = plan.input,
                       .include_self = plan.include_self};
  const int64_t front = ScatterNdDestinationBytes(plan);
  char* const scatter_workspace = static_cast<char*>(workspace) + front;
  return DispatchPosition(fits32, [&]<typename Position>(TypeTag<Position>) -> absl::Status {
    NdUpdates<Position> updates;
    updates.count = sizes.updates;
    updates.slice_size = SizeDivider<Position>(plan.slice_size);
    updates.starts = static_cast<const int64_t*>(workspace);
    if (updates.count > 0) {
      updates.source = IndexWalk<1, Position>(source);
      TENSOROPS_RETURN_IF_ERROR(DispatchIndexType(plan.index.dtype(), [&]<typename Index>(
                                                                          TypeTag<Index>) {
        ResolveKernel<Index, Position><<<GridFor(positions), kThreadsPerBlock, 0, cuda_stream>>>(
            MakeAddressing<Position>(plan), static_cast<Position>(positions),
            plan.index.device_data_as<Index>(), static_cast<int64_t*>(workspace), error_flag);
        return LaunchStatus(plan.op);
      }));
    }
    if (UsesRowReduction(sizes)) {
      const int64_t sorted = PlanScatterWorkspace(sizes).sorted;
      return DispatchDataType(plan.result_dtype, [&]<typename Host>(TypeTag<Host>) {
        using T = DeviceType<Host>;
        if constexpr (kIsHalf<T> || std::is_floating_point_v<T>) {
          return LaunchRowReduction<T, Position>(
              job, positions, plan.slice_size, updates.starts, updates.source,
              plan.source.device_data_as<T>(), static_cast<T*>(result), scatter_workspace + sorted,
              workspace_bytes - front - sorted, cuda_stream);
        } else {
          return absl::InternalError("scatter_nd: a row reduction of a type that is not floating");
        }
      });
    }
    return DispatchDataType(plan.result_dtype, [&]<typename Host>(TypeTag<Host>) {
      using T = DeviceType<Host>;
      return DispatchReduction(plan.reduce, [&]<typename Op>(Op) -> absl::Status {
        if constexpr (std::is_same_v<Op, AssignOp> || kHasDeviceReduction<T, Op>) {
          return LaunchReducingScatter<T, Op>(job, updates, plan.source.device_data_as<T>(),
                                              static_cast<T*>(result), scatter_workspace,
                                              workspace_bytes - front, error_flag, cuda_stream);
        } else {
          return absl::InternalError(
              "scatter_nd: a reduction without a GPU kernel passed planning");
        }
      });
    });
  });
}

}  // namespace tensorops::cuda
