// AxisWalk: the loop structure shared by the CPU kernels of ops that index along one axis (Gather,
// Scatter and their relatives). It visits every position of an iteration shape (the index
// tensor's) with three operands' offsets:
//
//   kIndex    the index tensor,
//   kDirect   the operand addressed at the same position (Gather's result, Scatter's source),
//   kIndexed  the operand addressed through the index value along `axis` (Gather's input,
//             Scatter's destination). Its stride along `axis` must be given as 0: the kernel adds
//             `index_value * axis_stride` itself.
//
// The walk hands the kernel runs: (offsets, count, steps), `count` consecutive positions along
// one dimension. The kernel's inner loop is then a tight strided loop, with no per-element
// coordinate arithmetic or dispatch.
//
// Ordering guarantee (what makes Scatter's ASSIGN last-writer-wins and its reductions race-free):
// positions are split between threads only across the dimensions other than `axis`; all positions
// that share the non-axis coordinates are visited by one thread in increasing order along `axis`.
// Two positions that differ in a non-axis coordinate never address the same destination, so
// threads never write the same element.
#ifndef TENSOROPS_KERNELS_CPU_AXIS_WALK_H_
#define TENSOROPS_KERNELS_CPU_AXIS_WALK_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/parallel.h"
#include "kernels/shape.h"
#include "tbb/blocked_range2d.h"
#include "tbb/parallel_for.h"
#include "tbb/task_arena.h"

namespace tensorops::cpu {

class AxisWalk {
 public:
  static constexpr int kIndex = 0;
  static constexpr int kDirect = 1;
  static constexpr int kIndexed = 2;
  static constexpr int kOperands = 3;
  // kMinRunElements: the run length a parallel walk aims for (see ForEachRun).
  static constexpr int64_t kMinRunElements = 512;
  using Offsets = std::array<int64_t, kOperands>;

  // `shape` is the iteration shape and `strides[k]` operand k's strides over it, in elements.
  AxisWalk(ShapeSpan shape, int64_t axis, const std::array<Shape, kOperands>& strides)
      : axis_size_(shape[axis]) {
    for (int k = 0; k < kOperands; ++k) axis_steps_[k] = strides[k][axis];
    Coalesce(shape, strides, 0, axis, &outer_shape_, &outer_strides_);
    Coalesce(shape, strides, axis + 1, static_cast<int64_t>(shape.size()), &inner_shape_,
             &inner_strides_);
    outer_count_ = NumElements(outer_shape_);
    inner_count_ = NumElements(inner_shape_);
  }

  int64_t num_positions() const { return outer_count_ * axis_size_ * inner_count_; }

  // ForEachRun calls `run(offsets, count, steps)` until every position is visited or a run returns
  // false; returns false when one did. Runs on several threads when the walk is large (see the
  // ordering guarantee above); `run` must be safe to call concurrently for disjoint positions.
  //
  // `ordered` keeps the ordering guarantee; a kernel whose result does not depend on the order
  // (Gather) passes false, which also lets a long axis be split between threads.
  template <typename Run>
  bool ForEachRun(const Run& run, bool ordered = true) const {
    const int64_t positions = num_positions();
    if (positions == 0) return true;
    if (positions < kMinParallelElements) return RunBox(0, outer_count_, 0, inner_count_, run);
    if (!ordered && inner_shape_.empty()) return SplitAlongAxis(run);
    // Tasks of about kMinParallelElements positions: whole outer rows when a row is small, else
    // one outer row split along the inner positions. A task's inner positions are also the
    // length of its runs, so they get at least kMinRunElements of them while that still leaves
    // a few tasks per thread: a tall matrix split into tasks of a few columns each had every
    // run touch one cache line and one page per row (64 MiB axis-0 cases: runs of 8 elements).
    const int64_t row = axis_size_ * inner_count_;
    const int64_t outer_grain = std::max<int64_t>(1, kMinParallelElements / row);
    const int64_t threads = tbb::this_task_arena::max_concurrency();
    const int64_t run_grain =
        std::min<int64_t>(kMinRunElements, std::max<int64_t>(1, inner_count_ / (4 * threads)));
    const int64_t inner_grain =
        row > kMinParallelElements
            ? std::max<int64_t>(run_grain, kMinParallelElements / std::max<int64_t>(axis_size_, 1))
            : inner_count_;
    std::atomic<bool> ok{true};
    tbb::parallel_for(
        tbb::blocked_range2d<int64_t>(0, outer_count_, outer_grain, 0, inner_count_, inner_grain),
        [&](const tbb::blocked_range2d<int64_t>& box) {
          if (!ok.load(std::memory_order_relaxed)) return;
          if (!RunBox(box.rows().begin(), box.rows().end(), box.cols().begin(), box.cols().end(),
                      run)) {
            ok.store(false, std::memory_order_relaxed);
          }
        });
    return ok.load();
  }

