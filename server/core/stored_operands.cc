#include "server/core/stored_operands.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"
#include "kernels/dtype.h"
#include "kernels/shape.h"
#include "kernels/status_macros.h"
#include "proto/codec.h"
#include "tensorops/v1/generic.pb.h"

namespace tensorops {
namespace {

// Reference is one Tensor of a request that names a stored tensor or a shared-memory region, and
// the field that holds it.
struct Reference {
  const v1::Tensor* tensor;
  std::string_view arg;
};

// CollectReferences appends every set Tensor field of `message` (and of the messages it holds)
// whose `stored` or `shared_memory` is set. Requests hold their tensors in singular fields only.
void CollectReferences(const google::protobuf::Message& message, std::vector<Reference>* out) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE ||
        field->is_repeated()) {
      continue;
    }
    const google::protobuf::Message& value = reflection->GetMessage(message, field);
    if (field->message_type() != v1::Tensor::descriptor()) {
      CollectReferences(value, out);
      continue;
    }
    const auto* tensor = google::protobuf::DynamicCastToGenerated<v1::Tensor>(&value);
    if (tensor != nullptr && (tensor->has_stored() || tensor->has_shared_memory())) {
      out->push_back({tensor, field->name()});
    }
  }
}

std::string Quoted(std::string_view name) {
  return absl::StrFormat("\"%s\"", absl::CHexEscape(absl::string_view(name.data(), name.size())));
}

// One name's references: who names it, the version they expect, and whether it is updated.
struct Wanted {
  std::vector<std::string> args;
  std::optional<int64_t> version;
  std::string_view version_arg;
  bool update = false;
};

// StoreError puts the op and the argument in front of the store's message (which names the
// tensor), and turns the store's bare NOT_FOUND into a sentence about the reference. With the
// store off nothing can exist in it, so a missing name says that instead, with the code and
// wording of the refused upload (TensorStore::BeginUpload): "does not exist" would send the
// client looking for a PutTensor that the server could never have kept.
absl::Status StoreError(const TensorStore& store, std::string_view op, std::string_view arg,
                        std::string_view name, const absl::Status& status) {
  if (absl::IsNotFound(status) && !store.enabled()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: %s refers to stored tensor %s, but the tensor store is off (%s=0); start the "
        "server with %s greater than 0 to keep tensors on it",
        op, arg, Quoted(name), kStoreMemoryFlag, kStoreMemoryFlag));
  }
  if (absl::IsNotFound(status)) {
    return absl::NotFoundError(absl::StrFormat(
        "%s: %s refers to stored tensor %s, which does not exist", op, arg, Quoted(name)));
  }
  return absl::Status(status.code(), absl::StrFormat("%s: %s: %s", op, arg, status.message()));
}

}  // namespace

bool ReferencesStoredTensors(const google::protobuf::Message& request) {
  std::vector<Reference> references;
  CollectReferences(request, &references);
  return std::any_of(references.begin(), references.end(),
                     [](const Reference& reference) { return reference.tensor->has_stored(); });
}

absl::StatusOr<MutableTensorView> SharedMemoryView(const v1::Tensor& tensor,
                                                   const MappedRegion& region, std::string_view op,
                                                   std::string_view arg) {
  const v1::SharedMemoryRef& ref = tensor.shared_memory();
  if (!tensor.data().empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s is in shared-memory region %s and also carries %d data bytes; a tensor in shared "
        "memory carries no data of its own",
        op, arg, Quoted(ref.region()), tensor.data().size()));
  }
  if (tensor.dtype() == v1::DATA_TYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s is in shared-memory region %s but has no dtype; a tensor in shared memory needs "
        "its dtype and shape",
        op, arg, Quoted(ref.region())));
  }
  TENSOROPS_ASSIGN_OR_RETURN(const DataType dtype,
                             wire::DataTypeFromProto(tensor.dtype(), op, arg));
  const Shape shape(tensor.shape().begin(), tensor.shape().end());
  TENSOROPS_ASSIGN_OR_RETURN(const int64_t numel,
                             CheckedNumElements(shape, absl::StrFormat("%s: %s", op, arg)));
  const int64_t item = ItemSize(dtype);
  int64_t bytes = 0;
  if (__builtin_mul_overflow(numel, item, &bytes) || bytes != ref.byte_size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s is %s [%s], %d bytes, but its shared_memory.byte_size is %d; byte_size must be "
        "the tensor's bytes exactly",
        op, arg, DataTypeName(dtype), absl::StrJoin(shape, ", "), bytes, ref.byte_size()));
  }
  if (ref.offset() % item != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s has shared_memory.offset %d, which is not a multiple of its item size (%d bytes "
        "of %s); place a tensor at an offset its elements are aligned at",
        op, arg, ref.offset(), item, DataTypeName(dtype)));
  }
  TENSOROPS_ASSIGN_OR_RETURN(char* data,
                             region.Slice(ref.offset(), bytes, absl::StrFormat("%s: %s", op, arg)));
  const MutableTensorView view(dtype, shape, static_cast<void*>(data));
  return region.on_device() ? view.InSpace(MemorySpace::kDevice) : view;
}

