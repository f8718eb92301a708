// cpu::Scatter for uint8 and bfloat16: ScatterAs<uint8_t> and ScatterAs<BFloat16>. Scatter's dtypes
// are compiled in six files like this one only to cut the build time; see
// scatter_impl.h, also for why the dtypes are paired as they are. All in one file
// they took 5:43 min of one core, this one 49 s (0.92 GB).
#include <cstdint>

#include "kernels/cpu/scatter_impl.h"
#include "kernels/half.h"

namespace tensorops::cpu::scatter_gather_internal {

template <>
absl::Status ScatterAs<uint8_t>(const ScatterPlan& plan, const MutableTensorView& result) {
  return ScatterKernel<uint8_t>(plan, result);
}

template <>
absl::Status ScatterAs<BFloat16>(const ScatterPlan& plan, const MutableTensorView& result) {
  return ScatterKernel<BFloat16>(plan, result);
}

}  // namespace tensorops::cpu::scatter_gather_internal
