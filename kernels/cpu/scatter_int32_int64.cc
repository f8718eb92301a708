// cpu::Scatter for int32 and int64: ScatterAs<int32_t> and ScatterAs<int64_t>. Scatter's dtypes
// are compiled in six files like this one only to cut the build time; see
// scatter_impl.h, also for why the dtypes are paired as they are. All in one file
// they took 5:43 min of one core, this one 42 s (0.93 GB).
#include <cstdint>

#include "kernels/cpu/scatter_impl.h"

namespace tensorops::cpu::scatter_gather_internal {

template <>
absl::Status ScatterAs<int32_t>(const ScatterPlan& plan, const MutableTensorView& result) {
  return ScatterKernel<int32_t>(plan, result);
}

template <>
absl::Status ScatterAs<int64_t>(const ScatterPlan& plan, const MutableTensorView& result) {
  return ScatterKernel<int64_t>(plan, result);
}

}  // namespace tensorops::cpu::scatter_gather_internal