absl::StatusOr<std::shared_ptr<StoredOperands>> StoredOperands::Acquire(
    std::string_view op, const google::protobuf::Message& request, const StoredTensors& stored,
    const InPlaceTarget& in_place) {
  std::shared_ptr<StoredOperands> operands(new StoredOperands(op));
  std::vector<Reference> all_references;
  CollectReferences(request, &all_references);
  std::vector<Reference> references;
  for (const Reference& reference : all_references) {
    const v1::Tensor& tensor = *reference.tensor;
    if (!tensor.has_shared_memory()) {
      references.push_back(reference);
      continue;
    }
    const std::string& region = tensor.shared_memory().region();
    if (tensor.has_stored()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s refers to stored tensor %s and to shared-memory region %s; set one", op,
          reference.arg, Quoted(tensor.stored().name()), Quoted(region)));
    }
    if (stored.regions == nullptr) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: %s is in shared-memory region %s, but this call cannot read shared memory", op,
          reference.arg, Quoted(region)));
    }
    operands->shared_memory_args_.emplace_back(reference.tensor, reference.arg);
    if (!operands->regions_.contains(region)) {
      TENSOROPS_ASSIGN_OR_RETURN(
          std::shared_ptr<const MappedRegion> mapped,
          stored.regions->Find(stored.ns, region, absl::StrFormat("%s: %s", op, reference.arg)));
      operands->regions_.emplace(region, std::move(mapped));
    }
  }
  if (references.empty()) return operands;

  // Sorted by name: the order every call takes its tensors in.
  absl::btree_map<std::string, Wanted> wanted;
  for (const Reference& reference : references) {
    const v1::Tensor& tensor = *reference.tensor;
    const std::string& name = tensor.stored().name();
    if (!tensor.data().empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s refers to stored tensor %s and also carries %d data bytes; a reference "
          "carries no data of its own (set only %s.stored, or only the tensor)",
          op, reference.arg, Quoted(name), tensor.data().size(), reference.arg));
    }
    Wanted& entry = wanted[name];
    if (reference.tensor == in_place.tensor) entry.update = true;
    if (tensor.stored().has_version()) {
      if (entry.version.has_value() && *entry.version != tensor.stored().version()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: %s refers to stored tensor %s at version %d, and %s at version %d; one call "
            "reads one version of a tensor",
            op, entry.version_arg, Quoted(name), *entry.version, reference.arg,
            tensor.stored().version()));
      }
      entry.version = tensor.stored().version();
      entry.version_arg = reference.arg;
    }
    entry.args.emplace_back(reference.arg);
  }
  for (const auto& [name, entry] : wanted) {
    if (entry.update && entry.args.size() > 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s all refer to stored tensor %s, which this call updates in place; an in-place "
          "update may not read the tensor it changes through another argument",
          op, absl::StrJoin(entry.args, ", "), Quoted(name)));
    }
  }
  if (stored.store == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: %s refers to stored tensor %s, but this call cannot read stored tensors", op,
        references.front().arg, Quoted(references.front().tensor->stored().name())));
  }
  for (const auto& [name, entry] : wanted) {
    if (entry.update) {
      absl::StatusOr<TensorStore::UpdateHandle> update = stored.store->Update(
          stored.ns, name, entry.version, in_place.update_id, stored.lock_wait);
      if (IsStoreBusy(update.status())) return update.status();
      if (!update.ok()) {
        return StoreError(*stored.store, op, entry.args.front(), name, update.status());
      }
      operands->update_.emplace(*std::move(update));
    } else {
      absl::StatusOr<TensorStore::ReadHandle> read =
          stored.store->Read(stored.ns, name, entry.version, stored.lock_wait);
      if (IsStoreBusy(read.status())) return read.status();
      if (!read.ok()) return StoreError(*stored.store, op, entry.args.front(), name, read.status());
      operands->reads_.emplace(name, *std::move(read));
    }
  }
  return operands;
}

