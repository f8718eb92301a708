// Tests of Metrics: what the recording methods do to the Prometheus text (parsed sample by sample,
// never matched loosely), exact totals under concurrent recording, and the HTTP endpoint fetched
// over a plain TCP socket.
#include "server/observability/metrics.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <latch>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/observability/build_info.h"
#include "tests/http_get.h"

namespace tensorops {
namespace {

using ::tensorops::testing::HttpGet;
using ::tensorops::testing::HttpResponse;

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Labels = std::map<std::string, std::string>;

// Sample is one line of the text format: `name{labels} value`.
struct Sample {
  std::string name;
  Labels labels;
  double value;
};

// ParseSamples parses the sample lines of Prometheus text format 0.0.4 (comments skipped, label
// values unescaped). A malformed line fails the test and is left out.
std::vector<Sample> ParseSamples(const std::string& text) {
  std::vector<Sample> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line.front() == '#') continue;
    Sample sample;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    sample.name = std::string(line.substr(0, i));
    bool well_formed = !sample.name.empty();
    if (well_formed && i < line.size() && line[i] == '{') {
      ++i;
      while (well_formed && i < line.size() && line[i] != '}') {
        const size_t equals = line.find('=', i);
        if (equals == absl::string_view::npos || equals + 1 >= line.size() ||
            line[equals + 1] != '"') {
          well_formed = false;
          break;
        }
        const std::string label(line.substr(i, equals - i));
        std::string value;
        i = equals + 2;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\' && i + 1 < line.size()) {
            ++i;
            value.push_back(line[i] == 'n' ? '\n' : line[i]);
          } else {
            value.push_back(line[i]);
          }
          ++i;
        }
        if (i >= line.size()) {
          well_formed = false;
          break;
        }
        ++i;  // closing quote
        if (!sample.labels.emplace(label, value).second) well_formed = false;
        if (i < line.size() && line[i] == ',') ++i;
      }
      well_formed = well_formed && i < line.size() && line[i] == '}';
      ++i;
    }
    well_formed = well_formed && i < line.size() && line[i] == ' ';
    if (well_formed) {
      // The value, then an optional timestamp.
      std::vector<absl::string_view> fields = absl::StrSplit(line.substr(i + 1), ' ');
      well_formed = !fields.empty() && absl::SimpleAtod(fields[0], &sample.value);
    }
    EXPECT_TRUE(well_formed) << "malformed sample line: " << line;
    if (well_formed) samples.push_back(std::move(sample));
  }
  return samples;
}

// Value returns the value of the one sample named `name` with exactly `labels`, or nullopt when
// there is none; two such samples fail the test.
std::optional<double> Value(const std::string& text, absl::string_view name, const Labels& labels) {
  std::optional<double> found;
  for (const Sample& sample : ParseSamples(text)) {
    if (sample.name != name || sample.labels != labels) continue;
    EXPECT_FALSE(found.has_value()) << "duplicate sample " << name;
    found = sample.value;
  }
  return found;
}

// Buckets returns the `le` bound and count of every bucket of histogram `name` whose other labels
// are `labels`, in the order served.
std::vector<std::pair<double, double>> Buckets(const std::string& text, absl::string_view name,
                                               const Labels& labels) {
  std::vector<std::pair<double, double>> buckets;
  const std::string bucket_name = absl::StrCat(name, "_bucket");
  for (const Sample& sample : ParseSamples(text)) {
    if (sample.name != bucket_name) continue;
    Labels others = sample.labels;
    auto le = others.find("le");
    if (le == others.end()) continue;
    double bound = 0;
    EXPECT_TRUE(absl::SimpleAtod(le->second, &bound)) << le->second;
    others.erase(le);
    if (others == labels) buckets.emplace_back(bound, sample.value);
  }
  return buckets;
}

// BucketCount: the count of the bucket of `name`/`labels` whose bound is `bound` (within rounding).
std::optional<double> BucketCount(const std::string& text, absl::string_view name,
                                  const Labels& labels, double bound) {
  for (const auto& [le, count] : Buckets(text, name, labels)) {
    const bool same = std::isinf(bound) ? le == bound : std::abs(le - bound) <= 1e-9 * bound;
    if (same) return count;
  }
  return std::nullopt;
}

// TypeOf: the type a `# TYPE` line gives family `name`, "" without one.
std::string TypeOf(const std::string& text, absl::string_view name) {
  const std::string prefix = absl::StrCat("# TYPE ", name, " ");
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, prefix)) return std::string(line.substr(prefix.size()));
  }
  return "";
}

std::unique_ptr<Metrics> CreateOrDie(const MetricsOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<Metrics>> metrics = Metrics::Create(options);
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  return metrics.ok() ? *std::move(metrics) : nullptr;
}

