// A GPU stand-in for tests of stored tensors in device memory (--store_device=cuda) on machines
// without one: FakeDeviceMemory, device memory that the CPU cannot touch, and
// StagingFakeExecutor, an executor that checks what a real one would copy and then fails every
// call as a device error, so that the server runs it on the CPU (the fallback, whose host copies
// of device operands are what these tests exercise).
//
//   FakeDeviceMemory memory;
//   StagingFakeExecutor executor(&memory);
//   options.gpu.executor_for_testing = &executor;
//   options.store.device = DeviceChoice::kCuda;
#ifndef TENSOROPS_TESTS_FAKE_DEVICE_H_
#define TENSOROPS_TESTS_FAKE_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kernels/cuda/executor.h"
#include "kernels/device_call.h"
#include "kernels/tensor_memory.h"

namespace tensorops::testing {

// FakeDeviceMemory hands out host allocations shifted by kShift: addresses no process maps (on
// x86-64 and AArch64 they are not even canonical), so a CPU read or write of "device" memory
// crashes the test instead of passing unnoticed. Its copies shift back.
class FakeDeviceMemory final : public TensorMemory {
 public:
  static constexpr uintptr_t kShift = uintptr_t{1} << 62;

  std::string device() const override { return "fakegpu:0"; }
  bool host_accessible() const override { return false; }

  void* Allocate(int64_t bytes) override {
    void* host = ::operator new (static_cast<size_t>(bytes), std::align_val_t{256}, std::nothrow);
    if (host == nullptr) return nullptr;
    void* device = Shifted(host);
    absl::MutexLock lock(&mu_);
    sizes_[device] = bytes;
    return device;
  }
  void Free(void* data, int64_t /*bytes*/) override {
    {
      absl::MutexLock lock(&mu_);
      sizes_.erase(data);
    }
    ::operator delete (Host(data), std::align_val_t{256});
  }

  absl::Status CopyToHost(void* host, const void* data, int64_t bytes) const override {
    if (bytes == 0) return absl::OkStatus();
    if (!Contains(data, bytes)) return absl::InternalError("fake device: not device memory");
    std::memcpy(host, Host(data), static_cast<size_t>(bytes));
    copied_out_ += bytes;
    return absl::OkStatus();
  }
  absl::Status CopyFromHost(void* data, const void* host, int64_t bytes) const override {
    if (bytes == 0) return absl::OkStatus();
    if (!Contains(data, bytes)) return absl::InternalError("fake device: not device memory");
    std::memcpy(Host(data), host, static_cast<size_t>(bytes));
    copied_in_ += bytes;
    return absl::OkStatus();
  }

  // Contains: [data, data + bytes) lies inside one allocation.
  bool Contains(const void* data, int64_t bytes) const {
    const auto address = reinterpret_cast<uintptr_t>(data);
    absl::MutexLock lock(&mu_);
    for (const auto& [begin, size] : sizes_) {
      const auto start = reinterpret_cast<uintptr_t>(begin);
      if (address >= start && address + static_cast<uintptr_t>(bytes) <= start + size) return true;
    }
    return false;
  }

  // IpcHandle is what a client's cudaIpcGetMemHandle would give for `bytes` of this memory at
  // `data`, as far as OpenIpcHandle can tell: 64 bytes naming the address and the size.
  static std::string IpcHandle(const void* data, int64_t bytes) {
    std::string handle(64, '\0');
    std::memcpy(handle.data(), kIpcMagic, sizeof(kIpcMagic));
    const auto address = reinterpret_cast<uintptr_t>(data);
    std::memcpy(handle.data() + 8, &address, sizeof(address));
    std::memcpy(handle.data() + 16, &bytes, sizeof(bytes));
    return handle;
  }
  // OpenIpcHandle opens what IpcHandle made, if its bytes are still allocated here.
  absl::StatusOr<void*> OpenIpcHandle(std::string_view raw_handle, int64_t byte_size) override {
    if (raw_handle.size() != 64 ||
        std::memcmp(raw_handle.data(), kIpcMagic, sizeof(kIpcMagic)) != 0) {
      return absl::InvalidArgumentError("fake device: not an IPC handle of this device");
    }
    uintptr_t address = 0;
    int64_t bytes = 0;
    std::memcpy(&address, raw_handle.data() + 8, sizeof(address));
    std::memcpy(&bytes, raw_handle.data() + 16, sizeof(bytes));
    void* data = reinterpret_cast<void*>(address);
    if (!Contains(data, bytes)) {
      return absl::InvalidArgumentError("fake device: the handle's buffer was freed");
    }
    if (bytes < byte_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "fake device: the buffer has %d bytes, fewer than byte_size %d", bytes, byte_size));
    }
    ++ipc_open_;
    return data;
  }
  void CloseIpcHandle(void* /*data*/) override { --ipc_open_; }
  // Handles open now.
  int64_t ipc_open() const { return ipc_open_; }

  // Bytes copied out of and into the memory so far.
  int64_t copied_out() const { return copied_out_; }
  int64_t copied_in() const { return copied_in_; }

 private:
  static void* Shifted(void* host) {
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(host) + kShift);
  }
  static void* Host(const void* device) {
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(device) - kShift);
  }

  static constexpr char kIpcMagic[8] = {'f', 'a', 'k', 'e', 'i', 'p', 'c', '\0'};

  mutable absl::Mutex mu_;
  absl::flat_hash_map<const void*, int64_t> sizes_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> ipc_open_{0};
  mutable std::atomic<int64_t> copied_out_{0};
  mutable std::atomic<int64_t> copied_in_{0};
};

