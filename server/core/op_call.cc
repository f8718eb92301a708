#include "server/core/op_call.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "kernels/status_macros.h"
#include "proto/grpc_status.h"
#include "server/core/rejection.h"
#include "server/observability/call_log.h"
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
  if (!status.ok()) serving.metrics->Rejected(RejectionLabel(Rejection::kUnauthenticated));
  return status;
}

std::string StoreNamespace(const ServingContext& serving,
                           const grpc::CallbackServerContext& context) {
  if (serving.authenticator == nullptr) return "";
  // Only authenticated calls reach the store, so the token is one of the file's.
  absl::StatusOr<std::string_view> tenant =
      serving.authenticator->Identify(context.client_metadata());
  return tenant.ok() ? std::string(*tenant) : "";
}

absl::Status PoolFullError(const ServingContext& serving) {
  return MarkRejected(
      absl::ResourceExhaustedError(absl::StrFormat(
          "the server is busy: %d calls are waiting for stored tensors that other calls hold, "
          "the most --max_queued_calls allows (at least 16); retry later or with backoff",
          serving.blocking_pool->max_tasks())),
      Rejection::kQueueFull);
}

void LogFinishedCall(std::string_view method, std::string_view peer, absl::Duration elapsed,
                     const absl::Status& status) {
  CallLog::Global().Finished(method, peer, elapsed, status, absl::Now());
}

OpCall::OpCall(const ServingContext& serving, absl::Time deadline, int64_t request_bytes,
               std::string_view op)
    : Scheduler::Work(deadline, request_bytes),
      serving_(serving),
      op_name_(op),
      request_bytes_(request_bytes) {}

void OpCall::Start(Prepare prepare) {
  if (serving_.blocking_pool == nullptr) {
    Admit(PrepareNow(prepare, LockWait::kWait));
    return;
  }
  // Most calls find their stored tensors free: prepared here without waiting, they skip the
  // pool's thread wake-up (about 40 µs of a 0.5 ms lookup into shared memory on a 2-core VM).
  // Only a call that would wait for a lock goes to the pool, to wait there.
  absl::Status tried = PrepareNow(prepare, LockWait::kTry);
  if (!IsStoreBusy(tried)) {
    Admit(std::move(tried));
    return;
  }
  // While it waits, the call holds its request: the bytes count against --max_memory_bytes, and
  // the pool takes no more waiting calls than --max_queued_calls.
  if (serving_.memory != nullptr) {
    absl::StatusOr<MemoryBudget::Reservation> held =
        serving_.memory->Reserve(op_name_, request_bytes_, /*result_bytes=*/0);
    if (!held.ok()) {
      End(held.status());
      return;
    }
    memory_ = *std::move(held);
  }
  // Received before a shutdown began: admitted after it too, within the grace.
  serving_.scheduler->MarkArrived(this);
  const bool queued = serving_.blocking_pool->Run([this, prepare = std::move(prepare)] {
    // A call whose client left, or whose deadline passed, while it waited for a thread is not
    // prepared (its wait for the lock itself cannot be cut short).
    if (ClientGone() || absl::Now() >= deadline()) {
      EndCancelledInQueue("the client");
      return;
    }
    Admit(PrepareNow(prepare, LockWait::kWait));
  });
  if (!queued) End(PoolFullError(serving_));
}

absl::Status OpCall::PrepareNow(const Prepare& prepare, LockWait lock_wait) {
  return GuardExceptions(op_name_, [&]() -> absl::Status {
    TENSOROPS_ASSIGN_OR_RETURN(op_, prepare(lock_wait));
    return absl::OkStatus();
  });
}

void OpCall::Admit(absl::Status status) {
  timeline_.prepared = absl::Now();
  // Admission: the call's bytes first (--max_memory_bytes), then a place in the queue. A call
  // that waited for a lock held its request's bytes meanwhile; they are counted anew here.
  memory_.Release();
  if (status.ok() && serving_.memory != nullptr) {
    absl::StatusOr<MemoryBudget::Reservation> held =
        serving_.memory->Reserve(op_name_, request_bytes_, op_.result_bytes);
    if (held.ok()) {
      memory_ = *std::move(held);
    } else {
      status = held.status();
    }
  }
  // From Submit on, a worker (or Submit itself, inline) may run and end the call.
  if (status.ok()) status = serving_.scheduler->Submit(this);
  if (!status.ok()) End(status);
}

bool OpCall::CancelIfQueued(std::string_view who) {
  if (!serving_.scheduler->Cancel(this)) return false;
  EndCancelledInQueue(who);
  return true;
}

void OpCall::EndCancelledInQueue(std::string_view who) {
  // gRPC cancels a call whose deadline passes; say which of the two happened.
  if (absl::Now() >= deadline()) {
    Drop(MarkRejected(
        absl::DeadlineExceededError("the call's deadline passed while it waited in the queue"),
        Rejection::kDeadlineExceeded));
  } else {
    Drop(MarkRejected(absl::CancelledError(absl::StrFormat(
                          "%s cancelled the call while it waited in the queue", who)),
                      Rejection::kCancelled));
  }
}

void OpCall::Run() {
  // The client may have gone between admission and now; its reply would be discarded.
  if (ClientGone()) {
    End(MarkRejected(absl::CancelledError("the call was cancelled before it ran"),
                     Rejection::kCancelled));
    return;
  }
  timeline_.run_start = absl::Now();
  timeline_.device = "cpu";
  const absl::Status status = GuardExceptions(op_.op, [this] {
    TENSOROPS_RETURN_IF_ERROR(op_.run());
    return op_.finish ? op_.finish() : absl::OkStatus();
  });
  timeline_.run_end = absl::Now();
  End(status);
}

