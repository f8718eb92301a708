#include "client/cpp/client.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "kernels/dispatch.h"
#include "kernels/half.h"
#include "kernels/status_macros.h"
#include "proto/codec.h"
#include "proto/credential_file.h"
#include "proto/grpc_status.h"
#include "proto/op_list.h"

namespace tensorops {

namespace {

// gRPC clamps a retry policy's maxAttempts to 5; larger values would silently mean 5.
constexpr int kMaxAttemptsCap = 5;

// IsMetadataSafe tells whether `token` can follow "Bearer " in a gRPC metadata value: printable
// ASCII without spaces (the server's rule for its token file too).
bool IsMetadataSafe(absl::string_view token) {
  for (char c : token) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

// TlsCredentials reads the files `tls` names and returns the TLS channel credentials they make.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsCredentials(
    const ClientOptions::Tls& tls) {
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        tls.key_file.empty()
            ? "Client::Create: tls.cert_file is set but tls.key_file is not (a client certificate "
              "needs its key)"
            : "Client::Create: tls.key_file is set but tls.cert_file is not (a client certificate "
              "needs its key)");
  }
  grpc::SslCredentialsOptions ssl_options;
  if (!tls.root_ca_file.empty()) {
    TENSOROPS_ASSIGN_OR_RETURN(ssl_options.pem_root_certs,
                               wire::ReadCredentialFile("tls.root_ca_file", tls.root_ca_file));
  }
  if (!tls.cert_file.empty()) {
    TENSOROPS_ASSIGN_OR_RETURN(ssl_options.pem_cert_chain,
                               wire::ReadCredentialFile("tls.cert_file", tls.cert_file));
    TENSOROPS_ASSIGN_OR_RETURN(ssl_options.pem_private_key,
                               wire::ReadCredentialFile("tls.key_file", tls.key_file));
  }
  return grpc::SslCredentials(ssl_options);
}

// DecodeResult validates `result` and copies it into an owning tensor, so that the caller may
// drop the response message.
absl::StatusOr<Tensor> DecodeResult(const v1::Tensor& result, std::string_view op,
                                    const ClientOptions& options) {
  wire::DecodeLimits limits;
  limits.max_bytes = options.max_message_bytes;
  absl::StatusOr<TensorView> view = wire::DecodeTensor(result, op, "result", limits);
  if (!view.ok()) {
    // The server validated the request and built this tensor itself, so a bad one is its bug.
    return absl::InternalError(
        absl::StrFormat("%s: the server sent a malformed result: %s", op, view.status().message()));
  }
  return Tensor::FromView(*view);
}

// Negated returns a contiguous copy of `src` with every element negated, for ScatterNdSub.
// Signed integers wrap (the minimum negates to itself), so that x + Negated(s) equals TensorFlow's
// wrapping x - s; float16 and bfloat16 flip their sign bit, which is exact.
absl::StatusOr<Tensor> Negated(const TensorView& src) {
  if (src.dtype() == DataType::kBool || src.dtype() == DataType::kUInt8) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "scatter_nd_sub: src.dtype = %s cannot be negated (sub needs a floating, complex or "
        "signed integer dtype)",
        DataTypeName(src.dtype())));
  }
  Tensor negated = Tensor::FromView(src);
  const int64_t numel = negated.numel();
  DispatchDataType(negated.dtype(), [&]<typename T>(TypeTag<T>) {
    T* elements = negated.data_as<T>();
    for (int64_t i = 0; i < numel; ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        // Rejected above.
      } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
        elements[i] = T::FromBits(static_cast<uint16_t>(elements[i].bits ^ 0x8000u));
      } else if constexpr (std::is_integral_v<T>) {
        using Unsigned = std::make_unsigned_t<T>;
        elements[i] = static_cast<T>(Unsigned{0} - static_cast<Unsigned>(elements[i]));
      } else {
        elements[i] = -elements[i];
      }
    }
  });
  return negated;
}

// OpMethod is the method of tensorops.v1.TensorOps that takes Op's request, in the form the
// generated stub calls it with. Its path ("/tensorops.v1.TensorOps/GatherNd") comes from the op
// table, so that one call path serves every op. The method is not registered with the channel
// (registration is per channel, and this is shared by every Client): gRPC then looks the path up
// on each call, which costs nothing next to a tensor's bytes. RpcMethod keeps only a pointer to
// the path, so both live for the process.
template <typename Op>
const grpc::internal::RpcMethod& OpMethod() {
  static const std::string* const path = new std::string(
      absl::StrFormat("/%s/%s", v1::TensorOps::service_full_name(), ops::Rpc<Op>()));
  static const grpc::internal::RpcMethod* const method =
      new grpc::internal::RpcMethod(path->c_str(), grpc::internal::RpcMethod::NORMAL_RPC);
  return *method;
}