// StagingFakeExecutor does what the CUDA executor does before its first launch: it copies every
// input that is not resident (which would crash on a device pointer wrongly staged) and checks
// that every resident input and result is in its device memory. Then it fails each call as a
// device error: it has no kernels (with made-up stage times). What it saw is kept per call.
class StagingFakeExecutor final : public DeviceExecutor {
 public:
  // What the executor saw of one call.
  struct Seen {
    int64_t staged_bytes = 0;    // host inputs, copied to the "device"
    int64_t resident_bytes = 0;  // inputs read where they are
    bool resident_result = false;
    bool all_resident_in_memory = true;  // every resident input and result is device memory
  };

  explicit StagingFakeExecutor(FakeDeviceMemory* memory) : memory_(memory) {}

  // From now on, report each call with a resident result as failed after its kernels began
  // writing it (DeviceOutcome::resident_result_touched).
  void TouchResidentResults() { touch_resident_results_ = true; }

  std::vector<DeviceOutcome> RunBatch(absl::Span<const DeviceCall* const> calls,
                                      absl::Span<void* const> /*results*/) override {
    std::vector<DeviceOutcome> outcomes(calls.size());
    for (size_t c = 0; c < calls.size(); ++c) {
      Seen seen;
      for (const InputSpan& span : calls[c]->inputs()) {
        if (span.resident) {
          seen.resident_bytes += span.bytes;
          seen.all_resident_in_memory &= memory_->Contains(span.data, span.bytes);
        } else {
          std::vector<char> staged(static_cast<size_t>(span.bytes));
          std::memcpy(staged.data(), span.data, staged.size());
          seen.staged_bytes += span.bytes;
        }
      }
      if (void* result = calls[c]->resident_result(); result != nullptr) {
        seen.resident_result = true;
        seen.all_resident_in_memory &= memory_->Contains(result, calls[c]->result_bytes());
      }
      {
        absl::MutexLock lock(&mu_);
        seen_.push_back(seen);
      }
      outcomes[c].device_error = absl::UnavailableError("fake device: it has no kernels");
      // Stage times as a real executor reports them: staging the bytes it copied.
      outcomes[c].stages = {.staging = absl::Nanoseconds(seen.staged_bytes),
                            .copy_in = absl::Microseconds(2),
                            .kernels = absl::Microseconds(3),
                            .copy_out = absl::Microseconds(1),
                            .measured = true};
      outcomes[c].resident_result_touched = seen.resident_result && touch_resident_results_;
    }
    return outcomes;
  }

  DeviceMemory memory() const override { return {}; }
  std::string name() const override { return "fakegpu:0"; }
  TensorMemory* resident_memory() override { return memory_; }

  // The calls seen so far, in order; TakeSeen also forgets them.
  std::vector<Seen> TakeSeen() {
    absl::MutexLock lock(&mu_);
    std::vector<Seen> seen;
    seen.swap(seen_);
    return seen;
  }

 private:
  FakeDeviceMemory* const memory_;
  std::atomic<bool> touch_resident_results_{false};
  absl::Mutex mu_;
  std::vector<Seen> seen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensorops::testing

#endif  // TENSOROPS_TESTS_FAKE_DEVICE_H_
