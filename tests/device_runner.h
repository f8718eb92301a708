// Runs the op suites' cases on a device: the CPU always, CUDA where a GPU is usable (skipped, with
// the reason, elsewhere), so that one randomized suite checks both against the reference.
//
//   class GatherRandomTest : public testing::DeviceTest<DataType> {};
//   TEST_P(GatherRandomTest, MatchesReference) {
//     absl::StatusOr<Tensor> actual = runner().Run(GatherArgs{.input = x, .index = idx});
//     if (testing::HasNoDeviceForm(actual.status())) return;  // counted, reported at the end
//     ...
//   }
//   TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(GatherRandomTest, ::testing::ValuesIn(kAllDataTypes),
//                                         testing::DataTypeParamName);
//
// The instances are named Cpu/GatherRandomTest.MatchesReference/float32 and
// Cuda/GatherRandomTest.MatchesReference/float32: --gtest_filter='Cuda/*' picks the GPU's.
//
// On the CPU a call runs through its plan's CPU kernel into a new tensor, exactly what the
// `Op(args)` convenience functions do, so a CPU instance checks what the suite checked before it
// had a device parameter. On CUDA it runs the way the server runs it: MakeDeviceCall(plan), then a
// batch of one on an executor the process creates once. The kernels only flag an out-of-range
// index (or a too-small masked_scatter source); the server then re-runs the call on the CPU, whose
// INVALID_ARGUMENT names the index. The runner does the same, so both devices answer a bad index
// with the same error, and a flag the CPU kernel does not confirm fails as a GPU bug. A call with
// no GPU form (MakeDeviceCall returns null: an empty result, complex128 PROD, ScatterNd's general
// form, a strided masked_scatter source, ...) is what the server would run on the CPU: the runner
// returns a status HasNoDeviceForm recognizes, the test skips that case, and DeviceTest reports
// how many it skipped and why (the whole test as skipped when none ran).
#ifndef TENSOROPS_TESTS_DEVICE_RUNNER_H_
#define TENSOROPS_TESTS_DEVICE_RUNNER_H_

#include <complex>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "kernels/cuda/executor.h"
#include "kernels/device.h"
#include "kernels/device_call.h"
#include "kernels/dispatch.h"
#include "kernels/gather.h"
#include "kernels/half.h"
#include "kernels/index_ops.h"
#include "kernels/masked_scatter.h"
#include "kernels/nd_ops.h"
#include "kernels/scatter.h"
#include "kernels/status_macros.h"
#include "kernels/tensor.h"
#include "kernels/view_scatter.h"
#include "tests/reference.h"

