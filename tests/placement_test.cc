// Placement and the CUDA executor (issue: dynamic batching onto a CUDA stream pool).
//
// On any machine: the scheduler's placement and fallback, driven by a fake executor (calls under
// --gpu_min_bytes stay on the CPU, a device error re-runs the call on the CPU and counts a
// fallback, an index error re-runs it without one), and the same through a whole server whose
// "GPU" fails every call: every op still answers correctly, from the CPU.
//
// On a GPU machine, additionally (skipped elsewhere): Gather, IndexSelect, Scatter and IndexReduce
// of every dtype and reduction through the real CUDA executor against the CPU kernels, an
// out-of-range index, a forced out-of-memory, and 64 concurrent clients of tiny calls with
// batching on and off.
#include <atomic>
#include <cmath>
#include <complex>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/executor.h"
#include "kernels/device.h"
#include "kernels/device_call.h"
#include "kernels/dispatch.h"
#include "kernels/index_ops.h"
#include "kernels/masked_scatter.h"
#include "kernels/nd_ops.h"
#include "kernels/view_scatter.h"
#include "server/scheduler.h"
#include "server/server.h"
#include "tests/blocking_work.h"
#include "tests/reference.h"
#include "tests/service_test_util.h"
#include "tests/wait_for.h"

namespace tensorops {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

// FakeExecutor answers every call of a batch with one outcome; on success it writes `fill` into
// each result, standing in for a kernel.
class FakeExecutor final : public DeviceExecutor {
 public:
  enum class Mode { kSucceed, kDeviceError, kIndexError };
  explicit FakeExecutor(Mode mode) : mode_(mode) {}

  std::vector<DeviceOutcome> RunBatch(absl::Span<const DeviceCall* const> calls,
                                      absl::Span<void* const> results) override {
    {
      absl::MutexLock lock(&mu_);
      batches_.push_back(static_cast<int64_t>(calls.size()));
    }
    std::vector<DeviceOutcome> outcomes(calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      switch (mode_) {
        case Mode::kSucceed:
          std::memset(results[i], 0x5A, static_cast<size_t>(calls[i]->result_bytes()));
          break;
        case Mode::kDeviceError:
          outcomes[i].device_error = absl::ResourceExhaustedError("fake: out of device memory");
          break;
        case Mode::kIndexError:
          outcomes[i].index_error = true;
          break;
      }
    }
    return outcomes;
  }
  DeviceMemory memory() const override { return {}; }
  std::string name() const override { return "fake:0"; }

  std::vector<int64_t> batches() const {
    absl::MutexLock lock(&mu_);
    return batches_;
  }

 private:
  const Mode mode_;
  mutable absl::Mutex mu_;
  std::vector<int64_t> batches_ ABSL_GUARDED_BY(mu_);
};

// A DeviceCall that describes 16 result bytes and reads nothing.
class NoopCall final : public DeviceCall {
 public:
  NoopCall() { result_bytes_ = 16; }
  absl::Status Enqueue(const DeviceBuffers&, void*) const override {
    return absl::FailedPreconditionError("never launched by the fake executor");
  }
};

// PlacedWork records where it ended: "cpu" (Run), "device" (CompleteOnDevice) or "dropped".
class PlacedWork final : public Scheduler::Work {
 public:
  PlacedWork(int64_t bytes, bool has_gpu_form)
      : Scheduler::Work(absl::InfiniteFuture(), bytes), has_gpu_form_(has_gpu_form) {}

  void Run() override { End("cpu"); }
  void Drop(const absl::Status&) override { End("dropped"); }
  std::optional<DeviceTask> PrepareDevice() override {
    if (!has_gpu_form_) return std::nullopt;
    return DeviceTask{.call = &call_, .result = result_};
  }
  void CompleteOnDevice() override {
    EXPECT_EQ(static_cast<unsigned char>(result_[0]), 0x5A);
    End("device");
  }

  std::string WaitForEnd() {
    ended_.WaitForNotification();
    return where_;
  }

 private:
  void End(std::string where) {
    where_ = std::move(where);
    ended_.Notify();
  }

