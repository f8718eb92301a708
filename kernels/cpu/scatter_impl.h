// The templates of the CPU Scatter kernel, shared by the files that instantiate them: cpu::Scatter
// (scatter_gather.cc) dispatches ASSIGN on the element size to ScatterAssignAs<Elem> and every
// other reduction on the dtype to ScatterAs<T>, each defined in one of the scatter_<dtypes>.cc
// files. Scatter walks the index tensor with AxisWalk and enumerates its updates for
// ReducingScatter, which owns the reduction steps (shadows, include_self, MEAN).
//
// What the build spends on these kernels is the number of enumerations compiled: every (dtype,
// index type, reduction) instantiates the walk once per way ReducingScatter calls it (reset,
// reduce, MEAN's counting), each with its run bodies (WithRunSteps). So that number is kept down:
// ASSIGN by element size (5 kernels for 12 dtypes), no reset pass compiled for ASSIGN, one
// enumeration for both ways the input reaches the result (ScatterWith), and oneTBB's task
// machinery compiled once (ParallelForRanges, ParallelForBoxes) instead of into each enumeration.
// With them the six files take 160 s of CPU at -O3 (g++ 12) where they took 449 s; in the
// sanitize tree (clang 14, -O1, ASan and UBSan) the first three alone took them from 998 s to 432.
//
// Why the split into files: Scatter's dtypes were one file with Gather, which took 5:43 min of one
// core and 3.6 GB of memory to compile, the longest step of a clean build; in files they build in
// parallel. Two things keep the code GCC makes of the kernels what it was in the one file:
// - Everything but the declarations of ScatterAs, ScatterAssignAs and CopiesInputByLine is in an
//   unnamed namespace, unusual in a header but on purpose: each file gets its own copy with
//   internal linkage, as in the one .cc. With external linkage GCC inlined and cloned differently.
// - Each half-float dtype is paired with a small integer one. GCC caps the growth from inlining
//   at 40% of a file's size (--param inline-unit-growth); the 16-bit floats inline much (their
//   conversions), and float16 with bfloat16, or float16 with bool or int16, reached that cap and
//   left the conversions as calls in the inner loops. With int8 and uint8 they stay under it.
//   After changing these kernels, check that no scatter_<dtypes>.cc reports "inline-unit-growth
//   limit reached" with -fopt-info-inline-missed.
#ifndef TENSOROPS_KERNELS_CPU_SCATTER_IMPL_H_
#define TENSOROPS_KERNELS_CPU_SCATTER_IMPL_H_

#include <algorithm>
#include <array>
#include <complex>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/axis_walk.h"
#include "kernels/cpu/item_size.h"
#include "kernels/cpu/reducing_scatter.h"
#include "kernels/dispatch.h"
#include "kernels/reduction.h"
#include "kernels/scatter.h"
#include "kernels/shape.h"
#include "kernels/tensor.h"

