// RunStreamReactor: one RunStream call, a pipeline of op requests over one bidirectional stream;
// StreamRegistry: the open streams, so that shutdown can close them.
//
// Each request read is prepared on the gRPC thread and admitted to the scheduler like a unary
// call; its response (result or error, with the request's id) is written when it completes, in
// completion order. A failed request, including one refused by a full queue, gets an error
// response and the stream goes on. The reactor reads ahead at most
// ServingContext::max_stream_in_flight requests that are not yet answered, so a client that sends
// faster than it reads is slowed by HTTP/2 flow control instead of growing the server's memory.
//
// The stream ends when the client has half-closed and every request is answered (OK), when the
// client cancels (queued requests leave the queue at once), when a request does not parse
// (INVALID_ARGUMENT, once the requests read before it are answered), or, once shutdown begins, as
// soon as every request already read is answered (UNAVAILABLE: reconnect to another replica).
#ifndef TENSOROPS_SERVER_RUN_STREAM_H_
#define TENSOROPS_SERVER_RUN_STREAM_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/op_call.h"
#include "server/parsed_request.h"
#include "tensorops/v1/generic.pb.h"

namespace tensorops {

class RunStreamReactor;

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

 private:
  friend class RunStreamReactor;
  // Add registers `stream` and returns whether CloseAll has already happened.
  bool Add(RunStreamReactor* stream);
  void Remove(RunStreamReactor* stream);

  absl::Mutex mu_;
  std::set<RunStreamReactor*> streams_ ABSL_GUARDED_BY(mu_);
  // The streams CloseAll closed that have not ended yet.
  std::set<RunStreamReactor*> closing_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// RunStreamReactor serves one RunStream. It owns itself: created by the handler, deleted once
// gRPC is done with it and nobody else holds a reference (see Ref).
class RunStreamReactor final
    : public grpc::ServerBidiReactor<Parsed<v1::RunStreamRequest>, v1::RunStreamResponse> {
 public:
  RunStreamReactor(const ServingContext& serving, grpc::CallbackServerContext* context,
                   StreamRegistry* registry);

 private:
  friend class StreamRegistry;
  class Request;

  // Ref and Unref keep the reactor alive across a call from StreamRegistry::CloseAll, which may
  // race with the stream's own end.
  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref();

  // CloseForShutdown stops reading and ends the stream once what was read is answered.
  void CloseForShutdown();

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
  std::atomic<int> refs_{1};

  absl::Mutex mu_;
  // The message the outstanding read fills.
  Parsed<v1::RunStreamRequest> incoming_ ABSL_GUARDED_BY(mu_);
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

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_RUN_STREAM_H_
