// DeviceCall on the CPU: what the CUDA executor copies to the device must be everything the
// kernels read. Each case builds a call's GPU form, copies its input spans into fresh buffers (as
// the executor's staging does), overwrites the original request memory, and runs the CPU kernel on
// the plan relocated onto the copies: it must give the result of the original plan. A span that
// missed a byte the kernel reads would show up as poisoned data or a crash under ASan.
#include "kernels/device_call.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/launch.h"
#include "kernels/device.h"
#include "kernels/index_ops.h"

namespace tensorops {
namespace {

// OnHost is a relocated plan as the CPU kernels may read it: RelocatePlan marks its views as
// device memory, which the copies of these tests (Copies, host memory standing in for the
// device's) are not.
template <typename Plan>
Plan OnHost(Plan plan) {
  const auto host = [](const TensorView& view) { return view.InSpace(MemorySpace::kHost); };
  if constexpr (requires { plan.input; }) plan.input = host(plan.input);
  if constexpr (requires { plan.index; }) plan.index = host(plan.index);
  if constexpr (requires { plan.source; }) plan.source = host(plan.source);
  if constexpr (requires { plan.src; }) plan.src = host(plan.src);
  if constexpr (requires { plan.mask; }) plan.mask = host(plan.mask);
  return plan;
}

// RandomTensor fills a tensor with random bytes; index tensors get values in [-bound, bound).
Tensor RandomTensor(absl::BitGen& gen, DataType dtype, const Shape& shape) {
  Tensor tensor(dtype, shape);
  auto* bytes = static_cast<unsigned char*>(tensor.mutable_view().data());
  for (int64_t i = 0; i < tensor.numel() * ItemSize(dtype); ++i) {
    bytes[i] = absl::Uniform<unsigned char>(gen);
  }
  return tensor;
}

Tensor RandomIndex(absl::BitGen& gen, DataType dtype, const Shape& shape, int64_t bound) {
  Tensor tensor(dtype, shape);
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    const int64_t value = absl::Uniform<int64_t>(gen, -bound, bound);
    if (dtype == DataType::kInt32) {
      tensor.mutable_view().data_as<int32_t>()[i] = static_cast<int32_t>(value);
    } else {
      tensor.mutable_view().data_as<int64_t>()[i] = value;
    }
  }
  return tensor;
}

Shape RandomShape(absl::BitGen& gen, int rank, int64_t max_size) {
  Shape shape;
  for (int d = 0; d < rank; ++d) shape.push_back(absl::Uniform<int64_t>(gen, 1, max_size + 1));
  return shape;
}

// Copies is what the executor's staging holds for a call: one buffer per input span.
class Copies {
 public:
  explicit Copies(const DeviceCall& call) {
    for (const InputSpan& span : call.inputs()) {
      buffers_.emplace_back(static_cast<size_t>(span.bytes));
      std::memcpy(buffers_.back().data(), span.data, static_cast<size_t>(span.bytes));
      pointers_.push_back(buffers_.back().data());
    }
  }
  absl::Span<void* const> pointers() const { return pointers_; }

