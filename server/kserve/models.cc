#include "server/kserve/models.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "proto/op_list.h"
#include "server/core/prepared_op.h"
#include "tensorops/v1/tensor.pb.h"

namespace tensorops::kserve {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// The v2 names of the dtypes tensorops serves, in DataType order; the complex ones have none.
struct DatatypeNameEntry {
  DataType dtype;
  std::string_view name;
};
constexpr DatatypeNameEntry kDatatypeNames[] = {
    {DataType::kBool, "BOOL"},    {DataType::kUInt8, "UINT8"},   {DataType::kInt8, "INT8"},
    {DataType::kInt16, "INT16"},  {DataType::kInt32, "INT32"},   {DataType::kInt64, "INT64"},
    {DataType::kFloat16, "FP16"}, {DataType::kBFloat16, "BF16"}, {DataType::kFloat32, "FP32"},
    {DataType::kFloat64, "FP64"},
};

// UsualDatatype is what metadata names for an input: indices are usually INT64 and masks BOOL;
// every other input is data, of any dtype, FP32 the usual.
std::string_view UsualDatatype(std::string_view input) {
  if (input == "index") return "INT64";
  if (input == "mask") return "BOOL";
  return "FP32";
}

bool IsTensor(const FieldDescriptor* field) {
  return field->message_type() == v1::Tensor::descriptor();
}

// InputIsOptional: an input another field can stand in for. Scatter's src shares a oneof with
// the scalar `value`; scatter_nd's input may be left out for its `shape` (zeros of that shape).
bool InputIsOptional(const FieldDescriptor* field) {
  if (field->containing_oneof() != nullptr) return true;
  return field->containing_type() == v1::ScatterNdRequest::descriptor() && field->name() == "input";
}

Model MakeModel(v1::OpRequest::OpCase op, std::string_view name, bool backward,
                const Descriptor* request) {
  Model model{.name = std::string(name), .op = op, .backward = backward, .request = request};
  std::vector<const FieldDescriptor*> result_options;
  for (int i = 0; i < request->field_count(); ++i) {
    const FieldDescriptor* field = request->field(i);
    if (IsTensor(field)) {
      model.inputs.push_back(ModelInput{.name = std::string(field->name()),
                                        .usual_datatype = UsualDatatype(field->name()),
                                        .optional = InputIsOptional(field),
                                        .field = field});
      // The gradient of every data input, in the order of the inputs.
      if (backward && (field->name() == "input" || field->name() == "src")) {
        model.outputs.push_back(absl::StrCat("grad_", field->name()));
      }
    } else if (field->message_type() == v1::ResultOptions::descriptor()) {
      // A backward returns its gradients and stores nothing (PrepareBackward refuses options).
      if (backward) continue;
      // Its messages are not parameters: a result in shared memory is asked for by the output's
      // own shared_memory_* parameters (Triton's form), as inputs are.
      const Descriptor* options = field->message_type();
      for (int j = 0; j < options->field_count(); ++j) {
        if (options->field(j)->message_type() == nullptr) {
          result_options.push_back(options->field(j));
        }
      }
    } else {
      model.parameters.push_back(field);
    }
  }
  model.parameters.insert(model.parameters.end(), result_options.begin(), result_options.end());
  if (backward) {
    model.inputs.push_back(ModelInput{.name = "grad_output", .usual_datatype = "FP32"});
  } else {
    model.outputs.push_back("output");
  }
  return model;
}

// ParameterKind says in words what a parameter's value is, for ModelConfig.
std::string ParameterKind(const FieldDescriptor* field) {
  if (field->message_type() == v1::Scalar::descriptor()) return "bool, int64 or double";
  if (field->is_repeated()) return "integers, as a string: \"0,2\" or \"[0, 2]\"";
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_BOOL:
      return "bool";
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
      return "int64";
    case FieldDescriptor::CPPTYPE_STRING:
      return "string";
    case FieldDescriptor::CPPTYPE_ENUM: {
      std::vector<std::string> names;
      for (int i = 0; i < field->enum_type()->value_count(); ++i) {
        names.push_back(EnumParameterName(field->enum_type()->value(i)));
      }
      return absl::StrCat("string: ", absl::StrJoin(names, ", "));
    }
    default:
      return "unsupported";
  }
}

}  // namespace

std::string EnumParameterName(const google::protobuf::EnumValueDescriptor* value) {
  // Enum values are prefixed with their type's name in upper snake case (Reduction:
  // REDUCTION_), as the protobuf style guide asks.
  std::string name(value->name());
  const size_t prefix = name.find('_');
  if (prefix != std::string::npos) name = name.substr(prefix + 1);
  return absl::AsciiStrToLower(name);
}

const ModelInput* Model::FindInput(std::string_view input) const {
  for (const ModelInput& candidate : inputs) {
    if (candidate.name == input) return &candidate;
  }
  return nullptr;
}

