#include "server/shared_memory/regions.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "kernels/status_macros.h"
#include "server/store/tensor_store.h"

namespace tensorops {
namespace {

std::string Quoted(std::string_view text) {
  return absl::StrFormat("\"%s\"", absl::CHexEscape(absl::string_view(text.data(), text.size())));
}

// Described is how errors name a region: `region "r" (key "/k")`.
std::string Described(const v1::SharedMemoryRegion& region) {
  if (region.has_system()) {
    return absl::StrFormat("shared-memory region %s (key %s)", Quoted(region.name()),
                           Quoted(region.system().key()));
  }
  if (region.has_cuda()) {
    return absl::StrFormat("CUDA shared-memory region %s (device %d)", Quoted(region.name()),
                           region.cuda().device_id());
  }
  return absl::StrFormat("shared-memory region %s", Quoted(region.name()));
}

// Key is `text` as Abseil's containers look it up (Debian's Abseil has a string_view of its own).
absl::string_view Key(std::string_view text) { return absl::string_view(text.data(), text.size()); }

int64_t PageSize() {
  static const int64_t page = sysconf(_SC_PAGESIZE);
  return page;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MappedRegion>> MappedRegion::MapSystem(
    std::string_view name, const v1::SystemSharedMemory& system) {
  const std::string& key = system.key();
  if (key.empty() || key.size() > NAME_MAX || key.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "region %s: key %s is not a shared-memory object's name (1..%d bytes, as shm_open "
        "takes it: \"/name\")",
        Quoted(name), Quoted(key), NAME_MAX));
  }
  if (system.offset() < 0 || system.byte_size() <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "region %s: offset %d and byte_size %d do not make a region (offset >= 0, byte_size "
        ">= 1)",
        Quoted(name), system.offset(), system.byte_size()));
  }
  const int fd = shm_open(key.c_str(), O_RDWR, 0);
  if (fd < 0) {
    const int error = errno;
    const std::string message =
        absl::StrFormat("region %s: cannot open shared-memory object %s: %s", Quoted(name),
                        Quoted(key), std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    if (error == EACCES || error == EPERM) return absl::PermissionDeniedError(message);
    // The server's own limits on open files, not the client's mistake.
    if (error == EMFILE || error == ENFILE) return absl::ResourceExhaustedError(message);
    return absl::InvalidArgumentError(message);
  }
  struct stat status = {};
  int64_t end = 0;
  if (fstat(fd, &status) != 0 ||
      __builtin_add_overflow(system.offset(), system.byte_size(), &end) || end > status.st_size) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrFormat(
        "region %s: offset %d + byte_size %d is past the end of shared-memory object %s, which "
        "has %d bytes",
        Quoted(name), system.offset(), system.byte_size(), Quoted(key), status.st_size));
  }
  // mmap's offset must be page-aligned: map from the page the region starts in.
  const int64_t page_start = system.offset() / PageSize() * PageSize();
  const int64_t data_offset = system.offset() - page_start;
  const size_t mapped_bytes = static_cast<size_t>(data_offset + system.byte_size());
  void* mapping = mmap(nullptr, mapped_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, page_start);
  if (mapping == MAP_FAILED) {
    const int error = errno;
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrFormat("region %s: cannot map %d bytes of shared-memory object %s: %s",
                        Quoted(name), mapped_bytes, Quoted(key), std::strerror(error)));
  }
  absl::StatusOr<SigbusGuard> guard = SigbusGuard::Guard(mapping, mapped_bytes);
  if (!guard.ok()) {
    munmap(mapping, mapped_bytes);
    close(fd);
    return guard.status();
  }
  v1::SharedMemoryRegion description;
  description.set_name(std::string(name));
  *description.mutable_system() = system;
  return std::unique_ptr<MappedRegion>(
      new MappedRegion(std::move(description), system.byte_size(), fd,
                       ObjectId{.device = status.st_dev, .inode = status.st_ino}, mapping,
                       mapped_bytes, data_offset, *std::move(guard), /*device_memory=*/nullptr));
}

