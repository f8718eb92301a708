#include "server/op_call.h"

#include <utility>

#include "absl/time/clock.h"
#include "proto/grpc_status.h"
#include "spdlog/spdlog.h"

namespace tensorops {

void LogFinishedCall(std::string_view method, std::string_view peer, absl::Duration elapsed,
                     const absl::Status& status) {
  if (status.ok()) {
    spdlog::debug("{} from {}: OK in {}", method, peer, absl::FormatDuration(elapsed));
  } else {
    spdlog::info("{} from {} failed in {}: {}", method, peer, absl::FormatDuration(elapsed),
                 status.ToString());
  }
}

grpc::ServerUnaryReactor* UnaryOpCall::Start(
    const ServingContext& serving, grpc::CallbackServerContext* context, std::string_view method,
    const std::function<absl::StatusOr<PreparedOp>()>& prepare, google::protobuf::Message* response,
    v1::Tensor* result) {
  auto* call = new UnaryOpCall(serving, context, method, response, result);
  absl::Status status = GuardExceptions(method, [&]() -> absl::Status {
    absl::StatusOr<PreparedOp> op = prepare();
    if (!op.ok()) return op.status();
    call->op_ = *std::move(op);
    return absl::OkStatus();
  });
  // From Enqueue on, a worker may run and finish the call (and gRPC delete it) at any moment.
  if (status.ok()) status = serving.scheduler->Enqueue(call);
  if (!status.ok()) call->FinishWith(status);
  return call;
}

UnaryOpCall::UnaryOpCall(const ServingContext& serving, grpc::CallbackServerContext* context,
                         std::string_view method, google::protobuf::Message* response,
                         v1::Tensor* result)
    : Scheduler::Work(absl::FromChrono(context->deadline())),
      serving_(serving),
      context_(context),
      method_(method),
      response_(response),
      result_(result),
      start_(absl::Now()) {}

void UnaryOpCall::Run() {
  // The client may have gone between admission and now; its reply would be discarded.
  if (context_->IsCancelled()) {
    FinishWith(absl::CancelledError("the call was cancelled before it ran"));
    return;
  }
  FinishWith(GuardExceptions(op_.op, [this] { return op_.run(result_); }));
}

void UnaryOpCall::Drop(const absl::Status& why) { FinishWith(why); }

void UnaryOpCall::OnCancel() {
  // Only a call still waiting in the queue is ours to end here; a running one ends by itself.
  if (!serving_.scheduler->Cancel(this)) return;
  if (absl::Now() >= deadline()) {
    Drop(absl::DeadlineExceededError("the call's deadline passed while it waited in the queue"));
  } else {
    Drop(absl::CancelledError("the client cancelled the call while it waited in the queue"));
  }
}

void UnaryOpCall::OnDone() { delete this; }

void UnaryOpCall::FinishWith(const absl::Status& status) {
  // A failed call sends no response; drop a half-written result now rather than with the call.
  if (!status.ok()) response_->Clear();
  LogFinishedCall(method_, context_->peer(), absl::Now() - start_, status);
  Finish(wire::ToGrpcStatus(status));
}

}  // namespace tensorops
