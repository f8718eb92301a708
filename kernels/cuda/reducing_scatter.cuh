// The reduction pipeline that Scatter (with IndexReduce) and ScatterNd share on the GPU: the
// same steps as the CPU's ReducingScatter, each a kernel over the result or over the updates:
//   1. init:      result (or its 32-bit shadow) = input (zeros without one; a plain copy or
//                 memset where nothing else needs initial values); MEAN's counts; ASSIGN's
//                 winners = 0 (a memset);
//   2. reset:     without include_self, every destination that receives an update = identity;
//   3. reduce:    atomics on the destination (compare-and-swap where the GPU has no native op);
//                 ASSIGN instead records the largest update position per destination, the first
//                 update to reach a destination writing it ...
//   4. assign:    ... and, only where some destination was reached twice, the update at that
//                 position writes: last writer in row-major order, as on the CPU, whatever order
//                 the threads run in. (Elements of at most 4 bytes with many updates, PacksAssign:
//                 one atomicMax per update of its position and bits packed in 64 bits, then a
//                 pass over the result that writes each reached destination's winner);
//   5. finalize:  MEAN divides by the counts; the shadow rounds into the result.
// Integer, ASSIGN, AMAX and AMIN results equal the CPU's exactly (AMAX/AMIN by the rule of
// docs/semantics.md for NaNs and signed zeros, which does not depend on the order); float sums and
// products differ only by the order of rounding (docs/semantics.md, Identities). A `deterministic`
// float SUM, MEAN or PROD replaces steps 2, 3 and 5 with a sort of the updates by destination and a
// reduction of each destination's run (below), whose order is fixed: the CPU's bytes.
//
// The ops differ only in where an update goes. Each passes an `Updates` value with
//   using Position = uint32_t or uint64_t;  // what it numbers updates in (DispatchPosition)
//   using Offset = std::make_signed_t<Position>;
//   int64_t count;   // the updates, numbered in the row-major order of the CPU's loop
//   __device__ bool Locate(Position position, Offset* source, Offset* dest, int32_t* error) const;
// which gives update `position`'s source element offset and destination offset in the contiguous
// result, or false for an index out of range (having raised `*error`, or found it raised by an
// earlier kernel of the op). A 32-bit Position promises that the count and every offset (into the
// index, the source, the result and its scratch) stay below 2^31.
//
//   LaunchReducingScatter<T, Op>(job, AxisUpdates<Index, Position>{...}, source, result, ...);
//
// Everything here is in an unnamed namespace on purpose: each .cu file that includes it gets its
// own instantiations of the kernels, so no two translation units register one kernel symbol.
#ifndef TENSOROPS_KERNELS_CUDA_REDUCING_SCATTER_CUH_
#define TENSOROPS_KERNELS_CUDA_REDUCING_SCATTER_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cub/device/device_radix_sort.cuh"
#include "cub/device/device_run_length_encode.cuh"
#include "cub/device/device_scan.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/walk.cuh"
#include "kernels/reduction.h"
#include "kernels/status_macros.h"
#include "kernels/tensor.h"

