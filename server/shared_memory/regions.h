// SharedMemoryRegions: the shared-memory regions clients on the server's host registered
// (RegisterSharedMemory, Triton's SystemSharedMemoryRegister and CudaSharedMemoryRegister), by
// namespace and name, mapped into the server so that a call reads its arguments and writes its
// result there instead of carrying them in messages (proto/tensorops/v1/shared_memory.proto).
//
// Two kinds: system shared memory (a POSIX shared-memory object, mapped into the server's address
// space) and CUDA memory (a client's GPU buffer, opened through CUDA IPC in the device memory of
// the server's GPU: the kernels read and write it in place; the CPU reaches it only through
// copies, device_memory()).
//
//   SharedMemoryRegions regions({.max_regions = 64, .max_bytes = 1 << 30});
//   TENSOROPS_RETURN_IF_ERROR(regions.Register(ns, region));        // maps it
//   TENSOROPS_ASSIGN_OR_RETURN(std::shared_ptr<const MappedRegion> mapped,
//                              regions.Find(ns, "input", "gather: input"));
//   TENSOROPS_ASSIGN_OR_RETURN(char* bytes, mapped->Slice(ref.offset(), ref.byte_size(), what));
//   ... read or write bytes ...
//   TENSOROPS_RETURN_IF_ERROR(mapped->CheckIntact(what));           // before answering
//
// A call holds the regions it uses (shared_ptr) until it is done: unregistering one takes its
// name away at once and unmaps it when the last call using it lets go, so no call ever touches
// memory unmapped under it. A region the client shrank or removed after registering fails the
// calls that use it (CheckIntact), never the server (sigbus_guard.h).
#ifndef TENSOROPS_SERVER_SHARED_MEMORY_REGIONS_H_
#define TENSOROPS_SERVER_SHARED_MEMORY_REGIONS_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/tensor_memory.h"
#include "server/shared_memory/sigbus_guard.h"
#include "tensorops/v1/shared_memory.pb.h"
#include "tensorops/v1/tensor.pb.h"

namespace tensorops {

// The flags whose limits refusals name.
inline constexpr char kMaxSharedMemoryBytesFlag[] = "--max_shared_memory_bytes";
inline constexpr char kMaxSharedMemoryRegionsFlag[] = "--max_shared_memory_regions";

// MappedRegion is one registered region, mapped. Immutable but for what it detects; thread-safe.
class MappedRegion {
 public:
  // MapSystem opens the POSIX shared-memory object `system.key()` and maps its bytes
  // [offset, offset + byte_size): NOT_FOUND when there is no such object, INVALID_ARGUMENT when
  // the range is empty, negative or past the object's end, PERMISSION_DENIED when the server may
  // not open it.
  static absl::StatusOr<std::unique_ptr<MappedRegion>> MapSystem(
      std::string_view name, const v1::SystemSharedMemory& system);
  // MapCuda opens the client's GPU buffer `cuda` in `memory` (the server's GPU memory,
  // TensorMemory::OpenIpcHandle): INVALID_ARGUMENT for a bad size or a handle that cannot be
  // opened, naming the region and the reason.
  static absl::StatusOr<std::unique_ptr<MappedRegion>> MapCuda(std::string_view name,
                                                               const v1::CudaSharedMemory& cuda,
                                                               TensorMemory* memory);
  ~MappedRegion();
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;

  // The region as registered.
  const v1::SharedMemoryRegion& description() const { return description_; }
  const std::string& name() const { return description_.name(); }
  int64_t byte_size() const { return byte_size_; }
  // The device memory a CUDA region is in (its bytes are device memory, which the CPU must not
  // touch: copy through it); null for system shared memory, which the CPU reads directly.
  TensorMemory* device_memory() const { return device_memory_; }
  bool on_device() const { return device_memory_ != nullptr; }

  // Slice is the region's bytes [offset, offset + bytes) for `what` (errors start with it:
  // "gather: input"): INVALID_ARGUMENT for a range outside the region, and CheckIntact's errors.
  absl::StatusOr<char*> Slice(int64_t offset, int64_t bytes, std::string_view what) const;

  // CheckIntact is FAILED_PRECONDITION, naming `what`, the region and its key, when the client
  // shrank the object below the region or removed it (shm_unlink) since it was registered, or an
  // access found it shrunk: what a call read or wrote there may not be what the client sees.
  // (A CUDA region cannot shrink: the opened buffer lives until it is closed.)
  absl::Status CheckIntact(std::string_view what) const;

  // SameObject: both are system regions of one shared-memory object (one file, whatever the
  // keys and the ranges registered).
  bool SameObject(const MappedRegion& other) const;
  // Overlaps: bytes [offset, offset + bytes) of this region and [other_offset, other_offset +
  // other_bytes) of `other` are some of the same memory: of one shared-memory object (two
  // regions, or two names, may map one), or of one device buffer.
  bool Overlaps(int64_t offset, int64_t bytes, const MappedRegion& other, int64_t other_offset,
                int64_t other_bytes) const;

 private:
  // The shared-memory object a system region maps, as the file system knows it.
  struct ObjectId {
    dev_t device = 0;
    ino_t inode = 0;
  };

  MappedRegion(v1::SharedMemoryRegion description, int64_t byte_size, int fd, ObjectId object,
               void* mapping, size_t mapped_bytes, int64_t data_offset,
               std::optional<SigbusGuard> guard, TensorMemory* device_memory);

