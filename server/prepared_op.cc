#include "server/prepared_op.h"

#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_format.h"
#include "kernels/backward.h"
#include "kernels/device_call.h"
#include "kernels/gather.h"
#include "kernels/index_ops.h"
#include "kernels/masked_scatter.h"
#include "kernels/nd_ops.h"
#include "kernels/scatter.h"
#include "kernels/shape.h"
#include "kernels/view_scatter.h"

namespace tensorops {
namespace {

// AllocateResult checks a planned result against the limits (a broadcast can make it far larger
// than the request) and then allocates it inside the response, so the kernel writes straight into
// the bytes gRPC will send.
absl::StatusOr<MutableTensorView> AllocateResult(std::string_view op, DataType dtype,
                                                 ShapeSpan shape, const wire::DecodeLimits& limits,
                                                 v1::Tensor* result) {
  absl::StatusOr<int64_t> numel = wire::CheckShape(dtype, shape, op, "result", limits);
  if (!numel.ok()) return numel.status();
  return wire::AllocateTensor(dtype, shape, result);
}

// The CPU kernel of each plan type. Plans with a GPU form (MakeDeviceCall) also get one.
absl::Status RunGather(const GatherPlan& plan, const MutableTensorView& result) {
  return cpu::Gather(plan, result);
}
absl::Status RunScatter(const ScatterPlan& plan, const MutableTensorView& result) {
  return cpu::Scatter(plan, result);
}
absl::Status RunViewScatter(const ViewScatterPlan& plan, const MutableTensorView& result) {
  return cpu::ViewScatter(plan, result);
}
absl::Status RunGatherNd(const NdPlan& plan, const MutableTensorView& result) {
  return cpu::GatherNd(plan, result);
}
absl::Status RunScatterNd(const NdPlan& plan, const MutableTensorView& result) {
  return cpu::ScatterNd(plan, result);
}
absl::Status RunMaskedScatter(const MaskedScatterPlan& plan, const MutableTensorView& result) {
  return cpu::MaskedScatter(plan, result);
}

// Below this many bytes the input is not worth taking (and a short std::string keeps its bytes
// inside the object, where a swap would move them away from the plan's view).
constexpr size_t kMinTakenInputBytes = 4096;

// TakeInput moves `input_data`'s bytes into `result_tensor` as the result when the plan's input
// is exactly those bytes, contiguous, of the result's shape and dtype; the kernel then runs in
// place. Returns the result's view, or nullopt (nothing changed) when the input does not qualify.
template <typename Plan>
std::optional<MutableTensorView> TakeInput(const Plan& plan, std::string* input_data,
                                           v1::Tensor* result_tensor) {
  const TensorView& input = plan.input;
  if (input_data == nullptr || input_data->size() < kMinTakenInputBytes ||
      input.data() != input_data->data() || input.dtype() != plan.result_dtype ||
      input.shape() != plan.result_shape || !input.is_contiguous() ||
      static_cast<size_t>(input.numel() * input.itemsize()) != input_data->size()) {
    return std::nullopt;
  }
  result_tensor->set_dtype(wire::DataTypeToProto(plan.result_dtype));
  result_tensor->mutable_shape()->Assign(plan.result_shape.begin(), plan.result_shape.end());
  std::string* data = result_tensor->mutable_data();
  data->swap(*input_data);
  if (data->data() != input.data()) {
    // The bytes moved (a string implementation that kept them inline): undo, copy instead.
    data->swap(*input_data);
    return std::nullopt;
  }
  return MutableTensorView(plan.result_dtype, plan.result_shape, static_cast<void*>(data->data()));
}

// Prepare is the common tail of every PrepareOp: take the plan (or its error) and return the op
// that allocates the result in `result_tensor` (inside the response) and runs the kernel into it,
// and, for plans with GPU kernels, its GPU form. With `input_data` (the request's input.data,
// which the caller lets us take) an op whose result is its input updated takes those bytes as the
// result instead and runs in place on the CPU (the GPU form always allocates its result: the
// device copies read the input).
template <typename Plan, typename Kernel>
absl::StatusOr<PreparedOp> Prepare(std::string_view op, absl::StatusOr<Plan> plan,
                                   const wire::DecodeLimits& limits, v1::Tensor* result_tensor,
                                   Kernel kernel, std::string* input_data = nullptr) {
  if (!plan.ok()) return plan.status();
  auto shared_plan = std::make_shared<const Plan>(*std::move(plan));
  const auto allocate = [op, limits, shared_plan, result_tensor] {
    return AllocateResult(op, shared_plan->result_dtype, shared_plan->result_shape, limits,
                          result_tensor);
  };
  PreparedOp prepared{
      .op = op,
      .run = [allocate, kernel, shared_plan, result_tensor, input_data]() -> absl::Status {
        if constexpr (requires { shared_plan->input; }) {
          if (std::optional<MutableTensorView> in_place =
                  TakeInput(*shared_plan, input_data, result_tensor)) {
            return kernel(*shared_plan, *in_place);
          }
        }
        absl::StatusOr<MutableTensorView> result = allocate();
        if (!result.ok()) return result.status();
        return kernel(*shared_plan, *result);
      }};
  if constexpr (requires(const Plan& p) { MakeDeviceCall(p); }) {
    prepared.device = [allocate, shared_plan]() -> absl::StatusOr<DeviceRun> {
      std::unique_ptr<DeviceCall> call = MakeDeviceCall(*shared_plan);
      if (call == nullptr) return DeviceRun{};
      absl::StatusOr<MutableTensorView> result = allocate();
      if (!result.ok()) return result.status();
      return DeviceRun{.call = std::move(call), .result = result->data()};
    };
  }
  return prepared;
}

// TakableInput is `request`'s input.data when the caller allows taking it (InputReuse), else null.
// The request is not a const object (see InputReuse), so writing through the pointer is defined.
template <typename Request>
std::string* TakableInput(const Request& request, InputReuse reuse) {
  if (reuse != InputReuse::kMayTakeInput) return nullptr;
  return const_cast<std::string*>(&request.input().data());
}

}  // namespace

absl::StatusOr<GatherArgs> DecodeArgs(const v1::GatherRequest& request,
                                      const wire::DecodeLimits& limits) {
  constexpr std::string_view kOp = "gather";
  absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), kOp, "input", limits);
  if (!input.ok()) return input.status();
  absl::StatusOr<TensorView> index = wire::DecodeTensor(request.index(), kOp, "index", limits);
  if (!index.ok()) return index.status();

  const GatherArgs args{
      .input = *input, .index = *index, .axis = request.axis(), .broadcast = request.broadcast()};
  return args;
}

