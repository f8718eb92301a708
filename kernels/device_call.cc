#include "kernels/device_call.h"

#include <algorithm>
#include <cstdint>
#include <optional>

#include "kernels/cuda/launch.h"
#include "kernels/status_macros.h"

namespace tensorops {
namespace {

// GatherCall: the GPU form of Gather and IndexSelect.
class GatherCall final : public DeviceCall {
 public:
  explicit GatherCall(const GatherPlan& plan) : plan_(plan) {
    AddInput(plan.index);
    // The plan keeps the input's axis stride out of its view: the kernel adds it per index. Over
    // an empty axis the input has no element to copy (every index is out of range, which the
    // kernel flags before any load), although its view without the axis is not empty.
    if (plan.input_axis_size > 0) {
      AddInput(plan.input, (plan.input_axis_size - 1) * plan.input_axis_stride);
    }
    result_bytes_ = NumElements(plan.result_shape) * ItemSize(plan.result_dtype);
  }

  absl::Status Enqueue(const DeviceBuffers& buffers, void* stream) const override {
    return cuda::LaunchGather(RelocatePlan(plan_, *this, buffers.inputs), buffers.result,
                              buffers.error_flag, stream);
  }

 private:
  const GatherPlan& plan_;
};

// ScatterCall: the GPU form of Scatter and IndexReduce.
class ScatterCall final : public DeviceCall {
 public:
  explicit ScatterCall(const ScatterPlan& plan) : plan_(plan) {
    AddInput(plan.input);
    if (plan.index.numel() > 0) {
      AddInput(plan.index);
      AddInput(plan.source);
    }
    result_bytes_ = NumElements(plan.result_shape) * ItemSize(plan.result_dtype);
  }

  absl::StatusOr<int64_t> WorkspaceBytes() const override {
    const cuda::ScatterWorkspace layout = cuda::PlanScatterWorkspace(plan_);
    if (layout.sorted < 0) return layout.bytes;
    TENSOROPS_ASSIGN_OR_RETURN(const int64_t sorted_bytes, cuda::SortedReductionBytes(plan_));
    return layout.bytes + sorted_bytes;
  }

  absl::Status Enqueue(const DeviceBuffers& buffers, void* stream) const override {
    return cuda::LaunchScatter(RelocatePlan(plan_, *this, buffers.inputs), buffers.result,
                               buffers.workspace, buffers.workspace_bytes, buffers.error_flag,
                               stream);
  }

 private:
  const ScatterPlan& plan_;
};

// ViewScatterCall: SelectScatter, SliceScatter and DiagonalScatter: a copy and a window write.
class ViewScatterCall final : public DeviceCall {
 public:
  explicit ViewScatterCall(const ViewScatterPlan& plan) : plan_(plan) {
    AddInput(plan.input);
    AddInput(plan.src);
    result_bytes_ = NumElements(plan.result_shape) * ItemSize(plan.result_dtype);
  }

  absl::Status Enqueue(const DeviceBuffers& buffers, void* stream) const override {
    return cuda::LaunchViewScatter(RelocatePlan(plan_, *this, buffers.inputs), buffers.result,
                                   stream);
  }

 private:
  const ViewScatterPlan& plan_;
};

class MaskedScatterCall final : public DeviceCall {
 public:
  explicit MaskedScatterCall(const MaskedScatterPlan& plan) : plan_(plan) {
    AddInput(plan.input);
    AddInput(plan.mask);
    AddInput(plan.source);
    result_bytes_ = NumElements(plan.result_shape) * ItemSize(plan.result_dtype);
  }

  absl::StatusOr<int64_t> WorkspaceBytes() const override {
    return cuda::MaskedScatterWorkspaceBytes(plan_);
  }

  absl::Status Enqueue(const DeviceBuffers& buffers, void* stream) const override {
    return cuda::LaunchMaskedScatter(RelocatePlan(plan_, *this, buffers.inputs), buffers.result,
                                     buffers.workspace, buffers.workspace_bytes, buffers.error_flag,
                                     stream);
  }

 private:
  const MaskedScatterPlan& plan_;
};

// GatherNdCall: GatherNd's general form (TensorFlow's, or several axes).
class GatherNdCall final : public DeviceCall {
 public:
  explicit GatherNdCall(const NdPlan& plan) : plan_(plan) {
    AddInput(plan.input);
    AddInput(plan.index);
    result_bytes_ = NumElements(plan.result_shape) * ItemSize(plan.result_dtype);
  }

  absl::Status Enqueue(const DeviceBuffers& buffers, void* stream) const override {
    return cuda::LaunchGatherNd(plan_, Relocate(plan_.input.data(), buffers.inputs),
                                Relocate(plan_.index.data(), buffers.inputs), buffers.result,
                                buffers.error_flag, stream);
  }

