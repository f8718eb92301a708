#include "server/tensor_ops_service.h"

#include <exception>
#include <new>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kernels/gather.h"
#include "kernels/index_ops.h"
#include "kernels/masked_scatter.h"
#include "kernels/nd_ops.h"
#include "kernels/scatter.h"
#include "kernels/shape.h"
#include "kernels/view_scatter.h"
#include "proto/grpc_status.h"
#include "spdlog/spdlog.h"

namespace tensorops {
namespace {

// ExecuteOp runs one planned op's kernel. It is the single step the scheduler will take over
// (queueing, batching, device placement); until then the kernel runs inline on the gRPC callback
// thread, which is acceptable because kernels parallelize internally with oneTBB.
absl::Status ExecuteOp(absl::FunctionRef<absl::Status()> kernel) { return kernel(); }

// RunGuarded calls `handler` and turns any exception into a status, so that no exception reaches
// gRPC's callback thread (that would terminate the server). Running out of memory is the caller's
// request being too large for this server (RESOURCE_EXHAUSTED); anything else is our bug.
absl::Status RunGuarded(std::string_view op, absl::FunctionRef<absl::Status()> handler) {
  try {
    return handler();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: the server ran out of memory for this request", op));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrFormat("%s: unexpected exception: %s", op, e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrFormat("%s: unexpected non-standard exception", op));
  }
}

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

// The CPU kernel of each plan type, as ExecuteOp runs it.
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

// PlanAndRun is the common tail of every handler: take the plan (or its error), allocate the
// result inside the response and run the kernel into it.
template <typename Plan, typename Kernel>
absl::Status PlanAndRun(std::string_view op, const absl::StatusOr<Plan>& plan,
                        const wire::DecodeLimits& limits, v1::Tensor* response_result,
                        Kernel kernel) {
  if (!plan.ok()) return plan.status();
  absl::StatusOr<MutableTensorView> result =
      AllocateResult(op, plan->result_dtype, plan->result_shape, limits, response_result);
  if (!result.ok()) return result.status();
  return ExecuteOp([&] { return kernel(*plan, *result); });
}

absl::Status HandleGather(const v1::GatherRequest& request, const wire::DecodeLimits& limits,
                          v1::GatherResponse* response) {
  constexpr std::string_view kOp = "gather";
  absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), kOp, "input", limits);
  if (!input.ok()) return input.status();
  absl::StatusOr<TensorView> index = wire::DecodeTensor(request.index(), kOp, "index", limits);
  if (!index.ok()) return index.status();

  const GatherArgs args{
      .input = *input, .index = *index, .axis = request.axis(), .broadcast = request.broadcast()};
  return PlanAndRun(kOp, PlanGather(args), limits, response->mutable_result(), RunGather);
}

absl::Status HandleScatter(const v1::ScatterRequest& request, const wire::DecodeLimits& limits,
                           v1::ScatterResponse* response) {
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
  // `deterministic` needs nothing here: the CPU kernels are always bitwise reproducible.

  return PlanAndRun(kOp, PlanScatter(args), limits, response->mutable_result(), RunScatter);
}

absl::Status HandleIndexSelect(const v1::IndexSelectRequest& request,
                               const wire::DecodeLimits& limits,
                               v1::IndexSelectResponse* response) {
  constexpr std::string_view kOp = "index_select";
  absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), kOp, "input", limits);
  if (!input.ok()) return input.status();
  absl::StatusOr<TensorView> index = wire::DecodeTensor(request.index(), kOp, "index", limits);
  if (!index.ok()) return index.status();
  const IndexSelectArgs args{.input = *input, .index = *index, .axis = request.axis()};
  return PlanAndRun(kOp, PlanIndexSelect(args), limits, response->mutable_result(), RunGather);
}

absl::Status HandleIndexReduce(const v1::IndexReduceRequest& request,
                               const wire::DecodeLimits& limits,
                               v1::IndexReduceResponse* response) {
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
  return PlanAndRun(kOp, PlanIndexReduce(args), limits, response->mutable_result(), RunScatter);
}

