// Planning of IndexSelect and IndexReduce onto the Gather and Scatter kernels. The 1-D index is
// viewed at the iteration shape with stride 0 on every dimension but `axis` (where it keeps its
// own stride), so every slice of the input (IndexSelect) or of the source (IndexReduce) along
// `axis` reads the same index entry. No loop over indices lives here: the kernels walk, range-check
// and report (naming `index[k]` of the 1-D index the caller sent). Their Backward is at the end.
#include <complex>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "absl/strings/str_format.h"
#include "kernels/backward.h"
#include "kernels/dispatch.h"
#include "kernels/half.h"
#include "kernels/index_ops.h"
#include "kernels/plan_checks.h"
#include "kernels/status_macros.h"
#include "kernels/tensor_memory.h"

namespace tensorops {
namespace {

// The index of index_select and index_add/copy/reduce: a vector (rank 0 counts as one index) of
// int32 or int64, as PyTorch requires even when it is empty.
absl::Status CheckIndexVector(std::string_view op, const TensorView& index) {
  if (index.rank() > 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: index has rank %d (shape %s) but must be 1-D (or rank 0, as one "
                        "index)",
                        op, index.rank(), ShapeToString(index.shape())));
  }
  return internal::CheckIndexDtype(op, index);
}

using internal::AsWalkShape;
using internal::WalkShape;

// The 1-D index broadcast to `shape`: stride 0 on every dimension but `axis`.
TensorView BroadcastIndexAlongAxis(const TensorView& index, const Shape& shape, int64_t axis) {
  Shape strides(shape.size(), 0);
  if (index.rank() == 1) strides[axis] = index.strides()[0];
  return index.Relaid(shape, strides);
}

bool IsOne(const Scalar& alpha) {
  struct Visitor {
    bool operator()(bool v) const { return v; }
    bool operator()(int64_t v) const { return v == 1; }
    bool operator()(double v) const { return v == 1.0; }
    bool operator()(std::complex<double> v) const { return v == std::complex<double>(1.0, 0.0); }
  };
  return std::visit(Visitor{}, alpha.value());
}

// PyTorch's alpha_check: a bool alpha only for bool input, an integral one for integral input.
absl::Status CheckAlphaKind(std::string_view op, const Scalar& alpha, DataType dtype) {
  const bool is_bool = std::holds_alternative<bool>(alpha.value());
  const bool is_integral = is_bool || std::holds_alternative<int64_t>(alpha.value());
  if (is_bool && dtype != DataType::kBool) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: alpha = %s is a bool, which is only allowed for bool input (input.dtype = %s)", op,
        alpha.ToString(), DataTypeName(dtype)));
  }
  if (IsIntegral(dtype, /*include_bool=*/true) && !is_integral) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: alpha = %s must be an integer (or bool) for input.dtype = %s", op,
                        alpha.ToString(), DataTypeName(dtype)));
  }
  return absl::OkStatus();
}

// Multiplies every element of the contiguous `values` by the rank-0 `factor` of the same dtype,
// in the dtype (integers wrap, bool is a logical and, float16/bfloat16 multiply in float and round
// once).
void ScaleInPlace(Tensor& values, const Tensor& factor) {
  DispatchDataType(values.dtype(), [&]<typename T>(TypeTag<T>) {
    T* data = values.data_as<T>();
    const T scale = *factor.data_as<T>();
    const int64_t count = values.numel();
    for (int64_t i = 0; i < count; ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        data[i] = data[i] && scale;
      } else if constexpr (std::is_integral_v<T>) {
        // Unsigned arithmetic wraps without undefined behaviour; the narrowing is modular.
        data[i] = static_cast<T>(static_cast<uint64_t>(data[i]) * static_cast<uint64_t>(scale));
      } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
        data[i] = T(static_cast<float>(data[i]) * static_cast<float>(scale));
      } else {
        data[i] = data[i] * scale;
      }
    }
  });
}

}  // namespace

