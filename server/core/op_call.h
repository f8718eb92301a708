// OpCall: the life of one op call, from preparation through the scheduler to its outcome, shared
// by every way a call arrives: a unary RPC (an op's own, Run, Backward: UnaryOpCall below) and
// each request of a RunStream (server/tensorops_v1/run_stream.cc). One core means one set of rules
// for admission, cancellation, deadlines, placement, device fallback, metrics and logs.
//
//   grpc::ServerUnaryReactor* reactor = UnaryOpCall::Start(
//       serving, context, "Gather", "gather",
//       [&](LockWait lock_wait) { return PrepareOp(...); }, request_bytes, response);
//
// The call is prepared (decoded, validated, planned) on the gRPC thread (a call that finds a
// stored tensor busy, or updates a durable one in place, on the blocking pool), admitted to the
// scheduler's queue, run by a worker, and finished from that worker; a small call that finds a
// worker slot free and the queue empty runs and finishes on the gRPC thread instead
// (Scheduler::Submit, --inline_max_bytes). A call whose client cancels, or whose deadline passes,
// while it waits in the queue leaves the queue at once and is never run; a call taken by a worker
// after its client left is not run either; one that is already running completes (its reply is
// discarded by gRPC).
#ifndef TENSOROPS_SERVER_CORE_OP_CALL_H_
#define TENSOROPS_SERVER_CORE_OP_CALL_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "proto/codec.h"
#include "server/core/blocking_pool.h"
#include "server/core/in_flight_calls.h"
#include "server/core/memory_budget.h"
#include "server/core/prepared_op.h"
#include "server/core/scheduler.h"
#include "server/observability/metrics.h"
#include "server/rpc/auth.h"
#include "server/shared_memory/regions.h"
#include "server/store/durable_store.h"
#include "server/store/tensor_store.h"

namespace tensorops {

// ServingContext is what every call of the service needs; it outlives every call.
struct ServingContext {
  wire::DecodeLimits limits;
  Scheduler* scheduler = nullptr;
  // Counts every call; never null.
  Metrics* metrics = nullptr;
  // When not null, every call's metadata must carry its bearer token (else UNAUTHENTICATED,
  // checked before anything is decoded).
  const TokenAuthenticator* authenticator = nullptr;
  // The most requests one RunStream may have read and not yet answered: >= 1.
  int max_stream_in_flight = 64;
  // The resident tensors the store RPCs keep and ops reference; never null in a server.
  TensorStore* store = nullptr;
  // The store's snapshots and log with --store_dir (SnapshotStore); null without.
  DurableStore* durable = nullptr;
  // The shared-memory regions clients registered (server/shared_memory/regions.h); null (in
  // some tests): no call can use shared memory.
  SharedMemoryRegions* shared_memory = nullptr;
  // GetTensor copies a tensor of at most this many bytes whole before streaming it
  // (--store_download_snapshot_bytes); 0 = never.
  int64_t download_snapshot_bytes = 0;
  // Where calls that may wait for a stored tensor's lock are prepared (blocking_pool.h). Null
  // (in some tests): on the calling thread.
  BlockingPool* blocking_pool = nullptr;
  // Holds each op call's bytes from admission until the call is done, against
  // --max_memory_bytes (memory_budget.h). Null (in some tests): nothing is counted.
  MemoryBudget* memory = nullptr;
  // The server's calls in flight, which shutdown waits for: each unary op call and each stream of
  // op requests counts itself here (UnaryOpCall, OpStreamReactor). Null (in some tests): nothing
  // is counted.
  InFlightCalls* calls = nullptr;
};

// StoreNamespace is the store namespace of `context`'s caller, the one place that decides it:
// without token auth every caller shares ""; with it, each tenant of --auth_token_file is a
// namespace of its own (its name, or one derived from its token: server/rpc/auth.h), so that one
// tenant can neither see, read, list, change nor delete another's tensors.
std::string StoreNamespace(const ServingContext& serving,
                           const grpc::CallbackServerContext& context);

// PoolFullError is the refusal of a call that must wait for a stored tensor's lock when
// serving.blocking_pool holds as many waiting calls as it may (--max_queued_calls): a
// RESOURCE_EXHAUSTED marked Rejection::kQueueFull.
absl::Status PoolFullError(const ServingContext& serving);

// CallTimeline is when one op call reached each stage, for the stage-latency metrics.
struct CallTimeline {
  absl::Time start = absl::Now();
  std::optional<absl::Time> prepared;  // decoded, validated and planned
  std::optional<absl::Time> run_start;
  std::optional<absl::Time> run_end;
  std::optional<absl::Time> finished;  // the outcome was handed to the transport
  // Where it ran: "none" until a device runs it.
  std::string_view device = "none";