 private:
  const NdPlan& plan_;
};

// ScatterNdCall: ScatterNd's general form (the TensorFlow form, or the axes form over several
// axes): Scatter's pipeline over the updates its index rows address.
class ScatterNdCall final : public DeviceCall {
 public:
  explicit ScatterNdCall(const NdPlan& plan) : plan_(plan) {
    // Without an input the result starts as zeros: nothing to copy.
    if (plan.input.data() != nullptr) AddInput(plan.input);
    if (NumElements(plan.positions) > 0) {
      AddInput(plan.index);
      AddInput(plan.source);
    }
    result_bytes_ = NumElements(plan.result_shape) * ItemSize(plan.result_dtype);
  }

  absl::StatusOr<int64_t> WorkspaceBytes() const override {
    const cuda::ScatterSizes sizes = cuda::SizesOf(plan_);
    const cuda::ScatterWorkspace layout = cuda::PlanScatterWorkspace(sizes);
    int64_t bytes = cuda::ScatterNdDestinationBytes(plan_) + layout.bytes;
    if (layout.sorted >= 0) {
      TENSOROPS_ASSIGN_OR_RETURN(const int64_t sorted_bytes, cuda::SortedReductionBytes(sizes));
      bytes += sorted_bytes;
    }
    return bytes;
  }

  absl::Status Enqueue(const DeviceBuffers& buffers, void* stream) const override {
    return cuda::LaunchScatterNd(RelocatePlan(plan_, *this, buffers.inputs), buffers.result,
                                 buffers.workspace, buffers.workspace_bytes, buffers.error_flag,
                                 stream);
  }

