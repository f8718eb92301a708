#include "server/kserve/inference_service.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "kernels/status_macros.h"
#include "proto/grpc_status.h"
#include "server/kserve/infer_call.h"
#include "server/kserve/models.h"
#include "server/observability/build_info.h"
#include "server/rpc/parsed_request.h"
#include "server/rpc/quick_unary_call.h"
#include "server/shared_memory/region_handler.h"
#include "server/shared_memory/regions.h"

namespace tensorops::kserve {
namespace {

// What an error response on a stream echoes of its request (the id, the model's name) and of its
// error, at most: with --max_message_bytes of 16 KiB or more an error response always fits.
constexpr size_t kMaxEchoedBytes = 4096;
// What a log line shows of a request's id.
constexpr size_t kMaxLoggedIdBytes = 256;

// Echoed is `text` cut to at most `max_bytes` bytes.
std::string Echoed(absl::string_view text, size_t max_bytes) {
  return std::string(text.substr(0, max_bytes));
}

using inference::ModelInferRequest;

// InferenceDescriptor describes KServe's GRPCInferenceService.
const google::protobuf::ServiceDescriptor* InferenceDescriptor() {
  static const google::protobuf::ServiceDescriptor* const service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          inference::GRPCInferenceService::service_full_name());
  return service;
}

int MethodIndex(std::string_view method) {
  return tensorops::MethodIndex(InferenceDescriptor(), method);
}

// The extensions of the protocol this server serves (ServerMetadata.extensions). `parameters`:
// every attribute of an op travels as a request parameter. Not model_repository: of its methods
// only RepositoryIndex is served, since the models are built in and cannot be loaded.
// system_shared_memory: Triton's RPCs and input and output parameters (shared_memory_region,
// _offset, _byte_size). cuda_shared_memory is added on a server whose calls run on a GPU, the
// only kind that can open a CUDA region (its RPCs answer everywhere).
constexpr std::string_view kExtensions[] = {"model_configuration", "parameters", "statistics",
                                            "system_shared_memory"};
constexpr std::string_view kCudaSharedMemoryExtension = "cuda_shared_memory";

// The methods of Triton's GRPCInferenceService that grpc_service.proto does not declare, as
// gRPC names them in a call (it keeps the pointer: literals), each with what it is counted as in
// the metrics and why it is not implemented. Triton's clients call them (tritonclient's
// get_system_shared_memory_status, load_model, ...); without a handler gRPC would answer
// UNIMPLEMENTED with an empty message.
struct UndeclaredMethod {
  const char* path;
  std::string_view method;
  std::string_view op;
  std::string_view reason;
};
constexpr UndeclaredMethod kUnimplementedMethods[] = {
    {"/inference.GRPCInferenceService/RepositoryModelLoad", "RepositoryModelLoad",
     "repository_model_load",
     "tensorops' models are its ops, built into the server and always loaded (RepositoryIndex "
     "lists them); call a model by name without loading it"},
    {"/inference.GRPCInferenceService/RepositoryModelUnload", "RepositoryModelUnload",
     "repository_model_unload",
     "tensorops' models are its ops, built into the server, and cannot be unloaded; a model "
     "nobody calls holds no memory"},
    {"/inference.GRPCInferenceService/TraceSetting", "TraceSetting", "trace_setting",
     "tensorops traces no requests; ModelStatistics and /metrics give each model's time queued, "
     "decoding, running and encoding, and --log_level=debug logs a line per call"},
    {"/inference.GRPCInferenceService/LogSettings", "LogSettings", "log_settings",
     "the log is set when the server starts (--log_level) and does not change while it runs"},
};

// NewRawUnaryHandler is NewQuickUnaryHandler (server/rpc/quick_unary_call.h) for an undeclared
// method, whose messages tensorops has no type for: the same token check, log line and metrics,
// with the request's and the response's bytes. `handle(request, response)` returns the call's
// status.
template <typename Handle>
grpc::internal::MethodHandler* NewRawUnaryHandler(const ServingContext& serving,
                                                  const UndeclaredMethod& method, Handle handle) {
  return new grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
      [&serving, &method, handle](grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
        const absl::Time start = absl::Now();
        absl::Status status = Authenticate(serving, *context);
        std::string request_bytes;
        if (status.ok()) {
          grpc::Slice slice;
          // gRPC hands a call whose request never came to the handler with no buffer.
          if (request->Valid() &&
              static_cast<int64_t>(request->Length()) > serving.limits.max_bytes) {
            // As every handler does (server/rpc/parsed_request.h).
            status =
                MessageTooLargeError(method.method, request->Length(), serving.limits.max_bytes);
          } else if (!request->Valid() || !request->DumpToSingleSlice(&slice).ok()) {
            status = absl::CancelledError(absl::StrFormat(
                "no %s request arrived: the client cancelled the call, or closed its side of the "
                "call without sending the request",
                method.method));
          } else {
            request_bytes.assign(reinterpret_cast<const char*>(slice.begin()), slice.size());
          }
        }
        std::string response_bytes;
        if (status.ok()) {
          status =
              GuardExceptions(method.op, [&] { return handle(request_bytes, &response_bytes); });
        }
        if (status.ok()) {
          grpc::Slice slice(response_bytes);
          *response = grpc::ByteBuffer(&slice, 1);
        }
        FinishQuickCall(serving, *context, method.method, method.op, start, status,
                        static_cast<int64_t>(request_bytes.size()),
                        static_cast<int64_t>(response_bytes.size()));
        grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
        reactor->Finish(wire::ToGrpcStatus(status));
        return reactor;
      });
}