 private:
  std::vector<std::vector<unsigned char>> buffers_;
  std::vector<void*> pointers_;
};

void Poison(Tensor& tensor) {
  std::memset(tensor.mutable_view().data(), 0xA5,
              static_cast<size_t>(tensor.numel()) * static_cast<size_t>(ItemSize(tensor.dtype())));
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && a.dtype() == b.dtype() &&
         std::memcmp(a.view().data(), b.view().data(),
                     static_cast<size_t>(a.numel() * ItemSize(a.dtype()))) == 0;
}

void ExpectSpansDisjoint(const DeviceCall& call) {
  const std::vector<InputSpan>& spans = call.inputs();
  for (size_t i = 0; i < spans.size(); ++i) {
    for (size_t j = i + 1; j < spans.size(); ++j) {
      const auto* a = static_cast<const char*>(spans[i].data);
      const auto* b = static_cast<const char*>(spans[j].data);
      EXPECT_TRUE(a + spans[i].bytes <= b || b + spans[j].bytes <= a) << i << " overlaps " << j;
    }
  }
}

// ExpectRelocatedRunMatches: `kernel`, the plan's CPU kernel, run on the plan relocated onto
// copies of the call's spans, with the original tensors `originals` poisoned, gives `expected`:
// the call's spans hold everything the plan reads.
template <typename Plan, typename Kernel>
void ExpectRelocatedRunMatches(const Plan& plan, const DeviceCall& call, Kernel kernel,
                               std::initializer_list<Tensor*> originals, const Tensor& expected,
                               const std::string& what) {
  ExpectSpansDisjoint(call);
  const Copies copies(call);
  for (Tensor* original : originals) Poison(*original);
  Tensor relocated(plan.result_dtype, plan.result_shape);
  ASSERT_TRUE(
      kernel(OnHost(RelocatePlan(plan, call, copies.pointers())), relocated.mutable_view()).ok())
      << what;
  EXPECT_TRUE(SameBytes(expected, relocated)) << what;
}

// ExpectRelocatedGatherMatches: the call of `plan`, run on copies of its spans after `input` and
// `index` are poisoned, gives `expected`.
void ExpectRelocatedGatherMatches(const GatherPlan& plan, const Tensor& expected, Tensor& input,
                                  Tensor& index, int trial) {
  std::unique_ptr<DeviceCall> call = MakeDeviceCall(plan);
  ASSERT_NE(call, nullptr);
  EXPECT_EQ(call->result_bytes(), expected.numel() * ItemSize(expected.dtype()));
  EXPECT_EQ(call->WorkspaceBytes().value_or(-1), 0);
  ExpectSpansDisjoint(*call);
  const Copies copies(*call);
  Poison(input);
  Poison(index);
  Tensor relocated(plan.result_dtype, plan.result_shape);
  ASSERT_TRUE(
      cpu::Gather(OnHost(RelocatePlan(plan, *call, copies.pointers())), relocated.mutable_view())
          .ok());
  EXPECT_TRUE(SameBytes(expected, relocated)) << "trial " << trial;
}

TEST(DeviceCallTest, GatherReadsOnlyItsInputSpans) {
  absl::BitGen gen;
  for (int trial = 0; trial < 300; ++trial) {
    const DataType dtype = kAllDataTypes[trial % std::size(kAllDataTypes)];
    const DataType index_dtype = trial % 2 == 0 ? DataType::kInt32 : DataType::kInt64;
    const int rank = absl::Uniform<int>(gen, 1, 5);
    const int64_t axis = absl::Uniform<int64_t>(gen, 0, rank);
    const bool broadcast = trial % 3 == 0;
    Shape input_shape = RandomShape(gen, rank, 5);
    Shape index_shape = input_shape;
    for (int d = 0; d < rank; ++d) {
      // Broadcast sizes must be equal or 1; otherwise at most the input's.
      index_shape[d] = d == axis                                ? absl::Uniform<int64_t>(gen, 1, 7)
                       : broadcast && absl::Bernoulli(gen, 0.3) ? 1
                       : broadcast                              ? input_shape[d]
                                   : absl::Uniform<int64_t>(gen, 1, input_shape[d] + 1);
    }
    Tensor input = RandomTensor(gen, dtype, input_shape);
    Tensor index = RandomIndex(gen, index_dtype, index_shape, input_shape[axis]);
    absl::StatusOr<GatherPlan> plan = PlanGather(
        {.input = input.view(), .index = index.view(), .axis = axis, .broadcast = broadcast});
    ASSERT_TRUE(plan.ok()) << plan.status();
    Tensor expected(plan->result_dtype, plan->result_shape);
    ASSERT_TRUE(cpu::Gather(*plan, expected.mutable_view()).ok());
    ExpectRelocatedGatherMatches(*plan, expected, input, index, trial);
  }
}

TEST(DeviceCallTest, GatherOverAnEmptyAxisCopiesNoInput) {
  // input.shape[axis] == 0 with a non-empty index: the input holds no byte, so no span may start
  // at its data (the staging copy would read past the allocation).
  Tensor input(DataType::kFloat64, {3, 0});
  Tensor index(DataType::kInt64, {3, 2});
  for (int64_t i = 0; i < index.numel(); ++i) index.mutable_view().data_as<int64_t>()[i] = 0;
  absl::StatusOr<GatherPlan> plan =
      PlanGather({.input = input.view(), .index = index.view(), .axis = 1});
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::unique_ptr<DeviceCall> call = MakeDeviceCall(*plan);
  ASSERT_NE(call, nullptr);
  ASSERT_EQ(call->inputs().size(), 1u);
  EXPECT_EQ(call->inputs()[0].data, index.view().data());
  EXPECT_EQ(call->inputs()[0].bytes, index.numel() * 8);
  // The CPU names the first index out of range, as the device's flag makes it do.
  Tensor result(plan->result_dtype, plan->result_shape);
  EXPECT_FALSE(cpu::Gather(*plan, result.mutable_view()).ok());
}

TEST(DeviceCallTest, IndexSelectReadsOnlyItsInputSpans) {
  absl::BitGen gen;
  for (int trial = 0; trial < 50; ++trial) {
    const Shape input_shape = RandomShape(gen, 3, 6);
    const int64_t axis = trial % 3;
    Tensor input = RandomTensor(gen, DataType::kFloat32, input_shape);
    Tensor index =
        RandomIndex(gen, DataType::kInt64, {absl::Uniform<int64_t>(gen, 1, 9)}, input_shape[axis]);
    absl::StatusOr<GatherPlan> plan =
        PlanIndexSelect({.input = input.view(), .index = index.view(), .axis = axis});
    ASSERT_TRUE(plan.ok()) << plan.status();
    Tensor expected(plan->result_dtype, plan->result_shape);
    ASSERT_TRUE(cpu::Gather(*plan, expected.mutable_view()).ok());
    ExpectRelocatedGatherMatches(*plan, expected, input, index, trial);
  }
}

// MarkResident flags exactly the input spans inside a resident tensor's bytes: a scatter whose
// input is stored on the device reads it there and stages its index and source alone.
TEST(DeviceCallTest, MarkResidentFlagsOnlyTheSpansInsideTheTensor) {
  absl::BitGen gen;
  Tensor input = RandomTensor(gen, DataType::kFloat32, {8, 5});
  Tensor index = RandomIndex(gen, DataType::kInt64, {3, 5}, 8);
  Tensor source = RandomTensor(gen, DataType::kFloat32, {3, 5});
  absl::StatusOr<ScatterPlan> plan = PlanScatter(
      {.input = input.view(), .index = index.view(), .source = source.view(), .axis = 0});
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::unique_ptr<DeviceCall> call = MakeDeviceCall(*plan);
  ASSERT_NE(call, nullptr);
  ASSERT_EQ(call->inputs().size(), 3u);
  call->MarkResident(input.data(), input.nbytes());
  int64_t resident = 0;
  int64_t staged = 0;
  for (const InputSpan& span : call->inputs()) (span.resident ? resident : staged) += span.bytes;
  EXPECT_EQ(resident, input.nbytes());
  EXPECT_EQ(staged, index.nbytes() + source.nbytes());
  // A range that only overlaps a span (half the input) marks nothing more.
  std::unique_ptr<DeviceCall> other = MakeDeviceCall(*plan);
  other->MarkResident(input.data(), input.nbytes() / 2);
  for (const InputSpan& span : other->inputs()) EXPECT_FALSE(span.resident);
  EXPECT_EQ(other->resident_result(), nullptr);
  other->set_resident_result(input.data());
  EXPECT_EQ(other->resident_result(), input.data());
}

constexpr Reduction kReductions[] = {Reduction::kAssign, Reduction::kSum,  Reduction::kProd,
                                     Reduction::kMean,   Reduction::kAmax, Reduction::kAmin};

TEST(DeviceCallTest, ScatterReadsOnlyItsInputSpans) {
  absl::BitGen gen;
  int device_calls = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const DataType dtype = kAllDataTypes[trial % std::size(kAllDataTypes)];
    const Reduction reduce = kReductions[(trial / 12) % 6];
    // Combinations planning rejects.
    if (IsComplex(dtype) && (reduce == Reduction::kAmax || reduce == Reduction::kAmin)) continue;
    if (dtype == DataType::kBool && reduce == Reduction::kMean) continue;
    const bool scalar_value = trial % 5 == 0;
    const bool broadcast = trial % 7 == 0;
    const int rank = absl::Uniform<int>(gen, 1, 4);
    const int64_t axis = absl::Uniform<int64_t>(gen, 0, rank);
    const Shape input_shape = RandomShape(gen, rank, 5);
    Shape index_shape = input_shape;
    for (int d = 0; d < rank; ++d) {
      // Paddle's broadcast needs sizes that broadcast to the input's (equal or 1).
      index_shape[d] = d == axis   ? absl::Uniform<int64_t>(gen, 1, 9)
                       : broadcast ? (absl::Bernoulli(gen, 0.5) ? 1 : input_shape[d])
                                   : absl::Uniform<int64_t>(gen, 1, input_shape[d] + 1);
    }
    Shape source_shape = index_shape;
    if (!broadcast) {
      for (int d = 0; d < rank; ++d) source_shape[d] += absl::Uniform<int64_t>(gen, 0, 2);
    }
    Tensor input = RandomTensor(gen, dtype, input_shape);
    Tensor index = RandomIndex(gen, DataType::kInt64, index_shape, input_shape[axis]);
    Tensor source = RandomTensor(gen, dtype, source_shape);
    ScatterArgs args{.input = input.view(),
                     .index = index.view(),
                     .axis = axis,
                     .reduce = reduce,
                     .include_self = absl::Bernoulli(gen, 0.5),
                     .broadcast = broadcast};
    if (scalar_value) {
      args.source = Scalar(int64_t{3});
    } else {
      args.source = source.view();
    }
    absl::StatusOr<ScatterPlan> plan = PlanScatter(args);
    ASSERT_TRUE(plan.ok()) << plan.status();
    Tensor expected(plan->result_dtype, plan->result_shape);
    ASSERT_TRUE(cpu::Scatter(*plan, expected.mutable_view()).ok());

    std::unique_ptr<DeviceCall> call = MakeDeviceCall(*plan);
    if (!DeviceScatterSupported(dtype, reduce)) {
      EXPECT_EQ(call, nullptr);
      continue;
    }
    ASSERT_NE(call, nullptr);
    ++device_calls;
    EXPECT_EQ(call->WorkspaceBytes().value_or(-1), cuda::PlanScatterWorkspace(*plan).bytes);
    ExpectRelocatedRunMatches(*plan, *call, cpu::Scatter, {&input, &index, &source}, expected,
                              absl::StrCat("trial ", trial, " ", std::string(DataTypeName(dtype)),
                                           " ", std::string(ReductionName(reduce))));
  }
  EXPECT_GT(device_calls, 400);
}

