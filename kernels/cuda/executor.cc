// The CUDA executor (executor.h): a stream pool, a pinned staging pool and batches packed into one
// copy each way.
#include "kernels/cuda/executor.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cuda/context_lost.h"

namespace tensorops {

bool cuda::ContextLost(cudaError_t error, cudaStream_t stream) {
  cudaGetLastError();
  if (error == cudaErrorMemoryAllocation || error == cudaErrorLaunchOutOfResources) return false;
  const cudaError_t probe = cudaStreamSynchronize(stream);
  cudaGetLastError();
  return probe != cudaSuccess;
}

namespace {

int64_t AlignUp(int64_t bytes) {
  return (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
}

std::string CudaError(std::string_view what, cudaError_t error) {
  return absl::StrFormat("cuda: %s: %s", what, cudaGetErrorString(error));
}

// PinnedPool hands out page-locked host buffers and keeps released ones for reuse, binned by
// power-of-two size, up to `cache_bytes` in all: cudaMallocHost costs milliseconds and would
// otherwise be paid on every batch.
class PinnedPool {
 public:
  explicit PinnedPool(int64_t cache_bytes) : cache_bytes_(cache_bytes) {}
  ~PinnedPool() {
    for (auto& [size, buffer] : free_) cudaFreeHost(buffer);
  }

  // Acquire returns a buffer of at least `bytes` and its capacity, or the allocation's error.
  absl::StatusOr<std::pair<void*, int64_t>> Acquire(int64_t bytes) {
    const int64_t capacity = static_cast<int64_t>(
        std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(bytes, 1 << 16))));
    {
      absl::MutexLock lock(&mu_);
      if (auto it = free_.find(capacity); it != free_.end()) {
        void* buffer = it->second;
        free_.erase(it);
        cached_ -= capacity;
        in_use_ += capacity;
        return std::make_pair(buffer, capacity);
      }
    }
    void* buffer = nullptr;
    if (const cudaError_t error = cudaMallocHost(&buffer, capacity); error != cudaSuccess) {
      cudaGetLastError();
      return absl::ResourceExhaustedError(CudaError("pinned staging memory", error));
    }
    absl::MutexLock lock(&mu_);
    in_use_ += capacity;
    return std::make_pair(buffer, capacity);
  }

  void Release(void* buffer, int64_t capacity) {
    {
      absl::MutexLock lock(&mu_);
      in_use_ -= capacity;
      if (cached_ + capacity <= cache_bytes_) {
        free_.emplace(capacity, buffer);
        cached_ += capacity;
        return;
      }
    }
    cudaFreeHost(buffer);
  }

  int64_t allocated() const {
    absl::MutexLock lock(&mu_);
    return in_use_ + cached_;
  }
  int64_t in_use() const {
    absl::MutexLock lock(&mu_);
    return in_use_;
  }

 private:
  const int64_t cache_bytes_;
  mutable absl::Mutex mu_;
  std::multimap<int64_t, void*> free_ ABSL_GUARDED_BY(mu_);
  int64_t cached_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
};

// BytesFrom is how many bytes of its allocation lie from `data` on: the driver's
// cuMemGetAddressRange, reached through the runtime so that the server needs no libcuda at link
// time (a CPU-only machine has none).
absl::StatusOr<int64_t> BytesFrom(const void* data) {
  using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static const GetAddressRange get_address_range = []() -> GetAddressRange {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &function, 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return reinterpret_cast<GetAddressRange>(function);
  }();
  if (get_address_range == nullptr) {
    return absl::FailedPreconditionError(
        "cuda: the driver does not export cuMemGetAddressRange, so the size of a shared buffer "
        "cannot be checked");
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  const auto address = reinterpret_cast<CUdeviceptr>(data);
  if (const CUresult result = get_address_range(&base, &size, address); result != CUDA_SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cuda: cuMemGetAddressRange of a shared buffer failed (error %d)",
                        static_cast<int>(result)));
  }
  return static_cast<int64_t>(base + size - address);
}

// ResidentMemory is the GPU's memory for stored tensors: plain cudaMalloc, not the batches' pool,
// since a stored tensor lives long and its size is bounded by --store_memory_bytes instead.
// Copies are synchronous (the legacy default stream, which waits for no other work of ours: the
// store's locks keep kernels off a tensor while its bytes are copied).
class ResidentMemory final : public TensorMemory {
 public:
  explicit ResidentMemory(int device) : device_(device) {}

