#include "server/core/prepared_op.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/device_call.h"
#include "kernels/dtype.h"
#include "kernels/gradients.h"
#include "kernels/in_place_checks.h"
#include "kernels/shape.h"
#include "kernels/status_macros.h"
#include "kernels/tensor_memory.h"
#include "proto/op_list.h"
#include "server/core/op_table.h"
#include "server/core/result_target.h"
#include "server/core/stored_operands.h"

namespace tensorops {
namespace {

// Below this many bytes the input is not worth taking (and a short std::string keeps its bytes
// inside the object, where a swap would move them away from the plan's view).
constexpr size_t kMinTakenInputBytes = 4096;

// TakeInput moves `input_data`'s bytes into `result_tensor` as the result when the plan's input
// is exactly those bytes, contiguous, of the result's shape and dtype; the kernel then runs in
// place. Returns the result's view, or nullopt (nothing changed) when the input does not qualify.
template <typename Plan>
std::optional<MutableTensorView> TakeInput(const Plan& plan, std::string* input_data,
                                           v1::Tensor* result_tensor) {
  const TensorView& input = plan.input;
  if (input_data == nullptr || input_data->size() < kMinTakenInputBytes ||
      input.data() != input_data->data() || input.dtype() != plan.result_dtype ||
      input.shape() != plan.result_shape || !input.is_contiguous() ||
      static_cast<size_t>(input.numel() * input.itemsize()) != input_data->size()) {
    return std::nullopt;
  }
  result_tensor->set_dtype(wire::DataTypeToProto(plan.result_dtype));
  result_tensor->mutable_shape()->Assign(plan.result_shape.begin(), plan.result_shape.end());
  std::string* data = result_tensor->mutable_data();
  data->swap(*input_data);
  if (data->data() != input.data()) {
    // The bytes moved (a string implementation that kept them inline): undo, copy instead.
    data->swap(*input_data);
    return std::nullopt;
  }
  return MutableTensorView(plan.result_dtype, plan.result_shape, static_cast<void*>(data->data()));
}

// PlannedResultBytes is what the result of `plan` will take in the response (PreparedOp::
// result_bytes): its bytes, at most the message limit (a larger result fails in `run` before it
// is allocated), or 0 when the response will not carry it.
template <typename Plan>
int64_t PlannedResultBytes(const Plan& plan, const ResultTarget& target,
                           const wire::DecodeLimits& limits) {
  if (!target.response_carries_data()) return 0;
  const absl::StatusOr<int64_t> numel = CheckedNumElements(plan.result_shape, "result");
  int64_t bytes = 0;
  if (!numel.ok() || __builtin_mul_overflow(*numel, ItemSize(plan.result_dtype), &bytes)) {
    return limits.max_bytes;
  }
  return std::min(bytes, limits.max_bytes);
}

// CheckOnHost is INTERNAL when some tensor `plan` reads is still in device memory: the CPU form
// runs on host views only (a bug, caught here rather than as a crash in the kernel).
template <typename Plan>
absl::Status CheckOnHost(std::string_view op, const Plan& plan) {
  std::vector<std::string> on_device;
  auto check = [&](std::string_view name, const TensorView& view) {
    if (view.on_device()) on_device.emplace_back(name);
  };
  if constexpr (requires { plan.input; }) check("input", plan.input);
  if constexpr (requires { plan.index; }) check("index", plan.index);
  if constexpr (requires { plan.source; }) check("src", plan.source);
  if constexpr (requires { plan.src; }) check("src", plan.src);
  if constexpr (requires { plan.mask; }) check("mask", plan.mask);
  if (on_device.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat(
      "%s: the CPU was about to read %s in device memory; the call was stopped instead", op,
      absl::StrJoin(on_device, ", ")));
}

// Prepare is the common tail of every PrepareOp: take the plan and return the op that allocates
// the result where `target` says (the response by default) and runs the kernel into it, and, for
// plans with GPU kernels, its GPU form. With `input_data` (the request's input.data, which the
// caller lets us take) an op whose result is its input updated takes those bytes as the result
// instead and runs in place on the CPU (the GPU form always allocates its result: the device
// copies read the input). `operands` holds the stored tensors the plan reads; both forms keep
// them for as long as they live. When some of them are in device memory, the GPU form reads them
// in place, and the CPU form copies them to the host and plans again on the copies with
// `plan_on_host`.
template <typename Plan, typename Kernel>
absl::StatusOr<PreparedOp> Prepare(std::string_view op, Plan plan, Kernel kernel,
                                   std::string* input_data, v1::Tensor* result_tensor,
                                   std::shared_ptr<ResultTarget> target,
                                   std::shared_ptr<StoredOperands> operands,
                                   std::function<absl::StatusOr<Plan>()> plan_on_host) {
  auto shared_plan = std::make_shared<const Plan>(std::move(plan));
  auto run = [op, kernel, shared_plan, result_tensor, input_data, target, operands,
              plan_on_host = std::move(plan_on_host)]() mutable -> absl::Status {
    if (operands->on_device()) {
      TENSOROPS_RETURN_IF_ERROR(operands->MirrorOnHost());
      TENSOROPS_ASSIGN_OR_RETURN(Plan host_plan, plan_on_host());
      shared_plan = std::make_shared<const Plan>(std::move(host_plan));
    }
    TENSOROPS_RETURN_IF_ERROR(CheckOnHost(op, *shared_plan));
    if constexpr (requires { shared_plan->input; }) {
      // A referenced input's bytes are the store's, never input_data's: TakeInput finds they
      // differ (an empty input.data) and leaves them alone.
      if (target->in_response()) {
        if (std::optional<MutableTensorView> in_place =
                TakeInput(*shared_plan, input_data, result_tensor)) {
          return kernel(*shared_plan, *in_place);
        }
      }
    }
    TENSOROPS_ASSIGN_OR_RETURN(
        MutableTensorView result,
        target->Allocate(shared_plan->result_dtype, shared_plan->result_shape));
    return kernel(*shared_plan, result);
  };
  PreparedOp prepared{.op = op,
                      .run = std::move(run),
                      .operands_on_device = operands->on_device(),
                      .operands_in_host_memory = operands->in_host_memory()};
  if (!target->in_response() || operands->uses_shared_memory()) {
    // What the call read from or wrote to shared memory counts only if no region shrank under it.
    prepared.finish = [target, operands]() -> absl::Status {
      TENSOROPS_RETURN_IF_ERROR(operands->CheckSharedMemory());
      return target->in_response() ? absl::OkStatus() : target->Finish();
    };
  }
  if constexpr (requires(const Plan& p) { MakeDeviceCall(p); }) {
    prepared.device = [shared_plan, target, operands]() -> absl::StatusOr<DeviceRun> {
      std::unique_ptr<DeviceCall> call = MakeDeviceCall(*shared_plan);
      if (call == nullptr) return DeviceRun{};
      operands->MarkResident(*call);
      TENSOROPS_ASSIGN_OR_RETURN(MutableTensorView result,
                                 target->Allocate(shared_plan->result_dtype,
                                                  shared_plan->result_shape, KernelSide::kDevice));
      if (target->on_device()) {
        call->set_resident_result(result.data());
        return DeviceRun{.call = std::move(call), .result_shared = target->in_place()};
      }
      return DeviceRun{.call = std::move(call), .result = result.data()};
    };
  }
  return prepared;
}

// Remembered is the op that answers a retried change from the store's memory of it: the answer
// (a reference and, with return_data, the bytes) is filled in here, while preparing, and nothing
// runs. Reading the bytes may wait for an update of the tensor, which the preparing thread may
// do and a scheduler worker must not: the update may be waiting in the queue for that worker.
absl::StatusOr<PreparedOp> Remembered(std::string_view op, const TensorStore::Change& change,
                                      const v1::ResultOptions& options, const StoredTensors& stored,
                                      v1::Tensor* result) {
  TENSOROPS_RETURN_IF_ERROR(AnswerRemembered(op, change, options, stored, result));
  return PreparedOp{.op = op, .run = [] { return absl::OkStatus(); }};
}

// CheckInPlacePlan checks that a plan may run on its stored input, `update`, in place: the
// result is the stored tensor's dtype and shape (masked_scatter's mask may broadcast the input
// to a larger one), and nothing the kernel finds only while it runs can fail it halfway
// (in_place_checks.h).
template <typename Plan>
absl::Status CheckInPlacePlan(std::string_view op, const Plan& plan,
                              const TensorStore::UpdateHandle& update) {
  if (update.dtype() != plan.result_dtype || update.shape() != plan.result_shape) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: result_options.in_place = true, but the result (%s [%s]) is not the shape of input "
        "(%s [%s]); in place, the result must fit the stored tensor",
        op, DataTypeName(plan.result_dtype), absl::StrJoin(plan.result_shape, ", "),
        DataTypeName(update.dtype()), absl::StrJoin(update.shape(), ", ")));
  }
  return CheckBeforeWriting(plan);
}