namespace tensorops::testing {

enum class TestDevice { kCpu, kCuda };

// TestDeviceName is the device's name in test names and messages: "Cpu", "Cuda".
inline std::string TestDeviceName(TestDevice device) {
  return device == TestDevice::kCpu ? "Cpu" : "Cuda";
}

// CachedDeviceInventory is QueryDevices() of this process, asked once (it starts the CUDA runtime).
inline const DeviceInventory& CachedDeviceInventory() {
  static const DeviceInventory* const inventory = new DeviceInventory(QueryDevices());
  return *inventory;
}

// UnavailableReason says why `device` cannot run here ("no usable GPU: CUDA runtime: ..."), or is
// empty when it can.
inline std::string UnavailableReason(TestDevice device) {
  if (device == TestDevice::kCpu) return "";
  const DeviceInventory& inventory = CachedDeviceInventory();
  if (!inventory.cuda_devices.empty()) return "";
  return absl::StrCat("no usable GPU: ", inventory.note);
}

// SkipUnlessAvailable skips the running test, with UnavailableReason as its message, when `device`
// cannot run here. GTEST_SKIP from a helper returns from the helper only: call it from a fixture's
// SetUp, after which gtest does not run the test body of a skipped test.
inline void SkipUnlessAvailable(TestDevice device) {
  const std::string reason = UnavailableReason(device);
  if (!reason.empty()) GTEST_SKIP() << reason;
}

// SharedCudaExecutor is the CUDA executor every test of the process runs on, created on first use
// with the server's default options; its creation error where it cannot be created.
inline absl::StatusOr<DeviceExecutor*> SharedCudaExecutor() {
  // Never destroyed: at exit its destructor would race the CUDA runtime's own teardown.
  static const auto* const executor =
      new absl::StatusOr<std::unique_ptr<DeviceExecutor>>(CreateCudaExecutor({}));
  if (!executor->ok()) return executor->status();
  return executor->value().get();
}

// ---- Calls with no GPU form ----

inline constexpr char kNoDeviceFormPayload[] = "tensorops.testing/no-device-form";

// NoDeviceFormError is what running a call with no GPU form on CUDA returns: UNIMPLEMENTED with
// `why` as its message and a payload HasNoDeviceForm looks for (a kernel never sets it).
inline absl::Status NoDeviceFormError(const std::string& why) {
  absl::Status status = absl::UnimplementedError(why);
  status.SetPayload(kNoDeviceFormPayload, absl::Cord(why));
  return status;
}

// HasNoDeviceForm: whether `status` says the call has no GPU form (the case is to be skipped).
inline bool HasNoDeviceForm(const absl::Status& status) {
  return status.GetPayload(kNoDeviceFormPayload).has_value();
}

namespace device_runner_internal {

// Why MakeDeviceCall returned null for a plan, in the words of device_call.h's list.
inline std::string WhyNoDeviceForm(std::string_view op, const Shape& result_shape) {
  if (NumElements(result_shape) == 0) return absl::StrCat(std::string(op), ": the result is empty");
  return absl::StrCat(std::string(op), ": no GPU kernel for this form");
}
inline std::string WhyNoDeviceForm(const GatherPlan& plan) {
  return WhyNoDeviceForm(plan.op, plan.result_shape);
}
inline std::string WhyNoDeviceForm(const ScatterPlan& plan) {
  if (NumElements(plan.result_shape) > 0 &&
      !DeviceScatterSupported(plan.result_dtype, plan.reduce)) {
    return absl::StrCat(std::string(plan.op), ": ", std::string(DataTypeName(plan.result_dtype)),
                        " ", std::string(ReductionName(plan.reduce)), " has no GPU kernel");
  }
  return WhyNoDeviceForm(plan.op, plan.result_shape);
}
inline std::string WhyNoDeviceForm(const ViewScatterPlan& plan) {
  return WhyNoDeviceForm("view scatter", plan.result_shape);
}
inline std::string WhyNoDeviceForm(const MaskedScatterPlan& plan) {
  if (NumElements(plan.result_shape) > 0 && !plan.source.is_contiguous()) {
    return "masked_scatter: the source is not contiguous";
  }
  return WhyNoDeviceForm("masked_scatter", plan.result_shape);
}
inline std::string WhyNoDeviceForm(const NdPlan& plan) {
  if (plan.single_axis_gather.has_value()) return WhyNoDeviceForm(*plan.single_axis_gather);
  if (plan.single_axis_scatter.has_value()) return WhyNoDeviceForm(*plan.single_axis_scatter);
  if (NumElements(plan.result_shape) == 0) return WhyNoDeviceForm(plan.op, plan.result_shape);
  if (plan.op == "scatter_nd") {
    return absl::StrCat("scatter_nd: ", std::string(DataTypeName(plan.result_dtype)), " ",
                        std::string(ReductionName(plan.reduce)), " has no GPU kernel");
  }
  return "gather_nd: the input or the index is not contiguous";
}

// RunPlanOn runs `plan` on `device` into a new tensor; `cpu_kernel(plan, result)` is the plan's
// CPU kernel.
template <typename Plan, typename CpuKernel>
absl::StatusOr<Tensor> RunPlanOn(TestDevice device, const Plan& plan, CpuKernel cpu_kernel) {
  Tensor result(plan.result_dtype, plan.result_shape);
  if (device == TestDevice::kCpu) {
    TENSOROPS_RETURN_IF_ERROR(cpu_kernel(plan, result.mutable_view()));
    return result;
  }
  const std::unique_ptr<DeviceCall> call = MakeDeviceCall(plan);
  if (call == nullptr) return NoDeviceFormError(WhyNoDeviceForm(plan));
  TENSOROPS_ASSIGN_OR_RETURN(DeviceExecutor* const executor, SharedCudaExecutor());
  if (call->result_bytes() != result.nbytes()) {
    return absl::InternalError(absl::StrCat("cuda: the call's result has ", call->result_bytes(),
                                            " bytes, the plan's ", result.nbytes()));
  }
  const DeviceCall* const calls[] = {call.get()};
  void* const results[] = {result.data()};
  const DeviceOutcome outcome = executor->RunBatch(calls, results).front();
  if (!outcome.device_error.ok()) {
    // The server would re-run the call on the CPU and count a fallback; a test wants the GPU's
    // answer, so a device failure fails it, under its own code.
    return absl::Status(outcome.device_error.code(),
                        absl::StrCat("cuda: ", outcome.device_error.message()));
  }
  if (outcome.index_error) {
    Tensor scratch(plan.result_dtype, plan.result_shape);
    const absl::Status cpu_status = cpu_kernel(plan, scratch.mutable_view());
    if (cpu_status.ok()) {
      return absl::InternalError(
          "cuda: the kernels flagged an out-of-range index (or a too-small source) that the CPU "
          "kernel accepts");
    }
    return cpu_status;
  }
  return result;
}

}  // namespace device_runner_internal

// RunOn runs a planned call on `device` into a new contiguous tensor of the plan's dtype and
// shape: the result, the kernel's error (an out-of-range index: INVALID_ARGUMENT from either
// device), a device failure (CUDA), or NoDeviceFormError where CUDA has no form for the call. The
// plan's memory must stay alive and unchanged until it returns.
inline absl::StatusOr<Tensor> RunOn(TestDevice device, const GatherPlan& plan) {
  return device_runner_internal::RunPlanOn(
      device, plan,
      [](const GatherPlan& p, const MutableTensorView& r) { return cpu::Gather(p, r); });
}
inline absl::StatusOr<Tensor> RunOn(TestDevice device, const ScatterPlan& plan) {
  return device_runner_internal::RunPlanOn(
      device, plan,
      [](const ScatterPlan& p, const MutableTensorView& r) { return cpu::Scatter(p, r); });
}
inline absl::StatusOr<Tensor> RunOn(TestDevice device, const ViewScatterPlan& plan) {
  return device_runner_internal::RunPlanOn(
      device, plan,
      [](const ViewScatterPlan& p, const MutableTensorView& r) { return cpu::ViewScatter(p, r); });
}
inline absl::StatusOr<Tensor> RunOn(TestDevice device, const MaskedScatterPlan& plan) {
  return device_runner_internal::RunPlanOn(
      device, plan, [](const MaskedScatterPlan& p, const MutableTensorView& r) {
        return cpu::MaskedScatter(p, r);
      });
}
// GatherNd or ScatterNd, as the plan's `op` says.
inline absl::StatusOr<Tensor> RunOn(TestDevice device, const NdPlan& plan) {
  return device_runner_internal::RunPlanOn(
      device, plan, [](const NdPlan& p, const MutableTensorView& r) {
        return p.op == "gather_nd" ? cpu::GatherNd(p, r) : cpu::ScatterNd(p, r);
      });
}

// DeviceRunner runs one test's calls on its device and keeps count of those CUDA has no form for,
// to report them when the test ends (DeviceTest does).
class DeviceRunner {
 public:
  explicit DeviceRunner(TestDevice device = TestDevice::kCpu) : device_(device) {}

