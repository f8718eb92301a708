#include "server/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace tensorops {

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(SchedulerOptions options) {
  if (options.max_concurrent_calls < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_concurrent_calls = %d is out of range (expected >= 1)", options.max_concurrent_calls));
  }
  if (options.max_queued_calls < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_queued_calls = %d is out of range (expected >= 0)", options.max_queued_calls));
  }
  std::unique_ptr<Scheduler> scheduler(new Scheduler(std::move(options)));
  scheduler->workers_.reserve(scheduler->options_.max_concurrent_calls);
  for (int i = 0; i < scheduler->options_.max_concurrent_calls; ++i) {
    scheduler->workers_.emplace_back([s = scheduler.get()] { s->WorkerLoop(); });
  }
  return scheduler;
}

Scheduler::Scheduler(SchedulerOptions options) : options_(std::move(options)) {}

Scheduler::~Scheduler() { Stop(); }

absl::Status Scheduler::Enqueue(Work* work) {
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    return absl::UnavailableError("the server is shutting down and takes no new calls");
  }
  // Calls that an idle worker will take at once do not count as queued.
  const int64_t waiting_after = static_cast<int64_t>(queue_.size()) + 1 - idle_workers_;
  if (waiting_after > options_.max_queued_calls) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("the server is busy: %d calls are executing and %d are queued, the most "
                        "--max_queued_calls=%d allows; retry later or with backoff",
                        in_flight_, queue_.size(), options_.max_queued_calls));
  }
  work->enqueued_ = absl::Now();
  queue_.push_back(work);
  NotifyLoadLocked();
  return absl::OkStatus();
}

bool Scheduler::Cancel(Work* work) {
  absl::MutexLock lock(&mu_);
  auto it = std::find(queue_.begin(), queue_.end(), work);
  if (it == queue_.end()) return false;
  queue_.erase(it);
  NotifyLoadLocked();
  return true;
}

int64_t Scheduler::InFlightCount() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

int64_t Scheduler::QueuedCount() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size());
}

void Scheduler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  for (std::thread& worker : workers_) worker.join();
  // Every worker drains the queue before it exits, so nothing is left to drop here.
}

void Scheduler::WorkerLoop() {
  while (true) {
    Work* work = nullptr;
    bool expired = false;
    {
      absl::MutexLock lock(&mu_);
      ++idle_workers_;
      mu_.Await(absl::Condition(
          +[](Scheduler* s)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return !s->queue_.empty() || s->stopping_; },
          this));
      --idle_workers_;
      if (queue_.empty()) return;  // Stopping, and nothing left to run.
      work = queue_.front();
      queue_.pop_front();
      expired = absl::Now() > work->deadline();
      if (!expired) ++in_flight_;
      NotifyLoadLocked();
    }
    // Run and Drop end the call (its reactor may be gone afterwards), so they run outside the
    // lock and `work` is not touched after them.
    if (expired) {
      work->Drop(absl::DeadlineExceededError(
          "the call's deadline passed while it waited in the server's queue"));
      continue;
    }
    work->Run();
    absl::MutexLock lock(&mu_);
    --in_flight_;
    NotifyLoadLocked();
  }
}

void Scheduler::NotifyLoadLocked() {
  if (options_.on_load_change) {
    options_.on_load_change(in_flight_, static_cast<int64_t>(queue_.size()));
  }
}

}  // namespace tensorops
