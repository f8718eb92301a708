// Scale-out: one tensorops::Client over three real tensorops-server replicas on loopback ports,
// through gRPC's round_robin policy and the client's retry policy (ClientOptions::round_robin,
// max_attempts). Each replica's share is read from its own Prometheus endpoint. Then one replica
// is stopped with SIGTERM while calls keep coming, and none may fail: calls it was running finish
// (the drain), calls that reach it while it shuts down come back UNAVAILABLE (or CANCELLED, from
// gRPC's server for calls not yet handed to the service) and are retried on the others, and
// round_robin stops picking it once its connection goes away.
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/cpp/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/http_get.h"
#include "tests/reference.h"
#include "tests/wait_for.h"

namespace tensorops {
namespace {

using ::tensorops::testing::ChildProcess;
using ::tensorops::testing::DescribeExit;
using ::testing::HasSubstr;

constexpr absl::Duration kStartupTimeout = absl::Seconds(10);
constexpr absl::Duration kShutdownTimeout = absl::Seconds(15);
constexpr int kReplicas = 3;
constexpr int kCallerThreads = 4;
// Calls of the first phase, all replicas up.
constexpr int kCallsPerThread = 500;

// Replica is one tensorops-server child with its gRPC and metrics ports.
struct Replica {
  std::unique_ptr<ChildProcess> process;
  std::string address;  // 127.0.0.1:PORT
  int metrics_port = 0;
};

absl::StatusOr<Replica> StartReplica() {
  absl::StatusOr<std::unique_ptr<ChildProcess>> process = ChildProcess::Spawn(
      {TENSOROPS_SERVER_PATH, "--host=127.0.0.1", "--port=0", "--threads=1", "--metrics_port=0",
       "--metrics_host=127.0.0.1", "--shutdown_grace_s=10"});
  if (!process.ok()) return process.status();
  static const std::regex kListening(R"(listening on \S*:(\d+))");
  static const std::regex kMetricsUrl(R"(metrics: http://127\.0\.0\.1:(\d+)/metrics)");
  const std::optional<std::string> port = (*process)->WaitForMatch(kListening, kStartupTimeout);
  const std::optional<std::string> metrics_port =
      (*process)->WaitForMatch(kMetricsUrl, kStartupTimeout);
  if (!port.has_value() || !metrics_port.has_value()) {
    const int status = (*process)->Terminate(kShutdownTimeout);
    return absl::UnavailableError(absl::StrCat("tensorops-server did not report its ports (",
                                               DescribeExit(status), "); stderr:\n",
                                               (*process)->stderr_text()));
  }
  return Replica{std::move(*process), absl::StrCat("127.0.0.1:", *port), std::stoi(*metrics_port)};
}

// GathersServed reads the replica's count of gathers that ended OK; -1 when the endpoint cannot
// be read or has no such line.
int64_t GathersServed(const Replica& replica) {
  absl::StatusOr<testing::HttpResponse> response =
      testing::HttpGet(replica.metrics_port, "/metrics");
  if (!response.ok() || response->status != 200) return -1;
  // Absent until the first gather is counted.
  static const std::regex kGathersOk(
      R"re(tensorops_requests_total\{code="OK",device="cpu",op="gather"\} (\S+))re");
  std::smatch found;
  if (!std::regex_search(response->body, found, kGathersOk)) return 0;
  double value = 0;
  if (!absl::SimpleAtod(found[1].str(), &value)) return -1;
  return static_cast<int64_t>(value);
}

class ScaleOutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < kReplicas; ++i) {
      absl::StatusOr<Replica> replica = StartReplica();
      ASSERT_TRUE(replica.ok()) << replica.status();
      replicas_.push_back(std::move(*replica));
    }
  }

  void TearDown() override {
    for (Replica& replica : replicas_) {
      const int status = replica.process->Terminate(kShutdownTimeout);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << replica.address << " after SIGTERM: " << DescribeExit(status) << "; stderr:\n"
          << replica.process->stderr_text();
    }
  }

  // Target is the ipv4: target that lists every replica.
  std::string Target() const {
    std::vector<std::string> addresses;
    for (const Replica& replica : replicas_) addresses.push_back(replica.address);
    return absl::StrCat("ipv4:", absl::StrJoin(addresses, ","));
  }

  std::vector<Replica> replicas_;
};

