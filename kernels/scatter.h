// Scatter: `torch.scatter / scatter_add / scatter_reduce` and Paddle's `put_along_axis`
// (docs/semantics.md, Scatter), with reductions ASSIGN, SUM, PROD, MEAN, AMAX and AMIN.
//
//   ScatterArgs args{.input = x, .index = idx, .source = src, .axis = 0,
//                    .reduce = Reduction::kSum, .include_self = true};
//   absl::StatusOr<ScatterPlan> plan = PlanScatter(args);
//   Tensor out(plan->result_dtype, plan->result_shape);
//   absl::Status status = cpu::Scatter(*plan, out.mutable_view());
//
// Semantics beyond PyTorch's, fixed by docs/semantics.md: negative indices count from the end;
// ASSIGN with duplicate destinations keeps the source element that comes last in row-major order of
// the index; float16/bfloat16 SUM/PROD/MEAN accumulate in float32 and round once; integer MEAN
// floors.
#ifndef TENSOROPS_KERNELS_SCATTER_H_
#define TENSOROPS_KERNELS_SCATTER_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <variant>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gradients.h"
#include "kernels/reduction.h"
#include "kernels/scalar.h"
#include "kernels/tensor.h"

namespace tensorops {

// ScatterArgs are the arguments of a Scatter call, as views of memory the caller keeps alive.
struct ScatterArgs {
  TensorView input;
  // int32 or int64; values in [-input.size(axis), input.size(axis)).
  TensorView index;
  // The source tensor (same dtype as input), or a scalar `value` broadcast to the index's shape.
  std::variant<TensorView, Scalar> source;
  int64_t axis = 0;
  Reduction reduce = Reduction::kAssign;
  bool include_self = true;
  // Paddle's put_along_axis broadcast (docs/semantics.md, Scatter).
  bool broadcast = false;
};

// ScatterPlan is a validated Scatter call. It points into the memory of the ScatterArgs it came
// from, except for a scalar value, which it owns.
struct ScatterPlan {
  // The op that planned this call (errors name it): "scatter", "index_reduce".
  std::string_view op = "scatter";
  DataType result_dtype;
  Shape result_shape;
  TensorView input;
  // Index and source, both viewed at the iteration shape (the index's shape after broadcasting;
  // [1] for rank-0 calls); broadcast dimensions have stride 0.
  TensorView index;
  TensorView source;
  int64_t axis = 0;
  Reduction reduce = Reduction::kAssign;
  bool include_self = true;
  // GPU only: reduce float SUM/MEAN/PROD in an order fixed by the data (sort by destination, then
  // a segmented reduction), so that repeated calls agree bit for bit. The CPU kernels always are.
  bool deterministic = false;
  TensorView original_index;
  // Owns the source when the plan made it: a converted scalar `value`, or a scaled copy.
  std::optional<Tensor> source_storage;
};

// PlanScatter validates `args` against docs/semantics.md and returns the plan, or INVALID_ARGUMENT
// with the argument, value and rule. Index values are checked when the kernel runs.
absl::StatusOr<ScatterPlan> PlanScatter(const ScatterArgs& args);

namespace cpu {
// Scatter runs `plan` on the CPU into `result`, a contiguous tensor of plan.result_shape that is
// either disjoint from every operand or, to run in place, the input itself (the same memory, when
// the input is contiguous of that shape); the index and source may not alias it. Returns
// INVALID_ARGUMENT naming the first out-of-range index in row-major order; `result` is then
// unspecified.
absl::Status Scatter(const ScatterPlan& plan, const MutableTensorView& result);
}  // namespace cpu

// Scatter plans and runs `args` on the CPU, returning a new tensor.
absl::StatusOr<Tensor> Scatter(const ScatterArgs& args);
// Backward returns the gradients of Scatter(args) for `grad_output`: "input" and, with a tensor
// src, "src" (kernels/backward.h).
absl::StatusOr<Gradients> Backward(const ScatterArgs& args, const TensorView& grad_output);

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_SCATTER_H_