// MutableResultOptions is the result_options of the op `request` holds; null when it holds none.
v1::ResultOptions* MutableResultOptions(v1::OpRequest* request) {
  return ops::VisitOp(
      *request,
      [&]<typename Op>(Op, const typename Op::Request&) {
        return ops::Mutable<Op>(request)->mutable_result_options();
      },
      []() -> v1::ResultOptions* { return nullptr; });
}

// ChangesStore is true when `request`'s op stores its result or updates in place.
bool ChangesStore(const v1::OpRequest& request) {
  return ops::VisitOp(
      request,
      [&]<typename Op>(Op, const typename Op::Request& op) {
        return op.result_options().in_place() || !op.result_options().store_as().empty();
      },
      [] { return false; });
}

constexpr char kResetHint[] =
    "the server reset the call before reading its request: its gRPC buffers of requests still "
    "arriving were full, which --max_memory_bytes bounds; send smaller requests, or fewer at once, "
    "or raise the server's --max_memory_bytes";

// What gRPC says when a call reached no server at all (gRPC up to 1.52, then 1.53 on), rather
// than a message a server sent.
constexpr std::string_view kNoConnection[] = {"failed to connect to all addresses",
                                              "connections to all backends failing"};
// A connection that the other end closed during its set-up: a TLS mismatch, typically.
constexpr std::string_view kClosed[] = {"socket closed", "connection reset", "broken pipe",
                                        "end of tcp stream"};

// UnreachableHint is the likely cause of a failed connection, from gRPC's `details` and the
// client's `tls`, or "" when there is nothing more to say.
std::string UnreachableHint(std::string_view details,
                            const std::optional<ClientOptions::Tls>& tls) {
  const std::string lowered =
      absl::AsciiStrToLower(absl::string_view(details.data(), details.size()));
  const auto has = [&](std::string_view text) { return lowered.find(text) != std::string::npos; };
  if (tls.has_value() && has("wrong version number")) {
    return "; the server at that address may not use TLS (a plaintext server: connect without "
           "TLS)";
  }
  if (tls.has_value() && (has("certificate verify failed") || has("certificate_verify_failed"))) {
    return "; its TLS certificate is not trusted: give the CA that signed it "
           "(ClientOptions::Tls::root_ca_file, the CLI's --tls_ca), and the name it was issued "
           "for (server_name_override, --tls_server_name) when the target is an IP address or "
           "another name";
  }
  if (std::none_of(std::begin(kClosed), std::end(kClosed), has)) return "";
  if (!tls.has_value()) {
    return "; the connection was closed as it opened, as a TLS server closes a plaintext "
           "client's: if the server uses TLS (--tls_cert), connect with TLS (ClientOptions::tls, "
           "the CLI's --tls_ca)";
  }
  if (tls->cert_file.empty()) {
    return "; the connection was closed during the TLS handshake, as a server that requires "
           "client certificates (--tls_client_ca) closes it for a client without one: give a "
           "certificate and its key (ClientOptions::Tls::cert_file and key_file, the CLI's "
           "--tls_cert and --tls_key)";
  }
  return "; the connection was closed during the TLS handshake: the server may not accept this "
         "client certificate (is it signed by the server's --tls_client_ca?)";
}

// CallStatus is the status of a failed call to `target` (empty: not known): the server's, or
// gRPC's own, explained. A call that reached no server says so, naming the target and the likely
// cause (a server's own UNAVAILABLE, one that shuts down, keeps its message). A stream gRPC reset
// with ENHANCE_YOUR_CALM (code 11) carries no message of the server's: gRPC's resource quota,
// which the server sizes from --max_memory_bytes, refused the request while it arrived. Either
// keeps the code and ends with gRPC's words.
absl::Status CallStatus(const grpc::Status& status, std::string_view target = "",
                        const std::optional<ClientOptions::Tls>& tls = std::nullopt) {
  const absl::Status converted = wire::FromGrpcStatus(status);
  const std::string& details = status.error_message();
  if (details.find("RST_STREAM with error code 11") != std::string::npos) {
    return absl::Status(converted.code(), absl::StrFormat("%s [gRPC: %s]", kResetHint, details));
  }
  if (target.empty() || status.error_code() != grpc::StatusCode::UNAVAILABLE) return converted;
  if (details.rfind("DNS resolution failed", 0) == 0) {
    return absl::UnavailableError(absl::StrFormat(
        "no tensorops server answers at %s: its host name does not resolve [gRPC: %s]", target,
        details));
  }
  if (std::none_of(std::begin(kNoConnection), std::end(kNoConnection),
                   [&](std::string_view text) { return details.rfind(text, 0) == 0; })) {
    return converted;
  }
  return absl::UnavailableError(
      absl::StrFormat("no tensorops server answers at %s (is it running?)%s [gRPC: %s]", target,
                      UnreachableHint(details, tls), details));
}

// ResultInSharedMemory is true when `request`'s op writes its result into shared memory.
bool ResultInSharedMemory(const v1::OpRequest& request) {
  return ops::VisitOp(
      request,
      [&]<typename Op>(Op, const typename Op::Request& op) {
        return op.result_options().has_shared_memory();
      },
      [] { return false; });
}