  const bool has_gpu_form_;
  NoopCall call_;
  char result_[16] = {};
  std::string where_;
  absl::Notification ended_;
};

struct Recorded {
  absl::Mutex mu;
  std::vector<std::string> batches ABSL_GUARDED_BY(mu);
  std::vector<std::string> fallbacks ABSL_GUARDED_BY(mu);
};

std::unique_ptr<Scheduler> MakeScheduler(DeviceExecutor* device, Recorded* recorded,
                                         int max_batch = 1, int64_t gpu_min_bytes = 100) {
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create({.queue = {.max_concurrent_calls = 1, .max_batch = max_batch},
                         .on_batch =
                             [recorded](std::string_view device, int64_t size) {
                               absl::MutexLock lock(&recorded->mu);
                               recorded->batches.push_back(absl::StrFormat("%s:%d", device, size));
                             },
                         .device = device,
                         .gpu_min_bytes = gpu_min_bytes,
                         .on_device_fallback =
                             [recorded](const absl::Status& error) {
                               absl::MutexLock lock(&recorded->mu);
                               recorded->fallbacks.push_back(std::string(error.message()));
                             }});
  EXPECT_TRUE(scheduler.ok()) << scheduler.status();
  return scheduler.ok() ? std::move(*scheduler) : nullptr;
}

TEST(PlacementTest, LargeCallsWithAGpuFormRunOnTheDeviceAndTheRestOnTheCpu) {
  FakeExecutor device(FakeExecutor::Mode::kSucceed);
  Recorded recorded;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(&device, &recorded);
  ASSERT_NE(scheduler, nullptr);
  PlacedWork small(/*bytes=*/99, /*has_gpu_form=*/true);
  PlacedWork large(/*bytes=*/100, /*has_gpu_form=*/true);
  PlacedWork cpu_only(/*bytes=*/1000, /*has_gpu_form=*/false);
  for (PlacedWork* work : {&small, &large, &cpu_only}) ASSERT_TRUE(scheduler->Enqueue(work).ok());
  EXPECT_EQ(small.WaitForEnd(), "cpu");
  EXPECT_EQ(large.WaitForEnd(), "device");
  EXPECT_EQ(cpu_only.WaitForEnd(), "cpu");
  EXPECT_THAT(device.batches(), ElementsAre(1));
  absl::MutexLock lock(&recorded.mu);
  EXPECT_TRUE(recorded.fallbacks.empty());
}

TEST(PlacementTest, ACallForTheDeviceIsNeverRunInline) {
  FakeExecutor device(FakeExecutor::Mode::kSucceed);
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create({.queue = {.max_concurrent_calls = 1, .inline_max_bytes = 1000},
                         .device = &device,
                         .gpu_min_bytes = 100});
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  // Both are small enough to run inline; only the one under gpu_min_bytes may.
  PlacedWork small(50, true), for_device(500, true);
  ASSERT_TRUE((*scheduler)->Submit(&small).ok());
  ASSERT_TRUE((*scheduler)->Submit(&for_device).ok());
  EXPECT_EQ(small.WaitForEnd(), "cpu");
  EXPECT_EQ(for_device.WaitForEnd(), "device");
  EXPECT_THAT(device.batches(), ElementsAre(1));
}

TEST(PlacementTest, ABatchSplitsBetweenTheDeviceAndTheCpu) {
  FakeExecutor device(FakeExecutor::Mode::kSucceed);
  Recorded recorded;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(&device, &recorded, /*max_batch=*/8);
  ASSERT_NE(scheduler, nullptr);
  // A blocker holds the only worker while four calls queue up behind it; they then form one batch.
  testing::BlockingWork blocker;
  ASSERT_TRUE(scheduler->Enqueue(&blocker).ok());
  blocker.WaitUntilStarted();
  PlacedWork a(500, true), b(10, true), c(500, true), d(500, false);
  for (PlacedWork* work : {&a, &b, &c, &d}) ASSERT_TRUE(scheduler->Enqueue(work).ok());
  blocker.Release();
  EXPECT_EQ(a.WaitForEnd(), "device");
  EXPECT_EQ(b.WaitForEnd(), "cpu");
  EXPECT_EQ(c.WaitForEnd(), "device");
  EXPECT_EQ(d.WaitForEnd(), "cpu");
  EXPECT_THAT(device.batches(), ElementsAre(2));
  absl::MutexLock lock(&recorded.mu);
  EXPECT_THAT(recorded.batches, ElementsAre("cpu:1", "cpu:2", "cuda:2"));
}

TEST(PlacementTest, ADeviceErrorReRunsTheCallOnTheCpuAndCountsAFallback) {
  FakeExecutor device(FakeExecutor::Mode::kDeviceError);
  Recorded recorded;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(&device, &recorded);
  ASSERT_NE(scheduler, nullptr);
  PlacedWork first(1000, true), second(1000, true);
  ASSERT_TRUE(scheduler->Enqueue(&first).ok());
  ASSERT_TRUE(scheduler->Enqueue(&second).ok());
  EXPECT_EQ(first.WaitForEnd(), "cpu");
  EXPECT_EQ(second.WaitForEnd(), "cpu");
  absl::MutexLock lock(&recorded.mu);
  EXPECT_THAT(recorded.fallbacks,
              ElementsAre("fake: out of device memory", "fake: out of device memory"));
}

TEST(PlacementTest, AnIndexErrorReRunsOnTheCpuWithoutAFallback) {
  FakeExecutor device(FakeExecutor::Mode::kIndexError);
  Recorded recorded;
  std::unique_ptr<Scheduler> scheduler = MakeScheduler(&device, &recorded);
  ASSERT_NE(scheduler, nullptr);
  PlacedWork work(1000, true);
  ASSERT_TRUE(scheduler->Enqueue(&work).ok());
  EXPECT_EQ(work.WaitForEnd(), "cpu");
  absl::MutexLock lock(&recorded.mu);
  EXPECT_TRUE(recorded.fallbacks.empty());
}

TEST(PlacementTest, CreateRejectsANegativeGpuMinBytes) {
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler = Scheduler::Create({.gpu_min_bytes = -1});
  ASSERT_FALSE(scheduler.ok());
  EXPECT_THAT(scheduler.status().message(), HasSubstr("--gpu_min_bytes=-1 is out of range"));
}

// ---- Through a whole server whose "GPU" fails every call ----

std::unique_ptr<Server> StartServerWith(DeviceExecutor* executor, DeviceChoice device) {
  ServerOptions options;
  options.port = 0;
  options.threads = 2;
  options.device = device;
  options.gpu.min_bytes = 0;
  options.gpu.executor_for_testing = executor;
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

// FallbackCount reads tensorops_device_fallbacks_total from a scrape.
double FallbackCount(Server& server) {
  const std::string scrape = server.metrics().Scrape();
  // At a line's start: the # HELP line names the family too.
  const std::string name = "\ntensorops_device_fallbacks_total ";
  const size_t at = scrape.find(name);
  return at == std::string::npos ? -1 : std::stod(scrape.substr(at + name.size()));
}

TEST(ServerPlacementTest, EveryCallTheDeviceFailsIsAnsweredFromTheCpu) {
  FakeExecutor device(FakeExecutor::Mode::kDeviceError);
  std::unique_ptr<Server> server = StartServerWith(&device, DeviceChoice::kAuto);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<v1::TensorOps::Stub> stub = testing::Connect(server->port());

  grpc::ClientContext info_context;
  v1::ServerInfoResponse info;
  ASSERT_TRUE(stub->ServerInfo(&info_context, {}, &info).ok());
  EXPECT_EQ(info.placement(), "fake:0 for calls of >= 0 request bytes, else cpu");
  EXPECT_EQ(info.gpu_streams(), 4);

  // gather([[1,2],[3,4]], 1, [[0,0],[1,0]]) = [[1,1],[4,3]]
  v1::GatherRequest gather;
  *gather.mutable_input() = testing::MakeTensor<float>({2, 2}, {1, 2, 3, 4});
  *gather.mutable_index() = testing::MakeTensor<int64_t>({2, 2}, {0, 0, 1, 0});
  gather.set_axis(1);
  grpc::ClientContext gather_context;
  v1::GatherResponse gathered;
  ASSERT_TRUE(stub->Gather(&gather_context, gather, &gathered).ok());
  EXPECT_THAT(testing::Values<float>(gathered.result()), ElementsAre(1, 1, 4, 3));

  // scatter_add of [10, 20, 30] into zeros(3) at [2, 0, 2] = [20, 0, 40]
  v1::ScatterRequest scatter;
  *scatter.mutable_input() = testing::MakeTensor<float>({3}, {0, 0, 0});
  *scatter.mutable_index() = testing::MakeTensor<int64_t>({3}, {2, 0, 2});
  *scatter.mutable_src() = testing::MakeTensor<float>({3}, {10, 20, 30});
  scatter.set_reduce(v1::REDUCTION_SUM);
  grpc::ClientContext scatter_context;
  v1::ScatterResponse scattered;
  ASSERT_TRUE(stub->Scatter(&scatter_context, scatter, &scattered).ok());
  EXPECT_THAT(testing::Values<float>(scattered.result()), ElementsAre(20, 0, 40));

  // An out-of-range index still gets the CPU's INVALID_ARGUMENT.
  *gather.mutable_index() = testing::MakeTensor<int64_t>({2, 2}, {0, 0, 7, 0});
  grpc::ClientContext bad_context;
  testing::ExpectStatus(stub->Gather(&bad_context, gather, &gathered),
                        grpc::StatusCode::INVALID_ARGUMENT, "index[1, 0] = 7 is out of range");

  // SelectScatter has a GPU form too (the fused view-scatter pass).
  v1::SelectScatterRequest select;
  *select.mutable_input() = testing::MakeTensor<float>({2, 2}, {1, 2, 3, 4});
  *select.mutable_src() = testing::MakeTensor<float>({2}, {9, 9});
  select.set_axis(0);
  select.set_index(1);
  grpc::ClientContext select_context;
  v1::SelectScatterResponse selected;
  ASSERT_TRUE(stub->SelectScatter(&select_context, select, &selected).ok());
  EXPECT_THAT(testing::Values<float>(selected.result()), ElementsAre(1, 2, 9, 9));

  // ScatterNd's TensorFlow form has no GPU kernel: it never reaches the device.
  // scatter_nd(zeros(2, 2), [[1, 0]], [5]) = [[0, 0], [5, 0]]
  v1::ScatterNdRequest scatter_nd;
  *scatter_nd.mutable_input() = testing::MakeTensor<float>({2, 2}, {0, 0, 0, 0});
  *scatter_nd.mutable_index() = testing::MakeTensor<int64_t>({1, 2}, {1, 0});
  *scatter_nd.mutable_src() = testing::MakeTensor<float>({1}, {5});
  grpc::ClientContext scatter_nd_context;
  v1::ScatterNdResponse scattered_nd;
  ASSERT_TRUE(stub->ScatterNd(&scatter_nd_context, scatter_nd, &scattered_nd).ok());
  EXPECT_THAT(testing::Values<float>(scattered_nd.result()), ElementsAre(0, 0, 5, 0));

  EXPECT_THAT(device.batches(), ElementsAre(1, 1, 1, 1));
  EXPECT_EQ(FallbackCount(*server), 4);
  // A call is counted when gRPC is done with it, which may be a moment after its client has the
  // answer.
  EXPECT_TRUE(testing::WaitFor([&] {
    return absl::StrContains(
        server->metrics().Scrape(),
        "tensorops_requests_total{code=\"OK\",device=\"cpu\",op=\"gather\"} 1");
  }));
}

TEST(ServerPlacementTest, DeviceCpuNeverUsesTheExecutor) {
  FakeExecutor device(FakeExecutor::Mode::kDeviceError);
  std::unique_ptr<Server> server = StartServerWith(&device, DeviceChoice::kCpu);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<v1::TensorOps::Stub> stub = testing::Connect(server->port());
  v1::GatherRequest gather;
  *gather.mutable_input() = testing::MakeTensor<float>({2}, {1, 2});
  *gather.mutable_index() = testing::MakeTensor<int64_t>({1}, {1});
  grpc::ClientContext context;
  v1::GatherResponse gathered;
  ASSERT_TRUE(stub->Gather(&context, gather, &gathered).ok());
  EXPECT_THAT(testing::Values<float>(gathered.result()), ElementsAre(2));
  EXPECT_TRUE(device.batches().empty());
  EXPECT_EQ(FallbackCount(*server), 0);
}

TEST(ServerPlacementTest, StartRejectsGpuOptionsOutOfRange) {
  ServerOptions options;
  options.port = 0;
  options.gpu.streams = 0;
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("--streams=0 is out of range"));
}

TEST(ServerPlacementTest, DeviceCudaWithoutAGpuFailsAtStartUp) {
  if (!QueryDevices().cuda_devices.empty()) GTEST_SKIP() << "a GPU is usable here";
  ServerOptions options;
  options.port = 0;
  options.device = DeviceChoice::kCuda;
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(server.status().message(), HasSubstr("--device=cuda, but no GPU is usable"));
}

// ---- On a GPU: the real CUDA executor against the CPU kernels ----

class CudaExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (QueryDevices().cuda_devices.empty()) {
      GTEST_SKIP() << "no usable GPU: " << QueryDevices().note;
    }
    absl::StatusOr<std::unique_ptr<DeviceExecutor>> executor = CreateCudaExecutor({});
    ASSERT_TRUE(executor.ok()) << executor.status();
    executor_ = *std::move(executor);
  }

  std::unique_ptr<DeviceExecutor> executor_;
};