void OpCall::Drop(const absl::Status& why) { End(why); }

std::optional<Scheduler::Work::DeviceTask> OpCall::PrepareDevice() {
  timeline_.run_start = absl::Now();
  if (!op_.device) return std::nullopt;
  const absl::Status status = GuardExceptions(op_.op, [&]() -> absl::Status {
    TENSOROPS_ASSIGN_OR_RETURN(device_run_, op_.device());
    return absl::OkStatus();
  });
  // An error here (a result over the limits) is found again by the CPU run, which reports it.
  if (!status.ok() || device_run_.call == nullptr) return std::nullopt;
  return DeviceTask{.call = device_run_.call.get(), .result = device_run_.result};
}

void OpCall::CompleteOnDevice() {
  timeline_.device = "cuda";
  timeline_.run_end = absl::Now();
  End(op_.finish ? GuardExceptions(op_.op, op_.finish) : absl::OkStatus());
}

void OpCall::FailOnDevice(const absl::Status& why) {
  if (!device_run_.result_shared) {
    // The kernels wrote only a new stored tensor's upload, which nobody sees before the call
    // commits it: the CPU runs the call again into it and reports what the GPU found (an index
    // out of range is the client's INVALID_ARGUMENT, as on a host store).
    Run();
    return;
  }
  timeline_.device = "cuda";
  timeline_.run_end = absl::Now();
  // Nothing is committed: the stored tensor keeps its version, but its bytes may have changed.
  // DATA_LOSS, which no client retries: running the update again would apply it twice.
  End(absl::DataLossError(absl::StrFormat(
      "%s: the GPU failed after it began writing the result into the stored tensor, which may "
      "now be partly updated (its version is unchanged; put it again to be sure of it): %s",
      op_.op, why.message())));
}

void OpCall::End(const absl::Status& outcome) {
  absl::Status status = outcome;
  // The result's bytes were checked against the limit; the message around them was not. gRPC
  // would refuse to send a response over its send limit, which is --max_message_bytes, with an
  // error that names no flag, and end a whole stream with it.
  if (const int64_t response_bytes = status.ok() ? ResponseBytes() : 0;
      response_bytes > serving_.limits.max_bytes) {
    status = absl::ResourceExhaustedError(
        absl::StrFormat("%s: the response would be %d bytes, more than the server's limit of %d "
                        "(--max_message_bytes); ask for a smaller result, or keep it in the store "
                        "(result_options.store_as) or in shared memory",
                        op_.op, response_bytes, serving_.limits.max_bytes));
  }
  code_ = status.code();
  timeline_.finished = absl::Now();
  std::optional<Rejection> why = RejectionOf(status);
  // Every RESOURCE_EXHAUSTED not marked by the scheduler is a tensor or result over the limits
  // (or one the server had no memory for).
  if (!why.has_value() && code_ == absl::StatusCode::kResourceExhausted) why = Rejection::kLimit;
  if (why.has_value()) serving_.metrics->Rejected(RejectionLabel(*why));
  LogFinishedCall(LogName(), Peer(), *timeline_.finished - timeline_.start, status);
  // The op has run (or never will): let go of its plan now, and with it the stored tensors it
  // held, rather than when the transport is done with the call. A RunStream response may wait
  // long for a client that does not read, and must not hold off updates of those tensors.
  op_ = PreparedOp{};
  Deliver(status);
}

void OpCall::CountFinished(int64_t response_bytes) const {
  serving_.metrics->CallFinished(op_name_, code_, timeline_.device,
                                 timeline_.Stages(enqueued(), absl::Now()), request_bytes_,
                                 code_ == absl::StatusCode::kOk ? response_bytes : 0);
}

grpc::ServerUnaryReactor* UnaryOpCall::Start(const ServingContext& serving,
                                             grpc::CallbackServerContext* context,
                                             std::string_view method, std::string_view op,
                                             Prepare prepare, int64_t request_bytes,
                                             google::protobuf::Message* response) {
  auto* call = new UnaryOpCall(serving, context, method, op, request_bytes, response);
  // The token check comes first, so that an unauthenticated caller learns nothing from decoding.
  // gRPC deletes the call only after the handler has returned it, so returning `call` stays
  // safe whatever OpCall::Start did.
  if (const absl::Status auth = Authenticate(serving, *context); !auth.ok()) {
    call->OpCall::Start([&](LockWait) -> absl::StatusOr<PreparedOp> { return auth; });
  } else {
    call->OpCall::Start(std::move(prepare));
  }
  return call;
}

UnaryOpCall::UnaryOpCall(const ServingContext& serving, grpc::CallbackServerContext* context,
                         std::string_view method, std::string_view op, int64_t request_bytes,
                         google::protobuf::Message* response)
    : OpCall(serving, absl::FromChrono(context->deadline()), request_bytes, op),
      context_(context),
      method_(method),
      response_(response),
      counted_(serving.calls) {}

void UnaryOpCall::Deliver(const absl::Status& status) {
  // A failed call sends no response; drop a half-written result now rather than with the call.
  if (!status.ok()) response_->Clear();
  // Counted before Finish: once the client has its answer, the metrics include the call.
  CountFinished(static_cast<int64_t>(response_->ByteSizeLong()));
  Finish(wire::ToGrpcStatus(status));
}

void UnaryOpCall::OnCancel() {
  // Only a call still waiting in the queue is ours to end here; a running one ends by itself.
  CancelIfQueued("the client");
}

void UnaryOpCall::OnDone() { delete this; }

}  // namespace tensorops
