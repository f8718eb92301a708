// Tests of bounded memory: the admission limit on the bytes calls hold (--max_memory_bytes,
// server/core/memory_budget.h), alone and through the service, gRPC's resource quota under that
// limit (GrpcMemoryQuotaBytes), and the idle heap trimmer (server/core/memory_trimmer.h) on a fake
// clock and a fake trim.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/tensor.h"
#include "server/core/memory_budget.h"
#include "server/core/memory_trimmer.h"
#include "server/core/rejection.h"
#include "server/server.h"
#include "tests/blocking_work.h"
#include "tests/service_test_util.h"
#include "tests/wait_for.h"

namespace tensorops {
namespace {

using ::tensorops::testing::BlockingWork;
using ::tensorops::testing::Connect;
using ::tensorops::testing::MakeTensor;
using ::tensorops::testing::StartServer;
using ::tensorops::testing::WaitFor;
using ::testing::HasSubstr;

// --- MemoryBudget
// ---------------------------------------------------------------------------------

TEST(MemoryBudgetTest, ACallThatWouldPassTheLimitIsRefusedUntilBytesAreGivenBack) {
  MemoryBudget budget(1000);
  absl::StatusOr<MemoryBudget::Reservation> first = budget.Reserve("gather", 300, 300);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->bytes(), 600);
  EXPECT_EQ(budget.call_bytes(), 600);
  EXPECT_EQ(budget.calls(), 1);

  const absl::StatusOr<MemoryBudget::Reservation> refused = budget.Reserve("gather", 200, 300);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().message(),
            "gather: the call needs 500 bytes (request 200, result 300); calls in flight hold 600 "
            "bytes and the tensor store 0, and --max_memory_bytes=1000 allows no more: retry "
            "later or with backoff");
  EXPECT_EQ(RejectionOf(refused.status()), Rejection::kMemory);
  EXPECT_EQ(budget.call_bytes(), 600);

  // Up to the limit exactly is within it.
  absl::StatusOr<MemoryBudget::Reservation> second = budget.Reserve("gather", 100, 300);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(budget.call_bytes(), 1000);

  first->Release();
  first->Release();  // once only
  EXPECT_EQ(budget.call_bytes(), 400);
  EXPECT_EQ(budget.calls(), 1);
  EXPECT_TRUE(budget.Reserve("gather", 200, 300).ok());
  // Every admitted call counted; the refused one is not.
  EXPECT_EQ(budget.reservations(), 3);
}

TEST(MemoryBudgetTest, AReservationGivesItsBytesBackOnceWhenMovedAndDestroyed) {
  MemoryBudget budget(1000);
  {
    MemoryBudget::Reservation outer;
    {
      absl::StatusOr<MemoryBudget::Reservation> held = budget.Reserve("scatter", 10, 20);
      ASSERT_TRUE(held.ok());
      outer = *std::move(held);
    }
    EXPECT_EQ(budget.call_bytes(), 30);
    MemoryBudget::Reservation moved(std::move(outer));
    EXPECT_EQ(budget.call_bytes(), 30);
    EXPECT_EQ(moved.bytes(), 30);
  }
  EXPECT_EQ(budget.call_bytes(), 0);
  EXPECT_EQ(budget.calls(), 0);
}

TEST(MemoryBudgetTest, ACallLargerThanTheLimitIsToldRetryingCannotHelp) {
  MemoryBudget budget(1000);
  const absl::StatusOr<MemoryBudget::Reservation> refused = budget.Reserve("scatter", 900, 200);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().message(),
            "scatter: the call needs 1100 bytes (request 900, result 200), more than "
            "--max_memory_bytes=1000 allows at all: send a smaller call");
}