Tensor RandomValues(absl::BitGen& gen, DataType dtype, const Shape& shape) {
  Tensor tensor(dtype, shape);
  DispatchDataType(dtype, [&]<typename T>(TypeTag<T>) {
    T* data = tensor.mutable_view().data_as<T>();
    for (int64_t i = 0; i < tensor.numel(); ++i) {
      // Small integers: products and sums stay exact in every dtype, so that the GPU's order of
      // rounding cannot matter except where SPEC allows it.
      const int value = absl::Uniform<int>(gen, -3, 4);
      if constexpr (std::is_same_v<T, bool>) {
        data[i] = value > 0;
      } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
        data[i] = T(static_cast<float>(value));
      } else if constexpr (std::is_same_v<T, std::complex<float>> ||
                           std::is_same_v<T, std::complex<double>>) {
        data[i] = T(value, value - 1);
      } else {
        data[i] = static_cast<T>(value);
      }
    }
  });
  return tensor;
}

Tensor RandomIndices(absl::BitGen& gen, const Shape& shape, int64_t bound) {
  Tensor tensor(DataType::kInt64, shape);
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    tensor.mutable_view().data_as<int64_t>()[i] = absl::Uniform<int64_t>(gen, -bound, bound);
  }
  return tensor;
}

bool SameBytes(const Tensor& a, const std::vector<char>& b) {
  return static_cast<int64_t>(b.size()) == a.numel() * ItemSize(a.dtype()) &&
         std::memcmp(a.view().data(), b.data(), b.size()) == 0;
}

