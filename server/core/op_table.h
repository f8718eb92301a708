// The op table's serving half: for each op of proto/op_list.h, how the server decodes its request
// into the kernels' arguments, plans it, and runs it on the CPU. The GPU form is found from the
// plan (MakeDeviceCall, kernels/device_call.h) and the backward from the arguments' type (each
// op's Backward, kernels/<op>.h), so neither needs a line here. Every RPC that runs an op (its own,
// Run, RunStream, Backward) reaches the op only through this table (server/core/prepared_op.cc).
//
// An entry, OpServing<Op>, is
//   OpEntry<Plan, plan function, CPU kernel, updates_input>  planning (kernels/) and the CPU
//                                                            kernel; updates_input: the result is
//                                                            the input updated, so the input's
//                                                            bytes may become the result and a
//                                                            stored input may be updated in place
//   Decode(request, decoder) -> absl::StatusOr<Args>         the request's fields as arguments
//   SetGpuOptions(request, deterministic, &plan)             optional: request fields only the
//                                                            GPU form reads (`deterministic`;
//                                                            the argument forces it)
// Included only by server/core/prepared_op.cc and tests.
#ifndef TENSOROPS_SERVER_CORE_OP_TABLE_H_
#define TENSOROPS_SERVER_CORE_OP_TABLE_H_

#include <limits>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "kernels/gather.h"
#include "kernels/index_ops.h"
#include "kernels/masked_scatter.h"
#include "kernels/nd_ops.h"
#include "kernels/scatter.h"
#include "kernels/status_macros.h"
#include "kernels/view_scatter.h"
#include "proto/codec.h"
#include "proto/op_list.h"
#include "server/core/prepared_op.h"
#include "server/core/stored_operands.h"

namespace tensorops {

// ArgDecoder decodes one request's fields for the op `op`, every error naming the op and the
// argument. It is the one place a request's tensors are read, so whatever a tensor argument may
// be besides inline bytes is resolved here for every op: a reference to a stored tensor
// (Tensor.stored) or to bytes in a shared-memory region (Tensor.shared_memory) is the value
// `operands` acquired for it (stored_operands.h), which the caller holds until the op has run.
class ArgDecoder {
 public:
  // `result_stays_in_store`: the call's result is stored and not returned (ResultOptions), so a
  // shape the result is allocated from is not held to the message size limit.
  ArgDecoder(std::string_view op, const wire::DecodeLimits& limits,
             std::shared_ptr<const StoredOperands> operands = nullptr,
             bool result_stays_in_store = false)
      : op_(op),
        limits_(limits),
        operands_(std::move(operands)),
        result_stays_in_store_(result_stays_in_store) {}

  absl::StatusOr<TensorView> Tensor(const v1::Tensor& tensor, std::string_view arg) const {
    if (tensor.has_stored() || tensor.has_shared_memory()) return Referenced(tensor, arg);
    return wire::DecodeTensor(tensor, op_, arg, limits_);
  }
  absl::StatusOr<Scalar> ScalarArg(const v1::Scalar& scalar, std::string_view arg) const {
    return wire::DecodeScalar(scalar, op_, arg);
  }
  absl::StatusOr<Reduction> Reduce(v1::Reduction reduce) const {
    return wire::ReductionFromProto(reduce, op_);
  }
  // ShapeField checks a shape sent as a field of its own (ScatterNdRequest.shape) as a tensor's.
  absl::Status ShapeField(DataType dtype, ShapeSpan shape, std::string_view arg) const {
    if (!result_stays_in_store_) {
      return wire::CheckShapeField(dtype, shape, op_, arg, limits_).status();
    }
    wire::DecodeLimits stored_limits = limits_;
    stored_limits.max_bytes = std::numeric_limits<int64_t>::max();
    return wire::CheckShapeField(dtype, shape, op_, arg, stored_limits).status();
  }
  std::string_view op() const { return op_; }