// NewUpdateId returns 128 random bits in hex: ids that no two calls share.
std::string NewUpdateId() {
  thread_local absl::BitGen generator;
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(generator),
                         absl::Uniform<uint64_t>(generator));
}

}  // namespace

std::string ServiceConfigJson(const ClientOptions& options) {
  // gRPC accepts no retryPolicy with maxAttempts < 2: one attempt is no policy at all.
  const std::string retry_policy =
      options.max_attempts < 2
          ? ""
          : absl::StrFormat(
                R"(,"retryPolicy":{"maxAttempts":%d,"initialBackoff":"0.05s","maxBackoff":"1s",)"
                R"("backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE","CANCELLED","ABORTED"]})",
                options.max_attempts);
  // A method named on its own takes its config from that entry, not the service's: PutTensor,
  // DeleteTensor and the shared-memory registrations get none, so no retries (see
  // ClientOptions::max_attempts).
  return absl::StrFormat(
      R"({"loadBalancingConfig":[{"%s":{}}],)"
      R"("methodConfig":[{"name":[{"service":"tensorops.v1.TensorOps"}]%s},)"
      R"({"name":[{"service":"tensorops.v1.TensorOps","method":"PutTensor"},)"
      R"({"service":"tensorops.v1.TensorOps","method":"DeleteTensor"},)"
      R"({"service":"tensorops.v1.TensorOps","method":"RegisterSharedMemory"},)"
      R"({"service":"tensorops.v1.TensorOps","method":"UnregisterSharedMemory"}]}]})",
      options.round_robin ? "round_robin" : "pick_first", retry_policy);
}

v1::Tensor StoredArgument(std::string_view name, std::optional<int64_t> version) {
  v1::Tensor tensor;
  tensor.mutable_stored()->set_name(std::string(name));
  if (version.has_value()) tensor.mutable_stored()->set_version(*version);
  return tensor;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(std::string target, ClientOptions options) {
  if (target.empty()) {
    return absl::InvalidArgumentError("Client::Create: target is empty (expected \"host:port\")");
  }
  if (options.max_message_bytes < 1 ||
      options.max_message_bytes > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Client::Create: max_message_bytes = %d is out of range (expected 1 to %d)",
                        options.max_message_bytes, std::numeric_limits<int>::max()));
  }
  if (!IsMetadataSafe(options.auth_token)) {
    return absl::InvalidArgumentError(
        "Client::Create: auth_token has a character that gRPC metadata cannot carry (expected "
        "printable ASCII without spaces)");
  }
  if (options.max_attempts < 1 || options.max_attempts > kMaxAttemptsCap) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Client::Create: max_attempts = %d is out of range (expected 1 to %d)",
                        options.max_attempts, kMaxAttemptsCap));
  }
  grpc::ChannelArguments arguments;
  arguments.SetServiceConfigJSON(ServiceConfigJson(options));
  arguments.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  arguments.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (options.tls.has_value()) {
    TENSOROPS_ASSIGN_OR_RETURN(credentials, TlsCredentials(*options.tls));
    if (!options.tls->server_name_override.empty()) {
      arguments.SetString(GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, options.tls->server_name_override);
    }
  }
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(target, std::move(credentials), arguments);
  return std::unique_ptr<Client>(new Client(target, std::move(channel), options));
}

Client::Client(std::string target, std::shared_ptr<grpc::Channel> channel, ClientOptions options)
    : target_(std::move(target)),
      options_(std::move(options)),
      channel_(std::move(channel)),
      stub_(v1::TensorOps::NewStub(channel_)) {}

absl::Status Client::PrepareContext(absl::Time deadline, std::string_view op,
                                    grpc::ClientContext* context) const {
  if (!options_.auth_token.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", options_.auth_token));
  }
  if (deadline == absl::InfiniteFuture()) return absl::OkStatus();
  if (absl::Now() >= deadline) {
    return absl::DeadlineExceededError(
        absl::StrFormat("%s: the deadline passed before the request was sent", op));
  }
  context->set_deadline(absl::ToChronoTime(deadline));
  return absl::OkStatus();
}

absl::Time Client::Deadline(const std::optional<absl::Duration>& timeout) const {
  return absl::Now() + timeout.value_or(options_.default_timeout);
}

template <typename Response, typename Send>
absl::StatusOr<Response> Client::CallRpc(std::string_view op, absl::Time deadline,
                                         Send send) const {
  grpc::ClientContext context;
  TENSOROPS_RETURN_IF_ERROR(PrepareContext(deadline, op, &context));
  Response response;
  const grpc::Status status = send(&context, &response);
  if (!status.ok()) return CallStatus(status, target_, options_.tls);
  return response;
}

