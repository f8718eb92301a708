#include "proto/op_list.h"

#include "google/protobuf/descriptor.h"
#include "tensorops/v1/service.grpc.pb.h"

namespace tensorops::ops {

namespace internal {
const google::protobuf::FieldDescriptor* FieldOfCase(v1::OpRequest::OpCase op_case) {
  return v1::OpRequest::descriptor()->FindFieldByNumber(static_cast<int>(op_case));
}
}  // namespace internal

std::string_view NameOfCase(v1::OpRequest::OpCase op_case) {
  const google::protobuf::FieldDescriptor* field = internal::FieldOfCase(op_case);
  return field == nullptr ? std::string_view() : std::string_view(field->name());
}

std::string_view RpcOfCase(v1::OpRequest::OpCase op_case) {
  const google::protobuf::FieldDescriptor* field = internal::FieldOfCase(op_case);
  if (field == nullptr) return {};
  // The method whose input is the field's message: TensorOps has exactly one per op (checked by
  // tests/op_list_test.cc).
  static const google::protobuf::ServiceDescriptor* const service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          v1::TensorOps::service_full_name());
  for (int i = 0; i < service->method_count(); ++i) {
    if (service->method(i)->input_type() == field->message_type())
      return service->method(i)->name();
  }
  return {};
}

}  // namespace tensorops::ops
