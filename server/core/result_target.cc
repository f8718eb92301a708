#include "server/core/result_target.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/dtype.h"
#include "kernels/shape.h"
#include "kernels/status_macros.h"

namespace tensorops {
namespace {

std::string Quoted(std::string_view name) {
  return absl::StrFormat("\"%s\"", absl::CHexEscape(absl::string_view(name.data(), name.size())));
}

// CopyInto puts `value`'s bytes, in `memory`, into the response's result (return_data).
absl::Status CopyInto(const TensorView& value, const TensorMemory& memory, v1::Tensor* result) {
  const MutableTensorView out = wire::AllocateTensor(value.dtype(), value.shape(), result);
  return memory.CopyToHost(out.data(), value.data(), value.numel() * value.itemsize());
}

}  // namespace

absl::Status CheckResultOptions(std::string_view op, const v1::ResultOptions& options,
                                bool updates_input, std::string_view updating_ops,
                                const v1::Tensor& input) {
  if (options.in_place()) {
    if (!updates_input) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: result_options.in_place = true, but %s does not update its input (in place is "
          "for %s)",
          op, op, updating_ops));
    }
    if (!input.has_stored()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: result_options.in_place = true, but input is not a stored tensor (set "
          "input.stored to the name of the tensor to update)",
          op));
    }
    if (!options.store_as().empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: result_options.in_place = true and store_as = %s are exclusive (in place, the "
          "result is the stored input)",
          op, Quoted(options.store_as())));
    }
  }
  if (options.has_shared_memory()) {
    const char* other = options.in_place()            ? "in_place"
                        : !options.store_as().empty() ? "store_as"
                        : options.return_data()       ? "return_data"
                                                      : nullptr;
    if (other != nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: result_options.shared_memory and %s are exclusive (the result goes to one place)",
          op, other));
    }
  }
  if (options.store_as().empty()) {
    if (options.overwrite() || options.has_expected_version()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: result_options.%s is set without store_as (it says how store_as may replace a "
          "tensor)",
          op, options.overwrite() ? "overwrite" : "expected_version"));
    }
  } else {
    const absl::Status name = ValidateTensorName(options.store_as());
    if (!name.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: result_options.store_as: %s", op, name.message()));
    }
  }
  if (!options.update_id().empty()) {
    if (!ChangesStore(options)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: result_options.update_id is set, but the call changes no stored tensor (an "
          "update id is for store_as or in_place)",
          op));
    }
    if (static_cast<int64_t>(options.update_id().size()) > kMaxUpdateIdBytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: result_options.update_id has %d bytes (at most %d)", op,
                          options.update_id().size(), kMaxUpdateIdBytes));
    }
  }
  return absl::OkStatus();
}

absl::Status AnswerRemembered(std::string_view op, const TensorStore::Change& change,
                              const v1::ResultOptions& options, const StoredTensors& stored,
                              v1::Tensor* result) {
  absl::StatusOr<TensorStore::Metadata> info = stored.store->Info(stored.ns, change.name);
  if (options.return_data()) {
    absl::StatusOr<TensorStore::ReadHandle> read =
        stored.store->Read(stored.ns, change.name, change.version, stored.lock_wait);
    if (IsStoreBusy(read.status())) return read.status();
    if (!read.ok()) {
      // Not ABORTED, which the clients retry: a retry would find the same.
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: update %s was already applied, making tensor %s version %d; its bytes cannot be "
          "returned because the tensor has changed since (%s); get the tensor for its current "
          "bytes",
          op, Quoted(options.update_id()), Quoted(change.name), change.version,
          read.status().message()));
    }
    TENSOROPS_RETURN_IF_ERROR(CopyInto(read->view(), read->memory(), result));
  } else if (info.ok() && info->version == change.version) {
    result->set_dtype(wire::DataTypeToProto(info->dtype));
    result->mutable_shape()->Assign(info->shape.begin(), info->shape.end());
  }
  result->mutable_stored()->set_name(change.name);
  result->mutable_stored()->set_version(change.version);
  return absl::OkStatus();
}

ResultTarget::ResultTarget(std::string_view op, Kind kind, const v1::ResultOptions& options,
                           const StoredTensors& stored, std::shared_ptr<StoredOperands> operands,
                           const wire::DecodeLimits& limits, v1::Tensor* result)
    : op_(op),
      kind_(kind),
      options_(options),
      store_(stored.store),
      ns_(stored.ns),
      operands_(std::move(operands)),
      limits_(limits),
      result_(result) {}

std::shared_ptr<ResultTarget> ResultTarget::Make(std::string_view op,
                                                 const v1::ResultOptions& options,
                                                 const StoredTensors& stored,
                                                 std::shared_ptr<StoredOperands> operands,
                                                 const wire::DecodeLimits& limits,
                                                 v1::Tensor* result) {
  const Kind kind = options.in_place()            ? Kind::kInPlace
                    : !options.store_as().empty() ? Kind::kStore
                    : options.has_shared_memory() ? Kind::kSharedMemory
                                                  : Kind::kResponse;
  return std::shared_ptr<ResultTarget>(
      new ResultTarget(op, kind, options, stored, std::move(operands), limits, result));
}

