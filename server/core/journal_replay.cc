#include "server/core/journal_replay.h"

#include <string>

#include "absl/strings/str_format.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/reflection.h"
#include "kernels/status_macros.h"
#include "proto/codec.h"
#include "server/core/prepared_op.h"
#include "tensorops/v1/generic.pb.h"
#include "tensorops/v1/tensor.pb.h"

namespace tensorops {

namespace {

// MutableField returns the message field `name` of `message` as T, or null.
template <typename T>
T* MutableField(google::protobuf::Message* message, const char* name) {
  const google::protobuf::FieldDescriptor* field = message->GetDescriptor()->FindFieldByName(name);
  if (field == nullptr || field->message_type() != T::descriptor()) return nullptr;
  return google::protobuf::DynamicCastToGenerated<T>(
      message->GetReflection()->MutableMessage(message, field));
}

}  // namespace

absl::Status ReplayJournaledUpdate(TensorStore& store, std::string_view ns, std::string_view name,
                                   int64_t from_version, std::string_view call) {
  v1::OpRequest request;
  if (!request.ParseFromArray(call.data(), static_cast<int>(call.size()))) {
    return absl::DataLossError("the recorded call does not parse as a tensorops.v1.OpRequest");
  }
  const google::protobuf::FieldDescriptor* field =
      v1::OpRequest::descriptor()->FindFieldByNumber(request.op_case());
  if (field == nullptr) return absl::DataLossError("the recorded call names no op");
  google::protobuf::Message* op = request.GetReflection()->MutableMessage(&request, field);
  auto* input = MutableField<v1::Tensor>(op, "input");
  auto* options = MutableField<v1::ResultOptions>(op, "result_options");
  if (input == nullptr || options == nullptr) {
    return absl::DataLossError(absl::StrFormat(
        "the recorded call is a %s, which has no input to update in place", field->name()));
  }
  input->mutable_stored()->set_name(std::string(name));
  input->mutable_stored()->set_version(from_version);
  options->set_in_place(true);
  options->set_return_data(false);
  options->clear_update_id();
  v1::Tensor result;
  // The call was within the limits when it first ran; the store's limit still holds.
  TENSOROPS_ASSIGN_OR_RETURN(PreparedOp prepared,
                             PrepareOp(request, wire::DecodeLimits{}, &result, InputReuse::kNo,
                                       {.store = &store, .ns = ns}));
  TENSOROPS_RETURN_IF_ERROR(GuardExceptions(prepared.op, prepared.run));
  if (prepared.finish) TENSOROPS_RETURN_IF_ERROR(prepared.finish());
  return absl::OkStatus();
}

}  // namespace tensorops
