#include "server/kserve/infer_call.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/numeric/int128.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/map.h"
#include "kernels/status_macros.h"
#include "proto/op_list.h"
#include "tensorops/v1/tensor.pb.h"

namespace tensorops::kserve {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using inference::InferParameter;
using inference::ModelInferRequest;

std::string Escaped(std::string_view text) {
  return absl::CHexEscape(absl::string_view(text.data(), text.size()));
}

// The request parameters Triton reserves: `priority` and `timeout` are scheduling hints, accepted
// and ignored (a gRPC deadline bounds a call); `triton_enable_empty_final_response` asks a stream
// for an empty response that ends a request whose model sent its last one without the final flag,
// and every response here is its request's one and final response (marked
// triton_final_response), so there is never one to add; the sequence ones ask for a stateful
// model.
bool IsIgnoredReservedParameter(std::string_view name) {
  return name == "priority" || name == "timeout" || name == "triton_enable_empty_final_response";
}
constexpr std::string_view kSequenceParameters[] = {"sequence_id", "sequence_start",
                                                    "sequence_end"};
// The request parameter that names stored tensors for inputs, for clients that cannot set an
// input's own parameters (stock tritonclient's InferInput has no setter): "input=table,src=g@3".
constexpr std::string_view kStoredInputsParameter = "stored_inputs";

// StoredInput is one entry of the stored_inputs parameter: an input, the stored tensor it names
// and, after '@', the version it expects.
struct StoredInput {
  std::string input;
  std::string name;
  std::optional<int64_t> version;
};

// ParseStoredInputs reads the stored_inputs parameter: comma-separated INPUT=NAME or
// INPUT=NAME@VERSION (stored names never hold '=', ',' or '@').
absl::StatusOr<std::vector<StoredInput>> ParseStoredInputs(const Model& model,
                                                           const InferParameter& parameter) {
  const auto invalid = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: parameter \"%s\" %s (expected a string of INPUT=NAME or INPUT=NAME@VERSION, "
        "comma-separated: \"input=table,src=grads@3\")",
        model.name, kStoredInputsParameter, why));
  };
  if (!parameter.has_string_param()) return invalid("is not a string");
  std::vector<StoredInput> entries;
  for (absl::string_view entry : absl::StrSplit(parameter.string_param(), ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    const std::vector<absl::string_view> sides = absl::StrSplit(entry, absl::MaxSplits('=', 1));
    if (sides.size() != 2 || sides[0].empty() || sides[1].empty()) {
      return invalid(absl::StrFormat("has entry \"%s\"", Escaped(std::string(entry))));
    }
    StoredInput stored{.input = std::string(absl::StripAsciiWhitespace(sides[0]))};
    const std::vector<absl::string_view> name = absl::StrSplit(sides[1], absl::MaxSplits('@', 1));
    stored.name = std::string(absl::StripAsciiWhitespace(name[0]));
    if (name.size() == 2) {
      int64_t version = 0;
      if (!absl::SimpleAtoi(name[1], &version) || version < 1) {
        return invalid(absl::StrFormat("has version \"%s\" in entry \"%s\" (a version is >= 1)",
                                       Escaped(std::string(name[1])), Escaped(std::string(entry))));
      }
      stored.version = version;
    }
    if (stored.name.empty())
      return invalid(absl::StrFormat("has entry \"%s\"", Escaped(std::string(entry))));
    entries.push_back(std::move(stored));
  }
  return entries;
}
// The parameters with which Triton's clients place an input or an output in a registered
// shared-memory region (set_shared_memory).
constexpr char kRegionParameter[] = "shared_memory_region";
constexpr char kByteSizeParameter[] = "shared_memory_byte_size";
constexpr char kOffsetParameter[] = "shared_memory_offset";

bool IsSharedMemoryParameter(std::string_view name) {
  return name == kRegionParameter || name == kByteSizeParameter || name == kOffsetParameter;
}