 private:
  const NdPlan& plan_;
};

}  // namespace

void DeviceCall::AddInput(const TensorView& view, int64_t extra_extent_elements) {
  if (view.numel() == 0) return;
  // The view's lowest and highest element offsets (strides may be 0 for broadcasts).
  int64_t lowest = 0;
  int64_t highest = extra_extent_elements;
  for (int64_t d = 0; d < view.rank(); ++d) {
    const int64_t reach = (view.size(d) - 1) * view.strides()[d];
    (reach < 0 ? lowest : highest) += reach;
  }
  const auto* data = static_cast<const char*>(view.data());
  const char* begin = data + lowest * view.itemsize();
  const char* end = data + (highest + 1) * view.itemsize();
  // Merge with every span the new one touches, so that spans stay disjoint and each byte is
  // copied once (a plan may view one tensor twice: an index and its original form).
  for (auto it = inputs_.begin(); it != inputs_.end();) {
    const auto* other_begin = static_cast<const char*>(it->data);
    const char* other_end = other_begin + it->bytes;
    if (other_begin < end && begin < other_end) {
      begin = std::min(begin, other_begin);
      end = std::max(end, other_end);
      it = inputs_.erase(it);
    } else {
      ++it;
    }
  }
  inputs_.push_back({begin, end - begin});
}

void DeviceCall::MarkResident(const void* data, int64_t bytes) {
  const auto* begin = static_cast<const char*>(data);
  for (InputSpan& span : inputs_) {
    const auto* span_begin = static_cast<const char*>(span.data);
    if (span_begin >= begin && span_begin + span.bytes <= begin + bytes) span.resident = true;
  }
}

const void* DeviceCall::Relocate(const void* host, absl::Span<void* const> copies) const {
  const auto* byte = static_cast<const char*>(host);
  for (size_t i = 0; i < inputs_.size() && i < copies.size(); ++i) {
    const auto* begin = static_cast<const char*>(inputs_[i].data);
    if (byte >= begin && byte < begin + inputs_[i].bytes) {
      return static_cast<const char*>(copies[i]) + (byte - begin);
    }
  }
  return nullptr;
}

TensorView DeviceCall::Relocate(const TensorView& view, absl::Span<void* const> copies) const {
  const void* data = view.numel() == 0 ? nullptr : Relocate(view.data(), copies);
  // The copy is device memory: only the device kernel reads it.
  return TensorView(view.dtype(), view.shape(), view.strides(), data).InSpace(MemorySpace::kDevice);
}

GatherPlan RelocatePlan(const GatherPlan& plan, const DeviceCall& call,
                        absl::Span<void* const> copies) {
  GatherPlan relocated = plan;
  relocated.input = call.Relocate(plan.input, copies);
  relocated.index = call.Relocate(plan.index, copies);
  // original_index stays on the host: only the CPU's error message reads it.
  return relocated;
}

ScatterPlan RelocatePlan(const ScatterPlan& plan, const DeviceCall& call,
                         absl::Span<void* const> copies) {
  ScatterPlan relocated;
  relocated.op = plan.op;
  relocated.result_dtype = plan.result_dtype;
  relocated.result_shape = plan.result_shape;
  relocated.input = call.Relocate(plan.input, copies);
  relocated.index = call.Relocate(plan.index, copies);
  relocated.source = call.Relocate(plan.source, copies);
  relocated.axis = plan.axis;
  relocated.reduce = plan.reduce;
  relocated.include_self = plan.include_self;
  relocated.deterministic = plan.deterministic;
  relocated.original_index = plan.original_index;
  return relocated;
}

ViewScatterPlan RelocatePlan(const ViewScatterPlan& plan, const DeviceCall& call,
                             absl::Span<void* const> copies) {
  ViewScatterPlan relocated = plan;
  relocated.input = call.Relocate(plan.input, copies);
  relocated.src = call.Relocate(plan.src, copies);
  return relocated;
}

MaskedScatterPlan RelocatePlan(const MaskedScatterPlan& plan, const DeviceCall& call,
                               absl::Span<void* const> copies) {
  MaskedScatterPlan relocated = plan;
  relocated.input = call.Relocate(plan.input, copies);
  relocated.mask = call.Relocate(plan.mask, copies);
  relocated.source = call.Relocate(plan.source, copies);
  return relocated;
}

NdPlan RelocatePlan(const NdPlan& plan, const DeviceCall& call, absl::Span<void* const> copies) {
  // Field by field: the single-axis plans (not copyable) are not this form's, and original_index
  // stays on the host, where only the CPU's error message reads it.
  NdPlan relocated;
  relocated.op = plan.op;
  relocated.result_dtype = plan.result_dtype;
  relocated.result_shape = plan.result_shape;
  relocated.input = call.Relocate(plan.input, copies);
  relocated.positions = plan.positions;
  relocated.index = call.Relocate(plan.index, copies);
  relocated.position_strides = plan.position_strides;
  relocated.component_axes = plan.component_axes;
  relocated.component_sizes = plan.component_sizes;
  relocated.component_strides = plan.component_strides;
  relocated.slice_size = plan.slice_size;
  relocated.source = call.Relocate(plan.source, copies);
  relocated.reduce = plan.reduce;
  relocated.include_self = plan.include_self;
  relocated.deterministic = plan.deterministic;
  return relocated;
}

bool DeviceScatterSupported(DataType dtype, Reduction reduce) {
  // complex128 products would need a 128-bit compare-and-swap: they stay on the CPU.
  return !(dtype == DataType::kComplex128 && reduce == Reduction::kProd);
}

std::unique_ptr<DeviceCall> MakeDeviceCall(const GatherPlan& plan) {
  if (NumElements(plan.result_shape) == 0) return nullptr;
  return std::make_unique<GatherCall>(plan);
}

std::unique_ptr<DeviceCall> MakeDeviceCall(const ScatterPlan& plan) {
  if (NumElements(plan.result_shape) == 0) return nullptr;
  if (!DeviceScatterSupported(plan.result_dtype, plan.reduce)) return nullptr;
  return std::make_unique<ScatterCall>(plan);
}

std::unique_ptr<DeviceCall> MakeDeviceCall(const ViewScatterPlan& plan) {
  if (NumElements(plan.result_shape) == 0) return nullptr;
  return std::make_unique<ViewScatterCall>(plan);
}

std::unique_ptr<DeviceCall> MakeDeviceCall(const MaskedScatterPlan& plan) {
  // The kernel reads the source as the flat run of elements docs/semantics.md numbers.
  if (NumElements(plan.result_shape) == 0 || !plan.source.is_contiguous()) return nullptr;
  return std::make_unique<MaskedScatterCall>(plan);
}

std::unique_ptr<DeviceCall> MakeDeviceCall(const NdPlan& plan) {
  // Along a single axis GatherNd and ScatterNd are Gather and Scatter (the plan says which).
  if (plan.single_axis_gather.has_value()) return MakeDeviceCall(*plan.single_axis_gather);
  if (plan.single_axis_scatter.has_value()) return MakeDeviceCall(*plan.single_axis_scatter);
  if (NumElements(plan.result_shape) == 0) return nullptr;
  // The general GatherNd reads its input as the contiguous tensor the request holds.
  if (plan.op == "gather_nd") {
    if (!plan.input.is_contiguous() || !plan.index.is_contiguous()) return nullptr;
    return std::make_unique<GatherNdCall>(plan);
  }
  if (!DeviceScatterSupported(plan.result_dtype, plan.reduce)) return nullptr;
  return std::make_unique<ScatterNdCall>(plan);
}

}  // namespace tensorops