absl::Status HandleSelectScatter(const v1::SelectScatterRequest& request,
                                 const wire::DecodeLimits& limits,
                                 v1::SelectScatterResponse* response) {
  constexpr std::string_view kOp = "select_scatter";
  absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), kOp, "input", limits);
  if (!input.ok()) return input.status();
  absl::StatusOr<TensorView> src = wire::DecodeTensor(request.src(), kOp, "src", limits);
  if (!src.ok()) return src.status();
  const SelectScatterArgs args{
      .input = *input, .src = *src, .axis = request.axis(), .index = request.index()};
  return PlanAndRun(kOp, PlanSelectScatter(args), limits, response->mutable_result(),
                    RunViewScatter);
}

absl::Status HandleSliceScatter(const v1::SliceScatterRequest& request,
                                const wire::DecodeLimits& limits,
                                v1::SliceScatterResponse* response) {
  constexpr std::string_view kOp = "slice_scatter";
  absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), kOp, "input", limits);
  if (!input.ok()) return input.status();
  absl::StatusOr<TensorView> src = wire::DecodeTensor(request.src(), kOp, "src", limits);
  if (!src.ok()) return src.status();
  SliceScatterArgs args{.input = *input, .src = *src, .axis = request.axis()};
  if (request.has_start()) args.start = request.start();
  if (request.has_end()) args.end = request.end();
  if (request.has_step()) args.step = request.step();
  return PlanAndRun(kOp, PlanSliceScatter(args), limits, response->mutable_result(),
                    RunViewScatter);
}

absl::Status HandleDiagonalScatter(const v1::DiagonalScatterRequest& request,
                                   const wire::DecodeLimits& limits,
                                   v1::DiagonalScatterResponse* response) {
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
  return PlanAndRun(kOp, PlanDiagonalScatter(args), limits, response->mutable_result(),
                    RunViewScatter);
}

absl::Status HandleGatherNd(const v1::GatherNdRequest& request, const wire::DecodeLimits& limits,
                            v1::GatherNdResponse* response) {
  constexpr std::string_view kOp = "gather_nd";
  absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), kOp, "input", limits);
  if (!input.ok()) return input.status();
  absl::StatusOr<TensorView> index = wire::DecodeTensor(request.index(), kOp, "index", limits);
  if (!index.ok()) return index.status();
  const GatherNdArgs args{.input = *input,
                          .index = *index,
                          .axes = {request.axes().begin(), request.axes().end()},
                          .batch_dims = request.batch_dims()};
  return PlanAndRun(kOp, PlanGatherNd(args), limits, response->mutable_result(), RunGatherNd);
}

absl::Status HandleScatterNd(const v1::ScatterNdRequest& request, const wire::DecodeLimits& limits,
                             v1::ScatterNdResponse* response) {
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
  // `deterministic` needs nothing here: the CPU kernels are always bitwise reproducible.
  return PlanAndRun(kOp, PlanScatterNd(args), limits, response->mutable_result(), RunScatterNd);
}

absl::Status HandleMaskedScatter(const v1::MaskedScatterRequest& request,
                                 const wire::DecodeLimits& limits,
                                 v1::MaskedScatterResponse* response) {
  constexpr std::string_view kOp = "masked_scatter";
  absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), kOp, "input", limits);
  if (!input.ok()) return input.status();
  absl::StatusOr<TensorView> mask = wire::DecodeTensor(request.mask(), kOp, "mask", limits);
  if (!mask.ok()) return mask.status();
  absl::StatusOr<TensorView> src = wire::DecodeTensor(request.src(), kOp, "src", limits);
  if (!src.ok()) return src.status();
  const MaskedScatterArgs args{.input = *input, .mask = *mask, .source = *src};
  return PlanAndRun(kOp, PlanMaskedScatter(args), limits, response->mutable_result(),
                    RunMaskedScatter);
}

// FinishCall logs the outcome (errors at info, one line; every call at debug) and finishes the
// reaction with the status mapped to gRPC.
void FinishCall(grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor,
                std::string_view method, absl::Time start, const absl::Status& status) {
  if (status.ok()) {
    spdlog::debug("{} from {}: OK in {}", method, context->peer(),
                  absl::FormatDuration(absl::Now() - start));
  } else {
    spdlog::info("{} from {} failed in {}: {}", method, context->peer(),
                 absl::FormatDuration(absl::Now() - start), status.ToString());
  }
  reactor->Finish(wire::ToGrpcStatus(status));
}

}  // namespace

