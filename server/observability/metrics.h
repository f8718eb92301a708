// Metrics: the server's Prometheus metrics (finished calls by op, status code and device, stage
// latency histograms, message bytes, scheduler gauges, open streams, rejections) and, optionally,
// an HTTP endpoint that serves them at /metrics for Prometheus to scrape.
//
//   MetricsOptions options;
//   options.port = 9464;
//   absl::StatusOr<std::unique_ptr<Metrics>> metrics = Metrics::Create(options);
//   if (!metrics.ok()) return Fail(metrics.status());
//
//   CallStages stages;
//   stages.decode = absl::Microseconds(40);
//   stages.queue = absl::Microseconds(15);
//   stages.execute = absl::Milliseconds(3);
//   stages.encode = absl::Microseconds(60);
//   (*metrics)->CallFinished("gather", absl::StatusCode::kOk, "cpu", stages,
//                            /*request_bytes=*/4096, /*response_bytes=*/1024);
//   (*metrics)->Rejected("queue_full");
//
// prometheus-cpp stays behind this header: callers include no prometheus or civetweb headers.
#ifndef TENSOROPS_SERVER_OBSERVABILITY_METRICS_H_
#define TENSOROPS_SERVER_OBSERVABILITY_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/cuda/executor.h"
#include "server/store/durable_store.h"