TEST_F(CudaExecutorTest, GatherOfEveryDtypeMatchesTheCpuInOneBatch) {
  absl::BitGen gen;
  std::vector<Tensor> inputs, indices, expected;
  std::vector<GatherPlan> plans;
  for (DataType dtype : kAllDataTypes) {
    inputs.push_back(RandomValues(gen, dtype, {37, 129}));
    indices.push_back(RandomIndices(gen, {37, 300}, 129));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    absl::StatusOr<GatherPlan> plan =
        PlanGather({.input = inputs[i].view(), .index = indices[i].view(), .axis = 1});
    ASSERT_TRUE(plan.ok()) << plan.status();
    plans.push_back(*plan);
  }
  std::vector<std::unique_ptr<DeviceCall>> calls;
  std::vector<const DeviceCall*> call_pointers;
  std::vector<std::vector<char>> results;
  std::vector<void*> result_pointers;
  for (const GatherPlan& plan : plans) {
    Tensor cpu(plan.result_dtype, plan.result_shape);
    ASSERT_TRUE(cpu::Gather(plan, cpu.mutable_view()).ok());
    expected.push_back(std::move(cpu));
    calls.push_back(MakeDeviceCall(plan));
    call_pointers.push_back(calls.back().get());
    results.emplace_back(calls.back()->result_bytes());
  }
  for (auto& result : results) result_pointers.push_back(result.data());
  const std::vector<DeviceOutcome> outcomes = executor_->RunBatch(call_pointers, result_pointers);
  for (size_t i = 0; i < plans.size(); ++i) {
    EXPECT_TRUE(outcomes[i].ok()) << outcomes[i].device_error;
    EXPECT_TRUE(SameBytes(expected[i], results[i])) << DataTypeName(plans[i].result_dtype);
  }
}

