// OpStreamReactor<Protocol>: one bidirectional stream of op requests, a pipeline over one call;
// StreamRegistry: the open streams, so that shutdown can close them. tensorops.v1's RunStream
// (RunStreamProtocol below) and KServe's ModelStreamInfer (server/kserve/) are two protocols of
// the same reactor: what a request and a response look like differs, the pipeline does not.
//
// Each request read is prepared on the gRPC thread and admitted to the scheduler like a unary
// call (OpCall); its response (result or error, with the request's id) is written when it
// completes, in completion order. A failed request, including one refused by a full queue or one
// over --max_message_bytes, gets an error response and the stream goes on. The reactor reads
// ahead at most ServingContext::max_stream_in_flight requests that are not yet answered, so a
// client that sends faster than it reads is slowed by HTTP/2 flow control instead of growing the
// server's memory.
//
// The stream ends when the client has half-closed and every request is answered (OK), when the
// client cancels (queued requests leave the queue at once), when a request does not parse
// (INVALID_ARGUMENT, or RESOURCE_EXHAUSTED when it is also over --max_message_bytes, once the
// requests read before it are answered), or, once shutdown begins, as soon as every request
// already read is answered (UNAVAILABLE: reconnect to another replica).
//
// A Protocol provides
//   RequestMessage, ResponseMessage          the stream's messages
//   Call(RequestMessage)                     one request, movable into the reactor's OpCall:
//     std::string_view op_name() const       the op for metrics, before preparation
//     std::string LogName() const            the request in a log line
//     absl::StatusOr<PreparedOp> Prepare(const ServingContext&, const StoredTensors&)
//     void SetError(const absl::Status&)     turns the response into the request's error
//     const ResponseMessage& response() const
#ifndef TENSOROPS_SERVER_TENSOROPS_V1_RUN_STREAM_H_
#define TENSOROPS_SERVER_TENSOROPS_V1_RUN_STREAM_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/grpc_status.h"
#include "server/core/in_flight_calls.h"
#include "server/core/op_call.h"
#include "server/core/prepared_op.h"
#include "server/core/stored_operands.h"
#include "server/rpc/parsed_request.h"
#include "tensorops/v1/generic.pb.h"

namespace tensorops {

// StreamBase is what the registry needs of a stream, whatever its protocol.
class StreamBase {
 public:
  // Ref and Unref keep the stream alive across a call from StreamRegistry::CloseAll, which may
  // race with the stream's own end.
  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  // CloseForShutdown stops reading and ends the stream once what was read is answered.
  virtual void CloseForShutdown() = 0;

 protected:
  virtual ~StreamBase() = default;

 private:
  std::atomic<int> refs_{1};
};

// StreamRegistry tracks the open streams. Thread-safe.
class StreamRegistry {
 public:
  // CloseAll makes every open stream, and every stream opened later, end once it has answered
  // what it has read.
  void CloseAll();

  // AwaitClosed waits until every stream that was open at CloseAll has ended (gRPC is done with
  // it: its status was sent) or `deadline` passes; true when they all ended. Streams opened after
  // CloseAll end at once and are not waited for, so a client that keeps opening them cannot hold
  // shutdown up.
  bool AwaitClosed(absl::Time deadline);

  // Add registers `stream` and returns whether CloseAll has already happened.
  bool Add(StreamBase* stream);
  void Remove(StreamBase* stream);

 private:
  absl::Mutex mu_;
  std::set<StreamBase*> streams_ ABSL_GUARDED_BY(mu_);
  // The streams CloseAll closed that have not ended yet.
  std::set<StreamBase*> closing_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// RunStreamProtocol is tensorops.v1's RunStream: requests carry an OpRequest and a request_id,
// responses the result or a Status, with the id.
struct RunStreamProtocol {
  using RequestMessage = v1::RunStreamRequest;
  using ResponseMessage = v1::RunStreamResponse;

  class Call {
   public:
    explicit Call(v1::RunStreamRequest message);
    std::string_view op_name() const;
    std::string LogName() const;
    absl::StatusOr<PreparedOp> Prepare(const ServingContext& serving, const StoredTensors& stored);
    void SetError(const absl::Status& status);
    const v1::RunStreamResponse& response() const { return response_; }