// KindOf names an InferParameter's kind for messages.
std::string_view KindOf(const InferParameter& parameter) {
  switch (parameter.parameter_choice_case()) {
    case InferParameter::kBoolParam:
      return "bool";
    case InferParameter::kInt64Param:
      return "int64";
    case InferParameter::kStringParam:
      return "string";
    case InferParameter::kDoubleParam:
      return "double";
    case InferParameter::kUint64Param:
      return "uint64";
    case InferParameter::PARAMETER_CHOICE_NOT_SET:
      break;
  }
  return "empty";
}

// ParameterInt is an integer parameter's value (int64, or uint64 that fits).
std::optional<int64_t> ParameterInt(const InferParameter& parameter) {
  if (parameter.has_int64_param()) return parameter.int64_param();
  if (parameter.has_uint64_param() &&
      parameter.uint64_param() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(parameter.uint64_param());
  }
  return std::nullopt;
}

// SharedMemoryRefOf reads the shared-memory parameters of the input or output `tensor` (`kind`
// says which) into `ref`: false when it has none; INVALID_ARGUMENT naming the parameter when
// they are incomplete or of the wrong kind.
absl::StatusOr<bool> SharedMemoryRefOf(
    const Model& model, std::string_view kind, std::string_view tensor,
    const google::protobuf::Map<std::string, InferParameter>& parameters,
    v1::SharedMemoryRef* ref) {
  const auto region = parameters.find(kRegionParameter);
  const auto byte_size = parameters.find(kByteSizeParameter);
  const auto offset = parameters.find(kOffsetParameter);
  if (region == parameters.end()) {
    if (byte_size == parameters.end() && offset == parameters.end()) return false;
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s \"%s\" has parameter \"%s\" but no \"%s\" (the region's name)", model.name, kind,
        Escaped(tensor), byte_size != parameters.end() ? kByteSizeParameter : kOffsetParameter,
        kRegionParameter));
  }
  if (!region->second.has_string_param()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s \"%s\" has parameter \"%s\" of kind %s; it takes a string, the region's name",
        model.name, kind, Escaped(tensor), kRegionParameter, KindOf(region->second)));
  }
  ref->set_region(region->second.string_param());
  const auto integer =
      [&](const google::protobuf::Map<std::string, InferParameter>::const_iterator it,
          std::string_view name) -> absl::StatusOr<int64_t> {
    const std::optional<int64_t> value = ParameterInt(it->second);
    if (!value.has_value() || *value < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %s \"%s\" has parameter \"%s\" of kind %s; it takes an int64 >= 0",
                          model.name, kind, Escaped(tensor), name, KindOf(it->second)));
    }
    return *value;
  };
  if (byte_size == parameters.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s \"%s\" names shared-memory region \"%s\" but has no \"%s\"", model.name, kind,
        Escaped(tensor), Escaped(ref->region()), kByteSizeParameter));
  }
  TENSOROPS_ASSIGN_OR_RETURN(const int64_t bytes, integer(byte_size, kByteSizeParameter));
  ref->set_byte_size(bytes);
  if (offset != parameters.end()) {
    TENSOROPS_ASSIGN_OR_RETURN(const int64_t at, integer(offset, kOffsetParameter));
    ref->set_offset(at);
  }
  return true;
}

// ParseIntegers reads a list parameter: "0,2", "[0, 2]", "" (empty).
std::optional<std::vector<int64_t>> ParseIntegers(std::string_view text) {
  absl::string_view body = absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size()));
  if (absl::ConsumePrefix(&body, "[") != absl::ConsumeSuffix(&body, "]")) return std::nullopt;
  std::vector<int64_t> values;
  if (absl::StripAsciiWhitespace(body).empty()) return values;
  for (absl::string_view item : absl::StrSplit(body, ',')) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(item, &value)) return std::nullopt;
    values.push_back(value);
  }
  return values;
}