TEST(DeviceCallTest, ScatterWorkspaceHoldsWhatEachReductionNeeds) {
  Tensor input = Tensor::Zeros(DataType::kInt8, {10});
  Tensor index = Tensor::Zeros(DataType::kInt64, {3});
  Tensor source = Tensor::Zeros(DataType::kInt8, {3});
  const auto workspace = [&](DataType dtype, Reduction reduce) {
    Tensor typed_input = Tensor::Zeros(dtype, {10});
    Tensor typed_source = Tensor::Zeros(dtype, {3});
    absl::StatusOr<ScatterPlan> plan = PlanScatter({.input = typed_input.view(),
                                                    .index = index.view(),
                                                    .source = typed_source.view(),
                                                    .reduce = reduce});
    EXPECT_TRUE(plan.ok()) << plan.status();
    return cuda::PlanScatterWorkspace(*plan);
  };
  const auto sized = [](DataType dtype, Reduction reduce, int64_t numel, int64_t updates) {
    return cuda::PlanScatterWorkspace(cuda::ScatterSizes{
        .op = "scatter", .dtype = dtype, .reduce = reduce, .numel = numel, .updates = updates});
  };
  // ASSIGN of elements of at most 4 bytes with at least a quarter as many updates as destinations:
  // one packed uint64 per destination (80 bytes, rounded up to 256), nothing else.
  const cuda::ScatterWorkspace assign = workspace(DataType::kInt8, Reduction::kAssign);
  EXPECT_EQ(assign.packed, 0);
  EXPECT_EQ(assign.winners, -1);
  EXPECT_EQ(assign.shadow, -1);
  EXPECT_EQ(assign.bytes, 256);
  EXPECT_EQ(sized(DataType::kFloat32, Reduction::kAssign, 1000, 250).packed, 0);
  // Fewer updates, or wider elements: the winners (uint32 below 2^31 updates) and the flag that
  // says whether any destination was reached twice.
  const cuda::ScatterWorkspace sparse = sized(DataType::kFloat32, Reduction::kAssign, 1000, 249);
  EXPECT_EQ(sparse.packed, -1);
  EXPECT_EQ(sparse.winners, 0);
  EXPECT_EQ(sparse.duplicates, 4096);
  EXPECT_EQ(sparse.bytes, 4096 + 256);
  const cuda::ScatterWorkspace wide_elements = workspace(DataType::kInt64, Reduction::kAssign);
  EXPECT_EQ(wide_elements.packed, -1);
  EXPECT_EQ(wide_elements.duplicates, 256);
  EXPECT_EQ(wide_elements.bytes, 512);
  {
    // Forced to the 64-bit kernels, the winners are uint64 (80 bytes, still one 256-byte block)
    // and nothing is packed.
    const cuda::ScopedWideIndexingForTesting wide;
    const cuda::ScatterWorkspace wide_assign = workspace(DataType::kInt8, Reduction::kAssign);
    EXPECT_EQ(wide_assign.packed, -1);
    EXPECT_EQ(wide_assign.duplicates, 256);
    EXPECT_EQ(wide_assign.bytes, 512);
  }
  // Beyond 2^31 - 1 updates the winners are uint64 whatever the indexing.
  const cuda::ScatterWorkspace many =
      sized(DataType::kFloat32, Reduction::kAssign, 1000, int64_t{1} << 31);
  EXPECT_EQ(many.packed, -1);
  EXPECT_EQ(many.duplicates, 8192);
  EXPECT_EQ(many.bytes, 8192 + 256);
  // MEAN: the accumulator (a 32-bit shadow for a narrow type, even for float32) and its count share
  // a cell per destination where they have the same size.
  for (DataType dtype : {DataType::kBFloat16, DataType::kFloat32, DataType::kInt8}) {
    const cuda::ScatterWorkspace mean = workspace(dtype, Reduction::kMean);
    EXPECT_EQ(mean.shadow, 0) << DataTypeName(dtype);
    EXPECT_EQ(mean.counts, 4) << DataTypeName(dtype);
    EXPECT_FALSE(mean.wide_counts) << DataTypeName(dtype);
    EXPECT_EQ(mean.stride, 2) << DataTypeName(dtype);
    EXPECT_EQ(mean.bytes, 256) << DataTypeName(dtype);
  }
  // Beside an 8-byte accumulator the count is uint64.
  const cuda::ScatterWorkspace mean64 = workspace(DataType::kFloat64, Reduction::kMean);
  EXPECT_EQ(mean64.counts, 8);
  EXPECT_TRUE(mean64.wide_counts);
  EXPECT_EQ(mean64.stride, 2);
  // complex128's 16 bytes accumulate in the result, the counts apart.
  const cuda::ScatterWorkspace mean128 = workspace(DataType::kComplex128, Reduction::kMean);
  EXPECT_EQ(mean128.shadow, -1);
  EXPECT_EQ(mean128.counts, 0);
  EXPECT_EQ(mean128.stride, 1);
  EXPECT_EQ(mean128.bytes, 256);
  {
    // 64-bit counts beside a 32-bit accumulator: apart, the shadow first.
    const cuda::ScopedWideIndexingForTesting wide;
    const cuda::ScatterWorkspace wide_mean = workspace(DataType::kBFloat16, Reduction::kMean);
    EXPECT_EQ(wide_mean.shadow, 0);
    EXPECT_EQ(wide_mean.counts, 256);
    EXPECT_TRUE(wide_mean.wide_counts);
    EXPECT_EQ(wide_mean.stride, 1);
    EXPECT_EQ(wide_mean.bytes, 512);
    EXPECT_EQ(workspace(DataType::kFloat32, Reduction::kMean).shadow, -1);
  }
  // float32 SUM reduces in place: no scratch at all.
  EXPECT_EQ(workspace(DataType::kFloat32, Reduction::kSum).bytes, 0);
  // AMAX/AMIN of the 16-bit floats select an operand's bits in place (a float shadow would rewrite
  // NaN payloads); the narrow integers still need their 32-bit shadow for the atomics.
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    for (Reduction reduce : {Reduction::kAmax, Reduction::kAmin}) {
      const cuda::ScatterWorkspace ordered = workspace(dtype, reduce);
      EXPECT_EQ(ordered.shadow, -1) << DataTypeName(dtype) << " " << ReductionName(reduce);
      EXPECT_EQ(ordered.bytes, 0) << DataTypeName(dtype) << " " << ReductionName(reduce);
    }
  }
  EXPECT_EQ(workspace(DataType::kInt8, Reduction::kAmax).shadow, 0);
  EXPECT_EQ(workspace(DataType::kFloat16, Reduction::kSum).shadow, 0);
}

