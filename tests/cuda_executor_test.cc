// The CUDA executor and kernels facing device errors, on real errors of each kind: a CUB failure
// or a failed call leaves nothing behind for the next launch of the batch; an error that failed
// one call does not lose the context, and one that poisoned it disables the executor; a batch run
// from a fresh thread runs on the executor's device. GPU only: each test skips, with the reason,
// where the build has no CUDA or no GPU is usable.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/executor.h"
#include "kernels/device.h"
#include "kernels/device_call.h"
#include "kernels/gather.h"
#include "kernels/index_ops.h"
#include "kernels/masked_scatter.h"
#include "kernels/tensor.h"

#if TENSOROPS_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/context_lost.h"
#endif

namespace tensorops {
namespace {

using ::testing::HasSubstr;

class CudaExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const DeviceInventory devices = QueryDevices();
    if (devices.cuda_devices.empty()) GTEST_SKIP() << "no usable GPU: " << devices.note;
  }
};

#if TENSOROPS_HAVE_CUDA

// PlantError leaves a non-sticky error in the calling thread's last error, the way a failed
// launch inside CUB does (CUB reads it with cudaPeekAtLastError, which leaves it set): an
// allocation no GPU can satisfy.
void PlantError() {
  void* never = nullptr;
  ASSERT_EQ(cudaMalloc(&never, size_t{1} << 62), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
}

// Gather of rows {2, 0, 1} out of [0, 1, 2, 3] as float32: [2, 0, 1].
struct SmallGather {
  Tensor input = Tensor::Zeros(DataType::kFloat32, {4});
  Tensor index = Tensor::Zeros(DataType::kInt64, {3});
  GatherPlan plan;
  std::unique_ptr<DeviceCall> call;

  SmallGather() {
    for (int i = 0; i < 4; ++i) input.mutable_view().data_as<float>()[i] = static_cast<float>(i);
    const int64_t rows[] = {2, 0, 1};
    for (int i = 0; i < 3; ++i) index.mutable_view().data_as<int64_t>()[i] = rows[i];
    absl::StatusOr<GatherPlan> planned = PlanGather({.input = input.view(), .index = index.view()});
    EXPECT_TRUE(planned.ok()) << planned.status();
    plan = *planned;
    call = MakeDeviceCall(plan);
    EXPECT_NE(call, nullptr);
  }

  static std::vector<float> Expected() { return {2, 0, 1}; }
};

// OnDevice holds device copies of a call's inputs, its result and error flag and `workspace_bytes`
// of scratch: what the executor hands Enqueue, set up by the test instead.
class OnDevice {
 public:
  OnDevice(const DeviceCall& call, int64_t workspace_bytes) {
    for (const InputSpan& span : call.inputs()) {
      void* copy = nullptr;
      EXPECT_EQ(cudaMalloc(&copy, span.bytes), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(copy, span.data, span.bytes, cudaMemcpyHostToDevice), cudaSuccess);
      inputs_.push_back(copy);
    }
    EXPECT_EQ(cudaMalloc(&result_, (call.result_bytes() + 3) / 4 * 4), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&workspace_, workspace_bytes + 1), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&flag_, sizeof(int32_t)), cudaSuccess);
    EXPECT_EQ(cudaMemset(flag_, 0, sizeof(int32_t)), cudaSuccess);
  }
  ~OnDevice() {
    for (void* copy : inputs_) cudaFree(copy);
    cudaFree(result_);
    cudaFree(workspace_);
    cudaFree(flag_);
  }

  // `workspace_bytes`: what the call is told it has, which a test may set below what it asked.
  DeviceBuffers buffers(int64_t workspace_bytes) const {
    return {.inputs = inputs_,
            .result = result_,
            .workspace = workspace_,
            .workspace_bytes = workspace_bytes,
            .error_flag = flag_};
  }

  std::vector<char> Result(int64_t bytes) const {
    std::vector<char> host(bytes);
    EXPECT_EQ(cudaMemcpy(host.data(), result_, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  std::vector<void*> inputs_;
  void* result_ = nullptr;
  void* workspace_ = nullptr;
  int32_t* flag_ = nullptr;
};

std::vector<float> AsFloats(const std::vector<char>& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

// A failed CUB call clears the error it may leave behind (CubStatus): otherwise the next launch's
// own check would report it, and the next call of the batch would fall back to the CPU with this
// call's message. MaskedScatter's prefix sum is a CUB scan; given less temporary storage than it
// asked for, CUB refuses to run it.
TEST_F(CudaExecutorTest, AFailedCubCallLeavesNoErrorForTheNextLaunch) {
  Tensor input = Tensor::Zeros(DataType::kFloat32, {1024});
  Tensor mask = Tensor::Zeros(DataType::kBool, {1024});
  Tensor source = Tensor::Zeros(DataType::kFloat32, {1024});
  for (int i = 0; i < 1024; ++i) mask.mutable_view().data_as<bool>()[i] = true;
  absl::StatusOr<MaskedScatterPlan> plan =
      PlanMaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::unique_ptr<DeviceCall> masked = MakeDeviceCall(*plan);
  ASSERT_NE(masked, nullptr);
  absl::StatusOr<int64_t> workspace_bytes = masked->WorkspaceBytes();
  ASSERT_TRUE(workspace_bytes.ok()) << workspace_bytes.status();
  // The positions (one int32 per element below 2^31 elements, 4 KiB) and nothing for CUB.
  constexpr int64_t kPositionsOnly = 1024 * 4;
  ASSERT_GT(*workspace_bytes, kPositionsOnly);
  OnDevice masked_memory(*masked, *workspace_bytes);

  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  PlantError();
  const absl::Status failed = masked->Enqueue(masked_memory.buffers(kPositionsOnly), stream);
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  EXPECT_THAT(failed.message(), HasSubstr("prefix sum"));
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess)
      << "left behind: " << cudaGetErrorString(cudaGetLastError());

  SmallGather gather;
  OnDevice gather_memory(*gather.call, 0);
  const absl::Status next = gather.call->Enqueue(gather_memory.buffers(0), stream);
  EXPECT_TRUE(next.ok()) << next;
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(AsFloats(gather_memory.Result(gather.call->result_bytes())), SmallGather::Expected());
  cudaStreamDestroy(stream);
}

// A DeviceCall that fails its Enqueue and leaves an error in the thread's last error, as a call
// whose CUB or launch failure went unread would.
// Stored tensors in device memory (--store_device=cuda): a lookup reads its resident table where
// it is, and an in-place IndexReduce SUM writes the resident table itself; only the small inputs
// are staged, and the results match the CPU's.
TEST_F(CudaExecutorTest, ResidentInputsAreReadAndResidentResultsWrittenInPlace) {
  absl::StatusOr<std::unique_ptr<DeviceExecutor>> executor = CreateCudaExecutor({.streams = 1});
  ASSERT_TRUE(executor.ok()) << executor.status();
  TensorMemory* memory = (*executor)->resident_memory();
  ASSERT_NE(memory, nullptr);
  EXPECT_FALSE(memory->host_accessible());
  constexpr int64_t kRows = 1000;
  constexpr int64_t kColumns = 8;
  Tensor table(DataType::kFloat32, {kRows, kColumns});
  for (int64_t i = 0; i < kRows * kColumns; ++i) {
    table.data_as<float>()[i] = static_cast<float>(i % 97) - 40.0f;
  }
  void* resident = memory->Allocate(table.nbytes());
  ASSERT_NE(resident, nullptr);
  ASSERT_TRUE(memory->CopyFromHost(resident, table.data(), table.nbytes()).ok());
  const TensorView on_device(DataType::kFloat32, {kRows, kColumns}, resident);

  Tensor rows(DataType::kInt64, {64});
  for (int64_t i = 0; i < 64; ++i) rows.data_as<int64_t>()[i] = (i * 131) % kRows;
  // The lookup.
  absl::StatusOr<GatherPlan> lookup = PlanIndexSelect({.input = on_device, .index = rows.view()});
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  std::unique_ptr<DeviceCall> lookup_call = MakeDeviceCall(*lookup);
  ASSERT_NE(lookup_call, nullptr);
  lookup_call->MarkResident(resident, table.nbytes());
  int64_t staged = 0;
  for (const InputSpan& span : lookup_call->inputs()) staged += span.resident ? 0 : span.bytes;
  EXPECT_EQ(staged, rows.nbytes());
  std::vector<char> looked_up(lookup_call->result_bytes());
  {
    const DeviceCall* calls[] = {lookup_call.get()};
    void* results[] = {looked_up.data()};
    const std::vector<DeviceOutcome> outcomes = (*executor)->RunBatch(calls, results);
    ASSERT_TRUE(outcomes[0].ok()) << outcomes[0].device_error;
  }
  for (int64_t i = 0; i < 64; ++i) {
    EXPECT_EQ(
        std::memcmp(looked_up.data() + i * kColumns * 4,
                    table.data_as<float>() + rows.data_as<int64_t>()[i] * kColumns, kColumns * 4),
        0)
        << "row " << i;
  }

  // The push, in place: duplicate rows on purpose.
  Tensor gradient(DataType::kFloat32, {64, kColumns});
  for (int64_t i = 0; i < 64 * kColumns; ++i) gradient.data_as<float>()[i] = 0.25f * (i % 5);
  for (int64_t i = 0; i < 64; ++i) rows.data_as<int64_t>()[i] = i % 16;
  absl::StatusOr<ScatterPlan> push =
      PlanIndexReduce({.input = on_device, .index = rows.view(), .source = gradient.view()});
  ASSERT_TRUE(push.ok()) << push.status();
  std::unique_ptr<DeviceCall> push_call = MakeDeviceCall(*push);
  ASSERT_NE(push_call, nullptr);
  push_call->MarkResident(resident, table.nbytes());
  push_call->set_resident_result(resident);
  {
    const DeviceCall* calls[] = {push_call.get()};
    void* results[] = {nullptr};
    const std::vector<DeviceOutcome> outcomes = (*executor)->RunBatch(calls, results);
    ASSERT_TRUE(outcomes[0].ok()) << outcomes[0].device_error;
  }
  absl::StatusOr<ScatterPlan> on_host =
      PlanIndexReduce({.input = table.view(), .index = rows.view(), .source = gradient.view()});
  ASSERT_TRUE(on_host.ok()) << on_host.status();
  Tensor expected(DataType::kFloat32, {kRows, kColumns});
  ASSERT_TRUE(cpu::Scatter(*on_host, expected.mutable_view()).ok());
  Tensor updated(DataType::kFloat32, {kRows, kColumns});
  ASSERT_TRUE(memory->CopyToHost(updated.data(), resident, table.nbytes()).ok());
  EXPECT_EQ(std::memcmp(updated.data(), expected.data(), table.nbytes()), 0);
  memory->Free(resident, table.nbytes());
}

class FailingCall final : public DeviceCall {
 public:
  FailingCall() { result_bytes_ = 4; }
  absl::Status Enqueue(const DeviceBuffers&, void*) const override {
    PlantError();
    return absl::UnavailableError("the failing call failed");
  }
};

TEST_F(CudaExecutorTest, ACallThatFailsDoesNotFailTheNextCallOfItsBatch) {
  absl::StatusOr<std::unique_ptr<DeviceExecutor>> executor = CreateCudaExecutor({.streams = 1});
  ASSERT_TRUE(executor.ok()) << executor.status();
  SmallGather gather;
  FailingCall failing;
  std::vector<char> failing_result(4);
  std::vector<char> gather_result(gather.call->result_bytes());
  const DeviceCall* calls[] = {&failing, gather.call.get()};
  void* results[] = {failing_result.data(), gather_result.data()};
  const std::vector<DeviceOutcome> outcomes = (*executor)->RunBatch(calls, results);
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_THAT(outcomes[0].device_error.message(), HasSubstr("the failing call failed"));
  EXPECT_TRUE(outcomes[1].ok()) << outcomes[1].device_error;
  EXPECT_EQ(AsFloats(gather_result), SmallGather::Expected());
  // And the executor stays enabled.
  const DeviceCall* again[] = {gather.call.get()};
  void* again_results[] = {gather_result.data()};
  EXPECT_TRUE((*executor)->RunBatch(again, again_results)[0].ok());
}

// An error that failed only its own call (an invalid argument at enqueue time) or ran out of
// memory leaves the context usable: ContextLost says so, clears it, and the stream still works.
TEST_F(CudaExecutorTest, AnErrorThatFailedOnlyItsCallDoesNotLoseTheContext) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  char host[16] = {};
  const cudaError_t invalid =
      cudaMemcpyAsync(nullptr, host, sizeof(host), cudaMemcpyHostToDevice, stream);
  ASSERT_NE(invalid, cudaSuccess);
  EXPECT_FALSE(cuda::ContextLost(invalid, stream)) << cudaGetErrorString(invalid);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  PlantError();
  EXPECT_FALSE(cuda::ContextLost(cudaErrorMemoryAllocation, stream));
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
}

// A call whose kernel reads an illegal address: the executor hands it copies of its inputs at an
// address no allocation covers.
class IllegalAddressCall final : public DeviceCall {
 public:
  explicit IllegalAddressCall(const DeviceCall& real) : real_(real) {
    result_bytes_ = real.result_bytes();
  }
  absl::Status Enqueue(const DeviceBuffers& buffers, void* stream) const override {
    // The first page is never mapped, on the device as on the host.
    std::vector<void*> nowhere(buffers.inputs.size(), reinterpret_cast<void*>(uintptr_t{256}));
    DeviceBuffers bad = buffers;
    bad.inputs = nowhere;
    return real_.Enqueue(bad, stream);
  }

 private:
  const DeviceCall& real_;
};

// Runs in a child process (the death test's), since a sticky error poisons the CUDA context for
// the rest of the process: exits 0 with the executor's later message when the batch failed with a
// device error and the next batch was refused by the disabled executor, 1 with what went wrong.
[[noreturn]] void RunABatchThatPoisonsTheContext() {
  absl::StatusOr<std::unique_ptr<DeviceExecutor>> executor = CreateCudaExecutor({.streams = 1});
  if (!executor.ok()) {
    std::fprintf(stderr, "no executor: %s\n", std::string(executor.status().message()).c_str());
    std::_Exit(1);
  }
  SmallGather gather;
  IllegalAddressCall poisoning(*gather.call);
  std::vector<char> result(gather.call->result_bytes());
  const DeviceCall* bad[] = {&poisoning};
  void* results[] = {result.data()};
  const DeviceOutcome first = (*executor)->RunBatch(bad, results)[0];
  if (first.device_error.ok()) {
    std::fprintf(stderr, "the illegal address went unnoticed\n");
    std::_Exit(1);
  }
  const DeviceCall* good[] = {gather.call.get()};
  const DeviceOutcome second = (*executor)->RunBatch(good, results)[0];
  std::fprintf(stderr, "first: %s\nsecond: %s\n", std::string(first.device_error.message()).c_str(),
               std::string(second.device_error.message()).c_str());
  std::_Exit(second.device_error.ok() ? 1 : 0);
}

TEST_F(CudaExecutorTest, AnErrorThatPoisonsTheContextDisablesTheExecutor) {
  // "threadsafe" re-runs this test binary for the child, whose CUDA runtime starts fresh.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(RunABatchThatPoisonsTheContext(), ::testing::ExitedWithCode(0),
              "first: cuda: running the batch: an illegal memory access[^\n]*\n"
              "second: cuda:0 is disabled after an unrecoverable error");
}

