// cpu::Scatter for int32 and int64: ScatterAs<int32_t> and ScatterAs<int64_t>, and ASSIGN of 4-byte
// elements: ScatterAssignAs<uint32_t>. Scatter's kernels are compiled in six files like this one
// only to cut the build time; see scatter_impl.h, also for why the dtypes are paired as they are.
// This one takes 24 s of one core (g++ 12 -O3).
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

template <>
absl::Status ScatterAssignAs<uint32_t>(const ScatterPlan& plan, const MutableTensorView& result) {
  return ScatterWith<uint32_t, AssignOp>(plan, result);
}

}  // namespace tensorops::cpu::scatter_gather_internal