absl::StatusOr<GatherPlan> PlanIndexSelect(const IndexSelectArgs& args) {
  constexpr std::string_view kOp = "index_select";
  TENSOROPS_RETURN_IF_ERROR(CheckIndexVector(kOp, args.index));
  TENSOROPS_ASSIGN_OR_RETURN(const int64_t axis,
                             NormalizeAxis(kOp, "axis", args.axis, args.input.rank()));
  const int64_t count = args.index.numel();
  if (args.input.rank() == 0 && count != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: index has %d elements but input is rank 0 (a scalar input takes exactly one index)",
        kOp, count));
  }

  const WalkShape input = AsWalkShape(args.input);
  Shape iteration_shape = input.shape;
  iteration_shape[axis] = count;

  GatherPlan plan;
  plan.op = kOp;
  plan.result_dtype = args.input.dtype();
  // Like torch.index_select, a scalar input gives a scalar result.
  plan.result_shape = args.input.rank() == 0 ? Shape{} : iteration_shape;
  plan.axis = axis;
  plan.input_axis_size = input.shape[axis];
  plan.input_axis_stride = input.strides[axis];
  Shape input_strides = input.strides;
  input_strides[axis] = 0;
  plan.input = args.input.Relaid(iteration_shape, input_strides);
  plan.index = BroadcastIndexAlongAxis(args.index, iteration_shape, axis);
  plan.original_index = args.index;
  return plan;
}

absl::StatusOr<ScatterPlan> PlanIndexReduce(const IndexReduceArgs& args) {
  constexpr std::string_view kOp = "index_reduce";
  const DataType dtype = args.input.dtype();
  TENSOROPS_RETURN_IF_ERROR(CheckIndexVector(kOp, args.index));
  TENSOROPS_RETURN_IF_ERROR(internal::CheckSourceDtype(kOp, args.source.dtype(), dtype));
  TENSOROPS_RETURN_IF_ERROR(internal::CheckReductionDefined(kOp, args.reduce, dtype));
  const bool scale = !IsOne(args.alpha);
  if (scale && args.reduce != Reduction::kSum) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: alpha = %s is only defined for reduce = SUM (reduce = %s)", kOp,
                        args.alpha.ToString(), ReductionName(args.reduce)));
  }
  TENSOROPS_RETURN_IF_ERROR(CheckAlphaKind(kOp, args.alpha, dtype));
  TENSOROPS_ASSIGN_OR_RETURN(const int64_t axis,
                             NormalizeAxis(kOp, "axis", args.axis, args.input.rank()));

  // src has input's shape with `axis` sized like the index (rank 0 acting as [1] on both sides).
  const WalkShape input = AsWalkShape(args.input);
  const WalkShape source = AsWalkShape(args.source);
  if (source.shape.size() != input.shape.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: src has rank %d but input has rank %d (they must be equal)", kOp,
                        args.source.rank(), args.input.rank()));
  }
  const int64_t count = args.index.numel();
  for (size_t d = 0; d < input.shape.size(); ++d) {
    if (static_cast<int64_t>(d) == axis) {
      if (source.shape[d] != count) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: src.shape[%d] = %d does not match the index's length %d (src must have one "
            "slice along axis %d per index)",
            kOp, d, source.shape[d], count, axis));
      }
    } else if (source.shape[d] != input.shape[d]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: src.shape[%d] = %d does not match input.shape[%d] = %d (src must have input's "
          "shape in every dimension but axis %d)",
          kOp, d, source.shape[d], d, input.shape[d], axis));
    }
  }

  ScatterPlan plan;
  plan.op = kOp;
  plan.result_dtype = dtype;
  plan.result_shape = args.input.shape();
  plan.input = args.input;
  plan.index = BroadcastIndexAlongAxis(args.index, source.shape, axis);
  plan.source = args.source.Relaid(dtype, source.shape, source.strides);
  if (scale) {
    // The scaled source is computed here, on the host.
    TENSOROPS_RETURN_IF_ERROR(RequireHostBytes(kOp, "src", plan.source));
    TENSOROPS_ASSIGN_OR_RETURN(const Tensor alpha, ScalarToTensor(args.alpha, dtype, kOp, "alpha"));
    Tensor scaled = Tensor::FromView(plan.source);
    ScaleInPlace(scaled, alpha);
    plan.source_storage = std::move(scaled);
    plan.source = plan.source_storage->view();
  }
  plan.axis = axis;
  plan.reduce = args.reduce;
  plan.include_self = args.include_self;
  plan.original_index = args.index;
  return plan;
}

absl::StatusOr<Tensor> IndexSelect(const IndexSelectArgs& args) {
  return internal::RunIntoNewTensor(PlanIndexSelect(args), cpu::Gather);
}

