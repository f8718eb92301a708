#include "client/cpp/grpc_services.h"

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "proto/grpc_status.h"

namespace tensorops {
namespace {

namespace reflection = ::grpc::reflection::v1alpha;

// AskReflection sends one request on a new reflection stream and returns the one response. An
// error_response from the server becomes its status, with the server's message.
absl::StatusOr<reflection::ServerReflectionResponse> AskReflection(
    const std::shared_ptr<grpc::Channel>& channel, absl::Time deadline,
    const reflection::ServerReflectionRequest& request) {
  std::unique_ptr<reflection::ServerReflection::Stub> stub =
      reflection::ServerReflection::NewStub(channel);
  grpc::ClientContext context;
  if (deadline != absl::InfiniteFuture()) context.set_deadline(absl::ToChronoTime(deadline));
  auto stream = stub->ServerReflectionInfo(&context);
  reflection::ServerReflectionResponse response;
  const bool answered = stream->Write(request) && stream->WritesDone() && stream->Read(&response);
  // Drain, so that Finish reports the call's own status.
  for (reflection::ServerReflectionResponse extra; stream->Read(&extra);) {
  }
  const grpc::Status status = stream->Finish();
  if (!status.ok()) return wire::FromGrpcStatus(status);
  if (!answered) {
    return absl::InternalError("server reflection: the server ended the stream without an answer");
  }
  if (response.has_error_response()) {
    return absl::Status(static_cast<absl::StatusCode>(response.error_response().error_code()),
                        response.error_response().error_message());
  }
  return response;
}

}  // namespace

absl::StatusOr<std::string> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                        absl::Time deadline, std::string_view service) {
  std::unique_ptr<grpc::health::v1::Health::Stub> stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  if (deadline != absl::InfiniteFuture()) context.set_deadline(absl::ToChronoTime(deadline));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(std::string(service));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
    return absl::NotFoundError(absl::StrFormat(
        "the health service knows no service '%s' (list shows the services)", service));
  }
  if (!status.ok()) return wire::FromGrpcStatus(status);
  // SERVICE_UNKNOWN belongs to Watch; Check answers NOT_FOUND instead.
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
}

absl::StatusOr<std::vector<std::string>> ListServices(const std::shared_ptr<grpc::Channel>& channel,
                                                      absl::Time deadline) {
  reflection::ServerReflectionRequest request;
  request.set_list_services("*");
  absl::StatusOr<reflection::ServerReflectionResponse> response =
      AskReflection(channel, deadline, request);
  if (!response.ok()) return response.status();
  std::vector<std::string> services;
  for (const reflection::ServiceResponse& service : response->list_services_response().service()) {
    services.push_back(service.name());
  }
  absl::c_sort(services);
  return services;
}

absl::Status LoadSymbol(const std::shared_ptr<grpc::Channel>& channel, absl::Time deadline,
                        std::string_view symbol, google::protobuf::DescriptorPool* pool) {
  reflection::ServerReflectionRequest request;
  request.set_file_containing_symbol(std::string(symbol));
  absl::StatusOr<reflection::ServerReflectionResponse> response =
      AskReflection(channel, deadline, request);
  if (absl::IsNotFound(response.status())) {
    return absl::NotFoundError(absl::StrFormat(
        "the server knows no service, method, message, enum or field named '%s'", symbol));
  }
  if (!response.ok()) return response.status();
  std::vector<google::protobuf::FileDescriptorProto> files;
  for (const std::string& bytes : response->file_descriptor_response().file_descriptor_proto()) {
    if (!files.emplace_back().ParseFromString(bytes)) {
      return absl::InternalError("server reflection sent a file descriptor that does not parse");
    }
  }
  // The files come in no set order: build each once every file it imports is built.
  for (size_t round = 0; round < files.size(); ++round) {
    for (const google::protobuf::FileDescriptorProto& file : files) {
      if (pool->FindFileByName(file.name()) != nullptr) continue;
      const bool ready = absl::c_all_of(file.dependency(), [&](const std::string& dependency) {
        return pool->FindFileByName(dependency) != nullptr;
      });
      if (ready && pool->BuildFile(file) == nullptr) {
        return absl::InternalError(absl::StrFormat(
            "server reflection sent %s, which does not build (a file it imports is missing "
            "or it conflicts with one already loaded)",
            file.name()));
      }
    }
  }
  for (const google::protobuf::FileDescriptorProto& file : files) {
    if (pool->FindFileByName(file.name()) == nullptr) {
      return absl::InternalError(
          absl::StrFormat("server reflection sent %s without every file it imports", file.name()));
    }
  }
  return absl::OkStatus();
}

}  // namespace tensorops
