// Mapping between absl::Status (used everywhere inside) and grpc::Status (at the edge).
#ifndef TENSOROPS_PROTO_GRPC_STATUS_H_
#define TENSOROPS_PROTO_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace tensorops::wire {

// ToGrpcStatus keeps the code (absl and gRPC share the numbering) and the message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// FromGrpcStatus is the inverse of ToGrpcStatus.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace tensorops::wire

#endif  // TENSOROPS_PROTO_GRPC_STATUS_H_
