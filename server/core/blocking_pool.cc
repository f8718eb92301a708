#include "server/core/blocking_pool.h"

#include <utility>

namespace tensorops {

BlockingPool::BlockingPool(int threads, int64_t max_tasks) : max_tasks_(max_tasks) {
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
}

BlockingPool::~BlockingPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

bool BlockingPool::Run(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (static_cast<int64_t>(tasks_.size()) + running_ >= max_tasks_) return false;
  tasks_.push_back(std::move(task));
  return true;
}

void BlockingPool::RunAdmitted(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
}

int64_t BlockingPool::tasks() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(tasks_.size()) + running_;
}

void BlockingPool::Work() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      const auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return !tasks_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      if (tasks_.empty()) return;  // stopping, and nothing left to run
      task = std::move(tasks_.front());
      tasks_.pop_front();
      ++running_;
    }
    task();
    absl::MutexLock lock(&mu_);
    --running_;
  }
}

}  // namespace tensorops