CallStages AllStages(absl::Duration each) { return {each, each, each, each}; }

TEST(MetricsTest, FamiliesHaveTheirTypes) {
  std::unique_ptr<Metrics> metrics = CreateOrDie();
  ASSERT_NE(metrics, nullptr);
  metrics->CallFinished("gather", absl::StatusCode::kOk, "cpu", AllStages(absl::Milliseconds(1)),
                        10, 20);
  const std::string text = metrics->Scrape();
  EXPECT_EQ(TypeOf(text, "tensorops_requests_total"), "counter");
  EXPECT_EQ(TypeOf(text, "tensorops_stage_duration_seconds"), "histogram");
  EXPECT_EQ(TypeOf(text, "tensorops_received_bytes_total"), "counter");
  EXPECT_EQ(TypeOf(text, "tensorops_sent_bytes_total"), "counter");
  EXPECT_EQ(TypeOf(text, "tensorops_call_seconds_total"), "counter");
  EXPECT_EQ(TypeOf(text, "tensorops_last_call_timestamp_seconds"), "gauge");
  EXPECT_EQ(TypeOf(text, "tensorops_rejected_total"), "counter");
  EXPECT_EQ(TypeOf(text, "tensorops_calls_in_flight"), "gauge");
  EXPECT_EQ(TypeOf(text, "tensorops_calls_queued"), "gauge");
  EXPECT_EQ(TypeOf(text, "tensorops_streams_open"), "gauge");
  EXPECT_EQ(TypeOf(text, "tensorops_build_info"), "gauge");
  EXPECT_EQ(TypeOf(text, "process_cpu_seconds_total"), "counter");
  for (const char* gauge : {"process_resident_memory_bytes", "process_virtual_memory_bytes",
                            "process_start_time_seconds", "process_open_fds", "process_max_fds"}) {
    EXPECT_EQ(TypeOf(text, gauge), "gauge") << gauge;
  }
}

TEST(MetricsTest, BuildInfoIsOneLabelledWithTheBuild) {
  std::unique_ptr<Metrics> metrics = CreateOrDie();
  ASSERT_NE(metrics, nullptr);
  const BuildInfo& build = ThisBuild();
  // CMake passes every field; "unknown" would mean a build without them.
  EXPECT_THAT(build.version, ::testing::MatchesRegex("[0-9]+\\.[0-9]+\\.[0-9]+"));
  EXPECT_NE(build.revision, "");
  EXPECT_NE(build.compiler, "unknown");
  EXPECT_EQ(Value(metrics->Scrape(), "tensorops_build_info",
                  {{"version", build.version},
                   {"revision", build.revision},
                   {"build_type", build.build_type},
                   {"compiler", build.compiler}}),
            1);
}

// ReadRss is this process's resident set from /proc/self/statm, in bytes: a second source to hold
// the metric against.
double ReadRss() {
  std::ifstream statm("/proc/self/statm");
  double pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<double>(sysconf(_SC_PAGESIZE));
}

TEST(MetricsTest, ProcessMetricsFollowTheProcess) {
  std::unique_ptr<Metrics> metrics = CreateOrDie();
  ASSERT_NE(metrics, nullptr);
  const absl::Time now = absl::Now();
  std::string text = metrics->Scrape();

  // The test started less than an hour ago, and not in the future.
  const double start = Value(text, "process_start_time_seconds", {}).value_or(-1);
  EXPECT_LE(start, absl::ToUnixSeconds(now) + 1);
  EXPECT_GE(start, absl::ToUnixSeconds(now) - 3600);

  // Resident memory grows with a touched allocation, as statm says.
  const double rss_before = Value(text, "process_resident_memory_bytes", {}).value_or(-1);
  EXPECT_NEAR(rss_before, ReadRss(), 16 << 20);
  std::vector<char> touched(64 << 20, 1);
  text = metrics->Scrape();
  EXPECT_GE(Value(text, "process_resident_memory_bytes", {}).value_or(-1), rss_before + (48 << 20));
  EXPECT_GE(Value(text, "process_virtual_memory_bytes", {}).value_or(-1),
            Value(text, "process_resident_memory_bytes", {}).value_or(0));

  // Three more open descriptors are three more in the count.
  const double fds_before = Value(text, "process_open_fds", {}).value_or(-1);
  int fds[3];
  for (int& fd : fds) fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  text = metrics->Scrape();
  EXPECT_EQ(Value(text, "process_open_fds", {}), fds_before + 3);
  for (int fd : fds) close(fd);
  rlimit limit;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  EXPECT_EQ(Value(text, "process_max_fds", {}), static_cast<double>(limit.rlim_cur));

  // CPU time moves once this thread has spent some (the kernel counts in 10 ms ticks).
  const double cpu_before = Value(text, "process_cpu_seconds_total", {}).value_or(-1);
  EXPECT_GE(cpu_before, 0);
  const absl::Time busy_until = absl::Now() + absl::Milliseconds(100);
  volatile uint64_t spin = 0;
  while (absl::Now() < busy_until) spin = spin + 1;
  EXPECT_GT(Value(metrics->Scrape(), "process_cpu_seconds_total", {}).value_or(-1), cpu_before);
  touched[0] = static_cast<char>(spin);
}

