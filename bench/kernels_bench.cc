// CPU kernel benchmarks: the fixed table of cases (bench/README.md), each measured three
// ways in the same run on the same data: our kernel (the benchmark's time), the same call through
// ATen when built with libtorch (counter `vs_aten` = ATen's time / ours, > 1 means we are faster),
// and memcpy moving the same number of bytes (counter `of_memcpy` = memcpy's time / ours: the
// fraction of this machine's copy bandwidth the kernel reaches; memcpy on one core or on all,
// whichever is faster).
//
// bytes_per_second counts the bytes a kernel must touch (index and data read, result written);
// the memcpy reference copies half that many bytes, so it too touches them once each.
//
// Sizes are the input tensor's bytes: small 4 KiB, medium 1 MiB, large $TENSOROPS_BENCH_LARGE_MIB
// MiB (64 by default; the 256 MiB multiplies every large case's time by four).
//
//   build/release/bench/kernels_bench --benchmark_filter=Scatter --benchmark_min_time=0.2
//   build/release/bench/kernels_bench --benchmark_format=json | bench/kernels_table.py
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "kernels/gather.h"
#include "kernels/half.h"
#include "kernels/masked_scatter.h"
#include "kernels/nd_ops.h"
#include "kernels/scatter.h"
#include "kernels/view_scatter.h"
#include "oneapi/tbb/parallel_for.h"

#ifdef TENSOROPS_BENCH_HAVE_TORCH
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/version.h>
#endif