 private:
  // Referenced is the value `tensor` references, a stored tensor or bytes in shared memory. The
  // op's rank and element limits apply (what the kernels and the result may handle), but not the
  // message size limit: neither crosses the wire in this call.
  absl::StatusOr<TensorView> Referenced(const v1::Tensor& tensor, std::string_view arg) const {
    if (operands_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s: %s refers to %s \"%s\", but this call cannot read %s", op_, arg,
                          tensor.has_stored() ? "stored tensor" : "shared-memory region",
                          absl::CHexEscape(tensor.has_stored() ? tensor.stored().name()
                                                               : tensor.shared_memory().region()),
                          tensor.has_stored() ? "stored tensors" : "shared memory"));
    }
    TENSOROPS_ASSIGN_OR_RETURN(TensorView view, operands_->View(tensor, arg));
    wire::DecodeLimits stored_limits = limits_;
    stored_limits.max_bytes = std::numeric_limits<int64_t>::max();
    TENSOROPS_RETURN_IF_ERROR(
        wire::CheckShape(view.dtype(), view.shape(), op_, arg, stored_limits).status());
    return view;
  }

  std::string_view op_;
  const wire::DecodeLimits& limits_;
  std::shared_ptr<const StoredOperands> operands_;
  const bool result_stays_in_store_;
};

// CpuKernel is the CPU kernel of a plan type: it writes the result into `result`.
template <typename Plan>
using CpuKernel = absl::Status (*)(const Plan& plan, const MutableTensorView& result);

// IncludeSelf reads the proto3 `optional bool include_self` of a reducing request.
template <typename Request>
bool IncludeSelf(const Request& request) {
  // An absent include_self means true, as in PyTorch.
  return request.has_include_self() ? request.include_self() : true;
}

// OpEntry holds the planning half of an entry: the plan function, the CPU kernel of its plan,
// and whether the result is the input updated.
template <typename PlanT, auto kPlanV, CpuKernel<PlanT> kCpuV, bool kUpdatesInputV>
struct OpEntry {
  static constexpr auto kPlan = kPlanV;
  static constexpr CpuKernel<PlanT> kCpu = kCpuV;
  static constexpr bool kUpdatesInput = kUpdatesInputV;
};

template <typename Op>
struct OpServing;

template <>
struct OpServing<ops::Gather>
    : OpEntry<GatherPlan, PlanGather, cpu::Gather, /*updates_input=*/false> {
  static absl::StatusOr<GatherArgs> Decode(const v1::GatherRequest& request,
                                           const ArgDecoder& decoder) {
    TENSOROPS_ASSIGN_OR_RETURN(TensorView input, decoder.Tensor(request.input(), "input"));
    TENSOROPS_ASSIGN_OR_RETURN(TensorView index, decoder.Tensor(request.index(), "index"));
    return GatherArgs{
        .input = input, .index = index, .axis = request.axis(), .broadcast = request.broadcast()};
  }
};

template <>
struct OpServing<ops::Scatter>
    : OpEntry<ScatterPlan, PlanScatter, cpu::Scatter, /*updates_input=*/true> {
  static absl::StatusOr<ScatterArgs> Decode(const v1::ScatterRequest& request,
                                            const ArgDecoder& decoder) {
    ScatterArgs args;
    TENSOROPS_ASSIGN_OR_RETURN(args.input, decoder.Tensor(request.input(), "input"));
    TENSOROPS_ASSIGN_OR_RETURN(args.index, decoder.Tensor(request.index(), "index"));
    switch (request.source_case()) {
      case v1::ScatterRequest::kSrc: {
        TENSOROPS_ASSIGN_OR_RETURN(args.source, decoder.Tensor(request.src(), "src"));
        break;
      }
      case v1::ScatterRequest::kValue: {
        TENSOROPS_ASSIGN_OR_RETURN(args.source, decoder.ScalarArg(request.value(), "value"));
        break;
      }
      case v1::ScatterRequest::SOURCE_NOT_SET:
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: one of src or value is required", decoder.op()));
    }
    TENSOROPS_ASSIGN_OR_RETURN(args.reduce, decoder.Reduce(request.reduce()));
    args.axis = request.axis();
    args.include_self = IncludeSelf(request);
    args.broadcast = request.broadcast();
    return args;
  }
  // The CPU kernels are always reproducible; the flag picks the GPU's sorted reduction, as does
  // `deterministic` (a journaled in-place update, which recovery replays on the CPU).
  static void SetGpuOptions(const v1::ScatterRequest& request, bool deterministic,
                            ScatterPlan* plan) {
    plan->deterministic = request.deterministic() || deterministic;
  }
};