absl::StatusOr<std::unique_ptr<MappedRegion>> MappedRegion::MapCuda(
    std::string_view name, const v1::CudaSharedMemory& cuda, TensorMemory* memory) {
  if (cuda.byte_size() <= 0 || cuda.device_id() < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "region %s: device_id %d and byte_size %d do not make a CUDA region (device_id >= 0, "
        "byte_size >= 1)",
        Quoted(name), cuda.device_id(), cuda.byte_size()));
  }
  absl::StatusOr<void*> opened = memory->OpenIpcHandle(cuda.raw_handle(), cuda.byte_size());
  if (!opened.ok()) {
    return absl::Status(opened.status().code(),
                        absl::StrFormat("region %s: cannot open its CUDA IPC handle on %s: %s",
                                        Quoted(name), memory->device(), opened.status().message()));
  }
  v1::SharedMemoryRegion description;
  description.set_name(std::string(name));
  *description.mutable_cuda() = cuda;
  return std::unique_ptr<MappedRegion>(
      new MappedRegion(std::move(description), cuda.byte_size(), /*fd=*/-1, ObjectId{}, *opened,
                       /*mapped_bytes=*/0, /*data_offset=*/0, std::nullopt, memory));
}

MappedRegion::MappedRegion(v1::SharedMemoryRegion description, int64_t byte_size, int fd,
                           ObjectId object, void* mapping, size_t mapped_bytes, int64_t data_offset,
                           std::optional<SigbusGuard> guard, TensorMemory* device_memory)
    : description_(std::move(description)),
      byte_size_(byte_size),
      fd_(fd),
      object_(object),
      mapping_(mapping),
      mapped_bytes_(mapped_bytes),
      data_offset_(data_offset),
      guard_(std::move(guard)),
      device_memory_(device_memory) {}

MappedRegion::~MappedRegion() {
  if (device_memory_ != nullptr) {
    device_memory_->CloseIpcHandle(mapping_);
    return;
  }
  // Unguarded before it is unmapped: a fault in the range is not ours to absorb from then on.
  guard_.reset();
  munmap(mapping_, mapped_bytes_);
  close(fd_);
}

absl::StatusOr<char*> MappedRegion::Slice(int64_t offset, int64_t bytes,
                                          std::string_view what) const {
  int64_t end = 0;
  if (offset < 0 || bytes < 0 || __builtin_add_overflow(offset, bytes, &end) || end > byte_size_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: offset %d + byte_size %d is outside %s, which has %d bytes", what,
                        offset, bytes, Described(description_), byte_size_));
  }
  TENSOROPS_RETURN_IF_ERROR(CheckIntact(what));
  return static_cast<char*>(mapping_) + data_offset_ + offset;
}

absl::Status MappedRegion::CheckIntact(std::string_view what) const {
  if (device_memory_ != nullptr) return absl::OkStatus();
  const int64_t end = description_.system().offset() + byte_size_;
  struct stat status = {};
  if (fstat(fd_, &status) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: %s cannot be checked: %s", what, Described(description_), std::strerror(errno)));
  }
  if (guard_->Faulted()) {
    // A page of the mapping faulted (SIGBUS), and the pages that replaced it are the server's
    // own: the mapping no longer shows the object, whatever its size is now.
    if (status.st_size < end) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: %s was shrunk by its owner after it was registered, under a call that used it; "
          "unregister it and register it again",
          what, Described(description_)));
    }
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: a page of %s could not be mapped (SIGBUS) under a call that used it, though the "
        "object still has its %d bytes: the file system that holds it is out of space or memory "
        "(a full /dev/shm, or a tmpfs size limit; a page of an object made with ftruncate is "
        "allocated when first touched), or the object was shrunk and grown again; unregister "
        "it and register it again",
        what, Described(description_), status.st_size));
  }
  if (status.st_nlink == 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: %s was removed (shm_unlink) after it was registered, so nobody else sees its bytes; "
        "unregister it, and register the new object",
        what, Described(description_)));
  }
  if (status.st_size < end) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: %s was shrunk by its owner to %d bytes after it was registered (the region ends at "
        "byte %d); unregister it, and register it again once the object is large enough",
        what, Described(description_), status.st_size, end));
  }
  return absl::OkStatus();
}

