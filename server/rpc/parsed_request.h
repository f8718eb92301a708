// Parsed<T>: a request message of type T as the server's handlers receive it, with whether its
// bytes parsed.
//
// gRPC answers a request body that does not parse as its message with UNIMPLEMENTED and an empty
// message, before any handler runs: a client that sends garbage (or a message of another type)
// is told nothing useful. The handlers of tensorops.v1 therefore take Parsed<T>, whose
// SerializationTraits below always hand the call to the handler, which answers INVALID_ARGUMENT
// naming the message type (MalformedRequestError). The bytes are parsed exactly as gRPC's own
// protobuf traits parse them (the same ZeroCopyInputStream over the received slices; no extra
// copy).
//
// The handlers also refuse a request larger than --max_message_bytes themselves
// (RequestError): gRPC's own receive limit is set above the flag (GrpcMaxReceiveMessageBytes in
// server/config/server_options.h), so that such a request reaches them and its caller is told the
// flag, the request's size and the limit, where gRPC would say only "Received message larger than
// max".
#ifndef TENSOROPS_SERVER_RPC_PARSED_REQUEST_H_
#define TENSOROPS_SERVER_RPC_PARSED_REQUEST_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/byte_buffer.h"

namespace tensorops {

template <typename T>
struct Parsed {
  T message;
  // False when the request's bytes are not a valid T, or none arrived; `message` is then
  // unspecified.
  bool ok = true;
  // False when no request message arrived at all: the client cancelled the call (or went away)
  // while sending it, or closed its side of the call without sending one.
  bool arrived = true;
  // The size of the request body, for the error message.
  size_t bytes = 0;
};

// MalformedRequestError is the status of a call whose request `parsed` did not parse: CANCELLED
// when none arrived (the client gave up on the call; counting it INVALID_ARGUMENT would blame a
// request nobody sent), INVALID_ARGUMENT naming the message type otherwise.
template <typename T>
absl::Status MalformedRequestError(const Parsed<T>& parsed) {
  if (!parsed.arrived) {
    return absl::CancelledError(absl::StrFormat(
        "no %s message arrived: the client cancelled the call, or closed its side of the call "
        "without sending the request",
        T::descriptor()->full_name()));
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "the request body (%d bytes) is not a valid %s message; send the request type the method "
      "declares, serialized with protobuf",
      parsed.bytes, T::descriptor()->full_name()));
}

// kSmallerRequestAdvice is what MessageTooLargeError advises by default.
inline constexpr std::string_view kSmallerRequestAdvice =
    "send a smaller request; a tensor too large for one message can be uploaded to the tensor "
    "store with PutTensor, in chunks, and referenced by name";

// MessageTooLargeError is the RESOURCE_EXHAUSTED of a request message of `bytes` bytes, of type
// `message_type`, over the server's --max_message_bytes (`max_message_bytes`), ending with
// `advice`: "request of 240034 bytes (tensorops.v1.GatherRequest) is larger than
// --max_message_bytes=100000: send a smaller request; ...".
inline absl::Status MessageTooLargeError(std::string_view message_type, size_t bytes,
                                         int64_t max_message_bytes,
                                         std::string_view advice = kSmallerRequestAdvice) {
  return absl::ResourceExhaustedError(
      absl::StrFormat("request of %d bytes (%s) is larger than --max_message_bytes=%d: %s", bytes,
                      message_type, max_message_bytes, advice));
}

// RequestError is what a handler answers to the request `parsed` before it reads it: OK when it
// arrived, is at most `max_message_bytes` (--max_message_bytes) and parsed; else CANCELLED when
// none arrived, RESOURCE_EXHAUSTED naming the flag when it is larger (whether it parsed or not:
// MessageTooLargeError), INVALID_ARGUMENT when it did not parse (MalformedRequestError).
template <typename T>
absl::Status RequestError(const Parsed<T>& parsed, int64_t max_message_bytes) {
  if (parsed.arrived && static_cast<int64_t>(parsed.bytes) > max_message_bytes) {
    return MessageTooLargeError(T::descriptor()->full_name(), parsed.bytes, max_message_bytes);
  }
  if (!parsed.ok) return MalformedRequestError(parsed);
  return absl::OkStatus();
}

}  // namespace tensorops

namespace grpc {

template <typename T>
class SerializationTraits<tensorops::Parsed<T>, void> {
 public:
  static Status Serialize(const tensorops::Parsed<T>& parsed, ByteBuffer* buffer,
                          bool* own_buffer) {
    return SerializationTraits<T>::Serialize(parsed.message, buffer, own_buffer);
  }
  // Always OK, so that the handler runs and names the problem (see Parsed).
  static Status Deserialize(ByteBuffer* buffer, tensorops::Parsed<T>* parsed) {
    // gRPC hands a call whose request never came to the handler with no buffer.
    parsed->arrived = buffer->Valid();
    parsed->bytes = parsed->arrived ? buffer->Length() : 0;
    parsed->ok = SerializationTraits<T>::Deserialize(buffer, &parsed->message).ok();
    return Status::OK;
  }
};

}  // namespace grpc

#endif  // TENSOROPS_SERVER_RPC_PARSED_REQUEST_H_