// Runs `calls_per_thread` gathers (or, with calls_per_thread < 0, gathers until `stop`) from
// kCallerThreads threads; returns the calls made and records every failure in `failures`.
int64_t RunGathers(Client& client, int calls_per_thread, const std::atomic<bool>& stop,
                   std::atomic<int64_t>& calls, std::vector<std::string>& failures) {
  const Tensor input = testing::IndexTensor({2, 3}, {1, 2, 3, 4, 5, 6}, DataType::kInt64);
  const Tensor index = testing::IndexTensor({2, 2}, {2, 0, 1, 1}, DataType::kInt64);
  const Tensor expected = testing::IndexTensor({2, 2}, {3, 1, 5, 5}, DataType::kInt64);
  absl::Mutex mu;
  std::vector<std::thread> threads;
  const int64_t calls_before = calls.load();
  for (int t = 0; t < kCallerThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; calls_per_thread < 0 ? !stop.load() : i < calls_per_thread; ++i) {
        GatherOptions options;
        options.timeout = absl::Seconds(20);
        absl::StatusOr<Tensor> result = client.Gather(input.view(), 1, index.view(), options);
        calls.fetch_add(1);
        if (!result.ok()) {
          absl::MutexLock lock(&mu);
          failures.push_back(result.status().ToString());
        } else if (!testing::TensorsNear(result->view(), expected.view())) {
          absl::MutexLock lock(&mu);
          failures.push_back("wrong result");
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return calls.load() - calls_before;
}

TEST_F(ScaleOutTest, RoundRobinSpreadsCallsAndSurvivesAReplicaStopping) {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(Target());
  ASSERT_TRUE(client.ok()) << client.status();

  // Phase 1: every replica up; round_robin gives each about a third.
  std::atomic<bool> stop{false};
  std::atomic<int64_t> calls{0};
  std::vector<std::string> failures;
  const int64_t first_calls = RunGathers(**client, kCallsPerThread, stop, calls, failures);
  ASSERT_EQ(first_calls, int64_t{kCallerThreads} * kCallsPerThread);
  ASSERT_THAT(failures, ::testing::IsEmpty());
  // A call is counted once gRPC is done with it, a moment after the client has its reply.
  std::vector<int64_t> served(kReplicas, 0);
  const bool counted = testing::WaitFor([&] {
    int64_t total = 0;
    for (int i = 0; i < kReplicas; ++i) total += served[i] = GathersServed(replicas_[i]);
    return total == first_calls;
  });
  ASSERT_TRUE(counted) << "gathers counted by the replicas: " << absl::StrJoin(served, ", ")
                       << " (expected a total of " << first_calls << ")";
  for (int i = 0; i < kReplicas; ++i) {
    // round_robin gives a third each; a tenth leaves room for connections that came up late.
    EXPECT_GE(served[i], first_calls / 10)
        << "replica " << i << " served " << served[i] << " of " << first_calls;
  }

  // Phase 2: callers run while replica 0 is stopped gracefully; no call may fail.
  std::vector<std::string> stop_failures;
  int64_t second_calls = 0;
  std::thread callers([&] { second_calls = RunGathers(**client, -1, stop, calls, stop_failures); });
  const int64_t before_stop = calls.load();
  ASSERT_TRUE(testing::WaitFor([&] { return calls.load() >= before_stop + 300; }));
  const int status = replicas_[0].process->Terminate(kShutdownTimeout);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "replica 0 after SIGTERM: " << DescribeExit(status);
  EXPECT_THAT(replicas_[0].process->stdout_text() + replicas_[0].process->stderr_text(),
              HasSubstr("received SIGTERM"));
  const int64_t after_stop = calls.load();
  const bool went_on = testing::WaitFor([&] { return calls.load() >= after_stop + 1000; });
  stop.store(true);
  callers.join();
  EXPECT_TRUE(went_on) << "calls stalled after replica 0 stopped";
  EXPECT_THAT(stop_failures, ::testing::IsEmpty()) << "of " << second_calls << " calls";

  // The survivors served what replica 0 no longer could.
  std::vector<int64_t> final_served(kReplicas, 0);
  EXPECT_TRUE(testing::WaitFor([&] {
    for (int i = 1; i < kReplicas; ++i) final_served[i] = GathersServed(replicas_[i]);
    return final_served[1] > served[1] && final_served[2] > served[2];
  })) << "replicas 1 and 2 served "
      << final_served[1] << " and " << final_served[2];
}

TEST(ScaleOutOptionsTest, ServiceConfigNamesThePolicyAndTheRetries) {
  ClientOptions options;
  EXPECT_THAT(ServiceConfigJson(options),
              HasSubstr(R"("loadBalancingConfig":[{"round_robin":{}}])"));
  EXPECT_THAT(ServiceConfigJson(options),
              HasSubstr(R"("retryableStatusCodes":["UNAVAILABLE","CANCELLED","ABORTED"])"));
  EXPECT_THAT(ServiceConfigJson(options), HasSubstr(R"("service":"tensorops.v1.TensorOps")"));
  // PutTensor, DeleteTensor and the shared-memory registrations carry no update id: an entry of
  // their own, without retries.
  EXPECT_THAT(
      ServiceConfigJson(options),
      HasSubstr(R"({"name":[{"service":"tensorops.v1.TensorOps","method":"PutTensor"},)"
                R"({"service":"tensorops.v1.TensorOps","method":"DeleteTensor"},)"
                R"({"service":"tensorops.v1.TensorOps","method":"RegisterSharedMemory"},)"
                R"({"service":"tensorops.v1.TensorOps","method":"UnregisterSharedMemory"}]})"));
  options.round_robin = false;
  options.max_attempts = 1;
  EXPECT_THAT(ServiceConfigJson(options), HasSubstr("pick_first"));
  EXPECT_THAT(ServiceConfigJson(options), ::testing::Not(HasSubstr("retryPolicy")));
}

TEST(ScaleOutOptionsTest, CreateRejectsMaxAttemptsOutOfRange) {
  for (int max_attempts : {0, 6}) {
    ClientOptions options;
    options.max_attempts = max_attempts;
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Create("ipv4:127.0.0.1:1,127.0.0.1:2", options);
    EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument) << max_attempts;
    EXPECT_THAT(client.status().message(), HasSubstr("max_attempts"));
  }
}

}  // namespace
}  // namespace tensorops
