// CUDA kernels of Gather and Scatter (and of IndexSelect and IndexReduce, which plan into them).
//
// Gather is one pass: each thread reads its index, checks it and copies one element. Scatter runs
// the same steps as the CPU's ReducingScatter, each a kernel over the result or over the updates:
//   1. init:      result (or its 32-bit shadow) = input; MEAN's counts; ASSIGN's winners = -1;
//   2. reset:     without include_self, every destination that receives an update = identity;
//   3. reduce:    atomics on the destination (compare-and-swap where the GPU has no native op);
//                 ASSIGN instead records the largest update position per destination ...
//   4. assign:    ... and the update at that position writes: last writer in row-major order, as
//                 on the CPU, whatever order the threads run in;
//   5. finalize:  MEAN divides by the counts; the shadow rounds into the result.
// Integer, ASSIGN, AMAX and AMIN results equal the CPU's exactly; float sums and products differ
// only by the order of rounding (SPEC, "Reference equalities"). A `deterministic` float SUM, MEAN
// or PROD replaces steps 2, 3 and 5 with a sort of the updates by destination and a reduction by
// key (below), whose order is fixed, so that its results repeat bit for bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cub/device/device_radix_sort.cuh"
#include "cub/device/device_reduce.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/walk.cuh"
#include "kernels/dispatch.h"
#include "kernels/reduction.h"
#include "thrust/iterator/constant_iterator.h"