// UpdatingOps lists the ops whose result is their input updated, the ones that may run in place
// ("scatter, index_reduce, ..."), from the table.
std::string_view UpdatingOps() {
  static const std::string* const names = [] {
    std::vector<std::string> updating;
    ops::ForEachOp([&]<typename Op>(Op) {
      if (OpServing<Op>::kUpdatesInput) updating.emplace_back(ops::Name<Op>());
    });
    return new std::string(absl::StrJoin(updating, ", "));
  }();
  return *names;
}

// PrepareFor decodes, plans and prepares `request` for Op through its table entry.
template <typename Op>
absl::StatusOr<PreparedOp> PrepareFor(const typename Op::Request& request,
                                      const wire::DecodeLimits& limits, v1::Tensor* result,
                                      InputReuse reuse, const StoredTensors& stored) {
  using Serving = OpServing<Op>;
  const std::string_view op = ops::Name<Op>();
  const v1::ResultOptions& options = request.result_options();
  TENSOROPS_RETURN_IF_ERROR(
      CheckResultOptions(op, options, Serving::kUpdatesInput, UpdatingOps(), request.input()));
  if (ChangesStore(options) && stored.store == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: result_options ask to change a stored tensor, but this call cannot", op));
  }
  // A retry of a change already made is answered, not applied again.
  if (ChangesStore(options) && !options.update_id().empty()) {
    if (std::optional<TensorStore::Change> change =
            stored.store->FindChange(stored.ns, options.update_id())) {
      return Remembered(op, *change, options, stored, result);
    }
  }
  TENSOROPS_ASSIGN_OR_RETURN(
      std::shared_ptr<StoredOperands> operands,
      StoredOperands::Acquire(op, request, stored,
                              {.tensor = options.in_place() ? &request.input() : nullptr,
                               .update_id = options.update_id()}));
  if (options.has_shared_memory()) {
    TENSOROPS_RETURN_IF_ERROR(operands->HoldResultRegion(
        options.shared_memory(), stored, absl::StrFormat("%s: result_options.shared_memory", op)));
  }
  // A call that changes the store reads its arguments in shared memory from copies: the kernel
  // then never writes the store from a region its owner may change or shrink meanwhile.
  if (ChangesStore(options)) TENSOROPS_RETURN_IF_ERROR(operands->CopySharedMemory());
  // A retry that waited for its first attempt to commit (the store checks under the lock).
  if (TensorStore::UpdateHandle* update = operands->update();
      update != nullptr && update->already_applied().has_value()) {
    TensorStore::Change change{.name = update->name(), .version = *update->already_applied()};
    operands.reset();
    return Remembered(op, change, options, stored, result);
  }
  // An in-place update is checked before it writes, on the host: its other operands are read
  // there (a GPU kernel then gets them as small inputs), the updated tensor stays where it is.
  if (options.in_place())
    TENSOROPS_RETURN_IF_ERROR(operands->MirrorOnHost(/*include_update=*/false));
  const ArgDecoder decoder(
      op, limits, operands,
      /*result_stays_in_store=*/ChangesStore(options) && !options.return_data());
  TENSOROPS_ASSIGN_OR_RETURN(auto args, Serving::Decode(request, decoder));
  auto planned = Serving::kPlan(args);
  if (!planned.ok() && NeedsHostBytes(planned.status())) {
    // The plan reads an operand's elements (not only its shape), which are in device memory:
    // copy the operands to the host (the tensor updated in place stays where it is) and plan on
    // the copies. The GPU form, if it runs, then takes them as small inputs.
    TENSOROPS_RETURN_IF_ERROR(operands->MirrorOnHost(/*include_update=*/false));
    TENSOROPS_ASSIGN_OR_RETURN(args, Serving::Decode(request, decoder));
    planned = Serving::kPlan(args);
  }
  TENSOROPS_ASSIGN_OR_RETURN(auto plan, std::move(planned));
  // The same plan again, on the host copies of operands in device memory (a CPU run). The
  // request outlives the PreparedOp.
  using Plan = decltype(plan);
  std::function<absl::StatusOr<Plan>()> plan_on_host;
  if (operands->on_device()) {
    plan_on_host = [&request, op, limits, operands,
                    stays =
                        ChangesStore(options) && !options.return_data()]() -> absl::StatusOr<Plan> {
      const ArgDecoder host_decoder(op, limits, operands, stays);
      TENSOROPS_ASSIGN_OR_RETURN(auto host_args, Serving::Decode(request, host_decoder));
      return Serving::kPlan(host_args);
    };
  }
  // The request is not a const object (see InputReuse), so writing through the pointer is
  // defined.
  std::string* input_data =
      Serving::kUpdatesInput && reuse == InputReuse::kMayTakeInput && !ChangesStore(options)
          ? const_cast<std::string*>(&request.input().data())
          : nullptr;
  if constexpr (Serving::kUpdatesInput) {
    if (options.in_place()) {
      TENSOROPS_RETURN_IF_ERROR(CheckInPlacePlan(op, plan, *operands->update()));
    }
  }
  // A durable store's journal records an in-place update before it writes, and recovery replays
  // it on the CPU: on the GPU it must give the CPU's bytes, so it takes the sorted reduction.
  const bool journaled = options.in_place() && stored.store->journaled();
  if constexpr (requires { Serving::SetGpuOptions(request, journaled, &plan); }) {
    Serving::SetGpuOptions(request, journaled, &plan);
  }
  if (journaled) {
    TENSOROPS_ASSIGN_OR_RETURN(std::string call,
                               operands->JournalCall(static_cast<int>(Op::kCase), request));
    const absl::Status logged =
        operands->update()->LogChange(std::move(call), options.update_id(), stored.lock_wait);
    if (IsStoreBusy(logged)) return logged;  // to be prepared again where it may wait
    if (!logged.ok()) {
      return absl::Status(logged.code(), absl::StrFormat("%s: %s", op, logged.message()));
    }
  }
  std::shared_ptr<ResultTarget> target =
      ResultTarget::Make(op, options, stored, operands, limits, result);
  const int64_t result_bytes = PlannedResultBytes(plan, *target, limits);
  TENSOROPS_ASSIGN_OR_RETURN(
      PreparedOp prepared,
      Prepare(op, std::move(plan), Serving::kCpu, input_data, result, std::move(target),
              std::move(operands), std::move(plan_on_host)));
  prepared.result_bytes = result_bytes;
  return prepared;
}