// The sorted reduction's scratch holds CUB's temporary storage, whose size CUB gives for the GPU
// that runs it: DeviceCall::WorkspaceBytes asks (the executor calls it on its device), and a failed
// query is an error, never a size. In a CUDA build without a usable GPU the query fails.
TEST(DeviceCallTest, SortedWorkspaceIsSizedByTheDeviceAndReportsAFailedQuery) {
  Tensor input = Tensor::Zeros(DataType::kFloat32, {10});
  Tensor index = Tensor::Zeros(DataType::kInt64, {3});
  Tensor source = Tensor::Zeros(DataType::kFloat32, {3});
  absl::StatusOr<ScatterPlan> plan = PlanScatter({.input = input.view(),
                                                  .index = index.view(),
                                                  .source = source.view(),
                                                  .reduce = Reduction::kSum});
  ASSERT_TRUE(plan.ok()) << plan.status();
  plan->deterministic = true;
  // Nothing of it is sized on the host.
  EXPECT_EQ(cuda::PlanScatterWorkspace(*plan).bytes, 0);
  std::unique_ptr<DeviceCall> call = MakeDeviceCall(*plan);
  ASSERT_NE(call, nullptr);
  const absl::StatusOr<int64_t> bytes = call->WorkspaceBytes();
#if defined(TENSOROPS_HAVE_CUDA)
  if (QueryDevices().cuda_devices.empty()) {
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kUnavailable) << bytes.status();
  } else {
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    // Two key buffers, two value buffers, the run lengths and the run count, each 256-aligned,
    // then CUB's storage.
    EXPECT_GT(*bytes, 6 * kDeviceAlignment);
  }
