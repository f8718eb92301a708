// The finished-call log: failed calls in full up to a budget per client and window, then one
// summary line per client, the rest at debug level; and, through a server, that each line names
// its call's client.
#include "server/observability/call_log.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "spdlog/sinks/ringbuffer_sink.h"
#include "spdlog/spdlog.h"
#include "tensorops/v1/service.grpc.pb.h"
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
using ::testing::AllOf;
using ::testing::Each;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// CapturedLog routes spdlog's default logger into memory for the test's lifetime.
class CapturedLog {
 public:
  explicit CapturedLog(spdlog::level::level_enum level)
      : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000)),
        previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("captured", sink_);
    logger->set_level(level);
    logger->set_pattern("%l %v");
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }

  // The lines written so far, without their line ends.
  std::vector<std::string> lines() const {
    std::vector<std::string> lines = sink_->last_formatted();
    for (std::string& line : lines) {
      while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    }
    return lines;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST(CallLogTest, AClientOverItsBudgetGetsOneSummaryLinePerWindow) {
  CapturedLog captured(spdlog::level::info);
  CallLog log;
  const absl::Time start = absl::FromUnixSeconds(1000);
  // 100 failures from one client (from ever new ports), 2 from another, within one window.
  for (int i = 0; i < 100; ++i) {
    log.Finished("Gather", absl::StrCat("ipv4:10.0.0.7:", 40000 + i), absl::Microseconds(5),
                 i % 4 == 0 ? absl::CancelledError("gone") : absl::InvalidArgumentError("bad"),
                 start + absl::Milliseconds(i));
  }
  for (int i = 0; i < 2; ++i) {
    log.Finished("Scatter", "ipv4:10.0.0.8:5000", absl::Microseconds(5),
                 absl::InvalidArgumentError("other client"), start + absl::Seconds(1));
  }
  std::vector<std::string> lines = captured.lines();
  ASSERT_THAT(lines, SizeIs(CallLog::kFullLinesPerWindow + 2));
  EXPECT_THAT(lines[0], HasSubstr("info Gather from ipv4:10.0.0.7:40000 failed in 5us"));
  EXPECT_THAT(lines.back(), HasSubstr("Scatter from ipv4:10.0.0.8:5000 failed"));

  // The first failure after the window writes the summary, then logs in full again.
  log.Finished("Gather", "ipv4:10.0.0.7:1", absl::Microseconds(5), absl::InvalidArgumentError("x"),
               start + CallLog::kWindow + absl::Seconds(1));
  lines = captured.lines();
  ASSERT_THAT(lines, SizeIs(CallLog::kFullLinesPerWindow + 4));
  // Of the 95 held back, those with i % 4 == 0 and i >= 5: 23 CANCELLED, 72 INVALID_ARGUMENT.
  EXPECT_EQ(lines[CallLog::kFullLinesPerWindow + 2],
            "info ipv4:10.0.0.7: 95 more failed calls in the last 11s not logged (CANCELLED: 23, "
            "INVALID_ARGUMENT: 72); --log_level=debug logs every one");
  EXPECT_THAT(lines.back(), HasSubstr("Gather from ipv4:10.0.0.7:1 failed"));
}

TEST(CallLogTest, HeldBackLinesStillGoOutAtDebugLevelAndSuccessesOnlyThere) {
  CapturedLog captured(spdlog::level::debug);
  CallLog log;
  const absl::Time now = absl::FromUnixSeconds(1000);
  for (int i = 0; i < CallLog::kFullLinesPerWindow + 3; ++i) {
    log.Finished("Run", "ipv6:[::1]:5678", absl::Microseconds(1), absl::InvalidArgumentError("e"),
                 now);
  }
  log.Finished("Run", "ipv6:[::1]:5678", absl::Microseconds(1), absl::OkStatus(), now);
  const std::vector<std::string> lines = captured.lines();
  ASSERT_THAT(lines, SizeIs(CallLog::kFullLinesPerWindow + 4));
  EXPECT_THAT(lines[CallLog::kFullLinesPerWindow], HasSubstr("debug Run from ipv6:[::1]:5678"));
  EXPECT_EQ(lines.back(), "debug Run from ipv6:[::1]:5678: OK in 1us");
  // Flush sums up what was held back, once.
  log.Flush(now + absl::Seconds(2));
  log.Flush(now + absl::Seconds(3));
  EXPECT_THAT(captured.lines(), SizeIs(CallLog::kFullLinesPerWindow + 5));
  EXPECT_THAT(captured.lines().back(), HasSubstr("ipv6:[::1]: 3 more failed calls"));
}

// FailedCallLines are the lines of failed calls among `lines`.
std::vector<std::string> FailedCallLines(const std::vector<std::string>& lines) {
  std::vector<std::string> failed;
  for (const std::string& line : lines) {
    if (absl::StrContains(line, " failed in ")) failed.push_back(line);
  }
  return failed;
}

// SmallGather is a RunStream request of a gather with a one-element result.
v1::RunStreamRequest SmallGather(uint64_t id) {
  v1::RunStreamRequest request;
  request.set_request_id(id);
  *request.mutable_op()->mutable_gather()->mutable_input() = MakeTensor<int64_t>({2}, {1, 2});
  *request.mutable_op()->mutable_gather()->mutable_index() = MakeTensor<int64_t>({1}, {1});
  return request;
}

// Each failed call's line names its client, also when gRPC no longer does: once a send on a call
// fails (the write of a response its client cancelled), gRPC forgets the call's peer and peer()
// says "unknown" (gRPC 1.51), and the stream's requests are ended after that.
TEST(CallLogTest, RequestsOfACancelledStreamNameTheirClient) {
  CapturedLog captured(spdlog::level::debug);
  ServerOptions options;
  options.queue.max_concurrent_calls = 1;
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<v1::TensorOps::Stub> stub = Connect(server->port());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->RunStream(&context);

  // Request 0's response (16 MiB) is far larger than the flow-control window of a client that
  // does not read: its write is still in progress when the stream is cancelled.
  constexpr int64_t kLargeResultElements = int64_t{2} << 20;
  v1::RunStreamRequest large = SmallGather(0);
  *large.mutable_op()->mutable_gather()->mutable_index() =
      MakeTensor<int32_t>({kLargeResultElements}, std::vector<int32_t>(kLargeResultElements, 0));
  ASSERT_TRUE(stream->Write(large));
  ASSERT_TRUE(WaitFor([&] {
    return absl::StrContains(
        server->metrics().Scrape(),
        "tensorops_requests_total{code=\"OK\",device=\"cpu\",op=\"gather\"} 1\n");
  }));
  // Requests 1 and 2 wait behind a busy worker until the stream's cancellation ends them.
  BlockingWork blocker;
  ASSERT_TRUE(server->scheduler().Enqueue(&blocker).ok());
  blocker.WaitUntilStarted();
  ASSERT_TRUE(stream->Write(SmallGather(1)));
  ASSERT_TRUE(stream->Write(SmallGather(2)));
  ASSERT_TRUE(WaitFor([&] { return server->scheduler().QueuedCount() == 2; }));
  context.TryCancel();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(WaitFor([&] { return FailedCallLines(captured.lines()).size() == 2; }))
      << ::testing::PrintToString(captured.lines());
  blocker.Release();

  const std::vector<std::string> failed = FailedCallLines(captured.lines());
  EXPECT_THAT(failed, Each(AllOf(HasSubstr("RunStream request "),
                                 HasSubstr(" from ipv4:127.0.0.1:"), HasSubstr("CANCELLED"))));
}

TEST(CallLogTest, ClientAddressDropsOnlyAnIpPeersPort) {
  EXPECT_EQ(ClientAddress("ipv4:127.0.0.1:50051"), "ipv4:127.0.0.1");
  EXPECT_EQ(ClientAddress("ipv6:[::1]:50051"), "ipv6:[::1]");
  EXPECT_EQ(ClientAddress("unix:/tmp/socket"), "unix:/tmp/socket");
  EXPECT_EQ(ClientAddress("ipv4:"), "ipv4:");
}

}  // namespace
}  // namespace tensorops
