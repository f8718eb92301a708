// TensorOpsService: the gRPC front end of tensorops.v1.TensorOps on the callback API.
//
//   TensorOpsService service(serving, server_info);
//   grpc::ServerBuilder builder;
//   builder.RegisterService(&service);
//   ...
//   service.BeginShutdown();  // open RunStreams end once they have answered what they read
//
// Every op call, whether through its own RPC, Run or RunStream, is prepared with PrepareOp
// (views into the request's bytes, no copy; all op-level validation lives in `kernels`) and then
// runs through the scheduler, which allocates the result directly inside the response. Errors
// reach the caller as the kernels' absl::Status mapped to grpc::Status, with the message
// unchanged.
#ifndef TENSOROPS_SERVER_TENSOR_OPS_SERVICE_H_
#define TENSOROPS_SERVER_TENSOR_OPS_SERVICE_H_

#include "grpcpp/grpcpp.h"
#include "server/op_call.h"
#include "server/run_stream.h"
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

  grpc::ServerUnaryReactor* Gather(grpc::CallbackServerContext* context,
                                   const v1::GatherRequest* request,
                                   v1::GatherResponse* response) override;

  grpc::ServerUnaryReactor* Scatter(grpc::CallbackServerContext* context,
                                    const v1::ScatterRequest* request,
                                    v1::ScatterResponse* response) override;

  grpc::ServerUnaryReactor* IndexSelect(grpc::CallbackServerContext* context,
                                        const v1::IndexSelectRequest* request,
                                        v1::IndexSelectResponse* response) override;

  grpc::ServerUnaryReactor* IndexReduce(grpc::CallbackServerContext* context,
                                        const v1::IndexReduceRequest* request,
                                        v1::IndexReduceResponse* response) override;

  grpc::ServerUnaryReactor* SelectScatter(grpc::CallbackServerContext* context,
                                          const v1::SelectScatterRequest* request,
                                          v1::SelectScatterResponse* response) override;

  grpc::ServerUnaryReactor* SliceScatter(grpc::CallbackServerContext* context,
                                         const v1::SliceScatterRequest* request,
                                         v1::SliceScatterResponse* response) override;

  grpc::ServerUnaryReactor* DiagonalScatter(grpc::CallbackServerContext* context,
                                            const v1::DiagonalScatterRequest* request,
                                            v1::DiagonalScatterResponse* response) override;

  grpc::ServerUnaryReactor* GatherNd(grpc::CallbackServerContext* context,
                                     const v1::GatherNdRequest* request,
                                     v1::GatherNdResponse* response) override;

  grpc::ServerUnaryReactor* ScatterNd(grpc::CallbackServerContext* context,
                                      const v1::ScatterNdRequest* request,
                                      v1::ScatterNdResponse* response) override;

  grpc::ServerUnaryReactor* MaskedScatter(grpc::CallbackServerContext* context,
                                          const v1::MaskedScatterRequest* request,
                                          v1::MaskedScatterResponse* response) override;

  grpc::ServerUnaryReactor* Run(grpc::CallbackServerContext* context, const v1::OpRequest* request,
                                v1::OpResponse* response) override;

  grpc::ServerUnaryReactor* Backward(grpc::CallbackServerContext* context,
                                     const v1::BackwardRequest* request,
                                     v1::BackwardResponse* response) override;

  grpc::ServerBidiReactor<v1::RunStreamRequest, v1::RunStreamResponse>* RunStream(
      grpc::CallbackServerContext* context) override;

  grpc::ServerUnaryReactor* ServerInfo(grpc::CallbackServerContext* context,
                                       const v1::ServerInfoRequest* request,
                                       v1::ServerInfoResponse* response) override;

 private:
  // ServeOp runs one unary op call through UnaryOpCall; `method` names the RPC, `op` the op.
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* ServeOp(grpc::CallbackServerContext* context, std::string_view method,
                                    std::string_view op, const Request* request,
                                    Response* response);

  const ServingContext serving_;
  const v1::ServerInfoResponse server_info_;
  StreamRegistry streams_;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_TENSOR_OPS_SERVICE_H_