#else
  EXPECT_EQ(bytes.value_or(-1), 0);
#endif
}

// CUB's run-length encoding counts its items in an int: a deterministic reduction of more updates
// is refused before any size query (RESOURCE_EXHAUSTED: the call runs on the CPU). A broadcast
// index view gives the plan 2^31 updates without the memory.
TEST(DeviceCallTest, SortedReductionRefusesMoreUpdatesThanCubCounts) {
  const int64_t zero = 0;
  const float value = 1;
  const Shape updates = {int64_t{1} << 31};
  ScatterPlan plan;
  plan.result_dtype = DataType::kFloat32;
  plan.result_shape = {1};
  plan.index = TensorView(DataType::kInt64, updates, Shape{0}, &zero);
  plan.source = TensorView(DataType::kFloat32, updates, Shape{0}, &value);
  plan.input = TensorView(DataType::kFloat32, Shape{1}, &value);
  plan.reduce = Reduction::kSum;
  plan.deterministic = true;
  const absl::StatusOr<int64_t> bytes = cuda::SortedReductionBytes(plan);
#if defined(TENSOROPS_HAVE_CUDA)
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kResourceExhausted) << bytes.status();
#else
  EXPECT_EQ(bytes.value_or(-1), 0);
#endif
}

TEST(DeviceCallTest, DeterministicFloatSumsTakeTheSortedReduction) {
  Tensor index = Tensor::Zeros(DataType::kInt64, {3});
  const auto plan_for = [&](DataType dtype, Reduction reduce, Tensor* input, Tensor* source) {
    *input = Tensor::Zeros(dtype, {10});
    *source = Tensor::Zeros(dtype, {3});
    absl::StatusOr<ScatterPlan> plan = PlanScatter({.input = input->view(),
                                                    .index = index.view(),
                                                    .source = source->view(),
                                                    .reduce = reduce});
    EXPECT_TRUE(plan.ok()) << plan.status();
    plan->deterministic = true;
    return *std::move(plan);
  };
  Tensor input, source;
  for (DataType dtype : {DataType::kBFloat16, DataType::kFloat32, DataType::kComplex64}) {
    for (Reduction reduce : {Reduction::kSum, Reduction::kMean, Reduction::kProd}) {
      const ScatterPlan plan = plan_for(dtype, reduce, &input, &source);
      EXPECT_TRUE(cuda::UsesSortedReduction(plan));
      const cuda::ScatterWorkspace workspace = cuda::PlanScatterWorkspace(plan);
      EXPECT_EQ(workspace.sorted, 0);
      EXPECT_EQ(workspace.shadow, -1);
      EXPECT_EQ(workspace.counts, -1);
    }
  }
  // Integer sums and every AMAX/AMIN are exact in any order: they keep the atomics.
  EXPECT_FALSE(
      cuda::UsesSortedReduction(plan_for(DataType::kInt32, Reduction::kSum, &input, &source)));
  EXPECT_FALSE(
      cuda::UsesSortedReduction(plan_for(DataType::kFloat32, Reduction::kAmax, &input, &source)));
  ScatterPlan relaxed = plan_for(DataType::kFloat32, Reduction::kSum, &input, &source);
  relaxed.deterministic = false;
  EXPECT_FALSE(cuda::UsesSortedReduction(relaxed));
}

