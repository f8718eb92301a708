// Validation and planning of Gather and Scatter: every check that does not depend on the device
// or on index values. The kernels trust a plan. Their Backward is at the end.
#include <algorithm>
#include <numeric>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/strings/str_format.h"
#include "kernels/backward.h"
#include "kernels/dispatch.h"
#include "kernels/gather.h"
#include "kernels/plan_checks.h"
#include "kernels/scatter.h"
#include "kernels/status_macros.h"

namespace tensorops {
namespace {

using internal::AsWalkShape;
using internal::CheckIndexDtype;
using internal::WalkShape;

int64_t WalkRank(const TensorView& view) { return std::max<int64_t>(view.rank(), 1); }

absl::Status CheckSameRank(std::string_view op, std::string_view name, const TensorView& view,
                           std::string_view other_name, const TensorView& other) {
  if (WalkRank(view) == WalkRank(other)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %s has rank %d but %s has rank %d (they must be equal)", op, name,
                      view.rank(), other_name, other.rank()));
}

// Broadcasts `a` and `b` against each other on every dimension but `axis` (same rank); the axis
// sizes stay each one's own.
absl::Status BroadcastExceptAxis(std::string_view op, std::string_view a_name, WalkShape& a,
                                 std::string_view b_name, WalkShape& b, int64_t axis) {
  for (size_t d = 0; d < a.shape.size(); ++d) {
    if (static_cast<int64_t>(d) == axis || a.shape[d] == b.shape[d]) continue;
    if (a.shape[d] == 1) {
      a.shape[d] = b.shape[d];
      a.strides[d] = 0;
    } else if (b.shape[d] == 1) {
      b.shape[d] = a.shape[d];
      b.strides[d] = 0;
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: cannot broadcast %s.shape[%d] = %d with %s.shape[%d] = %d (sizes must be equal or "
          "1 in every dimension but axis %d)",
          op, a_name, d, a.shape[d], b_name, d, b.shape[d], axis));
    }
  }
  return absl::OkStatus();
}

// Views `walk` at shape `to` (NumPy broadcasting), or explains why it cannot be.
absl::Status BroadcastWalkTo(std::string_view op, std::string_view name, WalkShape& walk,
                             const Shape& to, std::string_view to_name) {
  if (!CanBroadcastTo(walk.shape, to)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s of shape %s cannot be broadcast to %s %s", op, name,
                        ShapeToString(walk.shape), to_name, ShapeToString(to)));
  }
  walk.strides = BroadcastStrides(walk.shape, walk.strides, to);
  walk.shape = to;
  return absl::OkStatus();
}

