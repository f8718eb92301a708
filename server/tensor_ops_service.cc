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
#include "kernels/scatter.h"
#include "kernels/shape.h"
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

absl::Status HandleGather(const v1::GatherRequest& request, const wire::DecodeLimits& limits,
                          v1::GatherResponse* response) {
  constexpr std::string_view kOp = "gather";
  absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), kOp, "input", limits);
  if (!input.ok()) return input.status();
  absl::StatusOr<TensorView> index = wire::DecodeTensor(request.index(), kOp, "index", limits);
  if (!index.ok()) return index.status();

  const GatherArgs args{
      .input = *input, .index = *index, .axis = request.axis(), .broadcast = request.broadcast()};
  absl::StatusOr<GatherPlan> plan = PlanGather(args);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<MutableTensorView> result = AllocateResult(
      kOp, plan->result_dtype, plan->result_shape, limits, response->mutable_result());
  if (!result.ok()) return result.status();
  return ExecuteOp([&] { return cpu::Gather(*plan, *result); });
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

  absl::StatusOr<ScatterPlan> plan = PlanScatter(args);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<MutableTensorView> result = AllocateResult(
      kOp, plan->result_dtype, plan->result_shape, limits, response->mutable_result());
  if (!result.ok()) return result.status();
  return ExecuteOp([&] { return cpu::Scatter(*plan, *result); });
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

TensorOpsService::TensorOpsService(const wire::DecodeLimits& limits) : limits_(limits) {}

grpc::ServerUnaryReactor* TensorOpsService::Gather(grpc::CallbackServerContext* context,
                                                   const v1::GatherRequest* request,
                                                   v1::GatherResponse* response) {
  const absl::Time start = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Status status =
      RunGuarded("gather", [&] { return HandleGather(*request, limits_, response); });
  // A failed call sends no response; drop a half-written result now rather than with the call.
  if (!status.ok()) response->Clear();
  FinishCall(context, reactor, "Gather", start, status);
  return reactor;
}

grpc::ServerUnaryReactor* TensorOpsService::Scatter(grpc::CallbackServerContext* context,
                                                    const v1::ScatterRequest* request,
                                                    v1::ScatterResponse* response) {
  const absl::Time start = absl::Now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const absl::Status status =
      RunGuarded("scatter", [&] { return HandleScatter(*request, limits_, response); });
  if (!status.ok()) response->Clear();
  FinishCall(context, reactor, "Scatter", start, status);
  return reactor;
}

}  // namespace tensorops