// A ScatterNd SUM or MEAN of float rows of 32 elements or more reduces by rows (deterministic
// or not): the sorted region holds the row sort, and there is no shadow and no counts.
TEST(DeviceCallTest, FloatSumsOfRowsTakeTheRowReduction) {
  const auto sizes = [](DataType dtype, Reduction reduce, int64_t slice_size) {
    return cuda::ScatterSizes{.op = "scatter_nd",
                              .dtype = dtype,
                              .reduce = reduce,
                              .numel = 1000 * slice_size,
                              .updates = 10 * slice_size,
                              .slices = 10,
                              .slice_size = slice_size};
  };
  for (DataType dtype :
       {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64}) {
    for (Reduction reduce : {Reduction::kSum, Reduction::kMean}) {
      for (bool deterministic : {false, true}) {
        cuda::ScatterSizes rows = sizes(dtype, reduce, 32);
        rows.deterministic = deterministic;
        EXPECT_TRUE(cuda::UsesRowReduction(rows)) << DataTypeName(dtype);
        EXPECT_FALSE(cuda::UsesSortedReduction(rows)) << DataTypeName(dtype);
        const cuda::ScatterWorkspace workspace = cuda::PlanScatterWorkspace(rows);
        EXPECT_EQ(workspace.sorted, 0);
        EXPECT_EQ(workspace.shadow, -1);
        EXPECT_EQ(workspace.counts, -1);
      }
    }
  }
  // Narrower slices, integers, other reductions and Scatter keep the pipeline.
  EXPECT_FALSE(cuda::UsesRowReduction(sizes(DataType::kFloat32, Reduction::kSum, 31)));
  EXPECT_FALSE(cuda::UsesRowReduction(sizes(DataType::kInt32, Reduction::kSum, 64)));
  EXPECT_FALSE(cuda::UsesRowReduction(sizes(DataType::kComplex64, Reduction::kSum, 64)));
  EXPECT_FALSE(cuda::UsesRowReduction(sizes(DataType::kFloat32, Reduction::kProd, 64)));
  EXPECT_FALSE(cuda::UsesRowReduction(sizes(DataType::kFloat32, Reduction::kAmax, 64)));
  cuda::ScatterSizes scatter = sizes(DataType::kFloat32, Reduction::kSum, 64);
  scatter.slices = 0;
  EXPECT_FALSE(cuda::UsesRowReduction(scatter));
  // A ScatterNd plan says what its slices are.
  Tensor input = Tensor::Zeros(DataType::kBFloat16, {6, 40});
  Tensor index = Tensor::Zeros(DataType::kInt64, {4, 1});
  Tensor source = Tensor::Zeros(DataType::kBFloat16, {4, 40});
  absl::StatusOr<NdPlan> plan = PlanScatterNd({.input = input.view(),
                                               .index = index.view(),
                                               .source = source.view(),
                                               .reduce = Reduction::kSum});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(cuda::SizesOf(*plan).slices, 4);
  EXPECT_EQ(cuda::SizesOf(*plan).slice_size, 40);
  EXPECT_TRUE(cuda::UsesRowReduction(cuda::SizesOf(*plan)));
}

// ExpectViewScatterReadsOnlyItsSpans: the CPU kernel on copies of the call's spans (input and src
// poisoned) gives the CPU's result: the GPU's copy and window write read nothing else.
void ExpectViewScatterReadsOnlyItsSpans(const ViewScatterPlan& plan, Tensor& input, Tensor& src,
                                        const std::string& what) {
  Tensor expected(plan.result_dtype, plan.result_shape);
  ASSERT_TRUE(cpu::ViewScatter(plan, expected.mutable_view()).ok()) << what;
  std::unique_ptr<DeviceCall> call = MakeDeviceCall(plan);
  ASSERT_NE(call, nullptr) << what;
  ExpectRelocatedRunMatches(plan, *call, cpu::ViewScatter, {&input, &src}, expected, what);
}

TEST(DeviceCallTest, SelectAndSliceScatterReadOnlyTheirSpans) {
  absl::BitGen gen;
  for (int trial = 0; trial < 200; ++trial) {
    const DataType dtype = kAllDataTypes[trial % std::size(kAllDataTypes)];
    const int rank = absl::Uniform<int>(gen, 1, 5);
    const Shape shape = RandomShape(gen, rank, 6);
    const int64_t axis = absl::Uniform<int64_t>(gen, 0, rank);
    Tensor input = RandomTensor(gen, dtype, shape);
    if (trial % 2 == 0) {
      Shape src_shape = shape;
      src_shape.erase(src_shape.begin() + axis);
      Tensor src = RandomTensor(gen, dtype, src_shape);
      const int64_t index = absl::Uniform<int64_t>(gen, -shape[axis], shape[axis]);
      absl::StatusOr<ViewScatterPlan> plan = PlanSelectScatter(
          {.input = input.view(), .src = src.view(), .axis = axis, .index = index});
      ASSERT_TRUE(plan.ok()) << plan.status();
      ExpectViewScatterReadsOnlyItsSpans(*plan, input, src, absl::StrCat("select trial ", trial));
    } else {
      const int64_t start = absl::Uniform<int64_t>(gen, 0, shape[axis]);
      const int64_t end = absl::Uniform<int64_t>(gen, start, shape[axis] + 1);
      const int64_t step = absl::Uniform<int64_t>(gen, 1, 4);
      Shape src_shape = shape;
      src_shape[axis] = (end - start + step - 1) / step;
      Tensor src = RandomTensor(gen, dtype, src_shape);
      absl::StatusOr<ViewScatterPlan> plan = PlanSliceScatter({.input = input.view(),
                                                               .src = src.view(),
                                                               .axis = axis,
                                                               .start = start,
                                                               .end = end,
                                                               .step = step});
      ASSERT_TRUE(plan.ok()) << plan.status();
      if (NumElements(plan->result_shape) == 0) continue;
      ExpectViewScatterReadsOnlyItsSpans(*plan, input, src, absl::StrCat("slice trial ", trial));
    }
  }
}