absl::StatusOr<Tensor> IndexReduce(const IndexReduceArgs& args) {
  return internal::RunIntoNewTensor(PlanIndexReduce(args), cpu::Scatter);
}

// ---------------------------------------------------------------------------------------------
// Backward (kernels/backward.h).

namespace {

using backward_internal::CheckDifferentiable;
using backward_internal::CheckGradOutput;
using backward_internal::ComputeDtype;
using backward_internal::ConvertTo;
using backward_internal::FamilyGradients;
using backward_internal::Reshaped;
using backward_internal::RunScatterFamilyBackward;
using backward_internal::ScatterFamily;

// IndexReduce; its gather is IndexSelect.
class IndexReduceFamily final : public ScatterFamily {
 public:
  IndexReduceFamily(TensorView index, int64_t axis) : index_(std::move(index)), axis_(axis) {}

  absl::StatusOr<Tensor> Reduce(const TensorView& self, const TensorView& source, Reduction reduce,
                                bool include_self) const override {
    return IndexReduce(IndexReduceArgs{.input = self,
                                       .index = index_,
                                       .source = source,
                                       .axis = axis_,
                                       .reduce = reduce,
                                       .include_self = include_self});
  }
  absl::StatusOr<Tensor> Select(const TensorView& tensor) const override {
    return IndexSelect(IndexSelectArgs{.input = tensor, .index = index_, .axis = axis_});
  }

 private:
  TensorView index_;
  int64_t axis_;
};

}  // namespace

absl::StatusOr<Gradients> Backward(const IndexSelectArgs& args, const TensorView& grad) {
  constexpr std::string_view kOp = "index_select";
  TENSOROPS_ASSIGN_OR_RETURN(GatherPlan plan, PlanIndexSelect(args));
  TENSOROPS_RETURN_IF_ERROR(CheckDifferentiable(kOp, "input", args.input.dtype()));
  TENSOROPS_RETURN_IF_ERROR(CheckGradOutput(kOp, grad, plan.result_dtype, plan.result_shape));
  // index_add of grad into zeros; a rank-0 index is one index.
  TensorView index = args.index;
  if (index.rank() == 0) index = index.Relaid(Shape{1}, Shape{1});
  const Tensor zeros = Tensor::Zeros(args.input.dtype(), args.input.shape());
  const Tensor grad_copy = Tensor::FromView(grad);
  TENSOROPS_ASSIGN_OR_RETURN(Tensor grad_input,
                             IndexReduce(IndexReduceArgs{.input = zeros.view(),
                                                         .index = index,
                                                         .source = grad_copy.view(),
                                                         .axis = args.axis,
                                                         .reduce = Reduction::kSum}));
  Gradients out;
  out.by_argument.emplace_back("input", std::move(grad_input));
  return out;
}

absl::StatusOr<Gradients> Backward(const IndexReduceArgs& args, const TensorView& grad) {
  constexpr std::string_view kOp = "index_reduce";
  TENSOROPS_ASSIGN_OR_RETURN(ScatterPlan plan, PlanIndexReduce(args));
  const DataType dtype = args.input.dtype();
  TENSOROPS_RETURN_IF_ERROR(CheckDifferentiable(kOp, "input", dtype));
  TENSOROPS_RETURN_IF_ERROR(CheckGradOutput(kOp, grad, plan.result_dtype, plan.result_shape));
  const DataType compute = ComputeDtype(dtype);
  const IndexReduceFamily family(args.index, args.axis);
  const Tensor input = ConvertTo(args.input, compute);
  const Tensor source = ConvertTo(args.source, compute);
  const Tensor grad_compute = ConvertTo(grad, compute);
  std::optional<Scalar> alpha;
  if (args.reduce == Reduction::kSum) alpha = args.alpha;
  TENSOROPS_ASSIGN_OR_RETURN(FamilyGradients gradients,
                             RunScatterFamilyBackward(kOp, family, input, source, grad_compute,
                                                      args.reduce, args.include_self, alpha));
  Gradients out;
  out.by_argument.emplace_back("input", ConvertTo(gradients.input.view(), dtype));
  out.by_argument.emplace_back(
      "src", ConvertTo(Reshaped(std::move(gradients.source), args.source.shape()).view(), dtype));
  return out;
}

}  // namespace tensorops
