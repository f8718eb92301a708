// PreparedOp: one operation request decoded, validated and planned, ready to run. Every RPC that
// runs an op (its own RPC, Run, RunStream) prepares it here, so all of them share one set of
// checks, limits and kernels.
//
//   absl::StatusOr<PreparedOp> op =
//       PrepareOp(request, limits, response.mutable_result());    // on the gRPC thread
//   if (!op.ok()) return Fail(op.status());
//   absl::Status status = op->run(response.mutable_result());    // later, on a worker
//
// Preparing never copies tensor data: the plan points into the request's bytes, so the request
// must outlive the PreparedOp and stay unmodified. The result is allocated only by `run`, inside
// the response, so a call waiting for a worker holds no result memory.
#ifndef TENSOROPS_SERVER_CORE_PREPARED_OP_H_
#define TENSOROPS_SERVER_CORE_PREPARED_OP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "kernels/device_call.h"
#include "proto/codec.h"
#include "server/core/stored_operands.h"
#include "server/store/tensor_store.h"
#include "tensorops/v1/generic.pb.h"
#include "tensorops/v1/ops.pb.h"

namespace tensorops {

// DeviceRun is a call's GPU form (kernels/device_call.h) and the host buffer its result goes to.
struct DeviceRun {
  // Null when this call has no GPU form: run it with PreparedOp::run.
  std::unique_ptr<DeviceCall> call;
  // Null when the result stays on the device (call->resident_result()).
  void* result = nullptr;
  // The resident result is a stored tensor's own bytes, which other calls read (in place): a
  // device failure after the kernels began writing them cannot be undone by a CPU run. (A
  // store_as result is a new upload that nobody sees before the call commits it.)
  bool result_shared = false;
};

// PreparedOp is a planned op.
struct PreparedOp {
  // The op's name as errors and metrics give it: "gather", "scatter_nd", ...
  std::string_view op;
  // run checks the result against the limits (RESOURCE_EXHAUSTED), allocates it in the response
  // PrepareOp was given and runs the kernel into it; errors as the kernel's (an out-of-range index
  // value is found here). May throw std::bad_alloc. Call at most once.
  std::function<absl::Status()> run;
  // device, set for ops with GPU kernels: allocates the result as `run` does and returns the GPU
  // form of the call. The CUDA executor runs it; when the device fails (or the call has no GPU
  // form) `run` runs the call on the CPU instead. Errors are the result's limits, as `run`'s.
  std::function<absl::StatusOr<DeviceRun>()> device;
  // finish runs once after `run` or the device form has written the result successfully: it
  // commits a result stored under a name or written in place (ResultOptions) and leaves a
  // reference to it in the response. Errors are the store's (an in-place tensor overwritten
  // meanwhile: ABORTED). Null when there is nothing to do.
  std::function<absl::Status()> finish;
  // result_bytes is what the call will allocate for its result in the response, as planned
  // (never more than the message limit, past which `run` fails instead of allocating): the
  // result's bytes when the response carries them, 0 for a result that goes into the store
  // (the store counts it) or a call answered from the store's memory. A backward counts its
  // request's bytes again (each gradient is the size of an input the request carries).
  // Admission (server/core/memory_budget.h) holds it against --max_memory_bytes.
  int64_t result_bytes = 0;
  // Some stored operand is in device memory (--store_device=cuda): the call belongs on the GPU
  // whatever its size; on the CPU, `run` first copies those operands to the host.
  bool operands_on_device = false;
  // Some stored operand is in host memory (--store_device=cpu): the call runs on the CPU
  // whatever its size and --device, since the GPU would copy each such tensor in (and an updated
  // one out) on every call, a whole 1 GiB table for a 4096-row lookup.
  bool operands_in_host_memory = false;
};

// InputReuse says whether `run` may take the request's input bytes for the result.
enum class InputReuse {
  kNo,
  // The request is not a const object (gRPC's per-call request message is one, handed over as a
  // const pointer), is not touched by anyone else until the call is over, and nothing reads its
  // input.data after `run` except the plan. Then the ops whose result is their input updated
  // (scatter, index_reduce, select/slice/diagonal_scatter, masked_scatter) move input.data's bytes
  // into the result and run in place: no result allocation, no zero-fill, no copy of the input.
  kMayTakeInput,
};

// PrepareOp decodes and plans one request under `limits`, its result to go into `result` (inside
// the response, which must outlive the PreparedOp): INVALID_ARGUMENT for a bad request (naming the
// op, the argument, the value and the rule), RESOURCE_EXHAUSTED for a tensor over the limits.
// `request` is the message of the op `op` (an op's own request type, e.g. v1::GatherRequest).
// A tensor argument that references a stored tensor is read from `stored`: NOT_FOUND naming the
// op, the argument and the name when it does not exist, FAILED_PRECONDITION when its version is
// not the one the reference expects. The request's result_options may store the result in
// `stored` or update a stored input in place (result_target.h); a call whose update id the store
// remembers is answered from memory without running.
absl::StatusOr<PreparedOp> PrepareOp(v1::OpRequest::OpCase op,
                                     const google::protobuf::Message& request,
                                     const wire::DecodeLimits& limits, v1::Tensor* result,
                                     InputReuse reuse = InputReuse::kNo,
                                     const StoredTensors& stored = {});
// The generic form: the op the oneof holds; INVALID_ARGUMENT "run: op is not set ..." when it
// holds none.
absl::StatusOr<PreparedOp> PrepareOp(const v1::OpRequest& request, const wire::DecodeLimits& limits,
                                     v1::Tensor* result, InputReuse reuse = InputReuse::kNo,
                                     const StoredTensors& stored = {});

// PrepareBackward decodes the forward call and grad_output of `request`; its `run` computes the
// gradients (kernels/backward.h) into `response`. Errors as PrepareOp's, and the backward's own
// (a dtype that is not differentiable, a grad_output of the wrong shape or dtype) from `run`.
absl::StatusOr<PreparedOp> PrepareBackward(const v1::BackwardRequest& request,
                                           const wire::DecodeLimits& limits,
                                           v1::BackwardResponse* response,
                                           const StoredTensors& stored = {});

// BackwardOpName is the name of `request`'s backward for logs and metrics: "gather_backward", ...
// ("backward" when no op is set).
std::string_view BackwardOpName(const v1::OpRequest& request);

// OpName is the name PrepareOp would give `request`'s op ("run" when none is set), for logs and
// metrics of calls that fail before or during preparation.
std::string_view OpName(const v1::OpRequest& request);

// GuardExceptions calls `body` and turns any exception into a status naming `op`, so that none
// reaches a gRPC thread (which would end the server): std::bad_alloc is the request being too
// large for this server (RESOURCE_EXHAUSTED), anything else is our bug (INTERNAL).
absl::Status GuardExceptions(std::string_view op, const std::function<absl::Status()>& body);

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_CORE_PREPARED_OP_H_
