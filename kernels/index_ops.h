// IndexSelect and IndexReduce (docs/semantics.md, IndexSelect and IndexReduce): the 1-D-index
// relatives of Gather and Scatter. They plan onto the Gather and Scatter kernels, viewing the 1-D
// index broadcast over every other dimension, so they share those kernels' loops, parallelism and
// error reporting.
//
//   absl::StatusOr<GatherPlan> plan = PlanIndexSelect({.input = x, .index = idx, .axis = 0});
//   Tensor out(plan->result_dtype, plan->result_shape);
//   absl::Status status = cpu::Gather(*plan, out.mutable_view());
#ifndef TENSOROPS_KERNELS_INDEX_OPS_H_
#define TENSOROPS_KERNELS_INDEX_OPS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/gather.h"
#include "kernels/gradients.h"
#include "kernels/reduction.h"
#include "kernels/scalar.h"
#include "kernels/scatter.h"
#include "kernels/tensor.h"

namespace tensorops {

// IndexSelectArgs: `torch.index_select(input, axis, index)`, `paddle.gather(x, index, axis)`.
struct IndexSelectArgs {
  TensorView input;
  // 1-D (or rank 0, as one index), int32 or int64, values in [-size, size) of `axis`.
  TensorView index;
  int64_t axis = 0;
};

// PlanIndexSelect validates `args` and returns a plan that cpu::Gather runs; the result has the
// input's shape with `axis` sized like the index. Errors name "index_select".
absl::StatusOr<GatherPlan> PlanIndexSelect(const IndexSelectArgs& args);

// IndexSelect plans and runs on the CPU.
absl::StatusOr<Tensor> IndexSelect(const IndexSelectArgs& args);
// Backward returns the gradients of IndexSelect(args) for `grad_output`: "input"
// (kernels/backward.h).
absl::StatusOr<Gradients> Backward(const IndexSelectArgs& args, const TensorView& grad_output);

// IndexReduceArgs: `torch.index_add` (SUM with alpha), `index_copy` (ASSIGN), `index_reduce`
// (PROD, MEAN, AMAX, AMIN with include_self), `paddle.index_add`, `paddle.scatter`.
struct IndexReduceArgs {
  TensorView input;
  // 1-D, int32 or int64, one entry per slice of `source` along `axis`.
  TensorView index;
  // input's shape with `axis` sized like the index; same dtype as input.
  TensorView source;
  int64_t axis = 0;
  Reduction reduce = Reduction::kSum;
  bool include_self = true;
  // Scales the source for SUM (index_add's alpha); must be 1 for other reductions.
  Scalar alpha = Scalar(int64_t{1});
};

// PlanIndexReduce validates `args` and returns a plan that cpu::Scatter runs. ASSIGN with
// duplicate indices keeps the last slice. Errors name "index_reduce".
absl::StatusOr<ScatterPlan> PlanIndexReduce(const IndexReduceArgs& args);

// IndexReduce plans and runs on the CPU.
absl::StatusOr<Tensor> IndexReduce(const IndexReduceArgs& args);
// Backward returns the gradients of IndexReduce(args) for `grad_output`: "input" and "src"
// (kernels/backward.h).
absl::StatusOr<Gradients> Backward(const IndexReduceArgs& args, const TensorView& grad_output);

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_INDEX_OPS_H_
