// Validation and planning of MaskedScatter (kernels/masked_scatter.h); the CPU kernel, and why it
// is the prefix-sum design, is kernels/cpu/masked_scatter.cc.
#include <cstdint>
#include <string_view>

#include "absl/strings/str_format.h"
#include "kernels/dtype.h"
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
  plan.input =
      TensorView(input.dtype(), plan.result_shape,
                 BroadcastStrides(input.shape(), input.strides(), plan.result_shape), input.data());
  plan.mask =
      TensorView(mask.dtype(), plan.result_shape,
                 BroadcastStrides(mask.shape(), mask.strides(), plan.result_shape), mask.data());
  plan.source = args.source;
  return plan;
}

absl::StatusOr<Tensor> MaskedScatter(const MaskedScatterArgs& args) {
  return internal::RunIntoNewTensor(PlanMaskedScatter(args), cpu::MaskedScatter);
}

}  // namespace tensorops
