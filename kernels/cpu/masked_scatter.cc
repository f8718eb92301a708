// The CPU kernel of MaskedScatter. The kernel is the prefix-sum design of Paddle's
// masked_scatter (PyTorch's CUDA masked_scatter) rather than PyTorch's serial CPU loop, so that the
// CPU and the GPU run one algorithm and agree by construction:
//   1. the mask is viewed contiguous at the result shape (materialized when broadcast or strided);
//   2. the true positions are counted per block of the mask, in parallel;
//   3. an exclusive scan of the block counts gives each block's first source element, and the
//      total is checked against src.numel before anything is written;
//   4. result = input (broadcast), then every block writes its true positions independently.
// Small results are one block, counted and written on the calling thread. They used to take a
// serial loop with a branch per element instead, which looked faster only while the benchmark
// repeated one mask and the branch predictor learned it; with a new random mask per call it
// mispredicted half the time (float32 4 KiB: 6.6 against 4.5 µs; bench/README.md).
//
// Elements move as unsigned integers of the dtype's size (DispatchItemSize): masked_scatter never
// looks at values.
#include "kernels/masked_scatter.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "kernels/cpu/item_size.h"
#include "kernels/cpu/parallel.h"
#include "kernels/dtype.h"
#include "kernels/shape.h"

namespace tensorops {
namespace {

constexpr std::string_view kMaskedScatter = "masked_scatter";

}  // namespace

namespace cpu {
namespace {

// kScanBlockElements: the mask positions one block of the count and write passes covers. Large
// enough that a block's task overhead is noise, small enough that a big mask splits across every
// core.
constexpr int64_t kScanBlockElements = kMinParallelElements;

absl::Status SourceTooSmallError(int64_t source_count, int64_t true_count) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: src has %d elements but mask has %d true positions (src must have at least one element "
      "per true position)",
      kMaskedScatter, source_count, true_count));
}

// Mask bytes are read as uint8_t and any nonzero byte is true: a bool tensor from the wire may
// hold bytes other than 0 and 1, and loading those as C++ bool would be undefined.
int64_t CountTrue(const uint8_t* mask, int64_t begin, int64_t end) {
  int64_t count = 0;
  for (int64_t i = begin; i < end; ++i) count += mask[i] != 0;
  return count;
}

// WriteBlock writes result[begin, end): consecutive source elements, from `source_next` on, at
// the true positions of the mask, and `input` (contiguous, possibly `result` itself) elsewhere.
// The caller has checked that the source holds an element for every true position.
//
// Branch-free, and one pass instead of copying the input first: with a random mask a branch per
// element mispredicts half the time, and a separate copy pass moved the whole tensor once more.
// The element's address is selected with a bit mask (GCC turns a ?: between the two values, or
// between their addresses, back into a branch); clamping the source offset keeps it inside the
// source after the last true position.
//
// Never inlined (one call per block): inlined into MaskedScatter, whose one function holds the
// loop of every element size and the parallel split around them, GCC kept the loop's pointers on
// the stack, and a small int64 MaskedScatter took 1.6 µs instead of 1.3 (kernels_bench).
template <typename Elem>
[[gnu::noinline]] void WriteBlock(const uint8_t* mask, int64_t begin, int64_t end,
                                  const Elem* source, int64_t source_next, int64_t source_count,
                                  const Elem* input, Elem* result) {
  const int64_t last = source_count - 1;
  for (int64_t i = begin; i < end; ++i) {
    const uintptr_t take = mask[i] != 0;
    const uintptr_t select = uintptr_t{0} - take;  // All ones for a true position.
    const auto from_source = reinterpret_cast<uintptr_t>(source + std::min(source_next, last));
    const auto from_input = reinterpret_cast<uintptr_t>(input + i);
    result[i] = *reinterpret_cast<const Elem*>((from_source & select) | (from_input & ~select));
    source_next += static_cast<int64_t>(take);
  }
}

}  // namespace

absl::Status MaskedScatter(const MaskedScatterPlan& plan, const MutableTensorView& result) {
  if (result.dtype() != plan.result_dtype || result.shape() != plan.result_shape ||
      !result.is_contiguous()) {
    return absl::InternalError(
        absl::StrFormat("%s: result of shape %s does not match the plan's contiguous %s %s",
                        kMaskedScatter, ShapeToString(result.shape()),
                        DataTypeName(plan.result_dtype), ShapeToString(plan.result_shape)));
  }
  const int64_t count = NumElements(plan.result_shape);
  if (count == 0) return absl::OkStatus();

  std::optional<Tensor> mask_storage;
  if (!plan.mask.is_contiguous()) mask_storage = Tensor::FromView(plan.mask);
  const auto* mask =
      static_cast<const uint8_t*>(mask_storage ? mask_storage->data() : plan.mask.data());

  // The source is read at computed offsets, so it must be contiguous too. It is materialized only
  // once the count is known to fit, so a rejected request copies nothing.
  const int64_t source_count = plan.source.numel();
  std::optional<Tensor> source_storage;
  const auto contiguous_source = [&]() -> const void* {
    if (plan.source.is_contiguous()) return plan.source.data();
    source_storage = Tensor::FromView(plan.source);
    return source_storage->data();
  };

  // Pass 1: true positions per block. Pass 2 needs each block's first source element, which is
  // the exclusive scan of the counts of the blocks before it.
  const int64_t block_count = (count + kScanBlockElements - 1) / kScanBlockElements;
  const auto block_end = [&](int64_t block) {
    return std::min(count, (block + 1) * kScanBlockElements);
  };
  std::vector<int64_t> block_offsets(static_cast<size_t>(block_count));
  ParallelFor(block_count, 1, [&](int64_t first_block, int64_t last_block) {
    for (int64_t block = first_block; block < last_block; ++block) {
      block_offsets[block] = CountTrue(mask, block * kScanBlockElements, block_end(block));
    }
  });
  const int64_t last_block_count = block_offsets.back();
  std::exclusive_scan(block_offsets.begin(), block_offsets.end(), block_offsets.begin(),
                      int64_t{0});
  const int64_t true_count = block_offsets.back() + last_block_count;
  if (true_count > source_count) return SourceTooSmallError(source_count, true_count);

  // A broadcast input is first materialized in the result, which then serves as the input.
  const void* input = plan.input.data();
  if (!plan.input.is_contiguous()) {
    CopyElements(plan.input, result);
    input = result.data();
  }
  if (true_count == 0) {
    CopyElements(TensorView(plan.result_dtype, plan.result_shape, input), result);
    return absl::OkStatus();
  }
  const void* source = contiguous_source();
  DispatchItemSize(result.itemsize(), [&]<typename Elem>(TypeTag<Elem>) {
    ParallelFor(block_count, 1, [&](int64_t first_block, int64_t last_block) {
      for (int64_t block = first_block; block < last_block; ++block) {
        WriteBlock(mask, block * kScanBlockElements, block_end(block),
                   static_cast<const Elem*>(source), block_offsets[block], source_count,
                   static_cast<const Elem*>(input), result.data_as<Elem>());
      }
    });
  });
  return absl::OkStatus();
}

}  // namespace cpu

}  // namespace tensorops
