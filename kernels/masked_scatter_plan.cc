// Validation and planning of MaskedScatter (kernels/masked_scatter.h); the CPU kernel, and why it
// is the prefix-sum design, is kernels/cpu/masked_scatter.cc. Its Backward is at the end.
#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "kernels/backward.h"
#include "kernels/dtype.h"
#include "kernels/index_ops.h"
#include "kernels/masked_scatter.h"
#include "kernels/plan_checks.h"
#include "kernels/shape.h"
#include "kernels/status_macros.h"

namespace tensorops {
namespace {

constexpr std::string_view kMaskedScatter = "masked_scatter";

}  // namespace

absl::StatusOr<MaskedScatterPlan> PlanMaskedScatter(const MaskedScatterArgs& args) {
  const TensorView& input = args.input;
  const TensorView& mask = args.mask;
  // PyTorch's order: broadcast (expand_outplace), then the source's dtype, then the mask's.
  TENSOROPS_ASSIGN_OR_RETURN(
      Shape result_shape,
      BroadcastShapes(kMaskedScatter, "input", input.shape(), "mask", mask.shape()));
  TENSOROPS_RETURN_IF_ERROR(
      internal::CheckSourceDtype(kMaskedScatter, args.source.dtype(), input.dtype()));
  if (mask.dtype() != DataType::kBool) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: mask.dtype = %s must be bool",
                                                      kMaskedScatter, DataTypeName(mask.dtype())));
  }

  MaskedScatterPlan plan;
  plan.result_dtype = input.dtype();
  plan.result_shape = std::move(result_shape);
  plan.input = input.Relaid(plan.result_shape,
                            BroadcastStrides(input.shape(), input.strides(), plan.result_shape));
  plan.mask = mask.Relaid(plan.result_shape,
                          BroadcastStrides(mask.shape(), mask.strides(), plan.result_shape));
  plan.source = args.source;
  return plan;
}

absl::StatusOr<Tensor> MaskedScatter(const MaskedScatterArgs& args) {
  return internal::RunIntoNewTensor(PlanMaskedScatter(args), cpu::MaskedScatter);
}

// ---------------------------------------------------------------------------------------------
// Backward (kernels/backward.h).

namespace {

using backward_internal::CheckDifferentiable;
using backward_internal::CheckGradOutput;
using backward_internal::SumToShape;

}  // namespace

absl::StatusOr<Gradients> Backward(const MaskedScatterArgs& args, const TensorView& grad) {
  constexpr std::string_view kOp = "masked_scatter";
  TENSOROPS_ASSIGN_OR_RETURN(MaskedScatterPlan plan, PlanMaskedScatter(args));
  const DataType dtype = args.input.dtype();
  TENSOROPS_RETURN_IF_ERROR(CheckDifferentiable(kOp, "input", dtype));
  TENSOROPS_RETURN_IF_ERROR(CheckGradOutput(kOp, grad, plan.result_dtype, plan.result_shape));
  // The true positions of the broadcast mask, in row-major order.
  const Tensor mask = Tensor::FromView(plan.mask);
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < mask.numel(); ++i) {
    if (mask.data_as<bool>()[i]) positions.push_back(i);
  }
  if (static_cast<int64_t>(positions.size()) > args.source.numel()) {
    // The forward's own error names both counts.
    return MaskedScatter(args).status();
  }
  const Tensor grad_copy = Tensor::FromView(grad);
  // grad_input: masked_fill(grad, mask, 0), summed over what broadcasting expanded.
  const Tensor zeros = Tensor::Zeros(dtype, {static_cast<int64_t>(positions.size())});
  TENSOROPS_ASSIGN_OR_RETURN(
      Tensor masked_grad,
      MaskedScatter(
          MaskedScatterArgs{.input = grad_copy.view(), .mask = args.mask, .source = zeros.view()}));
  TENSOROPS_ASSIGN_OR_RETURN(Tensor grad_input,
                             SumToShape(std::move(masked_grad), args.input.shape()));
  // grad_src: masked_select(grad, mask), an index_select of the flattened gradient, padded with
  // zeros to the source's shape.
  Tensor position_index(DataType::kInt64, {static_cast<int64_t>(positions.size())});
  if (!positions.empty()) {
    std::memcpy(position_index.data(), positions.data(), positions.size() * sizeof(int64_t));
  }
  const TensorView flat_grad(dtype, {grad_copy.numel()}, grad_copy.data());
  TENSOROPS_ASSIGN_OR_RETURN(
      Tensor selected,
      IndexSelect(IndexSelectArgs{.input = flat_grad, .index = position_index.view()}));
  Tensor grad_source = Tensor::Zeros(dtype, args.source.shape());
  if (selected.nbytes() > 0) {
    std::memcpy(grad_source.data(), selected.data(), static_cast<size_t>(selected.nbytes()));
  }
  Gradients out;
  out.by_argument.emplace_back("input", std::move(grad_input));
  out.by_argument.emplace_back("src", std::move(grad_source));
  return out;
}

}  // namespace tensorops
