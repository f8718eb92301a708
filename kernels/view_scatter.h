// SelectScatter, SliceScatter and DiagonalScatter (docs/semantics.md): each returns the input
// with one strided window replaced by `src`. The window is a view of the result (a selected slice,
// a stepped slice, a diagonal), so all three plan to the same ViewScatterPlan and share one kernel.
//
//   absl::StatusOr<ViewScatterPlan> plan = PlanSliceScatter({.input = x, .src = s, .axis = 1,
//                                                            .start = 0, .end = 4, .step = 2});
//   Tensor out(plan->result_dtype, plan->result_shape);
//   absl::Status status = cpu::ViewScatter(*plan, out.mutable_view());
#ifndef TENSOROPS_KERNELS_VIEW_SCATTER_H_
#define TENSOROPS_KERNELS_VIEW_SCATTER_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gradients.h"
#include "kernels/tensor.h"

namespace tensorops {

// SelectScatterArgs: `torch.select_scatter(input, src, axis, index)`.
struct SelectScatterArgs {
  TensorView input;
  // input's shape without `axis`; same dtype.
  TensorView src;
  int64_t axis = 0;
  // In [-size, size) of `axis` (Python rules).
  int64_t index = 0;
};

// SliceScatterArgs: `torch.slice_scatter(input, src, axis, start, end, step)`.
struct SliceScatterArgs {
  TensorView input;
  // input's shape with `axis` sized like the slice; same dtype.
  TensorView src;
  int64_t axis = 0;
  // Python slice rules: absent = the whole range; negative counts from the end; clamped.
  std::optional<int64_t> start;
  std::optional<int64_t> end;
  // > 0.
  int64_t step = 1;
};

// DiagonalScatterArgs: `torch.diagonal_scatter(input, src, offset, axis1, axis2)`.
struct DiagonalScatterArgs {
  TensorView input;
  // The shape of torch.diagonal(input, offset, axis1, axis2): the other dimensions in order, then
  // the diagonal.
  TensorView src;
  int64_t offset = 0;
  int64_t axis1 = 0;
  int64_t axis2 = 1;
};

// SlabWindow: a window made of whole slabs of the result, the blocks that one position along
// `axis` spans (everything after it). Along `axis`, positions start + k * step for k < count hold
// src's k-th slab. Select and Slice windows have this form; a diagonal's does not.
struct SlabWindow {
  int64_t axis = 0;
  int64_t start = 0;
  int64_t step = 1;
  int64_t count = 0;
};

// ViewScatterPlan: result = input, then the window of the result (window_shape, window_strides,
// window_offset, in elements of the contiguous result) = src.
struct ViewScatterPlan {
  DataType result_dtype;
  Shape result_shape;
  TensorView input;
  // Viewed at window_shape.
  TensorView src;
  Shape window_shape;
  Shape window_strides;
  int64_t window_offset = 0;
  // The same window as slabs, where it has that form: the CPU kernel then writes each slab of the
  // result once, from input or from src, instead of copying input and then overwriting the window.
  std::optional<SlabWindow> slabs;
};

// Plan* validate the arguments against docs/semantics.md and PyTorch (INVALID_ARGUMENT naming the
// op, argument, value and rule: "select_scatter", "slice_scatter", "diagonal_scatter").
absl::StatusOr<ViewScatterPlan> PlanSelectScatter(const SelectScatterArgs& args);
absl::StatusOr<ViewScatterPlan> PlanSliceScatter(const SliceScatterArgs& args);
absl::StatusOr<ViewScatterPlan> PlanDiagonalScatter(const DiagonalScatterArgs& args);

namespace cpu {
// ViewScatter runs `plan` into `result`, a contiguous tensor of plan.result_shape: disjoint from
// the operands, or the input itself (same memory, input contiguous) to write only the window in
// place. `src` may not alias it.
absl::Status ViewScatter(const ViewScatterPlan& plan, const MutableTensorView& result);
}  // namespace cpu

// Plan and run on the CPU.
absl::StatusOr<Tensor> SelectScatter(const SelectScatterArgs& args);
// Backward returns the gradients of SelectScatter(args) for `grad_output`: "input" and "src"
// (kernels/backward.h).
absl::StatusOr<Gradients> Backward(const SelectScatterArgs& args, const TensorView& grad_output);
absl::StatusOr<Tensor> SliceScatter(const SliceScatterArgs& args);
// Backward returns the gradients of SliceScatter(args) for `grad_output`: "input" and "src"
// (kernels/backward.h).
absl::StatusOr<Gradients> Backward(const SliceScatterArgs& args, const TensorView& grad_output);
absl::StatusOr<Tensor> DiagonalScatter(const DiagonalScatterArgs& args);
// Backward returns the gradients of DiagonalScatter(args) for `grad_output`: "input" and "src"
// (kernels/backward.h).
absl::StatusOr<Gradients> Backward(const DiagonalScatterArgs& args, const TensorView& grad_output);

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_VIEW_SCATTER_H_
