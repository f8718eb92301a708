// TensorOpsService: the gRPC front end of tensorops.v1.TensorOps on the callback API.
//
//   TensorOpsService service(wire::DecodeLimits{.max_elements = 1 << 30});
//   // or, with callers required to send a bearer token (see server/auth.h):
//   TensorOpsService guarded(limits, authenticator.get());
//   grpc::ServerBuilder builder;
//   builder.RegisterService(&service);
//
// Each unary handler decodes the request with the wire codec (views into the request's bytes, no
// copy), plans the op with `kernels` (all op-level validation lives there), allocates the result
// directly inside the response message and runs the CPU kernel into it. Errors reach the caller as
// the kernels' absl::Status mapped to grpc::Status, with the message unchanged. With a
// TokenAuthenticator, a call without the right bearer token is UNAUTHENTICATED before anything is
// decoded (gRPC has parsed the message by then, so max_message_bytes still bounds that work).
#ifndef TENSOROPS_SERVER_TENSOR_OPS_SERVICE_H_
#define TENSOROPS_SERVER_TENSOR_OPS_SERVICE_H_

#include <string_view>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "proto/codec.h"
#include "server/auth.h"
#include "tensorops/v1/service.grpc.pb.h"

namespace tensorops {

// TensorOpsService serves every op of the TensorOps service. Thread-safe: handlers share nothing
// but the immutable limits and authenticator. The kernels run inline on the gRPC callback thread
// for now; the scheduler will take over that one step (see ExecuteOp in the .cc).
class TensorOpsService final : public v1::TensorOps::CallbackService {
 public:
  // `limits` bound every decoded tensor and every result; exceeding one is RESOURCE_EXHAUSTED.
  // `authenticator`, when not null, must pass every call's metadata (else UNAUTHENTICATED) and
  // must outlive the service; null serves everyone.
  explicit TensorOpsService(const wire::DecodeLimits& limits,
                            const TokenAuthenticator* authenticator = nullptr);

  TensorOpsService(const TensorOpsService&) = delete;
  TensorOpsService& operator=(const TensorOpsService&) = delete;

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

 private:
  // Serve runs one unary call: the token check (when there is an authenticator), then `handler`
  // decodes, plans and executes; exceptions become statuses; the outcome is logged and the
  // reactor finished.
  template <typename Request, typename Response, typename Handler>
  grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* context, std::string_view method,
                                  std::string_view op, const Request* request, Response* response,
                                  Handler handler);

  const wire::DecodeLimits limits_;
  const TokenAuthenticator* const authenticator_;  // Not owned; null: no token needed.
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_TENSOR_OPS_SERVICE_H_
