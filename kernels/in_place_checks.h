// CheckBeforeWriting: the errors a CPU kernel finds only while it runs (an index value out of
// range, a source too small for a mask), found first, by reading the operands alone.
//
// A kernel that fails halfway leaves its result unspecified. That is harmless when the result is
// a fresh buffer, but a call that updates a stored tensor in place writes into bytes other calls
// read: it checks here before the kernel starts, so that a failed update changes nothing.
//
//   TENSOROPS_RETURN_IF_ERROR(CheckBeforeWriting(plan));
//   TENSOROPS_RETURN_IF_ERROR(cpu::Scatter(plan, stored_input));  // cannot fail halfway now
#ifndef TENSOROPS_KERNELS_IN_PLACE_CHECKS_H_
#define TENSOROPS_KERNELS_IN_PLACE_CHECKS_H_

#include "absl/status/status.h"
#include "kernels/masked_scatter.h"
#include "kernels/nd_ops.h"
#include "kernels/scatter.h"
#include "kernels/view_scatter.h"

namespace tensorops {

// Each returns OK when the op's CPU kernel cannot fail on `plan`, else the error it would return
// (the same code; the message names the op and the first offending value).
absl::Status CheckBeforeWriting(const ScatterPlan& plan);
absl::Status CheckBeforeWriting(const NdPlan& plan);
absl::Status CheckBeforeWriting(const MaskedScatterPlan& plan);
// View scatters find every error while planning.
inline absl::Status CheckBeforeWriting(const ViewScatterPlan& /*plan*/) { return absl::OkStatus(); }

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_IN_PLACE_CHECKS_H_
