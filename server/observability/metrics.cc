#include "server/observability/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/memory/memory.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "server/core/rejection.h"
#include "server/observability/build_info.h"

namespace tensorops {
namespace {

// LabelValue returns `value` with every byte that does not belong to a well-formed UTF-8 sequence
// (stray continuation bytes, truncated or overlong sequences, surrogates, code points past
// U+10FFFF) replaced by '?'. The text format is UTF-8 and Prometheus fails the whole scrape on one
// invalid label value, so one odd reason string must not cost every other metric.
std::string LabelValue(std::string_view value) {
  std::string sanitized;
  sanitized.reserve(value.size());
  size_t i = 0;
  while (i < value.size()) {
    const auto lead = static_cast<unsigned char>(value[i]);
    size_t length = 0;
    char32_t code_point = 0;
    char32_t smallest = 0;  // below this, the sequence is overlong
    if (lead < 0x80) {
      length = 1;
      code_point = lead;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2;
      code_point = lead & 0x1F;
      smallest = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3;
      code_point = lead & 0x0F;
      smallest = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4;
      code_point = lead & 0x07;
      smallest = 0x10000;
    }
    bool well_formed = length > 0 && i + length <= value.size();
    for (size_t k = 1; well_formed && k < length; ++k) {
      const auto continuation = static_cast<unsigned char>(value[i + k]);
      well_formed = (continuation & 0xC0) == 0x80;
      code_point = (code_point << 6) | (continuation & 0x3F);
    }
    well_formed = well_formed && code_point >= smallest && code_point <= 0x10FFFF &&
                  !(code_point >= 0xD800 && code_point <= 0xDFFF);
    if (well_formed) {
      sanitized.append(value.substr(i, length));
      i += length;
    } else {
      sanitized.push_back('?');
      ++i;
    }
  }
  return sanitized;
}

enum Stage { kDecode, kQueue, kExecute, kEncode, kStageCount };
constexpr std::array<const char*, kStageCount> kStageNames = {"decode", "queue", "execute",
                                                              "encode"};

// StageBuckets: 1, 2 and 5 times each power of ten from 10 µs to 100 s (22 bounds), then +Inf. The
// steps of 2 to 2.5 keep a quantile estimate within that factor from a decode of a few bytes to a
// kernel over gigabytes. Each bound is the double nearest a short decimal, which prometheus-cpp
// prints with 16 significant digits as that decimal ("5e-05"); a doubling series does not survive
// that ("8.000000000000001e-05").
prometheus::Histogram::BucketBoundaries StageBuckets() {
  prometheus::Histogram::BucketBoundaries bounds;
  for (int exponent = -5; exponent <= 1; ++exponent) {
    for (int mantissa : {1, 2, 5}) {
      // One rounding (mantissa * 10^exponent as a decimal literal), not a product of roundings.
      bounds.push_back(std::stod(absl::StrFormat("%de%d", mantissa, exponent)));
    }
  }
  bounds.push_back(100.0);
  return bounds;
}

// CodeLabel: gRPC's upper snake name of `code`; "UNKNOWN" for a value outside the enum, which is
// what gRPC turns such a code into on the wire.
std::string CodeLabel(absl::StatusCode code) {
  std::string name = absl::StatusCodeToString(code);
  return name.empty() ? "UNKNOWN" : name;
}

// CallKey identifies the series one CallFinished touches. CallKeyRef is the same key over the
// caller's string_views, so that the cache lookup on every call allocates nothing.
struct CallKey {
  std::string op;
  absl::StatusCode code;
  std::string device;
};
struct CallKeyRef {
  std::string_view op;
  absl::StatusCode code;
  std::string_view device;
};

struct CallKeyHash {
  using is_transparent = void;
  size_t operator()(const CallKeyRef& key) const {
    return absl::HashOf(key.op, static_cast<int>(key.code), key.device);
  }
  size_t operator()(const CallKey& key) const {
    return (*this)(CallKeyRef{key.op, key.code, key.device});
  }
};

struct CallKeyEq {
  using is_transparent = void;
  static CallKeyRef Ref(const CallKey& key) { return {key.op, key.code, key.device}; }
  static CallKeyRef Ref(const CallKeyRef& key) { return key; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    const CallKeyRef x = Ref(a), y = Ref(b);
    return x.op == y.op && x.code == y.code && x.device == y.device;
  }
};

// CallSeries: the metrics one CallFinished updates. The pointers stay valid for the registry's
// lifetime: families own their metrics and nothing is ever removed.
// OkStageTotals sums one op's stage times over its calls that ended OK, for OpStatistics.
struct OkStageTotals {
  std::array<std::atomic<int64_t>, kStageCount> count{};
  std::array<std::atomic<int64_t>, kStageCount> nanos{};
};

struct CallSeries {
  prometheus::Counter* requests;
  // The op's OkStageTotals in a series of OK calls; null in the others.
  OkStageTotals* ok_stages;
  std::array<prometheus::Histogram*, kStageCount> stage_seconds;
  prometheus::Counter* received_bytes;
  prometheus::Counter* sent_bytes;
  // The call's total time, under its outcome (ok or failed), and when the op last finished one.
  prometheus::Counter* call_seconds;
  prometheus::Gauge* last_call;
};

// ReadFile returns the whole of a (/proc) file; empty when it cannot be read.
std::string ReadFile(const char* path) {
  std::ifstream file(path);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// ProcStat holds the fields of /proc/self/stat (proc(5)) that the process metrics report.
struct ProcStat {
  double cpu_seconds = 0;               // utime + stime
  double start_seconds_after_boot = 0;  // starttime
  double virtual_bytes = 0;             // vsize
  double resident_bytes = 0;            // rss pages * page size
};

// ReadProcStat parses /proc/self/stat; nullopt when it cannot be read or parsed. Fields are counted
// from the last ')', since the command name before it may hold spaces and parentheses.
std::optional<ProcStat> ReadProcStat() {
  const std::string text = ReadFile("/proc/self/stat");
  const size_t name_end = text.rfind(')');
  if (name_end == std::string::npos) return std::nullopt;
  // fields[0] is proc(5)'s field 3 (state), so field n is fields[n - 3].
  const std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(text).substr(name_end + 1), ' ', absl::SkipWhitespace());
  constexpr size_t kUtime = 14 - 3, kStime = 15 - 3, kStartTime = 22 - 3, kVsize = 23 - 3,
                   kRss = 24 - 3;
  int64_t utime = 0, stime = 0, start_time = 0, vsize = 0, rss = 0;
  if (fields.size() <= kRss || !absl::SimpleAtoi(fields[kUtime], &utime) ||
      !absl::SimpleAtoi(fields[kStime], &stime) ||
      !absl::SimpleAtoi(fields[kStartTime], &start_time) ||
      !absl::SimpleAtoi(fields[kVsize], &vsize) || !absl::SimpleAtoi(fields[kRss], &rss)) {
    return std::nullopt;
  }
  const double ticks_per_second = static_cast<double>(sysconf(_SC_CLK_TCK));
  return ProcStat{
      .cpu_seconds = static_cast<double>(utime + stime) / ticks_per_second,
      .start_seconds_after_boot = static_cast<double>(start_time) / ticks_per_second,
      .virtual_bytes = static_cast<double>(vsize),
      .resident_bytes = static_cast<double>(rss) * static_cast<double>(sysconf(_SC_PAGESIZE))};
}

// BootTimeSeconds reads the boot time (Unix seconds) from /proc/stat's btime line; nullopt when
// there is none.
std::optional<double> BootTimeSeconds() {
  for (absl::string_view line : absl::StrSplit(ReadFile("/proc/stat"), '\n')) {
    int64_t seconds = 0;
    if (absl::ConsumePrefix(&line, "btime ") && absl::SimpleAtoi(line, &seconds)) {
      return static_cast<double>(seconds);
    }
  }
  return std::nullopt;
}

// Gauge and Counter are families of one unlabelled series.
prometheus::MetricFamily Gauge(std::string name, std::string help, double value) {
  prometheus::ClientMetric metric;
  metric.gauge.value = value;
  return {std::move(name), std::move(help), prometheus::MetricType::Gauge, {metric}};
}
prometheus::MetricFamily Counter(std::string name, std::string help, double value) {
  prometheus::ClientMetric metric;
  metric.counter.value = value;
  return {std::move(name), std::move(help), prometheus::MetricType::Counter, {metric}};
}

// ProcessCollector serves the process metrics every Prometheus client library exports under the
// same names (process_cpu_seconds_total, process_resident_memory_bytes, ...), read from /proc at
// each scrape. A metric whose source cannot be read is left out of that scrape.
class ProcessCollector final : public prometheus::Collectable {
 public:
  ProcessCollector() {
    const std::optional<ProcStat> stat = ReadProcStat();
    const std::optional<double> boot = BootTimeSeconds();
    if (stat.has_value() && boot.has_value()) {
      start_time_seconds_ = *boot + stat->start_seconds_after_boot;
    }
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> families;
    if (const std::optional<ProcStat> stat = ReadProcStat(); stat.has_value()) {
      families.push_back(Counter("process_cpu_seconds_total",
                                 "Total user and system CPU time spent in seconds.",
                                 stat->cpu_seconds));
      families.push_back(Gauge("process_resident_memory_bytes", "Resident memory size in bytes.",
                               stat->resident_bytes));
      families.push_back(Gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                               stat->virtual_bytes));
    }
    if (start_time_seconds_.has_value()) {
      families.push_back(Gauge("process_start_time_seconds",
                               "Start time of the process since unix epoch in seconds.",
                               *start_time_seconds_));
    }
    std::error_code error;
    auto fds = std::filesystem::directory_iterator("/proc/self/fd", error);
    if (!error) {
      // The count includes the descriptor that lists the folder, as other clients' counts do.
      const auto open_fds = std::distance(std::filesystem::begin(fds), std::filesystem::end(fds));
      families.push_back(Gauge("process_open_fds", "Number of open file descriptors.",
                               static_cast<double>(open_fds)));
    }
    if (rlimit limit; getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
      families.push_back(Gauge("process_max_fds", "Maximum number of open file descriptors.",
                               static_cast<double>(limit.rlim_cur)));
    }
    return families;
  }

