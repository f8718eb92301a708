// codec_fuzzer: the wire codec on any bytes. The first byte picks the message the rest is parsed
// as (a Tensor, or a request message of either protocol); a Tensor is decoded under the limits
// and, when valid, encoded back to the same bytes; every message survives a serialize/parse
// round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_checks.h"
#include "google/protobuf/util/field_comparator.h"
#include "google/protobuf/util/message_differencer.h"
#include "inference/grpc_service.pb.h"
#include "proto/codec.h"
#include "server/core/prepared_op.h"
#include "server/core/stored_operands.h"
#include "tensorops/v1/generic.pb.h"
#include "tensorops/v1/store.pb.h"

namespace {

template <typename Message>
void RoundTrip(const uint8_t* data, size_t size) {
  Message message;
  if (!message.ParseFromArray(data, static_cast<int>(size))) return;
  Message again;
  // A NaN (a KServe double parameter may be one) is never equal to itself; the round trip must
  // keep it a NaN, which is what treating NaNs as equal checks.
  google::protobuf::util::DefaultFieldComparator comparator;
  comparator.set_treat_nan_as_equal(true);
  google::protobuf::util::MessageDifferencer differencer;
  differencer.set_field_comparator(&comparator);
  if (!again.ParseFromString(message.SerializeAsString()) || !differencer.Compare(message, again)) {
    tensorops::fuzz::Fail("a message that does not survive a round trip");
  }
  if constexpr (std::is_same_v<Message, tensorops::v1::Tensor>) {
    absl::StatusOr<tensorops::TensorView> view =
        tensorops::wire::DecodeTensor(message, "fuzz", "tensor", tensorops::fuzz::kLimits);
    if (!view.ok()) {
      tensorops::fuzz::CheckError(view.status());
      return;
    }
    tensorops::v1::Tensor encoded;
    tensorops::wire::EncodeTensor(*view, &encoded);
    if (encoded.data() != message.data()) tensorops::fuzz::Fail("decode/encode changed bytes");
  } else if constexpr (std::is_same_v<Message, tensorops::v1::OpRequest>) {
    // The names logs and metrics take from a request are fixed strings, never the client's.
    (void)tensorops::OpName(message);
    (void)tensorops::ReferencesStoredTensors(message);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return -1;
  const uint8_t kind = data[0];
  ++data;
  --size;
  switch (kind % 6) {
    case 0:
      RoundTrip<tensorops::v1::Tensor>(data, size);
      break;
    case 1:
      RoundTrip<tensorops::v1::OpRequest>(data, size);
      break;
    case 2:
      RoundTrip<tensorops::v1::BackwardRequest>(data, size);
      break;
    case 3:
      RoundTrip<tensorops::v1::RunStreamRequest>(data, size);
      break;
    case 4:
      RoundTrip<tensorops::v1::PutTensorRequest>(data, size);
      break;
    case 5:
      RoundTrip<inference::ModelInferRequest>(data, size);
      break;
  }
  return 0;
}