namespace tensorops {
namespace {

enum class IndexPattern { kUnique, kRandom, kDuplicateHeavy };
enum SizeClass { kSmall, kMedium, kLarge };

int64_t SizeBytes(int64_t size_class) {
  switch (size_class) {
    case kSmall:
      return 4 << 10;
    case kMedium:
      return 1 << 20;
    default: {
      const char* mib = std::getenv("TENSOROPS_BENCH_LARGE_MIB");
      return int64_t{mib ? std::atoi(mib) : 64} << 20;
    }
  }
}

const char* SizeName(int64_t size_class) {
  return size_class == kSmall ? "4KiB" : size_class == kMedium ? "1MiB" : "large";
}

const char* PatternName(IndexPattern pattern) {
  switch (pattern) {
    case IndexPattern::kUnique:
      return "unique";
    case IndexPattern::kRandom:
      return "random";
    default:
      return "dup1%";
  }
}

const char* DtypeName(DataType dtype) {
  return dtype == DataType::kFloat32 ? "f32" : dtype == DataType::kBFloat16 ? "bf16" : "i64";
}

// A rows x cols matrix of `dtype` with `size_class` bytes, as square as powers of two allow.
Shape MatrixShape(DataType dtype, int64_t size_class) {
  const int64_t numel = SizeBytes(size_class) / ItemSize(dtype);
  int64_t cols = 1;
  while (cols * cols < numel) cols *= 2;
  return {numel / cols, cols};
}

// Fill writes values in [-1, 1) (floats) or [-3, 3] (integers), so PROD neither overflows nor
// collapses to zero too fast to matter.
void Fill(Tensor& tensor, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const int64_t numel = tensor.numel();
  switch (tensor.dtype()) {
    case DataType::kFloat32:
      for (int64_t i = 0; i < numel; ++i) tensor.data_as<float>()[i] = value(rng);
      break;
    case DataType::kBFloat16:
      for (int64_t i = 0; i < numel; ++i) tensor.data_as<BFloat16>()[i] = BFloat16(value(rng));
      break;
    default:
      for (int64_t i = 0; i < numel; ++i) {
        tensor.data_as<int64_t>()[i] = static_cast<int64_t>(rng() % 7) - 3;
      }
  }
}

// MakeIndex returns an int64 index of `shape` along `axis`: unique is a permutation of the axis
// in every line along it (no two updates meet), random is uniform, duplicate-heavy sends every
// update to 1% of the positions.
Tensor MakeIndex(const Shape& shape, int64_t axis, IndexPattern pattern, std::mt19937_64& rng) {
  Tensor index(DataType::kInt64, shape);
  int64_t* out = index.data_as<int64_t>();
  const int64_t axis_size = shape[axis];
  const int64_t distinct =
      pattern == IndexPattern::kDuplicateHeavy ? std::max<int64_t>(1, axis_size / 100) : axis_size;
  if (pattern != IndexPattern::kUnique) {
    std::uniform_int_distribution<int64_t> pick(0, distinct - 1);
    for (int64_t i = 0; i < index.numel(); ++i) out[i] = pick(rng);
    return index;
  }
  // Lines along `axis` of a 2-D matrix: columns for axis 0 (stride cols), rows for axis 1.
  const int64_t lines = shape[1 - axis];
  const int64_t stride = axis == 0 ? shape[1] : 1;
  const int64_t line_step = axis == 0 ? 1 : shape[1];
  std::vector<int64_t> permutation(axis_size);
  std::iota(permutation.begin(), permutation.end(), 0);
  for (int64_t line = 0; line < lines; ++line) {
    std::shuffle(permutation.begin(), permutation.end(), rng);
    for (int64_t k = 0; k < axis_size; ++k) out[line * line_step + k * stride] = permutation[k];
  }
  return index;
}

// --benchmark_min_time, read in main.
double g_min_time_s = 0.5;

// SecondsPerCall times `fn` for about `budget_s` seconds (at least one call).
double SecondsPerCall(const std::function<void()>& fn, double budget_s) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  fn();
  const double first = std::chrono::duration<double>(Clock::now() - start).count();
  const int64_t more =
      std::clamp<int64_t>(static_cast<int64_t>(budget_s / std::max(first, 1e-9)) - 1, 0, 1'000'000);
  for (int64_t i = 0; i < more; ++i) fn();
  return std::chrono::duration<double>(Clock::now() - start).count() / (1 + more);
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Measure runs `ours` in the benchmark loop (the row's time, items/s and bytes/s), then sets the
// ratio counters from rounds of ours, ATen's equivalent (when built with it) and a memcpy of the
// same traffic back to back: the median of the per-round ratios, so that a burst of load from
// other processes skews one round, not the ratio.
void Measure(benchmark::State& state, const std::function<void()>& ours,
             const std::function<void()>& aten, int64_t items, int64_t bytes) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (auto _ : state) ours();
  const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
  state.SetItemsProcessed(state.iterations() * items);
  state.SetBytesProcessed(state.iterations() * bytes);
  // Google Benchmark calls this function with growing iteration counts until one run lasts
  // --benchmark_min_time; only that run is reported, so only it pays for the ratio rounds.
  if (total_s < 0.9 * g_min_time_s) return;

  std::vector<char> from(static_cast<size_t>(bytes / 2), 1), to(static_cast<size_t>(bytes / 2));
  const std::function<void()> copy = [&] {
    std::memcpy(to.data(), from.data(), to.size());
    benchmark::DoNotOptimize(to.data());
  };
  // The ceiling is the faster of one memcpy and one memcpy per core (1 MiB pieces over oneTBB,
  // the pool our kernels run on), since the kernels use every core.
  const std::function<void()> parallel_copy = [&] {
    constexpr size_t kPiece = size_t{1} << 20;
    oneapi::tbb::parallel_for(size_t{0}, (to.size() + kPiece - 1) / kPiece, [&](size_t piece) {
      const size_t offset = piece * kPiece;
      std::memcpy(to.data() + offset, from.data() + offset, std::min(kPiece, to.size() - offset));
    });
    benchmark::DoNotOptimize(to.data());
  };
  if (aten) aten();  // ATen's first call may allocate what later calls reuse.
  constexpr int kRounds = 5;
  const double budget_s = std::clamp(total_s / kRounds, 0.005, 0.05);
  std::vector<double> of_memcpy, vs_aten;
  for (int round = 0; round < kRounds; ++round) {
    const double ours_s = SecondsPerCall(ours, budget_s);
    const double copy_s =
        std::min(SecondsPerCall(copy, budget_s), SecondsPerCall(parallel_copy, budget_s));
    of_memcpy.push_back(copy_s / ours_s);
    if (aten) vs_aten.push_back(SecondsPerCall(aten, budget_s) / ours_s);
  }
  state.counters["of_memcpy"] = Median(of_memcpy);
  if (aten) state.counters["vs_aten"] = Median(vs_aten);
}

#ifdef TENSOROPS_BENCH_HAVE_TORCH
at::ScalarType AtenType(DataType dtype) {
  return dtype == DataType::kFloat32    ? at::kFloat
         : dtype == DataType::kBFloat16 ? at::kBFloat16
                                        : at::kLong;
}

// AsAten wraps a tensor's memory without copying: ATen reads the very same bytes.
at::Tensor AsAten(const Tensor& tensor) {
  std::vector<int64_t> sizes(tensor.shape().begin(), tensor.shape().end());
  return at::from_blob(const_cast<void*>(tensor.data()), sizes,
                       at::TensorOptions().dtype(AtenType(tensor.dtype())));
}

const char* AtenReduce(Reduction reduce) {
  switch (reduce) {
    case Reduction::kSum:
      return "sum";
    case Reduction::kProd:
      return "prod";
    case Reduction::kMean:
      return "mean";
    case Reduction::kAmax:
      return "amax";
    default:
      return "amin";
  }
}
#endif

// Args of the Gather and Scatter cases: {size class, dtype, axis (0 or 1 = last), pattern,
// reduction (Scatter only)}.
void BM_Gather(benchmark::State& state) {
  const auto dtype = static_cast<DataType>(state.range(1));
  const int64_t axis = state.range(2);
  const auto pattern = static_cast<IndexPattern>(state.range(3));
  const Shape shape = MatrixShape(dtype, state.range(0));
  std::mt19937_64 rng(42);
  Tensor input(dtype, shape);
  Fill(input, rng);
  Tensor index = MakeIndex(shape, axis, pattern, rng);
  GatherPlan plan = *PlanGather({.input = input.view(), .index = index.view(), .axis = axis});
  Tensor result(plan.result_dtype, plan.result_shape);
  std::function<void()> aten;
#ifdef TENSOROPS_BENCH_HAVE_TORCH
  at::Tensor a_input = AsAten(input), a_index = AsAten(index), a_result = AsAten(result);
  aten = [&] { at::gather_out(a_result, a_input, axis, a_index); };
#endif
  const int64_t numel = input.numel();
  Measure(
      state, [&] { benchmark::DoNotOptimize(cpu::Gather(plan, result.mutable_view()).ok()); }, aten,
      numel, numel * (8 + 2 * ItemSize(dtype)));
  state.SetLabel(absl::StrCat(DtypeName(dtype), " ", SizeName(state.range(0)),
                              axis == 0 ? " axis0 " : " last ", PatternName(pattern)));
}

void BM_Scatter(benchmark::State& state) {
  const auto dtype = static_cast<DataType>(state.range(1));
  const int64_t axis = state.range(2);
  const auto pattern = static_cast<IndexPattern>(state.range(3));
  const auto reduce = static_cast<Reduction>(state.range(4));
  const Shape shape = MatrixShape(dtype, state.range(0));
  std::mt19937_64 rng(42);
  Tensor input(dtype, shape), source(dtype, shape);
  Fill(input, rng);
  Fill(source, rng);
  Tensor index = MakeIndex(shape, axis, pattern, rng);
  ScatterPlan plan = *PlanScatter({.input = input.view(),
                                   .index = index.view(),
                                   .source = source.view(),
                                   .axis = axis,
                                   .reduce = reduce});
  Tensor result(plan.result_dtype, plan.result_shape);
  std::function<void()> aten;
#ifdef TENSOROPS_BENCH_HAVE_TORCH
  at::Tensor a_input = AsAten(input), a_index = AsAten(index), a_source = AsAten(source),
             a_result = AsAten(result);
  // Out-of-place like ours: the result starts as a copy of input.
  if (reduce == Reduction::kAssign) {
    aten = [&] { at::scatter_out(a_result, a_input, axis, a_index, a_source); };
  } else {
    aten = [&] {
      at::scatter_reduce_out(a_result, a_input, axis, a_index, a_source, AtenReduce(reduce),
                             /*include_self=*/true);
    };
  }
#endif
  const int64_t numel = input.numel();
  const int64_t element = ItemSize(dtype);
  // input read and result written, index and source read.
  Measure(
      state, [&] { benchmark::DoNotOptimize(cpu::Scatter(plan, result.mutable_view()).ok()); },
      aten, numel, numel * (8 + 3 * element));
  state.SetLabel(absl::StrCat(DtypeName(dtype), " ", SizeName(state.range(0)),
                              axis == 0 ? " axis0 " : " last ", PatternName(pattern), " ",
                              std::string(ReductionName(reduce))));
}

// MaskedScatter, {size class, dtype}: a random mask of about half true positions.
// Masks of BM_MaskedScatter: a call takes a different random mask each time, cycling through at
// least kMaskCycleBytes of them. With one mask repeated, the branch predictor learns the mask of a
// small case by heart: a branch per element, as in ATen's loop, then never mispredicts, which no
// caller with fresh masks sees.
constexpr int64_t kMaskCycleBytes = int64_t{1} << 20;

void BM_MaskedScatter(benchmark::State& state) {
  const auto dtype = static_cast<DataType>(state.range(1));
  const Shape shape = MatrixShape(dtype, state.range(0));
  std::mt19937_64 rng(42);
  Tensor input(dtype, shape), source(dtype, shape);
  Fill(input, rng);
  Fill(source, rng);
  const int64_t numel = input.numel();
  const int64_t mask_count = std::max<int64_t>(1, kMaskCycleBytes / numel);
  std::vector<Tensor> masks;
  std::vector<MaskedScatterPlan> plans;
  for (int64_t m = 0; m < mask_count; ++m) {
    Tensor& mask = masks.emplace_back(DataType::kBool, shape);
    for (int64_t i = 0; i < numel; ++i) mask.data_as<uint8_t>()[i] = rng() & 1;
    plans.push_back(
        *PlanMaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()}));
  }
  Tensor result(plans[0].result_dtype, plans[0].result_shape);
  size_t next_ours = 0;
  std::function<void()> aten;
#ifdef TENSOROPS_BENCH_HAVE_TORCH
  at::Tensor a_input = AsAten(input), a_source = AsAten(source), a_result = AsAten(result);
  std::vector<at::Tensor> a_masks;
  for (Tensor& mask : masks) {
    a_masks.push_back(at::from_blob(mask.data(), {shape[0], shape[1]}, at::kBool));
  }
  size_t next_aten = 0;
  // masked_scatter has no out= form: the in-place form on the result, after copying input in,
  // is the same work as ours.
  aten = [&] {
    a_result.copy_(a_input);
    a_result.masked_scatter_(a_masks[next_aten], a_source);
    next_aten = (next_aten + 1) % a_masks.size();
  };
#endif
  const int64_t element = ItemSize(dtype);
  // input and mask read, result written, about half the source read.
  Measure(
      state,
      [&] {
        benchmark::DoNotOptimize(cpu::MaskedScatter(plans[next_ours], result.mutable_view()).ok());
        next_ours = (next_ours + 1) % plans.size();
      },
      aten, numel, numel * (1 + 2 * element + element / 2));
  state.SetLabel(absl::StrCat(DtypeName(dtype), " ", SizeName(state.range(0))));
}

