// Validation and planning of SelectScatter, SliceScatter and DiagonalScatter
// (kernels/view_scatter.h); the CPU kernel is kernels/cpu/view_scatter.cc. Their Backward is at
// the end.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_format.h"
#include "kernels/backward.h"
#include "kernels/dtype.h"
#include "kernels/plan_checks.h"
#include "kernels/shape.h"
#include "kernels/status_macros.h"
#include "kernels/view_scatter.h"

namespace tensorops {
namespace {

constexpr std::string_view kSelectScatter = "select_scatter";
constexpr std::string_view kSliceScatter = "slice_scatter";
constexpr std::string_view kDiagonalScatter = "diagonal_scatter";

// CheckRank rejects inputs with fewer dimensions than the op's view needs (PyTorch: "select()
// cannot be applied to a 0-dim tensor", "diagonal dimensions cannot be identical" for rank 1).
absl::Status CheckRank(std::string_view op, const TensorView& input, int64_t min_rank) {
  if (input.rank() >= min_rank) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: rank of input = %d is too small (input of shape %s; expected rank >= %d)", op,
      input.rank(), ShapeToString(input.shape()), min_rank));
}

absl::Status CheckDtype(std::string_view op, const TensorView& input, const TensorView& src) {
  if (src.dtype() == input.dtype()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: src dtype = %s must equal input dtype %s (no implicit casts)", op,
                      DataTypeName(src.dtype()), DataTypeName(input.dtype())));
}

// CheckSrcShape requires src to have exactly the window's shape (PyTorch does not broadcast src
// in the *_scatter ops). `window_text` says what the window is, for the message.
absl::Status CheckSrcShape(std::string_view op, const TensorView& src, const Shape& window_shape,
                           std::string_view window_text) {
  if (src.shape() == window_shape) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat("%s: src shape = %s must equal %s = %s", op,
                                                    ShapeToString(src.shape()), window_text,
                                                    ShapeToString(window_shape)));
}

// StartPlan fills what every plan shares: result = input's dtype and shape, the window starts as
// the whole contiguous result.
ViewScatterPlan StartPlan(const TensorView& input, const TensorView& src) {
  ViewScatterPlan plan;
  plan.result_dtype = input.dtype();
  plan.result_shape = input.shape();
  plan.input = input;
  plan.src = src;
  plan.window_shape = input.shape();
  plan.window_strides = ContiguousStrides(input.shape());
  plan.window_offset = 0;
  return plan;
}

}  // namespace

absl::StatusOr<ViewScatterPlan> PlanSelectScatter(const SelectScatterArgs& args) {
  const TensorView& input = args.input;
  TENSOROPS_RETURN_IF_ERROR(CheckRank(kSelectScatter, input, 1));
  TENSOROPS_ASSIGN_OR_RETURN(const int64_t axis,
                             NormalizeAxis(kSelectScatter, "axis", args.axis, input.rank()));
  const int64_t size = input.size(axis);
  if (!InRange(args.index, size)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: index = %d is out of range for axis %d of input with size %d (expected %d <= index "
        "< %d)",
        kSelectScatter, args.index, axis, size, -size, size));
  }
  TENSOROPS_RETURN_IF_ERROR(CheckDtype(kSelectScatter, input, args.src));

  ViewScatterPlan plan = StartPlan(input, args.src);
  const int64_t position = WrapIndex(args.index, size);
  plan.window_offset = position * plan.window_strides[axis];
  plan.window_shape.erase(plan.window_shape.begin() + axis);
  plan.window_strides.erase(plan.window_strides.begin() + axis);
  plan.slabs = SlabWindow{.axis = axis, .start = position, .step = 1, .count = 1};
  TENSOROPS_RETURN_IF_ERROR(CheckSrcShape(kSelectScatter, args.src, plan.window_shape,
                                          absl::StrFormat("the shape of input %s without axis %d",
                                                          ShapeToString(input.shape()), axis)));
  return plan;
}