const FieldDescriptor* Model::FindParameter(std::string_view parameter) const {
  for (const FieldDescriptor* field : parameters) {
    if (field->name() == parameter) return field;
  }
  return nullptr;
}

std::string Model::ParameterNames() const {
  return absl::StrJoin(parameters, ", ", [](std::string* out, const FieldDescriptor* field) {
    absl::StrAppend(out, field->name());
  });
}

const std::vector<Model>& AllModels() {
  static const std::vector<Model>* const models = [] {
    auto* all = new std::vector<Model>;
    ops::ForEachOp([&]<typename Op>(Op) {
      const Descriptor* request = Op::Request::descriptor();
      all->push_back(MakeModel(Op::kCase, ops::Name<Op>(), /*backward=*/false, request));
      v1::OpRequest forward;
      ops::Mutable<Op>(&forward);
      all->push_back(MakeModel(Op::kCase, BackwardOpName(forward), /*backward=*/true, request));
    });
    return all;
  }();
  return *models;
}

absl::StatusOr<const Model*> FindModel(std::string_view name, std::string_view version) {
  for (const Model& model : AllModels()) {
    if (model.name != name) continue;
    if (!version.empty() && version != kModelVersion) {
      return absl::NotFoundError(absl::StrFormat(
          "model \"%s\" has no version \"%s\" (its one version is \"%s\"; an empty version "
          "means it)",
          name, absl::CHexEscape(absl::string_view(version.data(), version.size())),
          kModelVersion));
    }
    return &model;
  }
  std::vector<std::string> names;
  for (const Model& model : AllModels()) names.push_back(model.name);
  return absl::NotFoundError(absl::StrFormat(
      "no model is named \"%s\"; the models are tensorops' ops and their backwards: %s",
      absl::CHexEscape(absl::string_view(name.data(), name.size())), absl::StrJoin(names, ", ")));
}

std::optional<std::string_view> DatatypeName(DataType dtype) {
  for (const DatatypeNameEntry& entry : kDatatypeNames) {
    if (entry.dtype == dtype) return entry.name;
  }
  return std::nullopt;
}

absl::StatusOr<DataType> DatatypeFromName(std::string_view name, std::string_view model,
                                          std::string_view input) {
  for (const DatatypeNameEntry& entry : kDatatypeNames) {
    if (entry.name == name) return entry.dtype;
  }
  const std::string escaped = absl::CHexEscape(absl::string_view(name.data(), name.size()));
  if (name == "COMPLEX64" || name == "COMPLEX128") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: input \"%s\" has datatype %s, which the KServe v2 protocol cannot carry (it has no "
        "complex datatypes); call tensorops.v1 (tensorops.v1.TensorOps) for complex tensors",
        model, input, escaped));
  }
  std::vector<std::string> names;
  for (const DatatypeNameEntry& entry : kDatatypeNames) names.emplace_back(entry.name);
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: input \"%s\" has datatype \"%s\", which tensorops does not serve "
                      "(datatypes: %s)",
                      model, input, escaped, absl::StrJoin(names, ", ")));
}

void DescribeMetadata(const Model& model, inference::ModelMetadataResponse* response) {
  response->set_name(model.name);
  response->add_versions(std::string(kModelVersion));
  response->set_platform("tensorops");
  for (const ModelInput& input : model.inputs) {
    inference::ModelMetadataResponse::TensorMetadata* tensor = response->add_inputs();
    tensor->set_name(input.name);
    tensor->set_datatype(std::string(input.usual_datatype));
    tensor->add_shape(-1);
  }
  for (const std::string& output : model.outputs) {
    inference::ModelMetadataResponse::TensorMetadata* tensor = response->add_outputs();
    tensor->set_name(output);
    // An output has its data input's datatype.
    tensor->set_datatype("FP32");
    tensor->add_shape(-1);
  }
}

void DescribeConfig(const Model& model, inference::ModelConfig* config) {
  // Triton's enum for the v2 names metadata uses: TYPE_ + the name.
  const auto config_type = [](std::string_view datatype) {
    inference::DataType type = inference::TYPE_INVALID;
    inference::DataType_Parse("TYPE_" + std::string(datatype), &type);
    return type;
  };
  config->set_name(model.name);
  config->set_platform("tensorops");
  config->set_backend("tensorops");
  config->set_max_batch_size(0);
  for (const ModelInput& input : model.inputs) {
    inference::ModelInput* described = config->add_input();
    described->set_name(input.name);
    described->set_data_type(config_type(input.usual_datatype));
    described->add_dims(-1);
    described->set_optional(input.optional);
  }
  for (const std::string& output : model.outputs) {
    inference::ModelOutput* described = config->add_output();
    described->set_name(output);
    described->set_data_type(inference::TYPE_FP32);
    described->add_dims(-1);
  }
  for (const FieldDescriptor* field : model.parameters) {
    (*config->mutable_parameters())[std::string(field->name())].set_string_value(
        ParameterKind(field));
  }
}

}  // namespace tensorops::kserve
