// Rejection: why the service refused to run a call, carried on the call's absl::Status as a
// payload, so that metrics and logs read the reason as data instead of matching message text.
//
//   return MarkRejected(absl::ResourceExhaustedError("... --max_queued_calls ..."),
//                       Rejection::kQueueFull);
//   ...
//   if (std::optional<Rejection> why = RejectionOf(status))
//   metrics->Rejected(RejectionLabel(*why));
#ifndef TENSOROPS_SERVER_CORE_REJECTION_H_
#define TENSOROPS_SERVER_CORE_REJECTION_H_

#include <optional>
#include <string_view>

#include "absl/status/status.h"

namespace tensorops {

// Rejection is a reason a call was refused rather than run (or ran and failed on its own).
enum class Rejection {
  kQueueFull,         // the scheduler's queue held --max_queued_calls calls
  kShuttingDown,      // the server takes no new calls
  kLimit,             // a tensor or result over the size limits
  kDeadlineExceeded,  // the deadline passed before the call ran
  kCancelled,         // the client cancelled before the call ran
  kUnauthenticated,   // no valid bearer token
  kMemory,            // the call's bytes would take the server past --max_memory_bytes
};

// MarkRejected returns `status` carrying `why`; `status` must not be OK.
absl::Status MarkRejected(absl::Status status, Rejection why);

// RejectionOf is the reason MarkRejected attached to `status`, or nullopt when there is none.
std::optional<Rejection> RejectionOf(const absl::Status& status);

// kAllRejections is every Rejection, for those that list them (the metrics create each reason's
// series at 0).
inline constexpr Rejection kAllRejections[] = {Rejection::kQueueFull, Rejection::kShuttingDown,
                                               Rejection::kLimit,     Rejection::kDeadlineExceeded,
                                               Rejection::kCancelled, Rejection::kUnauthenticated,
                                               Rejection::kMemory};

// RejectionLabel is `why`'s label in the rejected-calls metric: "queue_full", "shutting_down",
// "limit", "deadline_exceeded", "cancelled", "unauthenticated", "memory".
std::string_view RejectionLabel(Rejection why);

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_CORE_REJECTION_H_