namespace tensorops::cuda {
namespace {

// ---- Gather ----

template <typename Elem, typename Index>
__global__ void GatherKernel(Walk<3> walk, int64_t count, const Index* __restrict__ index,
                             const Elem* __restrict__ input, Elem* __restrict__ out,
                             int64_t axis_size, int64_t axis_stride, int32_t* error) {
  TENSOROPS_GRID_STRIDE_LOOP(position, count) {
    int64_t at[3];
    walk.Offsets(position, at);
    const int64_t value = index[at[0]];
    if (!InRange(value, axis_size)) {
      *error = 1;
      continue;
    }
    out[at[1]] = input[at[2] + WrapIndex(value, axis_size) * axis_stride];
  }
}

// ---- Scatter: accumulators and atomics ----

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;
template <typename T>
constexpr bool kIsComplex = std::is_same_v<T, Complex<float>> || std::is_same_v<T, Complex<double>>;

// kHasDeviceReduction: whether the GPU reduces T with Op. Planning rejects AMAX/AMIN on complex;
// complex128 PROD (a 128-bit compare-and-swap) stays on the CPU (DeviceScatterSupported).
template <typename T, typename Op>
constexpr bool kHasDeviceReduction =
    !std::is_same_v<Op, AssignOp> &&
    !(kIsComplex<T> && (std::is_same_v<Op, MaxOp> || std::is_same_v<Op, MinOp>)) &&
    !(std::is_same_v<T, Complex<double>> && std::is_same_v<Op, ProdOp>);

// Acc is what a destination accumulates in: float for the 16-bit floats, int32 for bool and the
// 8/16-bit integers (the GPU has no atomics narrower than 32 bits), T otherwise.
template <typename T>
using Acc = std::conditional_t<kIsHalf<T>, float,
                               std::conditional_t<(sizeof(T) < 4 && !kIsHalf<T>), int32_t, T>>;

template <typename T>
__device__ __forceinline__ Acc<T> ToAcc(T value) {
  if constexpr (kIsHalf<T>) {
    return static_cast<float>(value);
  } else {
    return static_cast<Acc<T>>(value);
  }
}

template <typename T>
__device__ __forceinline__ T FromAcc(Acc<T> value) {
  if constexpr (kIsHalf<T>) {
    return T(value);
  } else if constexpr (std::is_same_v<T, bool>) {
    return value != 0;
  } else {
    // Integers narrower than 32 bits wrap, as the CPU's accumulation in T does.
    return static_cast<T>(value);
  }
}

// AtomicCombine applies `combine(old) -> new` to *dest atomically with a compare-and-swap loop.
template <typename A, typename Combine>
__device__ __forceinline__ void AtomicCombine(A* dest, Combine combine) {
  static_assert(sizeof(A) == 4 || sizeof(A) == 8);
  using Bits = std::conditional_t<sizeof(A) == 4, unsigned int, unsigned long long>;
  Bits* address = reinterpret_cast<Bits*>(dest);
  Bits observed = *address;
  Bits expected;
  do {
    expected = observed;
    const A next = combine(BitCast<A>(expected));
    observed = atomicCAS(address, expected, BitCast<Bits>(next));
  } while (observed != expected);
}

template <typename Real>
__device__ __forceinline__ Complex<Real> Multiply(Complex<Real> a, Complex<Real> b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}

// AtomicReduce combines `value` into *dest with `Op` as SPEC defines it for element type T; `dest`
// holds an Acc<T>.
template <typename T, typename Op>
__device__ __forceinline__ void AtomicReduce(Acc<T>* dest, Acc<T> value) {
  using A = Acc<T>;
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
    // AMAX / AMIN on floats: the shared functor (NaN propagates) in a compare-and-swap loop.
    AtomicCombine(dest, [value](A old) {
      Op{}(old, value);
      return old;
    });
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

// Destination of one update: `walk` gives (index, source, destination without the axis term).
struct UpdateWalk {
  Walk<3> walk;
  int64_t count = 0;
  int64_t axis_size = 0;
  int64_t axis_stride = 0;
};

template <typename Index>
__device__ __forceinline__ bool Destination(const UpdateWalk& updates, const Index* index,
                                            int64_t position, int64_t (&at)[3], int64_t* dest,
                                            int32_t* error) {
  updates.walk.Offsets(position, at);
  const int64_t value = index[at[0]];
  if (!InRange(value, updates.axis_size)) {
    *error = 1;
    return false;
  }
  *dest = at[2] + WrapIndex(value, updates.axis_size) * updates.axis_stride;
  return true;
}

struct Scratch {
  void* shadow = nullptr;
  unsigned long long* counts = nullptr;
  long long* winners = nullptr;
};

template <typename T>
__global__ void InitKernel(Walk<2> walk, int64_t count, const T* __restrict__ input,
                           T* __restrict__ result, Scratch scratch, unsigned long long initial) {
  TENSOROPS_GRID_STRIDE_LOOP(position, count) {
    int64_t at[2];
    walk.Offsets(position, at);
    const T value = input[at[0]];
    if (scratch.shadow != nullptr) {
      static_cast<Acc<T>*>(scratch.shadow)[at[1]] = ToAcc(value);
    } else {
      result[at[1]] = value;
    }
    if (scratch.counts != nullptr) scratch.counts[at[1]] = initial;
    if (scratch.winners != nullptr) scratch.winners[at[1]] = -1;
  }
}

template <typename T, typename Index, typename Op>
__global__ void ResetKernel(UpdateWalk updates, const Index* __restrict__ index, Acc<T>* acc,
                            int32_t* error) {
  TENSOROPS_GRID_STRIDE_LOOP(position, updates.count) {
    int64_t at[3];
    int64_t dest;
    if (Destination(updates, index, position, at, &dest, error))
      acc[dest] = ResetValue<Op, Acc<T>>();
  }
}

template <typename T, typename Index, typename Op>
__global__ void ReduceKernel(UpdateWalk updates, const Index* __restrict__ index,
                             const T* __restrict__ source, Acc<T>* acc, unsigned long long* counts,
                             int32_t* error) {
  TENSOROPS_GRID_STRIDE_LOOP(position, updates.count) {
    int64_t at[3];
    int64_t dest;
    if (!Destination(updates, index, position, at, &dest, error)) continue;
    AtomicReduce<T, Op>(acc + dest, ToAcc(source[at[1]]));
    if (counts != nullptr) atomicAdd(counts + dest, 1ull);
  }
}

template <typename Index>
__global__ void WinnerKernel(UpdateWalk updates, const Index* __restrict__ index,
                             long long* winners, int32_t* error) {
  TENSOROPS_GRID_STRIDE_LOOP(position, updates.count) {
    int64_t at[3];
    int64_t dest;
    if (Destination(updates, index, position, at, &dest, error)) {
      atomicMax(winners + dest, static_cast<long long>(position));
    }
  }
}

template <typename Elem, typename Index>
__global__ void AssignKernel(UpdateWalk updates, const Index* __restrict__ index,
                             const Elem* __restrict__ source, Elem* result,
                             const long long* __restrict__ winners, int32_t* error) {
  TENSOROPS_GRID_STRIDE_LOOP(position, updates.count) {
    int64_t at[3];
    int64_t dest;
    if (!Destination(updates, index, position, at, &dest, error)) continue;
    if (winners[dest] == position) result[dest] = source[at[1]];
  }
}

template <typename T>
__global__ void FinalizeKernel(int64_t count, const Acc<T>* acc, const unsigned long long* counts,
                               T* result) {
  TENSOROPS_GRID_STRIDE_LOOP(i, count) {
    Acc<T> value = acc[i];
    if (counts != nullptr) {
      // A destination nobody wrote (count 0 without include_self) keeps its value.
      const int64_t n = counts[i] > 1 ? static_cast<int64_t>(counts[i]) : 1;
      if constexpr (std::is_integral_v<T>) {
        result[i] = FloorDivide(FromAcc<T>(value), n);
        continue;
      } else if constexpr (kIsComplex<Acc<T>>) {
        value.re /= static_cast<decltype(value.re)>(n);
        value.im /= static_cast<decltype(value.im)>(n);
      } else {
        value = value / static_cast<Acc<T>>(n);
      }
    }
    result[i] = FromAcc<T>(value);
  }
}

// ---- Scatter: the sorted (deterministic) reduction ----
//
// For `deterministic` float SUM/MEAN/PROD: every update becomes (destination, value); a stable
// radix sort by destination keeps each destination's values in row-major order of the updates; a
// reduction by key (CUB) combines each run; one thread per run then writes its destination once.
// The order of every operation is fixed by the data, so repeated calls agree bit for bit.

template <typename T>
constexpr bool kSortable = kIsHalf<T> || std::is_floating_point_v<T> || kIsComplex<T>;

template <typename Op>
struct CombineOp {
  template <typename A>
  __host__ __device__ __forceinline__ A operator()(const A& a, const A& b) const {
    if constexpr (kIsComplex<A>) {
      if constexpr (std::is_same_v<Op, ProdOp>) {
        return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
      } else {
        return {a.re + b.re, a.im + b.im};
      }
    } else if constexpr (std::is_same_v<Op, ProdOp>) {
      return a * b;
    } else {
      return a + b;
    }
  }
};

using Key = unsigned long long;

// EndBit: the key bits to sort on. Destinations are < numel and the sentinel (an update whose
// index was out of range) is numel itself.
int EndBit(int64_t numel) { return 64 - __builtin_clzll(static_cast<Key>(numel) | 1); }

// SortedLayout: where the sorted reduction's buffers lie in its scratch, in bytes.
struct SortedLayout {
  int64_t keys_in = 0, keys_out = 0, values_in = 0, values_out = 0, unique = 0, aggregates = 0,
          counts = 0, runs = 0, temp = 0;
  size_t temp_bytes = 0;
  int64_t bytes = 0;
};

template <typename T, typename Op>
SortedLayout PlanSorted(int64_t updates, int64_t numel, bool mean) {
  using A = Acc<T>;
  size_t sort_bytes = 0;
  size_t reduce_bytes = 0;
  size_t count_bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const Key*>(nullptr),
                                  static_cast<Key*>(nullptr), static_cast<const A*>(nullptr),
                                  static_cast<A*>(nullptr), updates, 0, EndBit(numel));
  cub::DeviceReduce::ReduceByKey(nullptr, reduce_bytes, static_cast<const Key*>(nullptr),
                                 static_cast<Key*>(nullptr), static_cast<const A*>(nullptr),
                                 static_cast<A*>(nullptr), static_cast<int64_t*>(nullptr),
                                 CombineOp<Op>{}, updates);
  if (mean) {
    cub::DeviceReduce::ReduceByKey(
        nullptr, count_bytes, static_cast<const Key*>(nullptr), static_cast<Key*>(nullptr),
        thrust::constant_iterator<int64_t>(1), static_cast<int64_t*>(nullptr),
        static_cast<int64_t*>(nullptr), CombineOp<SumOp>{}, updates);
  }
  const auto take = [](int64_t* at, int64_t bytes) {
    const int64_t offset = *at;
    *at += (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
    return offset;
  };
  SortedLayout layout;
  int64_t at = 0;
  const int64_t key_bytes = updates * static_cast<int64_t>(sizeof(Key));
  const int64_t value_bytes = updates * static_cast<int64_t>(sizeof(A));
  layout.keys_in = take(&at, key_bytes);
  layout.keys_out = take(&at, key_bytes);
  layout.values_in = take(&at, value_bytes);
  layout.values_out = take(&at, value_bytes);
  layout.unique = take(&at, key_bytes);
  layout.aggregates = take(&at, value_bytes);
  layout.counts = mean ? take(&at, updates * static_cast<int64_t>(sizeof(int64_t))) : -1;
  layout.runs = take(&at, sizeof(int64_t));
  layout.temp_bytes = std::max({sort_bytes, reduce_bytes, count_bytes});
  layout.temp = take(&at, static_cast<int64_t>(layout.temp_bytes));
  layout.bytes = at;
  return layout;
}

template <typename T, typename Index>
__global__ void KeysKernel(UpdateWalk updates, const Index* __restrict__ index,
                           const T* __restrict__ source, Key sentinel, Key* keys, Acc<T>* values,
                           int32_t* error) {
  TENSOROPS_GRID_STRIDE_LOOP(position, updates.count) {
    int64_t at[3];
    int64_t dest;
    const bool in_range = Destination(updates, index, position, at, &dest, error);
    keys[position] = in_range ? static_cast<Key>(dest) : sentinel;
    values[position] = ToAcc(source[at[1]]);
  }
}

template <typename T, typename Op>
__global__ void ApplyRunsKernel(int64_t max_runs, const int64_t* __restrict__ runs,
                                const Key* __restrict__ unique,
                                const Acc<T>* __restrict__ aggregates,
                                const int64_t* __restrict__ counts, Key sentinel, bool include_self,
                                T* result) {
  TENSOROPS_GRID_STRIDE_LOOP(run, max_runs) {
    if (run >= *runs || unique[run] == sentinel) continue;
    const Key dest = unique[run];
    Acc<T> value = aggregates[run];
    // The input first, then the updates: the CPU's order, up to the grouping of the sums.
    if (include_self) value = CombineOp<Op>{}(ToAcc(result[dest]), value);
    if (counts != nullptr) {
      const int64_t n = counts[run] + (include_self ? 1 : 0);
      if constexpr (kIsComplex<Acc<T>>) {
        value.re /= static_cast<decltype(value.re)>(n);
        value.im /= static_cast<decltype(value.im)>(n);
      } else {
        value = value / static_cast<Acc<T>>(n);
      }
    }
    result[dest] = FromAcc<T>(value);
  }
}

template <typename T, typename Index, typename Op>
absl::Status LaunchSortedScatter(const ScatterPlan& plan, const UpdateWalk& updates, T* result,
                                 char* scratch, int32_t* error, cudaStream_t stream) {
  using A = Acc<T>;
  const int64_t numel = NumElements(plan.result_shape);
  const bool mean = plan.reduce == Reduction::kMean;
  const SortedLayout layout = PlanSorted<T, Op>(updates.count, numel, mean);
  const auto keys_in = reinterpret_cast<Key*>(scratch + layout.keys_in);
  const auto keys_out = reinterpret_cast<Key*>(scratch + layout.keys_out);
  const auto values_in = reinterpret_cast<A*>(scratch + layout.values_in);
  const auto values_out = reinterpret_cast<A*>(scratch + layout.values_out);
  const auto unique = reinterpret_cast<Key*>(scratch + layout.unique);
  const auto aggregates = reinterpret_cast<A*>(scratch + layout.aggregates);
  const auto counts = mean ? reinterpret_cast<int64_t*>(scratch + layout.counts) : nullptr;
  const auto runs = reinterpret_cast<int64_t*>(scratch + layout.runs);
  void* temp = scratch + layout.temp;
  const Key sentinel = static_cast<Key>(numel);
  const unsigned grid = GridFor(updates.count);

  KeysKernel<T, Index><<<grid, kThreadsPerBlock, 0, stream>>>(updates, plan.index.data_as<Index>(),
                                                              plan.source.data_as<T>(), sentinel,
                                                              keys_in, values_in, error);
  size_t temp_bytes = layout.temp_bytes;
  cudaError_t status =
      cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, values_in, values_out,
                                      updates.count, 0, EndBit(numel), stream);
  if (status != cudaSuccess) return CudaStatus("sorting scatter updates", status);
  temp_bytes = layout.temp_bytes;
  status = cub::DeviceReduce::ReduceByKey(temp, temp_bytes, keys_out, unique, values_out,
                                          aggregates, runs, CombineOp<Op>{}, updates.count, stream);
  if (status != cudaSuccess) return CudaStatus("reducing scatter updates by destination", status);
  if (mean) {
    temp_bytes = layout.temp_bytes;
    status = cub::DeviceReduce::ReduceByKey(temp, temp_bytes, keys_out, unique,
                                            thrust::constant_iterator<int64_t>(1), counts, runs,
                                            CombineOp<SumOp>{}, updates.count, stream);
    if (status != cudaSuccess) return CudaStatus("counting scatter updates", status);
  }
  ApplyRunsKernel<T, Op><<<grid, kThreadsPerBlock, 0, stream>>>(
      updates.count, runs, unique, aggregates, counts, sentinel, plan.include_self, result);
  return LaunchStatus(plan.op);
}

template <typename T, typename Index>
absl::Status LaunchScatterTyped(const ScatterPlan& plan, T* result, char* workspace, int32_t* error,
                                cudaStream_t stream) {
  const int64_t numel = NumElements(plan.result_shape);
  const ScatterWorkspace layout = PlanScatterWorkspace(plan);
  Scratch scratch;
  if (layout.shadow >= 0) scratch.shadow = workspace + layout.shadow;
  if (layout.counts >= 0) {
    scratch.counts = reinterpret_cast<unsigned long long*>(workspace + layout.counts);
  }
  if (layout.winners >= 0)
    scratch.winners = reinterpret_cast<long long*>(workspace + layout.winners);
  Acc<T>* acc = scratch.shadow != nullptr ? static_cast<Acc<T>*>(scratch.shadow)
                                          : reinterpret_cast<Acc<T>*>(result);

  // 1. init, walking the (possibly strided) input at the result's shape.
  const Shape result_strides = ContiguousStrides(plan.result_shape);
  const Walk<2> copy = MakeWalk<2>(plan.result_shape, {plan.input.strides(), result_strides});
  InitKernel<T><<<GridFor(numel), kThreadsPerBlock, 0, stream>>>(
      copy, numel, plan.input.data_as<T>(), result, scratch, plan.include_self ? 1 : 0);

  UpdateWalk updates;
  updates.count = plan.index.numel();
  if (updates.count > 0) {
    // The destination is the contiguous result, its axis term added per index value.
    Shape dest_strides = plan.input.rank() == 0 ? Shape{1} : result_strides;
    updates.axis_stride = dest_strides[plan.axis];
    updates.axis_size = plan.input.rank() == 0 ? 1 : plan.input.size(plan.axis);
    dest_strides[plan.axis] = 0;
    updates.walk = MakeWalk<3>(plan.index.shape(),
                               {plan.index.strides(), plan.source.strides(), dest_strides});
    const Index* index = plan.index.data_as<Index>();
    const T* source = plan.source.data_as<T>();
    const unsigned grid = GridFor(updates.count);
    if (plan.reduce == Reduction::kAssign) {
      WinnerKernel<Index>
          <<<grid, kThreadsPerBlock, 0, stream>>>(updates, index, scratch.winners, error);
      AssignKernel<DeviceType<T>, Index><<<grid, kThreadsPerBlock, 0, stream>>>(
          updates, index, reinterpret_cast<const DeviceType<T>*>(source),
          reinterpret_cast<DeviceType<T>*>(result), scratch.winners, error);
    } else if (layout.sorted >= 0) {
      return DispatchReduction(plan.reduce, [&]<typename Op>(Op) -> absl::Status {
        if constexpr (kSortable<T> && (std::is_same_v<Op, SumOp> || std::is_same_v<Op, ProdOp>)) {
          return LaunchSortedScatter<T, Index, Op>(plan, updates, result, workspace + layout.sorted,
                                                   error, stream);
        } else {
          return absl::InternalError("scatter: a sorted reduction of a type without one");
        }
      });
    } else {
      DispatchReduction(plan.reduce, [&]<typename Op>(Op) {
        if constexpr (kHasDeviceReduction<T, Op>) {
          if (!plan.include_self) {
            ResetKernel<T, Index, Op>
                <<<grid, kThreadsPerBlock, 0, stream>>>(updates, index, acc, error);
          }
          ReduceKernel<T, Index, Op><<<grid, kThreadsPerBlock, 0, stream>>>(
              updates, index, source, acc, scratch.counts, error);
        }
      });
    }
  }
  if (scratch.shadow != nullptr || scratch.counts != nullptr) {
    FinalizeKernel<T>
        <<<GridFor(numel), kThreadsPerBlock, 0, stream>>>(numel, acc, scratch.counts, result);
  }
  return LaunchStatus(plan.op);
}

}  // namespace

int64_t SortedReductionBytes(const ScatterPlan& plan) {
  if (!UsesSortedReduction(plan) || plan.index.numel() == 0) return 0;
  return DispatchDataType(plan.result_dtype, [&]<typename Host>(TypeTag<Host>) -> int64_t {
    using T = DeviceType<Host>;
    if constexpr (kSortable<T>) {
      const int64_t numel = NumElements(plan.result_shape);
      const bool mean = plan.reduce == Reduction::kMean;
      if (plan.reduce == Reduction::kProd) {
        return PlanSorted<T, ProdOp>(plan.index.numel(), numel, mean).bytes;
      }
      return PlanSorted<T, SumOp>(plan.index.numel(), numel, mean).bytes;
    } else {
      return 0;
    }
  });
}

absl::Status LaunchGather(const GatherPlan& plan, void* result, int32_t* error_flag, void* stream) {
  const int64_t count = NumElements(plan.result_shape);
  if (count == 0) return absl::OkStatus();
  const Shape out_strides = ContiguousStrides(plan.index.shape());
  const Walk<3> walk =
      MakeWalk<3>(plan.index.shape(), {plan.index.strides(), out_strides, plan.input.strides()});
  return cpu::DispatchItemSize(ItemSize(plan.result_dtype), [&]<typename Elem>(TypeTag<Elem>) {
    return DispatchIndexType(plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) {
      GatherKernel<Elem, Index>
          <<<GridFor(count), kThreadsPerBlock, 0, static_cast<cudaStream_t>(stream)>>>(
              walk, count, plan.index.data_as<Index>(), static_cast<const Elem*>(plan.input.data()),
              static_cast<Elem*>(result), plan.input_axis_size, plan.input_axis_stride, error_flag);
      return LaunchStatus(plan.op);
    });
  });
}

absl::Status LaunchScatter(const ScatterPlan& plan, void* result, void* workspace,
                           int32_t* error_flag, void* stream) {
  return DispatchDataType(plan.result_dtype, [&]<typename Host>(TypeTag<Host>) {
    using T = DeviceType<Host>;
    return DispatchIndexType(plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) {
      return LaunchScatterTyped<T, Index>(plan, static_cast<T*>(result),
                                          static_cast<char*>(workspace), error_flag,
                                          static_cast<cudaStream_t>(stream));
    });
  });
}

}  // namespace tensorops::cuda