 private:
  // Unix seconds; nullopt when /proc/stat or /proc/self/stat could not be read at Create.
  std::optional<double> start_time_seconds_;
};

// OneGauge is a gauge family of one series, with `labels`.
prometheus::MetricFamily OneGauge(std::string name, std::string help,
                                  const std::map<std::string, std::string>& labels, int64_t value) {
  prometheus::ClientMetric metric;
  for (const auto& [label, label_value] : labels) metric.label.push_back({label, label_value});
  metric.gauge.value = static_cast<double>(value);
  return {std::move(name), std::move(help), prometheus::MetricType::Gauge, {metric}};
}

// StoreFamilies are the tensor store's gauges at the moment `figures` describes.
std::vector<prometheus::MetricFamily> StoreFamilies(const StoreFigures& figures) {
  const std::map<std::string, std::string> device = {{"device", LabelValue(figures.device)}};
  std::vector<prometheus::MetricFamily> families = {
      OneGauge("tensorops_store_tensors", "Tensors in the tensor store, by device.", device,
               figures.tensors),
      OneGauge("tensorops_store_bytes",
               "Bytes the tensor store holds (stored tensors, uploads in flight, replaced "
               "values still read), by device.",
               device, figures.used_bytes),
      OneGauge("tensorops_store_limit_bytes", "The tensor store's limit (--store_memory_bytes).",
               {}, figures.limit_bytes)};
  if (!figures.durable.has_value()) return families;
  const DurableStoreStats& durable = *figures.durable;
  if (durable.snapshot_time != absl::InfinitePast()) {
    families.push_back(Gauge("tensorops_store_snapshot_timestamp_seconds",
                             "When the store's last snapshot was written (or the one loaded at "
                             "start-up), in Unix seconds.",
                             static_cast<double>(absl::ToUnixMicros(durable.snapshot_time)) / 1e6));
    families.push_back(Gauge("tensorops_store_snapshot_bytes", "The last snapshot's size.",
                             static_cast<double>(durable.snapshot_bytes)));
  }
  families.push_back(Gauge("tensorops_store_log_bytes",
                           "Bytes of store log since the last snapshot (what recovery replays).",
                           static_cast<double>(durable.log_bytes)));
  families.push_back(Gauge("tensorops_store_log_queued_bytes",
                           "Bytes of in-place updates acknowledged and not yet written to the "
                           "store's log (with --store_sync=interval or none).",
                           static_cast<double>(durable.queued_update_bytes)));
  families.push_back(Counter("tensorops_store_fsyncs_total", "fsyncs of the store's log.",
                             static_cast<double>(durable.fsyncs)));
  families.push_back(Counter("tensorops_store_fsync_seconds_total",
                             "Time spent in fsyncs of the store's log.",
                             absl::ToDoubleSeconds(durable.fsync_time)));
  families.push_back(Gauge("tensorops_store_recovery_seconds",
                           "How long the store's recovery at start-up took.",
                           absl::ToDoubleSeconds(durable.recovery_time)));
  return families;
}

// WatchedCollector serves families made at each scrape by the function the server gave Watch,
// from figures of objects the metrics do not own (the tensor store, the calls' memory budget);
// without one, they are left out.
class WatchedCollector final : public prometheus::Collectable {
 public:
  using Families = std::function<std::vector<prometheus::MetricFamily>()>;