  TestDevice device() const { return device_; }

  // Run plans `args` with the op's Plan* function and runs the plan (RunOn): what `Op(args)`
  // returns, on this runner's device.
  absl::StatusOr<Tensor> Run(const GatherArgs& args) { return RunPlanned(PlanGather(args)); }
  absl::StatusOr<Tensor> Run(const ScatterArgs& args) { return RunPlanned(PlanScatter(args)); }
  absl::StatusOr<Tensor> Run(const IndexSelectArgs& args) {
    return RunPlanned(PlanIndexSelect(args));
  }
  absl::StatusOr<Tensor> Run(const IndexReduceArgs& args) {
    return RunPlanned(PlanIndexReduce(args));
  }
  absl::StatusOr<Tensor> Run(const SelectScatterArgs& args) {
    return RunPlanned(PlanSelectScatter(args));
  }
  absl::StatusOr<Tensor> Run(const SliceScatterArgs& args) {
    return RunPlanned(PlanSliceScatter(args));
  }
  absl::StatusOr<Tensor> Run(const DiagonalScatterArgs& args) {
    return RunPlanned(PlanDiagonalScatter(args));
  }
  absl::StatusOr<Tensor> Run(const MaskedScatterArgs& args) {
    return RunPlanned(PlanMaskedScatter(args));
  }
  absl::StatusOr<Tensor> Run(const GatherNdArgs& args) { return RunPlanned(PlanGatherNd(args)); }
  absl::StatusOr<Tensor> Run(const ScatterNdArgs& args) { return RunPlanned(PlanScatterNd(args)); }

