#include "kernels/tensor_memory.h"

#include <cstdint>
#include <cstring>
#include <new>
#include <string_view>

#include "absl/strings/cord.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace tensorops {
namespace {

// The payload that marks RequireHostBytes's status.
constexpr absl::string_view kNeedsHostBytesUrl = "type.googleapis.com/tensorops.NeedsHostBytes";

// Host bytes are aligned as device buffers are (kDeviceAlignment), so that a stored tensor's
// view is aligned for any vectorized kernel wherever it lives.
constexpr std::align_val_t kHostAlignment{256};

// kHugePageBytes: tensors of at least this size get pages of this size where the kernel has them
// (Linux's transparent huge pages, asked for with MADV_HUGEPAGE: the usual setting, "madvise",
// gives them to no one else). A table's random rows then miss the TLB 512 times less often, and
// an upload's fresh memory faults in 512 times fewer pieces.
constexpr int64_t kHugePageBytes = int64_t{2} << 20;

// HugePagesBytes is `bytes` rounded up to whole huge pages.
int64_t HugePagesBytes(int64_t bytes) {
  return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

class HostMemory final : public TensorMemory {
 public:
  std::string device() const override { return "cpu"; }
  bool host_accessible() const override { return true; }

  void* Allocate(int64_t bytes) override {
#if defined(__linux__)
    if (bytes >= kHugePageBytes) {
      // mmap'd directly, so that Free gives it back whole, with one huge page to spare: the
      // kernel maps only whole aligned huge pages, so the bytes start at the first boundary, and
      // the spare before and after goes back at once.
      const size_t used = static_cast<size_t>(HugePagesBytes(bytes));
      const size_t mapped = used + kHugePageBytes;
      void* map = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (map == MAP_FAILED) return nullptr;
      char* const begin = static_cast<char*>(map);
      char* const aligned =
          begin +
          (kHugePageBytes - reinterpret_cast<uintptr_t>(begin) % kHugePageBytes) % kHugePageBytes;
      if (aligned > begin) munmap(begin, static_cast<size_t>(aligned - begin));
      char* const end = begin + mapped;
      if (aligned + used < end) munmap(aligned + used, static_cast<size_t>(end - (aligned + used)));
      madvise(aligned, used, MADV_HUGEPAGE);  // a hint: where none are to be had, small pages serve
      return aligned;
    }
#endif
    return ::operator new(static_cast<size_t>(bytes), kHostAlignment, std::nothrow);
  }
  int64_t FootprintBytes(int64_t bytes) const override {
#if defined(__linux__)
    if (bytes >= kHugePageBytes) return HugePagesBytes(bytes);
#endif
    return bytes;
  }
  void Free(void* data, int64_t bytes) override {
#if defined(__linux__)
    if (bytes >= kHugePageBytes) {
      munmap(data, static_cast<size_t>(HugePagesBytes(bytes)));
      return;
    }
#endif
    ::operator delete(data, kHostAlignment);
  }

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

absl::StatusOr<void*> TensorMemory::OpenIpcHandle(std::string_view /*raw_handle*/,
                                                  int64_t /*byte_size*/) {
  return absl::UnimplementedError(
      absl::StrFormat("%s memory cannot open CUDA IPC handles: only a GPU's can", device()));
}

TensorMemory& HostTensorMemory() {
  static HostMemory* const memory = new HostMemory();
  return *memory;
}

absl::Status RequireHostBytes(std::string_view op, std::string_view arg, const TensorView& view) {
  if (!view.on_device()) return absl::OkStatus();
  absl::Status status = absl::FailedPreconditionError(absl::StrFormat(
      "%s: %s is in device memory, and planning this call reads its elements on the host", op,
      arg));
  status.SetPayload(kNeedsHostBytesUrl, absl::Cord(absl::string_view(arg.data(), arg.size())));
  return status;
}

bool NeedsHostBytes(const absl::Status& status) {
  return status.GetPayload(kNeedsHostBytesUrl).has_value();
}

}  // namespace tensorops