// The copy-bound ops on float32, {size class, op}: SliceScatter of every other row, SelectScatter
// of row 0, DiagonalScatter of the main diagonal, and GatherNd of whole random rows (Gather along
// contiguous rows). Their bytes are one read and one write of the result.
enum class CopyOp { kSliceScatter, kSelectScatter, kDiagonalScatter, kGatherRows };

void BM_CopyBound(benchmark::State& state) {
  const auto op = static_cast<CopyOp>(state.range(1));
  const Shape shape = MatrixShape(DataType::kFloat32, state.range(0));
  const int64_t rows = shape[0], cols = shape[1];
  std::mt19937_64 rng(42);
  Tensor input(DataType::kFloat32, shape);
  Fill(input, rng);
  Tensor src;
  Tensor index;
  const char* name = "";
  std::function<void()> ours, aten;
  ViewScatterPlan view_plan;
  NdPlan nd_plan;
  switch (op) {
    case CopyOp::kSliceScatter:
      name = "SliceScatter";
      src = Tensor(DataType::kFloat32, {(rows + 1) / 2, cols});
      view_plan =
          *PlanSliceScatter({.input = input.view(), .src = src.view(), .axis = 0, .step = 2});
      break;
    case CopyOp::kSelectScatter:
      name = "SelectScatter";
      src = Tensor(DataType::kFloat32, {cols});
      view_plan = *PlanSelectScatter({.input = input.view(), .src = src.view(), .axis = 0});
      break;
    case CopyOp::kDiagonalScatter:
      name = "DiagonalScatter";
      src = Tensor(DataType::kFloat32, {std::min(rows, cols)});
      view_plan = *PlanDiagonalScatter({.input = input.view(), .src = src.view()});
      break;
    case CopyOp::kGatherRows: {
      name = "GatherNd rows";
      index = Tensor(DataType::kInt64, {rows, 1});
      std::uniform_int_distribution<int64_t> pick(0, rows - 1);
      for (int64_t r = 0; r < rows; ++r) index.data_as<int64_t>()[r] = pick(rng);
      nd_plan = *PlanGatherNd({.input = input.view(), .index = index.view()});
      break;
    }
  }
  if (op != CopyOp::kGatherRows) Fill(src, rng);
  Tensor result(DataType::kFloat32, shape);
  if (op == CopyOp::kGatherRows) {
    ours = [&] { benchmark::DoNotOptimize(cpu::GatherNd(nd_plan, result.mutable_view()).ok()); };
  } else {
    ours = [&] {
      benchmark::DoNotOptimize(cpu::ViewScatter(view_plan, result.mutable_view()).ok());
    };
  }
#ifdef TENSOROPS_BENCH_HAVE_TORCH
  // The view scatters go through ATen's functional form, which allocates its result: their out=
  // forms in libtorch 1.13 are generated wrappers that allocate and then copy into `out`, a pass
  // no caller would pay.
  at::Tensor a_input = AsAten(input), a_result = AsAten(result);
  at::Tensor a_src = op != CopyOp::kGatherRows ? AsAten(src) : at::Tensor();
  at::Tensor a_rows = op == CopyOp::kGatherRows ? AsAten(index).view({rows}) : at::Tensor();
  switch (op) {
    case CopyOp::kSliceScatter:
      aten = [&] { benchmark::DoNotOptimize(at::slice_scatter(a_input, a_src, 0, 0, rows, 2)); };
      break;
    case CopyOp::kSelectScatter:
      aten = [&] { benchmark::DoNotOptimize(at::select_scatter(a_input, a_src, 0, 0)); };
      break;
    case CopyOp::kDiagonalScatter:
      aten = [&] { benchmark::DoNotOptimize(at::diagonal_scatter(a_input, a_src)); };
      break;
    case CopyOp::kGatherRows:
      aten = [&] { at::index_select_out(a_result, a_input, 0, a_rows); };
      break;
  }
#endif
  const int64_t numel = rows * cols;
  Measure(state, ours, aten, numel, numel * 8);
  state.SetLabel(absl::StrCat(name, " f32 ", SizeName(state.range(0))));
}