absl::StatusOr<ViewScatterPlan> PlanSliceScatter(const SliceScatterArgs& args) {
  const TensorView& input = args.input;
  TENSOROPS_RETURN_IF_ERROR(CheckRank(kSliceScatter, input, 1));
  TENSOROPS_ASSIGN_OR_RETURN(const int64_t axis,
                             NormalizeAxis(kSliceScatter, "axis", args.axis, input.rank()));
  if (args.step <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: step = %d must be positive", kSliceScatter, args.step));
  }
  TENSOROPS_RETURN_IF_ERROR(CheckDtype(kSliceScatter, input, args.src));

  // Python slice bounds, as torch.slice clamps them: negative counts from the end, then both are
  // clamped to [0, size] and an end before the start gives an empty slice. Adding `size` to a
  // negative bound cannot overflow.
  const int64_t size = input.size(axis);
  const auto clamp_bound = [size](std::optional<int64_t> bound, int64_t absent) {
    int64_t value = bound.value_or(absent);
    if (value < 0) value += size;
    return std::clamp<int64_t>(value, 0, size);
  };
  const int64_t start = clamp_bound(args.start, 0);
  const int64_t end = std::max(start, clamp_bound(args.end, size));
  // Not (end - start + step - 1) / step, which overflows for a step near INT64_MAX.
  const int64_t length = end == start ? 0 : 1 + (end - start - 1) / args.step;

  ViewScatterPlan plan = StartPlan(input, args.src);
  plan.window_offset = length == 0 ? 0 : start * plan.window_strides[axis];
  plan.window_shape[axis] = length;
  // Only a window of two or more steps moves by it (and then step < size: no overflow).
  if (length > 1) plan.window_strides[axis] *= args.step;
  plan.slabs = SlabWindow{.axis = axis, .start = start, .step = args.step, .count = length};
  TENSOROPS_RETURN_IF_ERROR(CheckSrcShape(
      kSliceScatter, args.src, plan.window_shape,
      absl::StrFormat("the shape of input %s sliced along axis %d from %d to %d step %d",
                      ShapeToString(input.shape()), axis, start, end, args.step)));
  return plan;
}

absl::StatusOr<ViewScatterPlan> PlanDiagonalScatter(const DiagonalScatterArgs& args) {
  const TensorView& input = args.input;
  TENSOROPS_RETURN_IF_ERROR(CheckRank(kDiagonalScatter, input, 2));
  TENSOROPS_ASSIGN_OR_RETURN(const int64_t axis1,
                             NormalizeAxis(kDiagonalScatter, "axis1", args.axis1, input.rank()));
  TENSOROPS_ASSIGN_OR_RETURN(const int64_t axis2,
                             NormalizeAxis(kDiagonalScatter, "axis2", args.axis2, input.rank()));
  if (axis1 == axis2) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: axis1 = %d and axis2 = %d refer to the same dimension %d (expected "
                        "two different dimensions)",
                        kDiagonalScatter, args.axis1, args.axis2, axis1));
  }
  TENSOROPS_RETURN_IF_ERROR(CheckDtype(kDiagonalScatter, input, args.src));

  // torch.diagonal: a positive offset drops the first `offset` positions along axis2, a negative
  // one the first `-offset` along axis1. Neither subtraction can overflow: sizes are >= 0 and the
  // offset's sign is known in each branch.
  const int64_t size1 = input.size(axis1);
  const int64_t size2 = input.size(axis2);
  const int64_t offset = args.offset;
  const int64_t length = offset >= 0 ? std::max<int64_t>(0, std::min(size1, size2 - offset))
                                     : std::max<int64_t>(0, std::min(size1 + offset, size2));

  ViewScatterPlan plan = StartPlan(input, args.src);
  const int64_t stride1 = plan.window_strides[axis1];
  const int64_t stride2 = plan.window_strides[axis2];
  if (length > 0) plan.window_offset = offset >= 0 ? offset * stride2 : -offset * stride1;
  // Drop the higher axis first so that the lower one's position stays put.
  for (const int64_t axis : {std::max(axis1, axis2), std::min(axis1, axis2)}) {
    plan.window_shape.erase(plan.window_shape.begin() + axis);
    plan.window_strides.erase(plan.window_strides.begin() + axis);
  }
  plan.window_shape.push_back(length);
  plan.window_strides.push_back(stride1 + stride2);
  TENSOROPS_RETURN_IF_ERROR(CheckSrcShape(
      kDiagonalScatter, args.src, plan.window_shape,
      absl::StrFormat("the shape of the diagonal of input %s with offset %d between axes %d "
                      "and %d",
                      ShapeToString(input.shape()), offset, axis1, axis2)));
  return plan;
}