  const v1::SharedMemoryRegion description_;
  const int64_t byte_size_;
  // The shared-memory object (system); -1 for CUDA.
  const int fd_;
  const ObjectId object_;
  void* const mapping_;
  const size_t mapped_bytes_;
  // Where the region starts in the mapping (the registered offset's part below a page).
  const int64_t data_offset_;
  // Guards a system region's mapping (none for CUDA).
  std::optional<SigbusGuard> guard_;
  // Where a CUDA region's handle is open; null for system.
  TensorMemory* const device_memory_;
};

// RegionKind selects regions by their memory: Triton's RPCs each see one kind.
enum class RegionKind { kAny, kSystem, kCuda };

class SharedMemoryRegions {
 public:
  struct Limits {
    // Regions one namespace may have registered at once (--max_shared_memory_regions).
    int64_t max_regions = 64;
    // Bytes mapped for all regions of all namespaces together (--max_shared_memory_bytes),
    // counting an unregistered region until the last call using it is done.
    int64_t max_bytes = int64_t{64} << 30;
  };

  // `device_memory`: where CUDA regions are opened, the memory of the GPU calls run on (the
  // executor's resident memory); null on a server whose calls run on no GPU, which refuses them.
  explicit SharedMemoryRegions(Limits limits, TensorMemory* device_memory = nullptr);
  ~SharedMemoryRegions();

  // Register maps `region` into namespace `ns`: INVALID_ARGUMENT for a bad name or a region with
  // neither memory, ALREADY_EXISTS for a name the namespace uses, RESOURCE_EXHAUSTED (naming the
  // flag) past a limit, FAILED_PRECONDITION for CUDA memory on a server without device memory,
  // PERMISSION_DENIED for a shared-memory object a region of another namespace maps (another
  // token's memory: a name is per namespace, an object is not), and MapSystem's and MapCuda's
  // errors.
  absl::Status Register(std::string_view ns, const v1::SharedMemoryRegion& region);
  // Unregister forgets `name` (NOT_FOUND when `ns` has no such region of `kind`), or every region
  // of `ns` of `kind` when `name` is empty; returns the names forgotten, sorted. A region a call
  // is using is unmapped when that call is done.
  absl::StatusOr<std::vector<std::string>> Unregister(std::string_view ns, std::string_view name,
                                                      RegionKind kind = RegionKind::kAny);
  // List describes `name` (NOT_FOUND when not registered), or every region of `ns` when `name`
  // is empty, sorted by name.
  absl::StatusOr<std::vector<v1::SharedMemoryRegion>> List(std::string_view ns,
                                                           std::string_view name) const;
  // Find is the region `name` of `ns`, for `what`'s use (the NOT_FOUND error starts with it).
  absl::StatusOr<std::shared_ptr<const MappedRegion>> Find(std::string_view ns,
                                                           std::string_view name,
                                                           std::string_view what) const;

  // Bytes mapped now, and regions registered, over every namespace.
  int64_t mapped_bytes() const { return mapped_bytes_->load(std::memory_order_relaxed); }
  int64_t regions() const;
  const Limits& limits() const { return limits_; }
  // serves_cuda: this server can open CUDA regions (its calls run on a GPU).
  bool serves_cuda() const { return device_memory_ != nullptr; }

 private:
  // CheckOwnObject: no namespace but `ns` has a region of `mapped`'s object (PERMISSION_DENIED).
  absl::Status CheckOwnObject(std::string_view ns, const MappedRegion& mapped) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Limits limits_;
  TensorMemory* const device_memory_;
  // Shared with every region's deleter, which gives its bytes back when the last call using it
  // is done, possibly after the registry is gone.
  const std::shared_ptr<std::atomic<int64_t>> mapped_bytes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, absl::btree_map<std::string, std::shared_ptr<MappedRegion>>>
      by_namespace_ ABSL_GUARDED_BY(mu_);
};

// RegionBytes are bytes of a region a call holds.
struct RegionBytes {
  std::shared_ptr<const MappedRegion> region;
  char* data = nullptr;
};

// CopyFromRegion copies `bytes` of `source` (host or device memory, as its region is) to `host`;
// CopyIntoRegion copies `bytes` from `host` into `target`. Errors are the device's.
absl::Status CopyFromRegion(const RegionBytes& source, void* host, int64_t bytes);
absl::Status CopyIntoRegion(const RegionBytes& target, const void* host, int64_t bytes);

// FindBytes finds the bytes `ref` names in `ns` for `what` (errors start with it: "put_tensor:
// header.shared_memory"), which must hold `bytes` bytes: exactly, or at least when `exactly` is
// false (INVALID_ARGUMENT naming both otherwise), and the errors of Find and Slice;
// FAILED_PRECONDITION when `regions` is null.
absl::StatusOr<RegionBytes> FindBytes(const SharedMemoryRegions* regions, std::string_view ns,
                                      const v1::SharedMemoryRef& ref, int64_t bytes, bool exactly,
                                      std::string_view what);
// FindRegion is FindBytes' first half: the region `ref` names, held (its errors, with `what`).
absl::StatusOr<std::shared_ptr<const MappedRegion>> FindRegion(const SharedMemoryRegions* regions,
                                                               std::string_view ns,
                                                               const v1::SharedMemoryRef& ref,
                                                               std::string_view what);
// SliceBytes is its second: `ref`'s bytes in `region`, found before, checked as FindBytes says.
absl::StatusOr<RegionBytes> SliceBytes(std::shared_ptr<const MappedRegion> region,
                                       const v1::SharedMemoryRef& ref, int64_t bytes, bool exactly,
                                       std::string_view what);

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_SHARED_MEMORY_REGIONS_H_
