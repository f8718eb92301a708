#include "server/run_stream.h"

#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "proto/grpc_status.h"
#include "server/stored_operands.h"
#include "spdlog/spdlog.h"

namespace tensorops {

void StreamRegistry::CloseAll() {
  std::vector<RunStreamReactor*> streams;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    closing_ = streams_;
    for (RunStreamReactor* stream : streams_) {
      stream->Ref();
      streams.push_back(stream);
    }
  }
  // Outside the registry's lock: a stream that ends here removes itself from the registry.
  for (RunStreamReactor* stream : streams) {
    stream->CloseForShutdown();
    stream->Unref();
  }
}

bool StreamRegistry::Add(RunStreamReactor* stream) {
  absl::MutexLock lock(&mu_);
  streams_.insert(stream);
  return closed_;
}

void StreamRegistry::Remove(RunStreamReactor* stream) {
  absl::MutexLock lock(&mu_);
  streams_.erase(stream);
  closing_.erase(stream);
}

bool StreamRegistry::AwaitClosed(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(
      absl::Condition(
          +[](std::set<RunStreamReactor*>* closing) { return closing->empty(); }, &closing_),
      deadline);
}

// Request is one op request read from the stream, from preparation to its written response.
class RunStreamReactor::Request final : public OpCall {
 public:
  Request(RunStreamReactor* stream, v1::RunStreamRequest message)
      : OpCall(stream->serving_, absl::FromChrono(stream->context_->deadline()),
               static_cast<int64_t>(message.ByteSizeLong()), OpName(message.op())),
        stream_(stream),
        message_(std::move(message)) {
    response_.set_request_id(message_.request_id());
  }

  // Start prepares the op and admits it to the scheduler, or answers with the error at once.
  void Start() {
    OpCall::Start(
        [this] {
          const std::string ns = StoreNamespace(serving(), *stream_->context_);
          return PrepareOp(message_.op(), serving().limits, response_.mutable_result(),
                           InputReuse::kNo, StoredTensors{.store = serving().store, .ns = ns});
        },
        /*may_block=*/ReferencesStoredTensors(message_.op()));
  }

  const v1::RunStreamResponse& response() const { return response_; }

  // Retire deletes the request once its response is written or dropped.
  void Retire() { delete this; }

 private:
  bool ClientGone() const override { return stream_->context_->IsCancelled(); }
  std::string LogName() const override {
    return absl::StrFormat("RunStream request %d", message_.request_id());
  }
  std::string Peer() const override { return stream_->context_->peer(); }
  // Deliver puts the outcome in the response and hands it to the stream; `this` may be deleted
  // as soon as Complete has queued it.
  void Deliver(const absl::Status& status) override {
    if (!status.ok()) {
      response_.clear_result();
      response_.mutable_error()->set_code(static_cast<int32_t>(status.code()));
      response_.mutable_error()->set_message(std::string(status.message()));
    }
    // Counted before the response is queued: once the client reads it, the metrics include it.
    CountFinished(static_cast<int64_t>(response_.ByteSizeLong()));
    stream_->Complete(this);
  }

  RunStreamReactor* const stream_;
  const v1::RunStreamRequest message_;
  v1::RunStreamResponse response_;
};

RunStreamReactor::RunStreamReactor(const ServingContext& serving,
                                   grpc::CallbackServerContext* context, StreamRegistry* registry)
    : serving_(serving), context_(context), registry_(registry) {
  serving_.metrics->StreamOpened();
  absl::MutexLock lock(&mu_);
  closing_ = registry_->Add(this);
  if (const absl::Status auth = Authenticate(serving_, *context_); !auth.ok()) {
    finished_ = true;
    Finish(wire::ToGrpcStatus(auth));
  } else if (closing_) {
    MaybeFinishLocked();
  } else {
    StartReadLocked();
  }
}

void RunStreamReactor::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