bool MappedRegion::SameObject(const MappedRegion& other) const {
  return !on_device() && !other.on_device() && object_.device == other.object_.device &&
         object_.inode == other.object_.inode;
}

bool MappedRegion::Overlaps(int64_t offset, int64_t bytes, const MappedRegion& other,
                            int64_t other_offset, int64_t other_bytes) const {
  if (bytes <= 0 || other_bytes <= 0) return false;
  int64_t start = 0;
  int64_t other_start = 0;
  if (SameObject(other)) {
    // Where each range starts in the object: two mappings of one object have two addresses.
    start = description_.system().offset() + offset;
    other_start = other.description_.system().offset() + other_offset;
  } else if (on_device() && other.on_device() && device_memory_ == other.device_memory_) {
    start = static_cast<int64_t>(reinterpret_cast<intptr_t>(mapping_)) + offset;
    other_start = static_cast<int64_t>(reinterpret_cast<intptr_t>(other.mapping_)) + other_offset;
  } else {
    return false;
  }
  return start < other_start + other_bytes && other_start < start + bytes;
}

SharedMemoryRegions::SharedMemoryRegions(Limits limits, TensorMemory* device_memory)
    : limits_(limits),
      device_memory_(device_memory),
      mapped_bytes_(std::make_shared<std::atomic<int64_t>>(0)) {}

SharedMemoryRegions::~SharedMemoryRegions() = default;

absl::Status SharedMemoryRegions::Register(std::string_view ns,
                                           const v1::SharedMemoryRegion& region) {
  const absl::Status name_status = ValidateTensorName(region.name());
  if (!name_status.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("region name: %s", name_status.message()));
  }
  if (region.has_cuda() && device_memory_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "region %s: this server runs no calls on a GPU (--device=cpu, or no GPU found), so it "
        "cannot open CUDA shared memory; register system shared memory (a POSIX shared-memory "
        "object) instead",
        Quoted(region.name())));
  }
  if (!region.has_system() && !region.has_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("region %s: set one of system (a POSIX shared-memory object) or cuda",
                        Quoted(region.name())));
  }
  {
    absl::MutexLock lock(&mu_);
    const auto it = by_namespace_.find(Key(ns));
    const int64_t registered =
        it == by_namespace_.end() ? 0 : static_cast<int64_t>(it->second.size());
    if (registered > 0 && it->second.contains(Key(region.name()))) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "region %s is registered already; unregister it first", Quoted(region.name())));
    }
    if (registered >= limits_.max_regions) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "region %s: %d regions are registered, the most one caller may have (%s=%d%s)",
          Quoted(region.name()), registered, kMaxSharedMemoryRegionsFlag, limits_.max_regions,
          limits_.max_regions == 0 ? ": this server refuses shared memory"
                                   : "; unregister one first"));
    }
  }
  // Reserve the bytes before mapping, so that two registrations cannot both pass the limit.
  const int64_t bytes = region.has_cuda() ? region.cuda().byte_size() : region.system().byte_size();
  const int64_t before = mapped_bytes_->fetch_add(bytes);
  if (bytes > limits_.max_bytes - before) {
    mapped_bytes_->fetch_sub(bytes);
    return absl::ResourceExhaustedError(absl::StrFormat(
        "region %s: %d bytes would take the server's shared memory past %s=%d (%d bytes are "
        "mapped); unregister regions, or raise the flag",
        Quoted(region.name()), bytes, kMaxSharedMemoryBytesFlag, limits_.max_bytes, before));
  }
  absl::StatusOr<std::unique_ptr<MappedRegion>> mapped =
      region.has_cuda() ? MappedRegion::MapCuda(region.name(), region.cuda(), device_memory_)
                        : MappedRegion::MapSystem(region.name(), region.system());
  if (!mapped.ok()) {
    mapped_bytes_->fetch_sub(bytes);
    return mapped.status();
  }
  // The bytes come back when the last holder (the registry or a call) lets the region go.
  std::shared_ptr<MappedRegion> shared(mapped->release(),
                                       [counter = mapped_bytes_, bytes](MappedRegion* gone) {
                                         delete gone;
                                         counter->fetch_sub(bytes);
                                       });
  // Refused after the lock is released: unmapping it is the last holder's work.
  std::shared_ptr<MappedRegion> refused;
  absl::MutexLock lock(&mu_);
  // Checked again: other registrations may have taken the name, or the last place, while this
  // one mapped.
  auto& regions = by_namespace_[Key(ns)];
  absl::Status status = absl::OkStatus();
  if (regions.contains(Key(region.name()))) {
    status = absl::AlreadyExistsError(absl::StrFormat(
        "region %s is registered already; unregister it first", Quoted(region.name())));
  } else if (static_cast<int64_t>(regions.size()) >= limits_.max_regions) {
    status = absl::ResourceExhaustedError(absl::StrFormat(
        "region %s: %d regions are registered, the most one caller may have (%s=%d); unregister "
        "one first",
        Quoted(region.name()), regions.size(), kMaxSharedMemoryRegionsFlag, limits_.max_regions));
  } else {
    status = CheckOwnObject(ns, *shared);
  }
  if (!status.ok()) {
    if (regions.empty()) by_namespace_.erase(Key(ns));
    refused = std::move(shared);
    return status;
  }
  regions.emplace(region.name(), std::move(shared));
  return absl::OkStatus();
}

