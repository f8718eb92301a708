// DeviceExecutor: runs batches of DeviceCalls on a GPU (DESIGN.md, "Data flow", step 5).
//
//   absl::StatusOr<std::unique_ptr<DeviceExecutor>> gpu = CreateCudaExecutor({.streams = 4});
//   std::vector<DeviceOutcome> outcomes = (*gpu)->RunBatch(calls, result_pointers);
//   // outcomes[i].ok(): result i is in place; else run call i on the CPU.
//
// One batch = one stream from a pool of `streams`: the inputs of every call packed into one pinned
// staging buffer (from a reusable pool), one host-to-device copy, every call's kernels, one
// device-to-host copy of the results and the error flags, then the results copied into the
// callers' buffers. Device memory comes from the CUDA runtime's stream-ordered pool
// (cudaMallocAsync), which keeps freed memory cached for the next batch, bounded in use by
// `memory_limit_bytes`. The calling thread (a scheduler worker, never a gRPC thread) waits for
// its batch; other workers drive other streams meanwhile.
//
// Device trouble is never fatal: a batch that cannot get memory, fails a launch or a copy returns
// device errors for its calls, which the caller re-runs on the CPU. An error that poisons the
// CUDA context (a sticky one, e.g. an illegal address: the runtime still reports it on the next
// call) disables the executor: every later call reports a device error and runs on the CPU. An
// error that only failed its own call does not.
#ifndef TENSOROPS_KERNELS_CUDA_EXECUTOR_H_
#define TENSOROPS_KERNELS_CUDA_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kernels/device_call.h"
#include "kernels/tensor_memory.h"

namespace tensorops {

// DeviceStageTimes is where one device batch's time went, for the server's stage metrics: packing
// its inline inputs into pinned staging memory (host time), then, timed by CUDA events on its
// stream, the copy to the device, the kernels, and the copy back of the results and error flags.
// A stage the batch did not reach stays zero.
struct DeviceStageTimes {
  absl::Duration staging;
  absl::Duration copy_in;
  absl::Duration kernels;
  absl::Duration copy_out;
  // Whether the times were measured (an executor without timing leaves them all out).
  bool measured = false;
};

// DeviceOutcome is how one call of a batch ended on the device.
struct DeviceOutcome {
  // Not OK when the device failed the call (no memory, failed launch or copy): run it on the CPU
  // and count a fallback.
  absl::Status device_error;
  // A kernel met an out-of-range index (or a too-small source): run it on the CPU, whose kernel
  // returns the INVALID_ARGUMENT naming it. Not a fallback: the CPU would fail the same way.
  bool index_error = false;
  // The call failed after its kernels were launched, and its result is resident (a stored tensor
  // updated in place or stored by the call): part of it may have been written. Running the call
  // again would apply an update twice, so the call must fail instead.
  bool resident_result_touched = false;
  // The batch's stage times (the same in every outcome of one batch).
  DeviceStageTimes stages;

  bool ok() const { return device_error.ok() && !index_error; }
};

// DeviceMemory is what an executor holds, in bytes.
struct DeviceMemory {
  // Pinned host staging memory: allocated (in use or cached for reuse), and in use by batches.
  int64_t pinned_allocated = 0;
  int64_t pinned_in_use = 0;
  // Device memory in use by batches (the pool may cache more).
  int64_t device_in_use = 0;
};

class DeviceExecutor {
 public:
  virtual ~DeviceExecutor() = default;

  // RunBatch runs `calls` as one batch; call i's result goes to `results[i]` (host memory of
  // calls[i]->result_bytes()), or stays in its resident_result() (results[i] unused). Returns one
  // outcome per call. Thread-safe. A call with a resident result that fails (either way) may have
  // written part of it.
  virtual std::vector<DeviceOutcome> RunBatch(absl::Span<const DeviceCall* const> calls,
                                              absl::Span<void* const> results) = 0;

  virtual DeviceMemory memory() const = 0;
  // The device's name for logs and metrics: "cuda:0".
  virtual std::string name() const = 0;
  // The device memory stored tensors live in with --store_device=cuda: a DeviceCall's resident
  // inputs and results are in it. Lives as long as the executor. Null when it has none.
  virtual TensorMemory* resident_memory() { return nullptr; }
};

struct CudaExecutorOptions {
  // The CUDA device ordinal.
  int device = 0;
  // Streams in the pool (batches on the GPU at once): >= 1.
  int streams = 4;
  // Most device memory batches may hold at once: >= 0, 0 = no limit of ours. A batch that would
  // exceed it runs on the CPU.
  int64_t memory_limit_bytes = 0;
  // Most pinned staging memory kept for reuse when no batch uses it.
  int64_t pinned_cache_bytes = int64_t{512} << 20;
};

// CreateCudaExecutor sets up the device, its streams and pools. FAILED_PRECONDITION when the
// build has no CUDA or the device cannot be used (the message says why); INVALID_ARGUMENT for
// options out of range.
absl::StatusOr<std::unique_ptr<DeviceExecutor>> CreateCudaExecutor(
    const CudaExecutorOptions& options);

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_CUDA_EXECUTOR_H_