  // RunPlan runs an already planned call (RunOn), counted like Run's.
  template <typename Plan>
  absl::StatusOr<Tensor> RunPlan(const Plan& plan) {
    absl::StatusOr<Tensor> result = RunOn(device_, plan);
    ++calls_;
    if (HasNoDeviceForm(result.status())) {
      ++without_device_form_[std::string(result.status().message())];
    }
    return result;
  }

  // Calls run (planning errors included) and calls skipped for want of a GPU form.
  int64_t calls() const { return calls_; }
  int64_t calls_without_device_form() const {
    int64_t count = 0;
    for (const auto& [why, times] : without_device_form_) count += times;
    return count;
  }

  // ReportCallsWithoutDeviceForm, at the end of a test, says how many of its calls had no GPU form
  // and why: as the skip message when none ran on the device (the test then counts as skipped),
  // otherwise on stdout. Nothing when every call ran.
  void ReportCallsWithoutDeviceForm() const {
    const int64_t skipped = calls_without_device_form();
    if (skipped == 0) return;
    const std::string report = absl::StrCat(
        TestDeviceName(device_), ": ", skipped, " of ", calls_,
        " calls have no GPU form and were not run (the server runs them on the CPU): ",
        absl::StrJoin(without_device_form_, "; ", [](std::string* out, const auto& entry) {
          absl::StrAppend(out, entry.first, " (", entry.second, ")");
        }));
    if (skipped == calls_) GTEST_SKIP() << report;
    std::cout << "[   NOTE   ] " << report << "\n";
  }

 private:
  template <typename Plan>
  absl::StatusOr<Tensor> RunPlanned(const absl::StatusOr<Plan>& plan) {
    if (!plan.ok()) {
      ++calls_;
      return plan.status();
    }
    return RunPlan(*plan);
  }

  TestDevice device_;
  int64_t calls_ = 0;
  // Why a call had no GPU form -> how many calls.
  std::map<std::string, int64_t> without_device_form_;
};

// ---- Value-parameterized suites over a device ----

// DeviceTest<Leading> is the fixture of a suite parameterized over (Leading, TestDevice), Leading
// being what the suite was parameterized over before (a dtype, a tuple, ...). Instances on a device
// that cannot run here are skipped in SetUp with the reason; runner() runs the calls on the
// instance's device and reports the ones without a GPU form when the test ends.
template <typename Leading>
class DeviceTest : public ::testing::TestWithParam<std::tuple<Leading, TestDevice>> {
 protected:
  const Leading& leading_param() const { return std::get<0>(this->GetParam()); }
  TestDevice device() const { return std::get<1>(this->GetParam()); }
  DeviceRunner& runner() { return runner_; }

  void SetUp() override { SkipUnlessAvailable(device()); }
  void TearDown() override { runner_.ReportCallsWithoutDeviceForm(); }

