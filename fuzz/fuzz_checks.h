// What every fuzz target checks of an outcome, besides not crashing: small limits, so that one
// input runs fast; errors a client may get (never INTERNAL, UNKNOWN or an empty message); tensors
// whose bytes match their dtype and shape.
#ifndef TENSOROPS_FUZZ_FUZZ_CHECKS_H_
#define TENSOROPS_FUZZ_FUZZ_CHECKS_H_

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/codec.h"
#include "server/core/prepared_op.h"
#include "spdlog/spdlog.h"
#include "tensorops/v1/tensor.pb.h"

namespace tensorops::fuzz {

// Small enough that a kernel over them runs in microseconds, large enough for every op's shapes.
inline constexpr wire::DecodeLimits kLimits{
    .max_rank = 6, .max_elements = int64_t{1} << 14, .max_bytes = int64_t{1} << 17};

// Fail reports a broken invariant as a finding (libFuzzer saves the input that caused it).
[[noreturn]] inline void Fail(const char* what, const absl::Status& status = absl::OkStatus()) {
  std::fprintf(stderr, "fuzz finding: %s %s\n", what, status.ToString().c_str());
  std::abort();
}

// CheckError: a request the server refuses gets a status a client can act on.
inline void CheckError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kOk:
      Fail("an error of a code no request should cause:", status);
    default:
      break;
  }
  if (status.message().empty()) Fail("an error without a message:", status);
}

// CheckTensor: a result tensor holds exactly its shape's bytes, within the limits.
inline void CheckTensor(const v1::Tensor& tensor, const wire::DecodeLimits& limits) {
  absl::StatusOr<TensorView> view = wire::DecodeTensor(tensor, "fuzz", "result", limits);
  if (!view.ok()) Fail("a result that does not decode:", view.status());
}

// RunPrepared runs a prepared call as a worker does (its kernel, then its finish step), checking
// the error of a refused preparation or a failed run; true when the call succeeded.
inline bool RunPrepared(const absl::StatusOr<PreparedOp>& op) {
  if (!op.ok()) {
    CheckError(op.status());
    return false;
  }
  absl::Status status = GuardExceptions(op->op, op->run);
  if (status.ok() && op->finish) status = GuardExceptions(op->op, op->finish);
  if (!status.ok()) {
    CheckError(status);
    return false;
  }
  return true;
}

}  // namespace tensorops::fuzz

// LLVMFuzzerInitialize (libFuzzer calls it once, before the first input; each fuzzer is one
// translation unit including this header) quiets the libraries: protobuf logs every string field
// that is not UTF-8 and the server logs every failed call, which at thousands of inputs a second
// would bury the fuzzer's own output and slow it.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  spdlog::set_level(spdlog::level::off);
  return 0;
}

#endif  // TENSOROPS_FUZZ_FUZZ_CHECKS_H_