template <typename Op>
absl::StatusOr<Tensor> Client::CallOp(const typename Op::Request& request,
                                      absl::Time deadline) const {
  using Response = typename Op::Response;
  const std::string_view op = ops::Name<Op>();
  TENSOROPS_ASSIGN_OR_RETURN(
      const Response response,
      CallRpc<Response>(op, deadline, [&](grpc::ClientContext* context, Response* received) {
        return grpc::internal::BlockingUnaryCall(channel_.get(), OpMethod<Op>(), context, request,
                                                 received);
      }));
  return DecodeResult(response.result(), op, options_);
}

// Each op method takes its deadline before building the request, since a call's timeout counts
// the encoding too.

absl::StatusOr<Tensor> Client::Gather(const TensorView& input, int64_t axis,
                                      const TensorView& index, const GatherOptions& options) {
  const absl::Time deadline = Deadline(options.timeout);
  return CallOp<ops::Gather>(MakeGatherRequest(input, axis, index, options), deadline);
}

absl::StatusOr<Tensor> Client::Scatter(const TensorView& input, int64_t axis,
                                       const TensorView& index, const TensorView& src,
                                       const ScatterOptions& options) {
  const absl::Time deadline = Deadline(options.timeout);
  return CallOp<ops::Scatter>(MakeScatterRequest(input, axis, index, src, options), deadline);
}

absl::StatusOr<Tensor> Client::Scatter(const TensorView& input, int64_t axis,
                                       const TensorView& index, const Scalar& value,
                                       const ScatterOptions& options) {
  const absl::Time deadline = Deadline(options.timeout);
  return CallOp<ops::Scatter>(MakeScatterRequest(input, axis, index, value, options), deadline);
}

absl::StatusOr<Tensor> Client::IndexSelect(const TensorView& input, int64_t axis,
                                           const TensorView& index, const CallOptions& options) {
  const absl::Time deadline = Deadline(options.timeout);
  return CallOp<ops::IndexSelect>(MakeIndexSelectRequest(input, axis, index), deadline);
}

absl::StatusOr<Tensor> Client::IndexReduce(const TensorView& input, int64_t axis,
                                           const TensorView& index, const TensorView& src,
                                           const IndexReduceOptions& options) {
  const absl::Time deadline = Deadline(options.timeout);
  return CallOp<ops::IndexReduce>(MakeIndexReduceRequest(input, axis, index, src, options),
                                  deadline);
}

absl::StatusOr<Tensor> Client::SelectScatter(const TensorView& input, const TensorView& src,
                                             int64_t axis, int64_t index,
                                             const CallOptions& options) {
  const absl::Time deadline = Deadline(options.timeout);
  return CallOp<ops::SelectScatter>(MakeSelectScatterRequest(input, src, axis, index), deadline);
}

absl::StatusOr<Tensor> Client::SliceScatter(const TensorView& input, const TensorView& src,
                                            int64_t axis, const SliceOptions& options) {
  const absl::Time deadline = Deadline(options.timeout);
  return CallOp<ops::SliceScatter>(MakeSliceScatterRequest(input, src, axis, options), deadline);
}

absl::StatusOr<Tensor> Client::DiagonalScatter(const TensorView& input, const TensorView& src,
                                               const DiagonalOptions& options) {
  const absl::Time deadline = Deadline(options.timeout);
  return CallOp<ops::DiagonalScatter>(MakeDiagonalScatterRequest(input, src, options), deadline);
}

absl::StatusOr<Tensor> Client::GatherNd(const TensorView& input, const TensorView& index,
                                        const GatherNdOptions& options) {
  const absl::Time deadline = Deadline(options.timeout);
  return CallOp<ops::GatherNd>(MakeGatherNdRequest(input, index, options), deadline);
}

absl::StatusOr<Tensor> Client::ScatterNd(const std::optional<TensorView>& input,
                                         const TensorView& index, const TensorView& src,
                                         const ScatterNdOptions& options) {
  const absl::Time deadline = Deadline(options.timeout);
  return CallOp<ops::ScatterNd>(MakeScatterNdRequest(input, index, src, options), deadline);
}

absl::StatusOr<Tensor> Client::ScatterNdSub(const std::optional<TensorView>& input,
                                            const TensorView& index, const TensorView& src,
                                            const ScatterNdOptions& options) {
  if (options.reduce.has_value() && *options.reduce != Reduction::kAssign &&
      *options.reduce != Reduction::kSum) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "scatter_nd_sub: reduce = %s is not allowed (sub is SUM of the negated src; leave reduce "
        "unset or SUM)",
        ReductionName(*options.reduce)));
  }
  // The timeout counts from here, negating included, as every call's does from its start.
  const absl::Time deadline = Deadline(options.timeout);
  TENSOROPS_ASSIGN_OR_RETURN(const Tensor negated, Negated(src));
  ScatterNdOptions sum_options = options;
  sum_options.reduce = Reduction::kSum;
  return CallOp<ops::ScatterNd>(MakeScatterNdRequest(input, index, negated.view(), sum_options),
                                deadline);
}

