// cpu::Scatter for int8 and float16: ScatterAs<int8_t> and ScatterAs<Float16>. Scatter's kernels
// are compiled in six files like this one only to cut the build time; see scatter_impl.h, also for
// why the dtypes are paired as they are. This one takes 34 s of one core (g++ 12 -O3).
#include <cstdint>

#include "kernels/cpu/scatter_impl.h"
#include "kernels/half.h"

namespace tensorops::cpu::scatter_gather_internal {

template <>
absl::Status ScatterAs<int8_t>(const ScatterPlan& plan, const MutableTensorView& result) {
  return ScatterKernel<int8_t>(plan, result);
}

template <>
absl::Status ScatterAs<Float16>(const ScatterPlan& plan, const MutableTensorView& result) {
  return ScatterKernel<Float16>(plan, result);
}

}  // namespace tensorops::cpu::scatter_gather_internal
