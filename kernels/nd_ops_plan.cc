// Validation and planning of GatherNd and ScatterNd: both forms reduce to one NdPlan (see
// nd_ops.h), so the checks of the index and its addressing live in one place, PlanAddressing.
// Their Backward is at the end.
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "kernels/backward.h"
#include "kernels/nd_ops.h"
#include "kernels/plan_checks.h"
#include "kernels/status_macros.h"

namespace tensorops {
namespace {

using internal::AsWalkShape;
using internal::WalkShape;

// The dimensions [begin, end) of `shape`.
Shape SubShape(const Shape& shape, size_t begin, size_t end) {
  return Shape(shape.begin() + begin, shape.begin() + end);
}

Shape Concat(const Shape& head, const Shape& tail) {
  Shape joined = head;
  joined.insert(joined.end(), tail.begin(), tail.end());
  return joined;
}

// The TensorFlow form: index row b addresses the slice input[b[:batch_dims], index[b, :], ...].
absl::Status PlanTensorFlowForm(std::string_view op, const Shape& input_shape,
                                const TensorView& index, int64_t batch_dims, NdPlan& plan,
                                Shape* slice_shape) {
  const int64_t index_rank = index.rank();
  const int64_t input_rank = static_cast<int64_t>(input_shape.size());
  const int64_t k = index.shape().back();
  if (batch_dims < 0 || batch_dims >= index_rank) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: batch_dims = %d is out of range for an index of rank %d (expected 0 <= batch_dims < "
        "%d)",
        op, batch_dims, index_rank, index_rank));
  }
  if (batch_dims + k > input_rank) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: index.shape[-1] = %d is too large: with batch_dims = %d it addresses %d dimensions "
        "but input has rank %d",
        op, k, batch_dims, batch_dims + k, input_rank));
  }
  for (int64_t d = 0; d < batch_dims; ++d) {
    if (index.size(d) != input_shape[d]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: index.shape[%d] = %d does not match input.shape[%d] = %d (the batch_dims = %d "
          "leading dimensions must match)",
          op, d, index.size(d), d, input_shape[d], batch_dims));
    }
  }
  const Shape input_strides = ContiguousStrides(input_shape);
  plan.positions = SubShape(index.shape(), 0, index_rank - 1);
  plan.position_strides.assign(plan.positions.size(), 0);
  for (int64_t d = 0; d < batch_dims; ++d) plan.position_strides[d] = input_strides[d];
  for (int64_t j = 0; j < k; ++j) {
    plan.component_axes.push_back(batch_dims + j);
    plan.component_sizes.push_back(input_shape[batch_dims + j]);
    plan.component_strides.push_back(input_strides[batch_dims + j]);
  }
  *slice_shape = SubShape(input_shape, batch_dims + k, input_rank);
  plan.slice_size = NumElements(*slice_shape);
  plan.index = index;
  return absl::OkStatus();
}