TEST(MemoryBudgetTest, TheStoresBytesCountAsTheyAreAtEachAdmission) {
  int64_t store_bytes = 700;
  MemoryBudget budget(1000, [&] { return store_bytes; });
  const absl::StatusOr<MemoryBudget::Reservation> refused = budget.Reserve("gather", 200, 200);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("calls in flight hold 0 bytes and the tensor store 700"));
  store_bytes = 600;
  EXPECT_TRUE(budget.Reserve("gather", 200, 200).ok());
}

TEST(MemoryBudgetTest, WithoutALimitEveryCallIsAdmittedAndCounted) {
  MemoryBudget budget(0, [] { return int64_t{1} << 40; });
  absl::StatusOr<MemoryBudget::Reservation> held = budget.Reserve("gather", int64_t{1} << 40, 1);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(budget.call_bytes(), (int64_t{1} << 40) + 1);
  EXPECT_EQ(budget.calls(), 1);
}

// --- IdleTrimPolicy
// -------------------------------------------------------------------------------

using Sample = IdleTrimPolicy::Sample;

TEST(IdleTrimPolicyTest, TrimsOnceAfterAnIdlePeriodFollowingActivity) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  IdleTrimPolicy policy(absl::Seconds(1));
  // A server that has served nothing (all counts zero) never trims.
  EXPECT_FALSE(policy.Observe(t0, Sample{}));
  EXPECT_FALSE(policy.Observe(t0 + absl::Seconds(5), Sample{}));
  // Busy: calls in flight. Then idle, with more calls admitted since the last sample.
  EXPECT_FALSE(policy.Observe(t0 + absl::Seconds(6), {.busy = 2, .calls_admitted = 5}));
  EXPECT_FALSE(policy.Observe(t0 + absl::Seconds(7), {.busy = 0, .calls_admitted = 7}));
  EXPECT_FALSE(policy.Observe(t0 + absl::Milliseconds(7999), {.busy = 0, .calls_admitted = 7}));
  EXPECT_TRUE(policy.Observe(t0 + absl::Seconds(8), {.busy = 0, .calls_admitted = 7}));
  // Once per burst: nothing new, no second trim however long it stays idle.
  EXPECT_FALSE(policy.Observe(t0 + absl::Seconds(9), {.busy = 0, .calls_admitted = 7}));
  EXPECT_FALSE(policy.Observe(t0 + absl::Seconds(100), {.busy = 0, .calls_admitted = 7}));
}

TEST(IdleTrimPolicyTest, CallsThatCameAndWentBetweenSamplesAreActivity) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  IdleTrimPolicy policy(absl::Seconds(1));
  // Never seen busy, but admitted calls grew (from zero, then between samples): activity each
  // time, so the idle period restarts.
  EXPECT_FALSE(policy.Observe(t0, {.calls_admitted = 10}));
  EXPECT_FALSE(policy.Observe(t0 + absl::Seconds(1), {.calls_admitted = 11}));
  EXPECT_FALSE(policy.Observe(t0 + absl::Seconds(2), {.calls_admitted = 12}));
  EXPECT_FALSE(policy.Observe(t0 + absl::Milliseconds(2500), {.calls_admitted = 12}));
  EXPECT_TRUE(policy.Observe(t0 + absl::Seconds(3), {.calls_admitted = 12}));
}

TEST(IdleTrimPolicyTest, TheStoresBytesChangingIsActivity) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  IdleTrimPolicy policy(absl::Seconds(1));
  EXPECT_FALSE(policy.Observe(t0, {.store_bytes = 4096}));
  // A tensor deleted: its bytes went back to the heap.
  EXPECT_FALSE(policy.Observe(t0 + absl::Seconds(1), {.store_bytes = 0}));
  EXPECT_TRUE(policy.Observe(t0 + absl::Seconds(2), {.store_bytes = 0}));
}