absl::StatusOr<Tensor> Client::MaskedScatter(const TensorView& input, const TensorView& mask,
                                             const TensorView& src, const CallOptions& options) {
  const absl::Time deadline = Deadline(options.timeout);
  return CallOp<ops::MaskedScatter>(MakeMaskedScatterRequest(input, mask, src), deadline);
}

absl::StatusOr<std::string> ReadAuthTokenFile(const std::string& path) {
  TENSOROPS_ASSIGN_OR_RETURN(const std::string contents,
                             wire::ReadCredentialFile("auth token file", path));
  const absl::string_view token = absl::StripAsciiWhitespace(contents);
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "auth token file: %s holds no token (it is empty or only whitespace)", path));
  }
  if (!IsMetadataSafe(token)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "auth token file: the token in %s has a character that gRPC metadata cannot carry "
        "(expected printable ASCII without spaces)",
        path));
  }
  return std::string(token);
}

absl::StatusOr<Tensor> Client::Run(const v1::OpRequest& request, const CallOptions& options) {
  if (ChangesStore(request)) {
    return absl::InvalidArgumentError(
        "run: the request's result_options store the result or update in place, so the answer "
        "is a stored tensor, not a tensor: call RunStored");
  }
  if (ResultInSharedMemory(request)) {
    return absl::InvalidArgumentError(
        "run: the request's result_options write the result into shared memory, so the answer "
        "has no bytes: call RunInto");
  }
  TENSOROPS_ASSIGN_OR_RETURN(
      const v1::OpResponse response,
      CallRpc<v1::OpResponse>("run", Deadline(options.timeout),
                              [&](grpc::ClientContext* context, v1::OpResponse* received) {
                                return stub_->Run(context, request, received);
                              }));
  return DecodeResult(response.result(), "run", options_);
}

absl::StatusOr<StoredResult> Client::RunStored(v1::OpRequest request, const CallOptions& options) {
  v1::ResultOptions* result_options = MutableResultOptions(&request);
  if (result_options == nullptr ||
      (result_options->store_as().empty() && !result_options->in_place())) {
    return absl::InvalidArgumentError(
        "run_stored: the request neither stores its result (result_options.store_as) nor "
        "updates in place (result_options.in_place): call Run");
  }
  if (result_options->update_id().empty()) result_options->set_update_id(NewUpdateId());
  TENSOROPS_ASSIGN_OR_RETURN(
      const v1::OpResponse response,
      CallRpc<v1::OpResponse>("run_stored", Deadline(options.timeout),
                              [&](grpc::ClientContext* context, v1::OpResponse* received) {
                                return stub_->Run(context, request, received);
                              }));
  const v1::Tensor& result = response.result();
  if (!result.has_stored()) {
    return absl::InternalError("run_stored: the server's answer names no stored tensor");
  }
  StoredResult stored{.name = result.stored().name(), .version = result.stored().version()};
  TENSOROPS_ASSIGN_OR_RETURN(stored.dtype,
                             wire::DataTypeFromProto(result.dtype(), "run_stored", "result"));
  stored.shape.assign(result.shape().begin(), result.shape().end());
  if (result_options->return_data()) {
    v1::Tensor data = result;
    data.clear_stored();
    TENSOROPS_ASSIGN_OR_RETURN(stored.data, DecodeResult(data, "run_stored", options_));
  }
  return stored;
}

absl::StatusOr<std::map<std::string, Tensor>> Client::Backward(const v1::OpRequest& forward,
                                                               const TensorView& grad_output,
                                                               const CallOptions& options) {
  const absl::Time deadline = Deadline(options.timeout);
  v1::BackwardRequest request;
  *request.mutable_op() = forward;
  wire::EncodeTensor(grad_output, request.mutable_grad_output());
  TENSOROPS_ASSIGN_OR_RETURN(
      const v1::BackwardResponse response,
      CallRpc<v1::BackwardResponse>(
          "backward", deadline, [&](grpc::ClientContext* context, v1::BackwardResponse* received) {
            return stub_->Backward(context, request, received);
          }));
  std::map<std::string, Tensor> gradients;
  for (const auto& [argument, gradient] : response.gradients()) {
    TENSOROPS_ASSIGN_OR_RETURN(Tensor tensor, DecodeResult(gradient, "backward", options_));
    gradients.emplace(argument, std::move(tensor));
  }
  return gradients;
}

absl::StatusOr<v1::ServerInfoResponse> Client::ServerInfo(const CallOptions& options) {
  return CallRpc<v1::ServerInfoResponse>(
      "server_info", Deadline(options.timeout),
      [&](grpc::ClientContext* context, v1::ServerInfoResponse* received) {
        return stub_->ServerInfo(context, v1::ServerInfoRequest(), received);
      });
}

