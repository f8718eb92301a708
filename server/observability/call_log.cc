#include "server/observability/call_log.h"

#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace tensorops {

std::string ClientAddress(std::string_view peer) {
  // Only IP peers carry a port, after the last colon ("ipv6:[::1]:5678" too).
  if (peer.rfind("ipv4:", 0) != 0 && peer.rfind("ipv6:", 0) != 0) return std::string(peer);
  const size_t colon = peer.rfind(':');
  return std::string(colon <= 4 ? peer : peer.substr(0, colon));
}

CallLog& CallLog::Global() {
  static CallLog* const log = new CallLog();
  return *log;
}

void CallLog::Finished(std::string_view method, std::string_view peer, absl::Duration elapsed,
                       const absl::Status& status, absl::Time now) {
  if (status.ok()) {
    spdlog::debug("{} from {}: OK in {}", method, peer, absl::FormatDuration(elapsed));
    return;
  }
  // Code and message only: a status's payloads (the rejection reason) are for the metrics.
  const std::string line = absl::StrFormat(
      "%s from %s failed in %s: %s: %s", method, peer, absl::FormatDuration(elapsed),
      absl::StatusCodeToString(status.code()), status.message());
  bool full;
  {
    absl::MutexLock lock(&mu_);
    if (now - window_start_ >= kWindow) FlushLocked(now);
    Client& client = clients_[ClientAddress(peer)];
    full = client.logged < kFullLinesPerWindow;
    if (full) {
      ++client.logged;
    } else {
      ++client.held_back;
      ++client.held_back_by_code[status.code()];
    }
  }
  if (full) {
    spdlog::info("{}", line);
  } else {
    spdlog::debug("{}", line);
  }
}

void CallLog::Flush(absl::Time now) {
  absl::MutexLock lock(&mu_);
  FlushLocked(now);
}

void CallLog::FlushLocked(absl::Time now) {
  for (const auto& [address, client] : clients_) {
    if (client.held_back == 0) continue;
    std::vector<std::string> codes;
    for (const auto& [code, count] : client.held_back_by_code) {
      codes.push_back(absl::StrFormat("%s: %d", absl::StatusCodeToString(code), count));
    }
    spdlog::info(
        "{}: {} more failed calls in the last {} not logged ({}); --log_level=debug logs every one",
        address, client.held_back, absl::FormatDuration(now - window_start_),
        absl::StrJoin(codes, ", "));
  }
  clients_.clear();
  window_start_ = now;
}

}  // namespace tensorops