absl::StatusOr<ScatterArgs> DecodeArgs(const v1::ScatterRequest& request,
                                       const wire::DecodeLimits& limits) {
  constexpr std::string_view kOp = "scatter";
  absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), kOp, "input", limits);
  if (!input.ok()) return input.status();
  absl::StatusOr<TensorView> index = wire::DecodeTensor(request.index(), kOp, "index", limits);
  if (!index.ok()) return index.status();

  ScatterArgs args;
  args.input = *input;
  args.index = *index;
  switch (request.source_case()) {
    case v1::ScatterRequest::kSrc: {
      absl::StatusOr<TensorView> src = wire::DecodeTensor(request.src(), kOp, "src", limits);
      if (!src.ok()) return src.status();
      args.source = *src;
      break;
    }
    case v1::ScatterRequest::kValue: {
      absl::StatusOr<Scalar> value = wire::DecodeScalar(request.value(), kOp, "value");
      if (!value.ok()) return value.status();
      args.source = *value;
      break;
    }
    case v1::ScatterRequest::SOURCE_NOT_SET:
      return absl::InvalidArgumentError("scatter: one of src or value is required");
  }
  absl::StatusOr<Reduction> reduce = wire::ReductionFromProto(request.reduce(), kOp);
  if (!reduce.ok()) return reduce.status();
  args.axis = request.axis();
  args.reduce = *reduce;
  // proto3 `optional`: an absent include_self means true, as in PyTorch.
  args.include_self = request.has_include_self() ? request.include_self() : true;
  args.broadcast = request.broadcast();
  // `deterministic` is set on the plan by PrepareOp (it only changes the GPU's kernels).

  return args;
}