  // Watch(nullptr) returns once no scrape is still calling the old function.
  void Watch(Families families) {
    absl::MutexLock lock(&mu_);
    families_ = std::move(families);
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    // Held while the function runs, so that Watch(nullptr) returns only once no scrape can still
    // be reading what the function reads.
    absl::MutexLock lock(&mu_);
    if (!families_) return {};
    return families_();
  }

 private:
  mutable absl::Mutex mu_;
  Families families_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

class Metrics::Impl {
 public:
  // Registers every family; throws only what prometheus-cpp throws for a malformed name (which
  // these fixed names are not) and std::bad_alloc.
  Impl()
      : registry_(std::make_shared<prometheus::Registry>()),
        requests_(prometheus::BuildCounter()
                      .Name("tensorops_requests_total")
                      .Help("Finished calls, by op, final status code and device.")
                      .Register(*registry_)),
        stage_seconds_(prometheus::BuildHistogram()
                           .Name("tensorops_stage_duration_seconds")
                           .Help("Time each stage of a call took (decode, queue, execute, "
                                 "encode), by op; a stage a call never reached is not observed.")
                           .Register(*registry_)),
        received_bytes_(prometheus::BuildCounter()
                            .Name("tensorops_received_bytes_total")
                            .Help("Request message bytes of finished calls, by op.")
                            .Register(*registry_)),
        sent_bytes_(prometheus::BuildCounter()
                        .Name("tensorops_sent_bytes_total")
                        .Help("Response message bytes of finished calls, by op.")
                        .Register(*registry_)),
        call_seconds_(prometheus::BuildCounter()
                          .Name("tensorops_call_seconds_total")
                          .Help("Total time of finished calls (the sum of their stages), by op "
                                "and outcome (ok, failed).")
                          .Register(*registry_)),
        last_call_(prometheus::BuildGauge()
                       .Name("tensorops_last_call_timestamp_seconds")
                       .Help("Unix time the op last finished a call.")
                       .Register(*registry_)),
        rejected_(prometheus::BuildCounter()
                      .Name("tensorops_rejected_total")
                      .Help("Calls refused before execution, by reason.")
                      .Register(*registry_)),
        in_flight_(prometheus::BuildGauge()
                       .Name("tensorops_calls_in_flight")
                       .Help("Calls executing now.")
                       .Register(*registry_)
                       .Add({})),
        queued_(prometheus::BuildGauge()
                    .Name("tensorops_calls_queued")
                    .Help("Calls waiting in the scheduler's queue now.")
                    .Register(*registry_)
                    .Add({})),
        streams_open_(prometheus::BuildGauge()
                          .Name("tensorops_streams_open")
                          .Help("RunStream streams open now.")
                          .Register(*registry_)
                          .Add({})),
        batch_size_(prometheus::BuildHistogram()
                        .Name("tensorops_batch_size")
                        .Help("Calls per batch a worker took from the queue, by the device "
                              "that ran them.")
                        .Register(*registry_)),
        device_fallbacks_(prometheus::BuildCounter()
                              .Name("tensorops_device_fallbacks_total")
                              .Help("Calls the GPU failed (out of memory, failed launch or copy) "
                                    "that re-ran on the CPU.")
                              .Register(*registry_)
                              .Add({})),
        device_stages_(prometheus::BuildHistogram()
                           .Name("tensorops_device_stage_duration_seconds")
                           .Help("Where each device batch's time went: staging (packing its "
                                 "inputs into pinned memory, on the host), copy_in, kernels and "
                                 "copy_out (CUDA events on its stream).")
                           .Register(*registry_)),
        device_memory_(prometheus::BuildGauge()
                           .Name("tensorops_device_memory_bytes")
                           .Help("Memory of the GPU executor, sampled as each device batch "
                                 "starts: pinned staging allocated and in use, device in use.")
                           .Register(*registry_)),
        pinned_allocated_(device_memory_.Add({{"kind", "pinned_allocated"}})),
        pinned_in_use_(device_memory_.Add({{"kind", "pinned_in_use"}})),
        device_in_use_(device_memory_.Add({{"kind", "device_in_use"}})),
        stage_buckets_(StageBuckets()),
        process_(std::make_shared<ProcessCollector>()),
        store_(std::make_shared<WatchedCollector>()),
        call_bytes_(std::make_shared<WatchedCollector>()) {
    const BuildInfo& build = ThisBuild();
    prometheus::BuildGauge()
        .Name("tensorops_build_info")
        .Help(
            "Always 1; the labels say which build is running (version, git revision at "
            "configure time, build type, compiler).")
        .Register(*registry_)
        .Add({{"version", LabelValue(build.version)},
              {"revision", LabelValue(build.revision)},
              {"build_type", LabelValue(build.build_type)},
              {"compiler", LabelValue(build.compiler)}})
        .Set(1);
    // The reasons the service rejects calls for exist at 0 from the start, so that an alert on
    // rate(tensorops_rejected_total[5m]) works before the first rejection.
    for (const Rejection why : kAllRejections) {
      rejected_.Add({{"reason", std::string(RejectionLabel(why))}});
    }
  }