namespace tensorops::cuda {
namespace {  // NOLINT(build/namespaces): see the file comment.

// ---- Scatter: accumulators and atomics ----

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;
template <typename T>
constexpr bool kIsComplex = std::is_same_v<T, Complex<float>> || std::is_same_v<T, Complex<double>>;
template <typename Op>
constexpr bool kIsOrdered = std::is_same_v<Op, MaxOp> || std::is_same_v<Op, MinOp>;

// kHasDeviceReduction: whether the GPU reduces T with Op. Planning rejects AMAX/AMIN on complex;
// complex128 PROD (a 128-bit compare-and-swap) stays on the CPU (DeviceScatterSupported).
template <typename T, typename Op>
constexpr bool kHasDeviceReduction =
    !std::is_same_v<Op, AssignOp> &&
    !(kIsComplex<T> && kIsOrdered<Op>)&&!(std::is_same_v<T, Complex<double>> &&
                                          std::is_same_v<Op, ProdOp>);

// Acc<T, Op> is what a destination accumulates in: float for the 16-bit floats' sums and products,
// int32 for bool and the 8/16-bit integers (the GPU has no atomics narrower than 32 bits), T
// otherwise. AMAX/AMIN of the 16-bit floats select one of their operands, so they work on the
// elements themselves (a compare-and-swap of the 32-bit word holding one): a float shadow would
// rewrite the bits of NaNs it rounds back, where the CPU keeps them. NeedsShadow (launch.h) says
// the same on the host.
template <typename T, typename Op>
using Acc = std::conditional_t<kIsHalf<T>, std::conditional_t<kIsOrdered<Op>, T, float>,
                               std::conditional_t<(sizeof(T) < 4 && !kIsHalf<T>), int32_t, T>>;

// ToAcc and FromAcc convert between an element and its accumulator A. Kernels whose work does
// not depend on the reduction take A rather than Op, so that the reductions sharing an
// accumulator share their instantiations.
template <typename A, typename T>
__device__ __forceinline__ A ToAcc(T value) {
  if constexpr (std::is_same_v<A, T>) {
    return value;
  } else if constexpr (kIsHalf<T>) {
    return static_cast<float>(value);
  } else {
    return static_cast<A>(value);
  }
}

template <typename T, typename A>
__device__ __forceinline__ T FromAcc(A value) {
  if constexpr (std::is_same_v<A, T>) {
    return value;
  } else if constexpr (kIsHalf<T>) {
    return T(value);
  } else if constexpr (std::is_same_v<T, bool>) {
    return value != 0;
  } else {
    // Integers narrower than 32 bits wrap, as the CPU's accumulation in T does.
    return static_cast<T>(value);
  }
}

// AtomicCombine applies `combine(old) -> new` to *dest atomically with a compare-and-swap loop. A
// combination that leaves the bits as they are writes nothing: AMAX/AMIN updates that lose (most
// of them, once a destination holds a large value) then cost one load and no contention.
template <typename A, typename Combine>
__device__ __forceinline__ void AtomicCombine(A* dest, Combine combine) {
  static_assert(sizeof(A) == 4 || sizeof(A) == 8);
  using Bits = std::conditional_t<sizeof(A) == 4, unsigned int, unsigned long long>;
  Bits* address = reinterpret_cast<Bits*>(dest);
  Bits observed = *address;
  Bits expected;
  do {
    expected = observed;
    const Bits next = BitCast<Bits>(combine(BitCast<A>(expected)));
    if (next == expected) return;
    observed = atomicCAS(address, expected, next);
  } while (observed != expected);
}

// AtomicCombineHalf is AtomicCombine for a 16-bit element: a compare-and-swap of the aligned
// 32-bit word that holds it, leaving the other half (a neighbour, which other threads may update
// meanwhile: the loop then retries) as it finds it. The word may reach two bytes past the last
// element: every buffer the executor hands a call is padded to kDeviceAlignment.
template <typename H, typename Combine>
__device__ __forceinline__ void AtomicCombineHalf(H* dest, Combine combine) {
  static_assert(sizeof(H) == 2);
  const auto address_bits = reinterpret_cast<uintptr_t>(dest);
  auto* word = reinterpret_cast<unsigned int*>(address_bits & ~uintptr_t{3});
  const unsigned int shift = (address_bits & 2) != 0 ? 16 : 0;
  unsigned int observed = *word;
  unsigned int expected;
  do {
    expected = observed;
    const H old = H::FromBits(static_cast<uint16_t>(expected >> shift));
    const H next = combine(old);
    if (next.bits == old.bits) return;
    const unsigned int desired =
        (expected & ~(0xffffu << shift)) | (static_cast<unsigned int>(next.bits) << shift);
    observed = atomicCAS(word, expected, desired);
  } while (observed != expected);
}

template <typename Real>
__device__ __forceinline__ Complex<Real> Multiply(Complex<Real> a, Complex<Real> b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}

// AtomicReduce combines `value` into *dest with `Op` as docs/semantics.md defines it for element
// type T; `dest` holds an Acc<T, Op>.
template <typename T, typename Op>
__device__ __forceinline__ void AtomicReduce(Acc<T, Op>* dest, Acc<T, Op> value) {
  using A = Acc<T, Op>;
  if constexpr (std::is_same_v<T, bool>) {
    // On bool SUM and AMAX are logical or, PROD and AMIN logical and: max and min of 0/1.
    if constexpr (std::is_same_v<Op, SumOp> || std::is_same_v<Op, MaxOp>) {
      atomicMax(dest, value);
    } else {
      atomicMin(dest, value);
    }
  } else if constexpr (std::is_same_v<Op, SumOp>) {
    if constexpr (std::is_same_v<A, int64_t>) {
      atomicAdd(reinterpret_cast<unsigned long long*>(dest),
                static_cast<unsigned long long>(value));
    } else if constexpr (kIsComplex<A>) {
      atomicAdd(&dest->re, value.re);
      atomicAdd(&dest->im, value.im);
    } else {
      atomicAdd(dest, value);
    }
  } else if constexpr (std::is_same_v<Op, ProdOp>) {
    if constexpr (std::is_same_v<A, Complex<float>>) {
      AtomicCombine(dest, [value](A old) { return Multiply(old, value); });
    } else if constexpr (std::is_integral_v<A>) {
      // Unsigned arithmetic: wrapping products, as the CPU's, without signed overflow.
      using U = std::make_unsigned_t<A>;
      AtomicCombine(dest, [value](A old) {
        return static_cast<A>(static_cast<U>(old) * static_cast<U>(value));
      });
    } else {
      AtomicCombine(dest, [value](A old) { return static_cast<A>(old * value); });
    }
  } else if constexpr (std::is_integral_v<A>) {
    // AMAX / AMIN on integers: native atomics (int64 through its long long overload).
    using Native = std::conditional_t<std::is_same_v<A, int64_t>, long long, A>;
    if constexpr (std::is_same_v<Op, MaxOp>) {
      atomicMax(reinterpret_cast<Native*>(dest), static_cast<Native>(value));
    } else {
      atomicMin(reinterpret_cast<Native*>(dest), static_cast<Native>(value));
    }
  } else {
    // AMAX / AMIN on floats: the shared functor, whose NaN and signed-zero rule makes the result
    // the same whatever order the compare-and-swaps land in.
    const auto combine = [value](A old) {
      Op{}(old, value);
      return old;
    };
    if constexpr (kIsHalf<A>) {
      AtomicCombineHalf(dest, combine);
    } else {
      AtomicCombine(dest, combine);
    }
  }
}

// ResetValue is the identity of Op in the accumulator type (what include_self=false starts from).
template <typename Op, typename A>
__device__ __forceinline__ A ResetValue() {
  if constexpr (kIsComplex<A>) {
    return {std::is_same_v<Op, ProdOp> ? 1 : 0, 0};
  } else {
    return Identity<Op, A>();
  }
}

// ---- Scatter: the kernels ----

// Scratch is where a scatter accumulates besides the result (ScatterWorkspace's parts). Where
// `stride` is 2, MEAN's accumulator and count share a cell per destination (the accumulator, then
// the count): destination d's accumulator is shadow[2 d] and its count counts[2 d]. A cell's index
// is taken in 64 bits (CellAt): a 32-bit Position bounds the result's offsets by 2^31, not twice
// them.
struct Scratch {
  void* shadow = nullptr;
  void* counts = nullptr;  // uint64 where wide_counts, else uint32
  bool wide_counts = false;
  int stride = 1;
};

__device__ __forceinline__ int64_t CellAt(int64_t dest, int stride) { return dest * stride; }

__device__ __forceinline__ void SetCount(const Scratch& scratch, int64_t dest,
                                         unsigned long long value) {
  const int64_t at = CellAt(dest, scratch.stride);
  if (scratch.wide_counts) {
    static_cast<unsigned long long*>(scratch.counts)[at] = value;
  } else {
    static_cast<unsigned int*>(scratch.counts)[at] = static_cast<unsigned int>(value);
  }
}

__device__ __forceinline__ void AddCount(const Scratch& scratch, int64_t dest) {
  const int64_t at = CellAt(dest, scratch.stride);
  if (scratch.wide_counts) {
    atomicAdd(static_cast<unsigned long long*>(scratch.counts) + at, 1ull);
  } else {
    atomicAdd(static_cast<unsigned int*>(scratch.counts) + at, 1u);
  }
}

__device__ __forceinline__ unsigned long long GetCount(const Scratch& scratch, int64_t dest) {
  const int64_t at = CellAt(dest, scratch.stride);
  return scratch.wide_counts ? static_cast<const unsigned long long*>(scratch.counts)[at]
                             : static_cast<const unsigned int*>(scratch.counts)[at];
}

// InitKernel copies the input (zeros where `input` is null) into the result (or its shadow) and
// fills the scratch. `input` and `result` are the same memory in place: no __restrict__ (each
// element is read, then written with the same value, by one thread).
template <typename T, typename A, typename Position>
__global__ void InitKernel(IndexWalk<2, Position> walk, Position count, const T* input, T* result,
                           Scratch scratch, unsigned long long initial) {
  using Offset = typename IndexWalk<2, Position>::Offset;
  TENSOROPS_GRID_STRIDE_LOOP_OF(Position, position, count) {
    Offset at[2];
    walk.Offsets(position, at);
    const T value = input != nullptr ? input[at[0]] : T{};
    if (scratch.shadow != nullptr) {
      static_cast<A*>(scratch.shadow)[CellAt(at[1], scratch.stride)] = ToAcc<A>(value);
    } else {
      result[at[1]] = value;
    }
    if (scratch.counts != nullptr) SetCount(scratch, at[1], initial);
  }
}

// `stride`: Scratch::stride where `acc` is the shadow, else 1.
template <typename T, typename Op, typename Updates>
__global__ void ResetKernel(Updates updates, Acc<T, Op>* acc, int stride, int32_t* error) {
  using Offset = typename Updates::Offset;
  TENSOROPS_GRID_STRIDE_LOOP_OF(typename Updates::Position, position, updates.count) {
    Offset source;
    Offset dest;
    if (updates.Locate(position, &source, &dest, error)) {
      acc[CellAt(dest, stride)] = ResetValue<Op, Acc<T, Op>>();
    }
  }
}

// The atomics make the order of the updates at one destination depend on timing: exact for
// integers and AMAX/AMIN, a matter of rounding for float sums and products (which `deterministic`
// takes to the sorted reduction below). `acc` is the result, or scratch.shadow at
// scratch.stride; MEAN counts in scratch.counts.
template <typename T, typename Op, typename Updates>
__global__ void ReduceKernel(Updates updates, const T* __restrict__ source, Acc<T, Op>* acc,
                             Scratch scratch, int32_t* error) {
  using Offset = typename Updates::Offset;
  TENSOROPS_GRID_STRIDE_LOOP_OF(typename Updates::Position, position, updates.count) {
    Offset from;
    Offset dest;
    if (!updates.Locate(position, &from, &dest, error)) continue;
    AtomicReduce<T, Op>(acc + CellAt(dest, scratch.stride), ToAcc<Acc<T, Op>>(source[from]));
    if (scratch.counts != nullptr) AddCount(scratch, dest);
  }
}

// ASSIGN's two passes. Winner is uint32_t where the update positions fit 31 bits (CountsFit32),
// unsigned long long otherwise: a 32-bit atomicMax and half the bytes of winners to clear and
// read. winners[dest] holds the largest update position that reached dest, plus one (0: none yet,
// so that one memset clears it). Elem is the element's bits (ItemBits): ASSIGN only moves them.
//
// WinnerKernel: each update raises its destination's winner; the first to reach a destination
// (atomicMax returned 0) writes it, any later one notes a duplicate instead. Where no destination
// is reached twice, that first write is the last one and AssignKernel has nothing to do: it reads
// `*duplicates` and returns. Where one is, the first writes are overwritten by AssignKernel's:
// the price of the one pass for indices without duplicates is, for those with, a write of each
// destination's first update that the second pass replaces.
template <typename Elem, typename Winner, typename Updates>
__global__ void WinnerKernel(Updates updates, const Elem* __restrict__ source, Elem* result,
                             Winner* winners, unsigned int* duplicates, int32_t* error) {
  bool saw_duplicate = false;
  TENSOROPS_GRID_STRIDE_LOOP_OF(typename Updates::Position, position, updates.count) {
    typename Updates::Offset from;
    typename Updates::Offset dest;
    if (!updates.Locate(position, &from, &dest, error)) continue;
    const Winner previous = atomicMax(winners + dest, static_cast<Winner>(position) + 1);
    if (previous == 0) {
      result[dest] = source[from];
    } else {
      saw_duplicate = true;
    }
  }
  // One store per block at most: a duplicate-heavy index would otherwise have most of its updates
  // store to this one word.
  if (__syncthreads_or(saw_duplicate) && threadIdx.x == 0) *duplicates = 1;
}

template <typename Elem, typename Winner, typename Updates>
__global__ void AssignKernel(Updates updates, const Elem* __restrict__ source, Elem* result,
                             const Winner* __restrict__ winners,
                             const unsigned int* __restrict__ duplicates, int32_t* error) {
  if (*duplicates == 0) return;
  TENSOROPS_GRID_STRIDE_LOOP_OF(typename Updates::Position, position, updates.count) {
    typename Updates::Offset from;
    typename Updates::Offset dest;
    if (!updates.Locate(position, &from, &dest, error)) continue;
    if (winners[dest] == static_cast<Winner>(position) + 1) result[dest] = source[from];
  }
}

// ASSIGN in one pass (PacksAssign): each update raises its destination's packed word to
// (position + 1) << 32 | its bits, so the word ends holding the largest position's bits whatever
// order the atomics land in (the result of atomicMax unused: a fire-and-forget reduction at the
// L2); then one pass over the result writes the bits of each destination that some update reached.
template <typename Elem, typename Updates>
__global__ void PackedAssignKernel(Updates updates, const Elem* __restrict__ source,
                                   unsigned long long* packed, int32_t* error) {
  static_assert(sizeof(Elem) <= 4);
  TENSOROPS_GRID_STRIDE_LOOP_OF(typename Updates::Position, position, updates.count) {
    typename Updates::Offset from;
    typename Updates::Offset dest;
    if (!updates.Locate(position, &from, &dest, error)) continue;
    atomicMax(packed + dest, (static_cast<unsigned long long>(position) + 1) << 32 |
                                 static_cast<unsigned long long>(source[from]));
  }
}

// kElementsPerThread words per thread, all read before the first write (a plain grid-stride loop
// over so little work is unrolled by nvcc behind a 64-bit division for its trip count, which
// tests/cuda_sass_test.py refuses).
template <typename Elem>
__global__ void PackedWriteKernel(int64_t numel, const unsigned long long* __restrict__ packed,
                                  Elem* result) {
  TENSOROPS_TILE_LOOP(int64_t, tile, numel) {
    unsigned long long words[kElementsPerThread];
#pragma unroll
    for (int i = 0; i < kElementsPerThread; ++i) {
      words[i] = TileSlot(tile, i) < numel ? packed[TileSlot(tile, i)] : 0;
    }
#pragma unroll
    for (int i = 0; i < kElementsPerThread; ++i) {
      if ((words[i] >> 32) != 0) result[TileSlot(tile, i)] = static_cast<Elem>(words[i]);
    }
  }
}

// ItemBits is the unsigned integer type of an element of `kBytes` bytes (cpu::Bytes<16> for
// complex128), for kernels that move elements without looking at them: one instantiation per
// size, not per dtype.
template <size_t kBytes>
using ItemBits = std::conditional_t<
    kBytes == 1, uint8_t,
    std::conditional_t<
        kBytes == 2, uint16_t,
        std::conditional_t<kBytes == 4, uint32_t,
                           std::conditional_t<kBytes == 8, uint64_t, cpu::Bytes<16>>>>>;

// LaunchPackedAssign runs ASSIGN in one pass over `updates` (PacksAssign), `packed` (numel
// words) already cleared.
template <typename T, typename Updates>
absl::Status LaunchPackedAssign(std::string_view op, const Updates& updates, int64_t numel,
                                const T* source, T* result, unsigned long long* packed,
                                int32_t* error, cudaStream_t stream) {
  if constexpr (sizeof(T) <= 4) {
    using Elem = ItemBits<sizeof(T)>;
    PackedAssignKernel<Elem><<<GridFor(updates.count), kThreadsPerBlock, 0, stream>>>(
        updates, reinterpret_cast<const Elem*>(source), packed, error);
    TENSOROPS_RETURN_IF_ERROR(LaunchStatus(op));
    PackedWriteKernel<Elem><<<GridForTiles(numel), kThreadsPerBlock, 0, stream>>>(
        numel, packed, reinterpret_cast<Elem*>(result));
    return LaunchStatus(op);
  } else {
    return absl::InternalError(std::string(op).append(": a packed ASSIGN of wide elements"));
  }
}

// LaunchAssign runs ASSIGN's passes over `updates`, the winners and the duplicates flag already
// cleared.
template <typename T, typename Updates>
absl::Status LaunchAssign(std::string_view op, const Updates& updates, const T* source, T* result,
                          char* winners, unsigned int* duplicates, bool winners_fit32,
                          int32_t* error, cudaStream_t stream) {
  using Elem = ItemBits<sizeof(T)>;
  const auto run = [&]<typename Winner>(TypeTag<Winner>) {
    const unsigned grid = GridFor(updates.count);
    WinnerKernel<Elem, Winner><<<grid, kThreadsPerBlock, 0, stream>>>(
        updates, reinterpret_cast<const Elem*>(source), reinterpret_cast<Elem*>(result),
        reinterpret_cast<Winner*>(winners), duplicates, error);
    TENSOROPS_RETURN_IF_ERROR(LaunchStatus(op));
    AssignKernel<Elem, Winner><<<grid, kThreadsPerBlock, 0, stream>>>(
        updates, reinterpret_cast<const Elem*>(source), reinterpret_cast<Elem*>(result),
        reinterpret_cast<const Winner*>(winners), duplicates, error);
    return LaunchStatus(op);
  };
  // 32-bit update positions (Updates::Position) imply fewer than 2^31 updates: 32-bit winners.
  if constexpr (sizeof(typename Updates::Position) == 4) {
    return run(TypeTag<uint32_t>{});
  } else {
    if (winners_fit32) return run(TypeTag<uint32_t>{});
    return run(TypeTag<unsigned long long>{});
  }
}

template <typename T, typename A>
__global__ void FinalizeKernel(int64_t count, const A* acc, Scratch scratch, T* result) {
  TENSOROPS_GRID_STRIDE_LOOP(i, count) {
    A value = acc[i * scratch.stride];
    if (scratch.counts != nullptr) {
      // A destination nobody wrote (count 0 without include_self) keeps its value.
      const unsigned long long arrivals = GetCount(scratch, i);
      const int64_t n = arrivals > 1 ? static_cast<int64_t>(arrivals) : 1;
      if constexpr (std::is_integral_v<T>) {
        result[i] = FloorDivide(FromAcc<T>(value), n);
        continue;
      } else if constexpr (kIsComplex<A>) {
        value.re /= static_cast<decltype(value.re)>(n);
        value.im /= static_cast<decltype(value.im)>(n);
      } else {
        value = value / static_cast<A>(n);
      }
    }
    result[i] = FromAcc<T>(value);
  }
}

// ---- Scatter: the sorted (deterministic) reduction ----
//
// For `deterministic` float SUM/MEAN/PROD: every update becomes (destination, value); a stable
// radix sort by destination keeps each destination's values in row-major order of the updates; an
// integer run-length encoding and its exclusive sum give each destination's run (where it starts,
// how long it is: MEAN's count); then one thread per run combines the destination's input (with
// include_self) and the run's values one after another, in that order, and writes the destination
// once. That is the CPU's order exactly (kernels/cpu/reducing_scatter.h), and every sum and product
// is rounded as the CPU rounds it (CombineOp: no fused multiply-add), so the result is the CPU's
// bytes: a call that falls back to the CPU, or runs there by size, returns the same bits.
// (CUB's ReduceByKey would not even repeat itself: it combines the partial results of a run that
// spans several thread blocks in an order that depends on timing.) A long run is a serial loop,
// which is what the promise costs: about a nanosecond per update of the longest run.

template <typename T>
constexpr bool kSortable = kIsHalf<T> || std::is_floating_point_v<T> || kIsComplex<T>;

// Add, Sub and Mul round each operation on its own, as the CPU does: nvcc would otherwise fuse a
// product and a sum into one fused multiply-add, which rounds once and gives other bits.
__device__ __forceinline__ float Add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double Add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float Sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double Sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float Mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double Mul(double a, double b) { return __dmul_rn(a, b); }

// CombineOp: `a` (the running value) combined with `b`, as the CPU's SumOp/ProdOp combine them; a
// complex product is GCC's (ac - bd, ad + bc) for finite operands.
template <typename Op>
struct CombineOp {
  template <typename A>
  __device__ __forceinline__ A operator()(const A& a, const A& b) const {
    if constexpr (kIsComplex<A>) {
      if constexpr (std::is_same_v<Op, ProdOp>) {
        return {Sub(Mul(a.re, b.re), Mul(a.im, b.im)), Add(Mul(a.re, b.im), Mul(a.im, b.re))};
      } else {
        return {Add(a.re, b.re), Add(a.im, b.im)};
      }
    } else if constexpr (std::is_same_v<Op, ProdOp>) {
      return Mul(a, b);
    } else {
      return Add(a, b);
    }
  }
};

using Key = unsigned long long;

// EndBit: the key bits to sort on. Destinations are < numel and the sentinel (an update whose
// index was out of range) is numel itself.
inline int EndBit(int64_t numel) { return 64 - __builtin_clzll(static_cast<Key>(numel) | 1); }

inline int64_t AlignUp(int64_t bytes) {
  return (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
}

// SortedLayout: where the sorted reduction's buffers lie in its scratch, in bytes. The sort
// ping-pongs between the two key and the two value buffers (cub::DoubleBuffer: CUB allocates no
// copies of its own); the run-length encoding then writes its unique keys into whichever key
// buffer the sort left free. `lengths` holds updates + 1 int64: the run lengths, then, scanned
// in place, where each run starts, the last run's end included. CUB's temporary storage takes
// the rest of the scratch, from `temp`.
struct SortedLayout {
  int64_t keys[2] = {0, 0};
  int64_t values[2] = {0, 0};
  int64_t lengths = 0;
  int64_t runs = 0;
  int64_t temp = 0;
};

// ScratchCursor hands out consecutive parts of a scratch buffer, each aligned.
struct ScratchCursor {
  int64_t at = 0;
  int64_t Take(int64_t bytes) {
    const int64_t offset = at;
    at += AlignUp(bytes);
    return offset;
  }
};

inline SortedLayout PlanSortedBuffers(int64_t updates, int64_t value_size) {
  SortedLayout layout;
  ScratchCursor cursor;
  for (int64_t& keys : layout.keys) keys = cursor.Take(updates * static_cast<int64_t>(sizeof(Key)));
  for (int64_t& values : layout.values) values = cursor.Take(updates * value_size);
  layout.lengths = cursor.Take((updates + 1) * static_cast<int64_t>(sizeof(int64_t)));
  layout.runs = cursor.Take(sizeof(int64_t));
  layout.temp = cursor.at;
  return layout;
}

// SortedTempBytes asks CUB, on the current device, for the temporary storage of the sort, the
// run-length encoding and the scan.
template <typename A>
absl::StatusOr<int64_t> SortedTempBytes(int64_t updates, int64_t numel) {
  size_t sort_bytes = 0;
  size_t encode_bytes = 0;
  size_t scan_bytes = 0;
  cub::DoubleBuffer<Key> keys(nullptr, nullptr);
  cub::DoubleBuffer<A> values(nullptr, nullptr);
  cudaError_t error =
      cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, values, updates, 0, EndBit(numel));
  if (error != cudaSuccess) return CubStatus("sizing the sort of scatter updates", error);
  error = cub::DeviceRunLengthEncode::Encode(
      nullptr, encode_bytes, static_cast<const Key*>(nullptr), static_cast<Key*>(nullptr),
      static_cast<int64_t*>(nullptr), static_cast<int64_t*>(nullptr), static_cast<int>(updates));
  if (error != cudaSuccess) return CubStatus("sizing the runs of scatter updates", error);
  error = cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, static_cast<int64_t*>(nullptr),
                                        updates + 1);
  if (error != cudaSuccess) return CubStatus("sizing the scan of scatter runs", error);
  return static_cast<int64_t>(std::max({sort_bytes, encode_bytes, scan_bytes}));
}

template <typename T, typename Op, typename Updates>
__global__ void KeysKernel(Updates updates, const T* __restrict__ source, Key sentinel, Key* keys,
                           Acc<T, Op>* values, int64_t* lengths, int32_t* error) {
  TENSOROPS_GRID_STRIDE_LOOP_OF(typename Updates::Position, position, updates.count) {
    typename Updates::Offset from;
    typename Updates::Offset dest;
    const bool in_range = updates.Locate(position, &from, &dest, error);
    keys[position] = in_range ? static_cast<Key>(dest) : sentinel;
    values[position] = in_range ? ToAcc<Acc<T, Op>>(source[from]) : Acc<T, Op>{};
    // The scan reads updates + 1 lengths, the encoding writes as many as there are runs: zero
    // them all, so that the scan never reads memory nobody wrote.
    lengths[position] = 0;
    if (position == 0) lengths[updates.count] = 0;
  }
}

// ReduceRunsKernel: one thread per run. `starts[run]` and `starts[run + 1]` bound the run's values
// in sorted order, which is the updates' row-major order.
template <typename T, typename Op>
__global__ void ReduceRunsKernel(const int64_t* __restrict__ runs, const Key* __restrict__ unique,
                                 const int64_t* __restrict__ starts,
                                 const Acc<T, Op>* __restrict__ values, Key sentinel,
                                 bool include_self, bool mean, T* result) {
  using A = Acc<T, Op>;
  const int64_t run_count = *runs;
  TENSOROPS_GRID_STRIDE_LOOP(run, run_count) {
    const Key dest = unique[run];
    if (dest == sentinel) continue;
    const int64_t begin = starts[run];
    const int64_t length = starts[run + 1] - begin;
    // The input first, then the updates in order: the CPU's order (include_self = false starts
    // from the identity, as the CPU's reset does).
    A value = include_self ? ToAcc<A>(result[dest]) : ResetValue<Op, A>();
    for (int64_t i = 0; i < length; ++i) value = CombineOp<Op>{}(value, values[begin + i]);
    if (mean) {
      const int64_t n = length + (include_self ? 1 : 0);
      if constexpr (kIsComplex<A>) {
        value.re /= static_cast<decltype(value.re)>(n);
        value.im /= static_cast<decltype(value.im)>(n);
      } else {
        value = value / static_cast<A>(n);
      }
    }
    result[dest] = FromAcc<T>(value);
  }
}

// ScatterJob is a scatter as the pipeline sees it, whichever op addresses its updates.
struct ScatterJob {
  ScatterSizes sizes;
  // The result's shape; its elements are numbered row-major (the destinations' offsets).
  ShapeSpan result_shape;
  // The input on the device at result_shape (any strides); null data: the result starts as zeros.
  TensorView input;
  bool include_self = true;
};

template <typename T, typename Op, typename Updates>
absl::Status LaunchSortedScatter(const ScatterJob& job, const Updates& updates, const T* source,
                                 T* result, char* scratch, int64_t scratch_bytes, int32_t* error,
                                 cudaStream_t stream) {
  using A = Acc<T, Op>;
  const std::string_view op = job.sizes.op;
  const int64_t numel = job.sizes.numel;
  const SortedLayout layout = PlanSortedBuffers(updates.count, sizeof(A));
  cub::DoubleBuffer<Key> keys(reinterpret_cast<Key*>(scratch + layout.keys[0]),
                              reinterpret_cast<Key*>(scratch + layout.keys[1]));
  cub::DoubleBuffer<A> values(reinterpret_cast<A*>(scratch + layout.values[0]),
                              reinterpret_cast<A*>(scratch + layout.values[1]));
  const auto lengths = reinterpret_cast<int64_t*>(scratch + layout.lengths);
  const auto runs = reinterpret_cast<int64_t*>(scratch + layout.runs);
  void* temp = scratch + layout.temp;
  const size_t temp_capacity = static_cast<size_t>(scratch_bytes - layout.temp);
  const Key sentinel = static_cast<Key>(numel);

  KeysKernel<T, Op><<<GridFor(updates.count), kThreadsPerBlock, 0, stream>>>(
      updates, source, sentinel, keys.Current(), values.Current(), lengths, error);
  TENSOROPS_RETURN_IF_ERROR(LaunchStatus(op));
  size_t temp_bytes = temp_capacity;
  cudaError_t status = cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, values,
                                                       updates.count, 0, EndBit(numel), stream);
  if (status != cudaSuccess) return CubStatus("sorting scatter updates", status);
  Key* const unique = keys.Alternate();
  temp_bytes = temp_capacity;
  status = cub::DeviceRunLengthEncode::Encode(temp, temp_bytes, keys.Current(), unique, lengths,
                                              runs, static_cast<int>(updates.count), stream);
  if (status != cudaSuccess) return CubStatus("finding the runs of scatter updates", status);
  temp_bytes = temp_capacity;
  status = cub::DeviceScan::ExclusiveSum(temp, temp_bytes, lengths, updates.count + 1, stream);
  if (status != cudaSuccess) return CubStatus("scanning the runs of scatter updates", status);
  ReduceRunsKernel<T, Op><<<GridFor(updates.count), kThreadsPerBlock, 0, stream>>>(
      runs, unique, lengths, values.Current(), sentinel, job.include_self,
      job.sizes.reduce == Reduction::kMean, result);
  return LaunchStatus(op);
}