absl::StatusOr<IndexSelectArgs> DecodeArgs(const v1::IndexSelectRequest& request,
                                           const wire::DecodeLimits& limits) {
  constexpr std::string_view kOp = "index_select";
  absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), kOp, "input", limits);
  if (!input.ok()) return input.status();
  absl::StatusOr<TensorView> index = wire::DecodeTensor(request.index(), kOp, "index", limits);
  if (!index.ok()) return index.status();
  const IndexSelectArgs args{.input = *input, .index = *index, .axis = request.axis()};
  return args;
}

absl::StatusOr<IndexReduceArgs> DecodeArgs(const v1::IndexReduceRequest& request,
                                           const wire::DecodeLimits& limits) {
  constexpr std::string_view kOp = "index_reduce";
  absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), kOp, "input", limits);
  if (!input.ok()) return input.status();
  absl::StatusOr<TensorView> index = wire::DecodeTensor(request.index(), kOp, "index", limits);
  if (!index.ok()) return index.status();
  absl::StatusOr<TensorView> src = wire::DecodeTensor(request.src(), kOp, "src", limits);
  if (!src.ok()) return src.status();
  absl::StatusOr<Reduction> reduce = wire::ReductionFromProto(request.reduce(), kOp);
  if (!reduce.ok()) return reduce.status();
  IndexReduceArgs args{.input = *input,
                       .index = *index,
                       .source = *src,
                       .axis = request.axis(),
                       .reduce = *reduce,
                       .include_self = request.has_include_self() ? request.include_self() : true};
  if (request.has_alpha()) {
    absl::StatusOr<Scalar> alpha = wire::DecodeScalar(request.alpha(), kOp, "alpha");
    if (!alpha.ok()) return alpha.status();
    args.alpha = *alpha;
  }
  return args;
}

absl::StatusOr<SelectScatterArgs> DecodeArgs(const v1::SelectScatterRequest& request,
                                             const wire::DecodeLimits& limits) {
  constexpr std::string_view kOp = "select_scatter";
  absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), kOp, "input", limits);
  if (!input.ok()) return input.status();
  absl::StatusOr<TensorView> src = wire::DecodeTensor(request.src(), kOp, "src", limits);
  if (!src.ok()) return src.status();
  const SelectScatterArgs args{
      .input = *input, .src = *src, .axis = request.axis(), .index = request.index()};
  return args;
}

absl::StatusOr<SliceScatterArgs> DecodeArgs(const v1::SliceScatterRequest& request,
                                            const wire::DecodeLimits& limits) {
  constexpr std::string_view kOp = "slice_scatter";
  absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), kOp, "input", limits);
  if (!input.ok()) return input.status();
  absl::StatusOr<TensorView> src = wire::DecodeTensor(request.src(), kOp, "src", limits);
  if (!src.ok()) return src.status();
  SliceScatterArgs args{.input = *input, .src = *src, .axis = request.axis()};
  if (request.has_start()) args.start = request.start();
  if (request.has_end()) args.end = request.end();
  if (request.has_step()) args.step = request.step();
  return args;
}

absl::StatusOr<DiagonalScatterArgs> DecodeArgs(const v1::DiagonalScatterRequest& request,
                                               const wire::DecodeLimits& limits) {
  constexpr std::string_view kOp = "diagonal_scatter";
  absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), kOp, "input", limits);
  if (!input.ok()) return input.status();
  absl::StatusOr<TensorView> src = wire::DecodeTensor(request.src(), kOp, "src", limits);
  if (!src.ok()) return src.status();
  const DiagonalScatterArgs args{.input = *input,
                                 .src = *src,
                                 .offset = request.offset(),
                                 .axis1 = request.has_axis1() ? request.axis1() : 0,
                                 .axis2 = request.has_axis2() ? request.axis2() : 1};
  return args;
}

