// Shared memory for a client on the server's host: tensors that skip the socket.
//
//   absl::StatusOr<SharedMemoryObject> memory = SharedMemoryObject::Create("/lookup", 1 << 20);
//   TENSOROPS_RETURN_IF_ERROR(client->RegisterSharedMemory("lookup", memory->key(),
//                                                          memory->byte_size()));
//   v1::OpRequest request;
//   *request.mutable_index_select() = MakeIndexSelectRequest(table_placeholder, 0, rows.view());
//   *request.mutable_index_select()->mutable_input() = StoredArgument("table");
//   absl::StatusOr<ResultShape> written = client->RunInto(
//       request, SharedMemoryRef("lookup", /*offset=*/0, memory->byte_size()));
//   // The result's bytes are in memory->data(), as *written describes them.
//   MutableTensorView result = memory->View(written->dtype, written->shape);
//
// A tensor argument in a region is SharedMemoryArgument(region, offset, dtype, shape): the
// server reads its elements where they are. Both sides see the same bytes: the client must not
// change an argument's bytes, nor read a result's, while the call that uses them runs.
#ifndef TENSOROPS_CLIENT_CPP_SHARED_MEMORY_H_
#define TENSOROPS_CLIENT_CPP_SHARED_MEMORY_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"
#include "tensorops/v1/tensor.pb.h"

namespace tensorops {

// SharedMemoryObject is a POSIX shared-memory object this process created (shm_open) and maps:
// the memory of a system region. It removes the object (shm_unlink) and unmaps it when
// destroyed, so unregister the region first. Movable, not copyable.
class SharedMemoryObject {
 public:
  // Create makes the object `key` ("/name", as shm_open takes it) of `byte_size` (>= 1) bytes,
  // zero-filled, and maps it: ALREADY_EXISTS when an object of that name exists (remove a stale
  // one with shm_unlink, or pick another name), INVALID_ARGUMENT for a bad key or size.
  static absl::StatusOr<SharedMemoryObject> Create(std::string key, int64_t byte_size);

  SharedMemoryObject(SharedMemoryObject&& other) noexcept;
  SharedMemoryObject& operator=(SharedMemoryObject&& other) noexcept;
  SharedMemoryObject(const SharedMemoryObject&) = delete;
  SharedMemoryObject& operator=(const SharedMemoryObject&) = delete;
  ~SharedMemoryObject();

  const std::string& key() const { return key_; }
  int64_t byte_size() const { return byte_size_; }
  char* data() const { return static_cast<char*>(data_); }
  // View is the tensor of `dtype` and `shape` at `offset` in the object (which must hold it:
  // checked with an assertion, as a view's bounds are the caller's).
  MutableTensorView View(DataType dtype, ShapeSpan shape, int64_t offset = 0) const;

 private:
  SharedMemoryObject(std::string key, int64_t byte_size, void* data)
      : key_(std::move(key)), byte_size_(byte_size), data_(data) {}
  void Release();

  std::string key_;
  int64_t byte_size_ = 0;
  void* data_ = nullptr;
};

// SharedMemoryRef names `byte_size` bytes from `offset` of the registered region `region`.
v1::SharedMemoryRef SharedMemoryRef(std::string_view region, int64_t offset, int64_t byte_size);

// SharedMemoryArgument is a tensor argument whose elements (`dtype`, `shape`, row-major) are at
// `offset` in the registered region `region`: put it in a request built with the Make*Request
// functions (client.h), e.g. `*request.mutable_index() = SharedMemoryArgument(...)`.
v1::Tensor SharedMemoryArgument(std::string_view region, int64_t offset, DataType dtype,
                                ShapeSpan shape);

// ResultShape describes a result the server wrote into a region (Client::RunInto).
struct ResultShape {
  DataType dtype = DataType::kFloat32;
  Shape shape;
};

}  // namespace tensorops

#endif  // TENSOROPS_CLIENT_CPP_SHARED_MEMORY_H_