TEST(MetricsTest, RequestsCountedByOpCodeAndDevice) {
  std::unique_ptr<Metrics> metrics = CreateOrDie();
  ASSERT_NE(metrics, nullptr);
  const std::string before = metrics->Scrape();
  EXPECT_EQ(Value(before, "tensorops_requests_total",
                  {{"op", "gather"}, {"code", "OK"}, {"device", "cpu"}}),
            std::nullopt);

  metrics->CallFinished("gather", absl::StatusCode::kOk, "cpu", {}, 0, 0);
  metrics->CallFinished("gather", absl::StatusCode::kOk, "cpu", {}, 0, 0);
  metrics->CallFinished("gather", absl::StatusCode::kOk, "cuda", {}, 0, 0);
  metrics->CallFinished("scatter", absl::StatusCode::kInvalidArgument, "none", {}, 0, 0);
  metrics->CallFinished("server_info", absl::StatusCode::kResourceExhausted, "none", {}, 0, 0);

  const std::string text = metrics->Scrape();
  EXPECT_EQ(Value(text, "tensorops_requests_total",
                  {{"op", "gather"}, {"code", "OK"}, {"device", "cpu"}}),
            2);
  EXPECT_EQ(Value(text, "tensorops_requests_total",
                  {{"op", "gather"}, {"code", "OK"}, {"device", "cuda"}}),
            1);
  EXPECT_EQ(Value(text, "tensorops_requests_total",
                  {{"op", "scatter"}, {"code", "INVALID_ARGUMENT"}, {"device", "none"}}),
            1);
  EXPECT_EQ(Value(text, "tensorops_requests_total",
                  {{"op", "server_info"}, {"code", "RESOURCE_EXHAUSTED"}, {"device", "none"}}),
            1);
  // No series for combinations never recorded.
  EXPECT_EQ(Value(text, "tensorops_requests_total",
                  {{"op", "scatter"}, {"code", "OK"}, {"device", "none"}}),
            std::nullopt);
}

// Statistics reads back what the series hold: calls by outcome over every code and device, their
// total time (the sum of the stages each reached), each stage's count and sum over the calls that
// ended OK (Triton's statistics count successes only), the last call.
TEST(MetricsTest, StatisticsSumAnOpsSeries) {
  std::unique_ptr<Metrics> metrics = CreateOrDie();
  ASSERT_NE(metrics, nullptr);
  const OpStatistics none = metrics->Statistics("gather");
  EXPECT_EQ(none.ok.count, 0);
  EXPECT_EQ(none.failed.count, 0);
  EXPECT_FALSE(none.last_call.has_value());

  const absl::Time before = absl::Now();
  metrics->CallFinished("gather", absl::StatusCode::kOk, "cpu", AllStages(absl::Milliseconds(1)), 0,
                        0);
  metrics->CallFinished("gather", absl::StatusCode::kOk, "cuda", AllStages(absl::Milliseconds(2)),
                        0, 0);
  metrics->CallFinished("gather", absl::StatusCode::kInvalidArgument, "none",
                        {.decode = absl::Milliseconds(3)}, 0, 0);
  metrics->CallFinished("scatter", absl::StatusCode::kOk, "cpu", AllStages(absl::Seconds(1)), 0, 0);
  const OpStatistics gather = metrics->Statistics("gather");
  EXPECT_EQ(gather.ok.count, 2);
  EXPECT_EQ(gather.failed.count, 1);
  // Four stages of 1 ms and four of 2 ms.
  EXPECT_NEAR(absl::ToDoubleMilliseconds(gather.ok.total), 12.0, 1e-6);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(gather.failed.total), 3.0, 1e-6);
  // The failed call's 3 ms of decoding is in `failed` only.
  EXPECT_EQ(gather.decode.count, 2);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(gather.decode.total), 3.0, 1e-6);
  EXPECT_EQ(gather.execute.count, 2);
  EXPECT_NEAR(absl::ToDoubleMilliseconds(gather.execute.total), 3.0, 1e-6);
  ASSERT_TRUE(gather.last_call.has_value());
  EXPECT_GE(*gather.last_call, before - absl::Seconds(1));
  EXPECT_LE(*gather.last_call, absl::Now() + absl::Seconds(1));
  EXPECT_EQ(metrics->Statistics("scatter").ok.count, 1);
  EXPECT_EQ(metrics->Statistics("scatter").decode.count, 1);
  // The Prometheus histogram still counts every call's stages.
  EXPECT_THAT(
      metrics->Scrape(),
      HasSubstr("tensorops_stage_duration_seconds_count{op=\"gather\",stage=\"decode\"} 3"));
}

