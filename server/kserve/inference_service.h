// InferenceService: KServe's Open Inference Protocol (v2), `inference.GRPCInferenceService`,
// served on the same server and port as tensorops.v1 (docs/kserve.md). Models are the op table's
// ops and their backwards (models.h); a ModelInfer is translated into the tensorops.v1 call it
// stands for (infer_call.h) and runs through the same call core (server/core/op_call.h): the same
// token check, limits, scheduler, deadlines, placement, metrics, logs and error messages.
#ifndef TENSOROPS_SERVER_KSERVE_INFERENCE_SERVICE_H_
#define TENSOROPS_SERVER_KSERVE_INFERENCE_SERVICE_H_

#include <atomic>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/core/op_call.h"
#include "server/tensorops_v1/run_stream.h"

namespace tensorops::kserve {

class InferenceService final : public inference::GRPCInferenceService::CallbackService {
 public:
  // `serving` must outlive the service.
  explicit InferenceService(const ServingContext& serving);

  InferenceService(const InferenceService&) = delete;
  InferenceService& operator=(const InferenceService&) = delete;

  // BeginShutdown makes ServerReady answer false, and every open ModelStreamInfer (and any opened
  // later) end with UNAVAILABLE once it has answered what it has read.
  void BeginShutdown();
  // AwaitStreamsEnded waits until the streams open at BeginShutdown have ended, or `deadline`.
  bool AwaitStreamsEnded(absl::Time deadline) { return streams_.AwaitClosed(deadline); }

  // op_call_methods: the full names of the methods whose calls are op calls (ModelInfer,
  // ModelStreamInfer), which count themselves in serving.calls.
  const std::vector<std::string>& op_call_methods() const { return op_call_methods_; }

 private:
  void HandleHealthAndMetadata();
  // Triton's shared-memory extension (SystemSharedMemory*, CudaSharedMemory*), on
  // serving_.shared_memory.
  void HandleSharedMemory();
  // HandleUndeclaredMethods answers the methods of Triton's service that grpc_service.proto does
  // not declare: RepositoryIndex, and every other one UNIMPLEMENTED with a message that says
  // what to use instead (gRPC alone would answer them UNIMPLEMENTED with none).
  void HandleUndeclaredMethods();
  void HandleModelInfer();
  void HandleModelStreamInfer();

  const ServingContext serving_;
  std::atomic<bool> shutting_down_{false};
  StreamRegistry streams_;
  std::vector<std::string> op_call_methods_;
};

}  // namespace tensorops::kserve

#endif  // TENSOROPS_SERVER_KSERVE_INFERENCE_SERVICE_H_
