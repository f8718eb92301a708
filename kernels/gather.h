// Gather: `torch.gather(input, axis, index)` and Paddle's `take_along_axis` (docs/semantics.md,
// Gather).
//
//   GatherArgs args{.input = x, .index = idx, .axis = 1};
//   absl::StatusOr<GatherPlan> plan = PlanGather(args);   // validates shapes, dtypes, axis
//   Tensor out(plan->result_dtype, plan->result_shape);
//   absl::Status status = cpu::Gather(*plan, out.mutable_view());  // checks index values
//
// Planning is separate from running so that a caller (the server) can validate a request and size
// its result buffer before queueing the work for a device. `Gather(args)` does both in one call.
#ifndef TENSOROPS_KERNELS_GATHER_H_
#define TENSOROPS_KERNELS_GATHER_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gradients.h"
#include "kernels/tensor.h"

namespace tensorops {

// GatherArgs are the arguments of a Gather call, as views of memory the caller keeps alive.
struct GatherArgs {
  TensorView input;
  // int32 or int64; values in [-input.size(axis), input.size(axis)).
  TensorView index;
  // In [-rank, rank).
  int64_t axis = 0;
  // Paddle's take_along_axis broadcast: input and index are first broadcast against each other on
  // every dimension but `axis`.
  bool broadcast = false;
};

// GatherPlan is a validated Gather call: views already broadcast and the axis normalized. It points
// into the memory of the GatherArgs it came from.
struct GatherPlan {
  // The op that planned this call (errors name it): "gather", "index_select".
  std::string_view op = "gather";
  DataType result_dtype;
  Shape result_shape;
  // The input with its `axis` stride kept in `input_axis_stride` and zeroed in the view, viewed at
  // the iteration shape (= result_shape, except rank-0 calls, which iterate shape [1]).
  TensorView input;
  int64_t input_axis_stride = 0;
  int64_t input_axis_size = 0;
  TensorView index;
  int64_t axis = 0;
  // The index tensor as the caller sent it, for error messages.
  TensorView original_index;
};

// PlanGather validates `args` against docs/semantics.md (dtypes, ranks, sizes, axis) and returns
// the plan, or INVALID_ARGUMENT with the argument, value and rule. Index values are checked when
// the kernel runs.
absl::StatusOr<GatherPlan> PlanGather(const GatherArgs& args);

namespace cpu {
// Gather runs `plan` on the CPU into `result`, a contiguous tensor of plan.result_shape. Returns
// INVALID_ARGUMENT naming the first out-of-range index in row-major order; `result` is then
// unspecified.
absl::Status Gather(const GatherPlan& plan, const MutableTensorView& result);
}  // namespace cpu

// Gather plans and runs `args` on the CPU, returning a new tensor.
absl::StatusOr<Tensor> Gather(const GatherArgs& args);
// Backward returns the gradients of Gather(args) for `grad_output`: "input" (kernels/backward.h).
absl::StatusOr<Gradients> Backward(const GatherArgs& args, const TensorView& grad_output);

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_GATHER_H_
