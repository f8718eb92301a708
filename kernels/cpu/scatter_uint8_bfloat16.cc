// cpu::Scatter for uint8 and bfloat16: ScatterAs<uint8_t> and ScatterAs<BFloat16>. Scatter's
// kernels are compiled in six files like this one only to cut the build time; see scatter_impl.h,
// also for why the dtypes are paired as they are. This one takes 31 s of one core (g++ 12 -O3).
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