absl::StatusOr<MutableTensorView> ResultTarget::Allocate(DataType dtype, ShapeSpan shape,
                                                         KernelSide side) {
  if (allocated_.has_value()) {
    // A GPU call that fell back: the CPU gets host memory.
    if (side == KernelSide::kCpu && device_memory_ != nullptr) {
      device_memory_ = nullptr;
      if (kind_ == Kind::kInPlace) {
        TENSOROPS_RETURN_IF_ERROR(operands_->MirrorOnHost());
        allocated_ = operands_->UpdateHostView();
      } else {
        host_copy_.emplace(dtype, shape);
        allocated_ = host_copy_->mutable_view();
      }
    }
    return *allocated_;
  }
  // What crosses the wire is held to the message size; a result that stays in the store is not.
  wire::DecodeLimits limits = limits_;
  const bool changes_store = kind_ == Kind::kStore || kind_ == Kind::kInPlace;
  if (changes_store && !options_.return_data()) {
    limits.max_bytes = std::numeric_limits<int64_t>::max();
  }
  // A returned result that changes the store leaves room for the rest of its response: the
  // change is committed before the response is sent, and a response over the limit (refused by
  // OpCall::End) would report a failure for a change that was made.
  if (changes_store && options_.return_data()) {
    limits.max_bytes = std::max<int64_t>(0, limits_.max_bytes - kStoredResponseFramingBytes);
  }
  if (absl::Status fits = wire::CheckShape(dtype, shape, op_, "result", limits).status();
      !fits.ok()) {
    if (limits.max_bytes == limits_.max_bytes || !absl::IsResourceExhausted(fits)) return fits;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s; with return_data, a result that changes the store may take the limit less %d "
        "bytes (the rest of its response, which is sent after the change is made): leave "
        "return_data out and read the result with GetTensor",
        fits.message(), kStoredResponseFramingBytes));
  }
  switch (kind_) {
    case Kind::kResponse:
      allocated_ = wire::AllocateTensor(dtype, shape, result_);
      break;
    case Kind::kSharedMemory: {
      TENSOROPS_ASSIGN_OR_RETURN(region_view_, InSharedMemory(dtype, shape));
      if (!region_->on_device()) {
        // Host memory whoever writes it: a device kernel's result is copied out into it.
        allocated_ = region_view_;
      } else if (side == KernelSide::kDevice && DeviceMayWrite(*region_view_)) {
        // The client's GPU buffer: the kernels write it in place.
        allocated_ = region_view_;
        device_memory_ = region_->device_memory();
      } else {
        host_copy_.emplace(dtype, shape);
        allocated_ = host_copy_->mutable_view();
      }
      break;
    }
    case Kind::kStore: {
      if (store_ == nullptr) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s: result_options.store_as is set, but this call cannot store tensors", op_));
      }
      absl::StatusOr<TensorStore::Upload> upload = store_->BeginUpload(
          ns_, options_.store_as(), dtype, shape,
          {.overwrite = options_.overwrite(),
           .expected_version = options_.has_expected_version()
                                   ? std::optional<int64_t>(options_.expected_version())
                                   : std::nullopt});
      if (!upload.ok()) {
        return absl::Status(
            upload.status().code(),
            absl::StrFormat("%s: result_options.store_as: %s", op_, upload.status().message()));
      }
      upload_.emplace(*std::move(upload));
      TENSOROPS_ASSIGN_OR_RETURN(absl::Span<char> bytes,
                                 upload_->MutableChunk(0, upload_->bytes()));
      upload_bytes_ =
          MutableTensorView(dtype, shape, bytes.data()).InSpace(upload_->memory().space());
      if (upload_->memory().host_accessible()) {
        allocated_ = upload_bytes_;
      } else if (side == KernelSide::kDevice) {
        allocated_ = upload_bytes_;
        device_memory_ = &upload_->memory();
      } else {
        host_copy_.emplace(dtype, shape);
        allocated_ = host_copy_->mutable_view();
      }
      break;
    }
    case Kind::kInPlace: {
      // The op's plan found the result to have the input's dtype and shape.
      TensorStore::UpdateHandle& update = *operands_->update();
      if (side == KernelSide::kDevice || update.memory().host_accessible()) {
        allocated_ = update.view();
        if (!update.memory().host_accessible()) device_memory_ = &update.memory();
      } else {
        TENSOROPS_RETURN_IF_ERROR(operands_->MirrorOnHost());
        allocated_ = operands_->UpdateHostView();
      }
      break;
    }
  }
  return *allocated_;
}