absl::Status StoredOperands::HoldResultRegion(const v1::SharedMemoryRef& ref,
                                              const StoredTensors& stored, std::string_view what) {
  if (const auto held = regions_.find(ref.region()); held != regions_.end()) {
    result_region_ = held->second;
    return absl::OkStatus();
  }
  if (stored.regions == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s names a region, but this call cannot write shared memory", what));
  }
  TENSOROPS_ASSIGN_OR_RETURN(result_region_, stored.regions->Find(stored.ns, ref.region(), what));
  return absl::OkStatus();
}

absl::Status StoredOperands::CheckResultApart(int64_t offset, int64_t bytes,
                                              std::string_view what) const {
  for (const auto& [tensor, arg] : shared_memory_args_) {
    const v1::SharedMemoryRef& ref = tensor->shared_memory();
    if (result_region_->Overlaps(offset, bytes, RegionOf(*tensor), ref.offset(), ref.byte_size())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: the result's bytes [%d, %d) of region %s share memory with %s, bytes [%d, %d) of "
          "region %s; a result in shared memory must not overlap an argument, since the op "
          "reads its arguments while it writes the result",
          what, offset, offset + bytes, Quoted(result_region_->name()), arg, ref.offset(),
          ref.offset() + ref.byte_size(), Quoted(ref.region())));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorView> StoredOperands::View(const v1::Tensor& tensor,
                                                std::string_view arg) const {
  if (tensor.has_shared_memory()) {
    if (const auto copy = shared_memory_copies_.find(tensor.SerializeAsString());
        copy != shared_memory_copies_.end()) {
      return copy->second.view();
    }
    const auto region = regions_.find(tensor.shared_memory().region());
    if (region == regions_.end()) {
      return absl::InternalError(absl::StrFormat(
          "%s: %s is in shared-memory region %s, which was not acquired with the request", op_, arg,
          Quoted(tensor.shared_memory().region())));
    }
    TENSOROPS_ASSIGN_OR_RETURN(MutableTensorView view,
                               SharedMemoryView(tensor, *region->second, op_, arg));
    return TensorView(view);
  }
  const std::string& name = tensor.stored().name();
  std::optional<TensorView> view;
  if (const auto mirror = mirrors_.find(name); mirror != mirrors_.end()) {
    view = mirror->second.view();
  } else if (update_.has_value() && update_->held() && update_->name() == name) {
    view = update_->view();
  } else if (const auto it = reads_.find(name); it != reads_.end()) {
    view = it->second.view();
  }
  if (!view.has_value()) {
    return absl::InternalError(absl::StrFormat(
        "%s: %s refers to stored tensor %s, which was not acquired with the request", op_, arg,
        Quoted(name)));
  }
  const bool dtype_differs = tensor.dtype() != v1::DATA_TYPE_UNSPECIFIED &&
                             tensor.dtype() != wire::DataTypeToProto(view->dtype());
  const bool shape_differs =
      tensor.shape_size() > 0 && !std::equal(tensor.shape().begin(), tensor.shape().end(),
                                             view->shape().begin(), view->shape().end());
  if (dtype_differs || shape_differs) {
    // What the reference says, in the stored side's terms: its dtype, its shape, or both.
    std::vector<std::string> says;
    if (tensor.dtype() != v1::DATA_TYPE_UNSPECIFIED) {
      const absl::StatusOr<DataType> dtype = wire::DataTypeFromProto(tensor.dtype(), op_, arg);
      says.push_back(dtype.ok() ? std::string(DataTypeName(*dtype))
                                : v1::DataType_Name(tensor.dtype()));
    }
    if (tensor.shape_size() > 0) {
      says.push_back(absl::StrFormat("%s[%s]", says.empty() ? "shape " : "",
                                     absl::StrJoin(tensor.shape(), ", ")));
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s refers to stored tensor %s (%s [%s]) but says it is %s; a reference's dtype "
        "and shape, when given, must be the stored tensor's",
        op_, arg, Quoted(name), DataTypeName(view->dtype()), absl::StrJoin(view->shape(), ", "),
        absl::StrJoin(says, " ")));
  }
  return *view;
}