absl::StatusOr<v1::TensorInfo> Client::PutTensor(std::string_view name, const TensorView& value,
                                                 const PutTensorOptions& options) {
  const absl::Time deadline = Deadline(options.timeout);
  if (options.chunk_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "put_tensor: chunk_bytes = %d is out of range: must be >= 1", options.chunk_bytes));
  }
  // The wire takes row-major bytes: a strided view is made contiguous once, here.
  std::optional<Tensor> contiguous;
  const void* data = value.data();
  if (!value.is_contiguous()) {
    contiguous = Tensor::FromView(value);
    data = contiguous->data();
  }
  const int64_t bytes = value.numel() * value.itemsize();
  grpc::ClientContext context;
  TENSOROPS_RETURN_IF_ERROR(PrepareContext(deadline, "put_tensor", &context));
  v1::PutTensorResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::PutTensorRequest>> writer =
      stub_->PutTensor(&context, &response);
  v1::PutTensorRequest message;
  v1::PutTensorHeader* header = message.mutable_header();
  header->set_name(name.data(), name.size());
  header->set_dtype(wire::DataTypeToProto(value.dtype()));
  header->mutable_shape()->Assign(value.shape().begin(), value.shape().end());
  header->set_overwrite(options.overwrite);
  if (options.expected_version.has_value()) header->set_expected_version(*options.expected_version);
  // A failed write means the server ended the call: Finish says why.
  bool sending = writer->Write(message);
  for (int64_t offset = 0; sending && offset < bytes; offset += options.chunk_bytes) {
    const int64_t chunk = std::min(options.chunk_bytes, bytes - offset);
    message.set_data(static_cast<const char*>(data) + offset, static_cast<size_t>(chunk));
    sending = writer->Write(message);
    if (sending && options.progress) options.progress(offset + chunk, bytes);
  }
  if (sending) writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return CallStatus(status, target_, options_.tls);
  return response.info();
}

absl::Status Client::RegisterSharedMemory(std::string_view name, std::string_view key,
                                          int64_t byte_size, int64_t offset,
                                          const CallOptions& options) {
  v1::SharedMemoryRegion region;
  region.set_name(name.data(), name.size());
  region.mutable_system()->set_key(key.data(), key.size());
  region.mutable_system()->set_offset(offset);
  region.mutable_system()->set_byte_size(byte_size);
  return RegisterRegion(std::move(region), options);
}

absl::Status Client::RegisterCudaSharedMemory(std::string_view name, std::string_view raw_handle,
                                              int64_t device_id, int64_t byte_size,
                                              const CallOptions& options) {
  v1::SharedMemoryRegion region;
  region.set_name(name.data(), name.size());
  region.mutable_cuda()->set_raw_handle(raw_handle.data(), raw_handle.size());
  region.mutable_cuda()->set_device_id(device_id);
  region.mutable_cuda()->set_byte_size(byte_size);
  return RegisterRegion(std::move(region), options);
}

absl::Status Client::RegisterRegion(v1::SharedMemoryRegion region, const CallOptions& options) {
  v1::RegisterSharedMemoryRequest request;
  *request.mutable_region() = std::move(region);
  return CallRpc<v1::RegisterSharedMemoryResponse>(
             "register_shared_memory", Deadline(options.timeout),
             [&](grpc::ClientContext* context, v1::RegisterSharedMemoryResponse* received) {
               return stub_->RegisterSharedMemory(context, request, received);
             })
      .status();
}

absl::StatusOr<std::vector<std::string>> Client::UnregisterSharedMemory(
    std::string_view name, const CallOptions& options) {
  v1::UnregisterSharedMemoryRequest request;
  request.set_name(name.data(), name.size());
  TENSOROPS_ASSIGN_OR_RETURN(
      const v1::UnregisterSharedMemoryResponse response,
      CallRpc<v1::UnregisterSharedMemoryResponse>(
          "unregister_shared_memory", Deadline(options.timeout),
          [&](grpc::ClientContext* context, v1::UnregisterSharedMemoryResponse* received) {
            return stub_->UnregisterSharedMemory(context, request, received);
          }));
  return std::vector<std::string>(response.names().begin(), response.names().end());
}

absl::StatusOr<std::vector<v1::SharedMemoryRegion>> Client::ListSharedMemory(
    const CallOptions& options) {
  TENSOROPS_ASSIGN_OR_RETURN(
      const v1::ListSharedMemoryResponse response,
      CallRpc<v1::ListSharedMemoryResponse>(
          "list_shared_memory", Deadline(options.timeout),
          [&](grpc::ClientContext* context, v1::ListSharedMemoryResponse* received) {
            return stub_->ListSharedMemory(context, v1::ListSharedMemoryRequest(), received);
          }));
  return std::vector<v1::SharedMemoryRegion>(response.regions().begin(), response.regions().end());
}

