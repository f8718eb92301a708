// CUDA kernel of MaskedScatter (the prefix-sum design of Paddle's masked_scatter, after PyTorch's):
//   1. a broadcast (or strided) mask is first written out once as contiguous bytes at the result's
//      shape (MaskBytesKernel), so that
//   2. the exclusive prefix sum of the mask (CUB) always reads plain bytes: each true position's
//      source element;
//   3. one pass writes every result element: the source element at a true position, the input
//      elsewhere.
// A source too small for the mask raises the error flag instead of reading past its end; the CPU
// re-run then names both counts.
//
// Mask bytes are read as uint8_t, any nonzero byte true, as the CPU kernel reads them: a bool
// tensor from the wire may hold bytes other than 0 and 1, and a device load of those as bool
// could count 2 where the CPU counts 1.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cub/device/device_scan.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/walk.cuh"
#include "kernels/dispatch.h"
#include "thrust/iterator/transform_iterator.h"

namespace tensorops::cuda {
namespace {

// MaskCount reads a contiguous mask byte as a count of 0 or 1 in the type of the positions.
template <typename Position>
struct MaskCount {
  __device__ Position operator()(uint8_t value) const { return value != 0 ? 1 : 0; }
};

template <typename Position>
using MaskCounts = thrust::transform_iterator<MaskCount<Position>, const uint8_t*>;

// WithPositionType calls `fn(TypeTag<Position>{})` with the type the prefix sum writes its
// positions in (int32 below 2^31 elements: half the bytes of int64). The kernels walk in the
// unsigned type of the same width, so a call gets int32 positions where every offset it computes
// fits 32 bits (Fits32).
template <typename Fn>
decltype(auto) WithPositionType(const MaskedScatterPlan& plan, Fn&& fn) {
  const int64_t count = NumElements(plan.result_shape);
  const bool fits32 =
      Fits32(MakeWalk<2>(plan.result_shape, {plan.input.strides(), plan.mask.strides()}), count);
  return DispatchPosition(fits32, [&]<typename Walked>(TypeTag<Walked>) {
    return fn(TypeTag<std::make_signed_t<Walked>>{});
  });
}

// Words128 moves a 16-byte element (complex128) as two 8-byte words: cpu::Bytes<16>, an array of
// 16 chars, is moved a byte at a time, sixteen registers for each of a thread's elements. Every
// complex128 element the kernel reads or writes is 8-byte aligned, as the dtype is.
struct alignas(8) Words128 {
  uint64_t words[2];
};
template <typename Elem>
using Moved = std::conditional_t<std::is_same_v<Elem, cpu::Bytes<16>>, Words128, Elem>;

int64_t AlignUp(int64_t bytes) {
  return (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
}

// MaskedScatterLayout is where the workspace's parts lie, in bytes from its start: the positions
// (the prefix sum), the mask written out contiguously (-1 where the mask already is), then CUB's
// temporary storage, which takes the rest.
struct MaskedScatterLayout {
  int64_t mask_bytes = -1;
  int64_t scan_storage = 0;
};

template <typename Position>
MaskedScatterLayout LayoutFor(const MaskedScatterPlan& plan) {
  const int64_t count = NumElements(plan.result_shape);
  MaskedScatterLayout layout;
  layout.scan_storage = AlignUp(count * static_cast<int64_t>(sizeof(Position)));
  if (!plan.mask.is_contiguous()) {
    layout.mask_bytes = layout.scan_storage;
    layout.scan_storage += AlignUp(count);
  }
  return layout;
}

// MaskBytesKernel writes the mask, broadcast (or strided) at the result's shape, as contiguous
// bytes of 0 or 1: one pass over a byte per element, instead of the prefix sum and the scatter
// each walking the broadcast through its divisions (the scan's input iterator did, 13 times slower
// than a scan of plain keys on an H100).
template <typename Position>
__global__ void MaskBytesKernel(IndexWalk<1, Position> walk, Position count,
                                const uint8_t* __restrict__ mask, uint8_t* __restrict__ out) {
  TENSOROPS_TILE_LOOP(Position, tile, count) {
    uint8_t values[kElementsPerThread];
#pragma unroll
    for (int i = 0; i < kElementsPerThread; ++i) {
      if (TileSlot(tile, i) >= count) continue;
      typename IndexWalk<1, Position>::Offset at[1];
      walk.Offsets(TileSlot(tile, i), at);
      values[i] = mask[at[0]] != 0 ? 1 : 0;
    }
#pragma unroll
    for (int i = 0; i < kElementsPerThread; ++i) {
      if (TileSlot(tile, i) < count) out[TileSlot(tile, i)] = values[i];
    }
  }
}

// MaskedScatterKernel: kElementsPerThread positions per thread, their mask bytes and positions
// read together, then the elements they select, then the results written. The mask is contiguous
// at the result's shape (the caller's, or MaskBytesKernel's); `walk` walks the input alone, which
// divides nothing where the input is contiguous.
template <typename Elem, typename Position>
__global__ void MaskedScatterKernel(IndexWalk<1, std::make_unsigned_t<Position>> walk,
                                    std::make_unsigned_t<Position> count,
                                    const Elem* __restrict__ input,
                                    const uint8_t* __restrict__ mask,
                                    const Position* __restrict__ positions,
                                    const Elem* __restrict__ source, int64_t source_count,
                                    Elem* __restrict__ out, int32_t* error) {
  using Walked = std::make_unsigned_t<Position>;
  TENSOROPS_TILE_LOOP(Walked, tile, count) {
    bool take[kElementsPerThread];
    // The source element at a true position, the input's offset elsewhere.
    int64_t from[kElementsPerThread];
#pragma unroll
    for (int i = 0; i < kElementsPerThread; ++i) {
      const Walked position = TileSlot(tile, i);
      take[i] = position < count && mask[position] != 0;
      if (take[i]) {
        from[i] = positions[position];
      } else if (position < count) {
        typename IndexWalk<1, Walked>::Offset at[1];
        walk.Offsets(position, at);
        from[i] = at[0];
      }
    }
    Elem elements[kElementsPerThread];
    bool valid[kElementsPerThread];
#pragma unroll
    for (int i = 0; i < kElementsPerThread; ++i) {
      valid[i] = TileSlot(tile, i) < count && (!take[i] || from[i] < source_count);
      if (valid[i]) {
        elements[i] = take[i] ? source[from[i]] : input[from[i]];
      } else if (take[i]) {
        *error = 1;
      }
    }
#pragma unroll
    for (int i = 0; i < kElementsPerThread; ++i) {
      if (valid[i]) out[TileSlot(tile, i)] = elements[i];
    }
  }
}

}  // namespace

absl::StatusOr<int64_t> MaskedScatterWorkspaceBytes(const MaskedScatterPlan& plan) {
  const int64_t count = NumElements(plan.result_shape);
  return WithPositionType(
      plan, [&]<typename Position>(TypeTag<Position>) -> absl::StatusOr<int64_t> {
        size_t scan_bytes = 0;
        if (const cudaError_t error = cub::DeviceScan::ExclusiveSum(
                nullptr, scan_bytes, MaskCounts<Position>(nullptr, MaskCount<Position>{}),
                static_cast<Position*>(nullptr), count);
            error != cudaSuccess) {
          return CubStatus("sizing masked_scatter's prefix sum", error);
        }
        return LayoutFor<Position>(plan).scan_storage + static_cast<int64_t>(scan_bytes);
      });
}

absl::Status LaunchMaskedScatter(const MaskedScatterPlan& plan, void* result, void* workspace,
                                 int64_t workspace_bytes, int32_t* error_flag, void* stream) {
  const int64_t count = NumElements(plan.result_shape);
  if (count == 0) return absl::OkStatus();
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  return WithPositionType(plan, [&]<typename Position>(TypeTag<Position>) -> absl::Status {
    using Walked = std::make_unsigned_t<Position>;
    const MaskedScatterLayout layout = LayoutFor<Position>(plan);
    auto* const positions = static_cast<Position*>(workspace);
    const uint8_t* mask = plan.mask.device_data_as<uint8_t>();
    if (layout.mask_bytes >= 0) {
      if (workspace_bytes < layout.scan_storage) {
        return absl::InternalError("masked_scatter: a workspace too small for its mask");
      }
      auto* const mask_bytes = static_cast<uint8_t*>(workspace) + layout.mask_bytes;
      MaskBytesKernel<Walked><<<GridForTiles(count), kThreadsPerBlock, 0, cuda_stream>>>(
          IndexWalk<1, Walked>(MakeWalk<1>(plan.result_shape, {plan.mask.strides()})),
          static_cast<Walked>(count), mask, mask_bytes);
      if (absl::Status status = LaunchStatus("masked_scatter"); !status.ok()) return status;
      mask = mask_bytes;
    }
    // A workspace smaller than the parts before CUB's leaves CUB none: it then refuses to run.
    size_t scan_bytes =
        static_cast<size_t>(std::max<int64_t>(workspace_bytes - layout.scan_storage, 0));
    if (cudaError_t error = cub::DeviceScan::ExclusiveSum(
            static_cast<char*>(workspace) + layout.scan_storage, scan_bytes,
            MaskCounts<Position>(mask, MaskCount<Position>{}), positions, count, cuda_stream);
        error != cudaSuccess) {
      return CubStatus("masked_scatter's prefix sum", error);
    }
    const Walk<1> walk = MakeWalk<1>(plan.result_shape, {plan.input.strides()});
    return cpu::DispatchItemSize(ItemSize(plan.result_dtype), [&]<typename Item>(TypeTag<Item>) {
      using Elem = Moved<Item>;
      MaskedScatterKernel<Elem, Position>
          <<<GridForTiles(count), kThreadsPerBlock, 0, cuda_stream>>>(
              IndexWalk<1, Walked>(walk), static_cast<Walked>(count),
              static_cast<const Elem*>(plan.input.data()), mask, positions,
              static_cast<const Elem*>(plan.source.data()), plan.source.numel(),
              static_cast<Elem*>(result), error_flag);
      return LaunchStatus("masked_scatter");
    });
  });
}

}  // namespace tensorops::cuda