// LaunchInit is the pipeline's step 1: the result (or its shadow) starts as the input, walked
// (possibly strided) at the result's shape. In place (a stored tensor updated where it lies: the
// result is the contiguous input itself) the copy would read and write the whole tensor to change
// nothing, which for a pushed-into embedding table is most of the call: it runs only when a shadow
// or counts need their initial values. Without those, a contiguous input (or none: zeros) is a
// plain device copy (or memset), at copy speed. (ASSIGN's winners and duplicates flag are cleared
// by one memset of their own.)
template <typename T, typename A>
absl::Status LaunchInit(const ScatterJob& job, T* result, const Scratch& scratch,
                        cudaStream_t stream) {
  const std::string_view op = job.sizes.op;
  const int64_t numel = job.sizes.numel;
  const T* input = job.input.device_data_as<T>();
  const Shape result_strides = ContiguousStrides(job.result_shape);
  const bool in_place = input == result && job.input.is_contiguous();
  const bool scratch_needs_init = scratch.shadow != nullptr || scratch.counts != nullptr;
  const size_t result_bytes = static_cast<size_t>(numel) * sizeof(T);
  if (!in_place && !scratch_needs_init && input == nullptr) {
    if (const cudaError_t status = cudaMemsetAsync(result, 0, result_bytes, stream);
        status != cudaSuccess) {
      return CudaStatus(std::string(op).append(": clearing the result"), status);
    }
  } else if (!in_place && !scratch_needs_init && job.input.is_contiguous()) {
    if (const cudaError_t status =
            cudaMemcpyAsync(result, input, result_bytes, cudaMemcpyDeviceToDevice, stream);
        status != cudaSuccess) {
      return CudaStatus(std::string(op).append(": copying the input"), status);
    }
  } else if (!in_place || scratch_needs_init) {
    const Shape input_strides = input != nullptr ? job.input.strides() : result_strides;
    const Walk<2> copy = MakeWalk<2>(job.result_shape, {input_strides, result_strides});
    TENSOROPS_RETURN_IF_ERROR(
        DispatchPosition(Fits32(copy, numel), [&]<typename Position>(TypeTag<Position>) {
          InitKernel<T, A, Position><<<GridFor(numel), kThreadsPerBlock, 0, stream>>>(
              IndexWalk<2, Position>(copy), static_cast<Position>(numel), input, result, scratch,
              job.include_self ? 1 : 0);
          return LaunchStatus(op);
        }));
  }

  return absl::OkStatus();
}

