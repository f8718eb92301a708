// EchoService: the raw gRPC baseline the service benchmark compares tensorops against. It answers
// each call with the bytes it received and does no other work.
//
//   EchoService service;
//   grpc::ServerBuilder builder;
//   builder.RegisterService(&service);
#ifndef TENSOROPS_BENCH_SERVICE_ECHO_SERVICE_H_
#define TENSOROPS_BENCH_SERVICE_ECHO_SERVICE_H_

#include "grpcpp/grpcpp.h"
#include "tensorops/bench/v1/echo.grpc.pb.h"

namespace tensorops::bench {

// EchoService moves the request's bytes into the response: the request belongs to the call until
// Finish, so no copy is made and the measured cost is gRPC's (parse, serialize, HTTP/2) alone.
class EchoService final : public v1::Echo::CallbackService {
 public:
  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* context,
                                 const v1::EchoMessage* request,
                                 v1::EchoMessage* response) override {
    response->mutable_data()->swap(*const_cast<v1::EchoMessage*>(request)->mutable_data());
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

}  // namespace tensorops::bench

#endif  // TENSOROPS_BENCH_SERVICE_ECHO_SERVICE_H_