// The axes form: position i addresses input[i with i_{axes[j]} := index[i, j]]. A rank-0 input
// walks as shape [1] (like Gather), with B = [1].
absl::Status PlanAxesForm(std::string_view op, const Shape& input_shape, const TensorView& index,
                          const std::vector<int64_t>& axes, int64_t batch_dims, NdPlan& plan) {
  const int64_t input_rank = static_cast<int64_t>(input_shape.size());
  const int64_t k = index.shape().back();
  if (batch_dims != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: batch_dims = %d must be 0 when axes are given (batch_dims belongs to the form "
        "without axes)",
        op, batch_dims));
  }
  if (static_cast<int64_t>(axes.size()) != k) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: axes has %d entries but index.shape[-1] = %d (one axis per "
                        "coordinate)",
                        op, axes.size(), k));
  }
  if (index.rank() != input_rank + 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: index has rank %d but must have rank input.rank + 1 = %d when axes are given", op,
        index.rank(), input_rank + 1));
  }
  const Shape walk_shape = input_rank == 0 ? Shape{1} : input_shape;
  const Shape input_strides = ContiguousStrides(walk_shape);
  std::vector<bool> is_axis(walk_shape.size(), false);
  for (size_t j = 0; j < axes.size(); ++j) {
    TENSOROPS_ASSIGN_OR_RETURN(
        const int64_t axis, NormalizeAxis(op, absl::StrFormat("axes[%d]", j), axes[j], input_rank));
    if (is_axis[axis]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: axes[%d] = %d repeats axis %d (axes must be distinct)", op, j, axes[j], axis));
    }
    is_axis[axis] = true;
    plan.component_axes.push_back(axis);
    plan.component_sizes.push_back(walk_shape[axis]);
    plan.component_strides.push_back(input_strides[axis]);
  }
  if (input_rank == 0) {
    plan.positions = {1};
    plan.index = index.Relaid(Shape{1, k}, Shape{0, index.strides()[0]});
  } else {
    plan.positions = SubShape(index.shape(), 0, input_rank);
    plan.index = index;
  }
  plan.position_strides.assign(walk_shape.size(), 0);
  for (size_t d = 0; d < walk_shape.size(); ++d) {
    if (is_axis[d]) continue;
    if (plan.positions[d] > walk_shape[d]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: index.shape[%d] = %d is larger than input.shape[%d] = %d (index may not be larger "
          "than input in dimensions not in axes)",
          op, d, plan.positions[d], d, walk_shape[d]));
    }
    plan.position_strides[d] = input_strides[d];
  }
  plan.slice_size = 1;
  return absl::OkStatus();
}

// PlanAddressing fills the addressing part of `plan` (positions, index, strides, components,
// slice) for an addressed tensor of `input_shape`; `slice_shape` receives the trailing dimensions
// each position addresses (empty in the axes form).
absl::Status PlanAddressing(std::string_view op, const Shape& input_shape, const TensorView& index,
                            const std::vector<int64_t>& axes, int64_t batch_dims, NdPlan& plan,
                            Shape* slice_shape) {
  TENSOROPS_RETURN_IF_ERROR(internal::CheckIndexDtype(op, index));
  if (index.rank() == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: index has rank 0 but must have rank >= 1 (its last dimension holds the coordinates)",
        op));
  }
  plan.op = op;
  plan.original_index = index;
  slice_shape->clear();
  if (axes.empty()) {
    return PlanTensorFlowForm(op, input_shape, index, batch_dims, plan, slice_shape);
  }
  return PlanAxesForm(op, input_shape, index, axes, batch_dims, plan);
}

// The index without its coordinate dimension, for a single-axis call (k == 1).
TensorView WithoutCoordinateDim(const TensorView& index) {
  const Shape shape = SubShape(index.shape(), 0, index.rank() - 1);
  const Shape strides = SubShape(index.strides(), 0, index.rank() - 1);
  return index.Relaid(shape, strides);
}

}  // namespace

absl::StatusOr<NdPlan> PlanGatherNd(const GatherNdArgs& args) {
  constexpr std::string_view kOp = "gather_nd";
  NdPlan plan;
  Shape slice_shape;
  TENSOROPS_RETURN_IF_ERROR(PlanAddressing(kOp, args.input.shape(), args.index, args.axes,
                                           args.batch_dims, plan, &slice_shape));
  plan.result_dtype = args.input.dtype();
  const Shape batch = SubShape(args.index.shape(), 0, args.index.rank() - 1);
  plan.result_shape = Concat(batch, slice_shape);
  plan.input = args.input;
  if (args.axes.size() == 1) {
    absl::StatusOr<GatherPlan> gather = PlanGather({.input = args.input,
                                                    .index = WithoutCoordinateDim(args.index),
                                                    .axis = plan.component_axes[0]});
    if (gather.ok()) {
      gather->op = kOp;
      gather->original_index = args.index;
      plan.single_axis_gather = *std::move(gather);
    }
  }
  return plan;
}