namespace tensorops::cpu::scatter_gather_internal {

// ScatterAs<T> is cpu::Scatter after its dtype dispatch, for an index that is not empty. Each
// dtype's is defined (explicitly specialized) in the file named above its declaration.
template <typename T>
absl::Status ScatterAs(const ScatterPlan& plan, const MutableTensorView& result);
// scatter_bool_int16.cc
template <>
absl::Status ScatterAs<bool>(const ScatterPlan& plan, const MutableTensorView& result);
template <>
absl::Status ScatterAs<int16_t>(const ScatterPlan& plan, const MutableTensorView& result);
// scatter_uint8_bfloat16.cc
template <>
absl::Status ScatterAs<uint8_t>(const ScatterPlan& plan, const MutableTensorView& result);
template <>
absl::Status ScatterAs<BFloat16>(const ScatterPlan& plan, const MutableTensorView& result);
// scatter_int8_float16.cc
template <>
absl::Status ScatterAs<int8_t>(const ScatterPlan& plan, const MutableTensorView& result);
template <>
absl::Status ScatterAs<Float16>(const ScatterPlan& plan, const MutableTensorView& result);
// scatter_int32_int64.cc
template <>
absl::Status ScatterAs<int32_t>(const ScatterPlan& plan, const MutableTensorView& result);
template <>
absl::Status ScatterAs<int64_t>(const ScatterPlan& plan, const MutableTensorView& result);
// scatter_float32_float64.cc
template <>
absl::Status ScatterAs<float>(const ScatterPlan& plan, const MutableTensorView& result);
template <>
absl::Status ScatterAs<double>(const ScatterPlan& plan, const MutableTensorView& result);
// scatter_complex64_complex128.cc
template <>
absl::Status ScatterAs<std::complex<float>>(const ScatterPlan& plan,
                                            const MutableTensorView& result);
template <>
absl::Status ScatterAs<std::complex<double>>(const ScatterPlan& plan,
                                             const MutableTensorView& result);

// ScatterAssignAs<Elem> is cpu::Scatter ASSIGN after its dispatch on the element size (Elem as in
// DispatchItemSize): ASSIGN moves elements without looking at them, so one kernel per size serves
// every dtype of that size. Defined in the file named above each declaration.
template <typename Elem>
absl::Status ScatterAssignAs(const ScatterPlan& plan, const MutableTensorView& result);
// scatter_bool_int16.cc
template <>
absl::Status ScatterAssignAs<uint8_t>(const ScatterPlan& plan, const MutableTensorView& result);
template <>
absl::Status ScatterAssignAs<uint16_t>(const ScatterPlan& plan, const MutableTensorView& result);
// scatter_int32_int64.cc
template <>
absl::Status ScatterAssignAs<uint32_t>(const ScatterPlan& plan, const MutableTensorView& result);
// scatter_float32_float64.cc
template <>
absl::Status ScatterAssignAs<uint64_t>(const ScatterPlan& plan, const MutableTensorView& result);
// scatter_complex64_complex128.cc
template <>
absl::Status ScatterAssignAs<Bytes<16>>(const ScatterPlan& plan, const MutableTensorView& result);

// CopiesInputByLine: whether Scatter copies the input into the result one line along the axis at a
// time, each just before the run that scatters into it, instead of all of it before the first
// run. Then the line is still in cache when its updates read and write it: for a result larger
// than the cache, the whole copy first evicted each line again before its run, so every line
// went to memory and back twice.
//
// Only along the last axis of a large out-of-place result, where every run covers one whole line
// and every line gets a run (the index matches the input outside the axis and is not empty), and
// when the reduction touches the result first in its one enumeration (`untouched_before`).
//
// Defined in scatter_gather.cc (it was never inlined into the kernels).
bool CopiesInputByLine(const ScatterPlan& plan, const MutableTensorView& result,
                       bool untouched_before);

// ScattersByLine: whether every line of the result along the last axis receives exactly one run of
// the walk, so that ReducingScatter::RunLines can reduce line by line: the axis is the last, and
// the index matches the input outside it and is not empty. Defined in scatter_gather.cc.
bool ScattersByLine(const ScatterPlan& plan);

namespace {

using Offsets = AxisWalk::Offsets;

// The largest result (in elements) a Scatter PROD interleaves its lines for (see ScatterKernel):
// 32 KiB of float32, the L1 data cache, so that the 16-bit floats' whole-result float32 shadow
// stays in it. Larger results wait on memory more than on their chains of products: interleaved,
// float32 1 MiB/64 MiB last-axis PROD measured 7-15% slower (bench/README.md).
inline constexpr int64_t kMaxInterleavedResultElements = 8192;

// Builds the INVALID_ARGUMENT for the first index of `index` (row-major) outside [-size, size).
absl::Status OutOfRangeError(std::string_view op, const TensorView& index, int64_t axis,
                             int64_t axis_size, std::string_view operand) {
  return DispatchIndexType(index.dtype(), [&]<typename Index>(TypeTag<Index>) -> absl::Status {
    const Index* data = index.data_as<Index>();
    const int64_t count = index.numel();
    const bool contiguous = index.is_contiguous();
    for (int64_t position = 0; position < count; ++position) {
      int64_t offset = position;
      Shape coords;
      if (!contiguous) {
        coords = UnravelIndex(position, index.shape());
        offset = 0;
        for (int64_t d = 0; d < index.rank(); ++d) offset += coords[d] * index.strides()[d];
      }
      const int64_t value = data[offset];
      if (InRange(value, axis_size)) continue;
      if (contiguous) coords = UnravelIndex(position, index.shape());
      const std::string where =
          index.rank() == 0 ? "index" : absl::StrCat("index[", absl::StrJoin(coords, ", "), "]");
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s = %d is out of range for axis %d of %s with size %d (expected %d <= index < %d)",
          op, where, value, axis, operand, axis_size, -axis_size, axis_size));
    }
    return absl::InternalError(absl::StrFormat(
        "%s: the kernel reported an out-of-range index that a rescan did not find", op));
  });
}