// ---- ScatterNd: the row reduction (UsesRowReduction, launch.h) ----
//
// Each position's row start (ResolveKernel's; -1 for an index out of range) is a key and the
// position its value; a stable radix sort of those few keys (one per row, not per element) lines
// each row's positions up in their order; then one warp per sorted position that begins a run
// (the first, or a key unlike the one before it) reduces that row: for each column, the input
// (include_self) and then every update of the run, in order, added in the accumulator (float32 for
// the 16-bit floats; Add: no fused multiply-add), divided by the count for MEAN, rounded once into
// the result. That is the CPU's order and arithmetic, hence the CPU's bytes: no shadow, no atomics,
// each touched row read once and written once, the rest of the result copied from the input.

struct RowSortLayout {
  int64_t keys[2] = {0, 0};
  int64_t positions[2] = {0, 0};
  int64_t temp = 0;
};

inline RowSortLayout PlanRowSortBuffers(int64_t slices) {
  RowSortLayout layout;
  ScratchCursor cursor;
  for (int64_t& keys : layout.keys) keys = cursor.Take(slices * static_cast<int64_t>(sizeof(Key)));
  for (int64_t& positions : layout.positions) {
    positions = cursor.Take(slices * static_cast<int64_t>(sizeof(uint32_t)));
  }
  layout.temp = cursor.at;
  return layout;
}