TEST(DeviceCallTest, DiagonalScatterReadsOnlyItsSpans) {
  absl::BitGen gen;
  for (int trial = 0; trial < 200; ++trial) {
    const DataType dtype = kAllDataTypes[trial % std::size(kAllDataTypes)];
    const int rank = absl::Uniform<int>(gen, 2, 5);
    const Shape shape = RandomShape(gen, rank, 6);
    const int64_t axis1 = absl::Uniform<int64_t>(gen, 0, rank);
    int64_t axis2 = absl::Uniform<int64_t>(gen, 0, rank - 1);
    if (axis2 >= axis1) ++axis2;
    const int64_t offset = absl::Uniform<int64_t>(gen, -shape[axis1], shape[axis2] + 1);
    // The source has the diagonal's shape: the other dims in order, the diagonal last.
    Shape src_shape;
    for (int d = 0; d < rank; ++d) {
      if (d != axis1 && d != axis2) src_shape.push_back(shape[d]);
    }
    const int64_t length =
        std::max<int64_t>(0, offset >= 0 ? std::min(shape[axis1], shape[axis2] - offset)
                                         : std::min(shape[axis1] + offset, shape[axis2]));
    src_shape.push_back(length);
    Tensor input = RandomTensor(gen, dtype, shape);
    Tensor src = RandomTensor(gen, dtype, src_shape);
    absl::StatusOr<ViewScatterPlan> plan = PlanDiagonalScatter({.input = input.view(),
                                                                .src = src.view(),
                                                                .offset = offset,
                                                                .axis1 = axis1,
                                                                .axis2 = axis2});
    ASSERT_TRUE(plan.ok()) << plan.status();
    ExpectViewScatterReadsOnlyItsSpans(*plan, input, src, absl::StrCat("diagonal trial ", trial));
  }
}

TEST(DeviceCallTest, MaskedScatterReadsOnlyItsInputSpans) {
  absl::BitGen gen;
  for (int trial = 0; trial < 100; ++trial) {
    const DataType dtype = kAllDataTypes[trial % std::size(kAllDataTypes)];
    const Shape shape = RandomShape(gen, absl::Uniform<int>(gen, 1, 4), 6);
    // Every other trial broadcasts the mask along its first dimension.
    Shape mask_shape = shape;
    if (trial % 2 == 1) mask_shape[0] = 1;
    Tensor mask(DataType::kBool, mask_shape);
    for (int64_t i = 0; i < mask.numel(); ++i) {
      mask.mutable_view().data_as<bool>()[i] = absl::Bernoulli(gen, 0.5);
    }
    Tensor input = RandomTensor(gen, dtype, shape);
    Tensor source = RandomTensor(gen, dtype, {NumElements(shape)});
    absl::StatusOr<MaskedScatterPlan> plan =
        PlanMaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
    ASSERT_TRUE(plan.ok()) << plan.status();
    Tensor expected(plan->result_dtype, plan->result_shape);
    ASSERT_TRUE(cpu::MaskedScatter(*plan, expected.mutable_view()).ok());
    std::unique_ptr<DeviceCall> call = MakeDeviceCall(*plan);
    ASSERT_NE(call, nullptr);
    ExpectSpansDisjoint(*call);
    const Copies copies(*call);
    Poison(input);
    Poison(source);
    std::memset(mask.mutable_view().data(), 0, static_cast<size_t>(mask.numel()));
    Tensor relocated(plan->result_dtype, plan->result_shape);
    ASSERT_TRUE(cpu::MaskedScatter(OnHost(RelocatePlan(*plan, *call, copies.pointers())),
                                   relocated.mutable_view())
                    .ok());
    EXPECT_TRUE(SameBytes(expected, relocated)) << "trial " << trial;
  }
}

TEST(DeviceCallTest, NdCallsHaveTheirDeviceForms) {
  Tensor input = Tensor::Zeros(DataType::kFloat32, {4, 5});
  Tensor index = Tensor::Zeros(DataType::kInt64, {4, 5, 1});
  absl::StatusOr<NdPlan> single =
      PlanGatherNd({.input = input.view(), .index = index.view(), .axes = {1}});
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_NE(MakeDeviceCall(*single), nullptr);
  // The TensorFlow form has GatherNd and ScatterNd kernels of its own.
  Tensor points = Tensor::Zeros(DataType::kInt64, {3, 2});
  absl::StatusOr<NdPlan> general = PlanGatherNd({.input = input.view(), .index = points.view()});
  ASSERT_TRUE(general.ok()) << general.status();
  std::unique_ptr<DeviceCall> call = MakeDeviceCall(*general);
  ASSERT_NE(call, nullptr);
  EXPECT_EQ(call->inputs().size(), 2u);
  EXPECT_EQ(call->result_bytes(), 3 * 4);
  Tensor updates = Tensor::Zeros(DataType::kFloat32, {3});
  absl::StatusOr<NdPlan> scatter =
      PlanScatterNd({.input = input.view(), .index = points.view(), .source = updates.view()});
  ASSERT_TRUE(scatter.ok()) << scatter.status();
  EXPECT_NE(MakeDeviceCall(*scatter), nullptr);
}