absl::Status SharedMemoryRegions::CheckOwnObject(std::string_view ns,
                                                 const MappedRegion& mapped) const {
  // A region's name is its namespace's, but the object behind a key is the host's: without this,
  // a token that learned (or guessed) another token's key would read and write its memory.
  for (const auto& [other_ns, regions] : by_namespace_) {
    if (other_ns == Key(ns)) continue;
    for (const auto& [name, other] : regions) {
      if (other->SameObject(mapped)) {
        return absl::PermissionDeniedError(absl::StrFormat(
            "region %s: shared-memory object %s is registered by another caller (another "
            "token); a caller may register only objects no other caller has registered",
            Quoted(mapped.name()), Quoted(mapped.description().system().key())));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> SharedMemoryRegions::Unregister(std::string_view ns,
                                                                         std::string_view name,
                                                                         RegionKind kind) {
  const auto of_kind = [kind](const MappedRegion& region) {
    return kind == RegionKind::kAny || region.on_device() == (kind == RegionKind::kCuda);
  };
  // Unmapped after the lock is released (a region's last holder may be this call).
  std::vector<std::shared_ptr<MappedRegion>> released;
  std::vector<std::string> names;
  {
    absl::MutexLock lock(&mu_);
    const auto not_found = [&] {
      return absl::NotFoundError(
          absl::StrFormat("shared-memory region %s is not registered", Quoted(name)));
    };
    const auto it = by_namespace_.find(Key(ns));
    if (it == by_namespace_.end()) {
      if (name.empty()) return names;
      return not_found();
    }
    auto& regions = it->second;
    if (name.empty()) {
      for (auto region = regions.begin(); region != regions.end();) {
        if (!of_kind(*region->second)) {
          ++region;
          continue;
        }
        names.push_back(region->first);
        released.push_back(std::move(region->second));
        region = regions.erase(region);
      }
    } else {
      const auto region = regions.find(Key(name));
      if (region == regions.end() || !of_kind(*region->second)) return not_found();
      names.push_back(region->first);
      released.push_back(std::move(region->second));
      regions.erase(region);
    }
    if (regions.empty()) by_namespace_.erase(it);
  }
  released.clear();
  return names;
}

absl::StatusOr<std::vector<v1::SharedMemoryRegion>> SharedMemoryRegions::List(
    std::string_view ns, std::string_view name) const {
  std::vector<v1::SharedMemoryRegion> regions;
  absl::MutexLock lock(&mu_);
  const auto it = by_namespace_.find(Key(ns));
  if (!name.empty()) {
    if (it == by_namespace_.end() || !it->second.contains(Key(name))) {
      return absl::NotFoundError(
          absl::StrFormat("shared-memory region %s is not registered", Quoted(name)));
    }
    regions.push_back(it->second.find(Key(name))->second->description());
    return regions;
  }
  if (it == by_namespace_.end()) return regions;
  for (const auto& [region_name, region] : it->second) regions.push_back(region->description());
  return regions;
}

absl::StatusOr<std::shared_ptr<const MappedRegion>> SharedMemoryRegions::Find(
    std::string_view ns, std::string_view name, std::string_view what) const {
  absl::MutexLock lock(&mu_);
  const auto it = by_namespace_.find(Key(ns));
  if (it != by_namespace_.end()) {
    if (const auto region = it->second.find(Key(name)); region != it->second.end()) {
      return std::shared_ptr<const MappedRegion>(region->second);
    }
  }
  return absl::NotFoundError(absl::StrFormat(
      "%s names shared-memory region %s, which is not registered (RegisterSharedMemory)", what,
      Quoted(name)));
}

int64_t SharedMemoryRegions::regions() const {
  absl::MutexLock lock(&mu_);
  int64_t count = 0;
  for (const auto& [ns, regions] : by_namespace_) count += regions.size();
  return count;
}

absl::Status CopyFromRegion(const RegionBytes& source, void* host, int64_t bytes) {
  if (source.region->on_device()) {
    return source.region->device_memory()->CopyToHost(host, source.data, bytes);
  }
  if (bytes > 0) std::memcpy(host, source.data, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status CopyIntoRegion(const RegionBytes& target, const void* host, int64_t bytes) {
  if (target.region->on_device()) {
    return target.region->device_memory()->CopyFromHost(target.data, host, bytes);
  }
  if (bytes > 0) std::memcpy(target.data, host, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const MappedRegion>> FindRegion(const SharedMemoryRegions* regions,
                                                               std::string_view ns,
                                                               const v1::SharedMemoryRef& ref,
                                                               std::string_view what) {
  if (regions == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s names a region, but this call cannot use shared memory", what));
  }
  return regions->Find(ns, ref.region(), what);
}

namespace {

// CheckByteSize: `ref` holds a tensor of `bytes` bytes, exactly or at least (FindBytes).
absl::Status CheckByteSize(const v1::SharedMemoryRef& ref, int64_t bytes, bool exactly,
                           std::string_view what) {
  if (exactly ? ref.byte_size() == bytes : ref.byte_size() >= bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s.byte_size is %d, but the tensor has %d bytes (byte_size must be %s)", what,
      ref.byte_size(), bytes, exactly ? "the tensor's bytes exactly" : "at least its bytes"));
}

}  // namespace

absl::StatusOr<RegionBytes> SliceBytes(std::shared_ptr<const MappedRegion> region,
                                       const v1::SharedMemoryRef& ref, int64_t bytes, bool exactly,
                                       std::string_view what) {
  TENSOROPS_RETURN_IF_ERROR(CheckByteSize(ref, bytes, exactly, what));
  RegionBytes found{.region = std::move(region)};
  TENSOROPS_ASSIGN_OR_RETURN(found.data, found.region->Slice(ref.offset(), bytes, what));
  return found;
}

absl::StatusOr<RegionBytes> FindBytes(const SharedMemoryRegions* regions, std::string_view ns,
                                      const v1::SharedMemoryRef& ref, int64_t bytes, bool exactly,
                                      std::string_view what) {
  if (regions != nullptr) TENSOROPS_RETURN_IF_ERROR(CheckByteSize(ref, bytes, exactly, what));
  TENSOROPS_ASSIGN_OR_RETURN(std::shared_ptr<const MappedRegion> region,
                             FindRegion(regions, ns, ref, what));
  return SliceBytes(std::move(region), ref, bytes, exactly, what);
}

}  // namespace tensorops