absl::StatusOr<GatherNdArgs> DecodeArgs(const v1::GatherNdRequest& request,
                                        const wire::DecodeLimits& limits) {
  constexpr std::string_view kOp = "gather_nd";
  absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), kOp, "input", limits);
  if (!input.ok()) return input.status();
  absl::StatusOr<TensorView> index = wire::DecodeTensor(request.index(), kOp, "index", limits);
  if (!index.ok()) return index.status();
  const GatherNdArgs args{.input = *input,
                          .index = *index,
                          .axes = {request.axes().begin(), request.axes().end()},
                          .batch_dims = request.batch_dims()};
  return args;
}

absl::StatusOr<ScatterNdArgs> DecodeArgs(const v1::ScatterNdRequest& request,
                                         const wire::DecodeLimits& limits) {
  constexpr std::string_view kOp = "scatter_nd";
  absl::StatusOr<TensorView> index = wire::DecodeTensor(request.index(), kOp, "index", limits);
  if (!index.ok()) return index.status();
  absl::StatusOr<TensorView> src = wire::DecodeTensor(request.src(), kOp, "src", limits);
  if (!src.ok()) return src.status();
  absl::StatusOr<Reduction> reduce = wire::ReductionFromProto(request.reduce(), kOp);
  if (!reduce.ok()) return reduce.status();

  ScatterNdArgs args{.index = *index,
                     .source = *src,
                     .axes = {request.axes().begin(), request.axes().end()},
                     .batch_dims = request.batch_dims(),
                     .reduce = *reduce,
                     .include_self = request.has_include_self() ? request.include_self() : true};
  args.shape.assign(request.shape().begin(), request.shape().end());
  if (request.has_input()) {
    // Given together with a shape, the plan rejects the pair, naming both.
    absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), kOp, "input", limits);
    if (!input.ok()) return input.status();
    args.input = *input;
  } else {
    // A repeated field cannot tell an empty shape from an absent one, so the zeros form needs
    // rank >= 1: a request with neither field is a mistake, not rank-0 zeros.
    if (args.shape.empty()) {
      return absl::InvalidArgumentError(
          "scatter_nd: neither input nor shape is given (input is the tensor to update; shape, "
          "without input, starts from zeros of that shape)");
    }
    // The result is allocated from this shape, so it gets a tensor's checks and limits first.
    absl::StatusOr<int64_t> numel =
        wire::CheckShapeField(src->dtype(), args.shape, kOp, "shape", limits);
    if (!numel.ok()) return numel.status();
  }
  // `deterministic` is set on the plan by PrepareOp (it only changes the GPU's kernels).
  return args;
}

absl::StatusOr<MaskedScatterArgs> DecodeArgs(const v1::MaskedScatterRequest& request,
                                             const wire::DecodeLimits& limits) {
  constexpr std::string_view kOp = "masked_scatter";
  absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), kOp, "input", limits);
  if (!input.ok()) return input.status();
  absl::StatusOr<TensorView> mask = wire::DecodeTensor(request.mask(), kOp, "mask", limits);
  if (!mask.ok()) return mask.status();
  absl::StatusOr<TensorView> src = wire::DecodeTensor(request.src(), kOp, "src", limits);
  if (!src.ok()) return src.status();
  const MaskedScatterArgs args{.input = *input, .mask = *mask, .source = *src};
  return args;
}

absl::StatusOr<PreparedOp> PrepareOp(const v1::GatherRequest& request,
                                     const wire::DecodeLimits& limits, v1::Tensor* result,
                                     InputReuse /*reuse: the result is not the input's*/) {
  absl::StatusOr<GatherArgs> args = DecodeArgs(request, limits);
  if (!args.ok()) return args.status();
  return Prepare("gather", PlanGather(*args), limits, result, RunGather);
}

