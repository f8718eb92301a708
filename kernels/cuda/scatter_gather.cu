// CUDA kernels of Gather and Scatter (and of IndexSelect and IndexReduce, which plan into them).
//
// Gather is one pass: each thread reads its index, checks it and copies one element. Scatter runs
// the reduction pipeline it shares with ScatterNd (reducing_scatter.cuh); what is Scatter's own is
// where an update goes: its index value along the axis, the rest of its position as it is.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <type_traits>
#include <utility>

#include "absl/strings/str_format.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/reducing_scatter.cuh"
#include "kernels/cuda/walk.cuh"
#include "kernels/dispatch.h"
#include "kernels/reduction.h"
#include "kernels/status_macros.h"

namespace tensorops::cuda {
namespace {

// ---- Gather ----

// kElementsPerThread positions per thread: their index values are read together, then the input
// elements they select, then the results written. The index value is checked in 64 bits, as
// read; once in range it fits the offsets' type.
template <typename Elem, typename Index, typename Position>
__global__ void GatherKernel(IndexWalk<3, Position> walk, Position count,
                             const Index* __restrict__ index, const Elem* __restrict__ input,
                             Elem* __restrict__ out, int64_t axis_size,
                             std::make_signed_t<Position> axis_stride, int32_t* error) {
  using Offset = std::make_signed_t<Position>;
  TENSOROPS_TILE_LOOP(Position, tile, count) {
    int64_t values[kElementsPerThread];
    Offset dest[kElementsPerThread];
    Offset from[kElementsPerThread];
#pragma unroll
    for (int i = 0; i < kElementsPerThread; ++i) {
      if (TileSlot(tile, i) >= count) continue;
      Offset at[3];
      walk.Offsets(TileSlot(tile, i), at);
      values[i] = index[at[0]];
      dest[i] = at[1];
      from[i] = at[2];
    }
    Elem elements[kElementsPerThread];
    bool valid[kElementsPerThread];
#pragma unroll
    for (int i = 0; i < kElementsPerThread; ++i) {
      valid[i] = TileSlot(tile, i) < count && InRange(values[i], axis_size);
      if (valid[i]) {
        elements[i] =
            input[from[i] + static_cast<Offset>(WrapIndex(values[i], axis_size)) * axis_stride];
      } else if (TileSlot(tile, i) < count) {
        *error = 1;
      }
    }
#pragma unroll
    for (int i = 0; i < kElementsPerThread; ++i) {
      if (valid[i]) out[dest[i]] = elements[i];
    }
  }
}

// GatherRowsKernel: a Gather whose index value holds along a contiguous innermost run of the
// input and the result, a row (IndexSelect's rows; a Gather whose index is broadcast along the
// last axis): each row is copied by a group of 2^group_log2 threads in `Unit`s of up to 16 bytes,
// instead of one thread per element each reading the index and dividing its position. The host
// sizes the group to the row (RowGroupLog2): one thread for a short row, a warp for a row of a few
// hundred units, the whole block for a long one; groups never straddle a block, their size
// dividing kThreadsPerBlock. Each thread takes kElementsPerThread units of its row per trip and
// issues all their loads before its first store, so that it has that many in flight. `rows` walks
// the rows, its result and input strides counted in Units. An index out of range raises `*error`
// (once per row) and leaves the row unwritten, as GatherKernel does: the CPU re-run names it.
template <typename Unit, typename Index, typename Position>
__global__ void GatherRowsKernel(IndexWalk<3, Position> rows, Position row_count,
                                 std::make_signed_t<Position> row_units,
                                 const Index* __restrict__ index, const Unit* __restrict__ input,
                                 Unit* __restrict__ out, int64_t axis_size,
                                 std::make_signed_t<Position> axis_stride, int group_log2,
                                 int32_t* error) {
  using Offset = std::make_signed_t<Position>;
  const Position thread = blockIdx.x * Position{blockDim.x} + threadIdx.x;
  const Offset lanes = Offset{1} << group_log2;
  const Offset lane = static_cast<Offset>(thread) & (lanes - 1);
  const Position groups = (Position{gridDim.x} * blockDim.x) >> group_log2;
  for (Position row = thread >> group_log2; row < row_count; row += groups) {
    Offset at[3];
    rows.Offsets(row, at);
    const int64_t value = index[at[0]];
    if (!InRange(value, axis_size)) {
      if (lane == 0) *error = 1;
      continue;
    }
    const Unit* from =
        input + at[2] + static_cast<Offset>(WrapIndex(value, axis_size)) * axis_stride;
    Unit* to = out + at[1];
    // Not unrolled: unrolling a loop of a runtime step makes nvcc compute its trip count, a
    // division (cuda_sass); the body already takes kElementsPerThread units.
#pragma unroll 1
    for (Offset first = lane; first < row_units; first += lanes * kElementsPerThread) {
      Unit units[kElementsPerThread];
#pragma unroll
      for (int i = 0; i < kElementsPerThread; ++i) {
        if (first + i * lanes < row_units) units[i] = from[first + i * lanes];
      }
#pragma unroll
      for (int i = 0; i < kElementsPerThread; ++i) {
        if (first + i * lanes < row_units) to[first + i * lanes] = units[i];
      }
    }
  }
}

// kMinRowBytes: the shortest row GatherRowsKernel copies. A shorter one is a few elements, which
// GatherKernel's four per thread keep as many loads in flight for as a thread per row would.
constexpr int64_t kMinRowBytes = 32;

// RowUnitBytes: the widest unit (16, 8, 4, 2 or 1 bytes, at least one element) that every row of
// `walk` (its last dimension being the rows' run) starts on and is made of, or 0 when there is
// none or the walk's last dimension is no row: the index moves along it, or the input or the
// result does not run contiguously, or rows are under kMinRowBytes.
int64_t RowUnitBytes(const Walk<3>& walk, const GatherPlan& plan, const void* result,
                     int64_t itemsize) {
  if (walk.rank == 0) return 0;
  const int last = walk.rank - 1;
  if (walk.strides[0][last] != 0 || walk.strides[1][last] != 1 || walk.strides[2][last] != 1) {
    return 0;
  }
  const int64_t row_bytes = walk.sizes[last] * itemsize;
  if (row_bytes < kMinRowBytes) return 0;
  for (int64_t unit = 16; unit >= itemsize; unit /= 2) {
    bool fits = row_bytes % unit == 0 && (plan.input_axis_stride * itemsize) % unit == 0 &&
                reinterpret_cast<uintptr_t>(plan.input.data()) % unit == 0 &&
                reinterpret_cast<uintptr_t>(result) % unit == 0;
    for (int d = 0; d < last && fits; ++d) {
      fits = (walk.strides[1][d] * itemsize) % unit == 0 &&
             (walk.strides[2][d] * itemsize) % unit == 0;
    }
    if (fits) return unit;
  }
  return 0;
}

// RowGroupLog2: log2 of the threads that copy one row of `row_units` units: enough that each
// takes about kElementsPerThread units, at most the whole block.
int RowGroupLog2(int64_t row_units) {
  int group_log2 = 0;
  while ((int64_t{1} << group_log2) * kElementsPerThread < row_units &&
         (1 << group_log2) < kThreadsPerBlock) {
    ++group_log2;
  }
  return group_log2;
}

// DispatchUnit is cpu::DispatchItemSize but for 16 bytes, which get uint4 (aligned to 16, where
// complex128's storage is aligned to 8): one 128-bit load and store per unit.
template <typename Fn>
decltype(auto) DispatchUnit(int64_t bytes, Fn&& fn) {
  if (bytes == 16) return fn(TypeTag<uint4>{});
  return cpu::DispatchItemSize(bytes, std::forward<Fn>(fn));
}

template <typename Unit, typename Index>
absl::Status LaunchGatherRows(const GatherPlan& plan, const Walk<3>& walk, void* result,
                              int32_t* error_flag, cudaStream_t stream) {
  const int64_t per_unit = static_cast<int64_t>(sizeof(Unit)) / ItemSize(plan.result_dtype);
  Walk<3> rows = walk;
  rows.rank = walk.rank - 1;
  for (int d = 0; d < rows.rank; ++d) {
    rows.strides[1][d] /= per_unit;
    rows.strides[2][d] /= per_unit;
  }
  const int64_t row_units = walk.sizes[walk.rank - 1] / per_unit;
  const int64_t row_count = NumElements(plan.result_shape) / walk.sizes[walk.rank - 1];
  const int64_t axis_stride = plan.input_axis_stride / per_unit;
  const int group_log2 = RowGroupLog2(row_units);
  // A row's units (and the last trip's step past them) and its index value's axis term come on
  // top of the walk's offsets.
  const int64_t row_reach = row_units + kTilePositions;
  const bool fits32 =
      Fits32(rows, row_count,
             {0, row_reach,
              std::max<int64_t>(plan.input_axis_size - 1, 0) * std::abs(axis_stride) + row_reach});
  return DispatchPosition(fits32, [&]<typename Position>(TypeTag<Position>) {
    using Offset = std::make_signed_t<Position>;
    GatherRowsKernel<Unit, Index, Position>
        <<<GridFor(row_count << group_log2), kThreadsPerBlock, 0, stream>>>(
            IndexWalk<3, Position>(rows), static_cast<Position>(row_count),
            static_cast<Offset>(row_units), plan.index.device_data_as<Index>(),
            static_cast<const Unit*>(plan.input.data()), static_cast<Unit*>(result),
            plan.input_axis_size, static_cast<Offset>(axis_stride), group_log2, error_flag);
    return LaunchStatus(plan.op);
  });
}

// ---- Scatter ----

// AxisUpdates: Scatter's updates for the shared pipeline, numbered in `Position`
// (DispatchPosition). `walk` gives an update's index, source and destination offsets, the
// destination's without the axis term, which the index value adds.
template <typename Index, typename PositionType>
struct AxisUpdates {
  using Position = PositionType;
  using Offset = std::make_signed_t<Position>;
  IndexWalk<3, Position> walk;
  int64_t count = 0;
  int64_t axis_size = 0;
  Offset axis_stride = 0;
  const Index* index = nullptr;

