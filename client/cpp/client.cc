#include "client/cpp/client.h"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "kernels/dispatch.h"
#include "kernels/half.h"
#include "proto/codec.h"
#include "proto/credential_file.h"
#include "proto/grpc_status.h"

namespace tensorops {

namespace {

// gRPC clamps a retry policy's maxAttempts to 5; larger values would silently mean 5.
constexpr int kMaxAttemptsCap = 5;

// CallDeadline returns when a call starting now must finish: `timeout`, or the client's default
// when unset, from now; InfiniteFuture() for no deadline.
absl::Time CallDeadline(const std::optional<absl::Duration>& timeout,
                        absl::Duration default_timeout) {
  return absl::Now() + timeout.value_or(default_timeout);
}

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
    absl::StatusOr<std::string> root_ca =
        wire::ReadCredentialFile("tls.root_ca_file", tls.root_ca_file);
    if (!root_ca.ok()) return root_ca.status();
    ssl_options.pem_root_certs = std::move(*root_ca);
  }
  if (!tls.cert_file.empty()) {
    absl::StatusOr<std::string> cert = wire::ReadCredentialFile("tls.cert_file", tls.cert_file);
    if (!cert.ok()) return cert.status();
    ssl_options.pem_cert_chain = std::move(*cert);
    absl::StatusOr<std::string> key = wire::ReadCredentialFile("tls.key_file", tls.key_file);
    if (!key.ok()) return key.status();
    ssl_options.pem_private_key = std::move(*key);
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

}  // namespace

std::string ServiceConfigJson(const ClientOptions& options) {
  // gRPC accepts no retryPolicy with maxAttempts < 2: one attempt is no policy at all.
  const std::string retry_policy =
      options.max_attempts < 2
          ? ""
          : absl::StrFormat(
                R"(,"retryPolicy":{"maxAttempts":%d,"initialBackoff":"0.05s","maxBackoff":"1s",)"
                R"("backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE","CANCELLED"]})",
                options.max_attempts);
  return absl::StrFormat(R"({"loadBalancingConfig":[{"%s":{}}],)"
                         R"("methodConfig":[{"name":[{"service":"tensorops.v1.TensorOps"}]%s}]})",
                         options.round_robin ? "round_robin" : "pick_first", retry_policy);
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
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> tls = TlsCredentials(*options.tls);
    if (!tls.ok()) return tls.status();
    credentials = std::move(*tls);
    if (!options.tls->server_name_override.empty()) {
      arguments.SetString(GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, options.tls->server_name_override);
    }
  }
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(target, std::move(credentials), arguments);
  return std::unique_ptr<Client>(new Client(std::move(channel), options));
}

Client::Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options)
    : options_(std::move(options)),
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

template <typename Response, typename Send>
absl::StatusOr<Tensor> Client::CallUnary(std::string_view op, absl::Time deadline,
                                         Send send) const {
  grpc::ClientContext context;
  if (absl::Status prepared = PrepareContext(deadline, op, &context); !prepared.ok()) {
    return prepared;
  }
  Response response;
  const grpc::Status status = send(&context, &response);
  if (!status.ok()) return wire::FromGrpcStatus(status);
  return DecodeResult(response.result(), op, options_);
}

absl::StatusOr<Tensor> Client::Gather(const TensorView& input, int64_t axis,
                                      const TensorView& index, const GatherOptions& options) {
  const absl::Time deadline = CallDeadline(options.timeout, options_.default_timeout);
  const v1::GatherRequest request = MakeGatherRequest(input, axis, index, options);
  return CallUnary<v1::GatherResponse>("gather", deadline,
                                       [&](grpc::ClientContext* context, auto* response) {
                                         return stub_->Gather(context, request, response);
                                       });
}

absl::StatusOr<Tensor> Client::Scatter(const TensorView& input, int64_t axis,
                                       const TensorView& index, const TensorView& src,
                                       const ScatterOptions& options) {
  const absl::Time deadline = CallDeadline(options.timeout, options_.default_timeout);
  const v1::ScatterRequest request = MakeScatterRequest(input, axis, index, src, options);
  return CallUnary<v1::ScatterResponse>("scatter", deadline,
                                        [&](grpc::ClientContext* context, auto* response) {
                                          return stub_->Scatter(context, request, response);
                                        });
}

