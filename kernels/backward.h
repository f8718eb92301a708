// Backward (docs/semantics.md, Backward): the gradient of every op with respect to each of its
// differentiable inputs, equal to what PyTorch autograd gives for the same call.
//
//   ScatterArgs forward{.input = x, .index = idx, .source = src, .axis = 1,
//                       .reduce = Reduction::kProd, .include_self = true};
//   absl::StatusOr<Gradients> grads = Backward(forward, grad_output.view());  // kernels/scatter.h
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
// Each op declares its Backward beside its forward (kernels/<op>.h) and defines it in its plan file
// (kernels/<op>_plan.cc) from the parts below. Every Backward returns the forward op's own
// INVALID_ARGUMENT for invalid arguments (including out-of-range index values); INVALID_ARGUMENT
// "scatter backward: input.dtype = int64 is not differentiable (expected a floating or complex
// dtype)" for any other dtype; INVALID_ARGUMENT naming grad_output, its shape or dtype and the
// expected one when it does not match the forward result. It runs on the CPU.
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

#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/dtype.h"
#include "kernels/gradients.h"
#include "kernels/reduction.h"
#include "kernels/scalar.h"
#include "kernels/shape.h"
#include "kernels/tensor.h"

// The parts every op's Backward is built from.
namespace tensorops::backward_internal {

// CheckDifferentiable: the error above unless `dtype` is floating or complex.
absl::Status CheckDifferentiable(std::string_view op, std::string_view argument, DataType dtype);

// CheckGradOutput: the error above unless grad_output has the forward result's shape and dtype.
absl::Status CheckGradOutput(std::string_view op, const TensorView& grad_output,
                             DataType result_dtype, ShapeSpan result_shape);

// ComputeDtype is the dtype the backward does arithmetic in: float32 for the 16-bit floats
// (docs/semantics.md: accumulate in float32, round once), the dtype itself otherwise.
DataType ComputeDtype(DataType dtype);

// ConvertTo returns a contiguous copy of `view` in `dtype`, which is `view`'s own dtype or its
// ComputeDtype (or back).
Tensor ConvertTo(const TensorView& view, DataType dtype);

// Reshaped returns `tensor`'s elements, in row-major order, at `shape` (same element count).
Tensor Reshaped(Tensor tensor, ShapeSpan shape);

// EmbedBlock returns zeros of `shape` with `block` written into its leading block: the gradient
// of a source tensor of which the op read only the leading `block.shape()` (Scatter's src may be
// larger than its index).
Tensor EmbedBlock(Tensor block, ShapeSpan shape);

// SumToShape sums `tensor` over the dimensions broadcasting expanded from `shape` (NumPy rules,
// `shape` broadcastable to tensor's shape). Each summed dimension is a Scatter SUM along it with
// an all-zero index, so the summation is the forward kernel's; 16-bit floats are summed in float32
// across all dimensions and rounded once.
absl::StatusOr<Tensor> SumToShape(Tensor tensor, ShapeSpan shape);

// ---------------------------------------------------------------------------------------------
// The scatter family: Scatter, IndexReduce and ScatterNd share one set of formulas, written
// against ScatterFamily: "reduce into the destinations" is the op's own forward, "read at the
// destinations" is its matching gather. Each op's plan file defines its family.

// ScatterFamily is what Scatter, IndexReduce and ScatterNd share for their backward. Tensors are
// contiguous, in the compute dtype; "input-shaped" is the forward input's shape and
// "block-shaped" the shape of the source elements the forward reads (one per index position).
class ScatterFamily {
 public:
  virtual ~ScatterFamily() = default;
  // Reduce runs the forward op on `self` (input-shaped) and `source` (block-shaped) with the
  // call's own index.
  virtual absl::StatusOr<Tensor> Reduce(const TensorView& self, const TensorView& source,
                                        Reduction reduce, bool include_self) const = 0;
  // Select reads `tensor` (input-shaped) at every index position: the matching gather, whose
  // result is block-shaped.
  virtual absl::StatusOr<Tensor> Select(const TensorView& tensor) const = 0;
};

struct FamilyGradients {
  Tensor input;   // input-shaped
  Tensor source;  // block-shaped
};

// RunScatterFamilyBackward computes both gradients in the compute dtype of `input` (which
// `input`, `source` and `grad` are in) with the formulas of PyTorch's scatter_reduce_backward (as
// Paddle's put_along_axis design adopts them). `alpha` (SUM only) is index_add's: the source
// gradient is scaled by its conjugate.
absl::StatusOr<FamilyGradients> RunScatterFamilyBackward(
    std::string_view op, const ScatterFamily& family, const Tensor& input, const Tensor& source,
    const Tensor& grad, Reduction reduce, bool include_self,
    const std::optional<Scalar>& alpha = std::nullopt);

}  // namespace tensorops::backward_internal

#endif  // TENSOROPS_KERNELS_BACKWARD_H_