absl::Status StoredOperands::CopySharedMemory() {
  if (regions_.empty()) return absl::OkStatus();
  for (const auto& [tensor, arg] : shared_memory_args_) {
    TENSOROPS_RETURN_IF_ERROR(CopyRegionArg(*tensor, arg));
  }
  // The copies are what the client's regions held only if no region shrank under the copying.
  return CheckSharedMemory();
}

absl::Status StoredOperands::CopyRegionArg(const v1::Tensor& tensor, std::string_view arg) {
  std::string key = tensor.SerializeAsString();
  if (shared_memory_copies_.contains(key)) return absl::OkStatus();
  TENSOROPS_ASSIGN_OR_RETURN(const TensorView view, View(tensor, arg));
  Tensor copy(view.dtype(), view.shape());
  if (const TensorMemory* memory = RegionOf(tensor).device_memory(); memory != nullptr) {
    TENSOROPS_RETURN_IF_ERROR(memory->CopyToHost(copy.data(), view.data(), copy.nbytes()));
  } else {
    std::memcpy(copy.data(), view.data(), copy.nbytes());
  }
  shared_memory_copies_.emplace(std::move(key), std::move(copy));
  return absl::OkStatus();
}

const MappedRegion& StoredOperands::RegionOf(const v1::Tensor& tensor) const {
  // Acquire held every region its arguments name.
  return *regions_.at(tensor.shared_memory().region());
}

bool StoredOperands::InDeviceRegion(const v1::Tensor& tensor) const {
  return RegionOf(tensor).on_device() &&
         !shared_memory_copies_.contains(tensor.SerializeAsString());
}

absl::Status StoredOperands::CheckSharedMemory() const {
  for (const auto& [name, region] : regions_) {
    TENSOROPS_RETURN_IF_ERROR(region->CheckIntact(op_));
  }
  return absl::OkStatus();
}

bool StoredOperands::Unmirrored(const std::string& name, const TensorMemory& memory) const {
  return !memory.host_accessible() && !mirrors_.contains(name);
}

bool StoredOperands::UpdateUnmirrored() const {
  return update_.has_value() && update_->held() && Unmirrored(update_->name(), update_->memory());
}

bool StoredOperands::on_device() const {
  for (const auto& [name, read] : reads_) {
    if (Unmirrored(name, read.memory())) return true;
  }
  for (const auto& [tensor, arg] : shared_memory_args_) {
    if (InDeviceRegion(*tensor)) return true;
  }
  return UpdateUnmirrored();
}

bool StoredOperands::in_host_memory() const {
  for (const auto& [name, read] : reads_) {
    if (read.memory().host_accessible()) return true;
  }
  return update_.has_value() && update_->held() && update_->memory().host_accessible();
}

void StoredOperands::MarkResident(DeviceCall& call) const {
  for (const auto& [name, read] : reads_) {
    if (Unmirrored(name, read.memory())) call.MarkResident(read.view().data(), read.bytes());
  }
  if (UpdateUnmirrored()) call.MarkResident(update_->view().data(), update_->bytes());
  // A CUDA region is marked whole: the client may place arguments so that they overlap, and the
  // call then reads them as one span, which lies inside the region but inside no one argument.
  absl::btree_map<std::string, const MappedRegion*> device_regions;
  for (const auto& [tensor, arg] : shared_memory_args_) {
    if (InDeviceRegion(*tensor)) {
      device_regions.emplace(tensor->shared_memory().region(), &RegionOf(*tensor));
    }
  }
  for (const auto& [name, region] : device_regions) {
    if (const absl::StatusOr<char*> whole = region->Slice(0, region->byte_size(), op_);
        whole.ok()) {
      call.MarkResident(*whole, region->byte_size());
    }
  }
}

absl::Status StoredOperands::Mirror(const std::string& name, const TensorView& view,
                                    const TensorMemory& memory) {
  Tensor copy(view.dtype(), view.shape());
  TENSOROPS_RETURN_IF_ERROR(memory.CopyToHost(copy.data(), view.data(), copy.nbytes()));
  mirrors_.emplace(name, std::move(copy));
  return absl::OkStatus();
}