absl::StatusOr<PreparedOp> PrepareOp(const v1::ScatterRequest& request,
                                     const wire::DecodeLimits& limits, v1::Tensor* result,
                                     InputReuse reuse) {
  absl::StatusOr<ScatterArgs> args = DecodeArgs(request, limits);
  if (!args.ok()) return args.status();
  absl::StatusOr<ScatterPlan> plan = PlanScatter(*args);
  // The CPU kernels are always reproducible; the flag picks the GPU's sorted reduction.
  if (plan.ok()) plan->deterministic = request.deterministic();
  return Prepare("scatter", std::move(plan), limits, result, RunScatter,
                 TakableInput(request, reuse));
}

absl::StatusOr<PreparedOp> PrepareOp(const v1::IndexSelectRequest& request,
                                     const wire::DecodeLimits& limits, v1::Tensor* result,
                                     InputReuse /*reuse: the result is not the input's*/) {
  absl::StatusOr<IndexSelectArgs> args = DecodeArgs(request, limits);
  if (!args.ok()) return args.status();
  return Prepare("index_select", PlanIndexSelect(*args), limits, result, RunGather);
}

absl::StatusOr<PreparedOp> PrepareOp(const v1::IndexReduceRequest& request,
                                     const wire::DecodeLimits& limits, v1::Tensor* result,
                                     InputReuse reuse) {
  absl::StatusOr<IndexReduceArgs> args = DecodeArgs(request, limits);
  if (!args.ok()) return args.status();
  return Prepare("index_reduce", PlanIndexReduce(*args), limits, result, RunScatter,
                 TakableInput(request, reuse));
}

absl::StatusOr<PreparedOp> PrepareOp(const v1::SelectScatterRequest& request,
                                     const wire::DecodeLimits& limits, v1::Tensor* result,
                                     InputReuse reuse) {
  absl::StatusOr<SelectScatterArgs> args = DecodeArgs(request, limits);
  if (!args.ok()) return args.status();
  return Prepare("select_scatter", PlanSelectScatter(*args), limits, result, RunViewScatter,
                 TakableInput(request, reuse));
}

absl::StatusOr<PreparedOp> PrepareOp(const v1::SliceScatterRequest& request,
                                     const wire::DecodeLimits& limits, v1::Tensor* result,
                                     InputReuse reuse) {
  absl::StatusOr<SliceScatterArgs> args = DecodeArgs(request, limits);
  if (!args.ok()) return args.status();
  return Prepare("slice_scatter", PlanSliceScatter(*args), limits, result, RunViewScatter,
                 TakableInput(request, reuse));
}

absl::StatusOr<PreparedOp> PrepareOp(const v1::DiagonalScatterRequest& request,
                                     const wire::DecodeLimits& limits, v1::Tensor* result,
                                     InputReuse reuse) {
  absl::StatusOr<DiagonalScatterArgs> args = DecodeArgs(request, limits);
  if (!args.ok()) return args.status();
  return Prepare("diagonal_scatter", PlanDiagonalScatter(*args), limits, result, RunViewScatter,
                 TakableInput(request, reuse));
}

absl::StatusOr<PreparedOp> PrepareOp(const v1::GatherNdRequest& request,
                                     const wire::DecodeLimits& limits, v1::Tensor* result,
                                     InputReuse /*reuse: the result is not the input's*/) {
  absl::StatusOr<GatherNdArgs> args = DecodeArgs(request, limits);
  if (!args.ok()) return args.status();
  return Prepare("gather_nd", PlanGatherNd(*args), limits, result, RunGatherNd);
}

