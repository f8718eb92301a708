// cpu::Scatter for complex64 and complex128: ScatterAs<std::complex<float>> and
// ScatterAs<std::complex<double>>. Scatter's dtypes are compiled in six files like this one only to
// cut the build time; see scatter_impl.h, also for why the dtypes are paired as they
// are. All in one file they took 5:43 min of one core, this one 32 s (0.72 GB).
#include <complex>

#include "kernels/cpu/scatter_impl.h"

namespace tensorops::cpu::scatter_gather_internal {

template <>
absl::Status ScatterAs<std::complex<float>>(const ScatterPlan& plan,
                                            const MutableTensorView& result) {
  return ScatterKernel<std::complex<float>>(plan, result);
}

template <>
absl::Status ScatterAs<std::complex<double>>(const ScatterPlan& plan,
                                             const MutableTensorView& result) {
  return ScatterKernel<std::complex<double>>(plan, result);
}

}  // namespace tensorops::cpu::scatter_gather_internal
