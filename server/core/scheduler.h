// Scheduler: admission control and the CPU executor between the gRPC handlers and the kernels.
//
//   absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
//       Scheduler::Create({.queue = {.max_concurrent_calls = 4, .max_queued_calls = 64}});
//   absl::Status admitted = (*scheduler)->Enqueue(call);  // RESOURCE_EXHAUSTED when full
//   ...
//   if ((*scheduler)->Cancel(call)) call->Drop(absl::CancelledError("..."));  // from OnCancel
//
// Admitted calls wait in one FIFO queue. Each of `max_concurrent_calls` worker threads takes a
// batch from its front: up to `max_batch` calls and `max_batch_bytes` of requests, waiting up to
// `max_queue_delay` after the first call for more to arrive (0: take only what is already
// queued). The batch's calls run side by side as oneTBB tasks in the executor's arena, and each
// kernel parallelizes further inside it, so small calls share the cores while a large one still
// uses them all. A call whose deadline has passed by the time a worker takes it is dropped, not
// run. The queue bounds how much request memory waits on the server: results are allocated only
// when a call runs.
//
// A small call may also run inline (Submit): when a worker slot is free and nothing is queued, a
// call of at most `inline_max_bytes` of request runs on the calling (gRPC) thread, as a raw gRPC
// handler would, instead of waking a worker and then waking gRPC again to send the reply. It
// counts as in flight and occupies a worker slot while it runs, so admission and the bound on
// calls executing at once are unchanged.
//
// Tuning: under light load batches are of one call and the delay is the only cost, so keep
// max_queue_delay at 0 on the CPU; batching pays where a batch shares one launch or one copy (the
// CUDA executor), and there a delay of a few hundred microseconds buys larger batches.
//
// Placement (DESIGN.md, "Devices and placement"): with a GPU executor, a batch's calls that have
// a GPU form and a request of at least `gpu_min_bytes` run there as one device batch, while the
// rest of the batch runs in the arena; a call the device fails re-runs on the CPU.
#ifndef TENSOROPS_SERVER_CORE_SCHEDULER_H_
#define TENSOROPS_SERVER_CORE_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/cuda/executor.h"
#include "kernels/device_call.h"
#include "oneapi/tbb/task_arena.h"

namespace tensorops {

// QueueOptions: how admitted calls wait and how workers take them. Declared once for both users:
// SchedulerOptions::queue, with the defaults below, and ServerOptions::queue, which the server's
// flags of the same names set and which has the server's defaults. ValidateSchedulerOptions and
// ValidateServerOptions (server/config/server_options.h) hold the ranges.
struct QueueOptions {
  // Worker threads, i.e. batches executing at once: >= 1. A Server also takes 0, one worker per
  // CPU thread the kernels may use, and resolves it before creating its Scheduler.
  int max_concurrent_calls = 1;
  // Calls admitted but not yet executing: >= 0 (0 admits a call only when a worker is idle).
  int max_queued_calls = 1024;
  // Most calls in one batch: >= 1.
  int max_batch = 1;
  // Most request bytes in one batch: >= 1. A call larger than this forms a batch of its own.
  int64_t max_batch_bytes = int64_t{64} << 20;
  // How long a worker holding fewer than max_batch calls waits for more: >= 0.
  absl::Duration max_queue_delay = absl::ZeroDuration();
  // Largest request (Work::bytes) that Submit may run inline on the calling thread: >= 0;
  // 0 = never inline, every call goes through the queue.
  int64_t inline_max_bytes = 0;
};

// SchedulerOptions size the executor and its queue. Create rejects values out of range
// (ValidateSchedulerOptions).
struct SchedulerOptions {
  QueueOptions queue;
  // Threads of the oneTBB arena the batches run in: >= 0; 0 = oneTBB's default (every core, or
  // the process's global_control limit).
  int threads = 0;
  // Called with (in_flight, queued) whenever either changes, under the scheduler's lock: it must
  // be cheap and must not call back into the scheduler. May be empty.
  std::function<void(int64_t in_flight, int64_t queued)> on_load_change;
  // Called for each batch a worker runs, once per device it runs on ("cpu", "cuda") with the
  // number of its calls there, outside the lock. May be empty.
  std::function<void(std::string_view device, int64_t batch_size)> on_batch;

