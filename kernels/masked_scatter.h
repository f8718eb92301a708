// MaskedScatter (docs/semantics.md, MaskedScatter): `torch.masked_scatter(input, mask, source)`,
// `paddle.masked_scatter`. The k-th true position of the broadcast mask, in row-major order, takes
// `source.flat[k]`; every other position keeps the input's value.
//
//   absl::StatusOr<MaskedScatterPlan> plan = PlanMaskedScatter({.input = x, .mask = m,
//                                                              .source = s});
//   Tensor out(plan->result_dtype, plan->result_shape);
//   absl::Status status = cpu::MaskedScatter(*plan, out.mutable_view());
//
// Like PyTorch's out-of-place masked_scatter, input and mask broadcast against each other
// (NumPy rules); the result has the broadcast shape. The kernel follows the prefix-sum design of
// Paddle's masked_scatter design (after PyTorch's CUDA kernel) so that the GPU kernel can run the
// same algorithm: count the true positions per block, scan the block counts, then every block
// writes its positions independently.
#ifndef TENSOROPS_KERNELS_MASKED_SCATTER_H_
#define TENSOROPS_KERNELS_MASKED_SCATTER_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gradients.h"
#include "kernels/tensor.h"

namespace tensorops {

// MaskedScatterArgs are the arguments of a MaskedScatter call, as views the caller keeps alive.
struct MaskedScatterArgs {
  TensorView input;
  // BOOL, broadcastable with input.
  TensorView mask;
  // Same dtype as input, any shape; read in row-major order; at least as many elements as the
  // broadcast mask has true positions.
  TensorView source;
};

// MaskedScatterPlan is a validated call; views point into the args' memory.
struct MaskedScatterPlan {
  DataType result_dtype;
  Shape result_shape;
  // Input and mask viewed at result_shape (stride 0 where broadcast).
  TensorView input;
  TensorView mask;
  TensorView source;
};

// PlanMaskedScatter checks dtypes and broadcasting; INVALID_ARGUMENT names "masked_scatter", the
// argument, its value and the rule. The source's size is checked by the kernel, which counts.
absl::StatusOr<MaskedScatterPlan> PlanMaskedScatter(const MaskedScatterArgs& args);

namespace cpu {
// MaskedScatter runs `plan` into `result`, a contiguous tensor of plan.result_shape: disjoint from
// the operands, or the input itself (same memory, input contiguous, not broadcast) to run in
// place; mask and source may not alias it. When the
// source is too small: INVALID_ARGUMENT "masked_scatter: src has 3 elements but mask has 5 true
// positions (src must have at least one element per true position)"; `result` is then
// unspecified.
absl::Status MaskedScatter(const MaskedScatterPlan& plan, const MutableTensorView& result);
}  // namespace cpu

// MaskedScatter plans and runs on the CPU, returning a new tensor.
absl::StatusOr<Tensor> MaskedScatter(const MaskedScatterArgs& args);
// Backward returns the gradients of MaskedScatter(args) for `grad_output`: "input" and "src"
// (kernels/backward.h).
absl::StatusOr<Gradients> Backward(const MaskedScatterArgs& args, const TensorView& grad_output);

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_MASKED_SCATTER_H_
