// CPU kernels of Gather and Scatter. Both walk the index tensor with AxisWalk and differ only in
// the run they apply; dtype and reduction are dispatched once per call.
//
// Scatter enumerates its updates for ReducingScatter, which owns the reduction steps (shadows,
// include_self, MEAN). An out-of-range index stops the walk; the error names the first bad index in
// row-major order, found by a scan that only runs on that error path.
//
// Scatter's templates are in scatter_impl.h and its instantiations in six
// scatter_<dtypes>.cc files, two dtypes each, only to cut the build time: with them this file took
// 5:43 min of one core and 3.6 GB to compile, now 8 s (the six others 32-49 s each). It keeps
// Gather (one instantiation per element size, not per dtype) and Scatter's dtype dispatch.
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/axis_walk.h"
#include "kernels/cpu/item_size.h"
#include "kernels/cpu/scatter_impl.h"
#include "kernels/cpu/streaming_store.h"
#include "kernels/dispatch.h"
#include "kernels/gather.h"
#include "kernels/scatter.h"

namespace tensorops::cpu {
namespace {

using scatter_gather_internal::OutOfRangeError;
using Offsets = AxisWalk::Offsets;

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

}  // namespace scatter_gather_internal

absl::Status Scatter(const ScatterPlan& plan, const MutableTensorView& result) {
  if (plan.original_index.numel() == 0) {
    CopyElements(plan.input, result);
    return absl::OkStatus();
  }
  return DispatchDataType(plan.result_dtype, [&]<typename T>(TypeTag<T>) {
    return scatter_gather_internal::ScatterAs<T>(plan, result);
  });
}

}  // namespace tensorops::cpu