// IndexRepository answers RepositoryIndex: every model (models.h), READY, or UNAVAILABLE once
// shutdown has begun (as ModelReady answers false then); with `ready` set, only the READY ones.
absl::Status IndexRepository(const inference::RepositoryIndexRequest& request, bool shutting_down,
                             inference::RepositoryIndexResponse* response) {
  if (!request.repository_name().empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RepositoryIndex: repository_name = \"%s\", but tensorops has one model repository, its "
        "ops, which has no name; leave repository_name empty",
        absl::CHexEscape(request.repository_name())));
  }
  if (request.ready() && shutting_down) return absl::OkStatus();
  for (const Model& model : AllModels()) {
    inference::RepositoryIndexResponse::ModelIndex* index = response->add_models();
    index->set_name(model.name);
    index->set_version(std::string(kModelVersion));
    index->set_state(shutting_down ? "UNAVAILABLE" : "READY");
    if (shutting_down) index->set_reason("the server is shutting down");
  }
  return absl::OkStatus();
}

uint64_t Nanos(absl::Duration duration) {
  return static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Nanoseconds(duration)));
}

void SetDuration(const OpStatistics::Totals& totals, inference::StatisticDuration* duration) {
  duration->set_count(static_cast<uint64_t>(totals.count));
  duration->set_ns(Nanos(totals.total));
}

// Describe fills one model's statistics from the metrics.
void Describe(const Model& model, const Metrics& metrics, inference::ModelStatistics* out) {
  const OpStatistics statistics = metrics.Statistics(model.name);
  out->set_name(model.name);
  out->set_version(std::string(kModelVersion));
  if (statistics.last_call.has_value()) {
    out->set_last_inference(
        static_cast<uint64_t>(std::max<int64_t>(0, absl::ToUnixMillis(*statistics.last_call))));
  }
  // Every call is one inference and one execution: tensorops has no batch dimension.
  out->set_inference_count(static_cast<uint64_t>(statistics.ok.count));
  out->set_execution_count(static_cast<uint64_t>(statistics.ok.count));
  inference::InferStatistics* infer = out->mutable_inference_stats();
  SetDuration(statistics.ok, infer->mutable_success());
  SetDuration(statistics.failed, infer->mutable_fail());
  SetDuration(statistics.queue, infer->mutable_queue());
  SetDuration(statistics.decode, infer->mutable_compute_input());
  SetDuration(statistics.execute, infer->mutable_compute_infer());
  SetDuration(statistics.encode, infer->mutable_compute_output());
}

// StreamProtocol is ModelStreamInfer for OpStreamReactor: each request a ModelInferRequest, each
// response its ModelInferResponse or its error_message.
struct StreamProtocol {
  using RequestMessage = ModelInferRequest;
  using ResponseMessage = inference::ModelStreamInferResponse;