// ScatterUpdates enumerates Scatter's updates for ReducingScatter: the index walked with AxisWalk,
// whose ordering guarantee is the one ReducingScatter asks for. Destinations are offsets by
// `dest_strides` (ReducingScatter::dest_strides()) over the input's shape.
template <typename T, typename Index>
class ScatterUpdates {
 public:
  ScatterUpdates(const ScatterPlan& plan, const Shape& dest_strides)
      : index_(plan.index.data_as<Index>()),
        source_(plan.source.data_as<T>()),
        axis_size_(plan.input.rank() == 0 ? 1 : plan.input.size(plan.axis)),
        walk_(plan.index.shape(), plan.axis,
              DestinationWalkStrides(plan, dest_strides, &axis_stride_)) {
    if (PrefetchesNextRuns(plan.index.rank(),
                           plan.index.numel() * static_cast<int64_t>(sizeof(Index)))) {
      prefetch_next_run_ = true;
      index_axis_step_ = plan.index.strides()[plan.axis];
      source_axis_step_ = plan.source.strides()[plan.axis];
    }
  }

  int64_t axis_size() const { return axis_size_; }

  // ForEachLine is ForEach for ReducingScatter::RunLines (ScattersByLine said yes, and the
  // destination's strides are the result's own): `line(line_offset, for_each_line_update)` for
  // each run, its updates addressed within the line. Runs along the last axis read their index
  // and source in order, which needs no prefetch.
  template <typename Line>
  bool ForEachLine(const Line& line) const {
    const int64_t axis_size = axis_size_;
    return walk_.ForEachRun([&](const Offsets& at, int64_t length, const Offsets& step) {
      const Index* index_run = index_ + at[AxisWalk::kIndex];
      const T* source_run = source_ + at[AxisWalk::kDirect];
      const auto for_each_line_update = [&](const auto& apply) {
        return WithRunSteps(
            step, /*axis_stride=*/1, [&](auto index_step, auto source_step, auto, auto) {
              return ForEachIndexInRun(
                  index_run, length, index_step, axis_size,
                  [=](int64_t i, int64_t value) { apply(value, source_run[i * source_step]); });
            });
      };
      return line(at[AxisWalk::kIndexed], for_each_line_update);
    });
  }

  // ForEach calls `apply(dest_offset, value)` for every update. `start_run(dest_base)` is called
  // before each run's updates with the offset of the destination line the run scatters into (the
  // line's start along the axis).
  template <typename Apply, typename StartRun>
  bool ForEach(const Apply& apply, const StartRun& start_run) const {
    const auto run = [&](const Offsets& at, int64_t length, const Offsets& step) {
      // A run across the axis (the destination moves with it): the walk's next run here is the
      // same positions one step further along the axis (see PrefetchNextRunStart).
      if (prefetch_next_run_ && step[AxisWalk::kIndexed] != 0) {
        PrefetchNextRunStart(index_ + at[AxisWalk::kIndex], index_axis_step_, length);
        PrefetchNextRunStart(source_ + at[AxisWalk::kDirect], source_axis_step_, length);
      }
      start_run(at[AxisWalk::kIndexed]);
      return ApplyRun(at, length, step, apply);
    };
    return walk_.ForEachRun(run);
  }