// Index sizes may not exceed `other`'s in any dimension (but `skip_axis`, when >= 0).
absl::Status CheckIndexNotLarger(std::string_view op, const WalkShape& index,
                                 std::string_view other_name, const WalkShape& other,
                                 int64_t skip_axis, std::string_view rule) {
  for (size_t d = 0; d < index.shape.size(); ++d) {
    if (static_cast<int64_t>(d) == skip_axis) continue;
    if (index.shape[d] > other.shape[d]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: index.shape[%d] = %d is larger than %s.shape[%d] = %d (%s)", op, d,
                          index.shape[d], other_name, d, other.shape[d], rule));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GatherPlan> PlanGather(const GatherArgs& args) {
  constexpr std::string_view kOp = "gather";
  TENSOROPS_RETURN_IF_ERROR(CheckIndexDtype(kOp, args.index));
  TENSOROPS_RETURN_IF_ERROR(CheckSameRank(kOp, "index", args.index, "input", args.input));
  TENSOROPS_ASSIGN_OR_RETURN(const int64_t axis,
                             NormalizeAxis(kOp, "axis", args.axis, args.input.rank()));

  WalkShape input = AsWalkShape(args.input);
  WalkShape index = AsWalkShape(args.index);
  Shape result_shape = args.index.shape();
  if (args.broadcast) {
    TENSOROPS_RETURN_IF_ERROR(BroadcastExceptAxis(kOp, "input", input, "index", index, axis));
    if (args.index.rank() > 0) result_shape = index.shape;
  } else {
    TENSOROPS_RETURN_IF_ERROR(CheckIndexNotLarger(
        kOp, index, "input", input, axis,
        absl::StrFormat("index may not be larger than input in dimensions other than axis %d",
                        axis)));
  }

  GatherPlan plan;
  plan.result_dtype = args.input.dtype();
  plan.result_shape = std::move(result_shape);
  plan.axis = axis;
  plan.input_axis_size = input.shape[axis];
  plan.input_axis_stride = input.strides[axis];
  // The input is walked at the index's shape; the kernel adds index * input_axis_stride.
  Shape input_strides = input.strides;
  input_strides[axis] = 0;
  plan.input = args.input.Relaid(index.shape, input_strides);
  plan.index = args.index.Relaid(index.shape, index.strides);
  plan.original_index = args.index;
  return plan;
}

absl::StatusOr<ScatterPlan> PlanScatter(const ScatterArgs& args) {
  constexpr std::string_view kOp = "scatter";
  const DataType dtype = args.input.dtype();

  ScatterPlan plan;
  TensorView source;
  if (const auto* source_tensor = std::get_if<TensorView>(&args.source)) {
    source = *source_tensor;
    TENSOROPS_RETURN_IF_ERROR(internal::CheckSourceDtype(kOp, source.dtype(), dtype));
  } else {
    TENSOROPS_ASSIGN_OR_RETURN(plan.source_storage,
                               ScalarToTensor(std::get<Scalar>(args.source), dtype, kOp, "value"));
    source = plan.source_storage->view();
  }
  const bool is_value = std::holds_alternative<Scalar>(args.source);

  TENSOROPS_RETURN_IF_ERROR(internal::CheckReductionDefined(kOp, args.reduce, dtype));
  TENSOROPS_ASSIGN_OR_RETURN(const int64_t axis,
                             NormalizeAxis(kOp, "axis", args.axis, args.input.rank()));

  WalkShape input = AsWalkShape(args.input);
  WalkShape index = AsWalkShape(args.index);
  WalkShape src = AsWalkShape(source);
  if (args.broadcast) {
    // Paddle's put_along_axis: with S = input's shape with `axis` sized like the index, index and
    // source broadcast to S when the index fits inside the input, else the source broadcasts to
    // the index's shape.
    TENSOROPS_RETURN_IF_ERROR(CheckSameRank(kOp, "index", args.index, "input", args.input));
    bool index_fits = true;
    for (size_t d = 0; d < input.shape.size(); ++d) index_fits &= index.shape[d] <= input.shape[d];
    if (index_fits) {
      Shape target = input.shape;
      target[axis] = index.shape[axis];
      TENSOROPS_RETURN_IF_ERROR(BroadcastWalkTo(kOp, "index", index, target, "shape"));
    }
    TENSOROPS_RETURN_IF_ERROR(
        BroadcastWalkTo(kOp, is_value ? "value" : "src", src, index.shape, "the index shape"));
  } else if (is_value) {
    src.shape = index.shape;
    src.strides.assign(index.shape.size(), 0);
  }

  if (args.index.numel() > 0) {
    // Like PyTorch, an empty index is accepted whatever its shape (the result is the input).
    TENSOROPS_RETURN_IF_ERROR(CheckIndexDtype(kOp, args.index));
    if (!args.broadcast) {
      TENSOROPS_RETURN_IF_ERROR(CheckSameRank(kOp, "index", args.index, "input", args.input));
      if (!is_value) {
        TENSOROPS_RETURN_IF_ERROR(CheckSameRank(kOp, "src", source, "index", args.index));
      }
    }
    TENSOROPS_RETURN_IF_ERROR(CheckIndexNotLarger(
        kOp, index, "input", input, axis,
        absl::StrFormat("index may not be larger than input in dimensions other than axis %d",
                        axis)));
    TENSOROPS_RETURN_IF_ERROR(CheckIndexNotLarger(kOp, index, "src", src, /*skip_axis=*/-1,
                                                  "index may not be larger than src in any "
                                                  "dimension"));
  }

  plan.result_dtype = dtype;
  plan.result_shape = args.input.shape();
  plan.input = args.input;
  plan.index = args.index.Relaid(index.shape, index.strides);
  // The source is walked at the index's shape: its leading block when it is larger.
  plan.source = source.Relaid(dtype, index.shape, src.strides);
  plan.axis = axis;
  plan.reduce = args.reduce;
  plan.include_self = args.include_self;
  plan.original_index = args.index;
  return plan;
}

absl::StatusOr<Tensor> Gather(const GatherArgs& args) {
  return internal::RunIntoNewTensor(PlanGather(args), cpu::Gather);
}

absl::StatusOr<Tensor> Scatter(const ScatterArgs& args) {
  return internal::RunIntoNewTensor(PlanScatter(args), cpu::Scatter);
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
using backward_internal::SumToShape;

// Scatter along an axis; its gather is Gather.
class AxisScatterFamily final : public ScatterFamily {
 public:
  AxisScatterFamily(TensorView index, int64_t axis) : index_(std::move(index)), axis_(axis) {}

  absl::StatusOr<Tensor> Reduce(const TensorView& self, const TensorView& source, Reduction reduce,
                                bool include_self) const override {
    return Scatter(ScatterArgs{.input = self,
                               .index = index_,
                               .source = source,
                               .axis = axis_,
                               .reduce = reduce,
                               .include_self = include_self});
  }
  absl::StatusOr<Tensor> Select(const TensorView& tensor) const override {
    return Gather(GatherArgs{.input = tensor, .index = index_, .axis = axis_});
  }

 private:
  TensorView index_;
  int64_t axis_;
};

}  // namespace

absl::StatusOr<Gradients> Backward(const GatherArgs& args, const TensorView& grad) {
  constexpr std::string_view kOp = "gather";
  TENSOROPS_ASSIGN_OR_RETURN(GatherPlan plan, PlanGather(args));
  TENSOROPS_RETURN_IF_ERROR(CheckDifferentiable(kOp, "input", args.input.dtype()));
  TENSOROPS_RETURN_IF_ERROR(CheckGradOutput(kOp, grad, plan.result_dtype, plan.result_shape));
  Tensor grad_input;
  if (!args.broadcast) {
    const Tensor zeros = Tensor::Zeros(args.input.dtype(), args.input.shape());
    TENSOROPS_ASSIGN_OR_RETURN(grad_input, Scatter(ScatterArgs{.input = zeros.view(),
                                                               .index = args.index,
                                                               .source = grad,
                                                               .axis = args.axis,
                                                               .reduce = Reduction::kSum}));
  } else {
    // Each gradient element goes to the input element its result element was read from. Which
    // one that is comes from a Gather of the input's own flat offsets (checking the index values
    // as the forward did). Not by scattering into the input broadcast to the index and summing
    // that back: with an input [K, 1] and an index [1, N] that tensor is [K, N], from a request
    // of K + 2N elements.
    Tensor offsets(DataType::kInt64, args.input.shape());
    std::iota(offsets.data_as<int64_t>(), offsets.data_as<int64_t>() + offsets.numel(), 0);
    GatherArgs offset_args = args;
    offset_args.input = offsets.view();
    TENSOROPS_ASSIGN_OR_RETURN(const Tensor read_from, Gather(offset_args));
    // Summed in the compute dtype, in the result's row-major order, and rounded once.
    const DataType compute = ComputeDtype(args.input.dtype());
    const Tensor grad_values = ConvertTo(grad, compute);
    Tensor sums = Tensor::Zeros(compute, args.input.shape());
    DispatchDataType(compute, [&]<typename T>(TypeTag<T>) {
      // The compute dtypes: float32, float64 and the complex types (CheckDifferentiable).
      if constexpr (std::is_floating_point_v<T> || internal::IsComplexType<T>::value) {
        const int64_t* from = read_from.data_as<int64_t>();
        const T* values = grad_values.data_as<T>();
        T* into = sums.data_as<T>();
        for (int64_t i = 0; i < read_from.numel(); ++i) into[from[i]] += values[i];
      }
    });
    grad_input = ConvertTo(sums.view(), args.input.dtype());
  }
  Gradients out;
  out.by_argument.emplace_back("input", std::move(grad_input));
  return out;
}

absl::StatusOr<Gradients> Backward(const ScatterArgs& args, const TensorView& grad) {
  constexpr std::string_view kOp = "scatter";
  TENSOROPS_ASSIGN_OR_RETURN(ScatterPlan plan, PlanScatter(args));
  const DataType dtype = args.input.dtype();
  TENSOROPS_RETURN_IF_ERROR(CheckDifferentiable(kOp, "input", dtype));
  TENSOROPS_RETURN_IF_ERROR(CheckGradOutput(kOp, grad, plan.result_dtype, plan.result_shape));
  const DataType compute = ComputeDtype(dtype);
  // The plan walks index and source at the iteration shape (broadcast already applied, the
  // source's leading block taken), so the backward runs a plain Scatter with those views.
  const AxisScatterFamily family(plan.index, plan.axis);
  const Tensor input = ConvertTo(args.input, compute);
  const Tensor source = ConvertTo(plan.source, compute);
  const Tensor grad_compute = ConvertTo(grad, compute);
  TENSOROPS_ASSIGN_OR_RETURN(FamilyGradients gradients,
                             RunScatterFamilyBackward(kOp, family, input, source, grad_compute,
                                                      args.reduce, args.include_self));
  Gradients out;
  out.by_argument.emplace_back("input", ConvertTo(gradients.input.view(), dtype));
  if (const auto* src = std::get_if<TensorView>(&args.source)) {
    Tensor grad_source;
    if (args.broadcast) {
      TENSOROPS_ASSIGN_OR_RETURN(grad_source,
                                 SumToShape(std::move(gradients.source), src->shape()));
    } else {
      grad_source = EmbedBlock(std::move(gradients.source), src->shape());
    }
    out.by_argument.emplace_back("src", ConvertTo(grad_source.view(), dtype));
  }
  return out;
}

}  // namespace tensorops