  std::string device() const override { return absl::StrFormat("cuda:%d", device_); }
  bool host_accessible() const override { return false; }

  void* Allocate(int64_t bytes) override {
    void* data = nullptr;
    if (cudaSetDevice(device_) != cudaSuccess || cudaMalloc(&data, bytes) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return data;
  }
  void Free(void* data, int64_t /*bytes*/) override {
    cudaSetDevice(device_);
    cudaFree(data);
  }

  absl::Status CopyToHost(void* host, const void* data, int64_t bytes) const override {
    return Copy(host, data, bytes, cudaMemcpyDeviceToHost, "copying a stored tensor to the host");
  }
  absl::Status CopyFromHost(void* data, const void* host, int64_t bytes) const override {
    return Copy(data, host, bytes, cudaMemcpyHostToDevice, "copying a stored tensor's bytes in");
  }

  absl::StatusOr<void*> OpenIpcHandle(std::string_view raw_handle, int64_t byte_size) override {
    cudaIpcMemHandle_t handle;
    if (raw_handle.size() != sizeof(handle)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("a CUDA IPC handle is the %d bytes of a cudaIpcMemHandle_t, not %d",
                          sizeof(handle), raw_handle.size()));
    }
    std::memcpy(&handle, raw_handle.data(), sizeof(handle));
    void* data = nullptr;
    cudaError_t error = cudaSetDevice(device_);
    if (error == cudaSuccess) {
      // Lazy peer access: a buffer on another GPU of the host is reached over the peer link.
      error = cudaIpcOpenMemHandle(&data, handle, cudaIpcMemLazyEnablePeerAccess);
    }
    if (error != cudaSuccess) {
      cudaGetLastError();
      return absl::InvalidArgumentError(CudaError(
          absl::StrFormat("opening the IPC handle on cuda:%d (the process that made it must still "
                          "be running, and its buffer be on a GPU this one can reach)",
                          device_),
          error));
    }
    // Kernels that ran past the buffer would poison the whole context: the size is checked here,
    // once, against what the driver says the mapping holds.
    absl::StatusOr<int64_t> available = BytesFrom(data);
    if (available.ok() && *available >= byte_size) return data;
    cudaIpcCloseMemHandle(data);
    if (!available.ok()) return available.status();
    return absl::InvalidArgumentError(absl::StrFormat(
        "the buffer the IPC handle shares has %d bytes from where the handle points, fewer than "
        "the region's byte_size %d",
        *available, byte_size));
  }

  void CloseIpcHandle(void* data) override {
    cudaSetDevice(device_);
    if (cudaIpcCloseMemHandle(data) != cudaSuccess) cudaGetLastError();
  }

 private:
  absl::Status Copy(void* to, const void* from, int64_t bytes, cudaMemcpyKind kind,
                    std::string_view what) const {
    if (bytes == 0) return absl::OkStatus();
    cudaError_t error = cudaSetDevice(device_);
    if (error == cudaSuccess) error = cudaMemcpy(to, from, static_cast<size_t>(bytes), kind);
    if (error == cudaSuccess) return absl::OkStatus();
    cudaGetLastError();
    return absl::UnavailableError(CudaError(what, error));
  }

  const int device_;
};

// StageEvents are CUDA events recorded on a batch's stream between its stages (DeviceStageTimes);
// Elapsed reads the time between two once the stream has synchronized. An event that could not be
// created or recorded leaves the times it bounds unmeasured: timing never fails a batch.
class StageEvents {
 public:
  enum Mark { kStart, kCopiedIn, kKernelsDone, kCopiedOut, kMarks };

  StageEvents() {
    for (cudaEvent_t& event : events_) {
      if (cudaEventCreate(&event) != cudaSuccess) {
        cudaGetLastError();
        event = nullptr;
      }
    }
  }
  ~StageEvents() {
    for (cudaEvent_t event : events_) {
      if (event != nullptr) cudaEventDestroy(event);
    }
  }
  StageEvents(const StageEvents&) = delete;
  StageEvents& operator=(const StageEvents&) = delete;

  void Record(Mark mark, cudaStream_t stream) {
    recorded_[mark] =
        events_[mark] != nullptr && cudaEventRecord(events_[mark], stream) == cudaSuccess;
    if (!recorded_[mark]) cudaGetLastError();
  }
  // The time from `from` to `to`; zero when either was not recorded.
  absl::Duration Elapsed(Mark from, Mark to) const {
    float ms = 0;
    if (!recorded_[from] || !recorded_[to]) return absl::ZeroDuration();
    if (cudaEventElapsedTime(&ms, events_[from], events_[to]) != cudaSuccess) {
      cudaGetLastError();
      return absl::ZeroDuration();
    }
    return absl::Microseconds(static_cast<double>(ms) * 1000);
  }

