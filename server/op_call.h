// UnaryOpCall: one unary operation call, from its arrival on a gRPC thread through the scheduler
// to its reply. The per-op RPCs and Run all serve through it.
//
//   grpc::ServerUnaryReactor* Gather(context, request, response) override {
//     return UnaryOpCall::Start(serving_, context, "Gather", "gather",
//                               [&] { return PrepareOp(*request, serving_.limits); },
//                               request->ByteSizeLong(), response, response->mutable_result());
//   }
//
// The call is prepared (decoded, validated, planned) on the gRPC thread, admitted to the
// scheduler's queue, run by a worker, and finished from that worker; a small call that finds a
// worker slot free and the queue empty runs and finishes on the gRPC thread instead
// (Scheduler::Submit, --inline_max_bytes). A call cancelled by its
// client, or whose deadline passes while it waits in the queue, leaves the queue at once and is
// never run; one that is already running completes (its reply is discarded by gRPC).
#ifndef TENSOROPS_SERVER_OP_CALL_H_
#define TENSOROPS_SERVER_OP_CALL_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "proto/codec.h"
#include "server/auth.h"
#include "server/metrics.h"
#include "server/prepared_op.h"
#include "server/scheduler.h"

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
};

// CallTimeline is when one op call reached each stage, for the stage-latency metrics.
struct CallTimeline {
  absl::Time start = absl::Now();
  std::optional<absl::Time> prepared;  // decoded, validated and planned
  std::optional<absl::Time> run_start;
  std::optional<absl::Time> run_end;
  std::optional<absl::Time> finished;  // the reply was handed to gRPC
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

// RejectionReason names, for the rejected-calls metric, why `status` kept a call from running:
// "queue_full", "shutting_down", "limit", "deadline_exceeded", "cancelled"; empty for other
// outcomes (a bad request, a kernel error, success).
std::string_view RejectionReason(const absl::Status& status);

// LogFinishedCall writes the one line of a failed call (info) or of a successful one (debug).
// PrepareOnDevice is Scheduler::Work::PrepareDevice for a call running `op`: its GPU form, kept
// alive in `device_run`, or nullopt when it runs on the CPU (no GPU form, or an error the CPU run
// will report again).
std::optional<Scheduler::Work::DeviceTask> PrepareOnDevice(const PreparedOp& op,
                                                           DeviceRun* device_run);

void LogFinishedCall(std::string_view method, std::string_view peer, absl::Duration elapsed,
                     const absl::Status& status);

// UnaryOpCall is the reactor of one unary op call; it deletes itself when gRPC is done with it.
class UnaryOpCall final : public grpc::ServerUnaryReactor, private Scheduler::Work {
 public:
  // Start prepares the call (`method` is the RPC's name for logs, `op` the op's for metrics) with
  // `prepare` (exceptions become statuses) and admits it to the scheduler, or finishes it with the
  // error. `response` holds `result`; both belong to gRPC and live until the call is done. Returns
  // the reactor for the handler to return.
  static grpc::ServerUnaryReactor* Start(const ServingContext& serving,
                                         grpc::CallbackServerContext* context,
                                         std::string_view method, std::string_view op,
                                         const std::function<absl::StatusOr<PreparedOp>()>& prepare,
                                         int64_t request_bytes,
                                         google::protobuf::Message* response);

 private:
  UnaryOpCall(const ServingContext& serving, grpc::CallbackServerContext* context,
              std::string_view method, std::string_view op, int64_t request_bytes,
              google::protobuf::Message* response);

  // Scheduler::Work: on a worker thread, or wherever the call left the queue.
  void Run() override;
  void Drop(const absl::Status& why) override;
  std::optional<DeviceTask> PrepareDevice() override;
  void CompleteOnDevice() override;

  void OnCancel() override;
  void OnDone() override;

  // gRPC runs the reactions of a reactor that is not "inlineable" on its executor thread: for
  // every call one more thread wake-up (profiled: a quarter of the service's futex calls at 1 KiB)
  // before the call's slot is re-armed. Ours never block: OnDone counts the call and deletes it,
  // OnCancel takes the call out of the queue and finishes it. gRPC marks this hook "not API"
  // (it is how its own default reactor avoids the hop); a gRPC that drops it fails to compile here.
  bool InternalInlineable() override { return true; }

  // FinishWith ends the call with `status` (clearing the response when it is an error).
  void FinishWith(const absl::Status& status);

  const ServingContext& serving_;
  grpc::CallbackServerContext* const context_;
  const std::string_view method_;
  // The op's name for metrics: known before preparation, so that a call failing there has it.
  const std::string_view op_name_;
  google::protobuf::Message* const response_;
  const int64_t request_bytes_;
  CallTimeline timeline_;
  absl::StatusCode code_ = absl::StatusCode::kOk;
  PreparedOp op_;
  DeviceRun device_run_;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_OP_CALL_H_