  // ForEachInterleaved is ForEach for a walk along whole lines (the index's last axis) that applies
  // the updates of AxisWalk::kGroupLines lines in turn: the first update of each line, then the
  // second of each, and so on. The updates of one destination keep their order (each line scatters
  // into a line of its own). For a reduction whose updates into one destination wait for each
  // other, a duplicate-heavy line is one long chain of dependent operations, and interleaved lines
  // overlap their chains (float32 4 KiB last-axis dup1% Scatter PROD: bench/README.md).
  template <typename Apply>
  bool ForEachInterleaved(const Apply& apply) const {
    const auto run = [&](const Offsets& at, int64_t length, const Offsets& step) {
      return ApplyRun(at, length, step, apply);
    };
    const auto run_group = [&](const AxisWalk::GroupOffsets& lines, int64_t length,
                               const Offsets& step) {
      constexpr int kLines = AxisWalk::kGroupLines;
      if (step[AxisWalk::kIndex] != 1 || step[AxisWalk::kDirect] != 1 || axis_stride_ != 1) {
        for (const Offsets& at : lines) {
          if (!run(at, length, step)) return false;
        }
        return true;
      }
      const Index* index_runs[kLines];
      const T* source_runs[kLines];
      int64_t dest_bases[kLines];
      for (int line = 0; line < kLines; ++line) {
        index_runs[line] = index_ + lines[line][AxisWalk::kIndex];
        source_runs[line] = source_ + lines[line][AxisWalk::kDirect];
        dest_bases[line] = lines[line][AxisWalk::kIndexed];
      }
      const int64_t axis_size = axis_size_;
      const uint64_t size = static_cast<uint64_t>(axis_size);
      for (int64_t i = 0; i < length; ++i) {
#pragma GCC unroll 4
        for (int line = 0; line < kLines; ++line) {
          int64_t value = index_runs[line][i];
          // As in ForEachIndexInRun: one predicted compare while the index lies in [0, size).
          if (static_cast<uint64_t>(value) >= size) [[unlikely]] {
            if (static_cast<uint64_t>(value) + size >= 2 * size) return false;
            value += axis_size;
          }
          apply(dest_bases[line] + value, source_runs[line][i]);
        }
      }
      return true;
    };
    return walk_.ForEachRun(run, run_group);
  }

 private:
  // Applies the updates of one run of the walk, in order.
  template <typename Apply>
  bool ApplyRun(const Offsets& at, int64_t length, const Offsets& step, const Apply& apply) const {
    const Index* index_run = index_ + at[AxisWalk::kIndex];
    const T* source_run = source_ + at[AxisWalk::kDirect];
    const int64_t dest_base = at[AxisWalk::kIndexed];
    const int64_t axis_size = axis_size_;
    return WithRunSteps(
        step, axis_stride_,
        [&](auto index_step, auto source_step, auto dest_step, auto dest_axis_stride) {
          return ForEachIndexInRun(index_run, length, index_step, axis_size,
                                   [=](int64_t i, int64_t value) {
                                     apply(dest_base + i * dest_step + value * dest_axis_stride,
                                           source_run[i * source_step]);
                                   });
        });
  }

  // The walk's strides: index and source as planned; the destination's with its axis stride
  // moved out into `axis_stride`.
  static std::array<Shape, AxisWalk::kOperands> DestinationWalkStrides(const ScatterPlan& plan,
                                                                       Shape dest_strides,
                                                                       int64_t* axis_stride) {
    if (plan.input.rank() == 0) dest_strides = Shape{1};
    *axis_stride = dest_strides[plan.axis];
    dest_strides[plan.axis] = 0;
    return {plan.index.strides(), plan.source.strides(), dest_strides};
  }

  const Index* index_;
  const T* source_;
  int64_t axis_size_;
  int64_t axis_stride_ = 0;
  AxisWalk walk_;
  bool prefetch_next_run_ = false;
  int64_t index_axis_step_ = 0;
  int64_t source_axis_step_ = 0;
};