// SetParameter sets `field` of `message` from the request parameter of the same name.
absl::Status SetParameter(const Model& model, const FieldDescriptor* field,
                          const InferParameter& parameter, Message* message) {
  const Reflection* reflection = message->GetReflection();
  const auto wrong_kind = [&](std::string_view expected) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: parameter \"%s\" is a %s; expected %s",
                                                      model.name, field->name(), KindOf(parameter),
                                                      expected));
  };
  if (field->message_type() == v1::Scalar::descriptor()) {
    v1::Scalar scalar;
    if (parameter.has_bool_param()) {
      scalar.set_bool_value(parameter.bool_param());
    } else if (parameter.has_double_param()) {
      scalar.set_float_value(parameter.double_param());
    } else if (std::optional<int64_t> value = ParameterInt(parameter)) {
      scalar.set_int_value(*value);
    } else {
      return wrong_kind("a bool, an int64 or a double");
    }
    reflection->MutableMessage(message, field)->CopyFrom(scalar);
    return absl::OkStatus();
  }
  if (field->is_repeated()) {
    std::optional<std::vector<int64_t>> values;
    if (parameter.has_string_param()) {
      values = ParseIntegers(parameter.string_param());
      if (!values.has_value()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: parameter \"%s\" = \"%s\" is not a list of integers (write \"0,2\" or \"[0, 2]\")",
            model.name, field->name(), Escaped(parameter.string_param())));
      }
    } else if (std::optional<int64_t> value = ParameterInt(parameter)) {
      values = std::vector<int64_t>{*value};
    } else {
      return wrong_kind("a string of integers, such as \"0,2\"");
    }
    reflection->ClearField(message, field);
    for (const int64_t value : *values) reflection->AddInt64(message, field, value);
    return absl::OkStatus();
  }
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_BOOL:
      if (!parameter.has_bool_param()) return wrong_kind("a bool");
      reflection->SetBool(message, field, parameter.bool_param());
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_INT64: {
      std::optional<int64_t> value = ParameterInt(parameter);
      if (!value.has_value()) return wrong_kind("an int64");
      reflection->SetInt64(message, field, *value);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_STRING:
      if (!parameter.has_string_param()) return wrong_kind("a string");
      reflection->SetString(message, field, parameter.string_param());
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_ENUM: {
      if (!parameter.has_string_param()) return wrong_kind("a string");
      const std::string wanted = absl::AsciiStrToLower(parameter.string_param());
      std::vector<std::string> names;
      for (int i = 0; i < field->enum_type()->value_count(); ++i) {
        const google::protobuf::EnumValueDescriptor* value = field->enum_type()->value(i);
        names.push_back(EnumParameterName(value));
        if (names.back() == wanted) {
          reflection->SetEnum(message, field, value);
          return absl::OkStatus();
        }
      }
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: parameter \"%s\" = \"%s\" is not one of %s", model.name, field->name(),
          Escaped(parameter.string_param()), absl::StrJoin(names, ", ")));
    }
    default:
      // Every field of the op requests is one of the kinds above (tests/kserve_test.cc walks them
      // all); a new kind needs a case here.
      return absl::InternalError(
          absl::StrFormat("%s: parameter \"%s\" has a field type the "
                          "KServe translation does not handle",
                          model.name, field->name()));
  }
}

// ElementCount is the product of `shape`, or nullopt when a size is negative or it overflows
// (the v1 decoder names those; typed contents cannot be checked against it).
std::optional<int64_t> ElementCount(const google::protobuf::RepeatedField<int64_t>& shape) {
  absl::int128 count = 1;
  for (const int64_t size : shape) {
    if (size < 0) return std::nullopt;
    count *= size;
    if (count > std::numeric_limits<int64_t>::max()) return std::nullopt;
  }
  return static_cast<int64_t>(count);
}

// AppendAs appends `values` to `bytes` as elements of type T, failing for a value T cannot hold.
template <typename T, typename Values>
bool AppendAs(const Values& values, std::string* bytes) {
  bytes->reserve(bytes->size() + values.size() * sizeof(T));
  for (const auto value : values) {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (value < std::numeric_limits<T>::min() || value > std::numeric_limits<T>::max()) {
        return false;
      }
    }
    const T element = static_cast<T>(value);
    bytes->append(reinterpret_cast<const char*>(&element), sizeof(T));
  }
  return true;
}