  class Call {
   public:
    explicit Call(ModelInferRequest message)
        : message_(std::move(message)), op_name_(InferCall::ModelName(message_)) {}
    std::string_view op_name() const { return op_name_; }
    std::string LogName() const {
      return absl::StrFormat("ModelStreamInfer request \"%s\"",
                             absl::CHexEscape(Echoed(message_.id(), kMaxLoggedIdBytes)));
    }
    absl::StatusOr<PreparedOp> Prepare(const ServingContext& serving, const StoredTensors& stored) {
      // Translated once: the translation takes the request's raw contents, and a preparation
      // that found a stored tensor busy runs again (OpCall::Start).
      if (call_ == nullptr) {
        TENSOROPS_ASSIGN_OR_RETURN(call_, InferCall::Translate(&message_));
      }
      MarkFinal();
      return call_->Prepare(serving.limits, stored, response_.mutable_infer_response());
    }
    void SetError(const absl::Status& status) {
      response_.Clear();
      // The id (and model) let a client match the error to its request. Each is cut to at most
      // kMaxEchoedBytes, so that an error response always fits --max_message_bytes: one that
      // did not would end the whole stream (a request's id may be nearly the limit's size).
      std::string message = Echoed(status.message(), kMaxEchoedBytes);
      if (message_.id().size() > kMaxEchoedBytes) {
        absl::StrAppend(&message, absl::StrFormat(" (the request's id, %d bytes, is cut to its "
                                                  "first %d bytes in this response)",
                                                  message_.id().size(), kMaxEchoedBytes));
      }
      response_.set_error_message(std::move(message));
      response_.mutable_infer_response()->set_id(Echoed(message_.id(), kMaxEchoedBytes));
      response_.mutable_infer_response()->set_model_name(
          Echoed(message_.model_name(), kMaxEchoedBytes));
      MarkFinal();
    }
    const inference::ModelStreamInferResponse& response() const { return response_; }

   private:
    // MarkFinal: every request gets one response, its last, marked as Triton marks a response
    // with the final flag, so that a client waiting for the end of a request (decoupled style)
    // sees it.
    void MarkFinal() {
      (*response_.mutable_infer_response()->mutable_parameters())["triton_final_response"]
          .set_bool_param(true);
    }

    ModelInferRequest message_;
    std::string_view op_name_;
    std::unique_ptr<InferCall> call_;
    inference::ModelStreamInferResponse response_;
  };
};

}  // namespace

InferenceService::InferenceService(const ServingContext& serving) : serving_(serving) {
  HandleHealthAndMetadata();
  HandleSharedMemory();
  HandleModelInfer();
  HandleModelStreamInfer();
  HandleUndeclaredMethods();
}

void InferenceService::BeginShutdown() {
  shutting_down_.store(true);
  streams_.CloseAll();
}