absl::StatusOr<MutableTensorView> ResultTarget::InSharedMemory(DataType dtype, ShapeSpan shape) {
  const v1::SharedMemoryRef& ref = options_.shared_memory();
  const std::string what = absl::StrFormat("%s: result_options.shared_memory", op_);
  // Found with the arguments' regions, when the call was prepared (PrepareFor).
  region_ = operands_->result_region();
  TENSOROPS_ASSIGN_OR_RETURN(const int64_t numel, CheckedNumElements(shape, "result"));
  const int64_t bytes = numel * ItemSize(dtype);
  if (ref.byte_size() < bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s.byte_size is %d, smaller than the result (%s [%s], %d bytes)", what,
                        ref.byte_size(), DataTypeName(dtype), absl::StrJoin(shape, ", "), bytes));
  }
  if (ref.offset() % ItemSize(dtype) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s.offset %d is not a multiple of the result's item size (%d bytes of %s)",
                        what, ref.offset(), ItemSize(dtype), DataTypeName(dtype)));
  }
  TENSOROPS_ASSIGN_OR_RETURN(char* data, region_->Slice(ref.offset(), ref.byte_size(), what));
  TENSOROPS_RETURN_IF_ERROR(operands_->CheckResultApart(ref.offset(), bytes, what));
  return MutableTensorView(dtype, shape, static_cast<void*>(data))
      .InSpace(region_->on_device() ? MemorySpace::kDevice : MemorySpace::kHost);
}

bool ResultTarget::DeviceMayWrite(const MutableTensorView& in_region) const {
  // A device kernel may write the whole 32-bit words its result's elements lie in (a 16-bit
  // compare-and-swap covers its word: kernels/device_call.h); they must be the client's slice.
  const int64_t bytes = in_region.numel() * ItemSize(in_region.dtype());
  const int64_t offset = options_.shared_memory().offset();
  return offset % 4 == 0 && (bytes + 3) / 4 * 4 <= options_.shared_memory().byte_size();
}

absl::Status ResultTarget::Finish() {
  if (kind_ == Kind::kResponse) return absl::OkStatus();
  if (kind_ == Kind::kSharedMemory) {
    if (host_copy_.has_value()) {
      // A CPU kernel's result (or one the device could not write in place) for a CUDA region.
      TENSOROPS_RETURN_IF_ERROR(region_->device_memory()->CopyFromHost(
          region_view_->data(), host_copy_->data(), host_copy_->nbytes()));
    }
    TENSOROPS_RETURN_IF_ERROR(
        region_->CheckIntact(absl::StrFormat("%s: result_options.shared_memory", op_)));
    // The response describes the result the region holds, with no data.
    result_->set_dtype(wire::DataTypeToProto(allocated_->dtype()));
    result_->mutable_shape()->Assign(allocated_->shape().begin(), allocated_->shape().end());
    return absl::OkStatus();
  }
  // A CPU kernel's result goes to the store's device memory first.
  if (kind_ == Kind::kStore && host_copy_.has_value()) {
    TENSOROPS_RETURN_IF_ERROR(
        upload_->memory().CopyFromHost(upload_bytes_.data(), host_copy_->data(), upload_->bytes()));
  }
  if (kind_ == Kind::kInPlace) TENSOROPS_RETURN_IF_ERROR(operands_->WriteBack());
  // The bytes are copied before the commit: until then no other call can change them.
  if (options_.return_data()) {
    TENSOROPS_RETURN_IF_ERROR(CopyInto(
        *allocated_, device_memory_ != nullptr ? *device_memory_ : HostTensorMemory(), result_));
  }
  int64_t version;
  std::string name;
  if (kind_ == Kind::kStore) {
    name = upload_->name();
    absl::StatusOr<int64_t> committed = upload_->Commit(options_.update_id());
    if (!committed.ok()) {
      return absl::Status(
          committed.status().code(),
          absl::StrFormat("%s: result_options.store_as: %s", op_, committed.status().message()));
    }
    version = *committed;
    upload_.reset();
  } else {
    TensorStore::UpdateHandle* update = operands_->update();
    name = update->name();
    absl::StatusOr<int64_t> committed = update->Commit(options_.update_id());
    if (!committed.ok()) {
      return absl::Status(committed.status().code(),
                          absl::StrFormat("%s: input: %s", op_, committed.status().message()));
    }
    version = *committed;
  }
  SetReference(*allocated_, name, version);
  return absl::OkStatus();
}

void ResultTarget::SetReference(const TensorView& value, std::string_view name, int64_t version) {
  result_->set_dtype(wire::DataTypeToProto(value.dtype()));
  result_->mutable_shape()->Assign(value.shape().begin(), value.shape().end());
  result_->mutable_stored()->set_name(std::string(name));
  result_->mutable_stored()->set_version(version);
}

}  // namespace tensorops
