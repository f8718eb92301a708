// CPU kernels of Gather and Scatter. Both walk the index tensor with AxisWalk and differ only in
// the run they apply; dtype and reduction are dispatched once per call.
//
// Scatter enumerates its updates for ReducingScatter, which owns the reduction steps (shadows,
// include_self, MEAN). An out-of-range index stops the walk; the error names the first bad index in
// row-major order, found by a scan that only runs on that error path.
//
// Scatter's templates are in scatter_impl.h and its instantiations in six scatter_<dtypes>.cc
// files only to cut the build time: with them this file took 5:43 min of one core and 3.6 GB to
// compile. It keeps Gather (one instantiation per element size, not per dtype) and Scatter's
// dispatch: ASSIGN on the element size, the other reductions on the dtype.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/axis_walk.h"
#include "kernels/cpu/item_size.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/scatter_impl.h"
#include "kernels/cpu/streaming_store.h"
#include "kernels/dispatch.h"
#include "kernels/gather.h"
#include "kernels/scatter.h"

namespace tensorops::cpu {
namespace {

using scatter_gather_internal::OutOfRangeError;
using Offsets = AxisWalk::Offsets;

// StreamGatherRun is a Gather run that writes a contiguous stretch of the result, `count` elements
// at `out_run`, with streaming stores: one element at a time up to a 16-byte boundary of the
// result, then kStreamLanes<Elem> elements per store while their indices lie in [0, axis_size),
// then ForEachIndexInRun for the rest (a negative or bad index, and the tail). Per element,
// MOVNTI took more than one 16-byte store of four (float32 64 MiB last-axis duplicate-heavy
// Gather: see bench/README.md). Returns false on an out-of-range index, as ForEachIndexInRun.
template <typename Elem, typename Index, typename IndexStep, typename InputStep,
          typename InputAxisStride>
bool StreamGatherRun(const Index* index_run, int64_t count, IndexStep index_step, int64_t axis_size,
                     const Elem* input_run, InputStep input_step, InputAxisStride input_axis_stride,
                     Elem* out_run) {
  constexpr int64_t kLanes = kStreamLanes<Elem>;
  const auto stream_each = [&](int64_t from, int64_t to) {
    return ForEachIndexInRun(index_run + from * index_step, to - from, index_step, axis_size,
                             [=](int64_t k, int64_t value) {
                               const int64_t i = from + k;
                               StreamStore(out_run + i,
                                           input_run[i * input_step + value * input_axis_stride]);
                             });
  };
  const int64_t misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(out_run) % 16);
  const int64_t head =
      misaligned % sizeof(Elem) != 0
          ? count  // never aligned: element by element
          : std::min(count, (16 - misaligned) % 16 / static_cast<int64_t>(sizeof(Elem)));
  if (!stream_each(0, head)) return false;
  const uint64_t size = static_cast<uint64_t>(axis_size);
  int64_t i = head;
  for (; i + kLanes <= count; i += kLanes) {
    int64_t values[kLanes];
    bool in_range = true;
#pragma GCC unroll 4
    for (int64_t k = 0; k < kLanes; ++k) {
      values[k] = index_run[(i + k) * index_step];
      in_range &= static_cast<uint64_t>(values[k]) < size;
    }
    if (!in_range) [[unlikely]] {
      break;
    }
    StreamStoreLanes(out_run + i, [&](int64_t k) {
      return input_run[(i + k) * input_step + values[k] * input_axis_stride];
    });
  }
  return stream_each(i, count);
}

// kStream: the result is written with streaming stores (see streaming_store.h), in the runs that
// write it contiguously.
template <typename Elem, typename Index, bool kStream>
bool GatherWalk(const GatherPlan& plan, const MutableTensorView& result) {
  const Index* index = plan.index.data_as<Index>();
  const Elem* input = static_cast<const Elem*>(plan.input.data());
  Elem* out = result.data_as<Elem>();
  const int64_t axis_size = plan.input_axis_size;
  const int64_t axis_stride = plan.input_axis_stride;

  const AxisWalk walk(
      plan.index.shape(), plan.axis,
      {plan.index.strides(), ContiguousStrides(plan.index.shape()), plan.input.strides()});
  const bool prefetch_next_run = PrefetchesNextRuns(
      plan.index.rank(), plan.index.numel() * static_cast<int64_t>(sizeof(Index)));
  const int64_t index_axis_step = prefetch_next_run ? plan.index.strides()[plan.axis] : 0;
  const auto run = [&](const Offsets& at, int64_t count, const Offsets& step) {
    const Index* index_run = index + at[AxisWalk::kIndex];
    Elem* out_run = out + at[AxisWalk::kDirect];
    const Elem* input_run = input + at[AxisWalk::kIndexed];
    // A run across the axis (the input moves with it): the walk's next run here is the same
    // positions one step further along the axis.
    if (prefetch_next_run && step[AxisWalk::kIndexed] != 0) {
      PrefetchNextRunStart(index_run, index_axis_step, count);
    }
    return WithRunSteps(
        step, axis_stride,
        [&](auto index_step, auto out_step, auto input_step, auto input_axis_stride) {
          if constexpr (kStream && std::is_same_v<decltype(out_step), ConstantStep<1>>) {
            const bool ok = StreamGatherRun(index_run, count, index_step, axis_size, input_run,
                                            input_step, input_axis_stride, out_run);
            StreamFence();
            return ok;
          } else {
            return ForEachIndexInRun(
                index_run, count, index_step, axis_size, [=](int64_t i, int64_t value) {
                  out_run[i * out_step] = input_run[i * input_step + value * input_axis_stride];
                });
          }
        });
  };
  return walk.ForEachRun</*kOrdered=*/false>(run);
}

// OuterOffsets returns the offsets, in elements, of the `outer`-th position (row-major) over the
// dimensions of `shape` before `axis`, in operands of the given strides.
template <size_t N>
std::array<int64_t, N> OuterOffsets(int64_t outer, ShapeSpan shape, int64_t axis,
                                    const std::array<ShapeSpan, N>& strides) {
  std::array<int64_t, N> offsets{};
  for (int64_t d = axis - 1; d >= 0; --d) {
    const int64_t coordinate = outer % shape[d];
    outer /= shape[d];
    for (size_t k = 0; k < N; ++k) offsets[k] += coordinate * strides[k][d];
  }
  return offsets;
}

// kMinRowBytes: blocks shorter than this are gathered by the element walk, whose loop costs less
// per element than a memcpy call does per block.
constexpr int64_t kMinRowBytes = 64;

// CopiesRows is true when every index value of `plan` selects one contiguous block of the input:
// the index is constant over the dimensions after the axis (IndexSelect, an embedding lookup,
// a Gather whose index was broadcast) and the input is contiguous over them. Gather is then one
// memcpy per block.
bool CopiesRows(const GatherPlan& plan) {
  const int64_t rank = plan.index.rank();
  int64_t expected_stride = 1;
  for (int64_t d = rank - 1; d > plan.axis; --d) {
    if (plan.index.strides()[d] != 0 || plan.input.strides()[d] != expected_stride) return false;
    expected_stride *= plan.index.size(d);
  }
  return expected_stride * ItemSize(plan.result_dtype) >= kMinRowBytes;
}

// kPrefetchRows: how far ahead GatherRows and ScatterRowsSum prefetch the blocks they read. Random
// rows of a large table miss the cache and the TLB; with the next blocks requested early their
// misses overlap the current copy or add.
constexpr int64_t kPrefetchRows = 16;
// kMaxPrefetchBytes: the most of one block prefetched; the hardware prefetcher follows a longer
// block once its first lines are read.
constexpr int64_t kMaxPrefetchBytes = 1024;

// GatherRows is Gather as one memcpy per selected block (CopiesRows): 4096 random rows of 64
// float32 out of a 1 GiB table took 0.45 ms on one core against the element walk's 1.9 ms (median
// of 50, this machine). Prefetching the blocks kPrefetchRows ahead took the store benchmark's
// lookup into shared memory from 0.492 to 0.465 ms p50 (two runs each, alternating, 2 cores).
// Each task walks its rows by outer position and position along the axis, so no row pays the
// 64-bit divisions that found its outer position and its prefetched row's (the same lookup 0.445
// -0.474 -> 0.433-0.446 ms p50, three runs each). Returns false on an out-of-range index.
template <typename Index>
bool GatherRows(const GatherPlan& plan, const MutableTensorView& result) {
  const int64_t axis = plan.axis;
  const int64_t positions = plan.index.size(axis);
  const int64_t row_bytes =
      NumElements(ShapeSpan(plan.index.shape()).subspan(axis + 1)) * ItemSize(plan.result_dtype);
  const int64_t outer_count = NumElements(ShapeSpan(plan.index.shape()).subspan(0, axis));
  const uint64_t axis_size = static_cast<uint64_t>(plan.input_axis_size);
  const int64_t axis_stride_bytes = plan.input_axis_stride * ItemSize(plan.result_dtype);
  const int64_t index_step = plan.index.strides()[axis];
  const int64_t prefetch_bytes = std::min<int64_t>(row_bytes, kMaxPrefetchBytes);
  const auto* input = static_cast<const char*>(plan.input.data());
  auto* out = static_cast<char*>(result.data());
  std::atomic<bool> ok = true;
  ParallelFor(
      outer_count * positions, std::max<int64_t>(1, kParallelGrainBytes / row_bytes),
      [&](int64_t begin, int64_t end) {
        int64_t outer = begin / positions;
        int64_t first = begin % positions;
        for (int64_t row = begin; row < end; ++outer, first = 0) {
          const auto [index_base, input_at] = OuterOffsets<2>(
              outer, plan.index.shape(), axis, {plan.index.strides(), plan.input.strides()});
          const Index* index = plan.index.data_as<Index>() + index_base;
          const char* block = input + input_at * ItemSize(plan.result_dtype);
          const int64_t last = std::min(positions, first + (end - row));
          char* dest = out + row * row_bytes;
          for (int64_t position = first; position < last; ++position, dest += row_bytes) {
            // The block kPrefetchRows ahead, when it is this task's and of the same outer
            // position: its cache lines load while this one is copied.
            if (const int64_t ahead_at = position + kPrefetchRows; ahead_at < last) {
              const auto ahead = static_cast<uint64_t>(index[ahead_at * index_step]);
              if (ahead < axis_size) {
                const char* line = block + static_cast<int64_t>(ahead) * axis_stride_bytes;
                for (int64_t byte = 0; byte < prefetch_bytes; byte += 64) {
                  __builtin_prefetch(line + byte);
                }
              }
            }
            int64_t value = index[position * index_step];
            if (static_cast<uint64_t>(value) >= axis_size) [[unlikely]] {
              if (!InRange(value, plan.input_axis_size)) {
                ok = false;
                return;
              }
              value += plan.input_axis_size;
            }
            std::memcpy(dest, block + value * axis_stride_bytes, static_cast<size_t>(row_bytes));
          }
          row += last - first;
        }
      });
  return ok;
}

// AddsRows is true for a Scatter SUM in which every index value adds one contiguous block of the
// source to one contiguous block of the result (index_add of rows: a gradient push into an
// embedding table): include_self, a dtype that accumulates in itself, the index constant over the
// dimensions after the axis, which it spans whole, and the source contiguous over them.
bool AddsRows(const ScatterPlan& plan) {
  if (plan.reduce != Reduction::kSum || !plan.include_self) return false;
  const DataType dtype = plan.result_dtype;
  if (dtype != DataType::kFloat32 && dtype != DataType::kFloat64 && dtype != DataType::kInt32 &&
      dtype != DataType::kInt64) {
    return false;
  }
  const int64_t rank = plan.index.rank();
  if (plan.input.rank() != rank) return false;  // a rank-0 call iterates shape [1]
  int64_t block = 1;
  for (int64_t d = rank - 1; d > plan.axis; --d) {
    if (plan.index.strides()[d] != 0 || plan.source.strides()[d] != block ||
        plan.index.size(d) != plan.result_shape[d]) {
      return false;
    }
    block *= plan.index.size(d);
  }
  return block * ItemSize(dtype) >= kMinRowBytes;
}

// ScatterRowsSum is Scatter SUM as one add of a block per index value (AddsRows), in the element
// walk's order (each destination element takes its updates in increasing position along the
// axis, so the sums are the same bit for bit). 4096 random rows of 64 float32 added into a 1 GiB
// table took 0.59-0.69 ms against the walk's 1.4-1.5 ms (one core, medians of 50, this machine).
// Runs on one thread: rows may repeat, and a table's random rows are bound by memory latency, not
// compute. Returns false on an out-of-range index.
template <typename T, typename Index>
bool ScatterRowsSum(const ScatterPlan& plan, const MutableTensorView& result) {
  CopyElements(plan.input, result);
  const int64_t axis = plan.axis;
  const int64_t positions = plan.index.size(axis);
  const int64_t block = NumElements(ShapeSpan(plan.index.shape()).subspan(axis + 1));
  const int64_t outer_count = NumElements(ShapeSpan(plan.index.shape()).subspan(0, axis));
  const int64_t axis_size = plan.result_shape[axis];
  const Shape result_strides = ContiguousStrides(plan.result_shape);
  const Index* index = plan.index.data_as<Index>();
  const T* source = plan.source.data_as<T>();
  T* out = result.data_as<T>();
  const int64_t index_step = plan.index.strides()[axis];
  const int64_t source_step = plan.source.strides()[axis];
  const int64_t dest_step = result_strides[axis];
  for (int64_t outer = 0; outer < outer_count; ++outer) {
    const auto [index_base, source_base, dest_base] =
        OuterOffsets<3>(outer, plan.index.shape(), axis,
                        {plan.index.strides(), plan.source.strides(), result_strides});
    for (int64_t position = 0; position < positions; ++position) {
      if (position + kPrefetchRows < positions) {
        const int64_t ahead = index[index_base + (position + kPrefetchRows) * index_step];
        if (ahead >= 0 && ahead < axis_size) {
          const auto* line = reinterpret_cast<const char*>(out + dest_base + ahead * dest_step);
          for (int64_t byte = 0; byte < block * static_cast<int64_t>(sizeof(T)); byte += 64) {
            __builtin_prefetch(line + byte, /*rw=*/1);
          }
        }
      }
      int64_t value = index[index_base + position * index_step];
      if (!InRange(value, axis_size)) return false;
      if (value < 0) value += axis_size;
      T* dest = out + dest_base + value * dest_step;
      const T* update = source + source_base + position * source_step;
      for (int64_t i = 0; i < block; ++i) SumOp()(dest[i], update[i]);
    }
  }
  return true;
}

// StreamsResult is true when GatherWalk writes a result of `result_bytes` with streaming stores:
// a result larger than the caches, walked along its innermost dimension, so that each task writes
// whole rows front to back. Along an outer axis each run writes a stretch of one row and the next
// run the same stretch of the next row; there streaming stores were slower than plain ones on the
// Intel Xeon of bench/README.md (float32 64 MiB axis-0 duplicate-heavy Gather 18.5-19.7 ms
// against 13.9-14.2, the unique and random ones unchanged), while along the last axis they were
// faster (int64 64 MiB duplicate-heavy 4.2-4.5 ms against 6.4-6.6).
bool StreamsResult(const GatherPlan& plan, int64_t result_bytes) {
  const ShapeSpan shape = plan.index.shape();
  if (plan.axis >= static_cast<int64_t>(shape.size())) return false;  // a rank-0 index
  const bool axis_innermost = std::all_of(shape.begin() + plan.axis + 1, shape.end(),
                                          [](int64_t size) { return size == 1; });
  return axis_innermost && ShouldStream(result_bytes);
}

}  // namespace