absl::StatusOr<ResultShape> Client::RunInto(v1::OpRequest request,
                                            const v1::SharedMemoryRef& result,
                                            const CallOptions& options) {
  v1::ResultOptions* result_options = MutableResultOptions(&request);
  if (result_options == nullptr) {
    return absl::InvalidArgumentError(
        "run_into: op is not set (expected exactly one operation request, e.g. gather)");
  }
  *result_options->mutable_shared_memory() = result;
  TENSOROPS_ASSIGN_OR_RETURN(
      const v1::OpResponse response,
      CallRpc<v1::OpResponse>("run_into", Deadline(options.timeout),
                              [&](grpc::ClientContext* context, v1::OpResponse* received) {
                                return stub_->Run(context, request, received);
                              }));
  ResultShape shape;
  TENSOROPS_ASSIGN_OR_RETURN(
      shape.dtype, wire::DataTypeFromProto(response.result().dtype(), "run_into", "result"));
  shape.shape.assign(response.result().shape().begin(), response.result().shape().end());
  return shape;
}

absl::StatusOr<v1::TensorInfo> Client::PutTensorFromSharedMemory(std::string_view name,
                                                                 DataType dtype, ShapeSpan shape,
                                                                 const v1::SharedMemoryRef& source,
                                                                 const PutTensorOptions& options) {
  grpc::ClientContext context;
  TENSOROPS_RETURN_IF_ERROR(PrepareContext(Deadline(options.timeout), "put_tensor", &context));
  v1::PutTensorResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::PutTensorRequest>> writer =
      stub_->PutTensor(&context, &response);
  v1::PutTensorRequest message;
  v1::PutTensorHeader* header = message.mutable_header();
  header->set_name(name.data(), name.size());
  header->set_dtype(wire::DataTypeToProto(dtype));
  header->mutable_shape()->Assign(shape.begin(), shape.end());
  header->set_overwrite(options.overwrite);
  if (options.expected_version.has_value()) header->set_expected_version(*options.expected_version);
  *header->mutable_shared_memory() = source;
  // The header alone: the bytes are in the region. A failed write means the server ended the
  // call, and Finish says why.
  if (writer->Write(message)) writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return CallStatus(status, target_, options_.tls);
  return response.info();
}

absl::StatusOr<v1::TensorInfo> Client::GetTensorIntoSharedMemory(std::string_view name,
                                                                 const v1::SharedMemoryRef& target,
                                                                 const GetTensorOptions& options) {
  grpc::ClientContext context;
  TENSOROPS_RETURN_IF_ERROR(PrepareContext(Deadline(options.timeout), "get_tensor", &context));
  v1::GetTensorRequest request;
  request.set_name(name.data(), name.size());
  if (options.version.has_value()) request.set_version(*options.version);
  *request.mutable_shared_memory() = target;
  std::unique_ptr<grpc::ClientReader<v1::GetTensorResponse>> reader =
      stub_->GetTensor(&context, request);
  v1::GetTensorResponse message;
  std::optional<v1::TensorInfo> info;
  bool unexpected = false;
  while (reader->Read(&message)) {
    if (message.has_info() && !info.has_value()) {
      info = message.info();
    } else {
      unexpected = true;
    }
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) return CallStatus(status, target_, options_.tls);
  if (!info.has_value() || unexpected) {
    return absl::InternalError(
        "get_tensor: the server's answer to a download into shared memory was not its info "
        "alone");
  }
  return *std::move(info);
}

absl::StatusOr<Tensor> Client::GetTensor(std::string_view name, const GetTensorOptions& options) {
  grpc::ClientContext context;
  TENSOROPS_RETURN_IF_ERROR(PrepareContext(Deadline(options.timeout), "get_tensor", &context));
  v1::GetTensorRequest request;
  request.set_name(name.data(), name.size());
  if (options.version.has_value()) request.set_version(*options.version);
  request.set_chunk_bytes(options.chunk_bytes);
  std::unique_ptr<grpc::ClientReader<v1::GetTensorResponse>> reader =
      stub_->GetTensor(&context, request);
  v1::GetTensorResponse message;
  std::optional<Tensor> tensor;
  int64_t received = 0;
  absl::Status malformed;
  while (reader->Read(&message)) {
    if (!malformed.ok()) continue;
    if (!tensor.has_value()) {
      if (!message.has_info()) {
        malformed = absl::InternalError("get_tensor: the server sent data before the info");
        context.TryCancel();
        continue;
      }
      wire::DecodeLimits limits;
      absl::StatusOr<DataType> dtype =
          wire::DataTypeFromProto(message.info().dtype(), "get_tensor", "info");
      const Shape shape(message.info().shape().begin(), message.info().shape().end());
      absl::Status valid = dtype.status();
      if (valid.ok())
        valid = wire::CheckShape(*dtype, shape, "get_tensor", "info", limits).status();
      if (!valid.ok()) {
        malformed = absl::InternalError(
            absl::StrFormat("get_tensor: the server sent a malformed info: %s", valid.message()));
        context.TryCancel();
        continue;
      }
      tensor.emplace(*dtype, shape);
      continue;
    }
    const std::string& chunk = message.data();
    if (static_cast<int64_t>(chunk.size()) > tensor->nbytes() - received) {
      malformed =
          absl::InternalError("get_tensor: the server sent more bytes than the tensor holds");
      context.TryCancel();
      continue;
    }
    std::memcpy(static_cast<char*>(tensor->data()) + received, chunk.data(), chunk.size());
    received += static_cast<int64_t>(chunk.size());
    if (options.progress) options.progress(received, tensor->nbytes());
  }
  const grpc::Status status = reader->Finish();
  TENSOROPS_RETURN_IF_ERROR(malformed);
  if (!status.ok()) return CallStatus(status, target_, options_.tls);
  if (!tensor.has_value() || received != tensor->nbytes()) {
    return absl::InternalError(
        absl::StrFormat("get_tensor: the stream ended after %d of the tensor's bytes", received));
  }
  return *std::move(tensor);
}

