// cpu::Scatter for float32 and float64: ScatterAs<float> and ScatterAs<double>. Scatter's dtypes
// are compiled in six files like this one only to cut the build time; see
// scatter_impl.h, also for why the dtypes are paired as they are. All in one file
// they took 5:43 min of one core, this one 46 s (0.93 GB).
#include "kernels/cpu/scatter_impl.h"

namespace tensorops::cpu::scatter_gather_internal {

template <>
absl::Status ScatterAs<float>(const ScatterPlan& plan, const MutableTensorView& result) {
  return ScatterKernel<float>(plan, result);
}

template <>
absl::Status ScatterAs<double>(const ScatterPlan& plan, const MutableTensorView& result) {
  return ScatterKernel<double>(plan, result);
}

}  // namespace tensorops::cpu::scatter_gather_internal