// The device is per thread: a batch run from a fresh thread whose current device is another one
// runs on the executor's device, and its pinned staging and CUB's size queries with it.
TEST_F(CudaExecutorTest, ABatchFromAFreshThreadRunsOnTheExecutorsDevice) {
  const int devices = static_cast<int>(QueryDevices().cuda_devices.size());
  if (devices < 2)
    GTEST_SKIP() << "needs two GPUs to tell the devices apart; " << devices << " here";
  absl::StatusOr<std::unique_ptr<DeviceExecutor>> executor =
      CreateCudaExecutor({.device = devices - 1, .streams = 1});
  ASSERT_TRUE(executor.ok()) << executor.status();
  SmallGather gather;
  std::vector<char> result(gather.call->result_bytes());
  DeviceOutcome outcome;
  int device_after = -1;
  std::thread([&] {
    cudaSetDevice(0);
    const DeviceCall* calls[] = {gather.call.get()};
    void* results[] = {result.data()};
    outcome = (*executor)->RunBatch(calls, results)[0];
    cudaGetDevice(&device_after);
  }).join();
  EXPECT_TRUE(outcome.ok()) << outcome.device_error;
  EXPECT_EQ(AsFloats(result), SmallGather::Expected());
  EXPECT_EQ(device_after, devices - 1);
}

#else

TEST_F(CudaExecutorTest, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif  // TENSOROPS_HAVE_CUDA

}  // namespace
}  // namespace tensorops