 private:
  DeviceRunner runner_{std::get<1>(this->GetParam())};
};

// DeviceDtypeReductionTest is testing::DtypeReductionTest over a device.
class DeviceDtypeReductionTest : public DeviceTest<DtypeReductionParam> {
 protected:
  DataType dtype() const { return std::get<0>(leading_param()); }
  Reduction reduce() const { return std::get<1>(leading_param()); }
  bool include_self() const { return std::get<2>(leading_param()); }
  // DtypeReductionTest::ParamSeed's formula, so that every instance draws the cases the suite drew
  // before it had a device parameter (and the CPU and CUDA instances the same ones).
  uint64_t ParamSeed() const {
    return static_cast<uint64_t>(dtype()) * 1000 + static_cast<uint64_t>(reduce()) * 10 +
           include_self();
  }
};

// DeviceParamName names an instance of DeviceTest<Leading> by its leading parameter alone, with
// the suite's old name generator `leading_name` (the device is the instantiation's prefix).
template <typename LeadingName>
auto DeviceParamName(LeadingName leading_name) {
  return [leading_name](const auto& info) {
    using Leading = std::tuple_element_t<0, std::decay_t<decltype(info.param)>>;
    return leading_name(::testing::TestParamInfo<Leading>(std::get<0>(info.param), info.index));
  };
}

// TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE instantiates a DeviceTest suite twice: prefix Cpu, and
// prefix Cuda (skipped where no GPU is usable), each over every value of `leading_params`.
#define TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(suite, leading_params, leading_name)    \
  INSTANTIATE_TEST_SUITE_P(                                                           \
      Cpu, suite,                                                                     \
      ::testing::Combine(leading_params,                                              \
                         ::testing::Values(::tensorops::testing::TestDevice::kCpu)),  \
      ::tensorops::testing::DeviceParamName(leading_name));                           \
  INSTANTIATE_TEST_SUITE_P(                                                           \
      Cuda, suite,                                                                    \
      ::testing::Combine(leading_params,                                              \
                         ::testing::Values(::tensorops::testing::TestDevice::kCuda)), \
      ::tensorops::testing::DeviceParamName(leading_name))

// ---- GPU-only checks ----

// CudaTest is the fixture of checks that only mean something on a GPU (the executor's batches,
// bit-for-bit agreement with the CPU, repeatability): skipped, with the reason, where none is
// usable.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override { SkipUnlessAvailable(TestDevice::kCuda); }
};

