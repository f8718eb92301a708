// Pieces of op planning that several ops share and that do not depend on the device: how a
// tensor is walked (scalars as shape [1]), the index dtype rule, and running a plan into a new
// tensor. Internal to kernels/.
#ifndef TENSOROPS_KERNELS_PLAN_CHECKS_H_
#define TENSOROPS_KERNELS_PLAN_CHECKS_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/reduction.h"
#include "kernels/shape.h"
#include "kernels/status_macros.h"
#include "kernels/tensor.h"

namespace tensorops::internal {

// WalkShape is a tensor's shape and strides as the index-walking kernels see them.
struct WalkShape {
  Shape shape;
  Shape strides;
};

// AsWalkShape returns `view`'s shape and strides, with rank-0 tensors acting as shape [1], the way
// PyTorch's gather/scatter family treats scalars (`ensure_nonempty_dim`).
WalkShape AsWalkShape(const TensorView& view);

// CheckIndexDtype returns INVALID_ARGUMENT "<op>: index.dtype = <dtype> is not an index type
// (expected int32 or int64)" unless `index` is int32 or int64.
absl::Status CheckIndexDtype(std::string_view op, const TensorView& index);

// CheckSourceDtype returns INVALID_ARGUMENT "<op>: src.dtype = <a> does not match input.dtype = <b>
// (no implicit casts)" unless the two are equal.
absl::Status CheckSourceDtype(std::string_view op, DataType source_dtype, DataType input_dtype);

// CheckReductionDefined rejects the reductions docs/semantics.md leaves undefined: AMAX/AMIN on
// complex input and MEAN on bool input.
absl::Status CheckReductionDefined(std::string_view op, Reduction reduce, DataType dtype);

// RunIntoNewTensor runs a planned op on the CPU into a new tensor: the body of every `Op(args)`
// convenience function. Returns the plan's error, or the kernel's.
template <typename Plan, typename Kernel>
absl::StatusOr<Tensor> RunIntoNewTensor(const absl::StatusOr<Plan>& plan, Kernel kernel) {
  if (!plan.ok()) return plan.status();
  Tensor result(plan->result_dtype, plan->result_shape);
  TENSOROPS_RETURN_IF_ERROR(kernel(*plan, result.mutable_view()));
  return result;
}

}  // namespace tensorops::internal

#endif  // TENSOROPS_KERNELS_PLAN_CHECKS_H_
