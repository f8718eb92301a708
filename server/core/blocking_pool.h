// BlockingPool runs tasks that may wait on a stored tensor's lock, off gRPC's threads and the
// scheduler's workers.
//
//   BlockingPool pool(/*threads=*/16, /*max_tasks=*/1024);
//   if (!pool.Run([call] { call->Prepare(); })) {  // may block until an update commits
//     call->End(busy);                             // max_tasks are queued or running already
//   }
//
// Why a pool of its own: preparing a call that references stored tensors takes their locks
// (stored_operands.h), and a lock may be held by a call that needs those very threads to finish:
// an in-place update waiting in the scheduler's queue for a worker, or a GetTensor stream waiting
// for a gRPC thread to send its next chunk. Waiting on a gRPC or worker thread could take the
// last one such a holder needs, and nothing would move again. Threads of this pool are needed by
// no holder, so a wait here ends when the holder finishes. Tasks run in arrival order.
#ifndef TENSOROPS_SERVER_CORE_BLOCKING_POOL_H_
#define TENSOROPS_SERVER_CORE_BLOCKING_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tensorops {

class BlockingPool {
 public:
  // A pool of `threads` (>= 1) threads that holds at most `max_tasks` (>= threads) tasks,
  // queued or running: each task is a call waiting for a lock, with its request in memory.
  BlockingPool(int threads, int64_t max_tasks);
  // Runs every task already queued, then joins the threads.
  ~BlockingPool();

  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;

  // Run queues `task`, which one of the pool's threads runs; false (and `task` dropped unrun)
  // when max_tasks are queued or running already.
  [[nodiscard]] bool Run(std::function<void()> task);
  // RunAdmitted queues `task` whatever the count: for the next step of a call the pool admitted
  // before (a download's next chunk), which must not fail halfway for want of room.
  void RunAdmitted(std::function<void()> task);
  int64_t max_tasks() const { return max_tasks_; }
  // Tasks queued or running now.
  int64_t tasks() const;

 private:
  void Work();

  const int64_t max_tasks_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_CORE_BLOCKING_POOL_H_