TEST(MetricsTest, EveryStatusCodeHasItsUpperSnakeName) {
  std::unique_ptr<Metrics> metrics = CreateOrDie();
  ASSERT_NE(metrics, nullptr);
  const std::map<absl::StatusCode, std::string> names = {
      {absl::StatusCode::kOk, "OK"},
      {absl::StatusCode::kCancelled, "CANCELLED"},
      {absl::StatusCode::kUnknown, "UNKNOWN"},
      {absl::StatusCode::kInvalidArgument, "INVALID_ARGUMENT"},
      {absl::StatusCode::kDeadlineExceeded, "DEADLINE_EXCEEDED"},
      {absl::StatusCode::kNotFound, "NOT_FOUND"},
      {absl::StatusCode::kAlreadyExists, "ALREADY_EXISTS"},
      {absl::StatusCode::kPermissionDenied, "PERMISSION_DENIED"},
      {absl::StatusCode::kResourceExhausted, "RESOURCE_EXHAUSTED"},
      {absl::StatusCode::kFailedPrecondition, "FAILED_PRECONDITION"},
      {absl::StatusCode::kAborted, "ABORTED"},
      {absl::StatusCode::kOutOfRange, "OUT_OF_RANGE"},
      {absl::StatusCode::kUnimplemented, "UNIMPLEMENTED"},
      {absl::StatusCode::kInternal, "INTERNAL"},
      {absl::StatusCode::kUnavailable, "UNAVAILABLE"},
      {absl::StatusCode::kDataLoss, "DATA_LOSS"},
      {absl::StatusCode::kUnauthenticated, "UNAUTHENTICATED"},
  };
  for (const auto& [code, name] : names) metrics->CallFinished("gather", code, "cpu", {}, 0, 0);
  // Out of the enum's range: counted as UNKNOWN, like gRPC does on the wire.
  metrics->CallFinished("gather", static_cast<absl::StatusCode>(42), "cpu", {}, 0, 0);

  const std::string text = metrics->Scrape();
  for (const auto& [code, name] : names) {
    EXPECT_EQ(Value(text, "tensorops_requests_total",
                    {{"op", "gather"}, {"code", name}, {"device", "cpu"}}),
              code == absl::StatusCode::kUnknown ? 2 : 1)
        << name;
  }
}

TEST(MetricsTest, StageHistogramsObserveOnlyReachedStages) {
  std::unique_ptr<Metrics> metrics = CreateOrDie();
  ASSERT_NE(metrics, nullptr);
  CallStages stages;
  stages.decode = absl::Microseconds(5);
  stages.execute = absl::Milliseconds(3);
  // queue and encode never reached.
  metrics->CallFinished("gather", absl::StatusCode::kOk, "cpu", stages, 0, 0);
  stages.encode = absl::Seconds(2);
  metrics->CallFinished("gather", absl::StatusCode::kOk, "cpu", stages, 0, 0);

  const std::string text = metrics->Scrape();
  const std::string name = "tensorops_stage_duration_seconds";
  const Labels decode = {{"op", "gather"}, {"stage", "decode"}};
  const Labels queue = {{"op", "gather"}, {"stage", "queue"}};
  const Labels execute = {{"op", "gather"}, {"stage", "execute"}};
  const Labels encode = {{"op", "gather"}, {"stage", "encode"}};
  EXPECT_EQ(Value(text, name + "_count", decode), 2);
  EXPECT_NEAR(Value(text, name + "_sum", decode).value_or(-1), 10e-6, 1e-12);
  EXPECT_EQ(Value(text, name + "_count", queue), 0);
  EXPECT_EQ(Value(text, name + "_sum", queue), 0);
  EXPECT_EQ(Value(text, name + "_count", execute), 2);
  EXPECT_NEAR(Value(text, name + "_sum", execute).value_or(-1), 6e-3, 1e-12);
  EXPECT_EQ(Value(text, name + "_count", encode), 1);

  // Buckets are cumulative: 5 µs is in every bucket, 3 ms from the 5 ms bound on, and 2 s in the
  // bucket of 2 s (a bound is inclusive).
  EXPECT_EQ(BucketCount(text, name, decode, 10e-6), 2);
  EXPECT_EQ(BucketCount(text, name, execute, 2e-3), 0);
  EXPECT_EQ(BucketCount(text, name, execute, 5e-3), 2);
  EXPECT_EQ(BucketCount(text, name, encode, 1), 0);
  EXPECT_EQ(BucketCount(text, name, encode, 2), 1);
  EXPECT_EQ(BucketCount(text, name, encode, INFINITY), 1);
}