TEST_F(CudaExecutorTest, ScatterOfEveryDtypeAndReductionMatchesTheCpu) {
  absl::BitGen gen;
  for (DataType dtype : kAllDataTypes) {
    for (Reduction reduce : {Reduction::kAssign, Reduction::kSum, Reduction::kProd,
                             Reduction::kMean, Reduction::kAmax, Reduction::kAmin}) {
      for (bool include_self : {true, false}) {
        if (IsComplex(dtype) && (reduce == Reduction::kAmax || reduce == Reduction::kAmin)) {
          continue;
        }
        if (dtype == DataType::kBool && reduce == Reduction::kMean) continue;
        // Few destinations, many updates: every destination sees duplicates.
        Tensor input = RandomValues(gen, dtype, {16, 5});
        Tensor index = RandomIndices(gen, {200, 5}, 16);
        Tensor source = RandomValues(gen, dtype, {200, 5});
        if (reduce == Reduction::kProd) {
          // Products of 12 values of |v| <= 3 stay exact in float16 only when few are > 1.
          source = Tensor::Zeros(dtype, {200, 5});
          DispatchDataType(dtype, [&]<typename T>(TypeTag<T>) {
            for (int64_t i = 0; i < source.numel(); ++i) {
              if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
                source.mutable_view().data_as<T>()[i] = T(i % 7 == 0 ? -1.0f : 1.0f);
              } else if constexpr (std::is_same_v<T, bool>) {
                source.mutable_view().data_as<T>()[i] = i % 7 != 0;
              } else {
                source.mutable_view().data_as<T>()[i] = static_cast<T>(i % 7 == 0 ? -1 : 1);
              }
            }
          });
        }
        absl::StatusOr<ScatterPlan> plan = PlanScatter({.input = input.view(),
                                                        .index = index.view(),
                                                        .source = source.view(),
                                                        .axis = 0,
                                                        .reduce = reduce,
                                                        .include_self = include_self});
        ASSERT_TRUE(plan.ok()) << plan.status();
        Tensor cpu(plan->result_dtype, plan->result_shape);
        ASSERT_TRUE(cpu::Scatter(*plan, cpu.mutable_view()).ok());
        std::unique_ptr<DeviceCall> call = MakeDeviceCall(*plan);
        if (call == nullptr) {
          EXPECT_FALSE(DeviceScatterSupported(dtype, reduce));
          continue;
        }
        std::vector<char> result(call->result_bytes());
        const DeviceCall* calls[] = {call.get()};
        void* results[] = {result.data()};
        const std::vector<DeviceOutcome> outcomes = executor_->RunBatch(calls, results);
        ASSERT_TRUE(outcomes[0].ok()) << outcomes[0].device_error;
        // Small integer values make every sum and mean exact, so even float results must match
        // bit for bit.
        EXPECT_TRUE(SameBytes(cpu, result))
            << DataTypeName(dtype) << " " << ReductionName(reduce) << " " << include_self;
      }
    }
  }
}