absl::Status Client::DeleteTensor(std::string_view name, std::optional<int64_t> expected_version,
                                  const CallOptions& options) {
  v1::DeleteTensorRequest request;
  request.set_name(name.data(), name.size());
  if (expected_version.has_value()) request.set_expected_version(*expected_version);
  return CallRpc<v1::DeleteTensorResponse>(
             "delete_tensor", Deadline(options.timeout),
             [&](grpc::ClientContext* context, v1::DeleteTensorResponse* received) {
               return stub_->DeleteTensor(context, request, received);
             })
      .status();
}

absl::StatusOr<std::vector<v1::TensorInfo>> Client::ListTensors(const CallOptions& options) {
  TENSOROPS_ASSIGN_OR_RETURN(
      const v1::ListTensorsResponse response,
      CallRpc<v1::ListTensorsResponse>(
          "list_tensors", Deadline(options.timeout),
          [&](grpc::ClientContext* context, v1::ListTensorsResponse* received) {
            return stub_->ListTensors(context, v1::ListTensorsRequest(), received);
          }));
  return std::vector<v1::TensorInfo>(response.tensors().begin(), response.tensors().end());
}

absl::StatusOr<v1::TensorInfo> Client::TensorInfo(std::string_view name,
                                                  const CallOptions& options) {
  v1::TensorInfoRequest request;
  request.set_name(name.data(), name.size());
  TENSOROPS_ASSIGN_OR_RETURN(
      const v1::TensorInfoResponse response,
      CallRpc<v1::TensorInfoResponse>(
          "tensor_info", Deadline(options.timeout),
          [&](grpc::ClientContext* context, v1::TensorInfoResponse* received) {
            return stub_->TensorInfo(context, request, received);
          }));
  return response.info();
}

absl::StatusOr<v1::SnapshotStoreResponse> Client::SnapshotStore(const CallOptions& options) {
  return CallRpc<v1::SnapshotStoreResponse>(
      "snapshot_store", Deadline(options.timeout),
      [&](grpc::ClientContext* context, v1::SnapshotStoreResponse* received) {
        return stub_->SnapshotStore(context, v1::SnapshotStoreRequest(), received);
      });
}

absl::StatusOr<std::unique_ptr<OpStream>> Client::OpenStream(const CallOptions& options) {
  auto context = std::make_unique<grpc::ClientContext>();
  TENSOROPS_RETURN_IF_ERROR(PrepareContext(Deadline(options.timeout), "run_stream", context.get()));
  std::unique_ptr<OpStream> stream(new OpStream(options_, std::move(context)));
  stream->stream_ = stub_->RunStream(stream->context_.get());
  return stream;
}

OpStream::OpStream(const ClientOptions& options, std::unique_ptr<grpc::ClientContext> context)
    : options_(options), context_(std::move(context)) {}

OpStream::~OpStream() {
  if (!finished_) {
    context_->TryCancel();
    Finish().IgnoreError();
  }
}

bool OpStream::Send(uint64_t request_id, const v1::OpRequest& request) {
  v1::RunStreamRequest message;
  message.set_request_id(request_id);
  *message.mutable_op() = request;
  return stream_->Write(message);
}

bool OpStream::CloseSend() { return stream_->WritesDone(); }

std::optional<StreamResult> OpStream::Receive() {
  v1::RunStreamResponse response;
  if (!stream_->Read(&response)) return std::nullopt;
  StreamResult answer{.request_id = response.request_id(), .result = Tensor()};
  if (response.has_error()) {
    answer.result = absl::Status(static_cast<absl::StatusCode>(response.error().code()),
                                 response.error().message());
  } else {
    answer.result = DecodeResult(response.result(), "run_stream", options_);
  }
  return answer;
}

absl::Status OpStream::Finish() {
  if (finished_) return absl::FailedPreconditionError("run_stream: the stream is finished");
  // gRPC's Finish needs every answer read first.
  v1::RunStreamResponse discarded;
  while (stream_->Read(&discarded)) {
  }
  finished_ = true;
  return CallStatus(stream_->Finish());
}

}  // namespace tensorops
