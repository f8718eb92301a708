// Clients of the standard gRPC services every tensorops server offers next to TensorOps: health
// checking (grpc.health.v1.Health) and server reflection (grpc.reflection.v1alpha), which is
// what grpc_health_probe and grpcurl use. They back tensorops-cli's health, list and describe.
//
//   absl::StatusOr<std::string> status = CheckHealth(channel, deadline, "tensorops.v1.TensorOps");
//   absl::StatusOr<std::vector<std::string>> services = ListServices(channel, deadline);
//   google::protobuf::DescriptorPool pool;
//   absl::Status loaded = LoadSymbol(channel, deadline, "tensorops.v1.GatherRequest", &pool);
//   std::cout << pool.FindMessageTypeByName("tensorops.v1.GatherRequest")->DebugString();
#ifndef TENSOROPS_CLIENT_CPP_GRPC_SERVICES_H_
#define TENSOROPS_CLIENT_CPP_GRPC_SERVICES_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/channel.h"

namespace tensorops {

// CheckHealth asks the server's health service for the status of `service` ("" for the server
// as a whole) and returns its name: "SERVING", "NOT_SERVING" or "UNKNOWN". Returns the call's
// status on failure: NOT_FOUND for a service the server does not know, UNAVAILABLE when it
// cannot be reached, DEADLINE_EXCEEDED after `deadline`.
absl::StatusOr<std::string> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                        absl::Time deadline, std::string_view service);

// ListServices returns the full names of the services the server offers, as its reflection
// service lists them (sorted). The call's status on failure; UNIMPLEMENTED from a server without
// reflection.
absl::StatusOr<std::vector<std::string>> ListServices(const std::shared_ptr<grpc::Channel>& channel,
                                                      absl::Time deadline);

// LoadSymbol asks the server's reflection service for the .proto file that defines `symbol` (a
// service, method, message, enum or field, by full name, e.g. "tensorops.v1.TensorOps.Gather")
// and builds it, with every file it imports, into `pool`. Files `pool` already has are kept.
// NOT_FOUND naming the symbol when the server does not know it; INTERNAL when a file it sends
// does not build; otherwise the call's status.
absl::Status LoadSymbol(const std::shared_ptr<grpc::Channel>& channel, absl::Time deadline,
                        std::string_view symbol, google::protobuf::DescriptorPool* pool);

}  // namespace tensorops

#endif  // TENSOROPS_CLIENT_CPP_GRPC_SERVICES_H_
