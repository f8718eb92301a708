// TensorOpsService: the gRPC front end of tensorops.v1.TensorOps on the callback API.
//
//   TensorOpsService service(wire::DecodeLimits{.max_elements = 1 << 30});
//   grpc::ServerBuilder builder;
//   builder.RegisterService(&service);
//
// Each unary handler decodes the request with the wire codec (views into the request's bytes, no
// copy), plans the op with `kernels` (all op-level validation lives there), allocates the result
// directly inside the response message and runs the CPU kernel into it. Errors reach the caller as
// the kernels' absl::Status mapped to grpc::Status, with the message unchanged.
#ifndef TENSOROPS_SERVER_TENSOR_OPS_SERVICE_H_
#define TENSOROPS_SERVER_TENSOR_OPS_SERVICE_H_

#include <string_view>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "proto/codec.h"
#include "tensorops/v1/service.grpc.pb.h"

namespace tensorops {

// TensorOpsService serves every op of the TensorOps service. Thread-safe: handlers share nothing
// but the immutable limits. The kernels run inline on the gRPC callback thread for now; the
// scheduler will take over that one step (see ExecuteOp in the .cc).
class TensorOpsService final : public v1::TensorOps::CallbackService {
 public:
  // `limits` bound every decoded tensor and every result; exceeding one is RESOURCE_EXHAUSTED.
  explicit TensorOpsService(const wire::DecodeLimits& limits);

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
  // Serve runs one unary call: `handler` decodes, plans and executes; exceptions become statuses;
  // the outcome is logged and the reactor finished.
  template <typename Request, typename Response, typename Handler>
  grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* context, std::string_view method,
                                  std::string_view op, const Request* request, Response* response,
                                  Handler handler);

  const wire::DecodeLimits limits_;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_TENSOR_OPS_SERVICE_H_
