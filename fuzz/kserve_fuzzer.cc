// kserve_fuzzer: any KServe v2 ModelInferRequest through the translation into tensorops.v1
// (server/kserve/infer_call.h), the op's preparation, its CPU kernel and the response's
// translation back: every output's raw contents must match its datatype and shape.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "fuzz/fuzz_checks.h"
#include "inference/grpc_service.pb.h"
#include "server/core/prepared_op.h"
#include "server/kserve/infer_call.h"
#include "server/kserve/models.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tensorops::fuzz::CheckError;
  inference::ModelInferRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return -1;
  absl::StatusOr<std::unique_ptr<tensorops::kserve::InferCall>> call =
      tensorops::kserve::InferCall::Translate(&request);
  if (!call.ok()) {
    CheckError(call.status());
    return 0;
  }
  inference::ModelInferResponse response;
  if (!tensorops::fuzz::RunPrepared((*call)->Prepare(tensorops::fuzz::kLimits, {}, &response))) {
    return 0;
  }
  if (response.outputs_size() != response.raw_output_contents_size()) {
    tensorops::fuzz::Fail("outputs and raw_output_contents differ in number");
  }
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& output = response.outputs(i);
    absl::StatusOr<tensorops::DataType> dtype =
        tensorops::kserve::DatatypeFromName(output.datatype(), "fuzz", output.name());
    if (!dtype.ok()) tensorops::fuzz::Fail("an output of no datatype:", dtype.status());
    tensorops::v1::Tensor tensor;
    tensor.set_dtype(tensorops::wire::DataTypeToProto(*dtype));
    tensor.mutable_shape()->Assign(output.shape().begin(), output.shape().end());
    tensor.set_data(response.raw_output_contents(i));
    tensorops::fuzz::CheckTensor(tensor, tensorops::fuzz::kLimits);
  }
  return 0;
}