absl::StatusOr<PreparedOp> PrepareOp(const v1::ScatterNdRequest& request,
                                     const wire::DecodeLimits& limits, v1::Tensor* result,
                                     InputReuse /*reuse: the result is not the input's*/) {
  absl::StatusOr<ScatterNdArgs> args = DecodeArgs(request, limits);
  if (!args.ok()) return args.status();
  absl::StatusOr<NdPlan> plan = PlanScatterNd(*args);
  // Only the single-axis form runs on the GPU (as a Scatter); the flag picks its sorted reduction.
  if (plan.ok() && plan->single_axis_scatter.has_value()) {
    plan->single_axis_scatter->deterministic = request.deterministic();
  }
  return Prepare("scatter_nd", std::move(plan), limits, result, RunScatterNd);
}

absl::StatusOr<PreparedOp> PrepareOp(const v1::MaskedScatterRequest& request,
                                     const wire::DecodeLimits& limits, v1::Tensor* result,
                                     InputReuse reuse) {
  absl::StatusOr<MaskedScatterArgs> args = DecodeArgs(request, limits);
  if (!args.ok()) return args.status();
  return Prepare("masked_scatter", PlanMaskedScatter(*args), limits, result, RunMaskedScatter,
                 TakableInput(request, reuse));
}

absl::StatusOr<PreparedOp> PrepareOp(const v1::OpRequest& request, const wire::DecodeLimits& limits,
                                     v1::Tensor* result, InputReuse reuse) {
  switch (request.op_case()) {
    case v1::OpRequest::kGather:
      return PrepareOp(request.gather(), limits, result, reuse);
    case v1::OpRequest::kScatter:
      return PrepareOp(request.scatter(), limits, result, reuse);
    case v1::OpRequest::kIndexSelect:
      return PrepareOp(request.index_select(), limits, result, reuse);
    case v1::OpRequest::kIndexReduce:
      return PrepareOp(request.index_reduce(), limits, result, reuse);
    case v1::OpRequest::kSelectScatter:
      return PrepareOp(request.select_scatter(), limits, result, reuse);
    case v1::OpRequest::kSliceScatter:
      return PrepareOp(request.slice_scatter(), limits, result, reuse);
    case v1::OpRequest::kDiagonalScatter:
      return PrepareOp(request.diagonal_scatter(), limits, result, reuse);
    case v1::OpRequest::kGatherNd:
      return PrepareOp(request.gather_nd(), limits, result, reuse);
    case v1::OpRequest::kScatterNd:
      return PrepareOp(request.scatter_nd(), limits, result, reuse);
    case v1::OpRequest::kMaskedScatter:
      return PrepareOp(request.masked_scatter(), limits, result, reuse);
    case v1::OpRequest::OP_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "run: op is not set (expected exactly one operation request, e.g. gather or scatter)");
}