   private:
    v1::RunStreamRequest message_;
    v1::RunStreamResponse response_;
  };
};

// OpStreamReactor serves one stream. It owns itself: created by the handler, deleted once gRPC is
// done with it and nobody else holds a reference (StreamBase::Ref).
template <typename Protocol>
class OpStreamReactor final
    : public grpc::ServerBidiReactor<Parsed<typename Protocol::RequestMessage>,
                                     typename Protocol::ResponseMessage>,
      public StreamBase {
 public:
  OpStreamReactor(const ServingContext& serving, grpc::CallbackServerContext* context,
                  StreamRegistry* registry);

 private:
  class Request;

  void CloseForShutdown() override;

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  // Complete queues `request`'s response for writing; from any thread, once per request.
  void Complete(Request* request);

  // The steps that need the lock; each returns what to do after unlocking.
  void StartReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartNextWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // MaybeFinishLocked finishes the stream when nothing is left to do.
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ServingContext& serving_;
  grpc::CallbackServerContext* const context_;
  StreamRegistry* const registry_;
  // The client, for the requests' log lines: taken as the stream opens, since gRPC forgets it
  // once a send on the call fails (a response to a client that cancelled) and says "unknown".
  const std::string peer_;
  // In serving.calls until the stream is deleted, after gRPC is done with it.
  const InFlightCalls::Counted counted_;

  absl::Mutex mu_;
  // The message the outstanding read fills.
  Parsed<typename Protocol::RequestMessage> incoming_ ABSL_GUARDED_BY(mu_);
  // Not OK once a request did not parse: the stream reads no more and ends with this status
  // after answering what it read (no request id can be trusted to answer it by).
  absl::Status malformed_ ABSL_GUARDED_BY(mu_);
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  // The client half-closed, or reading failed.
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  // Shutdown began: read no more.
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // A write failed: the client is gone, so later responses are dropped instead of written.
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // Requests read and not yet answered (written or dropped); they own themselves until then.
  std::set<Request*> unanswered_ ABSL_GUARDED_BY(mu_);
  // Completed requests whose responses wait to be written; the front one is being written when
  // `writing_`.
  std::deque<Request*> write_queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
};

using RunStreamReactor = OpStreamReactor<RunStreamProtocol>;

// Request is one request read from the stream, from preparation to its written response.
template <typename Protocol>
class OpStreamReactor<Protocol>::Request final : public OpCall {
 public:
  // `refusal`, when not OK, is the request's answer, given without preparing it (a request over
  // --max_message_bytes).
  Request(OpStreamReactor* stream, int64_t request_bytes, typename Protocol::Call call,
          absl::Status refusal)
      : OpCall(stream->serving_, absl::FromChrono(stream->context_->deadline()), request_bytes,
               call.op_name()),
        stream_(stream),
        call_(std::move(call)),
        refusal_(std::move(refusal)) {}

  // Start prepares the op and admits it to the scheduler, or answers with the error at once.
  void Start() {
    OpCall::Start([this](LockWait lock_wait) -> absl::StatusOr<PreparedOp> {
      if (!refusal_.ok()) return refusal_;
      const std::string ns = StoreNamespace(serving(), *stream_->context_);
      return call_.Prepare(serving(), StoredTensors{.store = serving().store,
                                                    .ns = ns,
                                                    .regions = serving().shared_memory,
                                                    .lock_wait = lock_wait});
    });
  }

  const typename Protocol::ResponseMessage& response() const { return call_.response(); }

  // Retire deletes the request once its response is written or dropped.
  void Retire() { delete this; }

 private:
  bool ClientGone() const override { return stream_->context_->IsCancelled(); }
  std::string LogName() const override { return call_.LogName(); }
  std::string Peer() const override { return stream_->peer_; }
  // Deliver puts the outcome in the response and hands it to the stream; `this` may be deleted
  // as soon as Complete has queued it.
  int64_t ResponseBytes() const override {
    return static_cast<int64_t>(call_.response().ByteSizeLong());
  }
  void Deliver(const absl::Status& status) override {
    if (!status.ok()) call_.SetError(status);
    // Counted before the response is queued: once the client reads it, the metrics include it.
    CountFinished(static_cast<int64_t>(call_.response().ByteSizeLong()));
    stream_->Complete(this);
  }