  // The GPU executor, or null to run every call on the CPU. Not owned; must outlive the
  // scheduler.
  DeviceExecutor* device = nullptr;
  // With a device: calls whose request is smaller run on the CPU, where they cost less than a
  // round trip over PCIe: >= 0.
  int64_t gpu_min_bytes = int64_t{1} << 20;
  // Called for each call the device failed and the CPU re-ran, with the device's error, outside
  // the lock. May be empty.
  std::function<void(const absl::Status& device_error)> on_device_fallback;
  // Called for each device batch the executor timed (DeviceStageTimes::measured), with its stage
  // times, outside the lock. May be empty.
  std::function<void(const DeviceStageTimes& stages)> on_device_stages;
};

// Scheduler owns the worker threads. Thread-safe. Not copyable. The destructor stops it (Stop).
class Scheduler {
 public:
  // Work is one admitted call. The scheduler does not own it: whoever takes a Work out of the
  // queue (a worker, Cancel's caller, Stop) must end it with exactly one Run or Drop, and the
  // object must stay alive until then.
  class Work {
   public:
    // `bytes` is what the call counts against max_batch_bytes: its request's size.
    explicit Work(absl::Time deadline, int64_t bytes = 0) : deadline_(deadline), bytes_(bytes) {}
    virtual ~Work() = default;

    // deadline: a worker that takes the call later than this drops it with DEADLINE_EXCEEDED.
    absl::Time deadline() const { return deadline_; }
    // enqueued: when Enqueue admitted the call (for the queue-time metric).
    absl::Time enqueued() const { return enqueued_; }
    int64_t bytes() const { return bytes_; }

    // Run executes the call on a worker thread.
    virtual void Run() = 0;
    // Drop ends a call that will not run; `why` is DEADLINE_EXCEEDED, CANCELLED (from Cancel's
    // caller) or UNAVAILABLE (Stop).
    virtual void Drop(const absl::Status& why) = 0;

    // DeviceTask is a call readied for the GPU: its GPU form and the host buffer of its result.
    struct DeviceTask {
      const DeviceCall* call = nullptr;
      void* result = nullptr;
    };
    // PrepareDevice readies the call for the GPU executor (allocating its result), or returns
    // nullopt when it runs on the CPU: no GPU form, or an error that Run will report. The Work
    // keeps the DeviceCall alive until it ends. Called on a worker, at most once.
    virtual std::optional<DeviceTask> PrepareDevice() { return std::nullopt; }
    // CompleteOnDevice ends a call the executor ran successfully: its result is in place. (A call
    // the device failed ends with Run instead.)
    virtual void CompleteOnDevice() {}
    // FailOnDevice ends a call the device failed after it may have written part of its resident
    // result (DeviceOutcome::resident_result_touched), which a CPU run must not update again;
    // `why` is the device's error. By default the call runs on the CPU after all (Run).
    virtual void FailOnDevice(const absl::Status& /*why*/) { Run(); }
    // OperandsOnDevice: the call reads tensors kept in device memory (stored, or in a client's
    // CUDA region), so it goes to the GPU whatever its size (gpu_min_bytes is for calls whose
    // bytes would cross PCIe), unless OperandsInHostMemory. Valid once the call is enqueued.
    virtual bool OperandsOnDevice() const { return false; }
    // OperandsInHostMemory: the call reads or updates tensors kept in host memory, so it runs on
    // the CPU whatever its size and the device (the GPU would copy each of them in every time;
    // the CPU copies the call's arguments in CUDA regions out instead). Valid once the call is
    // enqueued.
    virtual bool OperandsInHostMemory() const { return false; }

