// GatherNd and ScatterNd (docs/semantics.md, GatherNd and ScatterNd): ops whose index tensor
// carries a vector of coordinates per position in its last dimension, `index.shape = B + [k]`.
//
// Two forms, chosen by `axes`:
//   - `axes` empty: TensorFlow / Paddle / ONNX gather_nd and tensor_scatter_nd_*. Index row b
//     addresses the slice `input[b[:batch_dims], index[b, 0], ..., index[b, k-1], ...]`; the
//     gathered (or scattered) tensor has shape `B + input.shape[batch_dims + k:]`.
//   - `axes = [d_0, .., d_{k-1}]`: the compiler design's form, `gather_nd(dims=axes)`.
//     `index.rank == input.rank + 1` and position i addresses the single element
//     `input[i with i_{d_j} := index[i, j]]`; the gathered (or scattered) tensor has shape B.
//
// Both forms plan to one NdPlan: per position b, the addressed element offset is
//   sum_d b_d * position_strides[d]  +  sum_j wrap(index[b, j]) * component_strides[j]
// and `slice_size` consecutive elements follow it. The kernels only ever see that formula.
//
//   absl::StatusOr<NdPlan> plan = PlanGatherNd({.input = x, .index = idx, .batch_dims = 1});
//   Tensor out(plan->result_dtype, plan->result_shape);
//   absl::Status status = cpu::GatherNd(*plan, out.mutable_view());
#ifndef TENSOROPS_KERNELS_ND_OPS_H_
#define TENSOROPS_KERNELS_ND_OPS_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gather.h"
#include "kernels/gradients.h"
#include "kernels/reduction.h"
#include "kernels/scatter.h"
#include "kernels/tensor.h"

namespace tensorops {

// GatherNdArgs: `tf.gather_nd(params, indices, batch_dims)`, `paddle.gather_nd(x, index)`, ONNX
// GatherND; or, with `axes`, the compiler design's `gather_nd(x, index, dims)`.
struct GatherNdArgs {
  TensorView input;
  // int32 or int64, rank >= 1; the last dimension holds the coordinates (k of them). Values in
  // [-size, size) of the dimension each one addresses.
  TensorView index;
  // Empty: the TensorFlow form. Otherwise one distinct axis (in [-rank, rank)) per coordinate.
  std::vector<int64_t> axes;
  // TensorFlow form only: the leading dimensions that index and input share (sizes must match).
  int64_t batch_dims = 0;
};

// ScatterNdArgs: `tf.tensor_scatter_nd_update/add/min/max`, `paddle.scatter_nd_add`,
// `paddle.scatter_nd(index, updates, shape)` (input absent: zeros of `shape`); with `axes`, the
// the compiler design's `scatter_nd(y, src, index, dims)`.
struct ScatterNdArgs {
  // The tensor to update. Absent: zeros of `shape` in the source's dtype.
  std::optional<TensorView> input;
  // Only when `input` is absent.
  Shape shape;
  // As GatherNdArgs::index.
  TensorView index;
  // Same dtype as input. TensorFlow form: shape `B + input.shape[batch_dims + k:]` exactly. Axes
  // form: rank of input, at least B in every dimension (its leading block B is read, like
  // Scatter's src).
  TensorView source;
  std::vector<int64_t> axes;
  int64_t batch_dims = 0;
  Reduction reduce = Reduction::kAssign;
  bool include_self = true;
};

// NdPlan is a validated GatherNd or ScatterNd call. Offsets and strides count elements of the
// contiguous addressed tensor (the input for GatherNd, the result for ScatterNd). It points into
// the memory of the args it came from.
struct NdPlan {
  // "gather_nd" or "scatter_nd"; errors name it.
  std::string_view op;
  DataType result_dtype;
  Shape result_shape;
  // The addressed tensor as the caller gave it (any strides). For ScatterNd without an input its
  // data is null and the result starts as zeros.
  TensorView input;
  // B, the positions: the index's shape without its last dimension (rank-0 input in the axes form
  // walks B = [1]).
  Shape positions;
  // The index viewed at `positions + [k]`.
  TensorView index;
  // Per dimension of `positions`: the offset stride its coordinate adds directly (batch dims in
  // the TensorFlow form, the non-indexed dims in the axes form; 0 otherwise).
  Shape position_strides;
  // Per coordinate j: the input dimension it addresses, that dimension's size and stride.
  Shape component_axes;
  Shape component_sizes;
  Shape component_strides;
  // Elements addressed per position: the product of input.shape[batch_dims + k:] in the
  // TensorFlow form, 1 in the axes form. Contiguous in the addressed tensor.
  int64_t slice_size = 1;
  // ScatterNd only: the source viewed at `positions + slice shape` (slice shape = the trailing
  // input dims in the TensorFlow form, none in the axes form).
  TensorView source;
  Reduction reduce = Reduction::kAssign;
  bool include_self = true;
  // ScatterNd on the GPU only, as ScatterPlan::deterministic: float SUM/MEAN/PROD in the CPU's
  // order, giving its bytes. The CPU kernels always are.
  bool deterministic = false;
  // The index as the caller sent it, for error messages.
  TensorView original_index;
  // Set when the call is a Gather or Scatter along one axis: the axes form with one axis (and,
  // for ScatterNd, an input). The kernels then run that op's kernel, whose axis walk keeps the
  // rows it reads in cache: the identity `Gather(x, ax, idx) == GatherNd(x, idx[..., None],
  // axes=[ax])` of docs/semantics.md read backwards. Errors still name the op and the index as
  // sent.
  std::optional<GatherPlan> single_axis_gather;
  std::optional<ScatterPlan> single_axis_scatter;
};

// PlanGatherNd / PlanScatterNd validate the args against docs/semantics.md (dtypes, ranks, shapes,
// axes, batch_dims, reductions) and return the plan, or INVALID_ARGUMENT naming the op
// ("gather_nd", "scatter_nd"), the argument, its value and the rule. Index values are checked by
// the kernels.
absl::StatusOr<NdPlan> PlanGatherNd(const GatherNdArgs& args);
absl::StatusOr<NdPlan> PlanScatterNd(const ScatterNdArgs& args);

namespace cpu {
// GatherNd / ScatterNd run `plan` into `result`, a contiguous tensor of plan.result_shape (for
// ScatterNd disjoint from the operands or, to run in place, the input itself). An out-of-range
// index gives INVALID_ARGUMENT naming the first one in row-major order of the index, e.g.
// "gather_nd: index[1, 0] = 7 is out of range for axis 0 of input with size 4 (expected -4 <= index
// < 4)"; `result` is then unspecified. ScatterNd's duplicates follow docs/semantics.md: ASSIGN
// keeps the last position in row-major order of B.
absl::Status GatherNd(const NdPlan& plan, const MutableTensorView& result);
absl::Status ScatterNd(const NdPlan& plan, const MutableTensorView& result);
}  // namespace cpu

// Plan and run on the CPU, returning a new tensor.
absl::StatusOr<Tensor> GatherNd(const GatherNdArgs& args);
// Backward returns the gradients of GatherNd(args) for `grad_output`: "input" (kernels/backward.h).
absl::StatusOr<Gradients> Backward(const GatherNdArgs& args, const TensorView& grad_output);
absl::StatusOr<Tensor> ScatterNd(const ScatterNdArgs& args);
// Backward returns the gradients of ScatterNd(args) for `grad_output`: "src" and, given an input,
// "input" (kernels/backward.h).
absl::StatusOr<Gradients> Backward(const ScatterNdArgs& args, const TensorView& grad_output);

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_ND_OPS_H_