  // Stages turns the timeline into durations, `done` being when the reply was sent; `queued` is
  // when the scheduler admitted the call.
  CallStages Stages(absl::Time queued, absl::Time done) const;
};

// Authenticate checks `context`'s metadata against serving.authenticator (OK without one) and
// counts a refusal in the metrics.
absl::Status Authenticate(const ServingContext& serving,
                          const grpc::CallbackServerContext& context);

// LogFinishedCall writes the one line of a failed call (info, rate-limited per client: see
// server/observability/call_log.h) or of a successful one (debug).
void LogFinishedCall(std::string_view method, std::string_view peer, absl::Duration elapsed,
                     const absl::Status& status);

// OpCall is one op call inside the scheduler. The transport (a unary reactor, a stream) derives
// from it and says how the outcome leaves (Deliver) and whether the client is still there.
class OpCall : public Scheduler::Work {
 public:
  // Prepare decodes, validates and plans the call; `lock_wait` goes into its StoredTensors.
  using Prepare = std::function<absl::StatusOr<PreparedOp>(LockWait lock_wait)>;

  // Start prepares the call with `prepare` (exceptions become statuses) and admits it: its
  // request and planned result bytes into serving.memory (RESOURCE_EXHAUSTED past
  // --max_memory_bytes), then into the scheduler; or it ends the call with the error at once. The
  // call may end, and be deleted, inside. `prepare` is first tried here with LockWait::kTry; when
  // that finds a stored tensor busy, or a durable store's journal that would wait for the disk
  // (IsStoreBusy), all of it happens again later on serving.blocking_pool with LockWait::kWait.
  // Every call is tried so, not only those that name stored tensors: a retried change answered
  // from the store's memory of it (update_id) reads a stored tensor too, and a gRPC thread must
  // never wait for a lock, which would stall unrelated calls. So `prepare` must own or point to
  // what it reads (nothing of the caller's stack), and a try that fails busy must leave the
  // request as it found it, so that the second preparation starts afresh.
  void Start(Prepare prepare);

  // CancelIfQueued takes the call out of the scheduler's queue and ends it with CANCELLED (or
  // DEADLINE_EXCEEDED when its deadline has passed, which is why gRPC cancelled it); `who` says
  // who cancelled, for the message ("the client", "the stream's client"). Returns false, doing
  // nothing, when the call is not queued (it is running, or already ended).
  bool CancelIfQueued(std::string_view who);
  // EndCancelledInQueue ends, as CancelIfQueued does, a call its owner has already taken out of
  // the queue with Scheduler::Cancel (a stream cancels its requests under its own lock, then ends
  // them outside it).
  void EndCancelledInQueue(std::string_view who);

 protected:
  // `op` is the op's name for metrics, known before preparation so that a call failing there has
  // it.
  OpCall(const ServingContext& serving, absl::Time deadline, int64_t request_bytes,
         std::string_view op);
  ~OpCall() override = default;

  // ClientGone is whether the client has cancelled the call (its outcome would be discarded).
  virtual bool ClientGone() const = 0;
  // LogName and Peer name the call and its client in its log line.
  virtual std::string LogName() const = 0;
  virtual std::string Peer() const = 0;
  // Deliver hands the call's outcome to the transport, once; `this` may be deleted inside.
  virtual void Deliver(const absl::Status& status) = 0;
  // ResponseBytes is the size of the response message as it stands: End refuses one over
  // --max_message_bytes, which gRPC would not send.
  virtual int64_t ResponseBytes() const = 0;

