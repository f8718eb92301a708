// npy_fuzzer: the CLI's .npy reader on any bytes, both ways of reading `<u2`; a file it accepts
// is written back and read again to the same tensor.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "client/cpp/npy.h"
#include "fuzz/fuzz_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (const bool uint16_as_bfloat16 : {false, true}) {
    absl::StatusOr<tensorops::Tensor> tensor =
        tensorops::ParseNpy(bytes, "<fuzz>", {.uint16_as_bfloat16 = uint16_as_bfloat16});
    if (!tensor.ok()) {
      if (tensor.status().code() != absl::StatusCode::kInvalidArgument) {
        tensorops::fuzz::Fail("a .npy error other than INVALID_ARGUMENT:", tensor.status());
      }
      continue;
    }
    const std::string written = tensorops::SerializeNpy(tensor->view());
    absl::StatusOr<tensorops::Tensor> again =
        tensorops::ParseNpy(written, "<written>", {.uint16_as_bfloat16 = uint16_as_bfloat16});
    if (!again.ok()) tensorops::fuzz::Fail("a written .npy that does not read:", again.status());
    if (again->dtype() != tensor->dtype() || again->shape() != tensor->shape() ||
        again->nbytes() != tensor->nbytes() ||
        std::memcmp(again->data(), tensor->data(), static_cast<size_t>(tensor->nbytes())) != 0) {
      tensorops::fuzz::Fail("a .npy round trip that changed the tensor");
    }
  }
  return 0;
}