// RowSortBytes: the row reduction's scratch, CUB's share asked of the current device.
inline absl::StatusOr<int64_t> RowSortBytes(int64_t slices, int64_t numel) {
  size_t sort_bytes = 0;
  cub::DoubleBuffer<Key> keys(nullptr, nullptr);
  cub::DoubleBuffer<uint32_t> positions(nullptr, nullptr);
  const cudaError_t error = cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, positions,
                                                            slices, 0, EndBit(numel));
  if (error != cudaSuccess) return CubStatus("sizing the sort of scatter_nd rows", error);
  return PlanRowSortBuffers(slices).temp + static_cast<int64_t>(sort_bytes);
}

// `slices` is below 2^31 (UsesRowReduction).
__global__ void RowKeysKernel(uint32_t slices, const int64_t* __restrict__ starts, Key sentinel,
                              Key* __restrict__ keys, uint32_t* __restrict__ positions) {
  // Not unrolled: nvcc would compute the trip count of an unrolled loop with a division.
#pragma unroll 1
  TENSOROPS_GRID_STRIDE_LOOP_OF(uint32_t, b, slices) {
    const int64_t start = starts[b];
    keys[b] = start < 0 ? sentinel : static_cast<Key>(start);
    positions[b] = b;
  }
}

// One warp per sorted position: lanes take the row's columns, 32 apart, and every lane adds its
// column of the row's updates in the positions' order, so the adds are a chain per column. What
// keeps the chain short in time is loading ahead of it: the warp reads 32 positions at a time (one
// per lane, handed round by shuffles) and each lane loads kRowLoadsInFlight sources before adding
// them in order. A row that many positions hit (an embedding's padding row) then costs an add per
// update and column, not a memory round trip per update and column.
constexpr int kRowLoadsInFlight = 8;