TEST(IdleTrimPolicyTest, NeverTrimsWhileBusy) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  IdleTrimPolicy policy(absl::Seconds(1));
  // A first sample with calls in flight is activity too.
  EXPECT_FALSE(policy.Observe(t0, {.busy = 1, .calls_admitted = 1}));
  for (int second = 1; second <= 10; ++second) {
    EXPECT_FALSE(policy.Observe(t0 + absl::Seconds(second), {.busy = 1, .calls_admitted = 1}));
  }
  EXPECT_FALSE(policy.Observe(t0 + absl::Seconds(11), {.busy = 0, .calls_admitted = 1}));
  EXPECT_TRUE(policy.Observe(t0 + absl::Seconds(12), {.busy = 0, .calls_admitted = 1}));
}

// --- MemoryTrimmer
// --------------------------------------------------------------------------------

TEST(MemoryTrimmerTest, TrimsAfterEachBurstWithTheGivenTrim) {
  std::atomic<int64_t> admitted{0};
  std::atomic<int> trimmed{0};
  MemoryTrimmer trimmer({.idle_after = absl::Milliseconds(1),
                         .poll = absl::Milliseconds(1),
                         .sample = [&] { return Sample{.calls_admitted = admitted.load()}; },
                         .trim =
                             [&] {
                               ++trimmed;
                               return TrimOutcome{};
                             }});
  admitted = 1;
  ASSERT_TRUE(WaitFor([&] { return trimmer.trims() == 1; }));
  admitted = 2;
  ASSERT_TRUE(WaitFor([&] { return trimmer.trims() == 2; }));
  trimmer.Stop();
  trimmer.Stop();  // idempotent
  EXPECT_EQ(trimmed.load(), trimmer.trims());
}

TEST(MemoryTrimmerTest, ReleaseFreeMemoryReadsTheResidentSize) {
  // What it gives back depends on the heap; that it runs and reads /proc does not.
  const TrimOutcome outcome = ReleaseFreeMemory();
  EXPECT_GT(outcome.resident_before, 0);
  EXPECT_GT(outcome.resident_after, 0);
  EXPECT_GT(ResidentBytes(), 0);
}

// --- Through the service
// --------------------------------------------------------------------------

constexpr int64_t kLimit = int64_t{1} << 20;

// MediumGather is a Gather of 64 Ki floats by 32 Ki int64 indices: a request of about 512 KiB
// and a result of 128 KiB, so one fits under kLimit and two do not.
v1::GatherRequest MediumGather() {
  v1::GatherRequest request;
  *request.mutable_input() = MakeTensor<float>({64 << 10}, std::vector<float>(64 << 10, 1.0f));
  *request.mutable_index() = MakeTensor<int64_t>({32 << 10}, std::vector<int64_t>(32 << 10, 3));
  return request;
}
constexpr int64_t kMediumResultBytes = (32 << 10) * 4;

v1::GatherRequest SmallGather() {
  v1::GatherRequest request;
  *request.mutable_input() = MakeTensor<float>({4}, {1, 2, 3, 4});
  *request.mutable_index() = MakeTensor<int64_t>({2}, {3, 0});
  return request;
}

class ServiceMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.limits.max_memory_bytes = kLimit;
    // One worker, which a test may occupy so that calls wait in the queue holding their bytes.
    options.queue.max_concurrent_calls = 1;
    server_ = StartServer(options);
    ASSERT_NE(server_, nullptr);
    stub_ = Connect(server_->port());
  }

  grpc::Status Gather(const v1::GatherRequest& request, v1::GatherResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->Gather(&context, request, response);
  }

  // RejectedForMemory is how many calls the metrics count as refused for memory.
  bool RejectedForMemory(int count) {
    return WaitFor([&] {
      return absl::StrContains(
          server_->metrics().Scrape(),
          absl::StrFormat("tensorops_rejected_total{reason=\"memory\"} %d\n", count));
    });
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::TensorOps::Stub> stub_;
};

