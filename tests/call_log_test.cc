// The finished-call log: failed calls in full up to a budget per client and window, then one
// summary line per client, the rest at debug level.
#include "server/call_log.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ringbuffer_sink.h"
#include "spdlog/spdlog.h"

namespace tensorops {
namespace {

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

TEST(CallLogTest, ClientAddressDropsOnlyAnIpPeersPort) {
  EXPECT_EQ(ClientAddress("ipv4:127.0.0.1:50051"), "ipv4:127.0.0.1");
  EXPECT_EQ(ClientAddress("ipv6:[::1]:50051"), "ipv6:[::1]");
  EXPECT_EQ(ClientAddress("unix:/tmp/socket"), "unix:/tmp/socket");
  EXPECT_EQ(ClientAddress("ipv4:"), "ipv4:");
}

}  // namespace
}  // namespace tensorops