absl::StatusOr<Tensor> Client::Scatter(const TensorView& input, int64_t axis,
                                       const TensorView& index, const Scalar& value,
                                       const ScatterOptions& options) {
  const absl::Time deadline = CallDeadline(options.timeout, options_.default_timeout);
  const v1::ScatterRequest request = MakeScatterRequest(input, axis, index, value, options);
  return CallUnary<v1::ScatterResponse>("scatter", deadline,
                                        [&](grpc::ClientContext* context, auto* response) {
                                          return stub_->Scatter(context, request, response);
                                        });
}

absl::StatusOr<Tensor> Client::IndexSelect(const TensorView& input, int64_t axis,
                                           const TensorView& index, const CallOptions& options) {
  const absl::Time deadline = CallDeadline(options.timeout, options_.default_timeout);
  const v1::IndexSelectRequest request = MakeIndexSelectRequest(input, axis, index);
  return CallUnary<v1::IndexSelectResponse>("index_select", deadline,
                                            [&](grpc::ClientContext* context, auto* response) {
                                              return stub_->IndexSelect(context, request, response);
                                            });
}

absl::StatusOr<Tensor> Client::IndexReduce(const TensorView& input, int64_t axis,
                                           const TensorView& index, const TensorView& src,
                                           const IndexReduceOptions& options) {
  const absl::Time deadline = CallDeadline(options.timeout, options_.default_timeout);
  const v1::IndexReduceRequest request = MakeIndexReduceRequest(input, axis, index, src, options);
  return CallUnary<v1::IndexReduceResponse>("index_reduce", deadline,
                                            [&](grpc::ClientContext* context, auto* response) {
                                              return stub_->IndexReduce(context, request, response);
                                            });
}

absl::StatusOr<Tensor> Client::SelectScatter(const TensorView& input, const TensorView& src,
                                             int64_t axis, int64_t index,
                                             const CallOptions& options) {
  const absl::Time deadline = CallDeadline(options.timeout, options_.default_timeout);
  const v1::SelectScatterRequest request = MakeSelectScatterRequest(input, src, axis, index);
  return CallUnary<v1::SelectScatterResponse>(
      "select_scatter", deadline, [&](grpc::ClientContext* context, auto* response) {
        return stub_->SelectScatter(context, request, response);
      });
}

absl::StatusOr<Tensor> Client::SliceScatter(const TensorView& input, const TensorView& src,
                                            int64_t axis, const SliceOptions& options) {
  const absl::Time deadline = CallDeadline(options.timeout, options_.default_timeout);
  const v1::SliceScatterRequest request = MakeSliceScatterRequest(input, src, axis, options);
  return CallUnary<v1::SliceScatterResponse>(
      "slice_scatter", deadline, [&](grpc::ClientContext* context, auto* response) {
        return stub_->SliceScatter(context, request, response);
      });
}

absl::StatusOr<Tensor> Client::DiagonalScatter(const TensorView& input, const TensorView& src,
                                               const DiagonalOptions& options) {
  const absl::Time deadline = CallDeadline(options.timeout, options_.default_timeout);
  const v1::DiagonalScatterRequest request = MakeDiagonalScatterRequest(input, src, options);
  return CallUnary<v1::DiagonalScatterResponse>(
      "diagonal_scatter", deadline, [&](grpc::ClientContext* context, auto* response) {
        return stub_->DiagonalScatter(context, request, response);
      });
}

absl::StatusOr<Tensor> Client::GatherNd(const TensorView& input, const TensorView& index,
                                        const GatherNdOptions& options) {
  const absl::Time deadline = CallDeadline(options.timeout, options_.default_timeout);
  const v1::GatherNdRequest request = MakeGatherNdRequest(input, index, options);
  return CallUnary<v1::GatherNdResponse>("gather_nd", deadline,
                                         [&](grpc::ClientContext* context, auto* response) {
                                           return stub_->GatherNd(context, request, response);
                                         });
}

absl::StatusOr<Tensor> Client::ScatterNd(const std::optional<TensorView>& input,
                                         const TensorView& index, const TensorView& src,
                                         const ScatterNdOptions& options) {
  const absl::Time deadline = CallDeadline(options.timeout, options_.default_timeout);
  const v1::ScatterNdRequest request = MakeScatterNdRequest(input, index, src, options);
  return CallUnary<v1::ScatterNdResponse>("scatter_nd", deadline,
                                          [&](grpc::ClientContext* context, auto* response) {
                                            return stub_->ScatterNd(context, request, response);
                                          });
}

