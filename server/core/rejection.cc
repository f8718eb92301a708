#include "server/core/rejection.h"

#include <array>
#include <iterator>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"

namespace tensorops {
namespace {

// The payload's key: a type URL of our own, as absl::Status payloads require. (Debian's Abseil
// has its own string_view, distinct from std::string_view, hence the absl:: types here.)
constexpr absl::string_view kRejectionUrl = "type.googleapis.com/tensorops.internal.Rejection";

absl::string_view ToAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr std::array<std::string_view, 7> kLabels = {
    "queue_full", "shutting_down",   "limit", "deadline_exceeded",
    "cancelled",  "unauthenticated", "memory"};
static_assert(kLabels.size() == std::size(kAllRejections), "a label for every Rejection");

}  // namespace

absl::Status MarkRejected(absl::Status status, Rejection why) {
  status.SetPayload(kRejectionUrl, absl::Cord(ToAbsl(RejectionLabel(why))));
  return status;
}

std::optional<Rejection> RejectionOf(const absl::Status& status) {
  const absl::optional<absl::Cord> payload = status.GetPayload(kRejectionUrl);
  if (!payload.has_value()) return std::nullopt;
  for (size_t i = 0; i < kLabels.size(); ++i) {
    if (*payload == ToAbsl(kLabels[i])) return static_cast<Rejection>(i);
  }
  return std::nullopt;
}

std::string_view RejectionLabel(Rejection why) { return kLabels[static_cast<size_t>(why)]; }

}  // namespace tensorops