// TypedContents turns an input's typed `contents` into raw little-endian bytes.
absl::Status TypedContents(const Model& model, const ModelInferRequest::InferInputTensor& input,
                           DataType dtype, std::string* bytes) {
  const inference::InferTensorContents& contents = input.contents();
  const auto count_of = [&](int count, std::string_view field) -> absl::Status {
    std::optional<int64_t> expected = ElementCount(input.shape());
    if (expected.has_value() && *expected != count) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: input \"%s\" has %d elements in contents.%s, but its shape [%s] "
          "holds %d",
          model.name, input.name(), count, field, absl::StrJoin(input.shape(), ", "), *expected));
    }
    return absl::OkStatus();
  };
  bool fits = true;
  std::string_view field;
  switch (dtype) {
    case DataType::kBool:
      field = "bool_contents";
      TENSOROPS_RETURN_IF_ERROR(count_of(contents.bool_contents_size(), field));
      fits = AppendAs<bool>(contents.bool_contents(), bytes);
      break;
    case DataType::kUInt8:
      field = "uint_contents";
      TENSOROPS_RETURN_IF_ERROR(count_of(contents.uint_contents_size(), field));
      fits = AppendAs<uint8_t>(contents.uint_contents(), bytes);
      break;
    case DataType::kInt8:
      field = "int_contents";
      TENSOROPS_RETURN_IF_ERROR(count_of(contents.int_contents_size(), field));
      fits = AppendAs<int8_t>(contents.int_contents(), bytes);
      break;
    case DataType::kInt16:
      field = "int_contents";
      TENSOROPS_RETURN_IF_ERROR(count_of(contents.int_contents_size(), field));
      fits = AppendAs<int16_t>(contents.int_contents(), bytes);
      break;
    case DataType::kInt32:
      field = "int_contents";
      TENSOROPS_RETURN_IF_ERROR(count_of(contents.int_contents_size(), field));
      fits = AppendAs<int32_t>(contents.int_contents(), bytes);
      break;
    case DataType::kInt64:
      field = "int64_contents";
      TENSOROPS_RETURN_IF_ERROR(count_of(contents.int64_contents_size(), field));
      fits = AppendAs<int64_t>(contents.int64_contents(), bytes);
      break;
    case DataType::kFloat32:
      field = "fp32_contents";
      TENSOROPS_RETURN_IF_ERROR(count_of(contents.fp32_contents_size(), field));
      fits = AppendAs<float>(contents.fp32_contents(), bytes);
      break;
    case DataType::kFloat64:
      field = "fp64_contents";
      TENSOROPS_RETURN_IF_ERROR(count_of(contents.fp64_contents_size(), field));
      fits = AppendAs<double>(contents.fp64_contents(), bytes);
      break;
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: input \"%s\" is %s, which has no typed contents; send it in raw_input_contents",
          model.name, input.name(), input.datatype()));
  }
  if (!fits) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: input \"%s\" has a value in contents.%s that %s cannot hold",
                        model.name, input.name(), field, input.datatype()));
  }
  return absl::OkStatus();
}

