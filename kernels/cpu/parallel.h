// oneTBB helpers for the CPU kernels. Kernels use the caller's task arena, so a server that bounds
// parallelism with an arena or tbb::global_control bounds every kernel, and concurrent requests
// share one pool instead of each spawning threads.
#ifndef TENSOROPS_KERNELS_CPU_PARALLEL_H_
#define TENSOROPS_KERNELS_CPU_PARALLEL_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/functional/function_ref.h"

namespace tensorops::cpu {

// kMinParallelElements: below this many elements a kernel runs on the calling thread; splitting
// smaller work costs more in task overhead than it saves.
inline constexpr int64_t kMinParallelElements = int64_t{1} << 15;

// kParallelGrainBytes: the bytes a copy task moves at least. Copies of 512 KiB and more run on
// every core: a 1 MiB memcpy took 18.6 µs on one core and 8.4-10.5 µs split in pieces of 64-256
// KiB over two (source and destination outgrow one core's L2); 256 KiB took 2.1 µs either way.
inline constexpr int64_t kParallelGrainBytes = int64_t{256} << 10;

// ParallelForRanges is ParallelFor's parallel part: `body(begin, end)` over subranges of [0,
// count) of at least `grain` elements (except a last one), on the caller's task arena. Not a
// template, so that oneTBB's task machinery is compiled once instead of into every kernel: each
// of the kernels' instantiations (dtype, index type, reduction, enumeration) carried a copy of its
// own, and one indirect call per task costs nothing beside a task's thousands of elements.
void ParallelForRanges(int64_t count, int64_t grain,
                       absl::FunctionRef<void(int64_t begin, int64_t end)> body);

// ParallelForBoxes calls `box(row_begin, row_end, col_begin, col_end)` over boxes that tile
// [0, rows) x [0, cols), each at least `row_grain` x `col_grain` (except at the edges), in
// parallel, until one returns false; returns false when one did (boxes already running finish).
bool ParallelForBoxes(
    int64_t rows, int64_t row_grain, int64_t cols, int64_t col_grain,
    absl::FunctionRef<bool(int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end)>
        box);

// ParallelFor calls `body(begin, end)` over disjoint subranges covering [0, count), in parallel
// when count >= `grain` * 2, with each subrange at least `grain` long (except a last one).
template <typename Body>
void ParallelFor(int64_t count, int64_t grain, Body&& body) {
  if (count <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (count < 2 * grain) {
    body(int64_t{0}, count);
    return;
  }
  ParallelForRanges(count, grain, body);
}

// ParallelCopy is memcpy split across cores for large buffers.
inline void ParallelCopy(void* dest, const void* source, int64_t bytes) {
  ParallelFor(bytes, kParallelGrainBytes, [&](int64_t begin, int64_t end) {
    std::memcpy(static_cast<char*>(dest) + begin, static_cast<const char*>(source) + begin,
                static_cast<size_t>(end - begin));
  });
}

}  // namespace tensorops::cpu

#endif  // TENSOROPS_KERNELS_CPU_PARALLEL_H_