TEST_F(ServiceMemoryTest, ACallOverTheLimitIsRefusedAndASmallOnePasses) {
  v1::GatherRequest large;
  *large.mutable_input() = MakeTensor<float>({300 << 10}, std::vector<float>(300 << 10, 0.0f));
  *large.mutable_index() = MakeTensor<int64_t>({1}, {0});
  v1::GatherResponse response;
  const grpc::Status refused = Gather(large, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(),
              HasSubstr(absl::StrFormat("gather: the call needs %d bytes (request %d, result 4), "
                                        "more than --max_memory_bytes=1048576 allows at all",
                                        large.ByteSizeLong() + 4, large.ByteSizeLong())));

  const grpc::Status passed = Gather(SmallGather(), &response);
  ASSERT_TRUE(passed.ok()) << passed.error_message();
  EXPECT_THAT(testing::Values<float>(response.result()), ::testing::ElementsAre(4, 1));
  EXPECT_TRUE(RejectedForMemory(1));
}

// Under --max_memory_bytes too, a request over --max_message_bytes is refused naming that flag,
// not reset by gRPC: gRPC's receive limit (above the flag) and its resource quota (the limit plus
// the smaller of the limit and that receive limit) let it arrive whole. It is refused before it
// is admitted, so it is no memory rejection.
TEST(ServiceMemoryLimitsTest, ARequestOverMaxMessageBytesIsToldThatFlag) {
  ServerOptions options;
  options.limits.max_memory_bytes = kLimit;
  options.limits.max_message_bytes = 256 << 10;
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<v1::TensorOps::Stub> stub = Connect(server->port());
  const v1::GatherRequest medium = MediumGather();  // about 512 KiB
  v1::GatherResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  const grpc::Status status = stub->Gather(&context, medium, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(),
              HasSubstr(absl::StrFormat("request of %d bytes (tensorops.v1.GatherRequest) is "
                                        "larger than --max_message_bytes=262144",
                                        medium.ByteSizeLong())));
  EXPECT_THAT(server->metrics().Scrape(),
              HasSubstr("tensorops_rejected_total{reason=\"memory\"} 0\n"));
}

TEST_F(ServiceMemoryTest, CallsHoldTheirBytesUntilTheyFinishThenAFollowingCallPasses) {
  BlockingWork blocker;
  ASSERT_TRUE(server_->scheduler().Enqueue(&blocker).ok());
  blocker.WaitUntilStarted();

  // The first call waits in the queue, holding its request and planned result.
  const v1::GatherRequest medium = MediumGather();
  const int64_t medium_bytes = static_cast<int64_t>(medium.ByteSizeLong()) + kMediumResultBytes;
  grpc::ClientContext queued_context;
  v1::GatherResponse queued_response;
  std::promise<grpc::Status> queued_done;
  stub_->async()->Gather(&queued_context, &medium, &queued_response,
                         [&](grpc::Status status) { queued_done.set_value(std::move(status)); });
  ASSERT_TRUE(WaitFor([&] { return server_->scheduler().QueuedCount() == 1; }));
  EXPECT_EQ(server_->memory().call_bytes(), medium_bytes);

  // A second one would take the total past the limit.
  v1::GatherResponse response;
  const grpc::Status refused = Gather(medium, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(),
              HasSubstr(absl::StrFormat("calls in flight hold %d bytes and the tensor store 0, "
                                        "and --max_memory_bytes=1048576 allows no more: retry "
                                        "later or with backoff",
                                        medium_bytes)));

  blocker.Release();
  const grpc::Status first = queued_done.get_future().get();
  ASSERT_TRUE(first.ok()) << first.error_message();
  // The bytes come back once the call is done (its reply sent), and the same call passes.
  ASSERT_TRUE(WaitFor([&] { return server_->memory().calls() == 0; }));
  EXPECT_EQ(server_->memory().call_bytes(), 0);
  const grpc::Status second = Gather(medium, &response);
  ASSERT_TRUE(second.ok()) << second.error_message();
  EXPECT_EQ(response.result().data().size(), static_cast<size_t>(kMediumResultBytes));
  EXPECT_TRUE(RejectedForMemory(1));
}