  // Listen starts the endpoint on `address` ("host:port"). UNAVAILABLE naming the address when
  // civetweb cannot bind it.
  absl::Status Listen(const std::string& address) {
    try {
      exposer_ = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/2);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrFormat(
          "metrics endpoint cannot listen on %s (port in use, address not on this machine or "
          "unknown host): %s",
          address, e.what()));
    }
    exposer_->RegisterCollectable(registry_);
    exposer_->RegisterCollectable(process_);
    exposer_->RegisterCollectable(store_);
    exposer_->RegisterCollectable(call_bytes_);
    const std::vector<int> ports = exposer_->GetListeningPorts();
    if (ports.size() != 1) {
      return absl::InternalError(absl::StrFormat(
          "metrics endpoint on %s listens on %d ports, expected 1", address, ports.size()));
    }
    port_ = ports[0];
    return absl::OkStatus();
  }

  int port() const { return port_; }

  void CallFinished(std::string_view op, absl::StatusCode code, std::string_view device,
                    const CallStages& stages, int64_t request_bytes, int64_t response_bytes) {
    const CallSeries series = SeriesFor(CallKeyRef{op, code, device});
    series.requests->Increment();
    const std::array<const std::optional<absl::Duration>*, kStageCount> durations = {
        &stages.decode, &stages.queue, &stages.execute, &stages.encode};
    for (int stage = 0; stage < kStageCount; ++stage) {
      const std::optional<absl::Duration>& duration = *durations[stage];
      if (!duration.has_value()) continue;
      const double seconds = absl::ToDoubleSeconds(*duration);
      if (std::isinf(seconds)) continue;
      series.stage_seconds[stage]->Observe(seconds < 0 ? 0.0 : seconds);
      if (series.ok_stages != nullptr) {
        series.ok_stages->count[stage].fetch_add(1, std::memory_order_relaxed);
        series.ok_stages->nanos[stage].fetch_add(
            std::max<int64_t>(0, absl::ToInt64Nanoseconds(*duration)), std::memory_order_relaxed);
      }
    }
    if (request_bytes > 0) series.received_bytes->Increment(static_cast<double>(request_bytes));
    if (response_bytes > 0) series.sent_bytes->Increment(static_cast<double>(response_bytes));
    double total = 0;
    for (const std::optional<absl::Duration>* duration : durations) {
      if (!duration->has_value()) continue;
      const double seconds = absl::ToDoubleSeconds(**duration);
      if (std::isfinite(seconds) && seconds > 0) total += seconds;
    }
    series.call_seconds->Increment(total);
    series.last_call->Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  }