// RunAlone runs one plan's call through the executor; the outcome's result lands in `result`.
template <typename Plan>
DeviceOutcome RunAlone(DeviceExecutor& executor, const Plan& plan, std::vector<char>* result) {
  std::unique_ptr<DeviceCall> call = MakeDeviceCall(plan);
  EXPECT_NE(call, nullptr);
  if (call == nullptr) return {.device_error = absl::InternalError("no device form")};
  result->assign(call->result_bytes(), 0);
  const DeviceCall* calls[] = {call.get()};
  void* results[] = {result->data()};
  return executor.RunBatch(calls, results).front();
}

TEST_F(CudaExecutorTest, ViewScattersMatchTheCpu) {
  absl::BitGen gen;
  for (DataType dtype : kAllDataTypes) {
    Tensor input = RandomValues(gen, dtype, {6, 7, 8});
    Tensor row = RandomValues(gen, dtype, {6, 8});
    Tensor slice = RandomValues(gen, dtype, {6, 3, 8});
    Tensor diagonal = RandomValues(gen, dtype, {7, 6});  // min(6, 8 - 1) along the diagonal
    std::vector<ViewScatterPlan> plans;
    plans.push_back(
        *PlanSelectScatter({.input = input.view(), .src = row.view(), .axis = 1, .index = -2}));
    plans.push_back(*PlanSliceScatter(
        {.input = input.view(), .src = slice.view(), .axis = 1, .start = 1, .end = 7, .step = 2}));
    plans.push_back(*PlanDiagonalScatter(
        {.input = input.view(), .src = diagonal.view(), .offset = 1, .axis1 = 0, .axis2 = 2}));
    for (const ViewScatterPlan& plan : plans) {
      Tensor cpu(plan.result_dtype, plan.result_shape);
      ASSERT_TRUE(cpu::ViewScatter(plan, cpu.mutable_view()).ok());
      std::vector<char> result;
      const DeviceOutcome outcome = RunAlone(*executor_, plan, &result);
      ASSERT_TRUE(outcome.ok()) << outcome.device_error;
      EXPECT_TRUE(SameBytes(cpu, result)) << DataTypeName(dtype);
    }
  }
}

TEST_F(CudaExecutorTest, MaskedScatterMatchesTheCpuAndFlagsATooSmallSource) {
  absl::BitGen gen;
  for (DataType dtype : kAllDataTypes) {
    Tensor input = RandomValues(gen, dtype, {300, 70});
    Tensor mask(DataType::kBool, {1, 70});  // broadcast along the rows
    int64_t true_count = 0;
    for (int64_t i = 0; i < mask.numel(); ++i) {
      const bool value = absl::Bernoulli(gen, 0.4);
      mask.mutable_view().data_as<bool>()[i] = value;
      true_count += value ? 300 : 0;
    }
    Tensor source = RandomValues(gen, dtype, {true_count + 5});
    absl::StatusOr<MaskedScatterPlan> plan =
        PlanMaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
    ASSERT_TRUE(plan.ok()) << plan.status();
    Tensor cpu(plan->result_dtype, plan->result_shape);
    ASSERT_TRUE(cpu::MaskedScatter(*plan, cpu.mutable_view()).ok());
    std::vector<char> result;
    DeviceOutcome outcome = RunAlone(*executor_, *plan, &result);
    ASSERT_TRUE(outcome.ok()) << outcome.device_error;
    EXPECT_TRUE(SameBytes(cpu, result)) << DataTypeName(dtype);

    if (true_count == 0) continue;
    const TensorView short_source(dtype, {true_count - 1}, source.view().data());
    absl::StatusOr<MaskedScatterPlan> too_small =
        PlanMaskedScatter({.input = input.view(), .mask = mask.view(), .source = short_source});
    ASSERT_TRUE(too_small.ok());
    outcome = RunAlone(*executor_, *too_small, &result);
    EXPECT_TRUE(outcome.index_error);
  }
}

