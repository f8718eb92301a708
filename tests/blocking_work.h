// BlockingWork: a Scheduler::Work that occupies a worker until the test releases it, so that tests
// can fill the scheduler's queue deterministically.
#ifndef TENSOROPS_TESTS_BLOCKING_WORK_H_
#define TENSOROPS_TESTS_BLOCKING_WORK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/core/scheduler.h"
#include "tests/wait_for.h"

namespace tensorops::testing {

// BlockingWork runs until Release; it records whether it ran or why it was dropped. The
// destructor releases it, so a failing test does not leave a worker blocked forever.
class BlockingWork : public Scheduler::Work {
 public:
  explicit BlockingWork(absl::Time deadline = absl::InfiniteFuture(), int64_t bytes = 0)
      : Scheduler::Work(deadline, bytes) {}
  ~BlockingWork() override {
    Release();
    if (started_.HasBeenNotified()) ended_.WaitForNotification();
  }

  void Run() override {
    started_.Notify();
    release_.WaitForNotification();
    ended_.Notify();
  }
  void Drop(const absl::Status& why) override {
    dropped_ = why;
    ended_.Notify();
  }

  void WaitUntilStarted() { started_.WaitForNotification(); }
  void Release() {
    if (!release_.HasBeenNotified()) release_.Notify();
  }
  void WaitUntilEnded() { ended_.WaitForNotification(); }

  bool ran() const { return started_.HasBeenNotified(); }
  // dropped: the status Drop got; OK when it was not dropped.
  const absl::Status& dropped() const { return dropped_; }

 private:
  absl::Notification started_;
  absl::Notification release_;
  absl::Notification ended_;
  absl::Status dropped_;
};

}  // namespace tensorops::testing

#endif  // TENSOROPS_TESTS_BLOCKING_WORK_H_