// ScatterWith<T, Op> runs Scatter with the reduction Op over elements of type T: the index type
// dispatched, then one ReducingScatter run over the updates.
template <typename T, typename Op>
absl::Status ScatterWith(const ScatterPlan& plan, const MutableTensorView& result) {
  return DispatchIndexType(plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) {
    using Reducing = ReducingScatter<T, Op>;
    // A float32 product waits for the one before it into the same destination (and takes
    // the longer way through double: ReducingScatter::Combine), so a last-axis PROD whose
    // updates of a line meet in few destinations is a chain of them per line: a small
    // result's lines are interleaved. The 16-bit floats then take Run's whole-result shadow
    // instead of RunLines's shadow per line.
    constexpr bool kChainsProducts =
        std::is_same_v<Op, ProdOp> && std::is_same_v<typename Reducing::Acc, float>;
    const bool interleaved = kChainsProducts && plan.index.rank() > 0 &&
                             plan.axis == plan.index.rank() - 1 &&
                             result.numel() <= kMaxInterleavedResultElements;
    const int64_t line_length = plan.input.rank() == 0 ? 1 : plan.input.shape().back();
    const bool by_line = !interleaved && Reducing::RunsLines(line_length, plan.index.numel()) &&
                         ScattersByLine(plan);
    Reducing scatter(result.data_as<T>(), result.shape(), plan.reduce, plan.include_self,
                     /*updates=*/plan.index.numel(), /*may_pad_rows=*/!by_line);
    const ScatterUpdates<T, Index> updates(plan, scatter.dest_strides());
    // The input reaches the result line by line, each line just before its run (see
    // CopiesInputByLine), or all of it first. One enumeration serves both, the choice made
    // once per run: instantiated for each, the enumerations of every (dtype, index type,
    // reduction) were the larger part of the kernels' compile time.
    const bool copies_by_line =
        CopiesInputByLine(plan, result, scatter.result_untouched_before_updates());
    const T* input = plan.input.data_as<T>();
    T* out = result.data_as<T>();
    const size_t line_bytes =
        copies_by_line ? static_cast<size_t>(plan.input.size(plan.axis)) * sizeof(T) : 0;
    const auto start_run = [&](int64_t dest_base) {
      if (copies_by_line) std::memcpy(out + dest_base, input + dest_base, line_bytes);
    };
    if (!copies_by_line) {
      if (Reducing::kWritesWholeResult && plan.input.is_contiguous()) {
        scatter.SetInitialValues(input);
      } else {
        CopyElements(plan.input, result);
      }
    }
    const auto run_whole = [&] {
      return scatter.Run([&](const auto& apply) {
        if constexpr (kChainsProducts) {
          // A small result is never copied by line (CopiesInputByLine wants it streamed).
          if (interleaved && !copies_by_line) return updates.ForEachInterleaved(apply);
        }
        return updates.ForEach(apply, start_run);
      });
    };
    bool ok;
    if constexpr (Reducing::kWritesWholeResult) {
      ok = by_line ? scatter.RunLines([&](const auto& line) { return updates.ForEachLine(line); })
                   : run_whole();
    } else {
      ok = run_whole();
    }
    if (ok) return absl::OkStatus();
    return OutOfRangeError(plan.op, plan.original_index, plan.axis, updates.axis_size(), "input");
  });
}

// ScatterKernel<T> is the body of ScatterAs<T>: every reduction but ASSIGN (ScatterAssignAs).
template <typename T>
absl::Status ScatterKernel(const ScatterPlan& plan, const MutableTensorView& result) {
  return DispatchReduction(plan.reduce, [&]<typename Op>(Op) -> absl::Status {
    constexpr bool kOrdered = std::is_same_v<Op, MaxOp> || std::is_same_v<Op, MinOp>;
    if constexpr (std::is_same_v<Op, AssignOp>) {
      return absl::InternalError("scatter: ASSIGN reached a dtype's kernel, not its item size's");
    } else if constexpr (kOrdered && internal::IsComplexType<T>::value) {
      return absl::InternalError("scatter: AMAX/AMIN on complex passed planning");
    } else {
      return ScatterWith<T, Op>(plan, result);
    }
  });
}

}  // namespace
}  // namespace tensorops::cpu::scatter_gather_internal

#endif  // TENSOROPS_KERNELS_CPU_SCATTER_IMPL_H_