 private:
  cudaEvent_t events_[kMarks] = {};
  bool recorded_[kMarks] = {};
};

class CudaExecutor final : public DeviceExecutor {
 public:
  CudaExecutor(const CudaExecutorOptions& options, std::vector<cudaStream_t> streams)
      : options_(options),
        pinned_(options.pinned_cache_bytes),
        resident_(options.device),
        free_streams_(std::move(streams)) {
    all_streams_ = free_streams_;
  }

  ~CudaExecutor() override {
    cudaSetDevice(options_.device);
    for (cudaStream_t stream : all_streams_) cudaStreamDestroy(stream);
  }

  std::vector<DeviceOutcome> RunBatch(absl::Span<const DeviceCall* const> calls,
                                      absl::Span<void* const> results) override;

  DeviceMemory memory() const override {
    return {.pinned_allocated = pinned_.allocated(),
            .pinned_in_use = pinned_.in_use(),
            .device_in_use = device_in_use_.load(std::memory_order_relaxed)};
  }

  std::string name() const override { return absl::StrFormat("cuda:%d", options_.device); }

  TensorMemory* resident_memory() override { return &resident_; }

 private:
  // Where a batch's memory lies, in bytes from the start of its device block. The staging buffer
  // mirrors [0, copy_back_end): inputs, then results and error flags (the one copy back);
  // workspaces live on the device only. Resident inputs and results have no place (offset -1):
  // they are in the store's device memory.
  struct Layout {
    std::vector<std::vector<int64_t>> inputs;
    std::vector<int64_t> results;
    int64_t inputs_end = 0;
    int64_t flags = 0;
    int64_t copy_back_end = 0;
    std::vector<int64_t> workspaces;
    int64_t device_bytes = 0;
  };
  // `workspace_bytes[i]`: call i's WorkspaceBytes() on this device (0 for a call that fails).
  static Layout PlanLayout(absl::Span<const DeviceCall* const> calls,
                           absl::Span<const int64_t> workspace_bytes);

  std::vector<DeviceOutcome> AllFailed(size_t count, const absl::Status& why) const {
    return std::vector<DeviceOutcome>(count, DeviceOutcome{.device_error = why});
  }

  cudaStream_t AcquireStream() {
    absl::MutexLock lock(
        &mu_, absl::Condition(
                  +[](std::vector<cudaStream_t>* free) { return !free->empty(); }, &free_streams_));
    cudaStream_t stream = free_streams_.back();
    free_streams_.pop_back();
    return stream;
  }
  void ReleaseStream(cudaStream_t stream) {
    absl::MutexLock lock(&mu_);
    free_streams_.push_back(stream);
  }

  // Disable records an error that poisoned the context: every later batch runs on the CPU.
  void Disable(const absl::Status& why) {
    absl::MutexLock lock(&mu_);
    if (disabled_.ok()) {
      disabled_ = absl::UnavailableError(absl::StrFormat(
          "%s is disabled after an unrecoverable error: %s", name(), why.message()));
    }
  }

  const CudaExecutorOptions options_;
  PinnedPool pinned_;
  ResidentMemory resident_;
  std::atomic<int64_t> device_in_use_{0};
  std::vector<cudaStream_t> all_streams_;

  mutable absl::Mutex mu_;
  std::vector<cudaStream_t> free_streams_ ABSL_GUARDED_BY(mu_);
  absl::Status disabled_ ABSL_GUARDED_BY(mu_);
};

CudaExecutor::Layout CudaExecutor::PlanLayout(absl::Span<const DeviceCall* const> calls,
                                              absl::Span<const int64_t> workspace_bytes) {
  Layout layout;
  int64_t at = 0;
  for (const DeviceCall* call : calls) {
    std::vector<int64_t>& offsets = layout.inputs.emplace_back();
    for (const InputSpan& span : call->inputs()) {
      offsets.push_back(span.resident ? -1 : at);
      if (!span.resident) at += AlignUp(span.bytes);
    }
  }
  layout.inputs_end = at;
  for (const DeviceCall* call : calls) {
    layout.results.push_back(call->resident_result() != nullptr ? -1 : at);
    if (call->resident_result() == nullptr) at += AlignUp(call->result_bytes());
  }
  layout.flags = at;
  at += AlignUp(static_cast<int64_t>(calls.size() * sizeof(int32_t)));
  layout.copy_back_end = at;
  for (const int64_t bytes : workspace_bytes) {
    layout.workspaces.push_back(at);
    at += AlignUp(bytes);
  }
  layout.device_bytes = at;
  return layout;
}

