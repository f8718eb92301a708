// CPU kernel benchmarks: Gather, Scatter, GatherNd, ScatterNd and MaskedScatter on float32 against
// memcpy of the same bytes, measured in the same run. Counters: bytes_per_second counts the bytes a
// kernel must move (index + data read + result written); `memcpy` rows give the ceiling of this
// machine for the same byte count.
//
//   build/release/bench/kernels_bench --benchmark_filter=Gather
#include <cstring>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/gather.h"
#include "kernels/masked_scatter.h"
#include "kernels/nd_ops.h"
#include "kernels/scatter.h"

namespace tensorops {
namespace {

enum class IndexPattern { kRandom, kDuplicateHeavy };

// A rows x cols float32 matrix with an int64 index of the same shape, indexing along `axis`.
struct Case {
  std::vector<float> input;
  std::vector<float> source;
  std::vector<int64_t> index;
  Shape shape;
};

Case MakeCase(int64_t rows, int64_t cols, int64_t axis, IndexPattern pattern) {
  Case c;
  c.shape = {rows, cols};
  const int64_t numel = rows * cols;
  const int64_t axis_size = c.shape[axis];
  // Duplicate-heavy: 1% of the destinations along the axis receive everything.
  const int64_t distinct =
      pattern == IndexPattern::kRandom ? axis_size : std::max<int64_t>(1, axis_size / 100);
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int64_t> pick(0, distinct - 1);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  c.input.resize(numel);
  c.source.resize(numel);
  c.index.resize(numel);
  for (int64_t i = 0; i < numel; ++i) {
    c.input[i] = value(rng);
    c.source[i] = value(rng);
    c.index[i] = pick(rng);
  }
  return c;
}

void SetBytes(benchmark::State& state, int64_t bytes_per_iteration) {
  state.SetBytesProcessed(state.iterations() * bytes_per_iteration);
}

void BM_Memcpy(benchmark::State& state) {
  const int64_t numel = state.range(0) * state.range(1);
  // The same traffic as a gather: index (8 B) and input (4 B) read, result (4 B) written.
  const size_t bytes = static_cast<size_t>(numel) * 16;
  std::vector<char> from(bytes, 1);
  std::vector<char> to(bytes);
  for (auto _ : state) {
    std::memcpy(to.data(), from.data(), bytes);
    benchmark::DoNotOptimize(to.data());
  }
  SetBytes(state, static_cast<int64_t>(bytes));
}

void BM_Gather(benchmark::State& state) {
  const int64_t axis = state.range(2);
  Case c = MakeCase(state.range(0), state.range(1), axis, IndexPattern::kRandom);
  GatherArgs args{.input = TensorView(DataType::kFloat32, c.shape, c.input.data()),
                  .index = TensorView(DataType::kInt64, c.shape, c.index.data()),
                  .axis = axis};
  GatherPlan plan = *PlanGather(args);
  Tensor result(plan.result_dtype, plan.result_shape);
  for (auto _ : state) {
    benchmark::DoNotOptimize(cpu::Gather(plan, result.mutable_view()).ok());
  }
  SetBytes(state, static_cast<int64_t>(c.index.size()) * 16);
}

void BM_Scatter(benchmark::State& state) {
  const int64_t axis = state.range(2);
  const auto reduce = static_cast<Reduction>(state.range(3));
  const auto pattern = static_cast<IndexPattern>(state.range(4));
  Case c = MakeCase(state.range(0), state.range(1), axis, pattern);
  ScatterArgs args{.input = TensorView(DataType::kFloat32, c.shape, c.input.data()),
                   .index = TensorView(DataType::kInt64, c.shape, c.index.data()),
                   .source = TensorView(DataType::kFloat32, c.shape, c.source.data()),
                   .axis = axis,
                   .reduce = reduce};
  ScatterPlan plan = *PlanScatter(args);
  Tensor result(plan.result_dtype, plan.result_shape);
  for (auto _ : state) {
    benchmark::DoNotOptimize(cpu::Scatter(plan, result.mutable_view()).ok());
  }
  // input copied (read + write), index and source read.
  SetBytes(state, static_cast<int64_t>(c.index.size()) * 20);
  state.SetLabel(std::string(ReductionName(reduce)) +
                 (pattern == IndexPattern::kRandom ? " random" : " dup-heavy"));
}

// GatherNd, axes form along `axis`: the same work as Gather (index with a trailing coordinate
// dimension of 1), so the two rows compare the Nd addressing with the axis walk.
void BM_GatherNdAxes(benchmark::State& state) {
  const int64_t axis = state.range(2);
  Case c = MakeCase(state.range(0), state.range(1), axis, IndexPattern::kRandom);
  Shape index_shape = c.shape;
  index_shape.push_back(1);
  GatherNdArgs args{.input = TensorView(DataType::kFloat32, c.shape, c.input.data()),
                    .index = TensorView(DataType::kInt64, index_shape, c.index.data()),
                    .axes = {axis}};
  NdPlan plan = *PlanGatherNd(args);
  Tensor result(plan.result_dtype, plan.result_shape);
  for (auto _ : state) {
    benchmark::DoNotOptimize(cpu::GatherNd(plan, result.mutable_view()).ok());
  }
  SetBytes(state, static_cast<int64_t>(c.index.size()) * 16);
}

// GatherNd, TensorFlow form: `rows` random whole rows (index shape [rows, 1]).
void BM_GatherNdRows(benchmark::State& state) {
  Case c = MakeCase(state.range(0), state.range(1), 0, IndexPattern::kRandom);
  const int64_t rows = state.range(0);
  GatherNdArgs args{.input = TensorView(DataType::kFloat32, c.shape, c.input.data()),
                    .index = TensorView(DataType::kInt64, {rows, 1}, c.index.data())};
  NdPlan plan = *PlanGatherNd(args);
  Tensor result(plan.result_dtype, plan.result_shape);
  for (auto _ : state) {
    benchmark::DoNotOptimize(cpu::GatherNd(plan, result.mutable_view()).ok());
  }
  SetBytes(state, static_cast<int64_t>(c.input.size()) * 8);
}

// ScatterNd, axes form along `axis`: the same updates as Scatter, to compare the bucketed
// ordering with the axis walk.
void BM_ScatterNdAxes(benchmark::State& state) {
  const int64_t axis = state.range(2);
  const auto reduce = static_cast<Reduction>(state.range(3));
  const auto pattern = static_cast<IndexPattern>(state.range(4));
  Case c = MakeCase(state.range(0), state.range(1), axis, pattern);
  Shape index_shape = c.shape;
  index_shape.push_back(1);
  ScatterNdArgs args{.input = TensorView(DataType::kFloat32, c.shape, c.input.data()),
                     .index = TensorView(DataType::kInt64, index_shape, c.index.data()),
                     .source = TensorView(DataType::kFloat32, c.shape, c.source.data()),
                     .axes = {axis},
                     .reduce = reduce};
  NdPlan plan = *PlanScatterNd(args);
  Tensor result(plan.result_dtype, plan.result_shape);
  for (auto _ : state) {
    benchmark::DoNotOptimize(cpu::ScatterNd(plan, result.mutable_view()).ok());
  }
  SetBytes(state, static_cast<int64_t>(c.index.size()) * 20);
  state.SetLabel(std::string(ReductionName(reduce)) +
                 (pattern == IndexPattern::kRandom ? " random" : " dup-heavy"));
}

// ScatterNd, TensorFlow form with two coordinates: every update addresses one random element of
// the matrix (index shape [rows * cols, 2]), the general path with its destination buckets.
void BM_ScatterNdPoints(benchmark::State& state) {
  const auto reduce = static_cast<Reduction>(state.range(2));
  const auto pattern = static_cast<IndexPattern>(state.range(3));
  Case c = MakeCase(state.range(0), state.range(1), 0, pattern);
  const int64_t updates = static_cast<int64_t>(c.index.size());
  std::vector<int64_t> points(2 * updates);
  for (int64_t i = 0; i < updates; ++i) {
    points[2 * i] = c.index[i];
    points[2 * i + 1] = c.index[(i * 7919) % updates] % c.shape[1];
  }
  ScatterNdArgs args{.input = TensorView(DataType::kFloat32, c.shape, c.input.data()),
                     .index = TensorView(DataType::kInt64, {updates, 2}, points.data()),
                     .source = TensorView(DataType::kFloat32, {updates}, c.source.data()),
                     .reduce = reduce};
  NdPlan plan = *PlanScatterNd(args);
  Tensor result(plan.result_dtype, plan.result_shape);
  for (auto _ : state) {
    benchmark::DoNotOptimize(cpu::ScatterNd(plan, result.mutable_view()).ok());
  }
  SetBytes(state, updates * 28);
  state.SetLabel(std::string(ReductionName(reduce)) +
                 (pattern == IndexPattern::kRandom ? " random" : " dup-heavy"));
}

// MaskedScatter with a random mask of about half true positions.
void BM_MaskedScatter(benchmark::State& state) {
  Case c = MakeCase(state.range(0), state.range(1), 0, IndexPattern::kRandom);
  std::vector<uint8_t> mask(c.input.size());
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = c.source[i] > 0.0f;
  MaskedScatterArgs args{.input = TensorView(DataType::kFloat32, c.shape, c.input.data()),
                         .mask = TensorView(DataType::kBool, c.shape, mask.data()),
                         .source = TensorView(DataType::kFloat32, c.shape, c.source.data())};
  MaskedScatterPlan plan = *PlanMaskedScatter(args);
  Tensor result(plan.result_dtype, plan.result_shape);
  for (auto _ : state) {
    benchmark::DoNotOptimize(cpu::MaskedScatter(plan, result.mutable_view()).ok());
  }
  // input and mask read, result written, about half the source read.
  SetBytes(state, static_cast<int64_t>(c.input.size()) * 11);
}

// {rows, cols}: 1 MiB and 64 MiB of float32.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{512, 512}, {4096, 4096}};

void MemcpyCases(benchmark::internal::Benchmark* b) {
  for (auto [rows, cols] : kShapes) b->Args({rows, cols});
}
void GatherCases(benchmark::internal::Benchmark* b) {
  for (auto [rows, cols] : kShapes) {
    for (int64_t axis : {0, 1}) b->Args({rows, cols, axis});
  }
}
void ScatterCases(benchmark::internal::Benchmark* b) {
  for (auto [rows, cols] : kShapes) {
    for (int64_t axis : {0, 1}) {
      for (Reduction reduce :
           {Reduction::kAssign, Reduction::kSum, Reduction::kMean, Reduction::kAmax}) {
        for (IndexPattern pattern : {IndexPattern::kRandom, IndexPattern::kDuplicateHeavy}) {
          b->Args({rows, cols, axis, static_cast<int64_t>(reduce), static_cast<int64_t>(pattern)});
        }
      }
    }
  }
}

void ScatterNdCases(benchmark::internal::Benchmark* b) {
  for (auto [rows, cols] : kShapes) {
    for (int64_t axis : {0, 1}) {
      for (Reduction reduce : {Reduction::kAssign, Reduction::kSum}) {
        for (IndexPattern pattern : {IndexPattern::kRandom, IndexPattern::kDuplicateHeavy}) {
          b->Args({rows, cols, axis, static_cast<int64_t>(reduce), static_cast<int64_t>(pattern)});
        }
      }
    }
  }
}

BENCHMARK(BM_Memcpy)->Apply(MemcpyCases)->ArgNames({"rows", "cols"})->UseRealTime();
BENCHMARK(BM_Gather)->Apply(GatherCases)->ArgNames({"rows", "cols", "axis"})->UseRealTime();
BENCHMARK(BM_Scatter)
    ->Apply(ScatterCases)
    ->ArgNames({"rows", "cols", "axis", "reduce", "pattern"})
    ->UseRealTime();

BENCHMARK(BM_GatherNdAxes)->Apply(GatherCases)->ArgNames({"rows", "cols", "axis"})->UseRealTime();
BENCHMARK(BM_GatherNdRows)->Apply(MemcpyCases)->ArgNames({"rows", "cols"})->UseRealTime();
BENCHMARK(BM_ScatterNdAxes)
    ->Apply(ScatterNdCases)
    ->ArgNames({"rows", "cols", "axis", "reduce", "pattern"})
    ->UseRealTime();
BENCHMARK(BM_ScatterNdPoints)
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (auto [rows, cols] : kShapes) {
        for (Reduction reduce : {Reduction::kAssign, Reduction::kSum}) {
          for (IndexPattern pattern : {IndexPattern::kRandom, IndexPattern::kDuplicateHeavy}) {
            b->Args({rows, cols, static_cast<int64_t>(reduce), static_cast<int64_t>(pattern)});
          }
        }
      }
    })
    ->ArgNames({"rows", "cols", "reduce", "pattern"})
    ->UseRealTime();
BENCHMARK(BM_MaskedScatter)->Apply(MemcpyCases)->ArgNames({"rows", "cols"})->UseRealTime();

}  // namespace
}  // namespace tensorops

BENCHMARK_MAIN();