TEST_F(CudaExecutorTest, GatherNdInTheTensorFlowFormMatchesTheCpu) {
  absl::BitGen gen;
  for (DataType dtype : kAllDataTypes) {
    Tensor input = RandomValues(gen, dtype, {50, 60, 7});
    Tensor index(DataType::kInt64, {40, 2});
    for (int64_t i = 0; i < 40; ++i) {
      index.mutable_view().data_as<int64_t>()[2 * i] = absl::Uniform<int64_t>(gen, -50, 50);
      index.mutable_view().data_as<int64_t>()[2 * i + 1] = absl::Uniform<int64_t>(gen, -60, 60);
    }
    absl::StatusOr<NdPlan> plan = PlanGatherNd({.input = input.view(), .index = index.view()});
    ASSERT_TRUE(plan.ok()) << plan.status();
    Tensor cpu(plan->result_dtype, plan->result_shape);
    ASSERT_TRUE(cpu::GatherNd(*plan, cpu.mutable_view()).ok());
    std::vector<char> result;
    const DeviceOutcome outcome = RunAlone(*executor_, *plan, &result);
    ASSERT_TRUE(outcome.ok()) << outcome.device_error;
    EXPECT_TRUE(SameBytes(cpu, result)) << DataTypeName(dtype);
  }
}

TEST_F(CudaExecutorTest, DeterministicFloatSumsRepeatBitForBitAndMatchTheCpu) {
  absl::BitGen gen;
  for (DataType dtype :
       {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat64, DataType::kComplex64}) {
    for (Reduction reduce : {Reduction::kSum, Reduction::kMean}) {
      for (bool include_self : {true, false}) {
        // Uniform values in [0, 1): sums whose rounding depends on the order.
        Tensor input = RandomValues(gen, dtype, {64, 9});
        Tensor index = RandomIndices(gen, {20000, 9}, 64);
        Tensor source(dtype, {20000, 9});
        DispatchDataType(dtype, [&]<typename T>(TypeTag<T>) {
          for (int64_t i = 0; i < source.numel(); ++i) {
            const double value = absl::Uniform<double>(gen, 0, 1);
            if constexpr (std::is_same_v<T, std::complex<float>>) {
              source.mutable_view().data_as<T>()[i] = T(static_cast<float>(value), 0.5f);
            } else if constexpr (std::is_same_v<T, BFloat16>) {
              source.mutable_view().data_as<T>()[i] = T(static_cast<float>(value));
            } else if constexpr (std::is_floating_point_v<T>) {
              source.mutable_view().data_as<T>()[i] = static_cast<T>(value);
            }
          }
        });
        absl::StatusOr<ScatterPlan> plan = PlanScatter({.input = input.view(),
                                                        .index = index.view(),
                                                        .source = source.view(),
                                                        .reduce = reduce,
                                                        .include_self = include_self});
        ASSERT_TRUE(plan.ok()) << plan.status();
        plan->deterministic = true;
        Tensor cpu(plan->result_dtype, plan->result_shape);
        ASSERT_TRUE(cpu::Scatter(*plan, cpu.mutable_view()).ok());
        std::vector<char> first, second;
        ASSERT_TRUE(RunAlone(*executor_, *plan, &first).ok());
        ASSERT_TRUE(RunAlone(*executor_, *plan, &second).ok());
        EXPECT_EQ(first, second) << DataTypeName(dtype) << " " << ReductionName(reduce);
        // Within rounding of the CPU's sequential sums.
        Tensor gpu(plan->result_dtype, plan->result_shape);
        std::memcpy(gpu.mutable_view().data(), first.data(), first.size());
        for (int64_t i = 0; i < cpu.numel(); ++i) {
          const double expected = testing::ElementAsDouble(cpu, i);
          EXPECT_NEAR(
              testing::ElementAsDouble(gpu, i), expected,
              (dtype == DataType::kBFloat16 ? 1e-2 : 1e-5) * std::max(1.0, std::abs(expected)))
              << DataTypeName(dtype) << " element " << i;
        }
      }
    }
  }
}

