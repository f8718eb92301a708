// Device-side helpers every CUDA kernel of tensorops shares: the strided walk over an iteration
// shape (the GPU counterpart of the CPU's AxisWalk), grid sizing, bit casts, the element types the
// kernels see, and turning a launch's outcome into a status.
#ifndef TENSOROPS_KERNELS_CUDA_WALK_CUH_
#define TENSOROPS_KERNELS_CUDA_WALK_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <complex>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/status.h"
#include "kernels/cpu/item_size.h"
#include "kernels/dispatch.h"
#include "kernels/half.h"
#include "kernels/shape.h"

namespace tensorops::cuda {

inline constexpr int kThreadsPerBlock = 256;

// Walk visits the positions of an iteration shape and gives each of `kOperands` operands its
// element offset there. Built on the host by MakeWalk, which drops size-1 dimensions and merges
// dimensions that are contiguous for every operand, so most walks are rank 1 or 2 on the device.
template <int kOperands>
struct Walk {
  int rank = 0;
  int64_t sizes[kMaxRank];
  int64_t strides[kOperands][kMaxRank];

  // `position` < the product of `sizes`. The outermost coordinate is what the divisions leave:
  // a walk of rank 1 divides nothing, one of rank r divides r - 1 times.
  __device__ void Offsets(int64_t position, int64_t (&offsets)[kOperands]) const {
    for (int k = 0; k < kOperands; ++k) offsets[k] = 0;
    for (int d = rank - 1; d > 0; --d) {
      const int64_t coordinate = position % sizes[d];
      position /= sizes[d];
      for (int k = 0; k < kOperands; ++k) offsets[k] += coordinate * strides[k][d];
    }
    if (rank > 0) {
      for (int k = 0; k < kOperands; ++k) offsets[k] += position * strides[k][0];
    }
  }
};

template <int kOperands>
Walk<kOperands> MakeWalk(ShapeSpan shape, const std::array<ShapeSpan, kOperands>& strides) {
  Walk<kOperands> walk;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    const int last = walk.rank - 1;
    bool merges = last >= 0;
    for (int k = 0; k < kOperands && merges; ++k) {
      merges = walk.strides[k][last] == strides[k][d] * shape[d];
    }
    if (merges) {
      walk.sizes[last] *= shape[d];
      for (int k = 0; k < kOperands; ++k) walk.strides[k][last] = strides[k][d];
      continue;
    }
    walk.sizes[walk.rank] = shape[d];
    for (int k = 0; k < kOperands; ++k) walk.strides[k][walk.rank] = strides[k][d];
    ++walk.rank;
  }
  return walk;
}

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
