// backward_fuzzer: any Backward request (a forward op request and grad_output) through
// PrepareBackward and the backward kernels; every gradient must decode within the limits.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_checks.h"
#include "server/core/prepared_op.h"
#include "tensorops/v1/generic.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tensorops::v1::BackwardRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return -1;
  tensorops::v1::BackwardResponse response;
  if (!tensorops::fuzz::RunPrepared(
          tensorops::PrepareBackward(request, tensorops::fuzz::kLimits, &response))) {
    return 0;
  }
  for (const auto& [name, gradient] : response.gradients()) {
    tensorops::fuzz::CheckTensor(gradient, tensorops::fuzz::kLimits);
  }
  return 0;
}