  // CountFinished records the call in the metrics. Deliver calls it before the outcome leaves,
  // so that a client that has its answer finds the call counted.
  void CountFinished(int64_t response_bytes) const;

  absl::StatusCode code() const { return code_; }
  const ServingContext& serving() const { return serving_; }

 private:
  // PrepareNow runs `prepare` on the calling thread into op_; its error, exceptions included.
  absl::Status PrepareNow(const Prepare& prepare, LockWait lock_wait);
  // Admit admits the prepared call (`prepared`: PrepareNow's outcome), or ends it with the error.
  void Admit(absl::Status prepared);

  // Scheduler::Work: on a worker thread, or wherever the call left the queue.
  void Run() final;
  void Drop(const absl::Status& why) final;
  std::optional<DeviceTask> PrepareDevice() final;
  void CompleteOnDevice() final;
  void FailOnDevice(const absl::Status& why) final;
  bool OperandsOnDevice() const final { return op_.operands_on_device; }
  bool OperandsInHostMemory() const final { return op_.operands_in_host_memory; }

  // End records the outcome (metrics of a refusal, the log line) and delivers it.
  void End(const absl::Status& status);

  const ServingContext& serving_;
  const std::string_view op_name_;
  const int64_t request_bytes_;
  // The call's bytes in serving.memory, held from admission until the transport is done with
  // the call (this object's end): the request and the response live until then.
  MemoryBudget::Reservation memory_;
  CallTimeline timeline_;
  absl::StatusCode code_ = absl::StatusCode::kOk;
  PreparedOp op_;
  DeviceRun device_run_;
};

// UnaryOpCall is the reactor of one unary op call; it deletes itself when gRPC is done with it.
class UnaryOpCall final : public grpc::ServerUnaryReactor, private OpCall {
 public:
  // Start authenticates the call, prepares it with `prepare` and admits it to the scheduler, or
  // finishes it with the error. `method` is the RPC's name for logs, `op` the op's for metrics.
  // `response` belongs to gRPC and lives until the call is done. Returns the reactor for the
  // handler to return.
  static grpc::ServerUnaryReactor* Start(const ServingContext& serving,
                                         grpc::CallbackServerContext* context,
                                         std::string_view method, std::string_view op,
                                         Prepare prepare, int64_t request_bytes,
                                         google::protobuf::Message* response);

 private:
  UnaryOpCall(const ServingContext& serving, grpc::CallbackServerContext* context,
              std::string_view method, std::string_view op, int64_t request_bytes,
              google::protobuf::Message* response);

  // OpCall:
  bool ClientGone() const override { return context_->IsCancelled(); }
  std::string LogName() const override { return std::string(method_); }
  std::string Peer() const override { return context_->peer(); }
  void Deliver(const absl::Status& status) override;
  int64_t ResponseBytes() const override { return static_cast<int64_t>(response_->ByteSizeLong()); }

  void OnCancel() override;
  void OnDone() override;

  // gRPC runs the reactions of a reactor that is not "inlineable" on its executor thread: for
  // every call one more thread wake-up (profiled: a quarter of the service's futex calls at 1 KiB)
  // before the call's slot is re-armed. Ours never block: OnDone deletes the call,
  // OnCancel takes the call out of the queue and finishes it. gRPC marks this hook "not API"
  // (it is how its own default reactor avoids the hop); a gRPC that drops it fails to compile here.
  bool InternalInlineable() override { return true; }

  grpc::CallbackServerContext* const context_;
  const std::string_view method_;
  google::protobuf::Message* const response_;
  // In serving.calls from the handler until gRPC is done with the call (OnDone deletes it).
  const InFlightCalls::Counted counted_;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_CORE_OP_CALL_H_
