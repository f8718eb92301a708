// The CUDA kernels' entry points, called by DeviceCall::Enqueue with plans already relocated onto
// device memory (RelocatePlan). Each enqueues its kernels on `stream` (a cudaStream_t) and returns
// without waiting; an error is a failed launch. Built without CUDA, every launch returns
// FAILED_PRECONDITION (launch_none.cc).
//
// Scatter and MaskedScatter need scratch memory on the device, sized by host code (Scatter's
// layout, ScatterWorkspace, is shared with the kernels) and, for CUB's temporary storage, by CUB
// on the device that runs them.
#ifndef TENSOROPS_KERNELS_CUDA_LAUNCH_H_
#define TENSOROPS_KERNELS_CUDA_LAUNCH_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/index_walk.h"
#include "kernels/device_call.h"
#include "kernels/dtype.h"
#include "kernels/gather.h"
#include "kernels/masked_scatter.h"
#include "kernels/nd_ops.h"
#include "kernels/scatter.h"
#include "kernels/view_scatter.h"

namespace tensorops::cuda {

// ScatterSizes is what a scatter's workspace depends on: Scatter's (and IndexReduce's) and
// ScatterNd's alike, which share their GPU pipeline.
struct ScatterSizes {
  // The op, for errors.
  std::string_view op;
  DataType dtype = DataType::kFloat32;
  Reduction reduce = Reduction::kAssign;
  bool deterministic = false;
  // The result's elements, and the source elements combined into them.
  int64_t numel = 0;
  int64_t updates = 0;
  // ScatterNd: its positions, each the start of `slice_size` consecutive result elements (0 for
  // Scatter, whose updates each address one element).
  int64_t slices = 0;
  int64_t slice_size = 1;
};

inline ScatterSizes SizesOf(const ScatterPlan& plan) {
  return {.op = plan.op,
          .dtype = plan.result_dtype,
          .reduce = plan.reduce,
          .deterministic = plan.deterministic,
          .numel = NumElements(plan.result_shape),
          .updates = plan.index.numel()};
}

// ScatterNd's updates: one per element of each position's slice.
inline ScatterSizes SizesOf(const NdPlan& plan) {
  return {.op = plan.op,
          .dtype = plan.result_dtype,
          .reduce = plan.reduce,
          .deterministic = plan.deterministic,
          .numel = NumElements(plan.result_shape),
          .updates = NumElements(plan.positions) * plan.slice_size,
          .slices = NumElements(plan.positions),
          .slice_size = plan.slice_size};
}

// kRowReductionMinSlice: the slice, in elements, from which a ScatterNd of rows reduces by rows
// (UsesRowReduction): a warp's width, so that every lane has a column.
inline constexpr int64_t kRowReductionMinSlice = 32;

// UsesRowReduction: whether a ScatterNd SUM or MEAN of a floating type, whose positions each
// address a row of at least kRowReductionMinSlice elements (an embedding push), reduces by rows:
// the positions sorted by their row (a stable sort of a few keys per row), then one warp per row
// that adds the input and each of its updates in the positions' order, in float32 for the 16-bit
// floats, and writes the row once. No shadow, no atomics, and the order is the CPU's, so the result
// is the CPU's bytes whether or not the call asked for `deterministic` (which then costs nothing
// more). On an H200, a bfloat16 push of 2^18 rows of 256 into a table of as many took 0.61 ms
// through the float32 shadow and atomics, against PyTorch's 0.44 (its `index_put` sorts too).
inline bool UsesRowReduction(const ScatterSizes& sizes) {
  return sizes.slices > 0 && sizes.slices <= kMaxOffset32 &&
         sizes.slice_size >= kRowReductionMinSlice &&
         (sizes.reduce == Reduction::kSum || sizes.reduce == Reduction::kMean) &&
         IsFloating(sizes.dtype);
}

// UsesSortedReduction: whether a scatter reduces by sorting its updates by destination and
// reducing each run (deterministic float SUM/MEAN/PROD) instead of with atomics.
inline bool UsesSortedReduction(const ScatterSizes& sizes) {
  return !UsesRowReduction(sizes) && sizes.deterministic &&
         (sizes.reduce == Reduction::kSum || sizes.reduce == Reduction::kMean ||
          sizes.reduce == Reduction::kProd) &&
         (IsFloating(sizes.dtype) || IsComplex(sizes.dtype));
}
inline bool UsesSortedReduction(const ScatterPlan& plan) {
  return UsesSortedReduction(SizesOf(plan));
}

// ScatterWorkspace is where Scatter's scratch lies inside its workspace, in bytes from its start;
// -1 for a part the call does not need.
struct ScatterWorkspace {
  // A 32-bit shadow of the result (int32 for bool and the 8/16-bit integers, float for the 16-bit
  // floats' sums and products): the GPU's atomics work on 32 and 64 bits.
  int64_t shadow = -1;
  // MEAN's arrival count per destination: uint32, or uint64 where `wide_counts` (MeanCountBytes).
  int64_t counts = -1;
  bool wide_counts = false;
  // The distance, in elements of each, between consecutive destinations' accumulators in the
  // shadow and between their counts: 2 where MEAN's accumulator and count have the same size and
  // share a cell per destination (`counts` = `shadow` + that size), so that an update's two atomics
  // land in one 32-byte sector: one random access to memory per update instead of two (on an H200,
  // a float32 MEAN of 2^26 random updates took 8.7 ms with the counts apart, 5.0 in cells; SUM
  // alone 3.8). 1 otherwise.
  int64_t stride = 1;
  // ASSIGN's last writer per destination: the largest update position plus one (0 for none), in
  // uint32 where CountsFit32, else uint64; then `duplicates`, one uint32 that the first pass sets
  // when a destination receives a second update. Both are cleared by one memset from `winners` to
  // `bytes`.
  int64_t winners = -1;
  int64_t duplicates = -1;
  // ASSIGN in one pass where PacksAssign: per destination one uint64, (the largest update position
  // plus one) << 32 | that update's bits, cleared by a memset.
  int64_t packed = -1;
  // The sorted reduction's buffers, when UsesSortedReduction or UsesRowReduction: they take the
  // rest of the workspace, SortedReductionBytes of it.
  int64_t sorted = -1;
  // The bytes of the parts above, the sorted reduction's excluded (its size depends on the GPU).
  int64_t bytes = 0;
};

// SortedReductionBytes: the scratch of the sorted reduction (keys, values, runs and CUB's
// temporary storage), or of the row reduction (the rows' keys and positions and CUB's), on the
// current device, whose kind decides CUB's share; 0 where the scatter has none, and without CUDA.
// An error (UNAVAILABLE) when CUB's size query fails, e.g. where no device is usable;
// RESOURCE_EXHAUSTED beyond 2^31 - 1 updates, which CUB cannot count.
absl::StatusOr<int64_t> SortedReductionBytes(const ScatterSizes& sizes);
inline absl::StatusOr<int64_t> SortedReductionBytes(const ScatterPlan& plan) {
  return SortedReductionBytes(SizesOf(plan));
}

// NeedsShadow: whether Scatter reduces elements of `dtype` with `reduce` in a 32-bit shadow.
// AMAX/AMIN of the 16-bit floats select one operand's bits: they work on the result itself.
inline bool NeedsShadow(DataType dtype, Reduction reduce) {
  switch (dtype) {
    case DataType::kBool:
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kInt16:
      return true;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return reduce != Reduction::kAmax && reduce != Reduction::kAmin;
    default:
      return false;
  }
}

// CountsFit32: whether a count of updates plus one fits 32 bits (ASSIGN's winners, an update
// position plus one; MEAN's counts, the updates plus include_self): below 2^31 updates, unless
// ScopedWideIndexingForTesting forces the 64-bit kernels (DispatchPosition), so that the GPU suites
// run the 64-bit forms too.
inline bool CountsFit32(const ScatterSizes& sizes) {
  return DispatchPosition(sizes.updates <= kMaxOffset32, []<typename Position>(TypeTag<Position>) {
    return sizeof(Position) == 4;
  });
}

// MeanCountBytes: the size of MEAN's count per destination: uint32 where CountsFit32, but uint64
// beside an accumulator of 8 bytes or more, with which it then shares a cell.
inline int64_t MeanCountBytes(const ScatterSizes& sizes, int64_t accumulator_bytes) {
  return CountsFit32(sizes) && accumulator_bytes < 8 ? 4 : 8;
}

// PacksAssign: whether ASSIGN runs in one pass of 64-bit atomicMax on (position + 1) << 32 | bits
// and a pass over the result that writes each reached destination's winner, rather than the
// winners' pass and a second pass over the updates. It needs elements of at most 4 bytes and
// positions below 2^31, and pays 16 bytes of sequential traffic per result element (the memset and
// the read of the packed words) to save a second random pass per update (on an H200, 2^26 random
// float32 updates: 11.6 ms in two passes, 4.5 in one, PyTorch's unordered pass 4.2): worth it where
// there are at least a quarter as many updates as destinations, such as a scatter of a whole
// tensor. An in-place push of a few rows into a large table keeps the two passes, whose second
// returns at once when no row repeats.
inline bool PacksAssign(const ScatterSizes& sizes) {
  return sizes.reduce == Reduction::kAssign && ItemSize(sizes.dtype) <= 4 && CountsFit32(sizes) &&
         sizes.updates >= sizes.numel / 4;
}

// PlanScatterWorkspace lays out the parts of a scatter's workspace that host arithmetic sizes;
// the whole workspace is `bytes`, plus SortedReductionBytes where `sorted` >= 0.
inline ScatterWorkspace PlanScatterWorkspace(const ScatterSizes& sizes) {
  const auto align = [](int64_t bytes) {
    return (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
  };
  const int64_t numel = sizes.numel;
  ScatterWorkspace workspace;
  if (PacksAssign(sizes)) {
    workspace.packed = workspace.bytes;
    workspace.bytes += align(numel * 8);
    return workspace;
  }
  if (sizes.reduce == Reduction::kAssign) {
    workspace.winners = workspace.bytes;
    workspace.bytes += align(numel * (CountsFit32(sizes) ? 4 : 8));
    workspace.duplicates = workspace.bytes;
    workspace.bytes += align(4);
    return workspace;
  }
  if (UsesSortedReduction(sizes) || UsesRowReduction(sizes)) {
    // Each destination is written once, from its run: no shadow, no counts per destination.
    workspace.sorted = workspace.bytes;
    return workspace;
  }
  const int64_t accumulator_bytes =
      NeedsShadow(sizes.dtype, sizes.reduce) ? 4 : ItemSize(sizes.dtype);
  if (sizes.reduce == Reduction::kMean) {
    const int64_t count_bytes = MeanCountBytes(sizes, accumulator_bytes);
    workspace.wide_counts = count_bytes == 8;
    if (count_bytes == accumulator_bytes) {
      // Cells of (accumulator, count), even where the result could accumulate itself (float32).
      workspace.shadow = workspace.bytes;
      workspace.counts = workspace.bytes + accumulator_bytes;
      workspace.stride = 2;
      workspace.bytes += align(numel * 2 * accumulator_bytes);
      return workspace;
    }
  }
  if (NeedsShadow(sizes.dtype, sizes.reduce)) {
    workspace.shadow = workspace.bytes;
    workspace.bytes += align(numel * 4);
  }
  if (sizes.reduce == Reduction::kMean) {
    workspace.counts = workspace.bytes;
    workspace.bytes += align(numel * (workspace.wide_counts ? 8 : 4));
  }
  return workspace;
}
inline ScatterWorkspace PlanScatterWorkspace(const ScatterPlan& plan) {
  return PlanScatterWorkspace(SizesOf(plan));
}

// ScatterNdDestinationBytes: the front of ScatterNd's workspace, each position's destination
// (int64, -1 for an index out of range); Scatter's workspace for SizesOf(plan) follows.
inline int64_t ScatterNdDestinationBytes(const NdPlan& plan) {
  const int64_t bytes = NumElements(plan.positions) * int64_t{8};
  return (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
}

absl::Status LaunchGather(const GatherPlan& plan, void* result, int32_t* error_flag, void* stream);

// `workspace_bytes`: the size of `workspace`, PlanScatterWorkspace(plan).bytes plus
// SortedReductionBytes(plan) as asked on this device.
absl::Status LaunchScatter(const ScatterPlan& plan, void* result, void* workspace,
                           int64_t workspace_bytes, int32_t* error_flag, void* stream);

// GatherNd in its general form, reading `input` and `index` (the device copies of plan.input and
// plan.index, both contiguous).
absl::Status LaunchGatherNd(const NdPlan& plan, const void* input, const void* index, void* result,
                            int32_t* error_flag, void* stream);

// ScatterNd in its general form, on the device copies of plan.input (absent: zeros), plan.index
// and plan.source. `workspace_bytes`: the size of `workspace`, ScatterNdDestinationBytes(plan)
// plus PlanScatterWorkspace(SizesOf(plan)).bytes plus SortedReductionBytes(SizesOf(plan)).
absl::Status LaunchScatterNd(const NdPlan& plan, void* result, void* workspace,
                             int64_t workspace_bytes, int32_t* error_flag, void* stream);

// The view scatters: the input copied into the result (unless it is the result, in place), then
// the source written into the window.
absl::Status LaunchViewScatter(const ViewScatterPlan& plan, void* result, void* stream);

// MaskedScatter's workspace: the prefix sum of the mask (int32 per element below 2^31 elements,
// int64 beyond), a broadcast or strided mask written out as one byte per element, and CUB's
// scratch, on the current device; UNAVAILABLE when CUB's size query fails; 0 without CUDA.
absl::StatusOr<int64_t> MaskedScatterWorkspaceBytes(const MaskedScatterPlan& plan);
// `workspace_bytes`: the size of `workspace`, MaskedScatterWorkspaceBytes(plan) on this device.
absl::Status LaunchMaskedScatter(const MaskedScatterPlan& plan, void* result, void* workspace,
                                 int64_t workspace_bytes, int32_t* error_flag, void* stream);

}  // namespace tensorops::cuda

#endif  // TENSOROPS_KERNELS_CUDA_LAUNCH_H_
