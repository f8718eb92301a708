// Tests of admission control: the Scheduler on its own with real worker threads, and through the
// service (a full queue, a deadline that passes while queued, a client that cancels while queued).
#include "server/scheduler.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
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
      MakeScheduler({.max_concurrent_calls = 2, .max_queued_calls = 10});
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
      MakeScheduler({.max_concurrent_calls = 1, .max_queued_calls = 1});
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
      MakeScheduler({.max_concurrent_calls = 1, .max_queued_calls = 0});
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
      MakeScheduler({.max_concurrent_calls = 1, .max_queued_calls = 4});
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
      MakeScheduler({.max_concurrent_calls = 1, .max_queued_calls = 4});
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
      MakeScheduler({.max_concurrent_calls = 1, .max_queued_calls = 4});
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

TEST(SchedulerTest, ReportsLoadChanges) {
  absl::Mutex mu;
  std::vector<std::pair<int64_t, int64_t>> loads;
  std::unique_ptr<Scheduler> scheduler =
      MakeScheduler({.max_concurrent_calls = 1,
                     .max_queued_calls = 4,
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

TEST(SchedulerTest, CreateRejectsOptionsOutOfRange) {
  EXPECT_EQ(Scheduler::Create({.max_concurrent_calls = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Scheduler::Create({.max_concurrent_calls = 1, .max_queued_calls = -1}).status().code(),
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
    server_ = StartServer({.max_concurrent_calls = 1, .max_queued_calls = 1});
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

}  // namespace
}  // namespace tensorops