absl::StatusOr<Tensor> SelectScatter(const SelectScatterArgs& args) {
  return internal::RunIntoNewTensor(PlanSelectScatter(args), cpu::ViewScatter);
}

absl::StatusOr<Tensor> SliceScatter(const SliceScatterArgs& args) {
  return internal::RunIntoNewTensor(PlanSliceScatter(args), cpu::ViewScatter);
}

absl::StatusOr<Tensor> DiagonalScatter(const DiagonalScatterArgs& args) {
  return internal::RunIntoNewTensor(PlanDiagonalScatter(args), cpu::ViewScatter);
}

// ---------------------------------------------------------------------------------------------
// Backward (kernels/backward.h).

namespace {

using backward_internal::CheckDifferentiable;
using backward_internal::CheckGradOutput;
using backward_internal::Reshaped;

// ViewScatterBackward: grad_src is the window of grad_output; grad_input is grad_output with the
// window zeroed, i.e. the op itself run on (grad_output, zeros).
template <typename Args, typename PlanFn, typename RunFn>
absl::StatusOr<Gradients> ViewScatterBackward(std::string_view op, const Args& args,
                                              const TensorView& grad, PlanFn plan_fn,
                                              RunFn run_fn) {
  TENSOROPS_ASSIGN_OR_RETURN(ViewScatterPlan plan, plan_fn(args));
  TENSOROPS_RETURN_IF_ERROR(CheckDifferentiable(op, "input", args.input.dtype()));
  TENSOROPS_RETURN_IF_ERROR(CheckGradOutput(op, grad, plan.result_dtype, plan.result_shape));
  const Tensor grad_copy = Tensor::FromView(grad);
  const Tensor zeros = Tensor::Zeros(args.src.dtype(), args.src.shape());
  Args zeroing = args;
  zeroing.input = grad_copy.view();
  zeroing.src = zeros.view();
  TENSOROPS_ASSIGN_OR_RETURN(Tensor grad_input, run_fn(zeroing));
  const TensorView window(
      grad.dtype(), plan.window_shape, plan.window_strides,
      static_cast<const char*>(grad_copy.data()) + plan.window_offset * ItemSize(grad.dtype()));
  Gradients out;
  out.by_argument.emplace_back("input", std::move(grad_input));
  out.by_argument.emplace_back("src", Reshaped(Tensor::FromView(window), args.src.shape()));
  return out;
}

}  // namespace

absl::StatusOr<Gradients> Backward(const SelectScatterArgs& args, const TensorView& grad) {
  return ViewScatterBackward(
      "select_scatter", args, grad, PlanSelectScatter,
      [](const SelectScatterArgs& zeroing) { return SelectScatter(zeroing); });
}

absl::StatusOr<Gradients> Backward(const SliceScatterArgs& args, const TensorView& grad) {
  return ViewScatterBackward("slice_scatter", args, grad, PlanSliceScatter,
                             [](const SliceScatterArgs& zeroing) { return SliceScatter(zeroing); });
}

absl::StatusOr<Gradients> Backward(const DiagonalScatterArgs& args, const TensorView& grad) {
  return ViewScatterBackward(
      "diagonal_scatter", args, grad, PlanDiagonalScatter,
      [](const DiagonalScatterArgs& zeroing) { return DiagonalScatter(zeroing); });
}

}  // namespace tensorops