namespace {

// ToBackwardArgs wraps one op's decoded arguments for Backward.
template <typename Args>
absl::StatusOr<BackwardArgs> ToBackwardArgs(absl::StatusOr<Args> args) {
  if (!args.ok()) return args.status();
  return BackwardArgs(*std::move(args));
}

absl::StatusOr<BackwardArgs> DecodeBackwardArgs(const v1::OpRequest& request,
                                                const wire::DecodeLimits& limits) {
  switch (request.op_case()) {
    case v1::OpRequest::kGather:
      return ToBackwardArgs(DecodeArgs(request.gather(), limits));
    case v1::OpRequest::kScatter:
      return ToBackwardArgs(DecodeArgs(request.scatter(), limits));
    case v1::OpRequest::kIndexSelect:
      return ToBackwardArgs(DecodeArgs(request.index_select(), limits));
    case v1::OpRequest::kIndexReduce:
      return ToBackwardArgs(DecodeArgs(request.index_reduce(), limits));
    case v1::OpRequest::kSelectScatter:
      return ToBackwardArgs(DecodeArgs(request.select_scatter(), limits));
    case v1::OpRequest::kSliceScatter:
      return ToBackwardArgs(DecodeArgs(request.slice_scatter(), limits));
    case v1::OpRequest::kDiagonalScatter:
      return ToBackwardArgs(DecodeArgs(request.diagonal_scatter(), limits));
    case v1::OpRequest::kGatherNd:
      return ToBackwardArgs(DecodeArgs(request.gather_nd(), limits));
    case v1::OpRequest::kScatterNd:
      return ToBackwardArgs(DecodeArgs(request.scatter_nd(), limits));
    case v1::OpRequest::kMaskedScatter:
      return ToBackwardArgs(DecodeArgs(request.masked_scatter(), limits));
    case v1::OpRequest::OP_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "backward: op is not set (expected the forward call's request, e.g. gather or scatter)");
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareBackward(const v1::BackwardRequest& request,
                                           const wire::DecodeLimits& limits,
                                           v1::BackwardResponse* response) {
  const std::string_view op = BackwardOpName(request.op());
  absl::StatusOr<BackwardArgs> args = DecodeBackwardArgs(request.op(), limits);
  if (!args.ok()) return args.status();
  absl::StatusOr<TensorView> grad_output =
      wire::DecodeTensor(request.grad_output(), op, "grad_output", limits);
  if (!grad_output.ok()) return grad_output.status();
  auto shared_args = std::make_shared<const BackwardArgs>(*std::move(args));
  return PreparedOp{
      .op = op, .run = [shared_args, grad_output = *grad_output, response]() -> absl::Status {
        absl::StatusOr<Gradients> gradients = Backward(*shared_args, grad_output);
        if (!gradients.ok()) return gradients.status();
        // The gradients are computed into tensors of their own and copied into the response
        // once; they are each the size of an input, which the request already carried.
        for (const auto& [argument, gradient] : gradients->by_argument) {
          wire::EncodeTensor(gradient.view(), &(*response->mutable_gradients())[argument]);
        }
        return absl::OkStatus();
      }};
}

std::string_view BackwardOpName(const v1::OpRequest& request) {
  switch (request.op_case()) {
    case v1::OpRequest::kGather:
      return "gather_backward";
    case v1::OpRequest::kScatter:
      return "scatter_backward";
    case v1::OpRequest::kIndexSelect:
      return "index_select_backward";
    case v1::OpRequest::kIndexReduce:
      return "index_reduce_backward";
    case v1::OpRequest::kSelectScatter:
      return "select_scatter_backward";
    case v1::OpRequest::kSliceScatter:
      return "slice_scatter_backward";
    case v1::OpRequest::kDiagonalScatter:
      return "diagonal_scatter_backward";
    case v1::OpRequest::kGatherNd:
      return "gather_nd_backward";
    case v1::OpRequest::kScatterNd:
      return "scatter_nd_backward";
    case v1::OpRequest::kMaskedScatter:
      return "masked_scatter_backward";
    case v1::OpRequest::OP_NOT_SET:
      break;
  }
  return "backward";
}

std::string_view OpName(const v1::OpRequest& request) {
  switch (request.op_case()) {
    case v1::OpRequest::kGather:
      return "gather";
    case v1::OpRequest::kScatter:
      return "scatter";
    case v1::OpRequest::kIndexSelect:
      return "index_select";
    case v1::OpRequest::kIndexReduce:
      return "index_reduce";
    case v1::OpRequest::kSelectScatter:
      return "select_scatter";
    case v1::OpRequest::kSliceScatter:
      return "slice_scatter";
    case v1::OpRequest::kDiagonalScatter:
      return "diagonal_scatter";
    case v1::OpRequest::kGatherNd:
      return "gather_nd";
    case v1::OpRequest::kScatterNd:
      return "scatter_nd";
    case v1::OpRequest::kMaskedScatter:
      return "masked_scatter";
    case v1::OpRequest::OP_NOT_SET:
      break;
  }
  return "run";
}

absl::Status GuardExceptions(std::string_view op, const std::function<absl::Status()>& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: the server ran out of memory for this request", op));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrFormat("%s: unexpected exception: %s", op, e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrFormat("%s: unexpected non-standard exception", op));
  }
}

}  // namespace tensorops