std::vector<DeviceOutcome> CudaExecutor::RunBatch(absl::Span<const DeviceCall* const> calls,
                                                  absl::Span<void* const> results) {
  if (calls.empty()) return {};
  {
    absl::MutexLock lock(&mu_);
    if (!disabled_.ok()) return AllFailed(calls.size(), disabled_);
  }
  // First of all: the device is per thread, and on a fresh worker thread every runtime call below
  // (the pinned allocation, CUB's size queries) would otherwise act on device 0.
  if (const cudaError_t error = cudaSetDevice(options_.device); error != cudaSuccess) {
    cudaGetLastError();
    return AllFailed(calls.size(), absl::UnavailableError(CudaError(name(), error)));
  }
  std::vector<DeviceOutcome> outcomes(calls.size());
  // Whose kernels were (or may have been) launched.
  std::vector<bool> launched(calls.size(), false);
  std::vector<int64_t> workspace_bytes(calls.size(), 0);
  for (size_t c = 0; c < calls.size(); ++c) {
    absl::StatusOr<int64_t> bytes = calls[c]->WorkspaceBytes();
    if (bytes.ok()) {
      workspace_bytes[c] = *bytes;
    } else {
      outcomes[c].device_error = std::move(bytes).status();
    }
  }
  const Layout layout = PlanLayout(calls, workspace_bytes);
  if (options_.memory_limit_bytes > 0) {
    const int64_t in_use = device_in_use_.fetch_add(layout.device_bytes) + layout.device_bytes;
    if (in_use > options_.memory_limit_bytes) {
      device_in_use_.fetch_sub(layout.device_bytes);
      return AllFailed(
          calls.size(),
          absl::ResourceExhaustedError(absl::StrFormat(
              "the batch needs %d bytes of device memory and %d are in use; "
              "--gpu_memory_limit=%d",
              layout.device_bytes, in_use - layout.device_bytes, options_.memory_limit_bytes)));
    }
  } else {
    device_in_use_.fetch_add(layout.device_bytes);
  }
  absl::StatusOr<std::pair<void*, int64_t>> staging = pinned_.Acquire(layout.copy_back_end);
  if (!staging.ok()) {
    device_in_use_.fetch_sub(layout.device_bytes);
    return AllFailed(calls.size(), staging.status());
  }
  char* host = static_cast<char*>(staging->first);

  const cudaStream_t stream = AcquireStream();
  DeviceStageTimes stages;
  StageEvents events;
  absl::Status batch_error;
  bool poisoned = false;
  void* block = nullptr;
  if (const cudaError_t alloc_error = cudaMallocAsync(&block, layout.device_bytes, stream);
      alloc_error != cudaSuccess) {
    cudaGetLastError();
    batch_error = absl::ResourceExhaustedError(CudaError("device memory", alloc_error));
  } else {
    char* device = static_cast<char*>(block);
    // Pack every input into the staging buffer, then one copy to the device.
    const absl::Time packing = absl::Now();
    for (size_t c = 0; c < calls.size(); ++c) {
      const std::vector<InputSpan>& spans = calls[c]->inputs();
      for (size_t s = 0; s < spans.size(); ++s) {
        if (spans[s].resident) continue;
        cpu::ParallelCopy(host + layout.inputs[c][s], spans[s].data, spans[s].bytes);
      }
    }
    stages.staging = absl::Now() - packing;
    events.Record(StageEvents::kStart, stream);
    cudaError_t error =
        cudaMemcpyAsync(device, host, layout.inputs_end, cudaMemcpyHostToDevice, stream);
    if (error == cudaSuccess) {
      error = cudaMemsetAsync(device + layout.flags, 0, calls.size() * sizeof(int32_t), stream);
    }
    events.Record(StageEvents::kCopiedIn, stream);
    if (error != cudaSuccess) {
      batch_error = absl::UnavailableError(CudaError("copying the batch to the device", error));
      poisoned = cuda::ContextLost(error, stream);
    } else {
      std::vector<void*> copies;
      for (size_t c = 0; c < calls.size(); ++c) {
        if (!outcomes[c].device_error.ok()) continue;
        copies.clear();
        const std::vector<InputSpan>& spans = calls[c]->inputs();
        for (size_t s = 0; s < spans.size(); ++s) {
          copies.push_back(spans[s].resident ? const_cast<void*>(spans[s].data)
                                             : device + layout.inputs[c][s]);
        }
        void* const resident_result = calls[c]->resident_result();
        const DeviceBuffers buffers{
            .inputs = copies,
            .result = resident_result != nullptr ? resident_result : device + layout.results[c],
            .workspace = device + layout.workspaces[c],
            .workspace_bytes = workspace_bytes[c],
            .error_flag = reinterpret_cast<int32_t*>(device + layout.flags) + c};
        outcomes[c].device_error = calls[c]->Enqueue(buffers, stream);
        launched[c] = true;
        // A launch error stays in the thread's last error until read: a call that failed without
        // reading it would have the next call of the batch report it as its own.
        if (!outcomes[c].device_error.ok()) cudaGetLastError();
      }
      events.Record(StageEvents::kKernelsDone, stream);
      error =
          cudaMemcpyAsync(host + layout.inputs_end, device + layout.inputs_end,
                          layout.copy_back_end - layout.inputs_end, cudaMemcpyDeviceToHost, stream);
      events.Record(StageEvents::kCopiedOut, stream);
      if (error == cudaSuccess) error = cudaStreamSynchronize(stream);
      if (error == cudaSuccess) {
        stages.copy_in = events.Elapsed(StageEvents::kStart, StageEvents::kCopiedIn);
        stages.kernels = events.Elapsed(StageEvents::kCopiedIn, StageEvents::kKernelsDone);
        stages.copy_out = events.Elapsed(StageEvents::kKernelsDone, StageEvents::kCopiedOut);
        stages.measured = true;
      }
      if (error != cudaSuccess) {
        batch_error = absl::UnavailableError(CudaError("running the batch", error));
        poisoned = cuda::ContextLost(error, stream);
      }
    }
    cudaFreeAsync(block, stream);
  }
  ReleaseStream(stream);
  if (poisoned) Disable(batch_error);
  device_in_use_.fetch_sub(layout.device_bytes);

  const auto* flags = reinterpret_cast<const int32_t*>(host + layout.flags);
  for (size_t c = 0; c < calls.size(); ++c) {
    DeviceOutcome& outcome = outcomes[c];
    outcome.stages = stages;
    if (!batch_error.ok()) outcome.device_error = batch_error;
    if (!outcome.device_error.ok() || flags[c] != 0) {
      outcome.resident_result_touched = launched[c] && calls[c]->resident_result() != nullptr;
    }
    if (!outcome.device_error.ok()) continue;
    if (flags[c] != 0) {
      outcome.index_error = true;
      continue;
    }
    if (calls[c]->resident_result() != nullptr) continue;
    cpu::ParallelCopy(results[c], host + layout.results[c], calls[c]->result_bytes());
  }
  pinned_.Release(staging->first, staging->second);
  return outcomes;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceExecutor>> CreateCudaExecutor(
    const CudaExecutorOptions& options) {
  if (options.streams < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("streams = %d is out of range (expected >= 1)", options.streams));
  }
  if (options.memory_limit_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("gpu_memory_limit = %d is negative (expected >= 0; 0 = no limit)",
                        options.memory_limit_bytes));
  }
  if (cudaError_t error = cudaSetDevice(options.device); error != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        CudaError(absl::StrFormat("selecting device %d", options.device), error));
  }
  // Keep freed device memory in the runtime's pool rather than returning it to the driver at
  // every synchronization: that is what makes cudaMallocAsync a caching allocator.
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, options.device) == cudaSuccess) {
    uint64_t keep = UINT64_MAX;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  std::vector<cudaStream_t> streams;
  for (int i = 0; i < options.streams; ++i) {
    cudaStream_t stream;
    if (cudaError_t error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        error != cudaSuccess) {
      cudaGetLastError();
      for (cudaStream_t created : streams) cudaStreamDestroy(created);
      return absl::FailedPreconditionError(CudaError("creating streams", error));
    }
    streams.push_back(stream);
  }
  return std::make_unique<CudaExecutor>(options, std::move(streams));
}

}  // namespace tensorops
