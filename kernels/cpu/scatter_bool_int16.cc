// cpu::Scatter for bool and int16: ScatterAs<bool> and ScatterAs<int16_t>, and ASSIGN of 1- and
// 2-byte elements: ScatterAssignAs<uint8_t> and ScatterAssignAs<uint16_t>. Scatter's kernels are
// compiled in six files like this one only to cut the build time; see scatter_impl.h, also for why
// the dtypes are paired as they are. This one takes 26 s of one core (g++ 12 -O3).
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

template <>
absl::Status ScatterAssignAs<uint8_t>(const ScatterPlan& plan, const MutableTensorView& result) {
  return ScatterWith<uint8_t, AssignOp>(plan, result);
}

template <>
absl::Status ScatterAssignAs<uint16_t>(const ScatterPlan& plan, const MutableTensorView& result) {
  return ScatterWith<uint16_t, AssignOp>(plan, result);
}

}  // namespace tensorops::cpu::scatter_gather_internal