void InferenceService::HandleHealthAndMetadata() {
  MarkMethodCallback(
      MethodIndex("ServerLive"),
      NewQuickUnaryHandler<inference::ServerLiveRequest, inference::ServerLiveResponse>(
          serving_, "ServerLive", "server_live",
          [](grpc::CallbackServerContext&, const inference::ServerLiveRequest&,
             inference::ServerLiveResponse* response) {
            response->set_live(true);
            return absl::OkStatus();
          }));
  MarkMethodCallback(
      MethodIndex("ServerReady"),
      NewQuickUnaryHandler<inference::ServerReadyRequest, inference::ServerReadyResponse>(
          serving_, "ServerReady", "server_ready",
          [this](grpc::CallbackServerContext&, const inference::ServerReadyRequest&,
                 inference::ServerReadyResponse* response) {
            response->set_ready(!shutting_down_.load());
            return absl::OkStatus();
          }));
  MarkMethodCallback(
      MethodIndex("ServerMetadata"),
      NewQuickUnaryHandler<inference::ServerMetadataRequest, inference::ServerMetadataResponse>(
          serving_, "ServerMetadata", "server_metadata",
          [regions = serving_.shared_memory](grpc::CallbackServerContext&,
                                             const inference::ServerMetadataRequest&,
                                             inference::ServerMetadataResponse* response) {
            response->set_name("tensorops");
            response->set_version(ThisBuild().version);
            for (const std::string_view extension : kExtensions) {
              response->add_extensions(std::string(extension));
            }
            if (regions != nullptr && regions->serves_cuda()) {
              response->add_extensions(std::string(kCudaSharedMemoryExtension));
            }
            return absl::OkStatus();
          }));
  MarkMethodCallback(
      MethodIndex("ModelReady"),
      NewQuickUnaryHandler<inference::ModelReadyRequest, inference::ModelReadyResponse>(
          serving_, "ModelReady", "model_ready",
          [this](grpc::CallbackServerContext&, const inference::ModelReadyRequest& request,
                 inference::ModelReadyResponse* response) -> absl::Status {
            TENSOROPS_RETURN_IF_ERROR(FindModel(request.name(), request.version()).status());
            response->set_ready(!shutting_down_.load());
            return absl::OkStatus();
          }));
  MarkMethodCallback(
      MethodIndex("ModelMetadata"),
      NewQuickUnaryHandler<inference::ModelMetadataRequest, inference::ModelMetadataResponse>(
          serving_, "ModelMetadata", "model_metadata",
          [](grpc::CallbackServerContext&, const inference::ModelMetadataRequest& request,
             inference::ModelMetadataResponse* response) -> absl::Status {
            TENSOROPS_ASSIGN_OR_RETURN(const Model* model,
                                       FindModel(request.name(), request.version()));
            DescribeMetadata(*model, response);
            return absl::OkStatus();
          }));
  MarkMethodCallback(
      MethodIndex("ModelConfig"),
      NewQuickUnaryHandler<inference::ModelConfigRequest, inference::ModelConfigResponse>(
          serving_, "ModelConfig", "model_config",
          [](grpc::CallbackServerContext&, const inference::ModelConfigRequest& request,
             inference::ModelConfigResponse* response) -> absl::Status {
            TENSOROPS_ASSIGN_OR_RETURN(const Model* model,
                                       FindModel(request.name(), request.version()));
            DescribeConfig(*model, response->mutable_config());
            return absl::OkStatus();
          }));
  MarkMethodCallback(
      MethodIndex("RepositoryIndex"),
      NewQuickUnaryHandler<inference::RepositoryIndexRequest, inference::RepositoryIndexResponse>(
          serving_, "RepositoryIndex", "repository_index",
          [this](grpc::CallbackServerContext&, const inference::RepositoryIndexRequest& request,
                 inference::RepositoryIndexResponse* response) {
            return IndexRepository(request, shutting_down_.load(), response);
          }));
  MarkMethodCallback(
      MethodIndex("ModelStatistics"),
      NewQuickUnaryHandler<inference::ModelStatisticsRequest, inference::ModelStatisticsResponse>(
          serving_, "ModelStatistics", "model_statistics",
          [this](grpc::CallbackServerContext&, const inference::ModelStatisticsRequest& request,
                 inference::ModelStatisticsResponse* response) -> absl::Status {
            // No name: every model.
            if (request.name().empty()) {
              for (const Model& model : AllModels()) {
                Describe(model, *serving_.metrics, response->add_model_stats());
              }
              return absl::OkStatus();
            }
            TENSOROPS_ASSIGN_OR_RETURN(const Model* model,
                                       FindModel(request.name(), request.version()));
            Describe(*model, *serving_.metrics, response->add_model_stats());
            return absl::OkStatus();
          }));
}

