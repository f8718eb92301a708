#include "server/tensor_ops_service.h"

#include <string_view>
#include <utility>

#include "absl/time/clock.h"
#include "proto/grpc_status.h"
#include "server/prepared_op.h"

namespace tensorops {

TensorOpsService::TensorOpsService(const ServingContext& serving,
                                   v1::ServerInfoResponse server_info)
    : serving_(serving), server_info_(std::move(server_info)) {}

void TensorOpsService::BeginShutdown() { streams_.CloseAll(); }

template <typename Request, typename Response>
grpc::ServerUnaryReactor* TensorOpsService::ServeOp(grpc::CallbackServerContext* context,
                                                    std::string_view method, std::string_view op,
                                                    const Request* request, Response* response) {
  return UnaryOpCall::Start(
      serving_, context, method, op,
      // gRPC's request message belongs to this call until it is finished, and nothing reads it
      // after the op has run: the op may take its input bytes as the result.
      [&] {
        return PrepareOp(*request, serving_.limits, response->mutable_result(),
                         InputReuse::kMayTakeInput);
      },
      static_cast<int64_t>(request->ByteSizeLong()), response);
}

grpc::ServerUnaryReactor* TensorOpsService::Gather(grpc::CallbackServerContext* context,
                                                   const v1::GatherRequest* request,
                                                   v1::GatherResponse* response) {
  return ServeOp(context, "Gather", "gather", request, response);
}

grpc::ServerUnaryReactor* TensorOpsService::Scatter(grpc::CallbackServerContext* context,
                                                    const v1::ScatterRequest* request,
                                                    v1::ScatterResponse* response) {
  return ServeOp(context, "Scatter", "scatter", request, response);
}

grpc::ServerUnaryReactor* TensorOpsService::IndexSelect(grpc::CallbackServerContext* context,
                                                        const v1::IndexSelectRequest* request,
                                                        v1::IndexSelectResponse* response) {
  return ServeOp(context, "IndexSelect", "index_select", request, response);
}

grpc::ServerUnaryReactor* TensorOpsService::IndexReduce(grpc::CallbackServerContext* context,
                                                        const v1::IndexReduceRequest* request,
                                                        v1::IndexReduceResponse* response) {
  return ServeOp(context, "IndexReduce", "index_reduce", request, response);
}

grpc::ServerUnaryReactor* TensorOpsService::SelectScatter(grpc::CallbackServerContext* context,
                                                          const v1::SelectScatterRequest* request,
                                                          v1::SelectScatterResponse* response) {
  return ServeOp(context, "SelectScatter", "select_scatter", request, response);
}

grpc::ServerUnaryReactor* TensorOpsService::SliceScatter(grpc::CallbackServerContext* context,
                                                         const v1::SliceScatterRequest* request,
                                                         v1::SliceScatterResponse* response) {
  return ServeOp(context, "SliceScatter", "slice_scatter", request, response);
}

grpc::ServerUnaryReactor* TensorOpsService::DiagonalScatter(
    grpc::CallbackServerContext* context, const v1::DiagonalScatterRequest* request,
    v1::DiagonalScatterResponse* response) {
  return ServeOp(context, "DiagonalScatter", "diagonal_scatter", request, response);
}

grpc::ServerUnaryReactor* TensorOpsService::GatherNd(grpc::CallbackServerContext* context,
                                                     const v1::GatherNdRequest* request,
                                                     v1::GatherNdResponse* response) {
  return ServeOp(context, "GatherNd", "gather_nd", request, response);
}

grpc::ServerUnaryReactor* TensorOpsService::ScatterNd(grpc::CallbackServerContext* context,
                                                      const v1::ScatterNdRequest* request,
                                                      v1::ScatterNdResponse* response) {
  return ServeOp(context, "ScatterNd", "scatter_nd", request, response);
}

grpc::ServerUnaryReactor* TensorOpsService::MaskedScatter(grpc::CallbackServerContext* context,
                                                          const v1::MaskedScatterRequest* request,
                                                          v1::MaskedScatterResponse* response) {
  return ServeOp(context, "MaskedScatter", "masked_scatter", request, response);
}

grpc::ServerUnaryReactor* TensorOpsService::Run(grpc::CallbackServerContext* context,
                                                const v1::OpRequest* request,
                                                v1::OpResponse* response) {
  return ServeOp(context, "Run", OpName(*request), request, response);
}

grpc::ServerUnaryReactor* TensorOpsService::Backward(grpc::CallbackServerContext* context,
                                                     const v1::BackwardRequest* request,
                                                     v1::BackwardResponse* response) {
  return UnaryOpCall::Start(
      serving_, context, "Backward", BackwardOpName(request->op()),
      [&] { return PrepareBackward(*request, serving_.limits, response); },
      static_cast<int64_t>(request->ByteSizeLong()), response);
}

grpc::ServerBidiReactor<v1::RunStreamRequest, v1::RunStreamResponse>* TensorOpsService::RunStream(
    grpc::CallbackServerContext* context) {
  return new RunStreamReactor(serving_, context, &streams_);
}

grpc::ServerUnaryReactor* TensorOpsService::ServerInfo(grpc::CallbackServerContext* context,
                                                       const v1::ServerInfoRequest* request,
                                                       v1::ServerInfoResponse* response) {
  const absl::Time start = absl::Now();
  const absl::Status status = Authenticate(serving_, *context);
  if (status.ok()) *response = server_info_;
  LogFinishedCall("ServerInfo", context->peer(), absl::Now() - start, status);
  serving_.metrics->CallFinished("server_info", status.code(), "none", CallStages(),
                                 static_cast<int64_t>(request->ByteSizeLong()),
                                 static_cast<int64_t>(response->ByteSizeLong()));
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(wire::ToGrpcStatus(status));
  return reactor;
}

}  // namespace tensorops
