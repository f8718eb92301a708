// The strided walk every CUDA kernel of tensorops runs over its iteration shape, built on the host
// and run on the device, in 32-bit positions and offsets wherever the call allows, 64-bit ones
// otherwise (issue 38). Plain C++ as well, so that its index arithmetic is tested on the host
// (tests/index_walk_test.cc) exactly as the kernels run it.
//
//   const Walk<2> walk = MakeWalk<2>(shape, {input_strides, result_strides});
//   DispatchPosition(Fits32(walk, count), [&]<typename Position>(TypeTag<Position>) {
//     Kernel<<<...>>>(IndexWalk<2, Position>(walk), static_cast<Position>(count), ...);
//   });
//   // in Kernel: typename IndexWalk<2, Position>::Offset at[2]; walk.Offsets(position, at);
#ifndef TENSOROPS_KERNELS_CUDA_INDEX_WALK_H_
#define TENSOROPS_KERNELS_CUDA_INDEX_WALK_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/dispatch.h"
#include "kernels/int_divider.h"
#include "kernels/shape.h"

#if defined(__CUDACC__)
#define TENSOROPS_WALK_INLINE __host__ __device__ __forceinline__
#else
#define TENSOROPS_WALK_INLINE inline
#endif

namespace tensorops::cuda {

// Walk describes the positions of an iteration shape and each of `kOperands` operands' element
// offset there, on the host: MakeWalk drops size-1 dimensions and merges dimensions that are
// contiguous for every operand, so most walks are rank 1 or 2. Kernels take it as an IndexWalk.
template <int kOperands>
struct Walk {
  int rank = 0;
  int64_t sizes[kMaxRank];
  int64_t strides[kOperands][kMaxRank];
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

// kMaxOffset32: the largest position or offset a kernel indexing in 32 bits may compute. Signed,
// because offsets are signed (strides may be), and below 2^31 so that a grid-stride step past the
// last position (at most 2^26 more: walk.cuh's loops) cannot wrap a uint32_t position.
inline constexpr int64_t kMaxOffset32 = std::numeric_limits<int32_t>::max();

// MaxOffset: the largest magnitude operand `k`'s offset reaches over `walk`.
template <int kOperands>
int64_t MaxOffset(const Walk<kOperands>& walk, int k) {
  int64_t reach = 0;
  for (int d = 0; d < walk.rank; ++d) {
    const int64_t stride = walk.strides[k][d] < 0 ? -walk.strides[k][d] : walk.strides[k][d];
    reach += (walk.sizes[d] - 1) * stride;
  }
  return reach;
}

// Fits32: whether a kernel over the `count` positions of `walk` may index in 32 bits, every
// operand's offset, plus what the kernel adds to it beyond the walk (`extra[k]`: an index value
// times its axis stride, a row's length), staying within kMaxOffset32.
template <int kOperands>
bool Fits32(const Walk<kOperands>& walk, int64_t count,
            const std::array<int64_t, kOperands>& extra = {}) {
  if (count > kMaxOffset32) return false;
  for (int k = 0; k < kOperands; ++k) {
    if (MaxOffset(walk, k) > kMaxOffset32 - extra[k]) return false;
  }
  return true;
}

namespace internal {
// Set only by ScopedWideIndexingForTesting.
inline std::atomic<bool> wide_indexing_for_testing{false};
}  // namespace internal

// DispatchPosition calls `fn(TypeTag<Position>{})` with the type a kernel numbers its positions
// in: uint32_t where `fits32` (Fits32), uint64_t otherwise. The 32-bit kernel is the common one:
// its multiplies and divisions are single instructions, where 64-bit ones take several; the 64-bit
// kernel serves tensors of 2^31 elements and more.
template <typename Fn>
decltype(auto) DispatchPosition(bool fits32, Fn&& fn) {
  if (fits32 && !internal::wide_indexing_for_testing.load(std::memory_order_relaxed)) {
    return fn(TypeTag<uint32_t>{});
  }
  return fn(TypeTag<uint64_t>{});
}

// ScopedWideIndexingForTesting makes every launch in the process take the 64-bit kernels while it
// lives, so that GPU tests reach them with tensors of a few elements instead of 2^31
// (tests/cuda_index_width_test.cc). Not for concurrent use with launches that expect otherwise.
class ScopedWideIndexingForTesting {
 public:
  ScopedWideIndexingForTesting() { internal::wide_indexing_for_testing.store(true); }
  ~ScopedWideIndexingForTesting() { internal::wide_indexing_for_testing.store(false); }
  ScopedWideIndexingForTesting(const ScopedWideIndexingForTesting&) = delete;
  ScopedWideIndexingForTesting& operator=(const ScopedWideIndexingForTesting&) = delete;
};

// SizeDivider: the IntDivider of a dimension of `size` elements. An empty dimension (size 0) leaves
// no positions to walk: its divisor is never used, and is 1.
template <typename Position>
IntDivider<Position> SizeDivider(int64_t size) {
  return IntDivider<Position>(static_cast<Position>(std::max<int64_t>(size, 1)));
}

// IndexWalk is a Walk as a kernel runs it: positions in `Position` (DispatchPosition), offsets in
// its signed counterpart, and each dimension's size as an IntDivider, so that finding a position's
// coordinates takes multiply-highs and shifts instead of divisions.
template <int kOperands, typename Position>
struct IndexWalk {
  using Offset = std::make_signed_t<Position>;

  int rank = 0;
  // sizes[0] is never divided by: the outermost coordinate is what the divisions leave.
  IntDivider<Position> sizes[kMaxRank];
  Offset strides[kOperands][kMaxRank];

  IndexWalk() = default;
  // `walk` must fit `Position` (Fits32 for uint32_t).
  explicit IndexWalk(const Walk<kOperands>& walk) : rank(walk.rank) {
    for (int d = 0; d < walk.rank; ++d) {
      sizes[d] = SizeDivider<Position>(walk.sizes[d]);
      for (int k = 0; k < kOperands; ++k) strides[k][d] = static_cast<Offset>(walk.strides[k][d]);
    }
  }

  // `position` < the product of the sizes. A walk of rank 1 divides nothing, one of rank r
  // divides r - 1 times.
  TENSOROPS_WALK_INLINE void Offsets(Position position, Offset (&offsets)[kOperands]) const {
    for (int k = 0; k < kOperands; ++k) offsets[k] = 0;
    for (int d = rank - 1; d > 0; --d) {
      const auto [rest, coordinate] = sizes[d].DivMod(position);
      position = rest;
      for (int k = 0; k < kOperands; ++k) {
        offsets[k] += static_cast<Offset>(coordinate) * strides[k][d];
      }
    }
    if (rank > 0) {
      for (int k = 0; k < kOperands; ++k)
        offsets[k] += static_cast<Offset>(position) * strides[k][0];
    }
  }
};

}  // namespace tensorops::cuda

#endif  // TENSOROPS_KERNELS_CUDA_INDEX_WALK_H_