void RunStreamReactor::CloseForShutdown() {
  absl::MutexLock lock(&mu_);
  closing_ = true;
  MaybeFinishLocked();
}

void RunStreamReactor::StartReadLocked() {
  if (reading_ || reads_done_ || closing_ || cancelled_ || finished_) return;
  if (static_cast<int>(unanswered_.size()) >= serving_.max_stream_in_flight) return;
  reading_ = true;
  incoming_.message.Clear();
  StartRead(&incoming_);
}

void RunStreamReactor::OnReadDone(bool ok) {
  Request* request = nullptr;
  {
    absl::MutexLock lock(&mu_);
    reading_ = false;
    if (!ok) reads_done_ = true;
    // A read that was outstanding when the stream finished (shutdown) may still bring a message;
    // nothing can answer it any more.
    if (!ok || finished_) {
      MaybeFinishLocked();
      return;
    }
    if (!incoming_.ok) {
      malformed_ = MalformedRequestError(incoming_);
      reads_done_ = true;
      MaybeFinishLocked();
      return;
    }
    request = new Request(this, std::move(incoming_.message));
    unanswered_.insert(request);
  }
  // Preparation decodes the request; it runs outside the lock so that completions (writes) of
  // earlier requests go on meanwhile. The request may be answered, and deleted, inside Start.
  request->Start();
  absl::MutexLock lock(&mu_);
  StartReadLocked();
}

void RunStreamReactor::Complete(Request* request) {
  // Complete may run on a worker thread after every reaction has returned; the reference keeps
  // the reactor alive until this function is done, even if the stream finishes meanwhile.
  Ref();
  {
    absl::MutexLock lock(&mu_);
    write_queue_.push_back(request);
    StartNextWriteLocked();
  }
  Unref();
}

void RunStreamReactor::StartNextWriteLocked() {
  // Responses nobody can receive any more are dropped rather than written.
  while (!writing_ && !write_queue_.empty() && (broken_ || cancelled_)) {
    Request* request = write_queue_.front();
    write_queue_.pop_front();
    unanswered_.erase(request);
    request->Retire();
  }
  if (!writing_ && !write_queue_.empty()) {
    writing_ = true;
    StartWrite(&write_queue_.front()->response());
  }
  StartReadLocked();
  MaybeFinishLocked();
}

void RunStreamReactor::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  if (!ok) broken_ = true;
  Request* request = write_queue_.front();
  write_queue_.pop_front();
  unanswered_.erase(request);
  request->Retire();
  StartNextWriteLocked();
}

void RunStreamReactor::OnCancel() {
  std::vector<Request*> dropped;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    // Requests still waiting in the scheduler's queue leave it now; lock order is stream, then
    // scheduler (the scheduler never calls back into a stream under its lock).
    for (Request* request : unanswered_) {
      if (serving_.scheduler->Cancel(request)) dropped.push_back(request);
    }
  }
  for (Request* request : dropped) {
    request->EndCancelledInQueue("the stream's client");
  }
  absl::MutexLock lock(&mu_);
  MaybeFinishLocked();
}

void RunStreamReactor::MaybeFinishLocked() {
  if (finished_ || writing_ || !unanswered_.empty()) return;
  if (cancelled_) {
    finished_ = true;
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the stream was cancelled"));
  } else if (broken_) {
    finished_ = true;
    Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "a response could not be sent"));
  } else if (!malformed_.ok()) {
    finished_ = true;
    Finish(wire::ToGrpcStatus(malformed_));
  } else if (reads_done_) {
    finished_ = true;
    Finish(grpc::Status::OK);
  } else if (closing_) {
    finished_ = true;
    Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the server is shutting down; every request it read was answered, send "
                        "the rest to another replica"));
  }
}

void RunStreamReactor::OnDone() {
  serving_.metrics->StreamClosed();
  registry_->Remove(this);
  Unref();
}

}  // namespace tensorops
