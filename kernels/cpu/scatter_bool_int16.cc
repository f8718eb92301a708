// cpu::Scatter for bool and int16: ScatterAs<bool> and ScatterAs<int16_t>. Scatter's dtypes
// are compiled in six files like this one only to cut the build time; see
// scatter_impl.h, also for why the dtypes are paired as they are. All in one file
// they took 5:43 min of one core, this one 46 s (0.93 GB).
#include <cstdint>

#include "kernels/cpu/scatter_impl.h"

namespace tensorops::cpu::scatter_gather_internal {

template <>
absl::Status ScatterAs<bool>(const ScatterPlan& plan, const MutableTensorView& result) {
  return ScatterKernel<bool>(plan, result);
}

template <>
absl::Status ScatterAs<int16_t>(const ScatterPlan& plan, const MutableTensorView& result) {
  return ScatterKernel<int16_t>(plan, result);
}

}  // namespace tensorops::cpu::scatter_gather_internal