 private:
  // Runs the walk with tasks that cover parts of the axis; only for unordered walks whose axis is
  // the innermost dimension.
  template <typename Run>
  bool SplitAlongAxis(const Run& run) const {
    const int64_t axis_grain = std::max<int64_t>(1, std::min(axis_size_, kMinParallelElements));
    const int64_t outer_grain =
        std::max<int64_t>(1, kMinParallelElements / std::max<int64_t>(axis_size_, 1));
    std::atomic<bool> ok{true};
    tbb::parallel_for(
        tbb::blocked_range2d<int64_t>(0, outer_count_, outer_grain, 0, axis_size_, axis_grain),
        [&](const tbb::blocked_range2d<int64_t>& box) {
          for (int64_t outer = box.rows().begin(); outer < box.rows().end(); ++outer) {
            if (!ok.load(std::memory_order_relaxed)) return;
            Offsets offsets = OuterOffsets(outer);
            for (int k = 0; k < kOperands; ++k) offsets[k] += box.cols().begin() * axis_steps_[k];
            if (!run(offsets, box.cols().size(), axis_steps_))
              ok.store(false, std::memory_order_relaxed);
          }
        });
    return ok.load();
  }

  // Appends the dimensions [begin, end) of `shape` to `out_shape`, dropping size-1 dimensions and
  // merging neighbours that are contiguous with each other in every operand.
  static void Coalesce(ShapeSpan shape, const std::array<Shape, kOperands>& strides, int64_t begin,
                       int64_t end, Shape* out_shape, std::array<Shape, kOperands>* out_strides) {
    for (int64_t d = begin; d < end; ++d) {
      if (shape[d] == 1) continue;
      bool mergeable = !out_shape->empty();
      for (int k = 0; k < kOperands && mergeable; ++k) {
        mergeable = (*out_strides)[k].back() == strides[k][d] * shape[d];
      }
      if (mergeable) {
        out_shape->back() *= shape[d];
        for (int k = 0; k < kOperands; ++k) (*out_strides)[k].back() = strides[k][d];
      } else {
        out_shape->push_back(shape[d]);
        for (int k = 0; k < kOperands; ++k) (*out_strides)[k].push_back(strides[k][d]);
      }
    }
  }

  Offsets OuterOffsets(int64_t outer) const {
    Offsets offsets{};
    for (int64_t d = static_cast<int64_t>(outer_shape_.size()) - 1; d >= 0 && outer > 0; --d) {
      const int64_t coord = outer % outer_shape_[d];
      outer /= outer_shape_[d];
      for (int k = 0; k < kOperands; ++k) offsets[k] += coord * outer_strides_[k][d];
    }
    return offsets;
  }

  // Visits outer positions [outer_begin, outer_end) x inner positions [inner_begin, inner_end), all
  // positions along the axis for each, in row-major order.
  template <typename Run>
  bool RunBox(int64_t outer_begin, int64_t outer_end, int64_t inner_begin, int64_t inner_end,
              const Run& run) const {
    for (int64_t outer = outer_begin; outer < outer_end; ++outer) {
      const Offsets base = OuterOffsets(outer);
      if (inner_shape_.empty()) {
        // The axis is the innermost non-trivial dimension: one run along it.
        if (!run(base, axis_size_, axis_steps_)) return false;
        continue;
      }
      for (int64_t a = 0; a < axis_size_; ++a) {
        Offsets at = base;
        for (int k = 0; k < kOperands; ++k) at[k] += a * axis_steps_[k];
        if (!InnerRuns(at, inner_begin, inner_end, run)) return false;
      }
    }
    return true;
  }

