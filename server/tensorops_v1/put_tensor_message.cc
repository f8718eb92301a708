#include "server/tensorops_v1/put_tensor_message.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace tensorops {
namespace {

// The tag of PutTensorRequest.data: field 2, length-delimited.
constexpr uint8_t kDataTag = (2 << 3) | 2;
// A tag byte and a varint of at most 10 bytes.
constexpr size_t kMaxHeadBytes = 11;

}  // namespace

int64_t DataFieldLength(std::string_view head, size_t total, size_t* header_bytes) {
  if (head.empty() || static_cast<uint8_t>(head[0]) != kDataTag) return -1;
  uint64_t length = 0;
  for (size_t i = 1; i < head.size() && i < kMaxHeadBytes; ++i) {
    const auto byte = static_cast<uint8_t>(head[i]);
    const int shift = 7 * static_cast<int>(i - 1);
    if (shift >= 63 && (byte & 0x7f) > 1) return -1;  // past 64 bits
    length |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      if (length > total || i + 1 + length != total) return -1;
      *header_bytes = i + 1;
      return static_cast<int64_t>(length);
    }
  }
  return -1;
}

absl::Status PutTensorMessage::ForEachDataPiece(
    const std::function<absl::Status(std::string_view)>& piece) const {
  size_t skip = data_offset;
  size_t left = data_bytes;
  for (const grpc::Slice& slice : slices) {
    if (left == 0) break;
    const auto* begin = reinterpret_cast<const char*>(slice.begin());
    size_t size = slice.size();
    if (skip >= size) {
      skip -= size;
      continue;
    }
    begin += skip;
    size = std::min(size - skip, left);
    skip = 0;
    if (absl::Status status = piece(std::string_view(begin, size)); !status.ok()) return status;
    left -= size;
  }
  return absl::OkStatus();
}

}  // namespace tensorops

namespace grpc {

Status SerializationTraits<tensorops::PutTensorMessage, void>::Deserialize(
    ByteBuffer* buffer, tensorops::PutTensorMessage* message) {
  message->is_data = false;
  message->slices.clear();
  message->bytes = buffer->Valid() ? buffer->Length() : 0;
  std::vector<Slice> slices;
  if (buffer->Valid() && buffer->Dump(&slices).ok()) {
    // The first bytes, across slices however the transport cut them.
    char head[11];
    size_t got = 0;
    for (const Slice& slice : slices) {
      const size_t take = std::min(slice.size(), sizeof(head) - got);
      std::memcpy(head + got, slice.begin(), take);
      got += take;
      if (got == sizeof(head)) break;
    }
    size_t header_bytes = 0;
    const int64_t length =
        tensorops::DataFieldLength(std::string_view(head, got), message->bytes, &header_bytes);
    if (length >= 0) {
      message->is_data = true;
      message->slices = std::move(slices);
      message->data_offset = header_bytes;
      message->data_bytes = static_cast<size_t>(length);
      buffer->Clear();
      return Status::OK;
    }
  }
  return SerializationTraits<tensorops::Parsed<tensorops::v1::PutTensorRequest>>::Deserialize(
      buffer, &message->parsed);
}

}  // namespace grpc
