// CPU kernels of Gather and Scatter. Both walk the index tensor with AxisWalk and differ only in
// the run they apply; dtype and reduction are dispatched once per call.
//
// Scatter enumerates its updates for ReducingScatter, which owns the reduction steps (shadows,
// include_self, MEAN). An out-of-range index stops the walk; the error names the first bad index in
// row-major order, found by a scan that only runs on that error path.
#include <complex>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/axis_walk.h"
#include "kernels/cpu/item_size.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reducing_scatter.h"
#include "kernels/cpu/streaming_store.h"
#include "kernels/dispatch.h"
#include "kernels/gather.h"
#include "kernels/reduction.h"
#include "kernels/scatter.h"

namespace tensorops::cpu {
namespace {

using Offsets = AxisWalk::Offsets;

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
  const auto run = [&](const Offsets& at, int64_t count, const Offsets& step) {
    const Index* index_run = index + at[AxisWalk::kIndex];
    Elem* out_run = out + at[AxisWalk::kDirect];
    const Elem* input_run = input + at[AxisWalk::kIndexed];
    return WithRunSteps(
        step, axis_stride,
        [&](auto index_step, auto out_step, auto input_step, auto input_axis_stride) {
          constexpr bool kStreamRun =
              kStream && std::is_same_v<decltype(out_step), ConstantStep<1>>;
          const bool ok = ForEachIndexInRun(
              index_run, count, index_step, axis_size, [=](int64_t i, int64_t value) {
                const Elem loaded = input_run[i * input_step + value * input_axis_stride];
                if constexpr (kStreamRun) {
                  StreamStore(out_run + i, loaded);
                } else {
                  out_run[i * out_step] = loaded;
                }
              });
          if constexpr (kStreamRun) StreamFence();
          return ok;
        });
  };
  return walk.ForEachRun(run, /*ordered=*/false);
}

struct NoRunStart {
  void operator()(int64_t /*dest_base*/) const {}
};

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
              DestinationWalkStrides(plan, dest_strides, &axis_stride_)) {}

  int64_t axis_size() const { return axis_size_; }

  // ForEach calls `apply(dest_offset, value)` for every update. `start_run(dest_base)` is called
  // before each run's updates with the offset of the destination line the run scatters into (the
  // line's start along the axis).
  template <typename Apply, typename StartRun = NoRunStart>
  bool ForEach(const Apply& apply, const StartRun& start_run = {}) const {
    const int64_t axis_size = axis_size_;
    const int64_t axis_stride = axis_stride_;
    const auto run = [&](const Offsets& at, int64_t length, const Offsets& step) {
      const Index* index_run = index_ + at[AxisWalk::kIndex];
      const T* source_run = source_ + at[AxisWalk::kDirect];
      const int64_t dest_base = at[AxisWalk::kIndexed];
      start_run(dest_base);
      return WithRunSteps(
          step, axis_stride,
          [&](auto index_step, auto source_step, auto dest_step, auto dest_axis_stride) {
            return ForEachIndexInRun(index_run, length, index_step, axis_size,
                                     [=](int64_t i, int64_t value) {
                                       apply(dest_base + i * dest_step + value * dest_axis_stride,
                                             source_run[i * source_step]);
                                     });
          });
    };
    return walk_.ForEachRun(run);
  }

 private:
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
};

}  // namespace

absl::Status Gather(const GatherPlan& plan, const MutableTensorView& result) {
  if (NumElements(result.shape()) == 0) return absl::OkStatus();
  const bool ok = DispatchItemSize(ItemSize(plan.result_dtype), [&]<typename Elem>(TypeTag<Elem>) {
    return DispatchIndexType(plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) {
      if constexpr (kCanStream<Elem>) {
        if (ShouldStream(result.numel() * static_cast<int64_t>(sizeof(Elem)))) {
          return GatherWalk<Elem, Index, /*kStream=*/true>(plan, result);
        }
      }
      return GatherWalk<Elem, Index, /*kStream=*/false>(plan, result);
    });
  });
  if (ok) return absl::OkStatus();
  return OutOfRangeError(plan.op, plan.original_index, plan.axis, plan.input_axis_size, "input");
}

// CopiesInputByLine: whether Scatter copies the input into the result one line along the axis at a
// time, each just before the run that scatters into it, instead of all of it before the first
// run. Then the line is still in cache when its updates read and write it: for a result larger
// than the cache, the whole copy first evicted each line again before its run, so every line
// went to memory and back twice.
//
// Only along the last axis of a large out-of-place result, where every run covers one whole line
// and every line gets a run (the index matches the input outside the axis and is not empty), and
// when the reduction touches the result first in its one enumeration (`untouched_before`).
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

absl::Status Scatter(const ScatterPlan& plan, const MutableTensorView& result) {
  if (plan.original_index.numel() == 0) {
    CopyElements(plan.input, result);
    return absl::OkStatus();
  }
  return DispatchDataType(plan.result_dtype, [&]<typename T>(TypeTag<T>) {
    return DispatchIndexType(plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) {
      return DispatchReduction(plan.reduce, [&]<typename Op>(Op) -> absl::Status {
        constexpr bool kOrdered = std::is_same_v<Op, MaxOp> || std::is_same_v<Op, MinOp>;
        if constexpr (kOrdered && internal::IsComplexType<T>::value) {
          return absl::InternalError("scatter: AMAX/AMIN on complex passed planning");
        } else {
          ReducingScatter<T, Op> scatter(result.data_as<T>(), result.shape(), plan.reduce,
                                         plan.include_self, /*updates=*/plan.index.numel(),
                                         /*may_pad_rows=*/true);
          const ScatterUpdates<T, Index> updates(plan, scatter.dest_strides());
          bool ok;
          if (CopiesInputByLine(plan, result, scatter.result_untouched_before_updates())) {
            const T* input = plan.input.data_as<T>();
            T* out = result.data_as<T>();
            const int64_t line_bytes = plan.input.size(plan.axis) * static_cast<int64_t>(sizeof(T));
            ok = scatter.Run([&](const auto& apply) {
              return updates.ForEach(apply, [&](int64_t dest_base) {
                std::memcpy(out + dest_base, input + dest_base, static_cast<size_t>(line_bytes));
              });
            });
          } else {
            CopyElements(plan.input, result);
            ok = scatter.Run([&](const auto& apply) { return updates.ForEach(apply); });
          }
          if (ok) return absl::OkStatus();
          return OutOfRangeError(plan.op, plan.original_index, plan.axis, updates.axis_size(),
                                 "input");
        }
      });
    });
  });
}

}  // namespace tensorops::cpu