absl::StatusOr<Tensor> Client::ScatterNdSub(const std::optional<TensorView>& input,
                                            const TensorView& index, const TensorView& src,
                                            const ScatterNdOptions& options) {
  if (options.reduce != Reduction::kAssign && options.reduce != Reduction::kSum) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "scatter_nd_sub: reduce = %s is not allowed (sub is SUM of the negated src; leave reduce "
        "unset or SUM)",
        ReductionName(options.reduce)));
  }
  // The timeout counts from here, negating included, as every call's does from its start.
  const absl::Time deadline = CallDeadline(options.timeout, options_.default_timeout);
  absl::StatusOr<Tensor> negated = Negated(src);
  if (!negated.ok()) return negated.status();
  ScatterNdOptions sum_options = options;
  sum_options.reduce = Reduction::kSum;
  sum_options.timeout = deadline - absl::Now();
  return ScatterNd(input, index, negated->view(), sum_options);
}

absl::StatusOr<Tensor> Client::MaskedScatter(const TensorView& input, const TensorView& mask,
                                             const TensorView& src, const CallOptions& options) {
  const absl::Time deadline = CallDeadline(options.timeout, options_.default_timeout);
  const v1::MaskedScatterRequest request = MakeMaskedScatterRequest(input, mask, src);
  return CallUnary<v1::MaskedScatterResponse>(
      "masked_scatter", deadline, [&](grpc::ClientContext* context, auto* response) {
        return stub_->MaskedScatter(context, request, response);
      });
}

absl::StatusOr<std::string> ReadAuthTokenFile(const std::string& path) {
  absl::StatusOr<std::string> contents = wire::ReadCredentialFile("auth token file", path);
  if (!contents.ok()) return contents.status();
  const absl::string_view token = absl::StripAsciiWhitespace(*contents);
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
  const absl::Time deadline = CallDeadline(options.timeout, options_.default_timeout);
  return CallUnary<v1::OpResponse>("run", deadline,
                                   [&](grpc::ClientContext* context, auto* response) {
                                     return stub_->Run(context, request, response);
                                   });
}

absl::StatusOr<std::map<std::string, Tensor>> Client::Backward(const v1::OpRequest& forward,
                                                               const TensorView& grad_output,
                                                               const CallOptions& options) {
  const absl::Time deadline = CallDeadline(options.timeout, options_.default_timeout);
  v1::BackwardRequest request;
  *request.mutable_op() = forward;
  wire::EncodeTensor(grad_output, request.mutable_grad_output());
  grpc::ClientContext context;
  if (absl::Status prepared = PrepareContext(deadline, "backward", &context); !prepared.ok()) {
    return prepared;
  }
  v1::BackwardResponse response;
  const grpc::Status status = stub_->Backward(&context, request, &response);
  if (!status.ok()) return wire::FromGrpcStatus(status);
  std::map<std::string, Tensor> gradients;
  for (const auto& [argument, gradient] : response.gradients()) {
    absl::StatusOr<Tensor> tensor = DecodeResult(gradient, "backward", options_);
    if (!tensor.ok()) return tensor.status();
    gradients.emplace(argument, *std::move(tensor));
  }
  return gradients;
}

absl::StatusOr<v1::ServerInfoResponse> Client::ServerInfo(const CallOptions& options) {
  const absl::Time deadline = CallDeadline(options.timeout, options_.default_timeout);
  grpc::ClientContext context;
  if (absl::Status prepared = PrepareContext(deadline, "server_info", &context); !prepared.ok()) {
    return prepared;
  }
  v1::ServerInfoResponse response;
  const grpc::Status status = stub_->ServerInfo(&context, v1::ServerInfoRequest(), &response);
  if (!status.ok()) return wire::FromGrpcStatus(status);
  return response;
}

absl::StatusOr<std::unique_ptr<OpStream>> Client::OpenStream(const CallOptions& options) {
  const absl::Time deadline = CallDeadline(options.timeout, options_.default_timeout);
  auto context = std::make_unique<grpc::ClientContext>();
  if (absl::Status prepared = PrepareContext(deadline, "run_stream", context.get());
      !prepared.ok()) {
    return prepared;
  }
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
  return wire::FromGrpcStatus(stream_->Finish());
}

}  // namespace tensorops
