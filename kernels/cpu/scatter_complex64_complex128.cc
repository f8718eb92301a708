// cpu::Scatter for complex64 and complex128: ScatterAs<std::complex<float>> and
// ScatterAs<std::complex<double>>, and ASSIGN of 16-byte elements: ScatterAssignAs<Bytes<16>>.
// Scatter's kernels are compiled in six files like this one only to cut the build time; see
// scatter_impl.h, also for why the dtypes are paired as they are. This one takes 18 s of one core
// (g++ 12 -O3).
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

template <>
absl::Status ScatterAssignAs<Bytes<16>>(const ScatterPlan& plan, const MutableTensorView& result) {
  return ScatterWith<Bytes<16>, AssignOp>(plan, result);
}

}  // namespace tensorops::cpu::scatter_gather_internal