template <>
struct OpServing<ops::IndexSelect>
    : OpEntry<GatherPlan, PlanIndexSelect, cpu::Gather, /*updates_input=*/false> {
  static absl::StatusOr<IndexSelectArgs> Decode(const v1::IndexSelectRequest& request,
                                                const ArgDecoder& decoder) {
    TENSOROPS_ASSIGN_OR_RETURN(TensorView input, decoder.Tensor(request.input(), "input"));
    TENSOROPS_ASSIGN_OR_RETURN(TensorView index, decoder.Tensor(request.index(), "index"));
    return IndexSelectArgs{.input = input, .index = index, .axis = request.axis()};
  }
};

template <>
struct OpServing<ops::IndexReduce>
    : OpEntry<ScatterPlan, PlanIndexReduce, cpu::Scatter, /*updates_input=*/true> {
  static absl::StatusOr<IndexReduceArgs> Decode(const v1::IndexReduceRequest& request,
                                                const ArgDecoder& decoder) {
    IndexReduceArgs args{.axis = request.axis(), .include_self = IncludeSelf(request)};
    TENSOROPS_ASSIGN_OR_RETURN(args.input, decoder.Tensor(request.input(), "input"));
    TENSOROPS_ASSIGN_OR_RETURN(args.index, decoder.Tensor(request.index(), "index"));
    TENSOROPS_ASSIGN_OR_RETURN(args.source, decoder.Tensor(request.src(), "src"));
    TENSOROPS_ASSIGN_OR_RETURN(args.reduce, decoder.Reduce(request.reduce()));
    if (request.has_alpha()) {
      TENSOROPS_ASSIGN_OR_RETURN(args.alpha, decoder.ScalarArg(request.alpha(), "alpha"));
    }
    return args;
  }
  // IndexReduce has no flag of its own: only a journaled in-place update asks for the GPU's
  // sorted reduction (see Scatter's).
  static void SetGpuOptions(const v1::IndexReduceRequest&, bool deterministic, ScatterPlan* plan) {
    plan->deterministic = deterministic;
  }
};

template <>
struct OpServing<ops::SelectScatter>
    : OpEntry<ViewScatterPlan, PlanSelectScatter, cpu::ViewScatter, /*updates_input=*/true> {
  static absl::StatusOr<SelectScatterArgs> Decode(const v1::SelectScatterRequest& request,
                                                  const ArgDecoder& decoder) {
    SelectScatterArgs args{.axis = request.axis(), .index = request.index()};
    TENSOROPS_ASSIGN_OR_RETURN(args.input, decoder.Tensor(request.input(), "input"));
    TENSOROPS_ASSIGN_OR_RETURN(args.src, decoder.Tensor(request.src(), "src"));
    return args;
  }
};

template <>
struct OpServing<ops::SliceScatter>
    : OpEntry<ViewScatterPlan, PlanSliceScatter, cpu::ViewScatter, /*updates_input=*/true> {
  static absl::StatusOr<SliceScatterArgs> Decode(const v1::SliceScatterRequest& request,
                                                 const ArgDecoder& decoder) {
    SliceScatterArgs args{.axis = request.axis()};
    TENSOROPS_ASSIGN_OR_RETURN(args.input, decoder.Tensor(request.input(), "input"));
    TENSOROPS_ASSIGN_OR_RETURN(args.src, decoder.Tensor(request.src(), "src"));
    if (request.has_start()) args.start = request.start();
    if (request.has_end()) args.end = request.end();
    if (request.has_step()) args.step = request.step();
    return args;
  }
};