   private:
    friend class Scheduler;
    const absl::Time deadline_;
    const int64_t bytes_;
    absl::Time enqueued_;
    // Set by MarkArrived: the call arrived before Close.
    bool arrived_open_ = false;
  };

  // Create starts the worker threads. INVALID_ARGUMENT for options out of range, naming the server
  // flag that sets each (ValidateSchedulerOptions).
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(SchedulerOptions options);

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  ~Scheduler();

  // Enqueue admits `work` (not null) to run on a worker. RESOURCE_EXHAUSTED naming
  // --max_queued_calls when the queue is full, UNAVAILABLE after Stop; either way `work` was not
  // taken and the caller still ends it.
  absl::Status Enqueue(Work* work);

  // Submit is Enqueue, except that a call of at most inline_max_bytes that finds a worker slot
  // free and the queue empty runs (or, past its deadline, is dropped) on the calling thread before
  // Submit returns OK. Either way `work` may have ended, and be gone, by the time Submit returns.
  // The caller must hold no lock that Run or Drop takes.
  absl::Status Submit(Work* work);

  // Cancel takes `work` out of the queue if it is still waiting there and returns true: the
  // caller must then Drop it. False when a worker has taken it (it will run to its end) or it was
  // never queued.
  bool Cancel(Work* work);

  // InFlightCount is the number of calls executing now; QueuedCount the number waiting.
  int64_t InFlightCount() const;
  int64_t QueuedCount() const;

  // Close refuses new work (UNAVAILABLE) from now on; what is queued or running goes on, and so
  // does work marked as arrived before it (MarkArrived). Idempotent.
  void Close();

  // MarkArrived notes that `work`, not yet submitted, arrived now: if the scheduler is open, a
  // Close before its Submit does not refuse it (a call received before a shutdown began, which
  // waited for a stored tensor, is admitted within the grace); Stop still does.
  void MarkArrived(Work* work);

  // Stop refuses new work, lets the workers finish what is queued and joins them. Idempotent.
  void Stop();

  const SchedulerOptions& options() const { return options_; }

 private:
  explicit Scheduler(SchedulerOptions options);

  void WorkerLoop();
  absl::Status EnqueueLocked(Work* work) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // TakeBatchLocked waits for calls and takes a batch from the queue's front; empty once stopping
  // with nothing left.
  std::vector<Work*> TakeBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RunBatch places the calls and runs them: the GPU part as one device batch on this thread,
  // the CPU part side by side in the arena meanwhile.
  void RunBatch(const std::vector<Work*>& batch);
  void RunOnCpu(const std::vector<Work*>& calls);
  void NotifyLoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ForDevice: the call is placed on the GPU (a device, and a call large enough or reading
  // device memory).
  bool ForDevice(const Work& work) const;
  // SlotFreeLocked: fewer than max_concurrent_calls batches (inline calls included) executing.
  bool SlotFreeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return running_batches_ + inline_running_ < options_.queue.max_concurrent_calls;
  }

  const SchedulerOptions options_;
  // The CPU executor: batches run as tasks in this arena.
  std::unique_ptr<oneapi::tbb::task_arena> arena_;
  std::vector<std::thread> workers_;

  mutable absl::Mutex mu_;
  std::deque<Work*> queue_ ABSL_GUARDED_BY(mu_);
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Workers waiting for work; with max_queued_calls == 0 a call is admitted only when one is.
  int64_t idle_workers_ ABSL_GUARDED_BY(mu_) = 0;
  // Batches that workers have taken and not finished, and calls running inline (Submit): each
  // holds one of the max_concurrent_calls slots.
  int64_t running_batches_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t inline_running_ ABSL_GUARDED_BY(mu_) = 0;
  // Close or Stop was called: new work is refused.
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_CORE_SCHEDULER_H_