// The bounds go 1, 2, 5 per decade from 10 µs to 100 s, and each `le` label is the short decimal
// (what a reader types into a query), never a rounding artifact such as 8.000000000000001e-05.
TEST(MetricsTest, StageBucketsAreOneTwoFivePerDecadeAndPrintAsShortDecimals) {
  std::unique_ptr<Metrics> metrics = CreateOrDie();
  ASSERT_NE(metrics, nullptr);
  metrics->CallFinished("gather", absl::StatusCode::kOk, "cpu", AllStages(absl::Milliseconds(1)), 0,
                        0);
  std::vector<std::string> bounds;
  for (const Sample& sample : ParseSamples(metrics->Scrape())) {
    if (sample.name == "tensorops_stage_duration_seconds_bucket" &&
        sample.labels.at("stage") == "queue") {
      bounds.push_back(sample.labels.at("le"));
    }
  }
  const std::vector<std::string> expected = {
      "1e-05", "2e-05", "5e-05", "0.0001", "0.0002", "0.0005", "0.001", "0.002",
      "0.005", "0.01",  "0.02",  "0.05",   "0.1",    "0.2",    "0.5",   "1",
      "2",     "5",     "10",    "20",     "50",     "100",    "+Inf"};
  EXPECT_EQ(bounds, expected);
}

TEST(MetricsTest, NegativeDurationCountsAsZeroAndInfiniteIsLeftOut) {
  std::unique_ptr<Metrics> metrics = CreateOrDie();
  ASSERT_NE(metrics, nullptr);
  CallStages stages;
  stages.decode = absl::Microseconds(-3);
  stages.execute = absl::InfiniteDuration();
  metrics->CallFinished("gather", absl::StatusCode::kOk, "cpu", stages, 0, 0);

  const std::string text = metrics->Scrape();
  const std::string name = "tensorops_stage_duration_seconds";
  EXPECT_EQ(Value(text, name + "_count", {{"op", "gather"}, {"stage", "decode"}}), 1);
  EXPECT_EQ(Value(text, name + "_sum", {{"op", "gather"}, {"stage", "decode"}}), 0);
  EXPECT_EQ(Value(text, name + "_count", {{"op", "gather"}, {"stage", "execute"}}), 0);
  EXPECT_EQ(Value(text, name + "_sum", {{"op", "gather"}, {"stage", "execute"}}), 0);
}

TEST(MetricsTest, BytesAddUpPerOp) {
  std::unique_ptr<Metrics> metrics = CreateOrDie();
  ASSERT_NE(metrics, nullptr);
  metrics->CallFinished("gather", absl::StatusCode::kOk, "cpu", {}, 1000, 250);
  metrics->CallFinished("gather", absl::StatusCode::kInvalidArgument, "none", {}, 24, 0);
  metrics->CallFinished("scatter", absl::StatusCode::kOk, "cuda", {}, int64_t{5} << 30, 7);
  metrics->CallFinished("scatter", absl::StatusCode::kOk, "cuda", {}, -1, -1);  // adds nothing

  const std::string text = metrics->Scrape();
  EXPECT_EQ(Value(text, "tensorops_received_bytes_total", {{"op", "gather"}}), 1024);
  EXPECT_EQ(Value(text, "tensorops_sent_bytes_total", {{"op", "gather"}}), 250);
  EXPECT_EQ(Value(text, "tensorops_received_bytes_total", {{"op", "scatter"}}),
            static_cast<double>(int64_t{5} << 30));
  EXPECT_EQ(Value(text, "tensorops_sent_bytes_total", {{"op", "scatter"}}), 7);
}

TEST(MetricsTest, GaugesFollowTheScheduler) {
  std::unique_ptr<Metrics> metrics = CreateOrDie();
  ASSERT_NE(metrics, nullptr);
  std::string text = metrics->Scrape();
  EXPECT_EQ(Value(text, "tensorops_calls_in_flight", {}), 0);
  EXPECT_EQ(Value(text, "tensorops_calls_queued", {}), 0);
  EXPECT_EQ(Value(text, "tensorops_streams_open", {}), 0);

  metrics->SetInFlight(3);
  metrics->SetQueued(17);
  metrics->StreamOpened();
  metrics->StreamOpened();
  metrics->StreamOpened();
  metrics->StreamClosed();
  text = metrics->Scrape();
  EXPECT_EQ(Value(text, "tensorops_calls_in_flight", {}), 3);
  EXPECT_EQ(Value(text, "tensorops_calls_queued", {}), 17);
  EXPECT_EQ(Value(text, "tensorops_streams_open", {}), 2);

  metrics->SetInFlight(0);
  metrics->SetQueued(1);
  metrics->StreamClosed();
  metrics->StreamClosed();
  text = metrics->Scrape();
  EXPECT_EQ(Value(text, "tensorops_calls_in_flight", {}), 0);
  EXPECT_EQ(Value(text, "tensorops_calls_queued", {}), 1);
  EXPECT_EQ(Value(text, "tensorops_streams_open", {}), 0);
}