// SmallIntegerValues is a tensor of small integers v in [-3, 3] (bool: v > 0; complex: v + (v-1)i).
// Sums and products of a few of them are exact in every dtype, so the GPU's order of rounding
// cannot matter: its results must equal the CPU's bit for bit.
inline Tensor SmallIntegerValues(absl::BitGen& gen, DataType dtype, const Shape& shape) {
  Tensor tensor(dtype, shape);
  DispatchDataType(dtype, [&]<typename T>(TypeTag<T>) {
    T* data = tensor.data_as<T>();
    for (int64_t i = 0; i < tensor.numel(); ++i) {
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

// UnitFactors is a tensor of +-1 (bool: true, false), every seventh element -1: products of
// many of them stay exact in every dtype (float16 has 11 bits, so factors of 3 would not).
inline Tensor UnitFactors(DataType dtype, const Shape& shape) {
  Tensor tensor(dtype, shape);
  DispatchDataType(dtype, [&]<typename T>(TypeTag<T>) {
    T* data = tensor.data_as<T>();
    for (int64_t i = 0; i < tensor.numel(); ++i) {
      if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
        data[i] = T(i % 7 == 0 ? -1.0f : 1.0f);
      } else if constexpr (std::is_same_v<T, bool>) {
        data[i] = i % 7 != 0;
      } else {
        data[i] = static_cast<T>(i % 7 == 0 ? -1 : 1);
      }
    }
  });
  return tensor;
}

// RoundingValues is a tensor of a floating `dtype` whose sums (`product_friendly`: products) are
// rounded differently in every order: reals uniform in [0, 1) (near 1 for products, so that they
// neither overflow nor vanish), imaginary parts within 0.001.
inline Tensor RoundingValues(absl::BitGen& gen, DataType dtype, const Shape& shape,
                             bool product_friendly) {
  const double low = product_friendly ? 0.999 : 0;
  const double high = product_friendly ? 1.001 : 1;
  Tensor tensor(dtype, shape);
  DispatchDataType(dtype, [&]<typename T>(TypeTag<T>) {
    T* data = tensor.data_as<T>();
    for (int64_t i = 0; i < tensor.numel(); ++i) {
      const double value = absl::Uniform<double>(gen, low, high);
      const double imaginary = absl::Uniform<double>(gen, -0.001, 0.001);
      if constexpr (std::is_same_v<T, std::complex<float>>) {
        data[i] = T(static_cast<float>(value), static_cast<float>(imaginary));
      } else if constexpr (std::is_same_v<T, std::complex<double>>) {
        data[i] = T(value, imaginary);
      } else if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>) {
        data[i] = T(static_cast<float>(value));
      } else if constexpr (std::is_floating_point_v<T>) {
        data[i] = static_cast<T>(value);
      }
    }
  });
  return tensor;
}

// ExpectTheCpusBytesOnCuda runs a scatter-like `plan` (Scatter's, ScatterNd's) of exact values
// on CUDA: its result must be the CPU's bytes (but for the signs of a complex product's zero
// parts, which depend on the order of the factors), and with `deterministic` exactly the CPU's.
// A plan without a GPU form must be one that DeviceScatterSupported refuses.
template <typename Plan>
void ExpectTheCpusBytesOnCuda(Plan& plan) {
  const absl::StatusOr<Tensor> cpu = RunOn(TestDevice::kCpu, plan);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const absl::StatusOr<Tensor> gpu = RunOn(TestDevice::kCuda, plan);
  if (HasNoDeviceForm(gpu.status())) {
    EXPECT_FALSE(DeviceScatterSupported(plan.result_dtype, plan.reduce));
    return;
  }
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  if (!(IsComplex(plan.result_dtype) && plan.reduce == Reduction::kProd)) {
    ExpectSameBytes(*gpu, *cpu);
  }
  plan.deterministic = true;
  const absl::StatusOr<Tensor> deterministic = RunOn(TestDevice::kCuda, plan);
  ASSERT_TRUE(deterministic.ok()) << deterministic.status();
  ExpectSameBytes(*deterministic, *cpu);
}

// ExpectCudaGivesTheCpusBytes runs a `plan` whose GPU result is exact (every op that moves
// elements: Gather, IndexSelect, MaskedScatter, the view scatters, GatherNd) on the CPU and on
// CUDA: both must succeed, with the same bytes.
template <typename Plan>
void ExpectCudaGivesTheCpusBytes(const absl::StatusOr<Plan>& plan) {
  ASSERT_TRUE(plan.ok()) << plan.status();
  const absl::StatusOr<Tensor> cpu = RunOn(TestDevice::kCpu, *plan);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const absl::StatusOr<Tensor> gpu = RunOn(TestDevice::kCuda, *plan);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ExpectSameBytes(*gpu, *cpu);
}

// IndexWidthName names the instances of a suite run with the index walks' natural width (32 bits
// where every offset fits) and with 64 bits forced (the bool parameter).
inline std::string IndexWidthName(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "Forced64" : "Natural32";
}

// UniformIndices is an int64 tensor of values uniform in [-bound, bound): valid, negatives
// included, for an axis of size `bound`.
inline Tensor UniformIndices(absl::BitGen& gen, const Shape& shape, int64_t bound) {
  Tensor tensor(DataType::kInt64, shape);
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    tensor.data_as<int64_t>()[i] = absl::Uniform<int64_t>(gen, -bound, bound);
  }
  return tensor;
}

}  // namespace tensorops::testing

#endif  // TENSOROPS_TESTS_DEVICE_RUNNER_H_
