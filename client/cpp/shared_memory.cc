#include "client/cpp/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cassert>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "kernels/dtype.h"
#include "kernels/shape.h"
#include "proto/codec.h"

namespace tensorops {

absl::StatusOr<SharedMemoryObject> SharedMemoryObject::Create(std::string key, int64_t byte_size) {
  if (key.size() < 2 || key[0] != '/' || key.find('/', 1) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "shared memory: key \"%s\" is not a shared-memory object's name (\"/name\": a slash, "
        "then a name without one)",
        key));
  }
  if (byte_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shared memory: byte_size = %d is out of range: must be >= 1", byte_size));
  }
  const int fd = shm_open(key.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    const int error = errno;
    const std::string message = absl::StrFormat("shared memory: cannot create object \"%s\": %s",
                                                key, std::strerror(error));
    return error == EEXIST ? absl::AlreadyExistsError(message)
                           : absl::InvalidArgumentError(message);
  }
  // The pages are reserved now (posix_fallocate): on a /dev/shm too small for them (a container's
  // is 64 MiB unless given more) creating fails here with ENOSPC, where a sparse object would
  // instead kill the first process to touch a page that has no room with SIGBUS.
  int error = ftruncate(fd, byte_size) == 0 ? posix_fallocate(fd, 0, byte_size) : errno;
  void* data = MAP_FAILED;
  if (error == 0) {
    data = mmap(nullptr, static_cast<size_t>(byte_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) error = errno;
  }
  close(fd);  // the mapping keeps the object
  if (data == MAP_FAILED) {
    shm_unlink(key.c_str());
    return absl::ResourceExhaustedError(absl::StrFormat(
        "shared memory: cannot size and map %d bytes of object \"%s\": %s%s", byte_size, key,
        std::strerror(error),
        error == ENOSPC ? " (/dev/shm has no room for it: a container's /dev/shm is 64 MiB unless "
                          "given more, e.g. podman or docker run --shm-size=1g)"
                        : ""));
  }
  return SharedMemoryObject(std::move(key), byte_size, data);
}

SharedMemoryObject::SharedMemoryObject(SharedMemoryObject&& other) noexcept
    : key_(std::move(other.key_)), byte_size_(other.byte_size_), data_(other.data_) {
  other.data_ = nullptr;
}

SharedMemoryObject& SharedMemoryObject::operator=(SharedMemoryObject&& other) noexcept {
  if (this != &other) {
    Release();
    key_ = std::move(other.key_);
    byte_size_ = other.byte_size_;
    data_ = other.data_;
    other.data_ = nullptr;
  }
  return *this;
}

SharedMemoryObject::~SharedMemoryObject() { Release(); }

void SharedMemoryObject::Release() {
  if (data_ == nullptr) return;
  munmap(data_, static_cast<size_t>(byte_size_));
  shm_unlink(key_.c_str());
  data_ = nullptr;
}

MutableTensorView SharedMemoryObject::View(DataType dtype, ShapeSpan shape, int64_t offset) const {
  assert(offset >= 0 && offset + NumElements(shape) * ItemSize(dtype) <= byte_size_);
  return MutableTensorView(dtype, shape, static_cast<void*>(data() + offset));
}

v1::SharedMemoryRef SharedMemoryRef(std::string_view region, int64_t offset, int64_t byte_size) {
  v1::SharedMemoryRef ref;
  ref.set_region(region.data(), region.size());
  ref.set_offset(offset);
  ref.set_byte_size(byte_size);
  return ref;
}

v1::Tensor SharedMemoryArgument(std::string_view region, int64_t offset, DataType dtype,
                                ShapeSpan shape) {
  v1::Tensor tensor;
  tensor.set_dtype(wire::DataTypeToProto(dtype));
  tensor.mutable_shape()->Assign(shape.begin(), shape.end());
  *tensor.mutable_shared_memory() =
      SharedMemoryRef(region, offset, NumElements(shape) * ItemSize(dtype));
  return tensor;
}

}  // namespace tensorops
