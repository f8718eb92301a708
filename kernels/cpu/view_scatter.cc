// The CPU kernel of SelectScatter, SliceScatter and DiagonalScatter. Each plan
// describes its window the way PyTorch's select/slice/diagonal describe a view (sizes, strides and
// a storage offset), but over the contiguous result, so the kernel is two copies: the input into
// the result, then src into the window. Select and Slice windows are whole slabs of the result as
// well; where those are large the kernel writes each slab once, from whichever tensor holds it.
#include "kernels/view_scatter.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "absl/strings/str_format.h"
#include "kernels/cpu/parallel.h"
#include "kernels/dtype.h"
#include "kernels/shape.h"

namespace tensorops {
namespace cpu {
namespace {

// kMinFusedSlabBytes: slabs at least this long are written by WriteSlabs. Below it the per-slab
// bookkeeping costs more than the second pass over the window that it saves.
constexpr int64_t kMinFusedSlabBytes = 256;

// SlabBytes is the length of one slab of `plan.slabs` in the result, in bytes.
int64_t SlabBytes(const ViewScatterPlan& plan) {
  int64_t bytes = ItemSize(plan.result_dtype);
  for (size_t d = plan.slabs->axis + 1; d < plan.result_shape.size(); ++d) {
    bytes *= plan.result_shape[d];
  }
  return bytes;
}

// WriteSlabs writes every slab of the result once: src's where the window is, input's elsewhere
// (skipped when the result is the input). Runs of input slabs between window slabs are one memcpy.
// Against copying the input and then the window, it reads the input only outside the window and
// writes each window byte once.
void WriteSlabs(const ViewScatterPlan& plan, const SlabWindow& slabs, int64_t slab_bytes,
                std::byte* result) {
  const int64_t size = plan.result_shape[slabs.axis];
  const int64_t total = NumElements(plan.result_shape) * ItemSize(plan.result_dtype) / slab_bytes;
  const auto* input = static_cast<const std::byte*>(plan.input.data());
  const auto* src = static_cast<const std::byte*>(plan.src.data());
  const bool in_place = input == result;
  const int64_t grain = std::max<int64_t>(1, kParallelGrainBytes / slab_bytes);
  ParallelFor(total, grain, [&](int64_t begin, int64_t end) {
    int64_t outer = begin / size;
    int64_t position = begin % size;
    int64_t pending = begin;  // The first input slab not yet copied.
    const auto copy_input_until = [&](int64_t slab) {
      if (in_place || slab == pending) return;
      std::memcpy(result + pending * slab_bytes, input + pending * slab_bytes,
                  static_cast<size_t>((slab - pending) * slab_bytes));
    };
    for (int64_t slab = begin; slab < end; ++slab) {
      const int64_t from_start = position - slabs.start;
      if (from_start >= 0 && from_start % slabs.step == 0 &&
          from_start / slabs.step < slabs.count) {
        copy_input_until(slab);
        pending = slab + 1;
        std::memcpy(result + slab * slab_bytes,
                    src + (outer * slabs.count + from_start / slabs.step) * slab_bytes,
                    static_cast<size_t>(slab_bytes));
      }
      if (++position == size) {
        position = 0;
        ++outer;
      }
    }
    copy_input_until(end);
  });
}

}  // namespace

absl::Status ViewScatter(const ViewScatterPlan& plan, const MutableTensorView& result) {
  if (result.dtype() != plan.result_dtype || result.shape() != plan.result_shape ||
      !result.is_contiguous()) {
    return absl::InternalError(absl::StrFormat(
        "view_scatter: result of shape %s does not match the plan's contiguous %s %s",
        ShapeToString(result.shape()), DataTypeName(plan.result_dtype),
        ShapeToString(plan.result_shape)));
  }
  auto* result_bytes = static_cast<std::byte*>(result.data());
  if (plan.slabs.has_value() && NumElements(plan.result_shape) > 0 && plan.input.is_contiguous() &&
      plan.src.is_contiguous()) {
    const int64_t slab_bytes = SlabBytes(plan);
    if (slab_bytes >= kMinFusedSlabBytes) {
      WriteSlabs(plan, *plan.slabs, slab_bytes, result_bytes);
      return absl::OkStatus();
    }
  }
  CopyElements(plan.input, result);
  if (NumElements(plan.window_shape) == 0) return absl::OkStatus();
  const MutableTensorView window(plan.result_dtype, plan.window_shape, plan.window_strides,
                                 result_bytes + plan.window_offset * result.itemsize());
  CopyElements(plan.src, window);
  return absl::OkStatus();
}

}  // namespace cpu

}  // namespace tensorops
