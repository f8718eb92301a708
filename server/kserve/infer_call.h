// InferCall: one KServe v2 ModelInferRequest, translated into the tensorops.v1 call it stands for,
// prepared by the same code (server/core/prepared_op.h), and its result translated back.
//
//   absl::StatusOr<std::unique_ptr<InferCall>> call = InferCall::Translate(&request);
//   if (!call.ok()) return call.status();
//   absl::StatusOr<PreparedOp> op = (*call)->Prepare(limits, stored, &response);
//   // op->run(), then op->finish(), which writes `response`; the call must outlive the op.
//
// Translation moves the request's raw contents into the v1 request (no copy), and the result's
// bytes into the response's raw contents (no copy either). docs/kserve.md is the mapping.
#ifndef TENSOROPS_SERVER_KSERVE_INFER_CALL_H_
#define TENSOROPS_SERVER_KSERVE_INFER_CALL_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "inference/grpc_service.pb.h"
#include "proto/codec.h"
#include "server/core/prepared_op.h"
#include "server/core/stored_operands.h"
#include "server/kserve/models.h"
#include "server/shared_memory/regions.h"
#include "tensorops/v1/generic.pb.h"
#include "tensorops/v1/tensor.pb.h"

namespace tensorops::kserve {

class InferCall {
 public:
  // Translate reads `request` (taking its raw contents; the rest is left as it was) into the
  // call: NOT_FOUND for an unknown model, INVALID_ARGUMENT naming the model and the input or
  // parameter for anything malformed (a datatype, contents that do not match, an unknown
  // parameter). The op's own checks run later, in Prepare.
  static absl::StatusOr<std::unique_ptr<InferCall>> Translate(
      inference::ModelInferRequest* request);

  // ModelName is the name of the model `request` asks for when it is one ("gather"), for
  // metrics before translation; "model_infer" otherwise (a fixed label: never the client's
  // string).
  static std::string_view ModelName(const inference::ModelInferRequest& request);

  const Model& model() const { return *model_; }

  // Prepare runs PrepareOp (or PrepareBackward) on the translated call; the op's finish step
  // fills `response` (which must outlive the op) with the requested outputs. The InferCall must
  // outlive the returned op: the plan reads its bytes.
  absl::StatusOr<PreparedOp> Prepare(const wire::DecodeLimits& limits, const StoredTensors& stored,
                                     inference::ModelInferResponse* response);

 private:
  explicit InferCall(const Model& model) : model_(&model) {}

  // Respond fills `response` from the result once the op has run.
  absl::Status Respond(inference::ModelInferResponse* response);

  const Model* model_;
  std::string request_id_;
  // The outputs asked for, in the request's order; empty: all.
  std::vector<std::string> requested_outputs_;
  // The v1 call: `op` for a forward model; `backward` (whose op is the forward) for a backward.
  v1::OpRequest op_;
  v1::BackwardRequest backward_;
  // Where the v1 result goes.
  v1::Tensor result_;
  v1::BackwardResponse gradients_;
  // A gradient model's outputs asked for in shared memory, by output name, and the regions they
  // name (found by Prepare); Respond copies each gradient there.
  std::map<std::string, v1::SharedMemoryRef> gradient_regions_;
  std::map<std::string, std::shared_ptr<const MappedRegion>> gradient_targets_;
};

}  // namespace tensorops::kserve

#endif  // TENSOROPS_SERVER_KSERVE_INFER_CALL_H_