void InferenceService::HandleSharedMemory() {
  // Each RPC is the registry's (server/shared_memory/regions.h) in Triton's messages.
  // Triton unregisters only regions of the RPC's kind: a name it does not know, or one of the
  // other kind, is left alone without an error, and an empty name means every region of the kind.
  const auto unregister = [](SharedMemoryRegions& regions, std::string_view ns,
                             std::string_view name, bool system) -> absl::Status {
    // The kind is checked under the registry's lock: a name registered again as the other kind
    // meanwhile is left alone.
    const absl::StatusOr<std::vector<std::string>> gone =
        regions.Unregister(ns, name, system ? RegionKind::kSystem : RegionKind::kCuda);
    if (absl::IsNotFound(gone.status())) return absl::OkStatus();
    return gone.status();
  };
  // The regions of one kind that a status request asks for: `name` alone (NOT_FOUND when it is
  // not registered, or is of the other kind) or all of them.
  const auto listed = [](SharedMemoryRegions& regions, std::string_view ns, std::string_view name,
                         bool system) -> absl::StatusOr<std::vector<v1::SharedMemoryRegion>> {
    TENSOROPS_ASSIGN_OR_RETURN(std::vector<v1::SharedMemoryRegion> all, regions.List(ns, name));
    std::vector<v1::SharedMemoryRegion> of_kind;
    for (v1::SharedMemoryRegion& region : all) {
      if (region.has_system() == system) of_kind.push_back(std::move(region));
    }
    if (!name.empty() && of_kind.empty()) {
      return absl::NotFoundError(
          absl::StrFormat("region \"%s\" is not a registered %s shared-memory region", name,
                          system ? "system" : "CUDA"));
    }
    return of_kind;
  };
  MarkMethodCallback(
      MethodIndex("SystemSharedMemoryRegister"),
      NewRegionHandler<inference::SystemSharedMemoryRegisterRequest,
                       inference::SystemSharedMemoryRegisterResponse>(
          serving_, "SystemSharedMemoryRegister", "system_shared_memory_register",
          [](SharedMemoryRegions& regions, std::string_view ns,
             const inference::SystemSharedMemoryRegisterRequest& request,
             inference::SystemSharedMemoryRegisterResponse*) -> absl::Status {
            // Triton's sizes are unsigned; ours are int64, and a size past it cannot be mapped.
            constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
            if (request.offset() > kMax || request.byte_size() > kMax) {
              return absl::InvalidArgumentError(absl::StrFormat(
                  "region \"%s\": offset %d and byte_size %d must each be below 2^63",
                  request.name(), request.offset(), request.byte_size()));
            }
            v1::SharedMemoryRegion region;
            region.set_name(request.name());
            region.mutable_system()->set_key(request.key());
            region.mutable_system()->set_offset(static_cast<int64_t>(request.offset()));
            region.mutable_system()->set_byte_size(static_cast<int64_t>(request.byte_size()));
            return regions.Register(ns, region);
          }));
  MarkMethodCallback(
      MethodIndex("SystemSharedMemoryUnregister"),
      NewRegionHandler<inference::SystemSharedMemoryUnregisterRequest,
                       inference::SystemSharedMemoryUnregisterResponse>(
          serving_, "SystemSharedMemoryUnregister", "system_shared_memory_unregister",
          [unregister](SharedMemoryRegions& regions, std::string_view ns,
                       const inference::SystemSharedMemoryUnregisterRequest& request,
                       inference::SystemSharedMemoryUnregisterResponse*) {
            return unregister(regions, ns, request.name(), /*system=*/true);
          }));
  MarkMethodCallback(
      MethodIndex("SystemSharedMemoryStatus"),
      NewRegionHandler<inference::SystemSharedMemoryStatusRequest,
                       inference::SystemSharedMemoryStatusResponse>(
          serving_, "SystemSharedMemoryStatus", "system_shared_memory_status",
          [listed](SharedMemoryRegions& regions, std::string_view ns,
                   const inference::SystemSharedMemoryStatusRequest& request,
                   inference::SystemSharedMemoryStatusResponse* response) -> absl::Status {
            TENSOROPS_ASSIGN_OR_RETURN(std::vector<v1::SharedMemoryRegion> found,
                                       listed(regions, ns, request.name(), /*system=*/true));
            for (const v1::SharedMemoryRegion& region : found) {
              auto& status = (*response->mutable_regions())[region.name()];
              status.set_name(region.name());
              status.set_key(region.system().key());
              status.set_offset(static_cast<uint64_t>(region.system().offset()));
              status.set_byte_size(static_cast<uint64_t>(region.system().byte_size()));
            }
            return absl::OkStatus();
          }));
  MarkMethodCallback(
      MethodIndex("CudaSharedMemoryRegister"),
      NewRegionHandler<inference::CudaSharedMemoryRegisterRequest,
                       inference::CudaSharedMemoryRegisterResponse>(
          serving_, "CudaSharedMemoryRegister", "cuda_shared_memory_register",
          [](SharedMemoryRegions& regions, std::string_view ns,
             const inference::CudaSharedMemoryRegisterRequest& request,
             inference::CudaSharedMemoryRegisterResponse*) {
            v1::SharedMemoryRegion region;
            region.set_name(request.name());
            region.mutable_cuda()->set_raw_handle(request.raw_handle());
            region.mutable_cuda()->set_device_id(request.device_id());
            region.mutable_cuda()->set_byte_size(static_cast<int64_t>(
                std::min<uint64_t>(request.byte_size(), std::numeric_limits<int64_t>::max())));
            return regions.Register(ns, region);
          }));
  MarkMethodCallback(MethodIndex("CudaSharedMemoryUnregister"),
                     NewRegionHandler<inference::CudaSharedMemoryUnregisterRequest,
                                      inference::CudaSharedMemoryUnregisterResponse>(
                         serving_, "CudaSharedMemoryUnregister", "cuda_shared_memory_unregister",
                         [unregister](SharedMemoryRegions& regions, std::string_view ns,
                                      const inference::CudaSharedMemoryUnregisterRequest& request,
                                      inference::CudaSharedMemoryUnregisterResponse*) {
                           return unregister(regions, ns, request.name(), /*system=*/false);
                         }));
  MarkMethodCallback(
      MethodIndex("CudaSharedMemoryStatus"),
      NewRegionHandler<inference::CudaSharedMemoryStatusRequest,
                       inference::CudaSharedMemoryStatusResponse>(
          serving_, "CudaSharedMemoryStatus", "cuda_shared_memory_status",
          [listed](SharedMemoryRegions& regions, std::string_view ns,
                   const inference::CudaSharedMemoryStatusRequest& request,
                   inference::CudaSharedMemoryStatusResponse* response) -> absl::Status {
            TENSOROPS_ASSIGN_OR_RETURN(std::vector<v1::SharedMemoryRegion> found,
                                       listed(regions, ns, request.name(), /*system=*/false));
            for (const v1::SharedMemoryRegion& region : found) {
              auto& status = (*response->mutable_regions())[region.name()];
              status.set_name(region.name());
              status.set_device_id(static_cast<uint64_t>(region.cuda().device_id()));
              status.set_byte_size(static_cast<uint64_t>(region.cuda().byte_size()));
            }
            return absl::OkStatus();
          }));
}