  OpStatistics Statistics(std::string_view op) const {
    const std::string label = LabelValue(op);
    const auto value_of = [](const prometheus::ClientMetric& metric, std::string_view name) {
      for (const prometheus::ClientMetric::Label& pair : metric.label) {
        if (pair.name == name) return std::string_view(pair.value);
      }
      return std::string_view();
    };
    OpStatistics statistics;
    for (const prometheus::MetricFamily& family : requests_.Collect()) {
      for (const prometheus::ClientMetric& metric : family.metric) {
        if (value_of(metric, "op") != label) continue;
        const auto calls = static_cast<int64_t>(metric.counter.value);
        (value_of(metric, "code") == "OK" ? statistics.ok.count : statistics.failed.count) += calls;
      }
    }
    for (const prometheus::MetricFamily& family : call_seconds_.Collect()) {
      for (const prometheus::ClientMetric& metric : family.metric) {
        if (value_of(metric, "op") != label) continue;
        const absl::Duration total = absl::Seconds(metric.counter.value);
        (value_of(metric, "outcome") == "ok" ? statistics.ok.total : statistics.failed.total) +=
            total;
      }
    }
    OpStatistics::Totals* const stages[kStageCount] = {&statistics.decode, &statistics.queue,
                                                       &statistics.execute, &statistics.encode};
    {
      absl::ReaderMutexLock lock(&series_mu_);
      if (const auto it = ok_stages_.find(label); it != ok_stages_.end()) {
        for (int stage = 0; stage < kStageCount; ++stage) {
          stages[stage]->count = it->second->count[stage].load(std::memory_order_relaxed);
          stages[stage]->total =
              absl::Nanoseconds(it->second->nanos[stage].load(std::memory_order_relaxed));
        }
      }
    }
    for (const prometheus::MetricFamily& family : last_call_.Collect()) {
      for (const prometheus::ClientMetric& metric : family.metric) {
        if (value_of(metric, "op") != label) continue;
        statistics.last_call = absl::UnixEpoch() + absl::Seconds(metric.gauge.value);
      }
    }
    return statistics;
  }

