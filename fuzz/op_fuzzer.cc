// op_fuzzer: any op request, as a client would send it to Run, through the op table's decode,
// planning and CPU kernel, then the result's invariants. The limits are small so that one input
// runs in microseconds; a finding is a crash, a sanitizer report, or a result that breaks them.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "fuzz/fuzz_checks.h"
#include "server/core/prepared_op.h"
#include "tensorops/v1/generic.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tensorops::v1::OpRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return -1;  // not kept in the corpus
  tensorops::v1::Tensor result;
  if (!tensorops::fuzz::RunPrepared(
          tensorops::PrepareOp(request, tensorops::fuzz::kLimits, &result))) {
    return 0;
  }
  tensorops::fuzz::CheckTensor(result, tensorops::fuzz::kLimits);
  return 0;
}