// InputTensor translates one input into `tensor`, taking the next raw content (`raw`, advanced)
// when the input has neither typed contents nor a stored tensor.
absl::Status InputTensor(const Model& model, ModelInferRequest::InferInputTensor* input,
                         ModelInferRequest* request, int* raw, v1::Tensor* tensor) {
  std::optional<std::string> stored;
  for (const auto& [name, parameter] : input->parameters()) {
    if (IsSharedMemoryParameter(name)) continue;  // read below
    if (name == "stored" && parameter.has_string_param()) {
      tensor->mutable_stored()->set_name(parameter.string_param());
      stored = parameter.string_param();
    } else if (name == "stored_version" && ParameterInt(parameter).has_value()) {
      tensor->mutable_stored()->set_version(*ParameterInt(parameter));
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: input \"%s\" has parameter \"%s\" (%s); an input takes only \"stored\" (a string, "
          "the name of a stored tensor) and \"stored_version\" (an int64), or the shared-memory "
          "parameters \"shared_memory_region\", \"shared_memory_byte_size\" and "
          "\"shared_memory_offset\"",
          model.name, input->name(), Escaped(name), KindOf(parameter)));
    }
  }
  v1::SharedMemoryRef ref;
  TENSOROPS_ASSIGN_OR_RETURN(
      const bool in_shared_memory,
      SharedMemoryRefOf(model, "input", input->name(), input->parameters(), &ref));
  if (in_shared_memory) {
    if (stored.has_value() || tensor->has_stored() || input->has_contents()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: input \"%s\" is in shared-memory region \"%s\" and also %s; send one", model.name,
          input->name(), Escaped(ref.region()),
          input->has_contents() ? "sends contents" : "names a stored tensor"));
    }
    // Its bytes are in the region: dtype and shape say how many, and no raw content is taken.
    TENSOROPS_ASSIGN_OR_RETURN(DataType dtype,
                               DatatypeFromName(input->datatype(), model.name, input->name()));
    tensor->set_dtype(wire::DataTypeToProto(dtype));
    tensor->mutable_shape()->Assign(input->shape().begin(), input->shape().end());
    *tensor->mutable_shared_memory() = std::move(ref);
    return absl::OkStatus();
  }
  if (tensor->has_stored() && !stored.has_value()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: input \"%s\" has stored_version but no \"stored\" name", model.name, input->name()));
  }
  if (stored.has_value()) {
    if (input->has_contents()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: input \"%s\" names stored tensor \"%s\" and also sends contents; send one",
          model.name, input->name(), Escaped(*stored)));
    }
    // A reference may state the stored tensor's datatype, its shape, or both; each one given is
    // checked against the stored tensor on its own (StoredOperands::View), so a shape without a
    // datatype is not taken on trust.
    if (!input->datatype().empty()) {
      TENSOROPS_ASSIGN_OR_RETURN(DataType dtype,
                                 DatatypeFromName(input->datatype(), model.name, input->name()));
      tensor->set_dtype(wire::DataTypeToProto(dtype));
    }
    tensor->mutable_shape()->Assign(input->shape().begin(), input->shape().end());
    return absl::OkStatus();
  }
  TENSOROPS_ASSIGN_OR_RETURN(DataType dtype,
                             DatatypeFromName(input->datatype(), model.name, input->name()));
  tensor->set_dtype(wire::DataTypeToProto(dtype));
  tensor->mutable_shape()->Assign(input->shape().begin(), input->shape().end());
  if (input->has_contents()) return TypedContents(model, *input, dtype, tensor->mutable_data());
  if (*raw >= request->raw_input_contents_size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: input \"%s\" has no contents: raw_input_contents has %d entries, one per input "
        "without typed contents, a stored tensor or a shared-memory region, in the order of inputs",
        model.name, input->name(), request->raw_input_contents_size()));
  }
  tensor->mutable_data()->swap(*request->mutable_raw_input_contents(*raw));
  ++*raw;
  return absl::OkStatus();
}

// OutputTensor puts `result` into `response` as output `name`, moving its bytes.
absl::Status OutputTensor(const Model& model, std::string_view name, v1::Tensor* result,
                          inference::ModelInferResponse* response, bool in_shared_memory = false) {
  inference::ModelInferResponse::InferOutputTensor* output = response->add_outputs();
  output->set_name(std::string(name));
  if (result->dtype() != v1::DATA_TYPE_UNSPECIFIED) {
    TENSOROPS_ASSIGN_OR_RETURN(DataType dtype,
                               wire::DataTypeFromProto(result->dtype(), model.name, name));
    std::optional<std::string_view> datatype = DatatypeName(dtype);
    if (!datatype.has_value()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: output \"%s\" is %s, which the KServe v2 protocol cannot carry (it has no complex "
          "datatypes); call tensorops.v1 for complex tensors",
          model.name, name, DataTypeName(dtype)));
    }
    output->set_datatype(std::string(*datatype));
    output->mutable_shape()->Assign(result->shape().begin(), result->shape().end());
  }
  if (result->has_stored()) {
    // A stored result: where it is, and its bytes only when return_data asked for them.
    (*output->mutable_parameters())["stored"].set_string_param(result->stored().name());
    (*output->mutable_parameters())["stored_version"].set_int64_param(result->stored().version());
    const bool has_elements = std::none_of(output->shape().begin(), output->shape().end(),
                                           [](int64_t size) { return size == 0; });
    if (result->data().empty() && !output->datatype().empty() && has_elements) {
      // Without its bytes the output says shape [0], which a client reads as an empty array
      // (tritonclient's as_numpy could not reshape no bytes to the stored shape, nor to a
      // scalar's []), and the stored tensor's shape travels as the parameter "stored_shape":
      // "4,6", or "" for a scalar.
      (*output->mutable_parameters())["stored_shape"].set_string_param(
          absl::StrJoin(output->shape(), ","));
      output->clear_shape();
      output->add_shape(0);
    }
  }
  // A result written into shared memory has no raw content (as Triton answers): the client
  // reads the region.
  if (!in_shared_memory) response->add_raw_output_contents()->swap(*result->mutable_data());
  return absl::OkStatus();
}

}  // namespace