TEST_F(CudaExecutorTest, AnOutOfRangeIndexRaisesTheFlagAndTheNextBatchWorks) {
  Tensor input = Tensor::Zeros(DataType::kFloat32, {4});
  Tensor bad = Tensor::Zeros(DataType::kInt64, {3});
  bad.mutable_view().data_as<int64_t>()[1] = 4;
  absl::StatusOr<GatherPlan> plan = PlanGather({.input = input.view(), .index = bad.view()});
  ASSERT_TRUE(plan.ok());
  std::unique_ptr<DeviceCall> call = MakeDeviceCall(*plan);
  std::vector<char> result(call->result_bytes());
  const DeviceCall* calls[] = {call.get()};
  void* results[] = {result.data()};
  std::vector<DeviceOutcome> outcomes = executor_->RunBatch(calls, results);
  EXPECT_TRUE(outcomes[0].index_error);
  EXPECT_TRUE(outcomes[0].device_error.ok());

  bad.mutable_view().data_as<int64_t>()[1] = -4;
  outcomes = executor_->RunBatch(calls, results);
  EXPECT_TRUE(outcomes[0].ok()) << outcomes[0].device_error;
}

TEST(CudaExecutorLimitTest, ABatchOverTheMemoryLimitIsADeviceError) {
  if (QueryDevices().cuda_devices.empty()) GTEST_SKIP() << "no usable GPU";
  absl::StatusOr<std::unique_ptr<DeviceExecutor>> executor =
      CreateCudaExecutor({.memory_limit_bytes = 1024});
  ASSERT_TRUE(executor.ok()) << executor.status();
  Tensor input = Tensor::Zeros(DataType::kFloat32, {4096});
  Tensor index = Tensor::Zeros(DataType::kInt64, {4096});
  absl::StatusOr<GatherPlan> plan = PlanGather({.input = input.view(), .index = index.view()});
  ASSERT_TRUE(plan.ok());
  std::unique_ptr<DeviceCall> call = MakeDeviceCall(*plan);
  std::vector<char> result(call->result_bytes());
  const DeviceCall* calls[] = {call.get()};
  void* results[] = {result.data()};
  const std::vector<DeviceOutcome> outcomes = (*executor)->RunBatch(calls, results);
  EXPECT_EQ(outcomes[0].device_error.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(outcomes[0].device_error.message(), HasSubstr("--gpu_memory_limit=1024"));
}

// 64 concurrent clients of tiny Gather calls against a server on the GPU, batching on and off:
// prints calls/s and the mean batch size (the figures the issue asks for; no time is asserted).
TEST(CudaServiceTest, SixtyFourClientsOfTinyCallsBatchOnTheGpu) {
  if (QueryDevices().cuda_devices.empty()) GTEST_SKIP() << "no usable GPU";
  for (int max_batch : {1, 32}) {
    ServerOptions options;
    options.port = 0;
    options.device = DeviceChoice::kCuda;
    options.queue.max_batch = max_batch;
    options.queue.max_queue_delay = absl::Microseconds(max_batch > 1 ? 200 : 0);
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    constexpr int kClients = 64;
    constexpr int kCallsPerClient = 200;
    std::atomic<int> failures{0};
    const absl::Time start = absl::Now();
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c) {
      clients.emplace_back([&, port = (*server)->port()] {
        std::unique_ptr<v1::TensorOps::Stub> stub = testing::Connect(port);
        v1::GatherRequest request;
        *request.mutable_input() = testing::MakeTensor<float>({4}, {1, 2, 3, 4});
        *request.mutable_index() = testing::MakeTensor<int64_t>({2}, {3, 0});
        for (int i = 0; i < kCallsPerClient; ++i) {
          grpc::ClientContext context;
          v1::GatherResponse response;
          if (!stub->Gather(&context, request, &response).ok() ||
              testing::Values<float>(response.result()) != std::vector<float>{4, 1}) {
            ++failures;
          }
        }
      });
    }
    for (std::thread& client : clients) client.join();
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    EXPECT_EQ(failures.load(), 0);
    const std::string scrape = (*server)->metrics().Scrape();
    const auto read = [&](const std::string& name) {
      const size_t at = scrape.find(name);
      return at == std::string::npos ? 0.0 : std::stod(scrape.substr(at + name.size()));
    };
    const double batches = read("tensorops_batch_size_count{device=\"cuda\"} ");
    const double calls = read("tensorops_batch_size_sum{device=\"cuda\"} ");
    std::printf("max_batch=%d: %.0f calls/s, %.0f device batches, mean batch %.2f\n", max_batch,
                kClients * kCallsPerClient / seconds, batches, batches > 0 ? calls / batches : 0);
    if (max_batch > 1) EXPECT_GT(calls / batches, 1.0);
  }
}

}  // namespace
}  // namespace tensorops
