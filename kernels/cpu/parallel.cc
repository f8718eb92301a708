#include "kernels/cpu/parallel.h"

#include <atomic>
#include <cstdint>

#include "tbb/blocked_range.h"
#include "tbb/blocked_range2d.h"
#include "tbb/parallel_for.h"

namespace tensorops::cpu {

void ParallelForRanges(int64_t count, int64_t grain,
                       absl::FunctionRef<void(int64_t begin, int64_t end)> body) {
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, count, grain),
      [&](const tbb::blocked_range<int64_t>& range) { body(range.begin(), range.end()); });
}

bool ParallelForBoxes(
    int64_t rows, int64_t row_grain, int64_t cols, int64_t col_grain,
    absl::FunctionRef<bool(int64_t row_begin, int64_t row_end, int64_t col_begin, int64_t col_end)>
        box) {
  std::atomic<bool> ok{true};
  tbb::parallel_for(tbb::blocked_range2d<int64_t>(0, rows, row_grain, 0, cols, col_grain),
                    [&](const tbb::blocked_range2d<int64_t>& range) {
                      if (!ok.load(std::memory_order_relaxed)) return;
                      if (!box(range.rows().begin(), range.rows().end(), range.cols().begin(),
                               range.cols().end())) {
                        ok.store(false, std::memory_order_relaxed);
                      }
                    });
  return ok.load();
}

}  // namespace tensorops::cpu
