// The models the KServe v2 protocol serves: each op of the op table (proto/op_list.h) under its
// name ("gather"), and each op's backward ("gather_backward"). A model's inputs and attributes
// are read from its tensorops.v1 request message by reflection, so an op added to the table is a
// model without a line here:
//
//   a field of type Tensor       an input of that name ("input", "index", "src", "mask")
//   any other field              a request parameter of that name ("axis", "reduce", "axes")
//   ResultOptions' fields        request parameters too ("store_as", "in_place", ...)
//
// A backward model takes the forward's inputs and "grad_output", and returns "grad_<arg>" for
// each differentiable input (docs/kserve.md).
#ifndef TENSOROPS_SERVER_KSERVE_MODELS_H_
#define TENSOROPS_SERVER_KSERVE_MODELS_H_

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/descriptor.h"
#include "inference/grpc_service.pb.h"
#include "kernels/dtype.h"
#include "tensorops/v1/generic.pb.h"

namespace tensorops::kserve {

// The one version every model has.
inline constexpr std::string_view kModelVersion = "1";

// ModelInput is one tensor input of a model.
struct ModelInput {
  std::string name;
  // The datatype metadata names for it (any the op takes is accepted).
  std::string_view usual_datatype;
  bool optional = false;
  // The field of the op's request it fills; null for a backward's grad_output.
  const google::protobuf::FieldDescriptor* field = nullptr;
};

// Model is one model: an op, forward or backward.
struct Model {
  // "gather", "gather_backward": the name metrics and logs give the call too.
  std::string name;
  v1::OpRequest::OpCase op = v1::OpRequest::OP_NOT_SET;
  bool backward = false;
  // The op's request message type (GatherRequest, ...).
  const google::protobuf::Descriptor* request = nullptr;
  std::vector<ModelInput> inputs;
  // The request fields that travel as parameters, in field order ("axis", "reduce", ...); the
  // result options' fields follow for forward models.
  std::vector<const google::protobuf::FieldDescriptor*> parameters;
  // "output", or "grad_input" and "grad_src" for a backward.
  std::vector<std::string> outputs;

  const ModelInput* FindInput(std::string_view input) const;
  const google::protobuf::FieldDescriptor* FindParameter(std::string_view parameter) const;
  // ParameterNames lists the parameters for error messages: "axis, broadcast, store_as, ...".
  std::string ParameterNames() const;
};

// AllModels lists every model, each op's forward and then its backward, in the op table's order.
const std::vector<Model>& AllModels();

// FindModel is the model `name` at `version` ("" or kModelVersion); NOT_FOUND naming what was
// asked for and listing the models otherwise.
absl::StatusOr<const Model*> FindModel(std::string_view name, std::string_view version);

// DatatypeName is the v2 name of `dtype` ("FP32"); nullopt for the complex dtypes, which have
// none.
std::optional<std::string_view> DatatypeName(DataType dtype);
// DatatypeFromName parses a v2 datatype name; INVALID_ARGUMENT naming `model`, `input` and the
// name otherwise (the complex names get a message pointing to tensorops.v1).
absl::StatusOr<DataType> DatatypeFromName(std::string_view name, std::string_view model,
                                          std::string_view input);

// EnumParameterName is the name an enum value travels under as a string parameter: the value's
// name without its type's prefix, in lower case (REDUCTION_SUM: "sum").
std::string EnumParameterName(const google::protobuf::EnumValueDescriptor* value);

// DescribeMetadata and DescribeConfig answer ModelMetadata and ModelConfig for `model`.
void DescribeMetadata(const Model& model, inference::ModelMetadataResponse* response);
void DescribeConfig(const Model& model, inference::ModelConfig* config);

}  // namespace tensorops::kserve

#endif  // TENSOROPS_SERVER_KSERVE_MODELS_H_
