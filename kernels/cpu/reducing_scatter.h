// ReducingScatter: the reduction steps every scatter-like CPU kernel shares (Scatter, IndexReduce,
// ScatterNd). A kernel supplies only how its updates are enumerated; this class owns what the
// "Reductions" section of docs/semantics.md asks of every one of them:
//   1. when accumulating float16/bfloat16 (SUM, PROD, MEAN), a float32 shadow of the result, so
//      every destination rounds once at the end (its rows padded where their length would make
//      them alias in the caches, for enumerations that address it by dest_strides());
//   2. when include_self is false, every destination that receives an update is first reset to
//      the reduction's identity (by the same enumeration, so PyTorch's semantics fall out
//      exactly);
//   3. the reducing pass (MEAN also counts arrivals per destination);
//   4. MEAN divides by the counts (floor division for integers); the shadow rounds into the result.
//
//   ReducingScatter<float, SumOp> scatter(result, shape, Reduction::kSum, /*include_self=*/true,
//                                         /*updates=*/index.numel());
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
#include <limits>
#include <type_traits>

#include "kernels/cpu/parallel.h"
#include "kernels/reduction.h"
#include "kernels/shape.h"
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

  // `result` (contiguous, of `shape`) holds the initial values and receives the reduced ones.
  // `reduce` is the reduction that `Op` implements (MEAN runs with SumOp). `updates` is the
  // most updates one enumeration makes (it bounds MEAN's counts). With `may_pad_rows`, a float32
  // shadow may get padded rows (see kRowPadding); the enumeration then addresses its
  // destinations with dest_strides(), not with the result's own strides.
  ReducingScatter(T* result, ShapeSpan shape, Reduction reduce, bool include_self, int64_t updates,
                  bool may_pad_rows = false)
      : result_(result),
        numel_(NumElements(shape)),
        reduce_(reduce),
        include_self_(include_self),
        updates_(updates),
        dest_strides_(ContiguousStrides(shape)),
        rows_(numel_),
        initial_(result) {
    if (shape.empty() || numel_ == 0) return;
    row_length_ = shape.back();
    rows_ = numel_ / row_length_;
    dest_row_stride_ = row_length_;
    if (!std::is_same_v<Acc, T> && may_pad_rows && rows_ > 1 &&
        (row_length_ * static_cast<int64_t>(sizeof(Acc))) % kAliasingRowBytes == 0) {
      dest_row_stride_ = row_length_ + kRowPadding;
      for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) {
        dest_strides_[d] = d == static_cast<int64_t>(shape.size()) - 2
                               ? dest_row_stride_
                               : dest_strides_[d + 1] * shape[d + 1];
      }
    }
  }

  // The strides, in elements, by which the enumeration's destination offsets address the result
  // (the row-major strides of `shape`, or the padded shadow's).
  const Shape& dest_strides() const { return dest_strides_; }

  // True when Run reads and writes nothing of the result before its one enumeration (no shadow to
  // fill, no reset pass), and the enumeration applies to the result itself: a caller may then
  // fill each part of the result as the enumeration reaches it.
  bool result_untouched_before_updates() const {
    return std::is_same_v<Acc, T> && (include_self_ || reduce_ == Reduction::kAssign);
  }

  // True when Run reduces into a float32 shadow and then writes every element of the result from
  // it: the initial values may then come from elsewhere (SetInitialValues).
  static constexpr bool kWritesWholeResult = !std::is_same_v<Acc, T>;

  // With kWritesWholeResult, Run fills the shadow from `initial` (contiguous, of the result's
  // shape) instead of from the result. An out-of-place Scatter passes its input, which saves
  // copying it into the result only for the shadow to read it back (bfloat16 1 MiB last-axis
  // Scatter PROD: that copy was 12% of the call).
  void SetInitialValues(const T* initial) { initial_ = initial; }

  // Whether RunLines takes a result whose lines (last dimension) hold `line_length` elements,
  // reduced by `updates` updates in all.
  static bool RunsLines(int64_t line_length, int64_t updates) {
    return kWritesWholeResult && line_length <= kMaxLineElements &&
           updates < std::numeric_limits<int32_t>::max();
  }

  // RunLines is Run for an enumeration by the result's lines (RunsLines must have said yes, and
  // the shadow must not be padded). `for_each_line(line)` calls `line(line_offset,
  // for_each_line_update)` once for every line of the result (its last dimension, starting at
  // element `line_offset`), possibly concurrently for different lines, and returns false when a
  // call did; `for_each_line_update(apply)` calls `apply(position_in_line, value)` for the line's
  // updates in order and returns false when it met an out-of-range index.
  //
  // Each line is reduced in a float32 shadow of its own on the stack, which stays in the L1 cache
  // from its fill to its rounding into the result: Run's whole-result shadow took a pass to fill
  // and one to round, each through the L2 cache and each a parallel loop of its own (bfloat16
  // 1 MiB last-axis Scatter PROD, [512, 1024]: see bench/README.md).
  template <typename ForEachLine>
  bool RunLines(const ForEachLine& for_each_line) {
    static_assert(kWritesWholeResult);
    const int64_t length = row_length_;
    return for_each_line([&](int64_t line_offset, const auto& for_each_line_update) {
      LineShadow shadow;
      Acc* sums = shadow.sums;
      const T* initial = initial_ + line_offset;
      for (int64_t i = 0; i < length; ++i) sums[i] = static_cast<Acc>(initial[i]);
      if (!include_self_) {
        const auto reset = [sums](int64_t at, const T&) { sums[at] = Identity<Op, Acc>(); };
        if (!for_each_line_update(reset)) return false;
      }
      T* out = result_ + line_offset;
      if constexpr (std::is_same_v<Op, SumOp>) {
        if (reduce_ == Reduction::kMean) {
          int32_t* counts = shadow.counts;
          std::fill(counts, counts + length, include_self_ ? 1 : 0);
          const auto sum_and_count = [sums, counts](int64_t at, const T& value) {
            sums[at] += ToAccumulator(value);
            ++counts[at];
          };
          if (!for_each_line_update(sum_and_count)) return false;
          // A destination nobody wrote (count 0 without include_self) keeps its value.
          for (int64_t i = 0; i < length; ++i) {
            out[i] = T(sums[i] / static_cast<float>(std::max(counts[i], 1)));
          }
          return true;
        }
      }
      const auto reduce = [sums](int64_t at, const T& value) {
        Combine(sums[at], ToAccumulator(value));
      };
      if (!for_each_line_update(reduce)) return false;
      for (int64_t i = 0; i < length; ++i) out[i] = T(sums[i]);
      return true;
    });
  }

  template <typename ForEachUpdate>
  bool Run(const ForEachUpdate& for_each_update) {
    Acc* dest = reinterpret_cast<Acc*>(result_);
    Tensor shadow;
    if constexpr (!std::is_same_v<Acc, T>) {
      shadow = Tensor(DataType::kFloat32, {rows_ * dest_row_stride_});
      dest = shadow.data_as<Acc>();
      const T* initial = initial_;
      ForEachRowRange([&](int64_t at, int64_t from, int64_t count) {
        for (int64_t i = 0; i < count; ++i) dest[at + i] = static_cast<Acc>(initial[from + i]);
      });
    }
    // ASSIGN has no identity to reset to (its reduce_ is kAssign, its Op AssignOp): not even
    // instantiated, the reset enumeration would be a twelfth of every scatter's code.
    if constexpr (!std::is_same_v<Op, AssignOp>) {
      if (!include_self_) {
        const auto reset = [dest](int64_t offset, const T&) { dest[offset] = Identity<Op, Acc>(); };
        if (!for_each_update(reset)) return false;
      }
    }
    if constexpr (std::is_same_v<Op, SumOp>) {
      if (reduce_ == Reduction::kMean) return RunMean(dest, for_each_update);
    }
    const auto reduce = [dest](int64_t offset, const T& value) {
      Combine(dest[offset], ToAccumulator(value));
    };
    if (!for_each_update(reduce)) return false;
    if constexpr (!std::is_same_v<Acc, T>) {
      ForEachRowRange([&](int64_t at, int64_t from, int64_t count) {
        for (int64_t i = 0; i < count; ++i) result_[from + i] = T(dest[at + i]);
      });
    }
    return true;
  }

 private:
  // A float32 shadow whose rows are a multiple of kAliasingRowBytes long gets kRowPadding more
  // elements per row. Rows at such a stride map to a few sets of each cache, so an axis-0 scatter,
  // whose updates go down the rows of a block of columns, evicts its own lines: bf16 1 MiB
  // ([512, 1024], a 4 KiB shadow row) along axis 0 spent twice as long in its reducing pass as
  // with rows 64 bytes longer (standalone, 762 against 380 µs).
  static constexpr int64_t kAliasingRowBytes = 1024;
  static constexpr int64_t kRowPadding = 64 / sizeof(float);

  // Combine applies Op to a destination. A float32 product is taken in double and rounded to
  // float32 once, which gives the very bits of a float32 multiply (the exact product of two
  // float32 values has at most 48 significant bits and fits a double, so the one rounding is the
  // same, into the subnormals and to infinity included), but without its cost on x86: a float32
  // multiply with a subnormal operand or result takes a microcode assist, 32 ns against 0.65 ns on
  // the Xeon of bench/README.md (issue 38), while the conversions take none. Products of many
  // factors below 1 go through the subnormals on their way to zero: bfloat16 1 MiB dup1% Scatter
  // PROD, about 100 factors per destination, spent most of its time in those assists.
  static void Combine(Acc& dest, Acc value) {
#if defined(__GNUC__) && defined(__x86_64__)
    if constexpr (std::is_same_v<Op, ProdOp> && std::is_same_v<Acc, float>) {
      double product = static_cast<double>(dest) * static_cast<double>(value);
      // GCC narrows (float)((double)a * (double)b) back into a float32 multiply, since it is
      // exact; the empty asm hides the product from that rewrite.
      asm("" : "+x"(product));
      dest = static_cast<float>(product);
      return;
    }
#endif
    Op{}(dest, value);
  }

  static Acc ToAccumulator(const T& value) {
    if constexpr (std::is_same_v<T, Acc>) {
      return value;
    } else {
      return static_cast<Acc>(value);
    }
  }

  // ForEachRowRange calls `body(dest_offset, result_offset, count)` over disjoint ranges that
  // cover the result, each contiguous in the result and in the destination, in parallel.
  template <typename Body>
  void ForEachRowRange(const Body& body) const {
    if (dest_row_stride_ == row_length_) {
      ParallelFor(numel_, kMinParallelElements,
                  [&](int64_t begin, int64_t end) { body(begin, begin, end - begin); });
      return;
    }
    ParallelFor(rows_, std::max<int64_t>(1, kMinParallelElements / row_length_),
                [&](int64_t begin, int64_t end) {
                  for (int64_t row = begin; row < end; ++row) {
                    body(row * dest_row_stride_, row * row_length_, row_length_);
                  }
                });
  }

  // MEAN: sums and arrival counts in one pass, then one division pass. The counts are int32 when
  // the number of updates keeps every count below its range (any realistic call), else int64:
  // int32 takes half the memory, and the division pass vectorizes (SSE2 converts int32, not
  // int64, to float). float32 1 MiB last-axis Scatter MEAN: the scalar divss pass was 29% of the
  // call.
  template <typename ForEachUpdate>
  bool RunMean(Acc* dest, const ForEachUpdate& for_each_update) {
    // A destination's count is at most the updates plus one for include_self.
    if (updates_ < std::numeric_limits<int32_t>::max()) {
      return RunMeanCounting<int32_t>(dest, for_each_update);
    }
    return RunMeanCounting<int64_t>(dest, for_each_update);
  }

  template <typename Count, typename ForEachUpdate>
  bool RunMeanCounting(Acc* dest, const ForEachUpdate& for_each_update) {
    const int64_t dest_numel = rows_ * dest_row_stride_;
    Tensor counts(std::is_same_v<Count, int32_t> ? DataType::kInt32 : DataType::kInt64,
                  {dest_numel + kCountsSlack<Count>});
    Count* count = ShiftedFrom(dest, counts.data_as<Count>());
    const Count initial = include_self_ ? 1 : 0;
    ParallelFor(dest_numel, kMinParallelElements, [&](int64_t begin, int64_t end) {
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

  // The counts start 512 bytes (mod 4 KiB) after the sums. When count[offset] had the low 12 bits
  // of dest[offset], or of a destination a few updates away, its load waited for the store to that
  // destination (4K aliasing), and every update of a run waited for the one before: float32 64 MiB
  // axis-0 dup1% MEAN took 91-101 ms at a shift of 0, 40 ms at 512. The shift has to stay clear of
  // row strides too: with rows 2 KiB apart (float32 [512, 512]), a shift of 2 KiB aliases like 0
  // (1 MiB axis-0 MEAN 476-609 against 249-339 µs). 512 bytes is 128 float32 columns from the
  // alias of any row a multiple of 1 KiB long, farther than a run's updates stay in flight.
  static constexpr int64_t kPageBytes = 4096;
  static constexpr int64_t kCountsShiftBytes = 512;
  // The counts tensor's extra elements, room for any shift below a page.
  template <typename Count>
  static constexpr int64_t kCountsSlack = kPageBytes / sizeof(Count);

  // RunLines' shadow of one line, with MEAN's counts kCountsShiftBytes after the sums modulo a
  // page, for the reason above. 32.5 KiB of stack: lines longer than kMaxLineElements take Run's
  // shadow.
  static constexpr int64_t kMaxLineElements = 4096;
  struct LineShadow {
    alignas(64) Acc sums[kMaxLineElements];
    unsigned char counts_shift[kCountsShiftBytes];
    int32_t counts[kMaxLineElements];
  };
  static_assert(sizeof(Acc) * kMaxLineElements % kPageBytes == 0);

  // The first Count in `counts` (kCountsSlack<Count> more than needed) kCountsShiftBytes after
  // `dest`, modulo a page.
  template <typename Count>
  static Count* ShiftedFrom(const Acc* dest, Count* counts) {
    const auto page_offset = [](const void* p) {
      return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) % kPageBytes);
    };
    const int64_t skip_bytes =
        (page_offset(dest) + kCountsShiftBytes - page_offset(counts) + kPageBytes) % kPageBytes;
    return counts + skip_bytes / static_cast<int64_t>(sizeof(Count));
  }

  template <typename Count>
  void DivideByCounts(const Acc* dest, const Count* count) const {
    ForEachRowRange([&](int64_t at, int64_t from, int64_t length) {
      for (int64_t i = 0; i < length; ++i) {
        // A destination nobody wrote (count 0 without include_self) keeps its value.
        const Count n = std::max<Count>(count[at + i], 1);
        if constexpr (std::is_integral_v<Acc>) {
          result_[from + i] = FloorDivide(dest[at + i], static_cast<int64_t>(n));
        } else if constexpr (std::is_same_v<Acc, T>) {
          using Real = decltype(std::abs(dest[at + i]));
          result_[from + i] = dest[at + i] / static_cast<Real>(n);
        } else {
          result_[from + i] = T(dest[at + i] / static_cast<float>(n));
        }
      }
    });
  }

  T* result_;
  int64_t numel_;
  Reduction reduce_;
  bool include_self_;
  int64_t updates_;
  Shape dest_strides_;
  // The result as rows_ rows of row_length_ elements (its last dimension), the destination's rows
  // dest_row_stride_ apart (row_length_ unless the shadow is padded).
  int64_t rows_;
  // Where the shadow's initial values are read (the result unless SetInitialValues said so).
  const T* initial_;
  int64_t row_length_ = 1;
  int64_t dest_row_stride_ = 1;
};

}  // namespace tensorops::cpu

#endif  // TENSOROPS_KERNELS_CPU_REDUCING_SCATTER_H_