constexpr DataType kDtypes[] = {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64};
constexpr IndexPattern kPatterns[] = {IndexPattern::kUnique, IndexPattern::kRandom,
                                      IndexPattern::kDuplicateHeavy};
constexpr Reduction kReductions[] = {Reduction::kAssign, Reduction::kSum,  Reduction::kProd,
                                     Reduction::kMean,   Reduction::kAmax, Reduction::kAmin};

int64_t Arg(DataType dtype) { return static_cast<int64_t>(dtype); }

// Large cases: every dtype for Gather, float32 only for Scatter (the other dtypes' large rows
// would add about 70 cases of several seconds each on a 2-core machine; see bench/README.md).
void GatherCases(benchmark::internal::Benchmark* b) {
  for (int64_t size : {kSmall, kMedium, kLarge}) {
    for (DataType dtype : kDtypes) {
      for (int64_t axis : {0, 1}) {
        for (IndexPattern pattern : kPatterns) {
          b->Args({size, Arg(dtype), axis, static_cast<int64_t>(pattern)});
        }
      }
    }
  }
}

void ScatterCases(benchmark::internal::Benchmark* b) {
  for (int64_t size : {kSmall, kMedium, kLarge}) {
    for (DataType dtype : kDtypes) {
      if (size == kLarge && dtype != DataType::kFloat32) continue;
      for (int64_t axis : {0, 1}) {
        for (IndexPattern pattern : kPatterns) {
          for (Reduction reduce : kReductions) {
            b->Args({size, Arg(dtype), axis, static_cast<int64_t>(pattern),
                     static_cast<int64_t>(reduce)});
          }
        }
      }
    }
  }
}

