// The CUDA kernels' entry points in builds without CUDA: MakeDeviceCall still describes calls (so
// the executor's host logic is tested everywhere), but nothing can launch.
#include "absl/strings/str_format.h"
#include "kernels/cuda/launch.h"

namespace tensorops::cuda {
namespace {

absl::Status NoCuda(std::string_view op) {
  return absl::FailedPreconditionError(
      absl::StrFormat("%s: this server was built without CUDA; the call runs on the CPU", op));
}

}  // namespace

absl::Status LaunchGather(const GatherPlan& plan, void*, int32_t*, void*) {
  return NoCuda(plan.op);
}

absl::Status LaunchScatter(const ScatterPlan& plan, void*, void*, int32_t*, void*) {
  return NoCuda(plan.op);
}

}  // namespace tensorops::cuda