  // Visits inner positions [begin, end) from `at`, one run per stretch of the last inner dimension.
  template <typename Run>
  bool InnerRuns(const Offsets& at, int64_t begin, int64_t end, const Run& run) const {
    const int64_t last = static_cast<int64_t>(inner_shape_.size()) - 1;
    Offsets last_steps;
    for (int k = 0; k < kOperands; ++k) last_steps[k] = inner_strides_[k][last];
    if (last == 0) {
      Offsets offsets = at;
      for (int k = 0; k < kOperands; ++k) offsets[k] += begin * last_steps[k];
      return run(offsets, end - begin, last_steps);
    }
    std::array<int64_t, kMaxRank> coords{};
    Offsets offsets = at;
    for (int64_t d = last, rest = begin; d >= 0; --d) {
      coords[d] = rest % inner_shape_[d];
      rest /= inner_shape_[d];
      for (int k = 0; k < kOperands; ++k) offsets[k] += coords[d] * inner_strides_[k][d];
    }
    for (int64_t position = begin; position < end;) {
      const int64_t count = std::min(end - position, inner_shape_[last] - coords[last]);
      if (!run(offsets, count, last_steps)) return false;
      position += count;
      coords[last] += count;
      for (int k = 0; k < kOperands; ++k) offsets[k] += count * last_steps[k];
      // Carry into the outer inner dimensions.
      for (int64_t d = last; d > 0 && coords[d] == inner_shape_[d]; --d) {
        for (int k = 0; k < kOperands; ++k) {
          offsets[k] += inner_strides_[k][d - 1] - coords[d] * inner_strides_[k][d];
        }
        coords[d] = 0;
        ++coords[d - 1];
      }
    }
    return true;
  }

