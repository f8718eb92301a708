// ResultTarget: where one op call's result is written (ResultOptions, tensor.proto) and what the
// response says of it once the kernel is done.
//
//   TENSOROPS_ASSIGN_OR_RETURN(std::shared_ptr<ResultTarget> target,
//                              ResultTarget::Make(op, options, ..., response.mutable_result()));
//   TENSOROPS_ASSIGN_OR_RETURN(MutableTensorView out, target->Allocate(dtype, shape));
//   TENSOROPS_RETURN_IF_ERROR(kernel(plan, out));
//   TENSOROPS_RETURN_IF_ERROR(target->Finish());   // commits a stored or in-place result
//
// Four targets: the response (the default: the kernel writes into the bytes gRPC sends), a new
// stored tensor (store_as: the kernel writes into the store's upload, so a result of any size is
// written once and never crosses the wire unless asked), the stored input itself (in_place:
// the kernel runs on the stored bytes under the tensor's exclusive lock), or a client's
// shared-memory region (shared_memory: the kernel writes there, and the response says only the
// result's dtype and shape).
#ifndef TENSOROPS_SERVER_CORE_RESULT_TARGET_H_
#define TENSOROPS_SERVER_CORE_RESULT_TARGET_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "kernels/tensor.h"
#include "proto/codec.h"
#include "server/core/stored_operands.h"
#include "server/store/tensor_store.h"
#include "tensorops/v1/tensor.pb.h"

namespace tensorops {

// kMaxUpdateIdBytes is the longest ResultOptions.update_id.
inline constexpr int64_t kMaxUpdateIdBytes = 128;

// CheckResultOptions validates `options` for the op `op` (INVALID_ARGUMENT naming the field, its
// value and the rule): in_place only for ops that update their input (`updates_input`; the
// error lists `updating_ops`, the ops that do) and only with `input` a reference; overwrite and
// expected_version only with store_as; update_id only for a call that changes the store, and at
// most kMaxUpdateIdBytes; store_as a valid tensor name.
absl::Status CheckResultOptions(std::string_view op, const v1::ResultOptions& options,
                                bool updates_input, std::string_view updating_ops,
                                const v1::Tensor& input);

// ChangesStore is true for options that store the result or update the input in place.
inline bool ChangesStore(const v1::ResultOptions& options) {
  return options.in_place() || !options.store_as().empty();
}

// AnswerRemembered fills `result` for a retry of a change the store remembers (`change`, found by
// its update id): a reference to the version it made and, with return_data, that version's bytes
// (ABORTED when the tensor has changed since, which leaves them nowhere).
absl::Status AnswerRemembered(std::string_view op, const TensorStore::Change& change,
                              const v1::ResultOptions& options, const StoredTensors& stored,
                              v1::Tensor* result);

// KernelSide says where the kernel that writes a result runs.
enum class KernelSide { kCpu, kDevice };

class ResultTarget {
 public:
  // Make picks the target `options` ask for. `operands` must hold the in-place update when
  // options.in_place. `result` is the response's result tensor; it must outlive the target.
  static std::shared_ptr<ResultTarget> Make(std::string_view op, const v1::ResultOptions& options,
                                            const StoredTensors& stored,
                                            std::shared_ptr<StoredOperands> operands,
                                            const wire::DecodeLimits& limits, v1::Tensor* result);

  // Allocate checks a result of `dtype` and `shape` against the limits (RESOURCE_EXHAUSTED; a
  // stored result that is not returned is held to the rank and element limits only, not to the
  // message size) and returns where the kernel writes it: in the response, a new upload
  // (reserving its bytes in the store: RESOURCE_EXHAUSTED naming --store_memory_bytes, or
  // FAILED_PRECONDITION for a name that exists without overwrite), or the stored input. `side`
  // says who writes it: a CPU kernel gets host memory (with a store in device memory, a host copy
  // that Finish copies into the store), a device kernel the store's own bytes, wherever they are
  // (on_device() says whether they are device memory). A second call (a GPU call that falls back
  // to the CPU) returns the same result memory, or its host copy.
  absl::StatusOr<MutableTensorView> Allocate(DataType dtype, ShapeSpan shape,
                                             KernelSide side = KernelSide::kCpu);
  // on_device: the memory the last Allocate returned is device memory.
  bool on_device() const { return device_memory_ != nullptr; }

  // Finish runs after the kernel has written the result: for a stored or in-place result it
  // copies the bytes into the response when return_data asks, commits the change (with the
  // update id) and leaves a reference to the new version in the response; for a result in shared
  // memory it checks the region is still the client's (FAILED_PRECONDITION otherwise) and
  // describes the result.
  absl::Status Finish();

  // The response is the target: the op may write its result there however it likes (taking
  // the request's input bytes).
  bool in_response() const { return kind_ == Kind::kResponse; }
  // The stored input itself is the target (result_options.in_place).
  bool in_place() const { return kind_ == Kind::kInPlace; }
  // response_carries_data: the response will hold the result's bytes (the response is the
  // target, or return_data copies a stored result there).
  bool response_carries_data() const { return in_response() || options_.return_data(); }

 private:
  enum class Kind { kResponse, kStore, kInPlace, kSharedMemory };

  // What a response that returns a stored result holds besides the result's bytes, at most: the
  // name (256 bytes), shape, dtype, version and, in KServe, the output's name and parameters.
  static constexpr int64_t kStoredResponseFramingBytes = 4096;

  ResultTarget(std::string_view op, Kind kind, const v1::ResultOptions& options,
               const StoredTensors& stored, std::shared_ptr<StoredOperands> operands,
               const wire::DecodeLimits& limits, v1::Tensor* result);

  // InSharedMemory is where a result of `dtype` and `shape` goes in the region
  // options_.shared_memory names (operands_' result_region), checked against it and against the
  // arguments in shared memory.
  absl::StatusOr<MutableTensorView> InSharedMemory(DataType dtype, ShapeSpan shape);
  // DeviceMayWrite: a device kernel may write `in_region`, a result's place in a CUDA region, in
  // place (the words it touches lie inside the client's slice).
  bool DeviceMayWrite(const MutableTensorView& in_region) const;
  // SetReference describes the stored result in the response: dtype, shape, name and version.
  void SetReference(const TensorView& value, std::string_view name, int64_t version);

  const std::string_view op_;
  const Kind kind_;
  const v1::ResultOptions& options_;
  TensorStore* const store_;
  // The region a kSharedMemory result is written to, held until the target is gone.
  std::shared_ptr<const MappedRegion> region_;
  // Where the result goes in region_ (kSharedMemory).
  std::optional<MutableTensorView> region_view_;
  // A copy: the caller's namespace string may go once the call is prepared.
  const std::string ns_;
  const std::shared_ptr<StoredOperands> operands_;
  const wire::DecodeLimits limits_;
  v1::Tensor* const result_;
  std::optional<TensorStore::Upload> upload_;
  // The upload's bytes, in the store's memory.
  MutableTensorView upload_bytes_;
  // What the last Allocate returned.
  std::optional<MutableTensorView> allocated_;
  // The memory of allocated_ when it is device memory (null for host memory).
  const TensorMemory* device_memory_ = nullptr;
  // A CPU kernel's result bound for device memory (a store's, kStore, or a CUDA region's,
  // kSharedMemory); Finish copies it there.
  std::optional<Tensor> host_copy_;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_CORE_RESULT_TARGET_H_
