// TensorOpsService: the gRPC front end of tensorops.v1.TensorOps on the callback API.
//
//   TensorOpsService service(serving, server_info);
//   grpc::ServerBuilder builder;
//   builder.RegisterService(&service);
//   ...
//   service.BeginShutdown();  // open RunStreams end once they have answered what they read
//
// The handlers are installed from the op table (proto/op_list.h): one per op for its own RPC,
// and Run, RunStream and Backward for every op, so that adding an op adds no handler here. Every
// op call is prepared with PrepareOp (views into the request's bytes, no copy; all op-level
// validation lives in `kernels`) and runs through OpCall and the scheduler, which allocates the
// result directly inside the response. Errors reach the caller as the kernels' absl::Status
// mapped to grpc::Status, with the message unchanged. Every handler takes its request as
// Parsed<T> (server/rpc/parsed_request.h), so a body that is not the declared message is answered
// INVALID_ARGUMENT naming the message type, and one over --max_message_bytes RESOURCE_EXHAUSTED
// naming the flag, on every RPC.
//
// The store RPCs (PutTensor, GetTensor, DeleteTensor, ListTensors, TensorInfo) run on the gRPC
// thread, not the scheduler: they copy bytes and take the store's locks, and never run a kernel.
// Every op's tensor argument may reference a stored tensor instead of carrying its bytes
// (Tensor.stored), resolved when the op is prepared (server/core/op_table.h, ArgDecoder).
#ifndef TENSOROPS_SERVER_TENSOROPS_V1_TENSOR_OPS_SERVICE_H_
#define TENSOROPS_SERVER_TENSOROPS_V1_TENSOR_OPS_SERVICE_H_

#include <string>
#include <string_view>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "server/core/op_call.h"
#include "server/tensorops_v1/run_stream.h"
#include "tensorops/v1/service.grpc.pb.h"

namespace tensorops {

// TensorOpsService serves every RPC of the TensorOps service. Thread-safe.
class TensorOpsService final : public v1::TensorOps::CallbackService {
 public:
  // `serving` (limits, scheduler) must outlive the service; `server_info` is ServerInfo's reply.
  TensorOpsService(const ServingContext& serving, v1::ServerInfoResponse server_info);

  TensorOpsService(const TensorOpsService&) = delete;
  TensorOpsService& operator=(const TensorOpsService&) = delete;

  // BeginShutdown makes every open RunStream, and any opened later, end with UNAVAILABLE once it
  // has answered every request it has read. Unary calls are drained by gRPC's own Shutdown.
  void BeginShutdown();

  // AwaitStreamsEnded waits until the RunStreams open at BeginShutdown have ended, or `deadline`;
  // true when they have.
  bool AwaitStreamsEnded(absl::Time deadline) { return streams_.AwaitClosed(deadline); }

  // op_call_methods: the full names ("/tensorops.v1.TensorOps/Gather") of the methods whose calls
  // are op calls (UnaryOpCall, RunStreamReactor), which count themselves in serving.calls.
  const std::vector<std::string>& op_call_methods() const { return op_call_methods_; }

 private:
  // HandleOpCall installs the handler of the unary RPC `method`, whose calls run through
  // UnaryOpCall as op `op` (for metrics) prepared by prepare(request, response).
  template <typename Request, typename Response, typename Prepare>
  void HandleOpCall(std::string_view method, std::string_view op, Prepare prepare);

  void HandleServerInfo();
  void HandleRunStream();
  // The store RPCs (store.proto): PutTensor, GetTensor and the unary ones, on serving_.store.
  void HandleStoreRpcs();
  // HandleStoreCall installs the unary store RPC `method` (`op` in metrics), answered by
  // handle(store, namespace, request, response).
  template <typename Request, typename Response, typename Handle>
  void HandleStoreCall(std::string_view method, std::string_view op, Handle handle);
  // The shared-memory RPCs (shared_memory.proto), on serving_.shared_memory.
  void HandleSharedMemoryRpcs();

  const ServingContext serving_;
  const v1::ServerInfoResponse server_info_;
  StreamRegistry streams_;
  std::vector<std::string> op_call_methods_;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_TENSOROPS_V1_TENSOR_OPS_SERVICE_H_
