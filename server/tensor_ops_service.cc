#include "server/tensor_ops_service.h"

#include <string_view>
#include <utility>

#include "absl/time/clock.h"
#include "google/protobuf/descriptor.h"
#include "proto/grpc_status.h"
#include "proto/op_list.h"
#include "server/parsed_request.h"
#include "server/prepared_op.h"

namespace tensorops {
namespace {

// MethodIndex is `method`'s index in TensorOps, the index gRPC's generated service registers its
// handler under (the methods in the order service.proto declares them).
int MethodIndex(std::string_view method) {
  static const google::protobuf::ServiceDescriptor* const service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          v1::TensorOps::service_full_name());
  const google::protobuf::MethodDescriptor* found = service->FindMethodByName(std::string(method));
  // A name that is not a method is a bug of this file, caught by every test that starts a server.
  GPR_ASSERT(found != nullptr);
  return found->index();
}

}  // namespace

TensorOpsService::TensorOpsService(const ServingContext& serving,
                                   v1::ServerInfoResponse server_info)
    : serving_(serving), server_info_(std::move(server_info)) {
  // Each op's own RPC. gRPC's request message belongs to the call until it is finished, and
  // nothing reads it after the op has run: the op may take its input bytes as the result.
  ops::ForEachOp([this]<typename Op>(Op) {
    HandleOpCall<typename Op::Request, typename Op::Response>(
        ops::Rpc<Op>(), ops::Name<Op>(),
        [this](const typename Op::Request& request, typename Op::Response* response) {
          return PrepareOp(Op::kCase, request, serving_.limits, response->mutable_result(),
                           InputReuse::kMayTakeInput);
        });
  });
  HandleOpCall<v1::OpRequest, v1::OpResponse>(
      "Run", "run", [this](const v1::OpRequest& request, v1::OpResponse* response) {
        return PrepareOp(request, serving_.limits, response->mutable_result(),
                         InputReuse::kMayTakeInput);
      });
  HandleOpCall<v1::BackwardRequest, v1::BackwardResponse>(
      "Backward", "backward",
      [this](const v1::BackwardRequest& request, v1::BackwardResponse* response) {
        return PrepareBackward(request, serving_.limits, response);
      });
  HandleServerInfo();
  HandleRunStream();
}

void TensorOpsService::BeginShutdown() { streams_.CloseAll(); }

template <typename Request, typename Response, typename Prepare>
void TensorOpsService::HandleOpCall(std::string_view method, std::string_view op, Prepare prepare) {
  // The handler type is the one gRPC's generated code registers; it is ours to instantiate with
  // Parsed<Request>, so that a malformed body reaches the handler instead of being refused with
  // an empty UNIMPLEMENTED by gRPC.
  MarkMethodCallback(
      MethodIndex(method),
      new grpc::internal::CallbackUnaryHandler<Parsed<Request>, Response>(
          [this, method, op, prepare](grpc::CallbackServerContext* context,
                                      const Parsed<Request>* request, Response* response) {
            // Run and Backward name the op they carry in metrics; a malformed one has none.
            std::string_view op_name = op;
            if constexpr (std::is_same_v<Request, v1::OpRequest>) {
              if (request->ok) op_name = OpName(request->message);
            } else if constexpr (std::is_same_v<Request, v1::BackwardRequest>) {
              if (request->ok) op_name = BackwardOpName(request->message.op());
            }
            return UnaryOpCall::Start(
                serving_, context, method, op_name,
                [&]() -> absl::StatusOr<PreparedOp> {
                  if (!request->ok) return MalformedRequestError(*request);
                  return prepare(request->message, response);
                },
                static_cast<int64_t>(request->bytes), response);
          }));
}

void TensorOpsService::HandleServerInfo() {
  MarkMethodCallback(
      MethodIndex("ServerInfo"),
      new grpc::internal::CallbackUnaryHandler<Parsed<v1::ServerInfoRequest>,
                                               v1::ServerInfoResponse>(
          [this](grpc::CallbackServerContext* context, const Parsed<v1::ServerInfoRequest>* request,
                 v1::ServerInfoResponse* response) {
            const absl::Time start = absl::Now();
            absl::Status status = Authenticate(serving_, *context);
            if (status.ok() && !request->ok) status = MalformedRequestError(*request);
            if (status.ok()) *response = server_info_;
            LogFinishedCall("ServerInfo", context->peer(), absl::Now() - start, status);
            serving_.metrics->CallFinished("server_info", status.code(), "none", CallStages(),
                                           static_cast<int64_t>(request->bytes),
                                           static_cast<int64_t>(response->ByteSizeLong()));
            grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
            reactor->Finish(wire::ToGrpcStatus(status));
            return reactor;
          }));
}

void TensorOpsService::HandleRunStream() {
  MarkMethodCallback(
      MethodIndex("RunStream"),
      new grpc::internal::CallbackBidiHandler<Parsed<v1::RunStreamRequest>, v1::RunStreamResponse>(
          [this](grpc::CallbackServerContext* context) {
            return new RunStreamReactor(serving_, context, &streams_);
          }));
}

}  // namespace tensorops