void InferenceService::HandleUndeclaredMethods() {
  // The generated service holds one method per declared one, in order; these follow.
  int index = InferenceDescriptor()->method_count();
  const auto add = [&](const UndeclaredMethod& method, grpc::internal::MethodHandler* handler) {
    // A method the proto declares has its generated handler: take it out of the lists above.
    GPR_ASSERT(InferenceDescriptor()->FindMethodByName(std::string(method.method)) == nullptr);
    AddMethod(new grpc::internal::RpcServiceMethod(
        method.path, grpc::internal::RpcMethod::NORMAL_RPC, /*handler=*/nullptr));
    MarkMethodRawCallback(index++, handler);
  };
  for (const UndeclaredMethod& method : kUnimplementedMethods) {
    add(method, NewRawUnaryHandler(serving_, method, [&method](std::string_view, std::string*) {
          return absl::UnimplementedError(
              absl::StrFormat("%s is not implemented: %s", method.method, method.reason));
        }));
  }
}

void InferenceService::HandleModelInfer() {
  op_call_methods_.push_back(FullMethodName(InferenceDescriptor(), "ModelInfer"));
  MarkMethodCallback(
      MethodIndex("ModelInfer"),
      new grpc::internal::CallbackUnaryHandler<Parsed<ModelInferRequest>,
                                               inference::ModelInferResponse>(
          [this](grpc::CallbackServerContext* context, const Parsed<ModelInferRequest>* parsed,
                 inference::ModelInferResponse* response) {
            // gRPC's request message belongs to this call until it is finished, and nothing but
            // the translation reads it: the translation takes its raw contents, without a copy.
            auto* request = const_cast<Parsed<ModelInferRequest>*>(parsed);
            return UnaryOpCall::Start(
                serving_, context, "ModelInfer",
                parsed->ok ? InferCall::ModelName(parsed->message) : "model_infer",
                // Translated once (it takes the request's raw contents), though a preparation
                // that finds a stored tensor busy runs again (OpCall::Start).
                [this, context, request, response, call = std::shared_ptr<InferCall>()](
                    LockWait lock_wait) mutable -> absl::StatusOr<PreparedOp> {
                  TENSOROPS_RETURN_IF_ERROR(RequestError(*request, serving_.limits.max_bytes));
                  if (call == nullptr) {
                    TENSOROPS_ASSIGN_OR_RETURN(call, InferCall::Translate(&request->message));
                  }
                  const std::string ns = StoreNamespace(serving_, *context);
                  TENSOROPS_ASSIGN_OR_RETURN(
                      PreparedOp prepared,
                      call->Prepare(serving_.limits,
                                    StoredTensors{.store = serving_.store,
                                                  .ns = ns,
                                                  .regions = serving_.shared_memory,
                                                  .lock_wait = lock_wait},
                                    response));
                  // The op reads the call's bytes: it keeps the call for as long as it lives.
                  prepared.run = [call, run = std::move(prepared.run)] { return run(); };
                  return prepared;
                },
                static_cast<int64_t>(parsed->bytes), response);
          }));
}

void InferenceService::HandleModelStreamInfer() {
  op_call_methods_.push_back(FullMethodName(InferenceDescriptor(), "ModelStreamInfer"));
  MarkMethodCallback(MethodIndex("ModelStreamInfer"),
                     new grpc::internal::CallbackBidiHandler<Parsed<ModelInferRequest>,
                                                             inference::ModelStreamInferResponse>(
                         [this](grpc::CallbackServerContext* context) {
                           return new OpStreamReactor<StreamProtocol>(serving_, context, &streams_);
                         }));
}

}  // namespace tensorops::kserve