  int64_t axis_size_;
  Offsets axis_steps_{};
  Shape outer_shape_;
  std::array<Shape, kOperands> outer_strides_;
  Shape inner_shape_;
  std::array<Shape, kOperands> inner_strides_;
  int64_t outer_count_ = 1;
  int64_t inner_count_ = 1;
};

// A run's step known at compile time (see WithRunSteps).
template <int64_t kStep>
using ConstantStep = std::integral_constant<int64_t, kStep>;

// WithRunSteps calls `visit(index_step, direct_step, indexed_step)` with a run's steps, as
// ConstantStep values in the two layouts that cover almost every large run (index and direct
// operand contiguous, the indexed operand either fixed on one line or moving with them), else as
// int64_t. A run body instantiated with constants compiles to a loop of a few instructions;
// with runtime steps it had twice as many, and the 64 MiB last-axis Gather was bound by them
// (a standalone loop of the same accesses ran 1.5x faster than the generic run).
template <typename Visit>
inline bool WithRunSteps(const AxisWalk::Offsets& step, const Visit& visit) {
  if (step[AxisWalk::kIndex] == 1 && step[AxisWalk::kDirect] == 1) {
    if (step[AxisWalk::kIndexed] == 0)
      return visit(ConstantStep<1>{}, ConstantStep<1>{}, ConstantStep<0>{});
    if (step[AxisWalk::kIndexed] == 1)
      return visit(ConstantStep<1>{}, ConstantStep<1>{}, ConstantStep<1>{});
  }
  return visit(step[AxisWalk::kIndex], step[AxisWalk::kDirect], step[AxisWalk::kIndexed]);
}

// LoadsThenStores visits positions [begin, end) of a run whose indices `value_at(i)` are checked,
// eight at a time: the eight loads, then the eight stores. Issued one after the other, each load
// followed the previous position's store, and a load whose address matched a store still waiting
// for its cache line in the low 12 bits (4K aliasing) waited for it: with int64 rows of 4 KiB,
// an axis-0 Scatter whose result sat 64-128 bytes off its source ran 5x slower (standalone, 1 MiB:
// 450-470 against 85-90 µs). Loads first: 100-140 µs there, and Gather along axis 0 20% faster
// at every offset (f32 1 MiB: 174 against 137 µs).
template <typename ValueAt, typename Load, typename Store>
inline void LoadsThenStores(int64_t begin, int64_t end, const ValueAt& value_at, const Load& load,
                            const Store& store) {
  constexpr int64_t kGroup = 8;
  using Loaded = decltype(load(int64_t{0}, int64_t{0}));
  int64_t i = begin;
  for (; i + kGroup <= end; i += kGroup) {
    int64_t values[kGroup];
    Loaded loaded[kGroup];
#pragma GCC unroll 8
    for (int64_t k = 0; k < kGroup; ++k) {
      values[k] = value_at(i + k);
      loaded[k] = load(i + k, values[k]);
    }
#pragma GCC unroll 8
    for (int64_t k = 0; k < kGroup; ++k) store(i + k, values[k], loaded[k]);
  }
  for (; i < end; ++i) {
    const int64_t value = value_at(i);
    store(i, value, load(i, value));
  }
}

// ForEachIndexInRun visits i in [0, count) with `value`, the run's i-th index (at
// `index[i * index_step]`) wrapped into [0, axis_size), in two steps: `load(i, value)` reads what
// position i moves and returns it, `store(i, value, loaded)` writes it. It returns false when an
// index lies outside [-axis_size, axis_size), after visiting none or some of the positions. A
// position's store may come after later positions' loads, never before its own load or an earlier
// position's store; `load` must therefore not read what an earlier store of the same run writes
// (Gather's input is not its result; Scatter's loads read the source, its stores the result).
//
// How the indices are checked depends on where the body's indexed accesses go, which
// `indexed_step` (the indexed operand's step along the run) tells:
//
// - Step 0 (a last-axis Gather or Scatter: every position indexes the same line, which stays in
//   cache), or a strided index: the loop is bound by its instruction count, so one pass with a
//   predicted branch per element is fastest; it also keeps the index stream's loads interleaved
//   with the accesses. Indices in [0, axis_size) take a shorter loop than the others (below).
// - Otherwise, for a contiguous index (an axis-0 walk: each position indexes its own line, and
//   its access misses the cache independently of the others): the indices are checked a block at
//   a time first, and then visited without a branch per element, so that the access loop is as
//   short as possible and more of its cache misses overlap (the profile of a 64 MiB axis-0 Gather
//   had two thirds of its samples on the store after the input load). The check is branch-free
//   integer arithmetic that compilers vectorize with plain SSE2; a block is small enough to stay
//   in L1 between the two passes. On last-axis runs this split cost 1.4-1.7x in a standalone loop
//   (the separate check pass stalls on the index stream with no accesses to overlap). The checked
//   positions are visited eight loads, then eight stores, at a time (LoadsThenStores).
template <typename Index, typename IndexStep, typename IndexedStep, typename Load, typename Store>
inline bool ForEachIndexInRun(const Index* index, int64_t count, IndexStep index_step,
                              IndexedStep /*indexed_step*/, int64_t axis_size, const Load& load,
                              const Store& store) {
  const uint64_t size = static_cast<uint64_t>(axis_size);
  constexpr bool kOneLine = std::is_same_v<IndexedStep, ConstantStep<0>>;
  if (kOneLine || index_step != 1) {
    // While the indices lie in [0, axis_size), as nearly all do, each costs one predicted unsigned
    // compare and needs no wrap. A wrap selected per element (cmov) made the loop 1.9x slower
    // than this one (f32 1 MiB last-axis Gather, standalone: 158 against 73 µs per thread;
    // int64 106 against 44), and most of the gain needs the fast loop unrolled: a fast loop that
    // re-entered the checked one per block of 256 took 103 µs. The first index outside [0,
    // axis_size) sends the rest of the run to the checked and wrapped loop, so a run of mixed
    // signs costs what it did before (a fast loop that mispredicts on every negative index was
    // 7x slower on random signs).
    constexpr int64_t kUnroll = 4;
    int64_t i = 0;
    for (; i + kUnroll <= count; i += kUnroll) {
      int64_t values[kUnroll];
#pragma GCC unroll 4
      for (int64_t k = 0; k < kUnroll; ++k) values[k] = index[(i + k) * index_step];
      int64_t k = 0;
#pragma GCC unroll 4
      for (; k < kUnroll; ++k) {
        if (static_cast<uint64_t>(values[k]) >= size) [[unlikely]] {
          break;
        }
        store(i + k, values[k], load(i + k, values[k]));
      }
      if (k < kUnroll) [[unlikely]] {
        i += k;
        break;
      }
    }
    for (; i < count; ++i) {
      const int64_t value = index[i * index_step];
      // value is in [-size, size) exactly when value + size is in [0, 2 * size), unsigned.
      if (static_cast<uint64_t>(value) + size >= 2 * size) return false;
      const int64_t wrapped = value < 0 ? value + axis_size : value;
      store(i, wrapped, load(i, wrapped));
    }
    return true;
  }
  constexpr int64_t kBlock = 512;
  // Neither `shifted` nor `span - shifted` has its top bit set exactly when value + size is in
  // [0, 2 * size) (unsigned, so that wrapping is defined).
  const uint64_t span = 2 * size - 1;
  for (int64_t begin = 0; begin < count; begin += kBlock) {
    const int64_t end = std::min(count, begin + kBlock);
    uint64_t out_of_range = 0;
    uint64_t negative = 0;
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t value = static_cast<uint64_t>(static_cast<int64_t>(index[i]));
      const uint64_t shifted = value + size;
      out_of_range |= shifted | (span - shifted);
      negative |= value;
    }
    if (static_cast<int64_t>(out_of_range) < 0) return false;
    if (static_cast<int64_t>(negative) >= 0) {
      LoadsThenStores(
          begin, end, [index](int64_t i) { return static_cast<int64_t>(index[i]); }, load, store);
    } else {
      LoadsThenStores(
          begin, end, [index, axis_size](int64_t i) { return WrapIndex(index[i], axis_size); },
          load, store);
    }
  }
  return true;
}

}  // namespace tensorops::cpu

#endif  // TENSOROPS_KERNELS_CPU_AXIS_WALK_H_