std::string_view InferCall::ModelName(const ModelInferRequest& request) {
  absl::StatusOr<const Model*> model = FindModel(request.model_name(), "");
  return model.ok() ? std::string_view((*model)->name) : std::string_view("model_infer");
}

absl::StatusOr<std::unique_ptr<InferCall>> InferCall::Translate(ModelInferRequest* request) {
  TENSOROPS_ASSIGN_OR_RETURN(const Model* model,
                             FindModel(request->model_name(), request->model_version()));
  std::unique_ptr<InferCall> call(new InferCall(*model));
  call->request_id_ = request->id();
  // The op's request inside the v1 call.
  v1::OpRequest* forward = model->backward ? call->backward_.mutable_op() : &call->op_;
  Message* op_request = nullptr;
  ops::VisitCase(
      model->op, [&]<typename Op>(Op) { op_request = ops::Mutable<Op>(forward); }, [] {});

  // Checked in a fixed order (a map's is not), so the message names the same one every time.
  for (const std::string_view name : kSequenceParameters) {
    if (request->parameters().contains(std::string(name))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: parameter \"%s\" asks for a sequence, but tensorops' models are stateless: send "
          "each call on its own",
          model->name, name));
    }
  }
  for (const auto& [name, parameter] : request->parameters()) {
    if (IsIgnoredReservedParameter(name) || name == kStoredInputsParameter) continue;
    const FieldDescriptor* field = model->FindParameter(name);
    if (field == nullptr) {
      const bool is_input = model->FindInput(name) != nullptr;
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: \"%s\" is not a parameter of this model%s (parameters: %s)", model->name,
          Escaped(name), is_input ? "; it is an input, sent as a tensor" : "",
          model->ParameterNames()));
    }
    Message* target = op_request;
    if (field->containing_type() == v1::ResultOptions::descriptor()) {
      target = op_request->GetReflection()->MutableMessage(
          op_request, op_request->GetDescriptor()->FindFieldByName("result_options"));
    }
    TENSOROPS_RETURN_IF_ERROR(SetParameter(*model, field, parameter, target));
  }

  std::vector<bool> given(model->inputs.size(), false);
  // Claim returns the v1 tensor of input `name`, given once (by `how`), or the error.
  const auto claim = [&](const std::string& name,
                         std::string_view how) -> absl::StatusOr<v1::Tensor*> {
    const ModelInput* model_input = model->FindInput(name);
    if (model_input == nullptr) {
      std::vector<std::string> names;
      for (const ModelInput& candidate : model->inputs) names.push_back(candidate.name);
      const bool is_parameter = model->FindParameter(name) != nullptr;
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: \"%s\"%s is not an input of this model%s (inputs: %s)", model->name, Escaped(name),
          how, is_parameter ? "; it is a parameter, sent in parameters" : "",
          absl::StrJoin(names, ", ")));
    }
    const size_t position = model_input - model->inputs.data();
    if (given[position]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: input \"%s\" is given twice (in inputs, or in inputs and the request parameter "
          "\"%s\")",
          model->name, name, kStoredInputsParameter));
    }
    given[position] = true;
    // An input that shares a oneof with a parameter (scatter's src and value) is an alternative
    // to it: setting the input would clear the parameter without a word.
    const google::protobuf::OneofDescriptor* oneof =
        model_input->field == nullptr ? nullptr : model_input->field->real_containing_oneof();
    if (oneof != nullptr && op_request->GetReflection()->HasOneof(*op_request, oneof)) {
      const FieldDescriptor* other =
          op_request->GetReflection()->GetOneofFieldDescriptor(*op_request, oneof);
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: input \"%s\" and parameter \"%s\" are alternatives (one of %s); send only one",
          model->name, name, other->name(), oneof->name()));
    }
    return model_input->field == nullptr
               ? call->backward_.mutable_grad_output()
               : static_cast<v1::Tensor*>(
                     op_request->GetReflection()->MutableMessage(op_request, model_input->field));
  };
  int raw = 0;
  for (ModelInferRequest::InferInputTensor& input : *request->mutable_inputs()) {
    TENSOROPS_ASSIGN_OR_RETURN(v1::Tensor * tensor, claim(input.name(), ""));
    TENSOROPS_RETURN_IF_ERROR(InputTensor(*model, &input, request, &raw, tensor));
  }
  if (const auto it = request->parameters().find(std::string(kStoredInputsParameter));
      it != request->parameters().end()) {
    TENSOROPS_ASSIGN_OR_RETURN(const std::vector<StoredInput> stored_inputs,
                               ParseStoredInputs(*model, it->second));
    for (const StoredInput& stored : stored_inputs) {
      TENSOROPS_ASSIGN_OR_RETURN(
          v1::Tensor * tensor,
          claim(stored.input, absl::StrFormat(" (in parameter \"%s\")", kStoredInputsParameter)));
      tensor->mutable_stored()->set_name(stored.name);
      if (stored.version.has_value()) tensor->mutable_stored()->set_version(*stored.version);
    }
  }
  if (raw != request->raw_input_contents_size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: raw_input_contents has %d entries, but %d inputs take theirs from it (one entry per "
        "input without typed contents, a stored tensor or a shared-memory region, in the order of "
        "inputs)",
        model->name, request->raw_input_contents_size(), raw));
  }
  for (size_t i = 0; i < model->inputs.size(); ++i) {
    const ModelInput& input = model->inputs[i];
    if (!given[i] && !input.optional) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: input \"%s\" is missing", model->name, input.name));
    }
  }
  for (const ModelInferRequest::InferRequestedOutputTensor& output : request->outputs()) {
    if (std::find(model->outputs.begin(), model->outputs.end(), output.name()) ==
        model->outputs.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: \"%s\" is not an output of this model (outputs: %s)", model->name,
                          Escaped(output.name()), absl::StrJoin(model->outputs, ", ")));
    }
    v1::SharedMemoryRef ref;
    TENSOROPS_ASSIGN_OR_RETURN(
        const bool in_shared_memory,
        SharedMemoryRefOf(*model, "output", output.name(), output.parameters(), &ref));
    if (in_shared_memory && model->backward) {
      // Gradients are computed into tensors of their own: Respond copies each into its region.
      call->gradient_regions_[output.name()] = ref;
    } else if (in_shared_memory) {
      // The op writes its result into the region (ResultOptions.shared_memory).
      Message* options = op_request->GetReflection()->MutableMessage(
          op_request, op_request->GetDescriptor()->FindFieldByName("result_options"));
      *static_cast<v1::ResultOptions*>(options)->mutable_shared_memory() = std::move(ref);
    }
    // Anything else asks for an output other than the tensor (Triton's "classification"):
    // refused as an input's unknown parameter is, not ignored. The first name in order, so the
    // message names the same one every time.
    std::optional<google::protobuf::Map<std::string, InferParameter>::const_iterator> first;
    for (auto it = output.parameters().begin(); it != output.parameters().end(); ++it) {
      if (IsSharedMemoryParameter(it->first)) continue;
      if (!first.has_value() || it->first < (*first)->first) first = it;
    }
    if (first.has_value()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: output \"%s\" has parameter \"%s\" (%s); an output takes only the shared-memory "
          "parameters \"shared_memory_region\", \"shared_memory_byte_size\" and "
          "\"shared_memory_offset\"",
          model->name, output.name(), Escaped((*first)->first), KindOf((*first)->second)));
    }
    if (std::find(call->requested_outputs_.begin(), call->requested_outputs_.end(),
                  output.name()) != call->requested_outputs_.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: output \"%s\" is requested twice", model->name, output.name()));
    }
    call->requested_outputs_.push_back(output.name());
  }
  return call;
}