  OpStreamReactor* const stream_;
  typename Protocol::Call call_;
  const absl::Status refusal_;
};

template <typename Protocol>
OpStreamReactor<Protocol>::OpStreamReactor(const ServingContext& serving,
                                           grpc::CallbackServerContext* context,
                                           StreamRegistry* registry)
    : serving_(serving),
      context_(context),
      registry_(registry),
      peer_(context->peer()),
      counted_(serving.calls) {
  serving_.metrics->StreamOpened();
  absl::MutexLock lock(&mu_);
  closing_ = registry_->Add(this);
  if (const absl::Status auth = Authenticate(serving_, *context_); !auth.ok()) {
    finished_ = true;
    this->Finish(wire::ToGrpcStatus(auth));
  } else if (closing_) {
    MaybeFinishLocked();
  } else {
    StartReadLocked();
  }
}

template <typename Protocol>
void OpStreamReactor<Protocol>::CloseForShutdown() {
  absl::MutexLock lock(&mu_);
  closing_ = true;
  MaybeFinishLocked();
}

template <typename Protocol>
void OpStreamReactor<Protocol>::StartReadLocked() {
  if (reading_ || reads_done_ || closing_ || cancelled_ || finished_) return;
  if (static_cast<int>(unanswered_.size()) >= serving_.max_stream_in_flight) return;
  reading_ = true;
  incoming_.message.Clear();
  this->StartRead(&incoming_);
}

template <typename Protocol>
void OpStreamReactor<Protocol>::OnReadDone(bool ok) {
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
    // A request over --max_message_bytes that parsed is answered with its error, by its id, and
    // the stream goes on; one that did not parse ends the stream like any unparsable request.
    absl::Status refusal = RequestError(incoming_, serving_.limits.max_bytes);
    if (!incoming_.ok) {
      malformed_ = std::move(refusal);
      reads_done_ = true;
      MaybeFinishLocked();
      return;
    }
    const auto request_bytes = static_cast<int64_t>(incoming_.bytes);
    request =
        new Request(this, request_bytes, typename Protocol::Call(std::move(incoming_.message)),
                    std::move(refusal));
    unanswered_.insert(request);
  }
  // Preparation decodes the request; it runs outside the lock so that completions (writes) of
  // earlier requests go on meanwhile. The request may be answered, and deleted, inside Start.
  request->Start();
  absl::MutexLock lock(&mu_);
  StartReadLocked();
}

template <typename Protocol>
void OpStreamReactor<Protocol>::Complete(Request* request) {
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

template <typename Protocol>
void OpStreamReactor<Protocol>::StartNextWriteLocked() {
  // Responses nobody can receive any more are dropped rather than written.
  while (!writing_ && !write_queue_.empty() && (broken_ || cancelled_)) {
    Request* request = write_queue_.front();
    write_queue_.pop_front();
    unanswered_.erase(request);
    request->Retire();
  }
  if (!writing_ && !write_queue_.empty()) {
    writing_ = true;
    this->StartWrite(&write_queue_.front()->response());
  }
  StartReadLocked();
  MaybeFinishLocked();
}

template <typename Protocol>
void OpStreamReactor<Protocol>::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  if (!ok) broken_ = true;
  Request* request = write_queue_.front();
  write_queue_.pop_front();
  unanswered_.erase(request);
  request->Retire();
  StartNextWriteLocked();
}

template <typename Protocol>
void OpStreamReactor<Protocol>::OnCancel() {
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

template <typename Protocol>
void OpStreamReactor<Protocol>::MaybeFinishLocked() {
  if (finished_ || writing_ || !unanswered_.empty()) return;
  if (cancelled_) {
    finished_ = true;
    this->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the stream was cancelled"));
  } else if (broken_) {
    finished_ = true;
    this->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "a response could not be sent"));
  } else if (!malformed_.ok()) {
    finished_ = true;
    this->Finish(wire::ToGrpcStatus(malformed_));
  } else if (reads_done_) {
    finished_ = true;
    this->Finish(grpc::Status::OK);
  } else if (closing_) {
    finished_ = true;
    this->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              "the server is shutting down; every request it read was answered, "
                              "send the rest to another replica"));
  }
}

template <typename Protocol>
void OpStreamReactor<Protocol>::OnDone() {
  serving_.metrics->StreamClosed();
  registry_->Remove(this);
  Unref();
}

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_TENSOROPS_V1_RUN_STREAM_H_
