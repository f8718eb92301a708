#include "server/core/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "kernels/status_macros.h"
#include "oneapi/tbb/task_group.h"
#include "server/config/server_options.h"
#include "server/core/rejection.h"

namespace tensorops {

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(SchedulerOptions options) {
  TENSOROPS_RETURN_IF_ERROR(ValidateSchedulerOptions(options));
  std::unique_ptr<Scheduler> scheduler(new Scheduler(std::move(options)));
  // `automatic` is read by value: the library defines no storage for it.
  const int concurrency = scheduler->options_.threads > 0
                              ? scheduler->options_.threads
                              : static_cast<int>(oneapi::tbb::task_arena::automatic);
  scheduler->arena_ = std::make_unique<oneapi::tbb::task_arena>(concurrency);
  scheduler->workers_.reserve(scheduler->options_.queue.max_concurrent_calls);
  for (int i = 0; i < scheduler->options_.queue.max_concurrent_calls; ++i) {
    scheduler->workers_.emplace_back([s = scheduler.get()] { s->WorkerLoop(); });
  }
  return scheduler;
}

Scheduler::Scheduler(SchedulerOptions options) : options_(std::move(options)) {}

Scheduler::~Scheduler() { Stop(); }

absl::Status Scheduler::Enqueue(Work* work) {
  absl::MutexLock lock(&mu_);
  return EnqueueLocked(work);
}

absl::Status Scheduler::EnqueueLocked(Work* work) {
  if (stopping_ || (closed_ && !work->arrived_open_)) {
    return MarkRejected(
        absl::UnavailableError("the server is shutting down and takes no new calls"),
        Rejection::kShuttingDown);
  }
  // Calls that an idle worker will take at once do not count as queued.
  // (An idle worker whose slot an inline call holds takes nothing until that call ends.)
  const int64_t takers = std::min<int64_t>(
      idle_workers_, options_.queue.max_concurrent_calls - running_batches_ - inline_running_);
  const int64_t waiting_after = static_cast<int64_t>(queue_.size()) + 1 - takers;
  if (waiting_after > options_.queue.max_queued_calls) {
    return MarkRejected(
        absl::ResourceExhaustedError(absl::StrFormat(
            "the server is busy: %d calls are executing and %d are queued, the most "
            "--max_queued_calls=%d allows; retry later or with backoff",
            in_flight_, queue_.size(), options_.queue.max_queued_calls)),
        Rejection::kQueueFull);
  }
  work->enqueued_ = absl::Now();
  queue_.push_back(work);
  NotifyLoadLocked();
  return absl::OkStatus();
}

absl::Status Scheduler::Submit(Work* work) {
  {
    absl::MutexLock lock(&mu_);
    // Inline only where a worker would have taken the call at once anyway: running it here skips
    // two cross-thread wake-ups (the worker's, then gRPC's to send the reply) and changes nothing
    // else. A large call still goes to a worker, so that the gRPC thread keeps serving others.
    // A call placed on the GPU goes to a worker too: only workers drive device batches.
    const bool for_device = ForDevice(*work);
    const bool run_inline = options_.queue.inline_max_bytes > 0 && !closed_ && queue_.empty() &&
                            SlotFreeLocked() && work->bytes() <= options_.queue.inline_max_bytes &&
                            !for_device;
    if (!run_inline) return EnqueueLocked(work);
    work->enqueued_ = absl::Now();
    ++inline_running_;
    ++in_flight_;
    NotifyLoadLocked();
  }
  // As a worker does: a call already past its deadline is dropped, not run.
  const bool expired = absl::Now() > work->deadline();
  if (expired) {
    work->Drop(
        MarkRejected(absl::DeadlineExceededError("the call's deadline passed before it could run"),
                     Rejection::kDeadlineExceeded));
  } else {
    if (options_.on_batch) options_.on_batch("cpu", 1);
    arena_->execute([work] { work->Run(); });
  }
  absl::MutexLock lock(&mu_);
  --inline_running_;
  --in_flight_;
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

void Scheduler::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

void Scheduler::MarkArrived(Work* work) {
  absl::MutexLock lock(&mu_);
  work->arrived_open_ = !closed_;
}

void Scheduler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    closed_ = true;
    stopping_ = true;
    // Inline calls run on their callers' threads; they still use the arena and count as in flight,
    // so Stop waits for them as it does for the workers.
    mu_.Await(absl::Condition(
        +[](Scheduler* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) { return s->inline_running_ == 0; },
        this));
  }
  for (std::thread& worker : workers_) worker.join();
  // Every worker drains the queue before it exits, so nothing is left to drop here.
}