TEST(MetricsTest, CallBytesAreReadAtEachScrapeWhileWatched) {
  std::unique_ptr<Metrics> metrics = CreateOrDie();
  ASSERT_NE(metrics, nullptr);
  EXPECT_EQ(Value(metrics->Scrape(), "tensorops_call_bytes_in_flight", {}), std::nullopt);

  int64_t call_bytes = 4096;
  metrics->WatchCallBytes([&call_bytes] { return call_bytes; });
  std::string text = metrics->Scrape();
  EXPECT_EQ(TypeOf(text, "tensorops_call_bytes_in_flight"), "gauge");
  EXPECT_EQ(Value(text, "tensorops_call_bytes_in_flight", {}), 4096);
  call_bytes = 0;
  EXPECT_EQ(Value(metrics->Scrape(), "tensorops_call_bytes_in_flight", {}), 0);

  metrics->WatchCallBytes(nullptr);
  EXPECT_EQ(Value(metrics->Scrape(), "tensorops_call_bytes_in_flight", {}), std::nullopt);
}

TEST(MetricsTest, RejectionsByReason) {
  std::unique_ptr<Metrics> metrics = CreateOrDie();
  ASSERT_NE(metrics, nullptr);
  // The documented reasons are there at 0 before any rejection.
  std::string text = metrics->Scrape();
  for (const char* reason : {"queue_full", "limit", "unauthenticated", "shutting_down",
                             "deadline_exceeded", "cancelled"}) {
    EXPECT_EQ(Value(text, "tensorops_rejected_total", {{"reason", reason}}), 0) << reason;
  }

  metrics->Rejected("queue_full");
  metrics->Rejected("queue_full");
  metrics->Rejected("deadline_exceeded");
  text = metrics->Scrape();
  EXPECT_EQ(Value(text, "tensorops_rejected_total", {{"reason", "queue_full"}}), 2);
  EXPECT_EQ(Value(text, "tensorops_rejected_total", {{"reason", "deadline_exceeded"}}), 1);
  EXPECT_EQ(Value(text, "tensorops_rejected_total", {{"reason", "limit"}}), 0);
}

TEST(MetricsTest, AnyReasonStringIsAcceptedAndServedAsValidText) {
  std::unique_ptr<Metrics> metrics = CreateOrDie();
  ASSERT_NE(metrics, nullptr);
  const std::string quoted = "say \"no\", \\ then\nstop";
  metrics->Rejected(quoted);
  metrics->Rejected("");
  metrics->Rejected("caf\xc3\xa9");       // valid UTF-8 (é): kept
  metrics->Rejected("bad\xff\xc3");       // invalid byte, truncated sequence
  metrics->Rejected("over\xc0\xaflong");  // overlong encoding of '/'
  metrics->Rejected("surrogate\xed\xa0\x80");

  const std::string text = metrics->Scrape();  // ParseSamples fails the test on a broken line
  EXPECT_EQ(Value(text, "tensorops_rejected_total", {{"reason", quoted}}), 1);
  EXPECT_EQ(Value(text, "tensorops_rejected_total", {{"reason", ""}}), 1);
  EXPECT_EQ(Value(text, "tensorops_rejected_total", {{"reason", "caf\xc3\xa9"}}), 1);
  EXPECT_EQ(Value(text, "tensorops_rejected_total", {{"reason", "bad??"}}), 1);
  EXPECT_EQ(Value(text, "tensorops_rejected_total", {{"reason", "over??long"}}), 1);
  EXPECT_EQ(Value(text, "tensorops_rejected_total", {{"reason", "surrogate???"}}), 1);
}

