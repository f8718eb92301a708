// TensorMemory: where a resident tensor's bytes live, host memory or a GPU's, and the copies in
// and out of it. The tensor store (server/store/tensor_store.h) allocates every stored tensor
// from one TensorMemory: HostTensorMemory() on a CPU server, a DeviceExecutor's
// resident_memory() with --store_device=cuda.
//
//   TensorMemory& memory = HostTensorMemory();
//   void* bytes = memory.Allocate(4096);          // null when there is no room
//   TENSOROPS_RETURN_IF_ERROR(memory.CopyFromHost(bytes, chunk.data(), chunk.size()));
//   memory.Free(bytes, 4096);
//
// Device memory is not host_accessible(): the CPU must never dereference it, only copy through
// CopyToHost and CopyFromHost; a DeviceCall names it as a resident input or result instead
// (kernels/device_call.h).
#ifndef TENSOROPS_KERNELS_TENSOR_MEMORY_H_
#define TENSOROPS_KERNELS_TENSOR_MEMORY_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace tensorops {

class TensorMemory {
 public:
  virtual ~TensorMemory() = default;

  // The device the bytes are on, as ServerInfo and /metrics name it: "cpu", "cuda:0".
  virtual std::string device() const = 0;
  // True when the CPU may read and write the bytes directly.
  virtual bool host_accessible() const = 0;
  // space is what views of these bytes say of them (kernels/tensor.h).
  MemorySpace space() const {
    return host_accessible() ? MemorySpace::kHost : MemorySpace::kDevice;
  }

  // Allocate returns `bytes` (>= 1) of uninitialized memory aligned to at least 256 bytes, or null
  // when there is none to be had. Thread-safe.
  virtual void* Allocate(int64_t bytes) = 0;
  // FootprintBytes is the memory Allocate(bytes) really takes, which a limit on memory counts:
  // `bytes` itself unless the allocation is rounded up (to whole huge pages on the host).
  virtual int64_t FootprintBytes(int64_t bytes) const { return bytes; }
  // Free releases what Allocate returned for `bytes`. Thread-safe.
  virtual void Free(void* data, int64_t bytes) = 0;

  // CopyToHost copies `bytes` from `data` (in this memory) to `host`; CopyFromHost the other way.
  // They return once the copy is done. A device error is UNAVAILABLE naming the device.
  virtual absl::Status CopyToHost(void* host, const void* data, int64_t bytes) const = 0;
  virtual absl::Status CopyFromHost(void* data, const void* host, int64_t bytes) const = 0;

  // OpenIpcHandle maps another process's device buffer, shared through CUDA IPC (`raw_handle`:
  // the 64 bytes of its cudaIpcMemHandle_t), into this memory's device, so that kernels and
  // copies reach it as they reach this memory's own bytes. The buffer must hold at least
  // `byte_size` bytes from where the handle points. INVALID_ARGUMENT for a handle that cannot be
  // opened (malformed, from a process that has exited, from a GPU this one cannot reach) or a
  // buffer smaller than `byte_size`, each naming the runtime's reason; UNIMPLEMENTED for memory
  // without CUDA IPC (the host's). Thread-safe.
  virtual absl::StatusOr<void*> OpenIpcHandle(std::string_view raw_handle, int64_t byte_size);
  // CloseIpcHandle unmaps what OpenIpcHandle returned; the owner's buffer lives on.
  virtual void CloseIpcHandle(void* /*data*/) {}
};

// HostTensorMemory is the process's host memory (device "cpu"). Never destroyed.
TensorMemory& HostTensorMemory();

// Planning works from what is on the host: shapes, dtypes, the request's own bytes. A plan that
// must also read an operand's elements calls RequireHostBytes first; for a view of device memory
// it returns FAILED_PRECONDITION marked so that NeedsHostBytes recognizes it, and the server then
// copies the call's operands to the host deliberately and plans again (server/core/prepared_op.cc).
absl::Status RequireHostBytes(std::string_view op, std::string_view arg, const TensorView& view);
bool NeedsHostBytes(const absl::Status& status);

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_TENSOR_MEMORY_H_