TensorOpsService::TensorOpsService(const wire::DecodeLimits& limits,
                                   const TokenAuthenticator* authenticator)
    : limits_(limits), authenticator_(authenticator) {}

template <typename Request, typename Response, typename Handler>
grpc::ServerUnaryReactor* TensorOpsService::Serve(grpc::CallbackServerContext* context,
                                                  std::string_view method, std::string_view op,
                                                  const Request* request, Response* response,
                                                  Handler handler) {
  const absl::Time start = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // The token check comes first, so that an unauthenticated caller learns nothing from decoding.
  absl::Status status = authenticator_ == nullptr
                            ? absl::OkStatus()
                            : authenticator_->Check(context->client_metadata());
  if (status.ok()) status = RunGuarded(op, [&] { return handler(*request, limits_, response); });
  // A failed call sends no response; drop a half-written result now rather than with the call.
  if (!status.ok()) response->Clear();
  FinishCall(context, reactor, method, start, status);
  return reactor;
}

grpc::ServerUnaryReactor* TensorOpsService::Gather(grpc::CallbackServerContext* context,
                                                   const v1::GatherRequest* request,
                                                   v1::GatherResponse* response) {
  return Serve(context, "Gather", "gather", request, response, HandleGather);
}

grpc::ServerUnaryReactor* TensorOpsService::Scatter(grpc::CallbackServerContext* context,
                                                    const v1::ScatterRequest* request,
                                                    v1::ScatterResponse* response) {
  return Serve(context, "Scatter", "scatter", request, response, HandleScatter);
}

grpc::ServerUnaryReactor* TensorOpsService::IndexSelect(grpc::CallbackServerContext* context,
                                                        const v1::IndexSelectRequest* request,
                                                        v1::IndexSelectResponse* response) {
  return Serve(context, "IndexSelect", "index_select", request, response, HandleIndexSelect);
}

grpc::ServerUnaryReactor* TensorOpsService::IndexReduce(grpc::CallbackServerContext* context,
                                                        const v1::IndexReduceRequest* request,
                                                        v1::IndexReduceResponse* response) {
  return Serve(context, "IndexReduce", "index_reduce", request, response, HandleIndexReduce);
}

grpc::ServerUnaryReactor* TensorOpsService::SelectScatter(grpc::CallbackServerContext* context,
                                                          const v1::SelectScatterRequest* request,
                                                          v1::SelectScatterResponse* response) {
  return Serve(context, "SelectScatter", "select_scatter", request, response, HandleSelectScatter);
}

grpc::ServerUnaryReactor* TensorOpsService::SliceScatter(grpc::CallbackServerContext* context,
                                                         const v1::SliceScatterRequest* request,
                                                         v1::SliceScatterResponse* response) {
  return Serve(context, "SliceScatter", "slice_scatter", request, response, HandleSliceScatter);
}

grpc::ServerUnaryReactor* TensorOpsService::DiagonalScatter(
    grpc::CallbackServerContext* context, const v1::DiagonalScatterRequest* request,
    v1::DiagonalScatterResponse* response) {
  return Serve(context, "DiagonalScatter", "diagonal_scatter", request, response,
               HandleDiagonalScatter);
}

grpc::ServerUnaryReactor* TensorOpsService::GatherNd(grpc::CallbackServerContext* context,
                                                     const v1::GatherNdRequest* request,
                                                     v1::GatherNdResponse* response) {
  return Serve(context, "GatherNd", "gather_nd", request, response, HandleGatherNd);
}

grpc::ServerUnaryReactor* TensorOpsService::ScatterNd(grpc::CallbackServerContext* context,
                                                      const v1::ScatterNdRequest* request,
                                                      v1::ScatterNdResponse* response) {
  return Serve(context, "ScatterNd", "scatter_nd", request, response, HandleScatterNd);
}

grpc::ServerUnaryReactor* TensorOpsService::MaskedScatter(grpc::CallbackServerContext* context,
                                                          const v1::MaskedScatterRequest* request,
                                                          v1::MaskedScatterResponse* response) {
  return Serve(context, "MaskedScatter", "masked_scatter", request, response, HandleMaskedScatter);
}

}  // namespace tensorops