// ScrapedCallBytes is the value of tensorops_call_bytes_in_flight in `server`'s metrics ("" when
// absent).
std::string ScrapedCallBytes(Server& server) {
  for (absl::string_view line : absl::StrSplit(server.metrics().Scrape(), '\n')) {
    if (absl::ConsumePrefix(&line, "tensorops_call_bytes_in_flight ")) return std::string(line);
  }
  return "";
}

// The bytes that --max_memory_bytes counts are a gauge, with or without a limit.
TEST(CallBytesGaugeTest, ACallHoldsItsBytesInTheGaugeUntilItIsDone) {
  for (const int64_t limit : {int64_t{0}, kLimit}) {
    SCOPED_TRACE(absl::StrFormat("--max_memory_bytes=%d", limit));
    ServerOptions options;
    options.limits.max_memory_bytes = limit;
    options.queue.max_concurrent_calls = 1;
    std::unique_ptr<Server> server = StartServer(options);
    ASSERT_NE(server, nullptr);
    std::unique_ptr<v1::TensorOps::Stub> stub = Connect(server->port());
    EXPECT_EQ(ScrapedCallBytes(*server), "0");

    // The call waits in the queue behind a busy worker, holding its request and planned result.
    BlockingWork blocker;
    ASSERT_TRUE(server->scheduler().Enqueue(&blocker).ok());
    blocker.WaitUntilStarted();
    const v1::GatherRequest medium = MediumGather();
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::GatherResponse response;
    std::promise<grpc::Status> done;
    stub->async()->Gather(&context, &medium, &response,
                          [&](grpc::Status status) { done.set_value(std::move(status)); });
    ASSERT_TRUE(WaitFor([&] { return server->scheduler().QueuedCount() == 1; }));
    EXPECT_EQ(ScrapedCallBytes(*server),
              absl::StrCat(static_cast<int64_t>(medium.ByteSizeLong()) + kMediumResultBytes));

    blocker.Release();
    const grpc::Status status = done.get_future().get();
    ASSERT_TRUE(status.ok()) << status.error_message();
    // The bytes come back once gRPC is done with the call, just after the client has its reply.
    EXPECT_TRUE(WaitFor([&] { return ScrapedCallBytes(*server) == "0"; }))
        << ScrapedCallBytes(*server);
  }
}

TEST_F(ServiceMemoryTest, StoredTensorsCountAgainstTheLimit) {
  const std::vector<float> weights(160 << 10, 0.5f);  // 640 KiB
  const int64_t shape[] = {160 << 10};
  ASSERT_TRUE(server_->store()
                  .Put("", "weights", TensorView(DataType::kFloat32, shape, weights.data()))
                  .ok());
  v1::GatherResponse response;
  const grpc::Status refused = Gather(MediumGather(), &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("the tensor store 655360"));

  ASSERT_TRUE(server_->store().Delete("", "weights").ok());
  const grpc::Status passed = Gather(MediumGather(), &response);
  EXPECT_TRUE(passed.ok()) << passed.error_message();
}

TEST_F(ServiceMemoryTest, AStreamRequestOverTheLimitGetsItsErrorAndTheStreamGoesOn) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub_->RunStream(&context);
  v1::RunStreamRequest request;
  request.set_request_id(1);
  *request.mutable_op()->mutable_gather() = MediumGather();
  *request.mutable_op()->mutable_gather()->mutable_input() =
      MakeTensor<float>({300 << 10}, std::vector<float>(300 << 10, 0.0f));
  ASSERT_TRUE(stream->Write(request));
  request.set_request_id(2);
  *request.mutable_op()->mutable_gather() = SmallGather();
  ASSERT_TRUE(stream->Write(request));
  stream->WritesDone();

  v1::RunStreamResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.request_id(), 1u);
  EXPECT_EQ(response.error().code(), static_cast<int32_t>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_THAT(response.error().message(), HasSubstr("--max_memory_bytes=1048576"));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.request_id(), 2u);
  EXPECT_TRUE(response.has_result());
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_TRUE(RejectedForMemory(1));
}