absl::StatusOr<NdPlan> PlanScatterNd(const ScatterNdArgs& args) {
  constexpr std::string_view kOp = "scatter_nd";
  const DataType dtype = args.input ? args.input->dtype() : args.source.dtype();
  Shape input_shape;
  if (args.input) {
    if (!args.shape.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: shape = %s is given together with input (give input, or shape for zeros, not "
          "both)",
          kOp, ShapeToString(args.shape)));
    }
    input_shape = args.input->shape();
    TENSOROPS_RETURN_IF_ERROR(internal::CheckSourceDtype(kOp, args.source.dtype(), dtype));
  } else {
    // "scatter_nd: shape[1] = -2 is negative ...", "... has more elements than fit in int64".
    TENSOROPS_RETURN_IF_ERROR(CheckedNumElements(args.shape, kOp).status());
    input_shape = args.shape;
  }
  TENSOROPS_RETURN_IF_ERROR(internal::CheckReductionDefined(kOp, args.reduce, dtype));

  NdPlan plan;
  Shape slice_shape;
  TENSOROPS_RETURN_IF_ERROR(
      PlanAddressing(kOp, input_shape, args.index, args.axes, args.batch_dims, plan, &slice_shape));

  if (args.axes.empty()) {
    // TensorFlow form: the updates are exactly B + the addressed slice.
    const Shape expected = Concat(plan.positions, slice_shape);
    if (args.source.shape() != expected) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: src.shape = %s does not match index.shape[:-1] + input.shape[batch_dims + k:] = %s",
          kOp, ShapeToString(args.source.shape()), ShapeToString(expected)));
    }
    plan.source = args.source;
  } else {
    // Axes form: like Scatter's src, any size at least B, of which the leading block B is read.
    const WalkShape source = AsWalkShape(args.source);
    if (source.shape.size() != plan.positions.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: src has rank %d but input has rank %d (they must be equal when axes are given)", kOp,
          args.source.rank(), input_shape.size()));
    }
    for (size_t d = 0; d < source.shape.size(); ++d) {
      if (plan.positions[d] > source.shape[d]) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: index.shape[%d] = %d is larger than src.shape[%d] = %d (index may not be larger "
            "than src in any dimension)",
            kOp, d, plan.positions[d], d, source.shape[d]));
      }
    }
    plan.source = args.source.Relaid(dtype, plan.positions, source.strides);
  }

  plan.result_dtype = dtype;
  plan.result_shape = input_shape;
  plan.input =
      args.input ? *args.input : TensorView(dtype, input_shape, static_cast<const void*>(nullptr));
  plan.reduce = args.reduce;
  plan.include_self = args.include_self;
  if (args.axes.size() == 1 && args.input) {
    absl::StatusOr<ScatterPlan> scatter = PlanScatter({.input = *args.input,
                                                       .index = WithoutCoordinateDim(args.index),
                                                       .source = args.source,
                                                       .axis = plan.component_axes[0],
                                                       .reduce = args.reduce,
                                                       .include_self = args.include_self});
    if (scatter.ok()) {
      scatter->op = kOp;
      scatter->original_index = args.index;
      plan.single_axis_scatter = *std::move(scatter);
    }
  }
  return plan;
}

absl::StatusOr<Tensor> GatherNd(const GatherNdArgs& args) {
  return internal::RunIntoNewTensor(PlanGatherNd(args), cpu::GatherNd);
}

absl::StatusOr<Tensor> ScatterNd(const ScatterNdArgs& args) {
  return internal::RunIntoNewTensor(PlanScatterNd(args), cpu::ScatterNd);
}

// ---------------------------------------------------------------------------------------------
// Backward (kernels/backward.h).

namespace {

using backward_internal::CheckDifferentiable;
using backward_internal::CheckGradOutput;
using backward_internal::ComputeDtype;
using backward_internal::ConvertTo;
using backward_internal::EmbedBlock;
using backward_internal::FamilyGradients;
using backward_internal::RunScatterFamilyBackward;
using backward_internal::ScatterFamily;

// ScatterNd; its gather is GatherNd.
class NdScatterFamily final : public ScatterFamily {
 public:
  NdScatterFamily(TensorView index, std::vector<int64_t> axes, int64_t batch_dims)
      : index_(std::move(index)), axes_(std::move(axes)), batch_dims_(batch_dims) {}

