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

absl::Status LaunchScatter(const ScatterPlan& plan, void*, void*, int64_t, int32_t*, void*) {
  return NoCuda(plan.op);
}

absl::Status LaunchGatherNd(const NdPlan& plan, const void*, const void*, void*, int32_t*, void*) {
  return NoCuda(plan.op);
}

absl::Status LaunchScatterNd(const NdPlan& plan, void*, void*, int64_t, int32_t*, void*) {
  return NoCuda(plan.op);
}

absl::Status LaunchViewScatter(const ViewScatterPlan&, void*, void*) {
  return NoCuda("view_scatter");
}

// Without CUDA there is no CUB to ask; nothing runs in these workspaces anyway.
absl::StatusOr<int64_t> SortedReductionBytes(const ScatterSizes&) { return 0; }

absl::StatusOr<int64_t> MaskedScatterWorkspaceBytes(const MaskedScatterPlan&) { return 0; }

absl::Status LaunchMaskedScatter(const MaskedScatterPlan&, void*, void*, int64_t, int32_t*, void*) {
  return NoCuda("masked_scatter");
}

}  // namespace tensorops::cuda