  __device__ __forceinline__ bool Locate(Position position, Offset* source, Offset* dest,
                                         int32_t* error) const {
    Offset at[3];
    walk.Offsets(position, at);
    const int64_t value = index[at[0]];
    if (!InRange(value, axis_size)) {
      *error = 1;
      return false;
    }
    *source = at[1];
    *dest = at[2] + static_cast<Offset>(WrapIndex(value, axis_size)) * axis_stride;
    return true;
  }
};

template <typename T, typename Index, typename Op>
absl::Status LaunchScatterTyped(const ScatterPlan& plan, T* result, char* workspace,
                                int64_t workspace_bytes, int32_t* error, cudaStream_t stream) {
  const int64_t count = plan.index.numel();
  Walk<3> walk;
  int64_t axis_stride = 0;
  int64_t axis_size = 0;
  if (count > 0) {
    // The destination is the contiguous result, its axis term added per index value.
    Shape dest_strides = plan.input.rank() == 0 ? Shape{1} : ContiguousStrides(plan.result_shape);
    axis_stride = dest_strides[plan.axis];
    axis_size = plan.input.rank() == 0 ? 1 : plan.input.size(plan.axis);
    dest_strides[plan.axis] = 0;
    walk = MakeWalk<3>(plan.index.shape(),
                       {plan.index.strides(), plan.source.strides(), dest_strides});
  }
  const ScatterJob job{.sizes = SizesOf(plan),
                       .result_shape = plan.result_shape,
                       .input = plan.input,
                       .include_self = plan.include_self};
  // Destinations index the result and its scratch: they fit when the result does.
  const bool fits32 = Fits32(walk, count) && job.sizes.numel <= kMaxOffset32;
  return DispatchPosition(fits32, [&]<typename Position>(TypeTag<Position>) {
    AxisUpdates<Index, Position> updates;
    updates.count = count;
    if (count > 0) {
      updates.walk = IndexWalk<3, Position>(walk);
      updates.axis_size = axis_size;
      updates.axis_stride = static_cast<std::make_signed_t<Position>>(axis_stride);
      updates.index = plan.index.device_data_as<Index>();
    }
    return LaunchReducingScatter<T, Op>(job, updates, plan.source.device_data_as<T>(), result,
                                        workspace, workspace_bytes, error, stream);
  });
}

}  // namespace

absl::StatusOr<int64_t> SortedReductionBytes(const ScatterSizes& sizes) {
  if (UsesRowReduction(sizes)) return RowSortBytes(sizes.slices, sizes.numel);
  if (!UsesSortedReduction(sizes) || sizes.updates == 0) return 0;
  if (sizes.updates > std::numeric_limits<int>::max()) {
    // CUB's run-length encoding counts its items in an int.
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: a deterministic reduction of %d updates (more than 2^31 - 1) runs on the CPU",
        sizes.op, sizes.updates));
  }
  return DispatchDataType(sizes.dtype, [&]<typename Host>(TypeTag<Host>) {
    return SortedBytes<DeviceType<Host>>(sizes);
  });
}

