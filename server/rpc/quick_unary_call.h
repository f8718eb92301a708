// NewQuickUnaryHandler: the gRPC handler of a unary RPC that runs no op and is answered at once on
// the gRPC thread (ServerInfo, the store's bookkeeping RPCs, KServe's health and metadata RPCs).
// Every such call gets the same steps, in order: the token check (UNAUTHENTICATED before anything
// is read), a request over --max_message_bytes (RESOURCE_EXHAUSTED naming the flag) or that did
// not parse (INVALID_ARGUMENT naming its type: RequestError in parsed_request.h), the handler
// (exceptions become statuses), then its log line and its count in the metrics under `op`.
//
//   MarkMethodCallback(MethodIndex(service, "TensorInfo"),
//                      NewQuickUnaryHandler<v1::TensorInfoRequest, v1::TensorInfoResponse>(
//                          serving, "TensorInfo", "tensor_info",
//                          [](grpc::CallbackServerContext& context,
//                             const v1::TensorInfoRequest& request,
//                             v1::TensorInfoResponse* response) -> absl::Status { ... }));
#ifndef TENSOROPS_SERVER_RPC_QUICK_UNARY_CALL_H_
#define TENSOROPS_SERVER_RPC_QUICK_UNARY_CALL_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/server_callback_handlers.h"
#include "proto/grpc_status.h"
#include "server/core/op_call.h"
#include "server/core/prepared_op.h"
#include "server/rpc/parsed_request.h"

namespace tensorops {

// MethodIndex is `method`'s index in `service`, the index gRPC's generated service registers its
// handler under (the methods in the order the .proto declares them).
inline int MethodIndex(const google::protobuf::ServiceDescriptor* service,
                       std::string_view method) {
  const google::protobuf::MethodDescriptor* found = service->FindMethodByName(std::string(method));
  // A name that is not a method is a bug of the caller, caught by every test that starts a server.
  GPR_ASSERT(found != nullptr);
  return found->index();
}

// FullMethodName is `method` of `service` as gRPC names it in a call:
// "/tensorops.v1.TensorOps/Gather".
inline std::string FullMethodName(const google::protobuf::ServiceDescriptor* service,
                                  std::string_view method) {
  return "/" + service->full_name() + "/" + std::string(method);
}

// FinishQuickCall logs a call that ran no op and counts it in the metrics as `op` on no device.
inline void FinishQuickCall(const ServingContext& serving,
                            const grpc::CallbackServerContext& context, std::string_view method,
                            std::string_view op, absl::Time start, const absl::Status& status,
                            int64_t request_bytes, int64_t response_bytes) {
  LogFinishedCall(method, context.peer(), absl::Now() - start, status);
  serving.metrics->CallFinished(op, status.code(), "none", CallStages(), request_bytes,
                                status.ok() ? response_bytes : 0);
}

// NewQuickUnaryHandler returns the handler for MarkMethodCallback; `handle(context, request,
// response)` returns the call's status. `method` and `op` must be string literals (or outlive
// the server).
template <typename Request, typename Response, typename Handle>
grpc::internal::MethodHandler* NewQuickUnaryHandler(const ServingContext& serving,
                                                    std::string_view method, std::string_view op,
                                                    Handle handle) {
  // The handler type is the one gRPC's generated code registers, instantiated with
  // Parsed<Request> so that a malformed body reaches the handler (server/rpc/parsed_request.h).
  return new grpc::internal::CallbackUnaryHandler<Parsed<Request>, Response>(
      [&serving, method, op, handle](grpc::CallbackServerContext* context,
                                     const Parsed<Request>* request, Response* response) {
        const absl::Time start = absl::Now();
        absl::Status status = Authenticate(serving, *context);
        if (status.ok()) status = RequestError(*request, serving.limits.max_bytes);
        if (status.ok()) {
          status =
              GuardExceptions(op, [&] { return handle(*context, request->message, response); });
        }
        if (!status.ok()) response->Clear();
        // Counted before Finish: once the client has its answer, the metrics include the call.
        FinishQuickCall(serving, *context, method, op, start, status,
                        static_cast<int64_t>(request->bytes),
                        static_cast<int64_t>(response->ByteSizeLong()));
        grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
        reactor->Finish(wire::ToGrpcStatus(status));
        return reactor;
      });
}

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_RPC_QUICK_UNARY_CALL_H_
