// Latency statistics shared by the service and store benchmarks: one cell's percentiles and
// throughput from its call latencies, and medians over repetitions (the machine is noisy, so
// every table quotes medians).
//
//   std::vector<double> latencies_ms = ...;                 // one per completed call
//   CellResult cell = CellFromLatencies(latencies_ms, absl::Now() - start);
//   Summary row = Summarize({cell_rep1, cell_rep2, cell_rep3});
#ifndef TENSOROPS_BENCH_LATENCY_STATS_H_
#define TENSOROPS_BENCH_LATENCY_STATS_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tensorops::bench {

// Median of `values`; 0 for none.
inline double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// CellResult is one measured cell (a workload at one setting, one repetition).
struct CellResult {
  double p50_ms = 0;
  double p99_ms = 0;
  double calls_per_s = 0;
  int64_t calls = 0;
  std::string error;  // Non-empty when a call failed.
};

// CellFromLatencies computes a cell from its calls' latencies (milliseconds, any order) and the
// wall time they took; an empty list gives zeros.
inline CellResult CellFromLatencies(std::vector<double> latencies_ms, absl::Duration elapsed) {
  CellResult result;
  result.calls = static_cast<int64_t>(latencies_ms.size());
  if (latencies_ms.empty()) return result;
  std::sort(latencies_ms.begin(), latencies_ms.end());
  // Nearest rank; with fewer than 100 calls p99 is the slowest call.
  auto rank = [&](double q) {
    return latencies_ms[std::min(latencies_ms.size() - 1,
                                 static_cast<size_t>(q * latencies_ms.size()))];
  };
  result.p50_ms = rank(0.50);
  result.p99_ms = rank(0.99);
  result.calls_per_s = latencies_ms.size() / absl::ToDoubleSeconds(elapsed);
  return result;
}

// Summary holds one row's medians over repetitions.
struct Summary {
  double p50_ms, p99_ms, calls_per_s;
  int64_t calls;
};

inline Summary Summarize(const std::vector<CellResult>& reps) {
  std::vector<double> p50, p99, cps, calls;
  for (const CellResult& r : reps) {
    p50.push_back(r.p50_ms);
    p99.push_back(r.p99_ms);
    cps.push_back(r.calls_per_s);
    calls.push_back(r.calls);
  }
  return {Median(p50), Median(p99), Median(cps), static_cast<int64_t>(Median(calls))};
}

// Drive calls `call(i)` for i = 0, 1, ... one at a time (concurrency 1) until `max_calls` have
// completed or `duration` has passed; the first failed call ends the cell with its error.
inline CellResult Drive(const std::function<absl::Status(int64_t)>& call, absl::Duration duration,
                        int64_t max_calls = std::numeric_limits<int64_t>::max()) {
  std::vector<double> latencies;
  const absl::Time start = absl::Now();
  absl::Time now = start;
  while (now - start < duration && static_cast<int64_t>(latencies.size()) < max_calls) {
    const absl::Time sent = now;
    absl::Status status = call(static_cast<int64_t>(latencies.size()));
    now = absl::Now();
    if (!status.ok()) return {.error = status.ToString()};
    latencies.push_back(absl::ToDoubleMilliseconds(now - sent));
  }
  return CellFromLatencies(std::move(latencies), now - start);
}

}  // namespace tensorops::bench

#endif  // TENSOROPS_BENCH_LATENCY_STATS_H_
