// CallLog: the log lines of finished calls, rate-limited per client so that one misbehaving
// client cannot flood the log and bury everything else.
//
//   CallLog& log = CallLog::Global();
//   log.Finished("Gather", context->peer(), elapsed, status, absl::Now());
//
// A successful call is a debug line. A failed call is an info line, up to kFullLinesPerWindow per
// client address (the peer without its port, so reconnecting does not reset it) in each window of
// kWindow; beyond that its failures are counted by status code, and the first failure after the
// window ends writes one summary line per client that had lines held back:
//
//   ipv4:10.0.0.7: 4975 more failed calls in the last 10s not logged (INVALID_ARGUMENT: 4900,
//   CANCELLED: 75); --log_level=debug logs every one
//
// The held-back lines still go out at debug level, and every call counts in the metrics.
#ifndef TENSOROPS_SERVER_OBSERVABILITY_CALL_LOG_H_
#define TENSOROPS_SERVER_OBSERVABILITY_CALL_LOG_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tensorops {

class CallLog {
 public:
  static constexpr int kFullLinesPerWindow = 5;
  static constexpr absl::Duration kWindow = absl::Seconds(10);

  // Global is the log every call of the server writes to.
  static CallLog& Global();

  // Finished writes (or counts) the line of one finished call; `now` is the time it finished.
  void Finished(std::string_view method, std::string_view peer, absl::Duration elapsed,
                const absl::Status& status, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  // Flush writes the summaries of the lines held back so far (at shutdown, say).
  void Flush(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // What one client address did in the current window.
  struct Client {
    int logged = 0;
    int64_t held_back = 0;
    std::map<absl::StatusCode, int64_t> held_back_by_code;
  };

  void FlushLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::flat_hash_map<std::string, Client> clients_ ABSL_GUARDED_BY(mu_);
};

// ClientAddress is `peer` (gRPC's "ipv4:1.2.3.4:5678", "ipv6:[::1]:5678", "unix:/path") without
// its port.
std::string ClientAddress(std::string_view peer);

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_OBSERVABILITY_CALL_LOG_H_
