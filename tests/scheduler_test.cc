// Tests of admission control: the Scheduler on its own with real worker threads, and through the
// service (a full queue, a deadline that passes while queued, a client that cancels while queued).
#include "server/core/scheduler.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/blocking_work.h"
#include "tests/service_test_util.h"

namespace tensorops {
namespace {

using ::tensorops::testing::BlockingWork;
using ::tensorops::testing::Connect;
using ::tensorops::testing::MakeTensor;
using ::tensorops::testing::StartServer;
using ::tensorops::testing::Values;
using ::tensorops::testing::WaitFor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<Scheduler> MakeScheduler(SchedulerOptions options) {
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler = Scheduler::Create(std::move(options));
  EXPECT_TRUE(scheduler.ok()) << scheduler.status();
  return scheduler.ok() ? std::move(*scheduler) : nullptr;
}

TEST(SchedulerTest, RunsAtMostMaxConcurrentCallsAtOnce) {
  std::unique_ptr<Scheduler> scheduler =
      MakeScheduler({.queue = {.max_concurrent_calls = 2, .max_queued_calls = 10}});
  ASSERT_NE(scheduler, nullptr);
  BlockingWork first, second, third;
  ASSERT_TRUE(scheduler->Enqueue(&first).ok());
  ASSERT_TRUE(scheduler->Enqueue(&second).ok());
  ASSERT_TRUE(scheduler->Enqueue(&third).ok());
  first.WaitUntilStarted();
  second.WaitUntilStarted();
  EXPECT_EQ(scheduler->InFlightCount(), 2);
  EXPECT_EQ(scheduler->QueuedCount(), 1);
  EXPECT_FALSE(third.ran());

  first.Release();
  third.WaitUntilStarted();  // The freed worker takes the queued call.
  second.Release();
  third.Release();
  third.WaitUntilEnded();
  EXPECT_TRUE(WaitFor([&] { return scheduler->InFlightCount() == 0; }));
}

TEST(SchedulerTest, FullQueueIsResourceExhaustedNamingTheFlag) {
  std::unique_ptr<Scheduler> scheduler =
      MakeScheduler({.queue = {.max_concurrent_calls = 1, .max_queued_calls = 1}});
  ASSERT_NE(scheduler, nullptr);
  BlockingWork running, queued, refused;
  ASSERT_TRUE(scheduler->Enqueue(&running).ok());
  running.WaitUntilStarted();
  ASSERT_TRUE(scheduler->Enqueue(&queued).ok());
  const absl::Status status = scheduler->Enqueue(&refused);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("--max_queued_calls=1"));
  EXPECT_THAT(status.message(), HasSubstr("1 calls are executing and 1 are queued"));
  running.Release();
  queued.Release();
  queued.WaitUntilEnded();
  EXPECT_FALSE(refused.ran());
}

TEST(SchedulerTest, ZeroQueueAdmitsOnlyWhenAWorkerIsIdle) {
  std::unique_ptr<Scheduler> scheduler =
      MakeScheduler({.queue = {.max_concurrent_calls = 1, .max_queued_calls = 0}});
  ASSERT_NE(scheduler, nullptr);
  // A call is admitted once the worker waits for work (the worker thread may still be starting,
  // or looping back from its last call); a refused Enqueue does not take the call.
  BlockingWork running, refused;
  ASSERT_TRUE(WaitFor([&] { return scheduler->Enqueue(&running).ok(); }));
  running.WaitUntilStarted();
  EXPECT_EQ(scheduler->Enqueue(&refused).code(), absl::StatusCode::kResourceExhausted);
  running.Release();
}

TEST(SchedulerTest, CallWhoseDeadlinePassedInTheQueueIsDroppedNotRun) {
  std::unique_ptr<Scheduler> scheduler =
      MakeScheduler({.queue = {.max_concurrent_calls = 1, .max_queued_calls = 4}});
  ASSERT_NE(scheduler, nullptr);
  BlockingWork running;
  BlockingWork expiring(absl::Now() + absl::Milliseconds(1));
  ASSERT_TRUE(scheduler->Enqueue(&running).ok());
  running.WaitUntilStarted();
  ASSERT_TRUE(scheduler->Enqueue(&expiring).ok());
  // Released only once the deadline has certainly passed.
  ASSERT_TRUE(WaitFor([&] { return absl::Now() > expiring.deadline(); }));
  running.Release();
  expiring.WaitUntilEnded();
  EXPECT_FALSE(expiring.ran());
  EXPECT_EQ(expiring.dropped().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(SchedulerTest, CancelTakesOnlyQueuedWork) {
  std::unique_ptr<Scheduler> scheduler =
      MakeScheduler({.queue = {.max_concurrent_calls = 1, .max_queued_calls = 4}});
  ASSERT_NE(scheduler, nullptr);
  BlockingWork running, queued;
  ASSERT_TRUE(scheduler->Enqueue(&running).ok());
  running.WaitUntilStarted();
  ASSERT_TRUE(scheduler->Enqueue(&queued).ok());
  EXPECT_FALSE(scheduler->Cancel(&running));
  EXPECT_TRUE(scheduler->Cancel(&queued));
  EXPECT_FALSE(scheduler->Cancel(&queued));
  EXPECT_EQ(scheduler->QueuedCount(), 0);
  running.Release();
  running.WaitUntilEnded();
  EXPECT_FALSE(queued.ran());
}

TEST(SchedulerTest, StopRunsWhatIsQueuedThenRefuses) {
  std::unique_ptr<Scheduler> scheduler =
      MakeScheduler({.queue = {.max_concurrent_calls = 1, .max_queued_calls = 4}});
  ASSERT_NE(scheduler, nullptr);
  BlockingWork running, queued;
  queued.Release();
  ASSERT_TRUE(scheduler->Enqueue(&running).ok());
  running.WaitUntilStarted();
  ASSERT_TRUE(scheduler->Enqueue(&queued).ok());
  std::future<void> stopped = std::async(std::launch::async, [&] { scheduler->Stop(); });
  running.Release();
  stopped.get();
  EXPECT_TRUE(queued.ran());
  BlockingWork late;
  EXPECT_EQ(scheduler->Enqueue(&late).code(), absl::StatusCode::kUnavailable);
}

// Close (shutdown's first step) refuses new calls, queued or inline, while the workers go on with
// what was queued.
TEST(SchedulerTest, CloseRefusesNewCallsAndKeepsRunningQueuedOnes) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(
      {.queue = {.max_concurrent_calls = 1, .max_queued_calls = 4, .inline_max_bytes = 1024}});
  ASSERT_NE(scheduler, nullptr);
  BlockingWork running, queued;
  queued.Release();
  ASSERT_TRUE(scheduler->Enqueue(&running).ok());
  running.WaitUntilStarted();
  ASSERT_TRUE(scheduler->Enqueue(&queued).ok());
  scheduler->Close();
  BlockingWork late;
  const absl::Status refused = scheduler->Enqueue(&late);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.message(), HasSubstr("takes no new calls"));
  running.Release();
  queued.WaitUntilEnded();
  EXPECT_TRUE(queued.ran());
  // With every worker idle again, a small call would run inline; it is refused too.
  BlockingWork small(absl::InfiniteFuture(), 10);
  small.Release();
  EXPECT_EQ(scheduler->Submit(&small).code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(small.ran());
  EXPECT_FALSE(late.ran());
}

TEST(SchedulerTest, ReportsLoadChanges) {
  absl::Mutex mu;
  std::vector<std::pair<int64_t, int64_t>> loads;
  std::unique_ptr<Scheduler> scheduler =
      MakeScheduler({.queue = {.max_concurrent_calls = 1, .max_queued_calls = 4},
                     .on_load_change = [&](int64_t in_flight, int64_t queued) {
                       absl::MutexLock lock(&mu);
                       loads.emplace_back(in_flight, queued);
                     }});
  ASSERT_NE(scheduler, nullptr);
  BlockingWork work;
  work.Release();
  ASSERT_TRUE(scheduler->Enqueue(&work).ok());
  work.WaitUntilEnded();
  ASSERT_TRUE(WaitFor([&] {
    absl::MutexLock lock(&mu);
    return loads.size() == 3;
  }));
  absl::MutexLock lock(&mu);
  // Queued, taken by the worker, finished.
  EXPECT_THAT(loads,
              ElementsAre(std::pair<int64_t, int64_t>{0, 1}, std::pair<int64_t, int64_t>{1, 0},
                          std::pair<int64_t, int64_t>{0, 0}));
}

// --- Batching -----------------------------------------------------------------------------------

// BatchSizes records the sizes of the batches a scheduler's workers take.
class BatchSizes {
 public:
  std::function<void(std::string_view, int64_t)> Recorder() {
    return [this](std::string_view, int64_t size) {
      absl::MutexLock lock(&mu_);
      sizes_.push_back(size);
    };
  }
  std::vector<int64_t> Get() {
    absl::MutexLock lock(&mu_);
    return sizes_;
  }

 private:
  absl::Mutex mu_;
  std::vector<int64_t> sizes_ ABSL_GUARDED_BY(mu_);
};

// RunQueuedBehindABlocker occupies the only worker, queues `works` behind it, then lets the worker
// go and waits until every one of them has ended.
void RunQueuedBehindABlocker(Scheduler& scheduler,
                             std::vector<std::unique_ptr<BlockingWork>>& works) {
  BlockingWork blocker;
  ASSERT_TRUE(scheduler.Enqueue(&blocker).ok());
  blocker.WaitUntilStarted();
  for (auto& work : works) {
    work->Release();
    ASSERT_TRUE(scheduler.Enqueue(work.get()).ok());
  }
  blocker.Release();
  for (auto& work : works) work->WaitUntilEnded();
}

std::vector<std::unique_ptr<BlockingWork>> Works(int count, int64_t bytes) {
  std::vector<std::unique_ptr<BlockingWork>> works;
  for (int i = 0; i < count; ++i) {
    works.push_back(std::make_unique<BlockingWork>(absl::InfiniteFuture(), bytes));
  }
  return works;
}

// --- Inline runs (Submit) -----------------------------------------------------------------------

// ThreadWork records the thread it ran on and the scheduler's in-flight count while it ran.
class ThreadWork : public Scheduler::Work {
 public:
  ThreadWork(Scheduler* scheduler, int64_t bytes)
      : Scheduler::Work(absl::InfiniteFuture(), bytes), scheduler_(scheduler) {}

  void Run() override {
    thread_ = std::this_thread::get_id();
    in_flight_while_running_ = scheduler_->InFlightCount();
    ended_.Notify();
  }
  void Drop(const absl::Status& why) override {
    dropped_ = why;
    ended_.Notify();
  }

  bool ended() const { return ended_.HasBeenNotified(); }
  void WaitUntilEnded() { ended_.WaitForNotification(); }
  std::thread::id thread() const { return thread_; }
  int64_t in_flight_while_running() const { return in_flight_while_running_; }
  const absl::Status& dropped() const { return dropped_; }

 private:
  Scheduler* const scheduler_;
  absl::Notification ended_;
  std::thread::id thread_;
  int64_t in_flight_while_running_ = -1;
  absl::Status dropped_;
};

TEST(SchedulerInlineTest, SmallCallRunsOnTheCallingThreadAndCountsAsInFlight) {
  BatchSizes sizes;
  std::unique_ptr<Scheduler> scheduler =
      MakeScheduler({.queue = {.max_concurrent_calls = 1, .inline_max_bytes = 1024},
                     .on_batch = sizes.Recorder()});
  ASSERT_NE(scheduler, nullptr);
  ThreadWork work(scheduler.get(), 1024);
  ASSERT_TRUE(scheduler->Submit(&work).ok());
  // Ended before Submit returned, here, while counted as executing.
  EXPECT_TRUE(work.ended());
  EXPECT_EQ(work.thread(), std::this_thread::get_id());
  EXPECT_EQ(work.in_flight_while_running(), 1);
  EXPECT_EQ(scheduler->InFlightCount(), 0);
  EXPECT_THAT(sizes.Get(), ElementsAre(1)) << "an inline call is a batch of one";
}

TEST(SchedulerInlineTest, LargeCallOrZeroInlineMaxBytesGoesToAWorker) {
  struct Case {
    int64_t inline_max_bytes;
    int64_t bytes;
  };
  for (const Case c :
       {Case{.inline_max_bytes = 1024, .bytes = 1025}, Case{.inline_max_bytes = 0, .bytes = 0}}) {
    SCOPED_TRACE(absl::StrCat(c.bytes, " bytes, inline_max_bytes ", c.inline_max_bytes));
    std::unique_ptr<Scheduler> scheduler = MakeScheduler(
        {.queue = {.max_concurrent_calls = 1, .inline_max_bytes = c.inline_max_bytes}});
    ASSERT_NE(scheduler, nullptr);
    ThreadWork work(scheduler.get(), c.bytes);
    ASSERT_TRUE(scheduler->Submit(&work).ok());
    work.WaitUntilEnded();
    EXPECT_NE(work.thread(), std::this_thread::get_id());
  }
}

TEST(SchedulerInlineTest, CallFindingEveryWorkerBusyIsQueued) {
  std::unique_ptr<Scheduler> scheduler =
      MakeScheduler({.queue = {.max_concurrent_calls = 1, .inline_max_bytes = 1024}});
  ASSERT_NE(scheduler, nullptr);
  BlockingWork running;
  ASSERT_TRUE(scheduler->Enqueue(&running).ok());
  running.WaitUntilStarted();
  ThreadWork work(scheduler.get(), 10);
  ASSERT_TRUE(scheduler->Submit(&work).ok());
  EXPECT_FALSE(work.ended());
  EXPECT_EQ(scheduler->QueuedCount(), 1);
  running.Release();
  work.WaitUntilEnded();
  EXPECT_NE(work.thread(), std::this_thread::get_id());
}

TEST(SchedulerInlineTest, InlineCallHoldsAWorkerSlot) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(
      {.queue = {.max_concurrent_calls = 1, .max_queued_calls = 0, .inline_max_bytes = 1024}});
  ASSERT_NE(scheduler, nullptr);
  BlockingWork inline_call(absl::InfiniteFuture(), 10);
  std::future<absl::Status> submitted =
      std::async(std::launch::async, [&] { return scheduler->Submit(&inline_call); });
  inline_call.WaitUntilStarted();
  EXPECT_EQ(scheduler->InFlightCount(), 1);
  // The worker may be idle, but its slot is the inline call's: with no queue, nothing else is
  // admitted, neither through the queue nor inline.
  BlockingWork refused, refused_inline(absl::InfiniteFuture(), 10);
  EXPECT_EQ(scheduler->Enqueue(&refused).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(scheduler->Submit(&refused_inline).code(), absl::StatusCode::kResourceExhausted);
  inline_call.Release();
  EXPECT_TRUE(submitted.get().ok());
  EXPECT_EQ(scheduler->InFlightCount(), 0);
  EXPECT_FALSE(refused.ran());
  EXPECT_FALSE(refused_inline.ran());
}

TEST(SchedulerInlineTest, QueuedCallWaitsForTheInlineCallsSlot) {
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(
      {.queue = {.max_concurrent_calls = 1, .max_queued_calls = 1, .inline_max_bytes = 1024}});
  ASSERT_NE(scheduler, nullptr);
  BlockingWork inline_call(absl::InfiniteFuture(), 10);
  std::future<absl::Status> submitted =
      std::async(std::launch::async, [&] { return scheduler->Submit(&inline_call); });
  inline_call.WaitUntilStarted();
  BlockingWork queued;
  queued.Release();
  ASSERT_TRUE(scheduler->Enqueue(&queued).ok());
  // The idle worker must not take it while the inline call holds the only slot. (A wrong
  // scheduler would start it within microseconds; this gives it ample chance to.)
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(queued.ran());
  EXPECT_EQ(scheduler->QueuedCount(), 1);
  inline_call.Release();
  EXPECT_TRUE(submitted.get().ok());
  queued.WaitUntilEnded();
  EXPECT_TRUE(queued.ran());
}

TEST(SchedulerInlineTest, SubmitAfterStopIsUnavailable) {
  std::unique_ptr<Scheduler> scheduler =
      MakeScheduler({.queue = {.max_concurrent_calls = 1, .inline_max_bytes = 1024}});
  ASSERT_NE(scheduler, nullptr);
  scheduler->Stop();
  ThreadWork work(scheduler.get(), 10);
  EXPECT_EQ(scheduler->Submit(&work).code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(work.ended());
}

TEST(SchedulerBatchTest, BatchClosesAtMaxBatch) {
  BatchSizes sizes;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(
      {.queue = {.max_concurrent_calls = 1, .max_batch = 3}, .on_batch = sizes.Recorder()});
  ASSERT_NE(scheduler, nullptr);
  std::vector<std::unique_ptr<BlockingWork>> works = Works(5, 10);
  RunQueuedBehindABlocker(*scheduler, works);
  EXPECT_THAT(sizes.Get(), ElementsAre(1, 3, 2));
}

TEST(SchedulerBatchTest, BatchClosesAtMaxBatchBytesAndALargerCallRunsAlone) {
  BatchSizes sizes;
  std::unique_ptr<Scheduler> scheduler =
      MakeScheduler({.queue = {.max_concurrent_calls = 1, .max_batch = 10, .max_batch_bytes = 100},
                     .on_batch = sizes.Recorder()});
  ASSERT_NE(scheduler, nullptr);
  // 40 + 40 fit in 100 bytes, a third does not; the 500-byte call exceeds the limit alone.
  std::vector<std::unique_ptr<BlockingWork>> works = Works(3, 40);
  works.push_back(std::make_unique<BlockingWork>(absl::InfiniteFuture(), 500));
  works.push_back(std::make_unique<BlockingWork>(absl::InfiniteFuture(), 40));
  RunQueuedBehindABlocker(*scheduler, works);
  EXPECT_THAT(sizes.Get(), ElementsAre(1, 2, 1, 1, 1));
}

TEST(SchedulerBatchTest, QueueDelayLetsLaterCallsJoinTheBatch) {
  BatchSizes sizes;
  // A delay far longer than the test: the batch closes because it is full, not because the delay
  // ran out.
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(
      {.queue = {.max_concurrent_calls = 1, .max_batch = 2, .max_queue_delay = absl::Seconds(60)},
       .on_batch = sizes.Recorder()});
  ASSERT_NE(scheduler, nullptr);
  BlockingWork first, second;
  first.Release();
  second.Release();
  ASSERT_TRUE(scheduler->Enqueue(&first).ok());
  ASSERT_TRUE(scheduler->Enqueue(&second).ok());
  first.WaitUntilEnded();
  second.WaitUntilEnded();
  EXPECT_THAT(sizes.Get(), ElementsAre(2));
}

TEST(SchedulerBatchTest, QueueDelayEndsAPartialBatch) {
  BatchSizes sizes;
  std::unique_ptr<Scheduler> scheduler =
      MakeScheduler({.queue = {.max_concurrent_calls = 1,
                               .max_batch = 4,
                               .max_queue_delay = absl::Milliseconds(1)},
                     .on_batch = sizes.Recorder()});
  ASSERT_NE(scheduler, nullptr);
  BlockingWork alone;
  alone.Release();
  ASSERT_TRUE(scheduler->Enqueue(&alone).ok());
  alone.WaitUntilEnded();  // Would hang if a partial batch waited for max_batch calls.
  EXPECT_THAT(sizes.Get(), ElementsAre(1));
}

TEST(SchedulerBatchTest, ABatchsCallsRunSideBySide) {
  std::unique_ptr<Scheduler> scheduler =
      MakeScheduler({.queue = {.max_concurrent_calls = 1, .max_batch = 2}, .threads = 2});
  ASSERT_NE(scheduler, nullptr);
  BlockingWork blocker, first, second;
  ASSERT_TRUE(scheduler->Enqueue(&blocker).ok());
  blocker.WaitUntilStarted();
  ASSERT_TRUE(scheduler->Enqueue(&first).ok());
  ASSERT_TRUE(scheduler->Enqueue(&second).ok());
  blocker.Release();
  // Both run before either is released: one worker, one batch, two tasks at once.
  first.WaitUntilStarted();
  second.WaitUntilStarted();
  EXPECT_EQ(scheduler->InFlightCount(), 2);
  first.Release();
  second.Release();
}

TEST(SchedulerTest, CreateRejectsOptionsOutOfRange) {
  EXPECT_EQ(Scheduler::Create({.queue = {.max_concurrent_calls = 0}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Scheduler::Create({.queue = {.max_concurrent_calls = 1, .max_queued_calls = -1}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      Scheduler::Create({.queue = {.max_concurrent_calls = 1, .max_batch = 0}}).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Scheduler::Create({.queue = {.max_concurrent_calls = 1, .max_batch_bytes = 0}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Scheduler::Create(
                {.queue = {.max_concurrent_calls = 1, .max_queue_delay = absl::Seconds(-1)}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Scheduler::Create({.queue = {.max_concurrent_calls = 1, .inline_max_bytes = -1}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// --- Through the service ------------------------------------------------------------------------

v1::GatherRequest SmallGather() {
  v1::GatherRequest request;
  *request.mutable_input() = MakeTensor<int64_t>({2, 2}, {1, 2, 3, 4});
  *request.mutable_index() = MakeTensor<int64_t>({2, 2}, {0, 0, 1, 0});
  request.set_axis(1);
  return request;
}

// AsyncGather is one Gather call in flight on the stub's callback API.
struct AsyncGather {
  grpc::ClientContext context;
  v1::GatherResponse response;
  std::promise<grpc::Status> done;

  void Start(v1::TensorOps::Stub& stub, const v1::GatherRequest& request) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    stub.async()->Gather(&context, &request, &response,
                         [this](grpc::Status status) { done.set_value(std::move(status)); });
  }
};

class AdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.queue.max_concurrent_calls = 1;
    options.queue.max_queued_calls = 1;
    server_ = StartServer(options);
    ASSERT_NE(server_, nullptr);
    stub_ = Connect(server_->port());
    // Occupy the only worker, so that calls stay in the queue until the test releases it.
    ASSERT_TRUE(server_->scheduler().Enqueue(&blocker_).ok());
    blocker_.WaitUntilStarted();
  }

  Scheduler& scheduler() { return server_->scheduler(); }

  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::TensorOps::Stub> stub_;
  BlockingWork blocker_;
  const v1::GatherRequest request_ = SmallGather();
};

TEST_F(AdmissionTest, CallBeyondTheQueueIsRefusedAndQueuedOneCompletes) {
  AsyncGather queued;
  queued.Start(*stub_, request_);
  ASSERT_TRUE(WaitFor([&] { return scheduler().QueuedCount() == 1; }));

  grpc::ClientContext context;
  v1::GatherResponse response;
  const grpc::Status refused = stub_->Gather(&context, request_, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("--max_queued_calls=1"));

  blocker_.Release();
  const grpc::Status status = queued.done.get_future().get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(Values<int64_t>(queued.response.result()), ElementsAre(1, 1, 4, 3));
  for (const std::string line : {"tensorops_rejected_total{reason=\"queue_full\"} 1\n",
                                 "tensorops_requests_total{code=\"RESOURCE_EXHAUSTED\",device="
                                 "\"none\",op=\"gather\"} 1\n"}) {
    EXPECT_TRUE(WaitFor([&] { return absl::StrContains(server_->metrics().Scrape(), line); }))
        << "no " << line;
  }
}

TEST_F(AdmissionTest, DeadlineThatPassesInTheQueueIsNotExecuted) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  v1::GatherResponse response;
  EXPECT_EQ(stub_->Gather(&context, request_, &response).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  // The server takes the expired call out of the queue by itself, while the worker is still busy:
  // it never runs, and its request is freed now rather than when a worker gets to it.
  EXPECT_TRUE(WaitFor([&] { return scheduler().QueuedCount() == 0; }));
  EXPECT_EQ(scheduler().InFlightCount(), 1);
}

TEST_F(AdmissionTest, CancelledCallLeavesTheQueue) {
  AsyncGather cancelled;
  cancelled.Start(*stub_, request_);
  ASSERT_TRUE(WaitFor([&] { return scheduler().QueuedCount() == 1; }));
  cancelled.context.TryCancel();
  EXPECT_EQ(cancelled.done.get_future().get().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitFor([&] { return scheduler().QueuedCount() == 0; }));
  EXPECT_EQ(scheduler().InFlightCount(), 1);
  EXPECT_TRUE(WaitFor([&] {
    return absl::StrContains(server_->metrics().Scrape(),
                             "tensorops_rejected_total{reason=\"cancelled\"} 1\n");
  }));

  // The queue has room again.
  AsyncGather next;
  next.Start(*stub_, request_);
  ASSERT_TRUE(WaitFor([&] { return scheduler().QueuedCount() == 1; }));
  blocker_.Release();
  EXPECT_TRUE(next.done.get_future().get().ok());
}

TEST(BatchingServiceTest, SixtyFourConcurrentClientsAllGetTheirOwnResults) {
  ServerOptions options;
  options.queue.max_concurrent_calls = 2;
  options.queue.max_batch = 8;
  options.queue.max_queue_delay = absl::Milliseconds(1);
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  constexpr int kClients = 64;
  constexpr int kCallsEach = 10;
  std::atomic<int> wrong{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      std::unique_ptr<v1::TensorOps::Stub> stub = Connect(server->port());
      for (int i = 0; i < kCallsEach; ++i) {
        // Each call gathers its own values, so a result sent to the wrong call shows.
        const int64_t base = (c * kCallsEach + i) * 10;
        v1::GatherRequest request;
        *request.mutable_input() = MakeTensor<int64_t>({3}, {base, base + 1, base + 2});
        *request.mutable_index() = MakeTensor<int64_t>({2}, {2, 0});
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
        v1::GatherResponse response;
        const grpc::Status status = stub->Gather(&context, request, &response);
        if (!status.ok() ||
            Values<int64_t>(response.result()) != std::vector<int64_t>{base + 2, base}) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_TRUE(WaitFor([&] {
    return absl::StrContains(
        server->metrics().Scrape(),
        absl::StrCat("tensorops_batch_size_sum{device=\"cpu\"} ", kClients * kCallsEach, "\n"));
  })) << "every call is counted in exactly one batch";
}

}  // namespace
}  // namespace tensorops
