// ReducingScatter: the reduction steps every scatter-like CPU kernel shares (Scatter, IndexReduce,
// ScatterNd). A kernel supplies only how its updates are enumerated; this class owns what SPEC's
// "Reductions" section asks of every one of them:
//   1. when accumulating float16/bfloat16 (SUM, PROD, MEAN), a float32 shadow of the result, so
//      every destination rounds once at the end;
//   2. when include_self is false, every destination that receives an update is first reset to
//      the reduction's identity (by the same enumeration, so PyTorch's semantics fall out
//      exactly);
//   3. the reducing pass (MEAN also counts arrivals per destination);
//   4. MEAN divides by the counts (floor division for integers); the shadow rounds into the result.
//
//   ReducingScatter<float, SumOp> scatter(result, numel, Reduction::kSum, /*include_self=*/true);
//   bool ok = scatter.Run([&](const auto& apply) { return walker.ForEach(apply); });
//
// The enumeration `for_each_update(apply)` calls `apply(dest_offset, value)` once per update and
// returns false when it met an out-of-range index (Run then returns false and the result is
// unspecified). It may call `apply` concurrently, but never concurrently for one destination, and
// it must visit the updates of one destination in row-major order of the updates (that order is
// what makes ASSIGN last-writer-wins). It is called up to twice per Run.
#ifndef TENSOROPS_KERNELS_CPU_REDUCING_SCATTER_H_
#define TENSOROPS_KERNELS_CPU_REDUCING_SCATTER_H_

#include <algorithm>
#include <complex>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/parallel.h"
#include "kernels/reduction.h"
#include "kernels/tensor.h"

namespace tensorops::cpu {

// Accumulator of a reduction over elements of type T: float32 for the 16-bit floats under
// SUM/PROD/MEAN (rounded once at the end), T itself otherwise.
template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;
template <typename Op>
constexpr bool kIsArithmetic = std::is_same_v<Op, SumOp> || std::is_same_v<Op, ProdOp>;
template <typename T, typename Op>
using Accumulator = std::conditional_t<kIsHalf<T> && kIsArithmetic<Op>, float, T>;

template <typename T, typename Op>
class ReducingScatter {
 public:
  using Acc = Accumulator<T, Op>;

  // `result` (contiguous, `numel` elements) holds the initial values and receives the reduced
  // ones. `reduce` is the SPEC reduction that `Op` implements (MEAN runs with SumOp).
  ReducingScatter(T* result, int64_t numel, Reduction reduce, bool include_self)
      : result_(result), numel_(numel), reduce_(reduce), include_self_(include_self) {}

  template <typename ForEachUpdate>
  bool Run(const ForEachUpdate& for_each_update) {
    Acc* dest = reinterpret_cast<Acc*>(result_);
    Tensor shadow;
    if constexpr (!std::is_same_v<Acc, T>) {
      shadow = Tensor(DataType::kFloat32, {numel_});
      dest = shadow.data_as<Acc>();
      ParallelFor(numel_, kMinParallelElements, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) dest[i] = static_cast<Acc>(result_[i]);
      });
    }
    if (!include_self_ && reduce_ != Reduction::kAssign) {
      const auto reset = [dest](int64_t offset, const T&) { dest[offset] = Identity<Op, Acc>(); };
      if (!for_each_update(reset)) return false;
    }
    if constexpr (std::is_same_v<Op, SumOp>) {
      if (reduce_ == Reduction::kMean) return RunMean(dest, for_each_update);
    }
    const auto reduce = [dest](int64_t offset, const T& value) {
      Op{}(dest[offset], ToAccumulator(value));
    };
    if (!for_each_update(reduce)) return false;
    if constexpr (!std::is_same_v<Acc, T>) {
      ParallelFor(numel_, kMinParallelElements, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) result_[i] = T(dest[i]);
      });
    }
    return true;
  }

 private:
  static Acc ToAccumulator(const T& value) {
    if constexpr (std::is_same_v<T, Acc>) {
      return value;
    } else {
      return static_cast<Acc>(value);
    }
  }

  // MEAN: sums and arrival counts in one pass, then one division pass.
  template <typename ForEachUpdate>
  bool RunMean(Acc* dest, const ForEachUpdate& for_each_update) {
    Tensor counts(DataType::kInt64, {numel_});
    int64_t* count = counts.data_as<int64_t>();
    const int64_t initial = include_self_ ? 1 : 0;
    ParallelFor(numel_, kMinParallelElements, [&](int64_t begin, int64_t end) {
      std::fill(count + begin, count + end, initial);
    });
    const auto sum_and_count = [dest, count](int64_t offset, const T& value) {
      SumOp{}(dest[offset], ToAccumulator(value));
      ++count[offset];
    };
    if (!for_each_update(sum_and_count)) return false;
    DivideByCounts(dest, count);
    return true;
  }

  void DivideByCounts(const Acc* dest, const int64_t* count) const {
    ParallelFor(numel_, kMinParallelElements, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        // A destination nobody wrote (count 0 without include_self) keeps its value.
        const int64_t n = std::max<int64_t>(count[i], 1);
        if constexpr (std::is_integral_v<Acc>) {
          result_[i] = FloorDivide(dest[i], n);
        } else if constexpr (std::is_same_v<Acc, T>) {
          using Real = decltype(std::abs(dest[i]));
          result_[i] = dest[i] / static_cast<Real>(n);
        } else {
          result_[i] = T(dest[i] / static_cast<float>(n));
        }
      }
    });
  }

  T* result_;
  int64_t numel_;
  Reduction reduce_;
  bool include_self_;
};

}  // namespace tensorops::cpu

#endif  // TENSOROPS_KERNELS_CPU_REDUCING_SCATTER_H_