template <typename T, typename A, typename Position>
__global__ void RowReduceKernel(int64_t slices, int64_t slice_size, const Key* __restrict__ keys,
                                const uint32_t* __restrict__ positions, Key sentinel,
                                IndexWalk<1, Position> source_walk, const T* __restrict__ source,
                                bool include_self, bool mean, T* __restrict__ result) {
  using Offset = typename IndexWalk<1, Position>::Offset;
  constexpr int kLanes = 32;
  constexpr unsigned kWarp = 0xffffffffu;
  const int lane = static_cast<int>(threadIdx.x % kLanes);
  const int64_t warps = int64_t{gridDim.x} * (kThreadsPerBlock / kLanes);
#pragma unroll 1
  for (int64_t k = int64_t{blockIdx.x} * (kThreadsPerBlock / kLanes) + threadIdx.x / kLanes;
       k < slices; k += warps) {
    // Every branch below depends only on k and the row: the warp takes it as one (the shuffles
    // need all 32 lanes).
    const Key row = keys[k];
    if (row == sentinel || (k > 0 && keys[k - 1] == row)) continue;
    int64_t end = k + 1;
    while (end < slices && keys[end] == row) ++end;
    const int64_t count = end - k + (include_self ? 1 : 0);
#pragma unroll 1
    for (int64_t group = 0; group < slice_size; group += kLanes) {
      const int64_t column = group + lane;
      const bool active = column < slice_size;
      const int64_t dest = static_cast<int64_t>(row) + column;
      A value = include_self && active ? ToAcc<A>(result[dest]) : ResetValue<SumOp, A>();
#pragma unroll 1
      for (int64_t batch = k; batch < end; batch += kLanes) {
        const int in_batch = static_cast<int>(end - batch < kLanes ? end - batch : kLanes);
        const uint32_t lane_position = lane < in_batch ? positions[batch + lane] : 0;
#pragma unroll 1
        for (int first = 0; first < in_batch; first += kRowLoadsInFlight) {
          T loaded[kRowLoadsInFlight];
#pragma unroll
          for (int u = 0; u < kRowLoadsInFlight; ++u) {
            const uint32_t position = __shfl_sync(kWarp, lane_position, (first + u) & (kLanes - 1));
            if (active && first + u < in_batch) {
              Offset from[1];
              source_walk.Offsets(static_cast<Position>(position * slice_size + column), from);
              loaded[u] = source[from[0]];
            }
          }
#pragma unroll
          for (int u = 0; u < kRowLoadsInFlight; ++u) {
            if (active && first + u < in_batch) value = Add(value, ToAcc<A>(loaded[u]));
          }
        }
      }
      if (active) {
        if (mean) value = value / static_cast<A>(count);
        result[dest] = FromAcc<T>(value);
      }
    }
  }
}

