// The closed-loop load generator shared by the service benchmarks (bench/service, bench/kserve):
// `concurrency` calls kept in flight through a generated stub's callback API (`stub->async()`),
// each restarted as soon as it completes, with every call's latency recorded
// (bench/latency_stats.h).
//
//   SlotFactory slots = [&] {
//     return std::make_unique<UnarySlot<FooResponse>>(
//         [&](grpc::ClientContext* context, FooResponse* response, Slot::Done done) {
//           stub->async()->Foo(context, &request, response, std::move(done));
//         },
//         [](const FooResponse& r) { return static_cast<int64_t>(r.data().size()); });
//   };
//   CellResult cell = Measure(slots, /*concurrency=*/8, expected_response_bytes, settings);
#ifndef TENSOROPS_BENCH_SERVICE_CLOSED_LOOP_H_
#define TENSOROPS_BENCH_SERVICE_CLOSED_LOOP_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/latency_stats.h"
#include "grpcpp/grpcpp.h"

namespace tensorops::bench {

// Slot is one outstanding call, restarted call after call.
class Slot {
 public:
  using Done = std::function<void(grpc::Status)>;
  virtual ~Slot() = default;
  // Start sends one call; `done` runs on a gRPC thread when it completes.
  virtual void Start(Done done) = 0;
  // response_bytes is the payload size of the last response.
  virtual int64_t response_bytes() const = 0;
};

// UnarySlot owns a call's context and response; `send` issues the call through a stub's async().
//
// Every call parses into a new response message, as tensorops::Client does. Reusing one message
// with Clear() favoured the echo: a cleared top-level `bytes` field keeps its capacity, while
// Clear() deletes ours, nested in the result Tensor, so only our responses paid protobuf's
// allocation again on each call (a 64 MiB field is reserved to 50 MB, then doubled to ~100 MB, in
// freshly mapped pages). At 64 MiB, concurrency 1 that was about twice the echo's page faults per
// call and a throughput ratio of 0.56-0.88x (median ~0.76x) on 2026-11-25.
template <typename Response>
class UnarySlot final : public Slot {
 public:
  using Send = std::function<void(grpc::ClientContext*, Response*, Done)>;
  UnarySlot(Send send, std::function<int64_t(const Response&)> bytes_of)
      : send_(std::move(send)), bytes_of_(std::move(bytes_of)) {}

  void Start(Done done) override {
    context_ = std::make_unique<grpc::ClientContext>();
    response_ = std::make_unique<Response>();
    send_(context_.get(), response_.get(), std::move(done));
  }
  int64_t response_bytes() const override { return bytes_of_(*response_); }

 private:
  Send send_;
  std::function<int64_t(const Response&)> bytes_of_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<Response> response_;
};

using SlotFactory = std::function<std::unique_ptr<Slot>()>;

// Drive keeps `concurrency` calls in flight until `max_calls` have completed or `duration` has
// passed, and returns latency percentiles and throughput.
inline CellResult Drive(const SlotFactory& factory, int concurrency, int64_t max_calls,
                        absl::Duration duration, int64_t expected_bytes) {
  std::vector<std::unique_ptr<Slot>> slots;
  std::vector<std::vector<double>> latencies(concurrency);  // Per slot: its calls are sequential.
  for (int i = 0; i < concurrency; ++i) slots.push_back(factory());

  absl::Mutex mu;
  int outstanding = concurrency;
  std::string error;
  absl::Time end_time;
  std::atomic<int64_t> started{concurrency};
  std::atomic<bool> failed{false};
  const absl::Time start_time = absl::Now();
  const absl::Time deadline = start_time + duration;

  std::vector<std::function<void()>> launch(concurrency);
  for (int i = 0; i < concurrency; ++i) {
    launch[i] = [&, i] {
      const absl::Time sent = absl::Now();
      slots[i]->Start([&, i, sent](grpc::Status status) {
        const absl::Time now = absl::Now();
        latencies[i].push_back(absl::ToDoubleMilliseconds(now - sent));
        if (!status.ok() || slots[i]->response_bytes() != expected_bytes) {
          absl::MutexLock lock(&mu);
          if (error.empty()) {
            error = status.ok()
                        ? absl::StrFormat("response of %d bytes, expected %d",
                                          slots[i]->response_bytes(), expected_bytes)
                        : absl::StrFormat("%d: %s", status.error_code(), status.error_message());
          }
          failed = true;
        }
        if (!failed && now < deadline && started.fetch_add(1) < max_calls) {
          launch[i]();
          return;
        }
        absl::MutexLock lock(&mu);
        if (--outstanding == 0) end_time = now;
      });
    };
  }
  for (auto& start : launch) start();
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](int* outstanding) { return *outstanding == 0; }, &outstanding));
  }

  std::vector<double> all;
  for (const auto& slot_latencies : latencies) {
    all.insert(all.end(), slot_latencies.begin(), slot_latencies.end());
  }
  CellResult result = CellFromLatencies(std::move(all), end_time - start_time);
  result.error = error;
  return result;
}

// ConnectTo opens a channel to the gRPC `target` ("unix:PATH", "127.0.0.1:PORT") with no message
// size limits, on a connection of its own.
inline std::shared_ptr<grpc::Channel> ConnectTo(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // Each server gets its own connection, not one shared through the global subchannel pool.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

// Connect opens a channel to 127.0.0.1:`port`, as ConnectTo.
inline std::shared_ptr<grpc::Channel> Connect(int port) {
  return ConnectTo(absl::StrFormat("127.0.0.1:%d", port));
}

// RunSettings are a run's repetitions and the limits of each of its cells.
struct RunSettings {
  int repetitions;
  absl::Duration seconds_per_cell;
  int64_t max_calls_per_cell;
};

// Measure warms `factory` up (at least one call per slot) and then runs one timed cell.
inline CellResult Measure(const SlotFactory& factory, int concurrency, int64_t payload_bytes,
                          const RunSettings& settings) {
  // Warm-up long enough for HTTP/2 flow control to size its windows for this payload: without it
  // whichever server is measured first on a new payload size pays for the window growth.
  CellResult warm =
      Drive(factory, concurrency, settings.max_calls_per_cell,
            std::min(settings.seconds_per_cell, absl::Milliseconds(300)), payload_bytes);
  if (!warm.error.empty()) return warm;
  return Drive(factory, concurrency, settings.max_calls_per_cell, settings.seconds_per_cell,
               payload_bytes);
}

}  // namespace tensorops::bench

#endif  // TENSOROPS_BENCH_SERVICE_CLOSED_LOOP_H_