absl::Status LaunchGather(const GatherPlan& plan, void* result, int32_t* error_flag, void* stream) {
  const int64_t count = NumElements(plan.result_shape);
  if (count == 0) return absl::OkStatus();
  const Shape out_strides = ContiguousStrides(plan.index.shape());
  const Walk<3> walk =
      MakeWalk<3>(plan.index.shape(), {plan.index.strides(), out_strides, plan.input.strides()});
  const int64_t itemsize = ItemSize(plan.result_dtype);
  if (const int64_t unit = RowUnitBytes(walk, plan, result, itemsize); unit > 0) {
    return DispatchUnit(unit, [&]<typename Unit>(TypeTag<Unit>) {
      return DispatchIndexType(plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) {
        return LaunchGatherRows<Unit, Index>(plan, walk, result, error_flag,
                                             static_cast<cudaStream_t>(stream));
      });
    });
  }
  // The index value's axis term comes on top of the walk's input offset.
  const bool fits32 = Fits32(
      walk, count,
      {0, 0, std::max<int64_t>(plan.input_axis_size - 1, 0) * std::abs(plan.input_axis_stride)});
  return cpu::DispatchItemSize(itemsize, [&]<typename Elem>(TypeTag<Elem>) {
    return DispatchIndexType(plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) {
      return DispatchPosition(fits32, [&]<typename Position>(TypeTag<Position>) {
        GatherKernel<Elem, Index, Position>
            <<<GridForTiles(count), kThreadsPerBlock, 0, static_cast<cudaStream_t>(stream)>>>(
                IndexWalk<3, Position>(walk), static_cast<Position>(count),
                plan.index.device_data_as<Index>(), static_cast<const Elem*>(plan.input.data()),
                static_cast<Elem*>(result), plan.input_axis_size,
                static_cast<std::make_signed_t<Position>>(plan.input_axis_stride), error_flag);
        return LaunchStatus(plan.op);
      });
    });
  });
}

absl::Status LaunchScatter(const ScatterPlan& plan, void* result, void* workspace,
                           int64_t workspace_bytes, int32_t* error_flag, void* stream) {
  return DispatchDataType(plan.result_dtype, [&]<typename Host>(TypeTag<Host>) {
    using T = DeviceType<Host>;
    return DispatchIndexType(plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) {
      return DispatchReduction(plan.reduce, [&]<typename Op>(Op) -> absl::Status {
        if constexpr (std::is_same_v<Op, AssignOp> || kHasDeviceReduction<T, Op>) {
          return LaunchScatterTyped<T, Index, Op>(plan, static_cast<T*>(result),
                                                  static_cast<char*>(workspace), workspace_bytes,
                                                  error_flag, static_cast<cudaStream_t>(stream));
        } else {
          return absl::InternalError("scatter: a reduction without a GPU kernel passed planning");
        }
      });
    });
  });
}

}  // namespace tensorops::cuda