  void Rejected(std::string_view reason) {
    rejected_.Add({{"reason", LabelValue(reason)}}).Increment();
  }

  void SetInFlight(int64_t calls) { in_flight_.Set(static_cast<double>(calls)); }
  void SetQueued(int64_t calls) { queued_.Set(static_cast<double>(calls)); }
  void StreamOpened() { streams_open_.Increment(); }
  void StreamClosed() { streams_open_.Decrement(); }

  void BatchTaken(std::string_view device, int64_t calls) {
    // Powers of two up to 1024: batch sizes are small counts, and max_batch is one of them or
    // near one.
    static const prometheus::Histogram::BucketBoundaries kBatchBuckets = {
        1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
    batch_size_.Add({{"device", LabelValue(device)}}, kBatchBuckets)
        .Observe(static_cast<double>(calls));
  }

  void DeviceFallback() { device_fallbacks_.Increment(); }
  void DeviceBatchStages(const DeviceStageTimes& stages) {
    const std::pair<const char*, absl::Duration> observed[] = {{"staging", stages.staging},
                                                               {"copy_in", stages.copy_in},
                                                               {"kernels", stages.kernels},
                                                               {"copy_out", stages.copy_out}};
    for (const auto& [stage, duration] : observed) {
      device_stages_.Add({{"stage", stage}}, stage_buckets_)
          .Observe(std::max(0.0, absl::ToDoubleSeconds(duration)));
    }
  }
  void SetDeviceMemory(int64_t pinned_allocated, int64_t pinned_in_use, int64_t device_in_use) {
    pinned_allocated_.Set(static_cast<double>(pinned_allocated));
    pinned_in_use_.Set(static_cast<double>(pinned_in_use));
    device_in_use_.Set(static_cast<double>(device_in_use));
  }

  std::string Scrape() const {
    std::vector<prometheus::MetricFamily> families = registry_->Collect();
    for (prometheus::MetricFamily& family : process_->Collect()) {
      families.push_back(std::move(family));
    }
    for (const auto& watched : {store_, call_bytes_}) {
      for (prometheus::MetricFamily& family : watched->Collect()) {
        families.push_back(std::move(family));
      }
    }
    return prometheus::TextSerializer().Serialize(families);
  }

  void WatchStore(std::function<StoreFigures()> figures) {
    if (!figures) {
      store_->Watch(nullptr);
      return;
    }
    store_->Watch([figures = std::move(figures)] { return StoreFamilies(figures()); });
  }

  void WatchCallBytes(std::function<int64_t()> call_bytes) {
    if (!call_bytes) {
      call_bytes_->Watch(nullptr);
      return;
    }
    call_bytes_->Watch([call_bytes = std::move(call_bytes)] {
      return std::vector<prometheus::MetricFamily>{OneGauge(
          "tensorops_call_bytes_in_flight",
          "Bytes the op calls in flight hold from admission until they are done: their requests "
          "and planned results, as --max_memory_bytes counts them (counted without a limit too).",
          {}, call_bytes())};
    });
  }

 private:
  // SeriesFor returns the cached series of `key`, creating them on the first call with it: one
  // reader-locked lookup per call instead of seven Family::Add (each a std::map of labels built
  // and looked up under the family's mutex).
  CallSeries SeriesFor(const CallKeyRef& key) ABSL_LOCKS_EXCLUDED(series_mu_) {
    {
      absl::ReaderMutexLock lock(&series_mu_);
      auto it = series_.find(key);
      if (it != series_.end()) return it->second;
    }
    // Built outside series_mu_: Family::Add is thread-safe and returns the existing metric for
    // labels it has seen, so threads racing here build identical pointers and the first insert
    // wins harmlessly.
    const std::string op = LabelValue(key.op);
    CallSeries series;
    series.requests = &requests_.Add(
        {{"op", op}, {"code", CodeLabel(key.code)}, {"device", LabelValue(key.device)}});
    for (int stage = 0; stage < kStageCount; ++stage) {
      series.stage_seconds[stage] =
          &stage_seconds_.Add({{"op", op}, {"stage", kStageNames[stage]}}, stage_buckets_);
    }
    series.received_bytes = &received_bytes_.Add({{"op", op}});
    series.sent_bytes = &sent_bytes_.Add({{"op", op}});
    series.call_seconds = &call_seconds_.Add(
        {{"op", op}, {"outcome", key.code == absl::StatusCode::kOk ? "ok" : "failed"}});
    series.last_call = &last_call_.Add({{"op", op}});
    absl::MutexLock lock(&series_mu_);
    if (key.code == absl::StatusCode::kOk) {
      std::unique_ptr<OkStageTotals>& totals = ok_stages_[op];
      if (totals == nullptr) totals = std::make_unique<OkStageTotals>();
      series.ok_stages = totals.get();
    } else {
      series.ok_stages = nullptr;
    }
    series_.try_emplace(CallKey{std::string(key.op), key.code, std::string(key.device)}, series);
    return series;
  }

  const std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& stage_seconds_;
  prometheus::Family<prometheus::Counter>& received_bytes_;
  prometheus::Family<prometheus::Counter>& sent_bytes_;
  prometheus::Family<prometheus::Counter>& call_seconds_;
  prometheus::Family<prometheus::Gauge>& last_call_;
  prometheus::Family<prometheus::Counter>& rejected_;
  prometheus::Gauge& in_flight_;
  prometheus::Gauge& queued_;
  prometheus::Gauge& streams_open_;
  prometheus::Family<prometheus::Histogram>& batch_size_;
  prometheus::Counter& device_fallbacks_;
  prometheus::Family<prometheus::Histogram>& device_stages_;
  prometheus::Family<prometheus::Gauge>& device_memory_;
  prometheus::Gauge& pinned_allocated_;
  prometheus::Gauge& pinned_in_use_;
  prometheus::Gauge& device_in_use_;
  const prometheus::Histogram::BucketBoundaries stage_buckets_;
  // Shared with the endpoint, which holds collectables by weak_ptr.
  const std::shared_ptr<ProcessCollector> process_;
  const std::shared_ptr<WatchedCollector> store_;
  const std::shared_ptr<WatchedCollector> call_bytes_;

  mutable absl::Mutex series_mu_;
  absl::flat_hash_map<CallKey, CallSeries, CallKeyHash, CallKeyEq> series_
      ABSL_GUARDED_BY(series_mu_);
  // Per op label: the stage times of its OK calls (OpStatistics). Never erased, so the series
  // keep their pointers.
  absl::flat_hash_map<std::string, std::unique_ptr<OkStageTotals>> ok_stages_
      ABSL_GUARDED_BY(series_mu_);

  // Last, so that it is destroyed first: the endpoint's threads stop serving the registry before
  // the registry and its families go away.
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = -1;
};

namespace {

// ValidHost: letters, digits and ".-_:[]" — enough for IPv4/IPv6 literals and host names, and
// nothing civetweb would read as syntax of its listening_ports option (',' separates addresses;
// a trailing 's' or 'r' after the port would switch on SSL or redirects, but the port is ours).
bool ValidHost(std::string_view host) {
  if (host.empty()) return false;
  for (char c : host) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_' || c == ':' ||
                         c == '[' || c == ']';
    if (!allowed) return false;
  }
  return true;
}

// ListenAddress: civetweb's "host:port", with an IPv6 literal in brackets.
std::string ListenAddress(const std::string& host, int port) {
  const bool bare_ipv6 = host.find(':') != std::string::npos && host.front() != '[';
  return bare_ipv6 ? absl::StrFormat("[%s]:%d", host, port) : absl::StrFormat("%s:%d", host, port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Create(const MetricsOptions& options) {
  if (options.port < -1 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("metrics port %d is outside -1..65535", options.port));
  }
  const bool serve = options.port >= 0;
  if (serve && !ValidHost(options.host)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "metrics host \"%s\" is not an address or host name (allowed: letters, digits, \".-_:[]\")",
        absl::CHexEscape(options.host)));
  }
  try {
    auto impl = std::make_unique<Impl>();
    if (serve) {
      absl::Status listening = impl->Listen(ListenAddress(options.host, options.port));
      if (!listening.ok()) return listening;
    }
    return absl::WrapUnique(new Metrics(std::move(impl)));
  } catch (const std::exception& e) {
    // Not expected (the names are fixed and valid); kept so that Create never throws.
    return absl::InternalError(absl::StrFormat("metrics: %s", e.what()));
  }
}