void MaskedScatterCases(benchmark::internal::Benchmark* b) {
  for (int64_t size : {kSmall, kMedium, kLarge}) {
    for (DataType dtype : kDtypes) b->Args({size, Arg(dtype)});
  }
}

void CopyBoundCases(benchmark::internal::Benchmark* b) {
  for (int64_t size : {kSmall, kMedium, kLarge}) {
    for (CopyOp op : {CopyOp::kSliceScatter, CopyOp::kSelectScatter, CopyOp::kDiagonalScatter,
                      CopyOp::kGatherRows}) {
      b->Args({size, static_cast<int64_t>(op)});
    }
  }
}

BENCHMARK(BM_Gather)
    ->Apply(GatherCases)
    ->ArgNames({"size", "dtype", "axis", "pattern"})
    ->UseRealTime();
BENCHMARK(BM_Scatter)
    ->Apply(ScatterCases)
    ->ArgNames({"size", "dtype", "axis", "pattern", "reduce"})
    ->UseRealTime();
BENCHMARK(BM_MaskedScatter)->Apply(MaskedScatterCases)->ArgNames({"size", "dtype"})->UseRealTime();
BENCHMARK(BM_CopyBound)->Apply(CopyBoundCases)->ArgNames({"size", "op"})->UseRealTime();

}  // namespace
}  // namespace tensorops

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    constexpr std::string_view kMinTime = "--benchmark_min_time=";
    const std::string_view arg = argv[i];
    if (arg.substr(0, kMinTime.size()) == kMinTime) {
      tensorops::g_min_time_s = std::atof(argv[i] + kMinTime.size());
    }
  }
#ifdef TENSOROPS_BENCH_HAVE_TORCH
  // Both sides get every core: ours runs on oneTBB's default arena.
  at::set_num_threads(static_cast<int>(std::thread::hardware_concurrency()));
  benchmark::AddCustomContext("aten", "libtorch " TORCH_VERSION);
  benchmark::AddCustomContext("aten_threads", std::to_string(at::get_num_threads()));
#else
  benchmark::AddCustomContext("aten", "not built (no libtorch found)");
#endif
  benchmark::AddCustomContext("large_bytes",
                              std::to_string(tensorops::SizeBytes(tensorops::kLarge)));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
