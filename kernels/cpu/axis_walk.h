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
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/parallel.h"
#include "kernels/shape.h"
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
  // kLargeWalkPositions, kMinLargeRunElements: the walks larger than the caches (32 MiB of int64
  // index) and the run length they aim for (see ForEachRun).
  static constexpr int64_t kLargeWalkPositions = int64_t{1} << 22;
  static constexpr int64_t kMinLargeRunElements = 1024;
  using Offsets = std::array<int64_t, kOperands>;
  // kGroupLines: the lines a grouped walk hands its `run_group` at once (see ForEachRun).
  static constexpr int kGroupLines = 4;
  using GroupOffsets = std::array<Offsets, kGroupLines>;
  // The `run_group` of a walk that groups no lines.
  struct NoRunGroup {};

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
  // `kOrdered` keeps the ordering guarantee; a kernel whose result does not depend on the order
  // (Gather) passes false, which also lets a long axis be split between threads. A template
  // argument, so that Scatter's many instantiations do not compile the unordered split they never
  // run: each scatter_<dtypes>.cc must stay under GCC's inline-unit-growth limit (scatter_impl.h).
  //
  // With a `run_group` and the axis innermost, each task hands it its lines kGroupLines at a time,
  // as `run_group(line_offsets, count, steps)` (count and steps those of each line's run), and
  // the rest of its lines to `run` one by one. A kernel whose updates of one line wait for each
  // other (a product into one destination) interleaves the lines of a group so that their chains
  // overlap; the lines' destinations are disjoint, so the ordering guarantee still holds.
  template <bool kOrdered = true, typename Run, typename RunGroup = NoRunGroup>
  bool ForEachRun(const Run& run, const RunGroup& run_group = {}) const {
    const int64_t positions = num_positions();
    if (positions == 0) return true;
    if (positions < kMinParallelElements) {
      return RunBox(0, outer_count_, 0, inner_count_, run, run_group);
    }
    if constexpr (!kOrdered) {
      if (inner_shape_.empty()) return SplitAlongAxis(run);
    }
    // Tasks of about kMinParallelElements positions: whole outer rows when a row is small, else
    // one outer row split along the inner positions. A task's inner positions are also the
    // length of its runs, so they get at least kMinRunElements of them while that still leaves
    // a few tasks per thread: a tall matrix split into tasks of a few columns each had every
    // run touch one cache line and one page per row (64 MiB axis-0 cases: runs of 8 elements).
    // An ordered walk of kLargeWalkPositions or more reads its index from memory, where each
    // run's first lines miss before the hardware prefetcher follows it: its runs aim for
    // kMinLargeRunElements, with two tasks per thread instead of four (float32 64 MiB axis-0
    // dup1% Scatter, [4096, 4096]: runs of 1024 rather than 512). Not for Gather: its input
    // columns are reused across the axis, and wider tasks lost that (int64 64 MiB axis-0
    // random Gather took 117 ms instead of 69).
    const int64_t row = axis_size_ * inner_count_;
    const int64_t outer_grain = std::max<int64_t>(1, kMinParallelElements / row);
    const int64_t threads = tbb::this_task_arena::max_concurrency();
    const bool large = kOrdered && positions >= kLargeWalkPositions;
    const int64_t tasks_per_thread = large ? 2 : 4;
    const int64_t run_grain =
        std::min<int64_t>(large ? kMinLargeRunElements : kMinRunElements,
                          std::max<int64_t>(1, inner_count_ / (tasks_per_thread * threads)));
    const int64_t inner_grain =
        row > kMinParallelElements
            ? std::max<int64_t>(run_grain, kMinParallelElements / std::max<int64_t>(axis_size_, 1))
            : inner_count_;
    return ParallelForBoxes(
        outer_count_, outer_grain, inner_count_, inner_grain,
        [&](int64_t outer_begin, int64_t outer_end, int64_t inner_begin, int64_t inner_end) {
          return RunBox(outer_begin, outer_end, inner_begin, inner_end, run, run_group);
        });
  }

 private:
  // Runs the walk with tasks that cover parts of the axis; only for unordered walks whose axis is
  // the innermost dimension.
  template <typename Run>
  bool SplitAlongAxis(const Run& run) const {
    const int64_t axis_grain = std::max<int64_t>(1, std::min(axis_size_, kMinParallelElements));
    const int64_t outer_grain =
        std::max<int64_t>(1, kMinParallelElements / std::max<int64_t>(axis_size_, 1));
    return ParallelForBoxes(
        outer_count_, outer_grain, axis_size_, axis_grain,
        [&](int64_t outer_begin, int64_t outer_end, int64_t axis_begin, int64_t axis_end) {
          for (int64_t outer = outer_begin; outer < outer_end; ++outer) {
            Offsets offsets = OuterOffsets(outer);
            for (int k = 0; k < kOperands; ++k) offsets[k] += axis_begin * axis_steps_[k];
            if (!run(offsets, axis_end - axis_begin, axis_steps_)) return false;
          }
          return true;
        });
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
  template <typename Run, typename RunGroup>
  bool RunBox(int64_t outer_begin, int64_t outer_end, int64_t inner_begin, int64_t inner_end,
              const Run& run, const RunGroup& run_group) const {
    if constexpr (!std::is_same_v<RunGroup, NoRunGroup>) {
      if (inner_shape_.empty()) {
        for (; outer_begin + kGroupLines <= outer_end; outer_begin += kGroupLines) {
          GroupOffsets lines;
          for (int g = 0; g < kGroupLines; ++g) lines[g] = OuterOffsets(outer_begin + g);
          if (!run_group(lines, axis_size_, axis_steps_)) return false;
        }
      }
    }
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

// WithRunSteps calls `visit(index_step, direct_step, indexed_step, axis_stride)` with a run's
// steps and the indexed operand's stride along the axis, as ConstantStep values in the layouts
// that cover almost every large run, else as int64_t:
// - index and direct operand contiguous, the indexed operand moving with them (axis 0);
// - the same with the indexed operand fixed on one line (the last axis), and that line
//   contiguous (axis stride 1) or not.
// A run body instantiated with constants compiles to a loop of a few instructions; with runtime
// steps it had twice as many, and the 64 MiB last-axis Gather was bound by them (a standalone
// loop of the same accesses ran 1.5x faster than the generic run). A constant axis stride of 1
// drops a multiply and an add per element (kernels_bench, 1 MiB last axis: Gather f32/i64 7-9%,
// Scatter f32/bf16 4-7% faster).
template <typename Visit>
inline bool WithRunSteps(const AxisWalk::Offsets& step, int64_t axis_stride, const Visit& visit) {
  if (step[AxisWalk::kIndex] == 1 && step[AxisWalk::kDirect] == 1) {
    if (step[AxisWalk::kIndexed] == 0) {
      if (axis_stride == 1) {
        return visit(ConstantStep<1>{}, ConstantStep<1>{}, ConstantStep<0>{}, ConstantStep<1>{});
      }
      return visit(ConstantStep<1>{}, ConstantStep<1>{}, ConstantStep<0>{}, axis_stride);
    }
    if (step[AxisWalk::kIndexed] == 1)
      return visit(ConstantStep<1>{}, ConstantStep<1>{}, ConstantStep<1>{}, axis_stride);
  }
  return visit(step[AxisWalk::kIndex], step[AxisWalk::kDirect], step[AxisWalk::kIndexed],
               axis_stride);
}

// Prefetching the start of the next run down the axis. Along any axis but the last, each task is
// a block of columns walked down the axis: every run reads a stretch of the index (and Scatter's
// source) one line further on, which the hardware prefetcher only follows after its first misses
// (it does not cross into another page). Prefetching the first kRunPrefetchPositions of the next
// run while this one is applied hides them: float32 64 MiB axis-0 dup1% Scatter ([4096, 4096],
// runs of 512 positions, 4 KiB of index each) spent about 13% less time in its updates in a
// standalone loop of the same accesses, and the same Gather took 13.8-14.2 ms instead of
// 15.1-15.3 (int64: 6.8 instead of 7.8; bench/README.md). Only for an index larger than the caches
// (kRunPrefetchMinIndexBytes); in cache the prefetches would be instructions for nothing.
inline constexpr int64_t kRunPrefetchPositions = 64;
inline constexpr int64_t kRunPrefetchMinIndexBytes = int64_t{16} << 20;

// PrefetchesNextRuns is whether a walk over an index of `index_rank` dimensions and `index_bytes`
// bytes prefetches its next runs' starts.
inline bool PrefetchesNextRuns(int64_t index_rank, int64_t index_bytes) {
  return index_rank > 0 && index_bytes >= kRunPrefetchMinIndexBytes;
}

// PrefetchNextRunStart prefetches the first positions of the run `axis_step` elements after `run`
// (the address is formed as an integer: past the last run it points outside the operand, which a
// prefetch tolerates and pointer arithmetic does not).
template <typename Elem>
inline void PrefetchNextRunStart(const Elem* run, int64_t axis_step, int64_t length) {
  const uintptr_t next =
      reinterpret_cast<uintptr_t>(run) + static_cast<uintptr_t>(axis_step * sizeof(Elem));
  const int64_t bytes =
      std::min(length, kRunPrefetchPositions) * static_cast<int64_t>(sizeof(Elem));
  for (int64_t byte = 0; byte < bytes; byte += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(next + static_cast<uintptr_t>(byte)));
  }
}

// ForEachIndexInRun calls `visit(i, value)` for i in [0, count) in order, `value` being the run's
// i-th index (at `index[i * index_step]`) wrapped into [0, axis_size). It returns false when an
// index lies outside [-axis_size, axis_size), after visiting the positions before it.
//
// While the indices lie in [0, axis_size), as nearly all do, each costs one predicted unsigned
// compare and needs no wrap, in a loop unrolled four times. The first index outside [0, axis_size)
// sends the rest of the run to a loop that checks and wraps each index, so a run of mixed signs
// costs no more than it would have in that loop alone (a fast loop that mispredicts on every
// negative index was 7x slower on random signs).
//
// Measured alternatives (standalone loops and kernels_bench A/B runs, bench/README.md):
// - A wrap selected per element (cmov) made the loop 1.9x slower (f32 1 MiB last-axis Gather,
//   standalone: 158 against 73 µs per thread; int64 106 against 44).
// - Checking a group of 8 indices with one branch, then visiting it, was slower along both axes
//   (bf16 1 MiB last-axis Scatter SUM 1.6-1.9x).
// - For runs whose positions each index their own line (axis 0), a separate check pass per block
//   of 512 indices, or loading eight positions before storing eight, was what this loop replaced:
//   median ratio to ATen over the 1 MiB and 64 MiB axis-0 cases 1.13x before, 1.29-1.30x after
//   (bf16 1 MiB axis-0 Scatter SUM 2.2 -> 1.1-1.25 ms), and no slower at any offset between a
//   Scatter's source and result (4K aliasing), where the grouping was meant to help.
template <typename Index, typename IndexStep, typename Visit>
inline bool ForEachIndexInRun(const Index* index, int64_t count, IndexStep index_step,
                              int64_t axis_size, const Visit& visit) {
  const uint64_t size = static_cast<uint64_t>(axis_size);
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
      visit(i + k, values[k]);
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
    visit(i, wrapped);
  }
  return true;
}

}  // namespace tensorops::cpu

#endif  // TENSOROPS_KERNELS_CPU_AXIS_WALK_H_