TEST(MetricsTest, ConcurrentRecordingKeepsExactTotals) {
  std::unique_ptr<Metrics> metrics = CreateOrDie();
  ASSERT_NE(metrics, nullptr);
  constexpr int kThreads = 8;
  constexpr int kCallsPerThread = 2000;
  const std::vector<std::string> ops = {"gather", "scatter", "index_select"};
  const std::vector<std::string> devices = {"cpu", "cuda"};
  // Every thread starts at once, so that first uses of a series (the cache's slow path) race too.
  std::latch start(kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int i = 0; i < kCallsPerThread; ++i) {
        const std::string& op = ops[(t + i) % ops.size()];
        const std::string& device = devices[i % devices.size()];
        metrics->CallFinished(op, absl::StatusCode::kOk, device, AllStages(absl::Microseconds(50)),
                              3, 5);
        metrics->Rejected(i % 2 == 0 ? "queue_full" : absl::StrCat("reason_", i % 5));
        metrics->StreamOpened();
        if (i % 2 == 1) metrics->StreamClosed();
        if (i % 100 == 0) metrics->Scrape();  // scrapes race with recording
      }
    });
  }
  start.arrive_and_wait();
  for (std::thread& thread : threads) thread.join();

  // The expected totals, counted the same way the threads chose their labels.
  std::map<std::pair<std::string, std::string>, int> calls;  // (op, device) -> calls
  std::map<std::string, int> op_calls;
  std::map<std::string, int> rejections;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kCallsPerThread; ++i) {
      const std::string& op = ops[(t + i) % ops.size()];
      ++calls[{op, devices[i % devices.size()]}];
      ++op_calls[op];
      ++rejections[i % 2 == 0 ? "queue_full" : absl::StrCat("reason_", i % 5)];
    }
  }

  const std::string text = metrics->Scrape();
  double all_requests = 0;
  for (const auto& [key, count] : calls) {
    const auto& [op, device] = key;
    EXPECT_EQ(
        Value(text, "tensorops_requests_total", {{"op", op}, {"code", "OK"}, {"device", device}}),
        count)
        << op << " " << device;
    all_requests += count;
  }
  EXPECT_EQ(all_requests, kThreads * kCallsPerThread);
  for (const auto& [op, count] : op_calls) {
    EXPECT_EQ(Value(text, "tensorops_received_bytes_total", {{"op", op}}), 3 * count) << op;
    EXPECT_EQ(Value(text, "tensorops_sent_bytes_total", {{"op", op}}), 5 * count) << op;
    for (const char* stage : {"decode", "queue", "execute", "encode"}) {
      EXPECT_EQ(
          Value(text, "tensorops_stage_duration_seconds_count", {{"op", op}, {"stage", stage}}),
          count)
          << op << " " << stage;
    }
  }
  for (const auto& [reason, count] : rejections) {
    EXPECT_EQ(Value(text, "tensorops_rejected_total", {{"reason", reason}}), count) << reason;
  }
  EXPECT_EQ(Value(text, "tensorops_streams_open", {}), kThreads * kCallsPerThread / 2);
}

// ---- The HTTP endpoint.

// ListeningSockets: the inodes of the TCP sockets this process has in LISTEN state, from /proc, so
// that a test can tell whether Create opened (or the destructor closed) a listener.
std::set<std::string> ListeningSockets() {
  std::set<std::string> own;
  if (DIR* fds = opendir("/proc/self/fd")) {
    while (dirent* entry = readdir(fds)) {
      char target[256];
      const std::string path = absl::StrCat("/proc/self/fd/", entry->d_name);
      const ssize_t length = readlink(path.c_str(), target, sizeof(target) - 1);
      if (length <= 0) continue;
      const absl::string_view link(target, length);
      if (absl::StartsWith(link, "socket:[") && absl::EndsWith(link, "]")) {
        own.insert(std::string(link.substr(8, link.size() - 9)));
      }
    }
    closedir(fds);
  }
  std::set<std::string> listening;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
      // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...; st 0A is LISTEN.
      if (fields.size() > 9 && fields[3] == "0A" && own.count(fields[9]) > 0) {
        listening.insert(fields[9]);
      }
    }
  }
  return listening;
}

// ListenOnLoopback binds and listens on 127.0.0.1 at a free port, returning the socket and port,
// so that the port is certainly in use while the socket is open.
std::pair<int, int> ListenOnLoopback() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0)
      << std::strerror(errno);
  EXPECT_EQ(listen(fd, 1), 0) << std::strerror(errno);
  socklen_t length = sizeof(address);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  return {fd, ntohs(address.sin_port)};
}