// BackwardNames holds "<op>_backward" for every op, built once from the op table.
const absl::flat_hash_map<v1::OpRequest::OpCase, std::string>& BackwardNames() {
  static const auto* const names = [] {
    auto* names = new absl::flat_hash_map<v1::OpRequest::OpCase, std::string>();
    ops::ForEachOp([&]<typename Op>(Op) {
      (*names)[Op::kCase] = absl::StrFormat("%s_backward", ops::Name<Op>());
    });
    return names;
  }();
  return *names;
}

// BytesOf is what a tensor argument takes in memory (0 for a scalar or an absent one).
int64_t BytesOf(const TensorView& view) { return view.numel() * ItemSize(view.dtype()); }
int64_t BytesOf(const std::optional<TensorView>& view) {
  return view.has_value() ? BytesOf(*view) : 0;
}
int64_t BytesOf(const std::variant<TensorView, Scalar>& source) {
  const TensorView* view = std::get_if<TensorView>(&source);
  return view == nullptr ? 0 : BytesOf(*view);
}

// GradientBytesBound is the most bytes a backward of `args` returns: a gradient of the input's
// size and one of the source's, whichever the op has (indices and masks have none).
template <typename Args>
int64_t GradientBytesBound(const Args& args) {
  int64_t bytes = 0;
  if constexpr (requires { args.input; }) bytes += BytesOf(args.input);
  if constexpr (requires { args.src; }) bytes += BytesOf(args.src);
  if constexpr (requires { args.source; }) bytes += BytesOf(args.source);
  return bytes;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareOp(v1::OpRequest::OpCase op,
                                     const google::protobuf::Message& request,
                                     const wire::DecodeLimits& limits, v1::Tensor* result,
                                     InputReuse reuse, const StoredTensors& stored) {
  return ops::VisitCase(
      op,
      [&]<typename Op>(Op) {
        // The caller's message is Op's request (the handler of Op's RPC passes it).
        return PrepareFor<Op>(static_cast<const typename Op::Request&>(request), limits, result,
                              reuse, stored);
      },
      [&]() -> absl::StatusOr<PreparedOp> {
        return absl::InternalError(absl::StrCat("PrepareOp: no op has case ", op));
      });
}

absl::StatusOr<PreparedOp> PrepareOp(const v1::OpRequest& request, const wire::DecodeLimits& limits,
                                     v1::Tensor* result, InputReuse reuse,
                                     const StoredTensors& stored) {
  return ops::VisitOp(
      request,
      [&]<typename Op>(Op, const typename Op::Request& op_request) {
        return PrepareFor<Op>(op_request, limits, result, reuse, stored);
      },
      []() -> absl::StatusOr<PreparedOp> {
        return absl::InvalidArgumentError(
            "run: op is not set (expected exactly one operation request, e.g. gather or scatter)");
      });
}

absl::StatusOr<PreparedOp> PrepareBackward(const v1::BackwardRequest& request,
                                           const wire::DecodeLimits& limits,
                                           v1::BackwardResponse* response,
                                           const StoredTensors& stored) {
  const std::string_view op = BackwardOpName(request.op());
  // Every stored tensor of the forward call and grad_output, taken together and held until the
  // backward has run.
  TENSOROPS_ASSIGN_OR_RETURN(std::shared_ptr<StoredOperands> operands,
                             StoredOperands::Acquire(op, request, stored));
  // A backward runs on the CPU: operands in device memory are read from host copies.
  TENSOROPS_RETURN_IF_ERROR(operands->MirrorOnHost());
  // grad_output's decoder; the forward call's tensors get one named after the forward op.
  const ArgDecoder decoder(op, limits, operands);
  // The op's own Backward (kernels/<op>.h), chosen by the type of its decoded arguments, and
  // the most bytes its gradients can take: one of the input's size and one of the source's.
  struct Backwards {
    std::function<absl::StatusOr<Gradients>(const TensorView& grad_output)> run;
    int64_t gradient_bytes = 0;
  };
  TENSOROPS_ASSIGN_OR_RETURN(
      Backwards backwards,
      ops::VisitOp(
          request.op(),
          [&]<typename Op>(Op,
                           const typename Op::Request& op_request) -> absl::StatusOr<Backwards> {
            if (op_request.has_result_options()) {
              return absl::InvalidArgumentError(absl::StrFormat(
                  "%s: op.%s.result_options is set; a backward returns its gradients and stores "
                  "nothing",
                  op, ops::Name<Op>()));
            }
            // The forward's errors name the forward op, as an inline forward call's do.
            const ArgDecoder forward_decoder(ops::Name<Op>(), limits, operands);
            TENSOROPS_ASSIGN_OR_RETURN(auto args,
                                       OpServing<Op>::Decode(op_request, forward_decoder));
            const int64_t gradient_bytes = GradientBytesBound(args);
            return Backwards{
                .run = [args = std::move(args)](
                           const TensorView& grad_output) { return Backward(args, grad_output); },
                .gradient_bytes = gradient_bytes};
          },
          []() -> absl::StatusOr<Backwards> {
            return absl::InvalidArgumentError(
                "backward: op is not set (expected the forward call's request, e.g. gather or "
                "scatter)");
          }));
  TENSOROPS_ASSIGN_OR_RETURN(TensorView grad_output,
                             decoder.Tensor(request.grad_output(), "grad_output"));
  // A stored input's gradient is as large as the stored tensor, however small the request.
  if (backwards.gradient_bytes > limits.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: the gradients would take up to %d bytes (one of each differentiable argument's "
        "size), more than the server's limit of %d (--max_message_bytes)",
        op, backwards.gradient_bytes, limits.max_bytes));
  }
  return PreparedOp{.op = op,
                    .run = [run_backward = std::move(backwards.run), grad_output, response,
                            operands]() -> absl::Status {
                      TENSOROPS_ASSIGN_OR_RETURN(Gradients gradients, run_backward(grad_output));
                      // The gradients are computed into tensors of their own and copied into the
                      // response once; they are each the size of an input, which the request
                      // already carried.
                      for (const auto& [argument, gradient] : gradients.by_argument) {
                        wire::EncodeTensor(gradient.view(),
                                           &(*response->mutable_gradients())[argument]);
                      }
                      // Gradients of arguments read from shared memory count only if no region
                      // shrank.
                      return operands->CheckSharedMemory();
                    },
                    // In the response, and computed first into tensors of their own.
                    .result_bytes = backwards.gradient_bytes};
}

std::string_view BackwardOpName(const v1::OpRequest& request) {
  const auto it = BackwardNames().find(request.op_case());
  return it == BackwardNames().end() ? std::string_view("backward") : std::string_view(it->second);
}

std::string_view OpName(const v1::OpRequest& request) {
  const std::string_view name = ops::NameOfCase(request.op_case());
  return name.empty() ? std::string_view("run") : name;
}

absl::Status GuardExceptions(std::string_view op, const std::function<absl::Status()>& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: the server ran out of memory for this request", op));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrFormat("%s: unexpected exception: %s", op, e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrFormat("%s: unexpected non-standard exception", op));
  }
}

}  // namespace tensorops