namespace tensorops {

// MetricsOptions: where to serve /metrics.
struct MetricsOptions {
  // Interface of the HTTP endpoint: an IPv4 address or a host name. Default all interfaces, so
  // that Prometheus in a cluster can scrape. Letters, digits and ".-_:[]" only (civetweb reads
  // ',' as a list of addresses); anything else, or an empty host, gets INVALID_ARGUMENT when an
  // endpoint is asked for. An IPv6 literal ("::1" or "[::1]") is passed on in brackets, but the
  // civetweb that Debian ships lacks IPv6 and fails it with UNAVAILABLE.
  std::string host = "0.0.0.0";
  // TCP port of the endpoint; -1 = no endpoint (metrics are still counted and Scrape() works);
  // 0 = any free port (read back with Metrics::port()). Valid: -1..65535; anything else gets
  // INVALID_ARGUMENT.
  int port = -1;
};

// CallStages: how long each stage of one call took; an unset stage was not reached.
struct CallStages {
  std::optional<absl::Duration> decode;   // wire decode + validation + planning
  std::optional<absl::Duration> queue;    // waiting for an executor
  std::optional<absl::Duration> execute;  // the kernel
  std::optional<absl::Duration> encode;   // from the result being ready to the reply being sent
};

// Metrics owns a Prometheus registry with the families below and, when asked for, the HTTP
// endpoint (civetweb threads, via prometheus-cpp's Exposer) that serves it. All methods are
// thread-safe and meant to be called from many gRPC threads at once. CallFinished costs one
// reader-locked cache lookup (a writer lock only for a new op/code/device combination) plus
// prometheus-cpp's short per-histogram mutex; Rejected one Family::Add (a map lookup under the
// family's mutex). The recording methods throw nothing but std::bad_alloc. Not copyable or movable;
// the destructor stops the endpoint (waiting for a scrape in progress) before anything it serves
// goes away. With an endpoint the destructor takes up to 2 s: civetweb 1.15's mg_stop waits out its
// 2 s poll quantum (civetweb/civetweb#1163, fixed after 1.15), so destroy it off any
// latency-critical path.
//
// Families (every name but the process_* ones starts with tensorops_; label values are sanitized
// to valid UTF-8, since Prometheus rejects a whole scrape over one invalid value):
//   tensorops_requests_total{op,code,device}          counter, one per CallFinished
//   tensorops_stage_duration_seconds{op,stage}        histogram, stage = decode|queue|execute|
//                                                      encode; buckets 1, 2, 5 * 10^k s from
//                                                      10 µs to 100 s, then +Inf
//   tensorops_received_bytes_total{op}                counter, request message bytes
//   tensorops_sent_bytes_total{op}                    counter, response message bytes
//   tensorops_call_seconds_total{op,outcome}          counter, the calls' total time (the sum of
//                                                     their stages), outcome = ok|failed
//   tensorops_last_call_timestamp_seconds{op}         gauge, Unix time of the op's last call
//   tensorops_rejected_total{reason}                  counter, one per Rejected
//   tensorops_calls_in_flight                         gauge, as last set
//   tensorops_calls_queued                            gauge, as last set
//   tensorops_streams_open                            gauge, StreamOpened minus StreamClosed
//   tensorops_batch_size{device}                      histogram, calls per batch and device
//   tensorops_device_fallbacks_total                  counter, one per DeviceFallback
//   tensorops_device_stage_duration_seconds{stage}    histogram, one device batch's staging
//                                                     (packing inputs into pinned memory),
//                                                     copy_in, kernels and copy_out; the stage
//                                                     buckets
//   tensorops_device_memory_bytes{kind}               gauge, kind = pinned_allocated|
//                                                      pinned_in_use|device_in_use
//   tensorops_store_tensors{device}                   gauge, tensors in the tensor store
//   tensorops_store_bytes{device}                     gauge, bytes the store holds
//   tensorops_store_limit_bytes                       gauge, --store_memory_bytes
//                                                     (the three read at each scrape through
//                                                     WatchStore; absent without it)
//   tensorops_store_snapshot_timestamp_seconds        gauge, when the last snapshot was written
//                                                     (or the one loaded at start-up)
//   tensorops_store_snapshot_bytes                    gauge, its size
//   tensorops_store_log_bytes                         gauge, log since it (what recovery replays)
//   tensorops_store_fsyncs_total                      counter, fsyncs of the log
//   tensorops_store_fsync_seconds_total               counter, their time
//   tensorops_store_recovery_seconds                  gauge, the recovery at start-up
//                                                     (the six with --store_dir only)
//   tensorops_call_bytes_in_flight                    gauge, request and planned result bytes
//                                                     of the op calls in flight (read at each
//                                                     scrape through WatchCallBytes; absent
//                                                     without it)
//   tensorops_build_info{version,revision,build_type,compiler}
//                                                     gauge, always 1
//                                                     (server/observability/build_info.h)
//   process_cpu_seconds_total                         counter, user + system CPU seconds
//   process_resident_memory_bytes                     gauge, resident set size
//   process_virtual_memory_bytes                      gauge, virtual memory size
//   process_start_time_seconds                        gauge, Unix time the process started
//   process_open_fds, process_max_fds                 gauges, open descriptors and their limit
// The process_* families are Prometheus's standard names, read from /proc at each scrape (Linux
// only; one whose source cannot be read is left out of that scrape).
//
// A call's series appear with its first CallFinished: all four stage histograms of its op at once
// (empty ones at 0), so that rate() sees them from the start. The documented Rejected reasons are
// present at 0 from Create on; other reasons appear when first counted.
//
// Cardinality: every distinct op, device and reason string is a series forever (nothing is ever
// removed). Pass only values from a fixed set; never a client-supplied string such as an unknown
// method name.
//
// Callers must not rely on a scrape being a consistent snapshot across series: a scrape running
// during CallFinished may see the request counted and its histograms not yet.
// StoreFigures are the tensor store's gauges at one moment.
struct StoreFigures {
  int64_t tensors = 0;
  int64_t used_bytes = 0;
  int64_t limit_bytes = 0;
  std::string device;
  // With --store_dir: its snapshots, log and recovery (durable_store.h).
  std::optional<DurableStoreStats> durable;
};

// OpStatistics is what the metrics hold of one op's finished calls, summed over status codes and
// devices (KServe's ModelStatistics reports it).
struct OpStatistics {
  struct Totals {
    int64_t count = 0;
    absl::Duration total;
  };
  // Calls that ended OK and the others, with their total time.
  Totals ok;
  Totals failed;
  // Each stage of the calls that ended OK (Triton's statistics count successes only; failed
  // calls are in `failed`). tensorops_stage_duration_seconds counts every call's.
  Totals decode;
  Totals queue;
  Totals execute;
  Totals encode;
  // When the op last finished a call; absent before the first.
  std::optional<absl::Time> last_call;
};

class Metrics {
 public:
  // Create registers every metric and, with options.port >= 0, starts the HTTP endpoint serving
  // the Prometheus text format at /metrics. INVALID_ARGUMENT for a port outside -1..65535 or (with
  // an endpoint) a host of the wrong form; UNAVAILABLE when the endpoint cannot bind, naming the
  // address (port in use, address not on this machine, unknown host). Never throws.
  static absl::StatusOr<std::unique_ptr<Metrics>> Create(const MetricsOptions& options);

  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;
  ~Metrics();