absl::Status StoredOperands::MirrorOnHost(bool include_update) {
  for (const auto& [name, read] : reads_) {
    if (Unmirrored(name, read.memory())) {
      TENSOROPS_RETURN_IF_ERROR(Mirror(name, read.view(), read.memory()));
    }
  }
  if (include_update && UpdateUnmirrored()) {
    TENSOROPS_RETURN_IF_ERROR(Mirror(update_->name(), update_->view(), update_->memory()));
  }
  for (const auto& [tensor, arg] : shared_memory_args_) {
    if (InDeviceRegion(*tensor)) TENSOROPS_RETURN_IF_ERROR(CopyRegionArg(*tensor, arg));
  }
  return absl::OkStatus();
}

MutableTensorView StoredOperands::UpdateHostView() {
  if (const auto mirror = mirrors_.find(update_->name()); mirror != mirrors_.end()) {
    return mirror->second.mutable_view();
  }
  return update_->view();
}

absl::Status StoredOperands::WriteBack() {
  if (!update_.has_value() || !update_->held()) return absl::OkStatus();
  const auto mirror = mirrors_.find(update_->name());
  if (mirror == mirrors_.end()) return absl::OkStatus();
  return update_->memory().CopyFromHost(update_->view().data(), mirror->second.data(),
                                        update_->bytes());
}

namespace {

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

}  // namespace

absl::Status StoredOperands::InlineReads(google::protobuf::Message* message) const {
  const google::protobuf::Reflection* reflection = message->GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(*message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE ||
        field->is_repeated()) {
      continue;
    }
    google::protobuf::Message* value = reflection->MutableMessage(message, field);
    if (field->message_type() != v1::Tensor::descriptor()) {
      TENSOROPS_RETURN_IF_ERROR(InlineReads(value));
      continue;
    }
    auto* tensor = google::protobuf::DynamicCastToGenerated<v1::Tensor>(value);
    const bool read =
        tensor != nullptr && tensor->has_stored() && reads_.contains(tensor->stored().name());
    if (!read && (tensor == nullptr || !tensor->has_shared_memory())) continue;
    TENSOROPS_ASSIGN_OR_RETURN(const TensorView view, View(*tensor, field->name()));
    if (view.on_device()) {
      return absl::InternalError(absl::StrFormat(
          "%s: %s is in device memory; the journal needs it on the host", op_, field->name()));
    }
    v1::Tensor inline_value;
    inline_value.set_dtype(wire::DataTypeToProto(view.dtype()));
    inline_value.mutable_shape()->Assign(view.shape().begin(), view.shape().end());
    inline_value.set_data(static_cast<const char*>(view.data()),
                          static_cast<size_t>(view.numel() * ItemSize(view.dtype())));
    *tensor = std::move(inline_value);
  }
  return absl::OkStatus();
}

absl::Status StoredOperands::JournalTooLarge(size_t bytes) const {
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: a durable store journals an in-place update as one tensorops.v1 message of at most "
      "%d bytes (protobuf's limit), and this update's would be %d (its arguments read from the "
      "store or from shared memory travel in it); update in smaller pieces",
      op_, kMaxJournalCallBytes, bytes));
}

absl::StatusOr<std::string> StoredOperands::JournalCall(
    int op_field, const google::protobuf::Message& request) const {
  std::string call;
  if (reads_.empty() && regions_.empty()) {
    // The OpRequest's encoding written around the request's own: one copy of its bytes, not two.
    const size_t bytes = request.ByteSizeLong();
    // Protobuf writes nothing past its limit (and recovery could not parse it): refused before
    // the update changes anything, not acknowledged with an empty record.
    if (bytes + 16 > kMaxJournalCallBytes) return JournalTooLarge(bytes + 16);
    call.reserve(bytes + 16);
    AppendVarint((static_cast<uint64_t>(op_field) << 3) | 2, &call);  // length-delimited
    AppendVarint(bytes, &call);
    if (!request.AppendToString(&call)) return JournalTooLarge(bytes);
    return call;
  }
  v1::OpRequest copy;
  const google::protobuf::FieldDescriptor* field =
      v1::OpRequest::descriptor()->FindFieldByNumber(op_field);
  if (field == nullptr) {
    return absl::InternalError(absl::StrFormat("%s: OpRequest has no field %d", op_, op_field));
  }
  google::protobuf::Message* op = copy.GetReflection()->MutableMessage(&copy, field);
  op->CopyFrom(request);
  TENSOROPS_RETURN_IF_ERROR(InlineReads(op));
  const size_t bytes = copy.ByteSizeLong();
  if (bytes > kMaxJournalCallBytes || !copy.SerializeToString(&call)) {
    return JournalTooLarge(bytes);
  }
  return call;
}

}  // namespace tensorops