std::vector<Scheduler::Work*> Scheduler::TakeBatchLocked() {
  ++idle_workers_;
  // A worker takes work only into a free slot: inline calls hold slots too.
  mu_.Await(absl::Condition(
      +[](Scheduler* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
        return s->queue_.empty() ? s->stopping_ : s->SlotFreeLocked();
      },
      this));
  --idle_workers_;
  std::vector<Work*> batch;
  if (queue_.empty()) return batch;  // Stopping, and nothing left to run.
  // The slot is held from here, so that no inline call takes it while the batch fills.
  ++running_batches_;
  batch.push_back(queue_.front());
  queue_.pop_front();
  int64_t batch_bytes = batch.front()->bytes();
  const absl::Time wait_until = absl::Now() + options_.queue.max_queue_delay;
  while (static_cast<int>(batch.size()) < options_.queue.max_batch) {
    if (queue_.empty()) {
      // Wait for more only while the delay lasts; Await returns early for a call or Stop.
      if (stopping_ || options_.queue.max_queue_delay <= absl::ZeroDuration() ||
          !mu_.AwaitWithDeadline(absl::Condition(
                                     +[](Scheduler* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
                                       return !s->queue_.empty() || s->stopping_;
                                     },
                                     this),
                                 wait_until) ||
          queue_.empty()) {
        break;
      }
    }
    if (batch_bytes + queue_.front()->bytes() > options_.queue.max_batch_bytes) break;
    batch_bytes += queue_.front()->bytes();
    batch.push_back(queue_.front());
    queue_.pop_front();
  }
  return batch;
}

void Scheduler::WorkerLoop() {
  while (true) {
    std::vector<Work*> batch;
    std::vector<Work*> expired;
    {
      absl::MutexLock lock(&mu_);
      batch = TakeBatchLocked();
      if (batch.empty()) return;
      const absl::Time now = absl::Now();
      auto live_end = std::stable_partition(batch.begin(), batch.end(),
                                            [now](Work* work) { return now <= work->deadline(); });
      expired.assign(live_end, batch.end());
      batch.erase(live_end, batch.end());
      if (batch.empty()) --running_batches_;
      in_flight_ += static_cast<int64_t>(batch.size());
      NotifyLoadLocked();
    }
    // Run and Drop end the calls (their reactors may be gone afterwards), so they run outside the
    // lock and no call is touched after them.
    for (Work* work : expired) {
      work->Drop(
          MarkRejected(absl::DeadlineExceededError(
                           "the call's deadline passed while it waited in the server's queue"),
                       Rejection::kDeadlineExceeded));
    }
    if (batch.empty()) continue;
    const int64_t ran = static_cast<int64_t>(batch.size());
    RunBatch(batch);
    absl::MutexLock lock(&mu_);
    in_flight_ -= ran;
    --running_batches_;
    NotifyLoadLocked();
  }
}

void Scheduler::RunBatch(const std::vector<Work*>& batch) {
  std::vector<Work*> on_cpu;
  std::vector<Work*> on_device;
  std::vector<const DeviceCall*> calls;
  std::vector<void*> results;
  for (Work* work : batch) {
    std::optional<Work::DeviceTask> task;
    if (ForDevice(*work)) {
      task = work->PrepareDevice();
    }
    if (!task.has_value()) {
      on_cpu.push_back(work);
      continue;
    }
    on_device.push_back(work);
    calls.push_back(task->call);
    results.push_back(task->result);
  }
  if (options_.on_batch) {
    if (!on_cpu.empty()) options_.on_batch("cpu", static_cast<int64_t>(on_cpu.size()));
    if (!on_device.empty()) options_.on_batch("cuda", static_cast<int64_t>(on_device.size()));
  }
  if (on_device.empty()) {
    RunOnCpu(on_cpu);
    return;
  }
  // The CPU part runs in the arena while this thread drives the device batch (mostly waiting
  // for the GPU); calls the device failed join the CPU part afterwards.
  oneapi::tbb::task_group group;
  arena_->execute([&] {
    for (Work* work : on_cpu) group.run([work] { work->Run(); });
  });
  const std::vector<DeviceOutcome> outcomes = options_.device->RunBatch(calls, results);
  if (options_.on_device_stages && !outcomes.empty() && outcomes.front().stages.measured) {
    options_.on_device_stages(outcomes.front().stages);
  }
  std::vector<Work*> failed;
  for (size_t i = 0; i < on_device.size(); ++i) {
    if (outcomes[i].ok()) {
      on_device[i]->CompleteOnDevice();
      continue;
    }
    if (outcomes[i].resident_result_touched) {
      on_device[i]->FailOnDevice(outcomes[i].device_error.ok()
                                     ? absl::InternalError("a kernel raised its error flag")
                                     : outcomes[i].device_error);
      continue;
    }
    if (!outcomes[i].device_error.ok() && options_.on_device_fallback) {
      options_.on_device_fallback(outcomes[i].device_error);
    }
    failed.push_back(on_device[i]);
  }
  arena_->execute([&] {
    for (Work* work : failed) group.run([work] { work->Run(); });
    group.wait();
  });
}

void Scheduler::RunOnCpu(const std::vector<Work*>& calls) {
  if (calls.empty()) return;
  if (calls.size() == 1) {
    arena_->execute([&] { calls.front()->Run(); });
    return;
  }
  arena_->execute([&] {
    oneapi::tbb::task_group group;
    for (Work* work : calls) group.run([work] { work->Run(); });
    group.wait();
  });
}

bool Scheduler::ForDevice(const Work& work) const {
  if (options_.device == nullptr) return false;
  // A stored tensor in host memory stays there: the GPU would copy the whole tensor in on every
  // call, while the CPU copies only the call's arguments in CUDA regions (device memory) out.
  if (work.OperandsInHostMemory()) return false;
  if (work.OperandsOnDevice()) return true;
  return work.bytes() >= options_.gpu_min_bytes;
}

void Scheduler::NotifyLoadLocked() {
  if (options_.on_load_change) {
    options_.on_load_change(in_flight_, static_cast<int64_t>(queue_.size()));
  }
}

}  // namespace tensorops