  // port: the bound port (the chosen one for 0), -1 without an endpoint.
  int port() const;

  // CallFinished counts one finished call: `op` like "gather" (or "server_info"), `code` its final
  // status, `device` "cpu" or "cuda" ("none" when it never reached a device), stage latencies,
  // and the request/response message sizes in bytes. `code` is labelled with its upper snake name
  // ("OK", "INVALID_ARGUMENT"); a value outside absl::StatusCode's range as "UNKNOWN", as gRPC
  // does. A negative stage duration counts as 0 and an infinite one is left out (it would turn the
  // histogram's sum into +Inf for good); negative byte counts add nothing.
  void CallFinished(std::string_view op, absl::StatusCode code, std::string_view device,
                    const CallStages& stages, int64_t request_bytes, int64_t response_bytes);

  // Rejected counts a call refused before execution, by reason: "queue_full", "limit",
  // "unauthenticated", "shutting_down", "deadline_exceeded" (expired while queued), "cancelled"
  // (client went away while queued). Any other reason string is accepted too (see Cardinality).
  void Rejected(std::string_view reason);

  // SetInFlight and SetQueued set the scheduler's gauges: calls executing now and calls waiting
  // in the queue.
  void SetInFlight(int64_t calls);
  void SetQueued(int64_t calls);

  // StreamOpened and StreamClosed move the gauge of open RunStream streams up and down by one;
  // call each exactly once per stream (the gauge is not clamped at 0).
  void StreamOpened();
  void StreamClosed();

  // BatchTaken observes the `calls` calls of one batch a worker took from the queue that ran on
  // `device` ("cpu", "cuda"), in the tensorops_batch_size histogram.
  void BatchTaken(std::string_view device, int64_t calls);

  // DeviceFallback counts a call the GPU failed and the CPU re-ran.
  void DeviceFallback();
  // DeviceBatchStages observes where one device batch's time went, in
  // tensorops_device_stage_duration_seconds (stages that took no time still count, at 0).
  void DeviceBatchStages(const DeviceStageTimes& stages);
  // SetDeviceMemory sets the GPU executor's memory gauges, in bytes.
  void SetDeviceMemory(int64_t pinned_allocated, int64_t pinned_in_use, int64_t device_in_use);

  // WatchStore makes every scrape call `figures` for the tensorops_store_* gauges; nullptr stops
  // it, returning once no scrape is still calling the old function (so call it before what that
  // function reads goes away).
  void WatchStore(std::function<StoreFigures()> figures);

  // WatchCallBytes makes every scrape call `call_bytes` for tensorops_call_bytes_in_flight (what
  // MemoryBudget::call_bytes counts); nullptr stops it, as WatchStore's does.
  void WatchCallBytes(std::function<int64_t()> call_bytes);

  // Statistics reads `op`'s series back (all zero for an op with no finished call).
  OpStatistics Statistics(std::string_view op) const;
  // Scrape returns this object's metrics in the Prometheus text format 0.0.4, for tests and logs.
  // The HTTP endpoint serves the same families plus prometheus-cpp's own exposer_* families
  // (scrape count, bytes, latency) that it adds to every /metrics.
  std::string Scrape() const;

 private:
  class Impl;

  explicit Metrics(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_OBSERVABILITY_METRICS_H_
