// DeviceCall: one planned op in the form the CUDA executor runs it: the host memory its kernels
// read, the bytes of its result and scratch, and the launch of its kernels on a stream.
//
//   std::unique_ptr<DeviceCall> call = MakeDeviceCall(gather_plan);  // null: CPU only
//   // The executor copies call->inputs() to the device, then:
//   absl::Status launched = call->Enqueue(buffers, stream);
//
// The executor packs the inputs of a whole batch into one staging buffer and one copy, so a call
// only describes its memory: it never allocates or copies. Kernels check index values themselves
// and raise the call's error flag instead of asserting; the executor then re-runs the call on the
// CPU, whose kernel names the bad index exactly as a CPU-only server would.
//
// This header and MakeDeviceCall build without CUDA (the description and the relocation of a plan
// onto copies of its inputs are plain host code, tested on any machine); Enqueue fails there with
// FAILED_PRECONDITION.
#ifndef TENSOROPS_KERNELS_DEVICE_CALL_H_
#define TENSOROPS_KERNELS_DEVICE_CALL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/gather.h"
#include "kernels/masked_scatter.h"
#include "kernels/nd_ops.h"
#include "kernels/scatter.h"
#include "kernels/view_scatter.h"

namespace tensorops {

// InputSpan is a range of bytes a call reads: host bytes, which the executor copies to the
// device, or `resident` bytes already in the executor's device memory (a stored tensor kept
// there, --store_device=cuda), which the kernels read where they are.
struct InputSpan {
  const void* data = nullptr;
  int64_t bytes = 0;
  bool resident = false;
};

// DeviceBuffers are where the executor put a call's memory on the device.
struct DeviceBuffers {
  // The copy of inputs()[i], in the same order (a resident input's own bytes).
  absl::Span<void* const> inputs;
  // result_bytes() of result, rounded up to a multiple of 4 (the compare-and-swap of a 16-bit
  // element covers its whole 32-bit word); workspace_bytes of uninitialized scratch (what
  // WorkspaceBytes() returned on this device).
  void* result = nullptr;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
  // Zeroed before the launch; a kernel that meets an out-of-range index sets it to nonzero.
  int32_t* error_flag = nullptr;
};

// kDeviceAlignment: every buffer the executor hands a call starts at a multiple of this.
inline constexpr int64_t kDeviceAlignment = 256;

class DeviceCall {
 public:
  virtual ~DeviceCall() = default;

  // The memory the kernels read: disjoint spans, each copied to the device before Enqueue unless
  // it is resident.
  const std::vector<InputSpan>& inputs() const { return inputs_; }
  int64_t result_bytes() const { return result_bytes_; }

  // MarkResident marks every input inside [data, data + bytes), device memory of the executor
  // that will run the call, as resident: read in place, never copied. An input span lies within
  // one tensor's bytes or outside them (spans merge only where they overlap).
  void MarkResident(const void* data, int64_t bytes);
  // The call's result goes straight into `data`, device memory of the executor of at least
  // result_bytes() rounded up to a multiple of 4 (a stored tensor updated in place or stored by
  // the call), instead of coming back to the host. It may be the memory of a resident input
  // (in place): every kernel that writes its result over its input reads each element before it
  // writes it, in the same thread.
  void set_resident_result(void* data) { resident_result_ = data; }
  // Null: the result comes back to the host buffer RunBatch was given.
  void* resident_result() const { return resident_result_; }

  // WorkspaceBytes returns the device scratch the call needs on the current device: CUB sizes its
  // temporary storage for the GPU it will run on, so the executor asks once per call, after
  // selecting its device, and hands the answer back to Enqueue in DeviceBuffers. An error (CUB's
  // size query failed) is a device error: the call runs on the CPU.
  virtual absl::StatusOr<int64_t> WorkspaceBytes() const { return 0; }

  // Enqueue launches the call's kernels on `stream` (a cudaStream_t). An error here is a device
  // error (failed launch): the executor runs the call on the CPU instead.
  virtual absl::Status Enqueue(const DeviceBuffers& buffers, void* stream) const = 0;

  // Relocate maps `host` (inside one of inputs()) to the same byte of that input's copy in
  // `copies`; a view keeps its shape and strides. Views of no elements map to null.
  const void* Relocate(const void* host, absl::Span<void* const> copies) const;
  TensorView Relocate(const TensorView& view, absl::Span<void* const> copies) const;

 protected:
  // AddInput records the memory `view` reads (its whole extent, strides and broadcasts included),
  // merging it with the spans it overlaps. `extra_extent` adds bytes read past the view's own
  // last element (Gather's input, whose axis stride the plan keeps outside the view).
  void AddInput(const TensorView& view, int64_t extra_extent_elements = 0);

  int64_t result_bytes_ = 0;

 private:
  std::vector<InputSpan> inputs_;
  void* resident_result_ = nullptr;
};

// MakeDeviceCall returns the GPU form of a planned call, or null when the call has none (it then
// runs on the CPU): empty calls, the few dtype/reduction pairs the GPU kernels leave to the CPU
// (Scatter PROD of complex128), and ScatterNd except along a single axis (its general form has no
// GPU kernel yet). The plan must outlive the call.
std::unique_ptr<DeviceCall> MakeDeviceCall(const GatherPlan& plan);
std::unique_ptr<DeviceCall> MakeDeviceCall(const ScatterPlan& plan);
std::unique_ptr<DeviceCall> MakeDeviceCall(const ViewScatterPlan& plan);
std::unique_ptr<DeviceCall> MakeDeviceCall(const MaskedScatterPlan& plan);
std::unique_ptr<DeviceCall> MakeDeviceCall(const NdPlan& plan);

// RelocatePlan returns `plan` with every view moved onto `copies` of the call's inputs: what the
// kernels of MakeDeviceCall(plan) read. Exposed so that tests can check, on the CPU, that a call's
// inputs cover everything its plan reads.
GatherPlan RelocatePlan(const GatherPlan& plan, const DeviceCall& call,
                        absl::Span<void* const> copies);
ScatterPlan RelocatePlan(const ScatterPlan& plan, const DeviceCall& call,
                         absl::Span<void* const> copies);
ViewScatterPlan RelocatePlan(const ViewScatterPlan& plan, const DeviceCall& call,
                             absl::Span<void* const> copies);
MaskedScatterPlan RelocatePlan(const MaskedScatterPlan& plan, const DeviceCall& call,
                               absl::Span<void* const> copies);
// ScatterNd's general form (its input, index and source; an absent input stays absent).
NdPlan RelocatePlan(const NdPlan& plan, const DeviceCall& call, absl::Span<void* const> copies);

// DeviceScatterSupported: whether `dtype` scattered with `reduce` has a GPU kernel.
bool DeviceScatterSupported(DataType dtype, Reduction reduce);

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_DEVICE_CALL_H_