  absl::StatusOr<Tensor> Reduce(const TensorView& self, const TensorView& source, Reduction reduce,
                                bool include_self) const override {
    return ScatterNd(ScatterNdArgs{.input = self,
                                   .index = index_,
                                   .source = source,
                                   .axes = axes_,
                                   .batch_dims = batch_dims_,
                                   .reduce = reduce,
                                   .include_self = include_self});
  }
  absl::StatusOr<Tensor> Select(const TensorView& tensor) const override {
    return GatherNd(
        GatherNdArgs{.input = tensor, .index = index_, .axes = axes_, .batch_dims = batch_dims_});
  }

 private:
  TensorView index_;
  std::vector<int64_t> axes_;
  int64_t batch_dims_;
};

}  // namespace

absl::StatusOr<Gradients> Backward(const GatherNdArgs& args, const TensorView& grad) {
  constexpr std::string_view kOp = "gather_nd";
  TENSOROPS_ASSIGN_OR_RETURN(NdPlan plan, PlanGatherNd(args));
  TENSOROPS_RETURN_IF_ERROR(CheckDifferentiable(kOp, "input", args.input.dtype()));
  TENSOROPS_RETURN_IF_ERROR(CheckGradOutput(kOp, grad, plan.result_dtype, plan.result_shape));
  const Tensor zeros = Tensor::Zeros(args.input.dtype(), args.input.shape());
  TENSOROPS_ASSIGN_OR_RETURN(Tensor grad_input,
                             ScatterNd(ScatterNdArgs{.input = zeros.view(),
                                                     .index = args.index,
                                                     .source = grad,
                                                     .axes = args.axes,
                                                     .batch_dims = args.batch_dims,
                                                     .reduce = Reduction::kSum}));
  Gradients out;
  out.by_argument.emplace_back("input", std::move(grad_input));
  return out;
}

absl::StatusOr<Gradients> Backward(const ScatterNdArgs& args, const TensorView& grad) {
  constexpr std::string_view kOp = "scatter_nd";
  TENSOROPS_ASSIGN_OR_RETURN(NdPlan plan, PlanScatterNd(args));
  const DataType dtype = plan.result_dtype;
  TENSOROPS_RETURN_IF_ERROR(
      CheckDifferentiable(kOp, args.input.has_value() ? "input" : "src", dtype));
  TENSOROPS_RETURN_IF_ERROR(CheckGradOutput(kOp, grad, plan.result_dtype, plan.result_shape));
  const DataType compute = ComputeDtype(dtype);
  const NdScatterFamily family(args.index, args.axes, args.batch_dims);
  const Tensor input = args.input.has_value() ? ConvertTo(*args.input, compute)
                                              : Tensor::Zeros(compute, plan.result_shape);
  // The source elements read: all of it in the TensorFlow form, the leading block B (the index's
  // shape without its last dimension) in the axes form.
  TensorView source_block = args.source;
  if (!args.axes.empty() && args.index.rank() >= 1) {
    const Shape block_shape(args.index.shape().begin(), args.index.shape().end() - 1);
    if (static_cast<int64_t>(block_shape.size()) == args.source.rank()) {
      source_block = args.source.Relaid(block_shape, args.source.strides());
    }
  }
  const Tensor source = ConvertTo(source_block, compute);
  const Tensor grad_compute = ConvertTo(grad, compute);
  TENSOROPS_ASSIGN_OR_RETURN(FamilyGradients gradients,
                             RunScatterFamilyBackward(kOp, family, input, source, grad_compute,
                                                      args.reduce, args.include_self));
  Gradients out;
  if (args.input.has_value()) {
    out.by_argument.emplace_back("input", ConvertTo(gradients.input.view(), dtype));
  }
  out.by_argument.emplace_back(
      "src", ConvertTo(EmbedBlock(std::move(gradients.source), args.source.shape()).view(), dtype));
  return out;
}

}  // namespace tensorops