// ScatterNd's general form in both forms, every dtype and reduction, with and without an input,
// a strided source: the CPU kernel on copies of the call's spans (the originals poisoned) gives
// the CPU's result, and the workspace holds the destinations and Scatter's parts.
TEST(DeviceCallTest, ScatterNdReadsOnlyItsInputSpans) {
  absl::BitGen gen;
  int device_calls = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const DataType dtype = kAllDataTypes[trial % std::size(kAllDataTypes)];
    const Reduction reduce = kReductions[(trial / 12) % 6];
    if (IsComplex(dtype) && (reduce == Reduction::kAmax || reduce == Reduction::kAmin)) continue;
    if (dtype == DataType::kBool && reduce == Reduction::kMean) continue;
    const bool axes_form = trial % 2 == 0;
    const bool zeros = trial % 5 == 0;
    const Shape input_shape = RandomShape(gen, 3, 5);
    const int64_t positions = absl::Uniform<int64_t>(gen, 1, 12);
    // Axes form: axes 0 and 2 of the input, one element per position of B = input_shape with
    // dimension 0 replaced by `positions`. TensorFlow form: rows of input_shape[2] addressed by
    // two coordinates.
    Shape position_shape =
        axes_form ? Shape{positions, input_shape[1], input_shape[2]} : Shape{positions};
    Shape index_shape = position_shape;
    index_shape.push_back(2);
    Tensor index(DataType::kInt64, index_shape);
    for (int64_t i = 0; i < index.numel(); i += 2) {
      const int64_t second = axes_form ? input_shape[2] : input_shape[1];
      index.mutable_view().data_as<int64_t>()[i] =
          absl::Uniform<int64_t>(gen, -input_shape[0], input_shape[0]);
      index.mutable_view().data_as<int64_t>()[i + 1] = absl::Uniform<int64_t>(gen, -second, second);
    }
    Shape source_shape = position_shape;
    if (!axes_form) source_shape.push_back(input_shape[2]);
    // The source is every other element of its last dimension.
    Shape backing_shape = source_shape;
    backing_shape.back() *= 2;
    Tensor backing = RandomTensor(gen, dtype, backing_shape);
    Shape source_strides = ContiguousStrides(backing_shape);
    source_strides.back() = 2;
    const TensorView source(dtype, source_shape, source_strides, backing.view().data());
    Tensor input = RandomTensor(gen, dtype, input_shape);
    ScatterNdArgs args{.index = index.view(),
                       .source = source,
                       .reduce = reduce,
                       .include_self = absl::Bernoulli(gen, 0.5)};
    if (axes_form) args.axes = {0, 2};
    if (zeros) {
      args.shape = input_shape;
    } else {
      args.input = input.view();
    }
    absl::StatusOr<NdPlan> plan = PlanScatterNd(args);
    ASSERT_TRUE(plan.ok()) << plan.status();
    Tensor expected(plan->result_dtype, plan->result_shape);
    ASSERT_TRUE(cpu::ScatterNd(*plan, expected.mutable_view()).ok());

    std::unique_ptr<DeviceCall> call = MakeDeviceCall(*plan);
    if (!DeviceScatterSupported(dtype, reduce)) {
      EXPECT_EQ(call, nullptr);
      continue;
    }
    ASSERT_NE(call, nullptr);
    ++device_calls;
    const cuda::ScatterSizes sizes = cuda::SizesOf(*plan);
    EXPECT_EQ(sizes.updates, source.numel());
    EXPECT_EQ(call->WorkspaceBytes().value_or(-1),
              cuda::ScatterNdDestinationBytes(*plan) + cuda::PlanScatterWorkspace(sizes).bytes);
    EXPECT_GE(cuda::ScatterNdDestinationBytes(*plan), NumElements(position_shape) * 8);
    EXPECT_EQ(call->inputs().size(), zeros ? 2u : 3u);
    ExpectRelocatedRunMatches(*plan, *call, cpu::ScatterNd, {&input, &index, &backing}, expected,
                              absl::StrCat("trial ", trial, " ", std::string(DataTypeName(dtype)),
                                           " ", std::string(ReductionName(reduce))));
  }
  EXPECT_GT(device_calls, 250);
}

TEST(DeviceCallTest, EmptyAndCpuOnlyCallsHaveNoDeviceForm) {
  Tensor input = Tensor::Zeros(DataType::kFloat32, {0, 3});
  Tensor index = Tensor::Zeros(DataType::kInt64, {0, 3});
  absl::StatusOr<GatherPlan> empty = PlanGather({.input = input.view(), .index = index.view()});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(MakeDeviceCall(*empty), nullptr);

  Tensor complex_input = Tensor::Zeros(DataType::kComplex128, {4});
  Tensor complex_source = Tensor::Zeros(DataType::kComplex128, {2});
  Tensor small_index = Tensor::Zeros(DataType::kInt64, {2});
  absl::StatusOr<ScatterPlan> product = PlanScatter({.input = complex_input.view(),
                                                     .index = small_index.view(),
                                                     .source = complex_source.view(),
                                                     .reduce = Reduction::kProd});
  ASSERT_TRUE(product.ok()) << product.status();
  EXPECT_EQ(MakeDeviceCall(*product), nullptr);
  EXPECT_FALSE(DeviceScatterSupported(DataType::kComplex128, Reduction::kProd));
  EXPECT_TRUE(DeviceScatterSupported(DataType::kComplex64, Reduction::kProd));
  EXPECT_TRUE(DeviceScatterSupported(DataType::kBFloat16, Reduction::kAmax));
}

TEST(DeviceCallTest, OverlappingViewsShareOneSpan) {
  // Broadcast Gather views the index at stride 0 and the plan keeps the caller's index too: both
  // must land in one span, copied once.
  Tensor input = Tensor::Zeros(DataType::kFloat32, {4, 5});
  Tensor index = Tensor::Zeros(DataType::kInt64, {1, 3});
  absl::StatusOr<GatherPlan> plan =
      PlanGather({.input = input.view(), .index = index.view(), .axis = 1, .broadcast = true});
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::unique_ptr<DeviceCall> call = MakeDeviceCall(*plan);
  ASSERT_NE(call, nullptr);
  ASSERT_EQ(call->inputs().size(), 2u);
  int64_t total = 0;
  for (const InputSpan& span : call->inputs()) total += span.bytes;
  EXPECT_EQ(total, 4 * 5 * 4 + 3 * 8);
}

}  // namespace
}  // namespace tensorops
