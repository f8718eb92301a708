#include "server/op_call.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "proto/grpc_status.h"
#include "spdlog/spdlog.h"

namespace tensorops {

CallStages CallTimeline::Stages(absl::Time queued, absl::Time done) const {
  CallStages stages;
  if (prepared) stages.decode = *prepared - start;
  if (run_start) stages.queue = *run_start - queued;
  if (run_start && run_end) stages.execute = *run_end - *run_start;
  if (run_end && finished) stages.encode = done - *finished;
  return stages;
}

absl::Status Authenticate(const ServingContext& serving,
                          const grpc::CallbackServerContext& context) {
  if (serving.authenticator == nullptr) return absl::OkStatus();
  absl::Status status = serving.authenticator->Check(context.client_metadata());
  if (!status.ok()) serving.metrics->Rejected("unauthenticated");
  return status;
}

std::string_view RejectionReason(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      // The scheduler's message names its flag; every other RESOURCE_EXHAUSTED is a size limit.
      return absl::StrContains(status.message(), "--max_queued_calls") ? "queue_full" : "limit";
    case absl::StatusCode::kUnavailable:
      return "shutting_down";
    case absl::StatusCode::kDeadlineExceeded:
      return "deadline_exceeded";
    case absl::StatusCode::kCancelled:
      return "cancelled";
    default:
      return {};
  }
}

std::optional<Scheduler::Work::DeviceTask> PrepareOnDevice(const PreparedOp& op,
                                                           DeviceRun* device_run) {
  if (!op.device) return std::nullopt;
  const absl::Status status = GuardExceptions(op.op, [&]() -> absl::Status {
    absl::StatusOr<DeviceRun> run = op.device();
    if (!run.ok()) return run.status();
    *device_run = *std::move(run);
    return absl::OkStatus();
  });
  if (!status.ok() || device_run->call == nullptr) return std::nullopt;
  return Scheduler::Work::DeviceTask{.call = device_run->call.get(), .result = device_run->result};
}

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
    std::string_view op, const std::function<absl::StatusOr<PreparedOp>()>& prepare,
    int64_t request_bytes, google::protobuf::Message* response) {
  auto* call = new UnaryOpCall(serving, context, method, op, request_bytes, response);
  // The token check comes first, so that an unauthenticated caller learns nothing from decoding.
  absl::Status status = Authenticate(serving, *context);
  if (status.ok())
    status = GuardExceptions(op, [&]() -> absl::Status {
      absl::StatusOr<PreparedOp> prepared = prepare();
      if (!prepared.ok()) return prepared.status();
      call->op_ = *std::move(prepared);
      return absl::OkStatus();
    });
  call->timeline_.prepared = absl::Now();
  // From Submit on, a worker (or Submit itself, inline) may run and finish the call; gRPC deletes
  // it only after the handler has returned it, so returning `call` stays safe.
  if (status.ok()) status = serving.scheduler->Submit(call);
  if (!status.ok()) call->FinishWith(status);
  return call;
}

UnaryOpCall::UnaryOpCall(const ServingContext& serving, grpc::CallbackServerContext* context,
                         std::string_view method, std::string_view op, int64_t request_bytes,
                         google::protobuf::Message* response)
    : Scheduler::Work(absl::FromChrono(context->deadline()), request_bytes),
      serving_(serving),
      context_(context),
      method_(method),
      op_name_(op),
      response_(response),
      request_bytes_(request_bytes) {}

void UnaryOpCall::Run() {
  // The client may have gone between admission and now; its reply would be discarded.
  if (context_->IsCancelled()) {
    FinishWith(absl::CancelledError("the call was cancelled before it ran"));
    return;
  }
  timeline_.run_start = absl::Now();
  timeline_.device = "cpu";
  const absl::Status status = GuardExceptions(op_.op, [this] { return op_.run(); });
  timeline_.run_end = absl::Now();
  FinishWith(status);
}

void UnaryOpCall::Drop(const absl::Status& why) { FinishWith(why); }

std::optional<Scheduler::Work::DeviceTask> UnaryOpCall::PrepareDevice() {
  timeline_.run_start = absl::Now();
  return PrepareOnDevice(op_, &device_run_);
}

void UnaryOpCall::CompleteOnDevice() {
  timeline_.device = "cuda";
  timeline_.run_end = absl::Now();
  FinishWith(absl::OkStatus());
}

void UnaryOpCall::OnCancel() {
  // Only a call still waiting in the queue is ours to end here; a running one ends by itself.
  if (!serving_.scheduler->Cancel(this)) return;
  if (absl::Now() >= deadline()) {
    Drop(absl::DeadlineExceededError("the call's deadline passed while it waited in the queue"));
  } else {
    Drop(absl::CancelledError("the client cancelled the call while it waited in the queue"));
  }
}

void UnaryOpCall::OnDone() {
  serving_.metrics->CallFinished(
      op_name_, code_, timeline_.device, timeline_.Stages(enqueued(), absl::Now()), request_bytes_,
      code_ == absl::StatusCode::kOk ? static_cast<int64_t>(response_->ByteSizeLong()) : 0);
  delete this;
}

void UnaryOpCall::FinishWith(const absl::Status& status) {
  // A failed call sends no response; drop a half-written result now rather than with the call.
  if (!status.ok()) response_->Clear();
  code_ = status.code();
  timeline_.finished = absl::Now();
  if (const std::string_view reason = RejectionReason(status);
      !reason.empty() &&
      (!timeline_.run_start.has_value() || code_ == absl::StatusCode::kResourceExhausted)) {
    serving_.metrics->Rejected(reason);
  }
  LogFinishedCall(method_, context_->peer(), *timeline_.finished - timeline_.start, status);
  Finish(wire::ToGrpcStatus(status));
}

}  // namespace tensorops
