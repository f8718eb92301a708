// cpu::Scatter for float32 and float64: ScatterAs<float> and ScatterAs<double>, and ASSIGN of
// 8-byte elements: ScatterAssignAs<uint64_t>. Scatter's kernels are compiled in six files like this
// one only to cut the build time; see scatter_impl.h, also for why the dtypes are paired as they
// are. This one takes 28 s of one core (g++ 12 -O3).
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

template <>
absl::Status ScatterAssignAs<uint64_t>(const ScatterPlan& plan, const MutableTensorView& result) {
  return ScatterWith<uint64_t, AssignOp>(plan, result);
}

}  // namespace tensorops::cpu::scatter_gather_internal