template <>
struct OpServing<ops::DiagonalScatter>
    : OpEntry<ViewScatterPlan, PlanDiagonalScatter, cpu::ViewScatter, /*updates_input=*/true> {
  static absl::StatusOr<DiagonalScatterArgs> Decode(const v1::DiagonalScatterRequest& request,
                                                    const ArgDecoder& decoder) {
    DiagonalScatterArgs args{.offset = request.offset(),
                             .axis1 = request.has_axis1() ? request.axis1() : 0,
                             .axis2 = request.has_axis2() ? request.axis2() : 1};
    TENSOROPS_ASSIGN_OR_RETURN(args.input, decoder.Tensor(request.input(), "input"));
    TENSOROPS_ASSIGN_OR_RETURN(args.src, decoder.Tensor(request.src(), "src"));
    return args;
  }
};

template <>
struct OpServing<ops::GatherNd>
    : OpEntry<NdPlan, PlanGatherNd, cpu::GatherNd, /*updates_input=*/false> {
  static absl::StatusOr<GatherNdArgs> Decode(const v1::GatherNdRequest& request,
                                             const ArgDecoder& decoder) {
    GatherNdArgs args{.axes = {request.axes().begin(), request.axes().end()},
                      .batch_dims = request.batch_dims()};
    TENSOROPS_ASSIGN_OR_RETURN(args.input, decoder.Tensor(request.input(), "input"));
    TENSOROPS_ASSIGN_OR_RETURN(args.index, decoder.Tensor(request.index(), "index"));
    return args;
  }
};

template <>
struct OpServing<ops::ScatterNd>
    : OpEntry<NdPlan, PlanScatterNd, cpu::ScatterNd, /*updates_input=*/true> {
  static absl::StatusOr<ScatterNdArgs> Decode(const v1::ScatterNdRequest& request,
                                              const ArgDecoder& decoder) {
    ScatterNdArgs args{.axes = {request.axes().begin(), request.axes().end()},
                       .batch_dims = request.batch_dims(),
                       .include_self = IncludeSelf(request)};
    TENSOROPS_ASSIGN_OR_RETURN(args.index, decoder.Tensor(request.index(), "index"));
    TENSOROPS_ASSIGN_OR_RETURN(args.source, decoder.Tensor(request.src(), "src"));
    TENSOROPS_ASSIGN_OR_RETURN(args.reduce, decoder.Reduce(request.reduce()));
    args.shape.assign(request.shape().begin(), request.shape().end());
    if (request.has_input()) {
      // Given together with a shape, the plan rejects the pair, naming both.
      TENSOROPS_ASSIGN_OR_RETURN(args.input, decoder.Tensor(request.input(), "input"));
      return args;
    }
    // A repeated field cannot tell an empty shape from an absent one, so the zeros form needs
    // rank >= 1: a request with neither field is a mistake, not rank-0 zeros.
    if (args.shape.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: neither input nor shape is given (input is the tensor to update; shape, without "
          "input, starts from zeros of that shape)",
          decoder.op()));
    }
    // The result is allocated from this shape, so it gets a tensor's checks and limits first.
    TENSOROPS_RETURN_IF_ERROR(decoder.ShapeField(args.source.dtype(), args.shape, "shape"));
    return args;
  }
  // The flag picks the GPU's sorted reduction, in either form (the single-axis one runs as a
  // Scatter), as does `deterministic` (see Scatter's).
  static void SetGpuOptions(const v1::ScatterNdRequest& request, bool deterministic, NdPlan* plan) {
    plan->deterministic = request.deterministic() || deterministic;
    if (plan->single_axis_scatter.has_value()) {
      plan->single_axis_scatter->deterministic = plan->deterministic;
    }
  }
};

template <>
struct OpServing<ops::MaskedScatter>
    : OpEntry<MaskedScatterPlan, PlanMaskedScatter, cpu::MaskedScatter, /*updates_input=*/true> {
  static absl::StatusOr<MaskedScatterArgs> Decode(const v1::MaskedScatterRequest& request,
                                                  const ArgDecoder& decoder) {
    MaskedScatterArgs args;
    TENSOROPS_ASSIGN_OR_RETURN(args.input, decoder.Tensor(request.input(), "input"));
    TENSOROPS_ASSIGN_OR_RETURN(args.mask, decoder.Tensor(request.mask(), "mask"));
    TENSOROPS_ASSIGN_OR_RETURN(args.source, decoder.Tensor(request.src(), "src"));
    return args;
  }
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_CORE_OP_TABLE_H_
