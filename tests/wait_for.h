// WaitFor: a bounded wait for a condition that another thread or process makes true.
#ifndef TENSOROPS_TESTS_WAIT_FOR_H_
#define TENSOROPS_TESTS_WAIT_FOR_H_

#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tensorops::testing {

// WaitFor polls `condition` until it holds (true) or `limit` passes (false). The limit only bounds
// a test that would otherwise hang; no test outcome depends on how fast the condition came true.
inline bool WaitFor(const std::function<bool()>& condition,
                    absl::Duration limit = absl::Seconds(30)) {
  const absl::Time deadline = absl::Now() + limit;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

}  // namespace tensorops::testing

#endif  // TENSOROPS_TESTS_WAIT_FOR_H_
