// Backward (docs/semantics.md, Backward): the gradient of every op with respect to each of its
// differentiable inputs, equal to what PyTorch autograd gives for the same call.
//
//   ScatterArgs forward{.input = x, .index = idx, .source = src, .axis = 1,
//                       .reduce = Reduction::kProd, .include_self = true};
//   absl::StatusOr<Gradients> grads = Backward(forward, grad_output.view());
//   const Tensor* grad_x = grads->Find("input");     // shape and dtype of x
//   const Tensor* grad_src = grads->Find("src");     // shape and dtype of src
//
// Every gradient is itself a scatter or a gather, so the backward runs the forward kernels: the
// gather-family ops' gradients are scatter-adds of grad_output into zeros, the scatter-family ops'
// are gathers (select, slice, diagonal, masked_select) of grad_output plus elementwise factors for
// PROD, MEAN, AMAX and AMIN (PyTorch's `scatter_reduce_backward`, as Paddle's put_along_axis design
// adopts it). Where arithmetic happens, float16 and bfloat16 are computed in float32 and rounded
// once.
//
// Choices where PyTorch leaves room, all as PyTorch autograd does unless said otherwise:
//   - ASSIGN (scatter, index_copy, scatter_nd update) with duplicate destinations: every source
//     element gets the gathered gradient, not only the one that won (PyTorch's `scatter` and
//     `index_copy` backward: grad_src = grad.gather(dim, index)).
//   - MEAN: the count includes the destination's own value when include_self.
//   - AMAX/AMIN: the gradient is shared equally by every element equal to the result; the
//     destination's own value counts only when include_self (PyTorch counts it even without
//     include_self, giving the sources a smaller share when the input happens to equal the
//     result; we follow the derivative of the function and the include_self rule of
//     docs/semantics.md instead).
//   - PROD with complex dtypes: the conjugate-Wirtinger convention PyTorch uses for products,
//     grad * conj(d result / d element).
#ifndef TENSOROPS_KERNELS_BACKWARD_H_
#define TENSOROPS_KERNELS_BACKWARD_H_

#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/gather.h"
#include "kernels/index_ops.h"
#include "kernels/masked_scatter.h"
#include "kernels/nd_ops.h"
#include "kernels/scatter.h"
#include "kernels/tensor.h"
#include "kernels/view_scatter.h"

namespace tensorops {

// BackwardArgs names the op whose gradient is wanted, with the arguments of its forward call.
using BackwardArgs = std::variant<GatherArgs, ScatterArgs, IndexSelectArgs, IndexReduceArgs,
                                  SelectScatterArgs, SliceScatterArgs, DiagonalScatterArgs,
                                  GatherNdArgs, ScatterNdArgs, MaskedScatterArgs>;

// Gradients holds one gradient per differentiable input, by argument name: "input" and/or "src".
// ScatterNd with `shape` instead of an input has only "src"; Scatter with a scalar `value` has only
// "input". Each gradient has its argument's shape and dtype and is contiguous.
struct Gradients {
  std::vector<std::pair<std::string, Tensor>> by_argument;

  // Find returns the gradient of `argument`, or nullptr when the op has none for it.
  const Tensor* Find(std::string_view argument) const;
};

// Backward returns the gradients of the op in `args` for the given gradient of its result.
// Errors: the forward op's own INVALID_ARGUMENT for invalid arguments (including out-of-range
// index values); INVALID_ARGUMENT "scatter backward: input.dtype = int64 is not differentiable
// (expected a floating or complex dtype)" for any other dtype; INVALID_ARGUMENT naming grad_output,
// its shape or dtype and the expected one when it does not match the forward result. Runs on the
// CPU.
absl::StatusOr<Gradients> Backward(const BackwardArgs& args, const TensorView& grad_output);

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_BACKWARD_H_
