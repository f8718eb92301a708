// The CUDA kernels' entry points, called by DeviceCall::Enqueue with plans already relocated onto
// device memory (RelocatePlan). Each enqueues its kernels on `stream` (a cudaStream_t) and returns
// without waiting; an error is a failed launch. Built without CUDA, every launch returns
// FAILED_PRECONDITION (launch_none.cc).
//
// Scatter and MaskedScatter need scratch memory on the device, sized by host code (Scatter's
// layout, ScatterWorkspace, is shared with the kernels).
#ifndef TENSOROPS_KERNELS_CUDA_LAUNCH_H_
#define TENSOROPS_KERNELS_CUDA_LAUNCH_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/window_map.h"
#include "kernels/device_call.h"
#include "kernels/gather.h"
#include "kernels/masked_scatter.h"
#include "kernels/nd_ops.h"
#include "kernels/scatter.h"
#include "kernels/view_scatter.h"

namespace tensorops::cuda {

// UsesSortedReduction: whether a Scatter reduces by sorting its updates by destination and
// reducing each run (deterministic float SUM/MEAN/PROD) instead of with atomics.
inline bool UsesSortedReduction(const ScatterPlan& plan) {
  return plan.deterministic &&
         (plan.reduce == Reduction::kSum || plan.reduce == Reduction::kMean ||
          plan.reduce == Reduction::kProd) &&
         (IsFloating(plan.result_dtype) || IsComplex(plan.result_dtype));
}

// ScatterWorkspace is where Scatter's scratch lies inside its workspace, in bytes from its start;
// -1 for a part the call does not need.
struct ScatterWorkspace {
  // A 32-bit shadow of the result (int32 for bool and the 8/16-bit integers, float for the 16-bit
  // floats): the GPU's atomics work on 32 and 64 bits.
  int64_t shadow = -1;
  // MEAN's arrival count per destination (uint64).
  int64_t counts = -1;
  // ASSIGN's last writer per destination: the largest update position (int64, -1 for none).
  int64_t winners = -1;
  // The sorted reduction's buffers (SortedReduction below), when UsesSortedReduction.
  int64_t sorted = -1;
  int64_t bytes = 0;
};

// SortedReductionBytes: the scratch of the sorted reduction of `plan` (keys, values, runs and
// CUB's temporary storage); 0 without CUDA.
int64_t SortedReductionBytes(const ScatterPlan& plan);

// NeedsShadow: whether Scatter accumulates elements of `dtype` in a 32-bit shadow.
inline bool NeedsShadow(DataType dtype) {
  switch (dtype) {
    case DataType::kBool:
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return true;
    default:
      return false;
  }
}

inline ScatterWorkspace PlanScatterWorkspace(const ScatterPlan& plan) {
  constexpr int64_t kAlign = kDeviceAlignment;
  const auto align = [](int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; };
  const int64_t numel = NumElements(plan.result_shape);
  ScatterWorkspace workspace;
  if (plan.reduce == Reduction::kAssign) {
    workspace.winners = workspace.bytes;
    workspace.bytes += align(numel * 8);
    return workspace;
  }
  if (UsesSortedReduction(plan)) {
    // Each destination is written once, from its run: no shadow, no counts per destination.
    workspace.sorted = workspace.bytes;
    workspace.bytes += align(SortedReductionBytes(plan));
    return workspace;
  }
  if (NeedsShadow(plan.result_dtype)) {
    workspace.shadow = workspace.bytes;
    workspace.bytes += align(numel * 4);
  }
  if (plan.reduce == Reduction::kMean) {
    workspace.counts = workspace.bytes;
    workspace.bytes += align(numel * 8);
  }
  return workspace;
}

absl::Status LaunchGather(const GatherPlan& plan, void* result, int32_t* error_flag, void* stream);

absl::Status LaunchScatter(const ScatterPlan& plan, void* result, void* workspace,
                           int32_t* error_flag, void* stream);

// GatherNd in its general form, reading `input` and `index` (the device copies of plan.input and
// plan.index, both contiguous).
absl::Status LaunchGatherNd(const NdPlan& plan, const void* input, const void* index, void* result,
                            int32_t* error_flag, void* stream);

// The view scatters, given the window of `plan` as a WindowMap (window_map.h).
absl::Status LaunchViewScatter(const ViewScatterPlan& plan, const WindowMap& map, void* result,
                               void* stream);

// MaskedScatter's workspace: the prefix sum of the mask (int64 per element) and CUB's scratch.
int64_t MaskedScatterWorkspaceBytes(const MaskedScatterPlan& plan);
absl::Status LaunchMaskedScatter(const MaskedScatterPlan& plan, void* result, void* workspace,
                                 int32_t* error_flag, void* stream);

}  // namespace tensorops::cuda

#endif  // TENSOROPS_KERNELS_CUDA_LAUNCH_H_