// --- gRPC's own buffers under the limit
// ---------------------------------------------------------------------------

// UnreadBytesAccepted is how many bytes of RunStream requests a client gets written to a server
// that reads none of them for a second: the stream's one request in flight (max_stream_in_flight
// 1) waits behind a worker the test occupies, so the stream reads no further, and what follows
// stays in gRPC's buffers (and the client's), where the budget cannot see it.
int64_t UnreadBytesAccepted(int64_t max_memory_bytes) {
  ServerOptions options;
  options.limits.max_memory_bytes = max_memory_bytes;
  options.limits.max_message_bytes = 256 << 10;
  options.limits.max_stream_in_flight = 1;
  options.queue.max_concurrent_calls = 1;
  options.queue.inline_max_bytes = 0;
  std::unique_ptr<Server> server = StartServer(options);
  if (server == nullptr) return -1;
  BlockingWork blocker;
  if (!server->scheduler().Enqueue(&blocker).ok()) return -1;
  blocker.WaitUntilStarted();

  std::unique_ptr<v1::TensorOps::Stub> stub = Connect(server->port());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  std::unique_ptr<grpc::ClientReaderWriter<v1::RunStreamRequest, v1::RunStreamResponse>> stream =
      stub->RunStream(&context);
  v1::RunStreamRequest request;
  request.set_request_id(1);
  *request.mutable_op()->mutable_gather() = SmallGather();
  if (!stream->Write(request)) return -1;
  if (!WaitFor([&] { return server->scheduler().QueuedCount() == 1; })) return -1;

  // Requests of 200 KiB, 40 MiB in all: far more than any buffer holds.
  v1::RunStreamRequest large;
  *large.mutable_op()->mutable_gather()->mutable_input() =
      MakeTensor<float>({50 << 10}, std::vector<float>(50 << 10, 1.0f));
  *large.mutable_op()->mutable_gather()->mutable_index() = MakeTensor<int64_t>({1}, {0});
  std::atomic<int64_t> written{0};
  std::thread writer([&] {
    for (int i = 0; i < 200; ++i) {
      large.set_request_id(i + 2);
      if (!stream->Write(large)) return;
      written += static_cast<int64_t>(large.ByteSizeLong());
    }
  });
  absl::SleepFor(absl::Seconds(1));
  const int64_t accepted = written.load();
  context.TryCancel();
  writer.join();
  return accepted;
}

// Requests still arriving are held to gRPC's resource quota under --max_memory_bytes (here 512
// KiB: server_options.h, GrpcMemoryQuotaBytes): the client gets 1.6 MB written (8 requests; what
// its own buffers hold included). Without the quota gRPC reads ahead 4 MiB or more whatever it
// holds (measured: 20 requests, 4.1 MB, in most runs, 40 in some): the server's RSS climbed to
// 0.3-1.2 GB when 64 clients cancelled large calls while their requests arrived.
TEST(GrpcQuotaTest, RequestsStillArrivingAreHeldToTheQuota) {
  const int64_t accepted = UnreadBytesAccepted(256 << 10);
  ASSERT_GE(accepted, 0);
  EXPECT_LT(accepted, int64_t{3} << 20);
}

// The same without a limit, to show what the test above would see without the quota; a gRPC that
// reads ahead less makes the test above prove less, and this one says so.
TEST(GrpcQuotaTest, WithoutALimitGrpcReadsAheadMegabytes) {
  EXPECT_GE(UnreadBytesAccepted(0), int64_t{7} << 19);  // 3.5 MiB
}

}  // namespace
}  // namespace tensorops