Metrics::Metrics(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Metrics::~Metrics() = default;

int Metrics::port() const { return impl_->port(); }

void Metrics::CallFinished(std::string_view op, absl::StatusCode code, std::string_view device,
                           const CallStages& stages, int64_t request_bytes,
                           int64_t response_bytes) {
  impl_->CallFinished(op, code, device, stages, request_bytes, response_bytes);
}

void Metrics::Rejected(std::string_view reason) { impl_->Rejected(reason); }

void Metrics::SetInFlight(int64_t calls) { impl_->SetInFlight(calls); }

void Metrics::SetQueued(int64_t calls) { impl_->SetQueued(calls); }

void Metrics::StreamOpened() { impl_->StreamOpened(); }
void Metrics::BatchTaken(std::string_view device, int64_t calls) {
  impl_->BatchTaken(device, calls);
}

void Metrics::StreamClosed() { impl_->StreamClosed(); }

void Metrics::DeviceFallback() { impl_->DeviceFallback(); }

void Metrics::DeviceBatchStages(const DeviceStageTimes& stages) {
  impl_->DeviceBatchStages(stages);
}

void Metrics::SetDeviceMemory(int64_t pinned_allocated, int64_t pinned_in_use,
                              int64_t device_in_use) {
  impl_->SetDeviceMemory(pinned_allocated, pinned_in_use, device_in_use);
}

std::string Metrics::Scrape() const { return impl_->Scrape(); }

OpStatistics Metrics::Statistics(std::string_view op) const { return impl_->Statistics(op); }

void Metrics::WatchStore(std::function<StoreFigures()> figures) {
  impl_->WatchStore(std::move(figures));
}

void Metrics::WatchCallBytes(std::function<int64_t()> call_bytes) {
  impl_->WatchCallBytes(std::move(call_bytes));
}

}  // namespace tensorops
