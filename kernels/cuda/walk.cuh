// Device-side helpers every CUDA kernel of tensorops shares: the strided walk over an iteration
// shape (index_walk.h, the GPU counterpart of the CPU's AxisWalk) in 32 or 64 bits, grid sizing,
// bit casts, the element types the kernels see, and turning a launch's outcome into a status.
#ifndef TENSOROPS_KERNELS_CUDA_WALK_CUH_
#define TENSOROPS_KERNELS_CUDA_WALK_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <complex>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/status.h"
#include "kernels/cpu/item_size.h"
#include "kernels/cuda/index_walk.h"
#include "kernels/dispatch.h"
#include "kernels/half.h"
#include "kernels/shape.h"

namespace tensorops::cuda {

inline constexpr int kThreadsPerBlock = 256;

// GridFor returns the blocks of a grid-stride loop over `count` items: enough to fill the GPU,
// no more than the items need.
inline unsigned GridFor(int64_t count) {
  constexpr int64_t kMaxBlocks = int64_t{1} << 16;
  return static_cast<unsigned>(
      std::clamp<int64_t>((count + kThreadsPerBlock - 1) / kThreadsPerBlock, 1, kMaxBlocks));
}

#define TENSOROPS_GRID_STRIDE_LOOP(position, count)                                           \
  for (int64_t position = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; position < (count); \
       position += int64_t{blockDim.x} * gridDim.x)

// TENSOROPS_GRID_STRIDE_LOOP with positions of type `Position` (DispatchPosition): `count` must
// fit it (Fits32 for uint32_t), and then so does every step, GridFor's grid being at most 2^24
// threads.
#define TENSOROPS_GRID_STRIDE_LOOP_OF(Position, position, count)            \
  for (Position position = blockIdx.x * Position{blockDim.x} + threadIdx.x; \
       position < static_cast<Position>(count); position += Position{blockDim.x} * gridDim.x)

// kElementsPerThread: the positions each thread of a copy-like kernel takes per trip through its
// grid-stride loop. It issues all their reads before its first write, so that it has that many
// loads in flight instead of one: what hides memory latency in a kernel that does little else
// (PyTorch's elementwise kernels take 4 as well).
inline constexpr int kElementsPerThread = 4;
inline constexpr int kTilePositions = kThreadsPerBlock * kElementsPerThread;

// GridForTiles is GridFor for kernels that take kElementsPerThread positions per thread.
inline unsigned GridForTiles(int64_t count) {
  return GridFor((count + kElementsPerThread - 1) / kElementsPerThread);
}

// TENSOROPS_TILE_LOOP walks a launch of GridForTiles(count) blocks of kThreadsPerBlock threads
// over tiles of kTilePositions positions. Within a tile, a thread's i-th position is
// TileSlot(tile, i): each of its kElementsPerThread reads is coalesced across the block, as one
// position per thread would be. `count` must fit `Position`; so does every step then (at most
// 2^16 * kTilePositions = 2^26 past the last position, below 2^32 from under 2^31).
#define TENSOROPS_TILE_LOOP(Position, tile, count)                                                 \
  for (Position tile = blockIdx.x * Position{kTilePositions}; tile < static_cast<Position>(count); \
       tile += Position{gridDim.x} * kTilePositions)

template <typename Position>
__device__ __forceinline__ Position TileSlot(Position tile, int i) {
  return tile + threadIdx.x + static_cast<Position>(i) * kThreadsPerBlock;
}

template <typename To, typename From>
__device__ __forceinline__ To BitCast(const From& from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  memcpy(&to, &from, sizeof(To));
  return to;
}

// Complex is the device's complex64/complex128: the layout of std::complex, with the arithmetic
// the reductions need.
template <typename Real>
struct alignas(2 * sizeof(Real)) Complex {
  Real re;
  Real im;
};

// DeviceType is the type kernels use for elements of host type T.
template <typename T>
struct DeviceTypeOf {
  using type = T;
};
template <typename Real>
struct DeviceTypeOf<std::complex<Real>> {
  using type = Complex<Real>;
};
template <typename T>
using DeviceType = typename DeviceTypeOf<T>::type;

// CudaStatus reports a failed CUDA call as the device error it is.
inline absl::Status CudaStatus(std::string_view what, cudaError_t error) {
  // Plain std::string: absl::StrCat's string_view overloads do not resolve under nvcc's front end.
  std::string message = "cuda: ";
  message.append(what).append(" failed: ").append(cudaGetErrorString(error));
  return absl::UnavailableError(message);
}

// CubStatus reports a failed CUB call. CUB reads its own launches' errors with
// cudaPeekAtLastError, which leaves them set: cleared here, or the next launch's LaunchStatus (the
// next call of the batch, even) would report this failure as its own.
inline absl::Status CubStatus(std::string_view what, cudaError_t error) {
  cudaGetLastError();
  return CudaStatus(what, error);
}

// LaunchStatus reports the last launch's error, if any, as the device error it is.
inline absl::Status LaunchStatus(std::string_view what) {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return absl::OkStatus();
  return CudaStatus(std::string("launching ").append(what), error);
}

}  // namespace tensorops::cuda

#endif  // TENSOROPS_KERNELS_CUDA_WALK_CUH_
