#include "kernels/tensor_memory.h"

#include <cstring>
#include <new>

namespace tensorops {
namespace {

// Host bytes are aligned as device buffers are (kDeviceAlignment), so that a stored tensor's
// view is aligned for any vectorized kernel wherever it lives.
constexpr std::align_val_t kHostAlignment{256};

class HostMemory final : public TensorMemory {
 public:
  std::string device() const override { return "cpu"; }
  bool host_accessible() const override { return true; }

  void* Allocate(int64_t bytes) override {
    return ::operator new(static_cast<size_t>(bytes), kHostAlignment, std::nothrow);
  }
  void Free(void* data) override { ::operator delete(data, kHostAlignment); }

  absl::Status CopyToHost(void* host, const void* data, int64_t bytes) const override {
    if (bytes > 0) std::memcpy(host, data, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  absl::Status CopyFromHost(void* data, const void* host, int64_t bytes) const override {
    if (bytes > 0) std::memcpy(data, host, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
};

}  // namespace

TensorMemory& HostTensorMemory() {
  static HostMemory* const memory = new HostMemory();
  return *memory;
}

}  // namespace tensorops