absl::Status Gather(const GatherPlan& plan, const MutableTensorView& result) {
  if (NumElements(result.shape()) == 0) return absl::OkStatus();
  if (CopiesRows(plan)) {
    const bool ok = DispatchIndexType(plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) {
      return GatherRows<Index>(plan, result);
    });
    if (ok) return absl::OkStatus();
    return OutOfRangeError(plan.op, plan.original_index, plan.axis, plan.input_axis_size, "input");
  }
  const bool ok = DispatchItemSize(ItemSize(plan.result_dtype), [&]<typename Elem>(TypeTag<Elem>) {
    return DispatchIndexType(plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) {
      if constexpr (kCanStream<Elem>) {
        if (StreamsResult(plan, result.numel() * static_cast<int64_t>(sizeof(Elem)))) {
          return GatherWalk<Elem, Index, /*kStream=*/true>(plan, result);
        }
      }
      return GatherWalk<Elem, Index, /*kStream=*/false>(plan, result);
    });
  });
  if (ok) return absl::OkStatus();
  return OutOfRangeError(plan.op, plan.original_index, plan.axis, plan.input_axis_size, "input");
}

namespace scatter_gather_internal {

bool CopiesInputByLine(const ScatterPlan& plan, const MutableTensorView& result,
                       bool untouched_before) {
  const int64_t rank = plan.input.rank();
  if (!untouched_before || rank == 0 || plan.axis != rank - 1) return false;
  if (result.data() == plan.input.data() || !plan.input.is_contiguous()) return false;
  if (!ShouldStream(result.numel() * result.itemsize())) return false;
  for (int64_t d = 0; d < rank - 1; ++d) {
    if (plan.index.size(d) != plan.input.size(d)) return false;
  }
  return plan.index.size(plan.axis) > 0;
}

bool ScattersByLine(const ScatterPlan& plan) {
  const int64_t rank = plan.input.rank();
  if (rank == 0 || plan.axis != rank - 1) return false;
  for (int64_t d = 0; d < rank - 1; ++d) {
    if (plan.index.size(d) != plan.input.size(d)) return false;
  }
  return plan.index.size(plan.axis) > 0;
}

}  // namespace scatter_gather_internal

absl::Status Scatter(const ScatterPlan& plan, const MutableTensorView& result) {
  if (plan.original_index.numel() == 0) {
    CopyElements(plan.input, result);
    return absl::OkStatus();
  }
  if (AddsRows(plan)) {
    const bool ok = DispatchDataType(plan.result_dtype, [&]<typename T>(TypeTag<T>) {
      return DispatchIndexType(plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) {
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                      std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>) {
          return ScatterRowsSum<T, Index>(plan, result);
        } else {
          return false;  // AddsRows takes no other dtype
        }
      });
    });
    if (ok) return absl::OkStatus();
    return OutOfRangeError(plan.op, plan.original_index, plan.axis, plan.result_shape[plan.axis],
                           "input");
  }
  if (plan.reduce == Reduction::kAssign) {
    return DispatchItemSize(ItemSize(plan.result_dtype), [&]<typename Elem>(TypeTag<Elem>) {
      return scatter_gather_internal::ScatterAssignAs<Elem>(plan, result);
    });
  }
  return DispatchDataType(plan.result_dtype, [&]<typename T>(TypeTag<T>) {
    return scatter_gather_internal::ScatterAs<T>(plan, result);
  });
}

}  // namespace tensorops::cpu