// LaunchRowReduction runs a ScatterNd SUM or MEAN by rows (UsesRowReduction): `starts` holds
// each of `slices` positions' row start (ResolveKernel), `source_walk` numbers the source's
// elements row-major over the positions and the slice, and `scratch` holds
// SortedReductionBytes(job.sizes).
template <typename T, typename Position>
absl::Status LaunchRowReduction(const ScatterJob& job, int64_t slices, int64_t slice_size,
                                const int64_t* starts, IndexWalk<1, Position> source_walk,
                                const T* source, T* result, char* scratch, int64_t scratch_bytes,
                                cudaStream_t stream) {
  using A = Acc<T, SumOp>;
  const std::string_view op = job.sizes.op;
  TENSOROPS_RETURN_IF_ERROR((LaunchInit<T, A>(job, result, Scratch{}, stream)));
  const RowSortLayout layout = PlanRowSortBuffers(slices);
  cub::DoubleBuffer<Key> keys(reinterpret_cast<Key*>(scratch + layout.keys[0]),
                              reinterpret_cast<Key*>(scratch + layout.keys[1]));
  cub::DoubleBuffer<uint32_t> positions(reinterpret_cast<uint32_t*>(scratch + layout.positions[0]),
                                        reinterpret_cast<uint32_t*>(scratch + layout.positions[1]));
  const Key sentinel = static_cast<Key>(job.sizes.numel);
  RowKeysKernel<<<GridFor(slices), kThreadsPerBlock, 0, stream>>>(
      static_cast<uint32_t>(slices), starts, sentinel, keys.Current(), positions.Current());
  TENSOROPS_RETURN_IF_ERROR(LaunchStatus(op));
  size_t temp_bytes = static_cast<size_t>(scratch_bytes - layout.temp);
  const cudaError_t status =
      cub::DeviceRadixSort::SortPairs(scratch + layout.temp, temp_bytes, keys, positions, slices, 0,
                                      EndBit(job.sizes.numel), stream);
  if (status != cudaSuccess) return CubStatus("sorting scatter_nd rows", status);
  RowReduceKernel<T, A, Position><<<GridFor(slices * 32), kThreadsPerBlock, 0, stream>>>(
      slices, slice_size, keys.Current(), positions.Current(), sentinel, source_walk, source,
      job.include_self, job.sizes.reduce == Reduction::kMean, result);
  return LaunchStatus(op);
}