TEST(MetricsEndpointTest, ServesMetricsOverHttp) {
  const std::set<std::string> before = ListeningSockets();
  MetricsOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  std::unique_ptr<Metrics> metrics = CreateOrDie(options);
  ASSERT_NE(metrics, nullptr);
  ASSERT_GT(metrics->port(), 0);
  EXPECT_LE(metrics->port(), 65535);
  EXPECT_EQ(ListeningSockets().size(), before.size() + 1);

  metrics->CallFinished("gather", absl::StatusCode::kOk, "cpu", AllStages(absl::Milliseconds(1)),
                        64, 32);
  metrics->Rejected("queue_full");

  absl::StatusOr<HttpResponse> response = HttpGet(metrics->port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200) << response->body;
  EXPECT_EQ(Value(response->body, "tensorops_requests_total",
                  {{"op", "gather"}, {"code", "OK"}, {"device", "cpu"}}),
            1);
  EXPECT_EQ(Value(response->body, "tensorops_rejected_total", {{"reason", "queue_full"}}), 1);
  EXPECT_EQ(Value(response->body, "tensorops_stage_duration_seconds_count",
                  {{"op", "gather"}, {"stage", "execute"}}),
            1);
  EXPECT_EQ(TypeOf(response->body, "tensorops_stage_duration_seconds"), "histogram");
  // The endpoint serves the process metrics too.
  EXPECT_GT(Value(response->body, "process_open_fds", {}).value_or(0), 0);
  EXPECT_GT(Value(response->body, "process_resident_memory_bytes", {}).value_or(0), 0);

  // A second scrape sees what was recorded since.
  metrics->CallFinished("gather", absl::StatusCode::kOk, "cpu", {}, 0, 0);
  response = HttpGet(metrics->port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(Value(response->body, "tensorops_requests_total",
                  {{"op", "gather"}, {"code", "OK"}, {"device", "cpu"}}),
            2);

  // The destructor closes the listener.
  const int port = metrics->port();
  metrics.reset();
  EXPECT_EQ(ListeningSockets(), before);
  EXPECT_FALSE(HttpGet(port, "/metrics").ok());
}

TEST(MetricsEndpointTest, PortMinusOneCountsWithoutListening) {
  const std::set<std::string> before = ListeningSockets();
  MetricsOptions options;  // port -1 is the default
  ASSERT_EQ(options.port, -1);
  std::unique_ptr<Metrics> metrics = CreateOrDie(options);
  ASSERT_NE(metrics, nullptr);
  EXPECT_EQ(metrics->port(), -1);
  EXPECT_EQ(ListeningSockets(), before);
  metrics->Rejected("limit");
  EXPECT_EQ(Value(metrics->Scrape(), "tensorops_rejected_total", {{"reason", "limit"}}), 1);
}

TEST(MetricsEndpointTest, PortOutOfRangeIsInvalidArgument) {
  for (int port : {-2, 65536, 70000}) {
    MetricsOptions options;
    options.host = "127.0.0.1";
    options.port = port;
    absl::StatusOr<std::unique_ptr<Metrics>> metrics = Metrics::Create(options);
    EXPECT_EQ(metrics.status().code(), absl::StatusCode::kInvalidArgument) << port;
    EXPECT_THAT(std::string(metrics.status().message()), HasSubstr(std::to_string(port)));
  }
}

TEST(MetricsEndpointTest, MalformedHostIsInvalidArgument) {
  for (const std::string host : {"", "127.0.0.1,127.0.0.2", "127.0.0.1 ", "host/name"}) {
    MetricsOptions options;
    options.host = host;
    options.port = 0;
    absl::StatusOr<std::unique_ptr<Metrics>> metrics = Metrics::Create(options);
    EXPECT_EQ(metrics.status().code(), absl::StatusCode::kInvalidArgument) << host;
  }
}

TEST(MetricsEndpointTest, PortInUseIsUnavailable) {
  const auto [fd, port] = ListenOnLoopback();
  ASSERT_GT(port, 0);
  MetricsOptions options;
  options.host = "127.0.0.1";
  options.port = port;
  absl::StatusOr<std::unique_ptr<Metrics>> metrics = Metrics::Create(options);
  close(fd);
  EXPECT_EQ(metrics.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(metrics.status().message()), HasSubstr(absl::StrCat("127.0.0.1:", port)));
}

TEST(MetricsEndpointTest, SecondMetricsOnTheSamePortIsUnavailable) {
  MetricsOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  std::unique_ptr<Metrics> first = CreateOrDie(options);
  ASSERT_NE(first, nullptr);
  options.port = first->port();
  absl::StatusOr<std::unique_ptr<Metrics>> second = Metrics::Create(options);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  // The first one still serves.
  absl::StatusOr<HttpResponse> response = HttpGet(first->port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
}

TEST(MetricsEndpointTest, UnknownPathIsNotFound) {
  MetricsOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  std::unique_ptr<Metrics> metrics = CreateOrDie(options);
  ASSERT_NE(metrics, nullptr);
  absl::StatusOr<HttpResponse> response = HttpGet(metrics->port(), "/nothing-here");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 404);
}

}  // namespace
}  // namespace tensorops