absl::StatusOr<PreparedOp> InferCall::Prepare(const wire::DecodeLimits& limits,
                                              const StoredTensors& stored,
                                              inference::ModelInferResponse* response) {
  // The regions gradients go to are found now, with the arguments' (one name, one region for the
  // whole call, though it may be registered again before Respond).
  for (const auto& [output, ref] : gradient_regions_) {
    TENSOROPS_ASSIGN_OR_RETURN(
        gradient_targets_[output],
        FindRegion(stored.regions, stored.ns, ref,
                   absl::StrFormat("%s: output \"%s\"", model_->name, output)));
  }
  // The v1 request is this call's own and nothing reads it after the op has run, so the op may
  // take its input bytes as the result.
  TENSOROPS_ASSIGN_OR_RETURN(
      PreparedOp prepared,
      model_->backward ? PrepareBackward(backward_, limits, &gradients_, stored)
                       : PrepareOp(op_, limits, &result_, InputReuse::kMayTakeInput, stored));
  prepared.finish = [this, response, finish = std::move(prepared.finish)]() -> absl::Status {
    if (finish) TENSOROPS_RETURN_IF_ERROR(finish());
    return Respond(response);
  };
  return prepared;
}

absl::Status InferCall::Respond(inference::ModelInferResponse* response) {
  response->set_model_name(model_->name);
  response->set_model_version(std::string(kModelVersion));
  response->set_id(request_id_);
  const auto wanted = [&](std::string_view output) {
    return requested_outputs_.empty() ||
           std::find(requested_outputs_.begin(), requested_outputs_.end(), output) !=
               requested_outputs_.end();
  };
  if (!model_->backward) {
    if (wanted("output")) {
      const bool in_shared_memory = ops::VisitCase(
          model_->op,
          [&]<typename Op>(Op) { return ops::Get<Op>(op_).result_options().has_shared_memory(); },
          [] { return false; });
      TENSOROPS_RETURN_IF_ERROR(
          OutputTensor(*model_, "output", &result_, response, in_shared_memory));
    }
    return absl::OkStatus();
  }
  // The gradients come keyed by argument ("input", "src"), in the order the request asked for
  // them, else in the model's.
  for (const std::string& output :
       requested_outputs_.empty() ? model_->outputs : requested_outputs_) {
    auto gradient =
        gradients_.mutable_gradients()->find(output.substr(std::string("grad_").size()));
    if (gradient == gradients_.mutable_gradients()->end()) {
      // A gradient the call has none of (scatter's src given as the scalar `value`): left out
      // when the model's outputs are implied, refused when the client asked for it by name, as
      // it may be waiting for it in a region.
      if (requested_outputs_.empty()) continue;
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: output \"%s\" was requested, but this call has no such gradient (its argument "
          "\"%s\" is not a tensor of the call); ask for the other outputs only",
          model_->name, output, output.substr(std::string("grad_").size())));
    }
    const auto region = gradient_regions_.find(output);
    if (region != gradient_regions_.end()) {
      v1::Tensor& value = gradient->second;
      const std::string what = absl::StrFormat("%s: output \"%s\"", model_->name, output);
      TENSOROPS_ASSIGN_OR_RETURN(
          const RegionBytes target,
          SliceBytes(gradient_targets_.at(output), region->second,
                     static_cast<int64_t>(value.data().size()), /*exactly=*/false, what));
      TENSOROPS_RETURN_IF_ERROR(
          CopyIntoRegion(target, value.data().data(), static_cast<int64_t>(value.data().size())));
      TENSOROPS_RETURN_IF_ERROR(target.region->CheckIntact(what));
      value.clear_data();
    }
    TENSOROPS_RETURN_IF_ERROR(OutputTensor(*model_, output, &gradient->second, response,
                                           /*in_shared_memory=*/region != gradient_regions_.end()));
  }
  return absl::OkStatus();
}

}  // namespace tensorops::kserve
