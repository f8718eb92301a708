// PutTensorMessage: one message of a PutTensor stream as the server reads it, its data left in
// gRPC's buffers.
//
// A PutTensor stream is a header, then the tensor's bytes in data messages. Parsed as a protobuf
// message, every data message is copied out of the slices gRPC received into a std::string, which
// the server then copies into the stored tensor: two copies of every byte. A message that is
// exactly one `data` field (what every client sends after the header) is instead recognised by
// its first bytes and kept as the received slices, and PutTensorReactor copies its bytes straight
// into the store: one copy. Any other message (the header, or a data message with anything else
// in it) is parsed as a whole, as Parsed<v1::PutTensorRequest>.
#ifndef TENSOROPS_SERVER_TENSOROPS_V1_PUT_TENSOR_MESSAGE_H_
#define TENSOROPS_SERVER_TENSOROPS_V1_PUT_TENSOR_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "server/rpc/parsed_request.h"
#include "tensorops/v1/store.pb.h"

namespace tensorops {

struct PutTensorMessage {
  // True when the message is one `data` field, kept in `slices`; else `parsed` holds it.
  bool is_data = false;
  // The message as received (is_data); its data bytes are [data_offset, data_offset +
  // data_bytes) of their concatenation.
  std::vector<grpc::Slice> slices;
  size_t data_offset = 0;
  size_t data_bytes = 0;
  // Any other message, parsed.
  Parsed<v1::PutTensorRequest> parsed;
  // The message's size on the wire.
  size_t bytes = 0;

  // ForEachDataPiece calls `piece(bytes)` for the data bytes of a data message, in order, one
  // contiguous piece per slice they span, and stops at the first error, which it returns.
  absl::Status ForEachDataPiece(const std::function<absl::Status(std::string_view)>& piece) const;
};

// DataFieldLength returns the length of the `data` field that `head` (the first bytes of a
// message of `total` bytes, up to 11 of them) begins, when that field is the whole message; -1
// otherwise. Exposed for tests.
int64_t DataFieldLength(std::string_view head, size_t total, size_t* header_bytes);

}  // namespace tensorops

namespace grpc {

template <>
class SerializationTraits<tensorops::PutTensorMessage, void> {
 public:
  // The server never sends this type; here for the handler template.
  static Status Serialize(const tensorops::PutTensorMessage& message, ByteBuffer* buffer,
                          bool* own_buffer) {
    return SerializationTraits<tensorops::Parsed<tensorops::v1::PutTensorRequest>>::Serialize(
        message.parsed, buffer, own_buffer);
  }
  // Always OK, as Parsed's (the handler names a malformed message).
  static Status Deserialize(ByteBuffer* buffer, tensorops::PutTensorMessage* message);
};

}  // namespace grpc

#endif  // TENSOROPS_SERVER_TENSOROPS_V1_PUT_TENSOR_MESSAGE_H_