// LaunchReducingScatter enqueues the pipeline on `stream`. `workspace` holds
// PlanScatterWorkspace(job.sizes).bytes, plus SortedReductionBytes(job.sizes) where it sorts.
template <typename T, typename Op, typename Updates>
absl::Status LaunchReducingScatter(const ScatterJob& job, const Updates& updates, const T* source,
                                   T* result, char* workspace, int64_t workspace_bytes,
                                   int32_t* error, cudaStream_t stream) {
  using A = Acc<T, Op>;
  const std::string_view op = job.sizes.op;
  const int64_t numel = job.sizes.numel;
  const ScatterWorkspace layout = PlanScatterWorkspace(job.sizes);
  Scratch scratch;
  if (layout.shadow >= 0) scratch.shadow = workspace + layout.shadow;
  if (layout.counts >= 0) scratch.counts = workspace + layout.counts;
  scratch.wide_counts = layout.wide_counts;
  scratch.stride = static_cast<int>(layout.stride);
  A* acc =
      scratch.shadow != nullptr ? static_cast<A*>(scratch.shadow) : reinterpret_cast<A*>(result);

  TENSOROPS_RETURN_IF_ERROR((LaunchInit<T, A>(job, result, scratch, stream)));

  if (updates.count > 0) {
    const unsigned grid = GridFor(updates.count);
    if constexpr (std::is_same_v<Op, AssignOp>) {
      if (layout.packed >= 0) {
        auto* const packed = reinterpret_cast<unsigned long long*>(workspace + layout.packed);
        if (const cudaError_t status =
                cudaMemsetAsync(packed, 0, static_cast<size_t>(numel) * sizeof(*packed), stream);
            status != cudaSuccess) {
          return CudaStatus(std::string(op).append(": clearing the packed winners"), status);
        }
        return LaunchPackedAssign(op, updates, numel, source, result, packed, error, stream);
      }
      char* const winners = workspace + layout.winners;
      if (const cudaError_t status = cudaMemsetAsync(
              winners, 0, static_cast<size_t>(layout.bytes - layout.winners), stream);
          status != cudaSuccess) {
        return CudaStatus(std::string(op).append(": clearing the winners"), status);
      }
      TENSOROPS_RETURN_IF_ERROR(
          LaunchAssign(op, updates, source, result, winners,
                       reinterpret_cast<unsigned int*>(workspace + layout.duplicates),
                       CountsFit32(job.sizes), error, stream));
    } else if (layout.sorted >= 0) {
      if constexpr (kSortable<T> && (std::is_same_v<Op, SumOp> || std::is_same_v<Op, ProdOp>)) {
        return LaunchSortedScatter<T, Op>(job, updates, source, result, workspace + layout.sorted,
                                          workspace_bytes - layout.sorted, error, stream);
      } else {
        return absl::InternalError(
            std::string(op).append(": a sorted reduction of a type without one"));
      }
    } else {
      if (!job.include_self) {
        ResetKernel<T, Op>
            <<<grid, kThreadsPerBlock, 0, stream>>>(updates, acc, scratch.stride, error);
        TENSOROPS_RETURN_IF_ERROR(LaunchStatus(op));
      }
      ReduceKernel<T, Op>
          <<<grid, kThreadsPerBlock, 0, stream>>>(updates, source, acc, scratch, error);
      TENSOROPS_RETURN_IF_ERROR(LaunchStatus(op));
    }
  }
  // 5. finalize: only a shadow (A != T) or MEAN's counts (SumOp) need it.
  if constexpr (!std::is_same_v<A, T> || std::is_same_v<Op, SumOp>) {
    if (scratch.shadow != nullptr || scratch.counts != nullptr) {
      FinalizeKernel<T, A>
          <<<GridFor(numel), kThreadsPerBlock, 0, stream>>>(numel, acc, scratch, result);
    }
  }
  return LaunchStatus(op);
}

// SortedBytes: SortedReductionBytes for an element type T of the job's (launch.h).
template <typename T>
absl::StatusOr<int64_t> SortedBytes(const ScatterSizes& sizes) {
  if constexpr (kSortable<T>) {
    // SUM and PROD accumulate in the same type.
    using A = Acc<T, SumOp>;
    const SortedLayout layout = PlanSortedBuffers(sizes.updates, sizeof(A));
    TENSOROPS_ASSIGN_OR_RETURN(const int64_t temp_bytes,
                               SortedTempBytes<A>(sizes.updates, sizes.numel));
    return layout.temp + temp_bytes;
  } else {
    return int64_t{0};
  }
}

}  // namespace
}  // namespace tensorops::cuda

#endif  // TENSOROPS_KERNELS_CUDA_REDUCING_SCATTER_CUH_
