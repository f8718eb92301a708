// NewRegionHandler: the gRPC handler of an RPC that registers, unregisters or lists shared-memory
// regions, in either protocol (tensorops.v1's RegisterSharedMemory, Triton's
// SystemSharedMemoryRegister, ...): NewQuickUnaryHandler's steps (server/rpc/quick_unary_call.h),
// the caller's namespace, and the registry's errors with the RPC's name in front.
//
//   MarkMethodCallback(MethodIndex("ListSharedMemory"),
//                      NewRegionHandler<v1::ListSharedMemoryRequest, v1::ListSharedMemoryResponse>(
//                          serving, "ListSharedMemory", "list_shared_memory",
//                          [](SharedMemoryRegions& regions, std::string_view ns,
//                             const v1::ListSharedMemoryRequest& request,
//                             v1::ListSharedMemoryResponse* response) -> absl::Status { ... }));
#ifndef TENSOROPS_SERVER_SHARED_MEMORY_REGION_HANDLER_H_
#define TENSOROPS_SERVER_SHARED_MEMORY_REGION_HANDLER_H_

#include <functional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "server/core/op_call.h"
#include "server/rpc/quick_unary_call.h"
#include "server/shared_memory/regions.h"

namespace tensorops {

template <typename Request, typename Response>
using RegionHandle = std::function<absl::Status(SharedMemoryRegions& regions, std::string_view ns,
                                                const Request& request, Response* response)>;

// `method` and `op` must be string literals (or outlive the server).
template <typename Request, typename Response>
grpc::internal::MethodHandler* NewRegionHandler(const ServingContext& serving,
                                                std::string_view method, std::string_view op,
                                                RegionHandle<Request, Response> handle) {
  return NewQuickUnaryHandler<Request, Response>(
      serving, method, op,
      [&serving, method, handle = std::move(handle)](grpc::CallbackServerContext& context,
                                                     const Request& request,
                                                     Response* response) -> absl::Status {
        if (serving.shared_memory == nullptr) {
          return absl::FailedPreconditionError(
              absl::StrFormat("%s: this server serves no shared memory", method));
        }
        const absl::Status status =
            handle(*serving.shared_memory, StoreNamespace(serving, context), request, response);
        if (status.ok()) return status;
        return absl::Status(status.code(), absl::StrFormat("%s: %s", method, status.message()));
      });
}

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_SHARED_MEMORY_REGION_HANDLER_H_
