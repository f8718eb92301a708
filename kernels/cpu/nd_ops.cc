// CPU kernels of GatherNd and ScatterNd over an NdPlan.
//
// Both start from the same step, ForEachAddress: walk the positions B in row-major order with an
// odometer and turn each index row into the offset of the slice it addresses (checking every
// coordinate's range on the way).
//
// GatherNd then copies one slice per position; positions are independent, so they split freely
// across threads.
//
// ScatterNd cannot split positions freely: two index rows may address the same slice (duplicates
// are the point of SUM and the hazard of ASSIGN), and docs/semantics.md wants the last row to win.
// It resolves every position's destination once, then orders the updates by destination with a
// stable counting sort into buckets of disjoint destination blocks. Each bucket is applied by one
// thread in the original row order, so no two threads touch one element and duplicates keep their
// row-major order: the ordering contract of ReducingScatter, which does the reduction itself.
#include "kernels/nd_ops.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/item_size.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reducing_scatter.h"
#include "kernels/cpu/streaming_store.h"
#include "kernels/dispatch.h"
#include "kernels/gather.h"
#include "kernels/reduction.h"
#include "kernels/scatter.h"
#include "tbb/blocked_range.h"
#include "tbb/parallel_for.h"
#include "tbb/task_arena.h"

namespace tensorops::cpu {
namespace {

// Addressing is the part of an NdPlan that ForEachAddress reads, copied into fixed arrays: the
// hot loop then keeps it in registers and cache instead of reloading it through the plan's
// vectors after every store (the compiler must assume the stores may alias them).
struct Addressing {
  explicit Addressing(const NdPlan& plan)
      : rank(static_cast<int64_t>(plan.positions.size())),
        components(static_cast<int64_t>(plan.component_sizes.size())),
        component_step(plan.index.strides()[rank]) {
    for (int64_t d = 0; d < rank; ++d) {
      sizes[d] = plan.positions[d];
      index_strides[d] = plan.index.strides()[d];
      direct_strides[d] = plan.position_strides[d];
    }
    for (int64_t j = 0; j < components; ++j) {
      component_sizes[j] = plan.component_sizes[j];
      component_strides[j] = plan.component_strides[j];
    }
  }

  int64_t rank;
  int64_t components;
  int64_t component_step;
  std::array<int64_t, kMaxRank> sizes{};
  std::array<int64_t, kMaxRank> index_strides{};
  std::array<int64_t, kMaxRank> direct_strides{};
  std::array<int64_t, kMaxRank> component_sizes{};
  std::array<int64_t, kMaxRank> component_strides{};
};

// ForEachAddress calls `fn(position, offset)` for the positions [begin, end) of plan.positions in
// row-major order, `offset` being the first addressed element (in the contiguous addressed
// tensor). Returns false at the first index value out of range. Positions go by runs along the
// last dimension, with a dedicated loop for the common single coordinate.
template <typename Index, typename Fn>
bool ForEachAddress(const NdPlan& plan, int64_t begin, int64_t end, Fn&& fn) {
  const Addressing at(plan);
  const Index* index = plan.index.data_as<Index>();
  if (at.rank == 0) {
    // One position (B = []): the whole index is one coordinate vector.
    int64_t offset = 0;
    for (int64_t j = 0; j < at.components; ++j) {
      const int64_t value = index[j * at.component_step];
      if (!InRange(value, at.component_sizes[j])) return false;
      offset += WrapIndex(value, at.component_sizes[j]) * at.component_strides[j];
    }
    if (begin < end) fn(int64_t{0}, offset);
    return true;
  }

  const int64_t last = at.rank - 1;
  std::array<int64_t, kMaxRank> coords{};
  int64_t index_offset = 0;
  int64_t direct_offset = 0;
  for (int64_t d = last, rest = begin; d >= 0; --d) {
    coords[d] = rest % at.sizes[d];
    rest /= at.sizes[d];
    index_offset += coords[d] * at.index_strides[d];
    direct_offset += coords[d] * at.direct_strides[d];
  }
  const int64_t index_step = at.index_strides[last];
  const int64_t direct_step = at.direct_strides[last];
  for (int64_t position = begin; position < end;) {
    const int64_t run = std::min(end - position, at.sizes[last] - coords[last]);
    const Index* index_run = index + index_offset;
    if (at.components == 1) {
      const int64_t size = at.component_sizes[0];
      const int64_t stride = at.component_strides[0];
      for (int64_t i = 0; i < run; ++i) {
        const int64_t value = index_run[i * index_step];
        if (!InRange(value, size)) return false;
        fn(position + i, direct_offset + i * direct_step + WrapIndex(value, size) * stride);
      }
    } else {
      for (int64_t i = 0; i < run; ++i) {
        int64_t offset = direct_offset + i * direct_step;
        for (int64_t j = 0; j < at.components; ++j) {
          const int64_t value = index_run[i * index_step + j * at.component_step];
          if (!InRange(value, at.component_sizes[j])) return false;
          offset += WrapIndex(value, at.component_sizes[j]) * at.component_strides[j];
        }
        fn(position + i, offset);
      }
    }
    position += run;
    coords[last] += run;
    index_offset += run * index_step;
    direct_offset += run * direct_step;
    // Carry into the outer dimensions.
    for (int64_t d = last; d > 0 && coords[d] == at.sizes[d]; --d) {
      index_offset += at.index_strides[d - 1] - coords[d] * at.index_strides[d];
      direct_offset += at.direct_strides[d - 1] - coords[d] * at.direct_strides[d];
      coords[d] = 0;
      ++coords[d - 1];
    }
  }
  return true;
}

// Builds the INVALID_ARGUMENT for the first out-of-range value of the index the caller sent, in
// row-major order. Only runs on the error path.
absl::Status OutOfRangeError(const NdPlan& plan) {
  const TensorView& index = plan.original_index;
  const std::string_view operand = plan.input.data() == nullptr ? "output" : "input";
  return DispatchIndexType(index.dtype(), [&]<typename Index>(TypeTag<Index>) -> absl::Status {
    const Index* data = index.data_as<Index>();
    const int64_t count = index.numel();
    for (int64_t position = 0; position < count; ++position) {
      const Shape coords = UnravelIndex(position, index.shape());
      int64_t offset = 0;
      for (int64_t d = 0; d < index.rank(); ++d) offset += coords[d] * index.strides()[d];
      const int64_t component = coords.back();
      const int64_t value = data[offset];
      const int64_t size = plan.component_sizes[component];
      if (InRange(value, size)) continue;
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: index[%s] = %d is out of range for axis %d of %s with size %d (expected %d <= "
          "index < %d)",
          plan.op, absl::StrJoin(coords, ", "), value, plan.component_axes[component], operand,
          size, -size, size));
    }
    return absl::InternalError(absl::StrFormat(
        "%s: the kernel reported an out-of-range index that a rescan did not find", plan.op));
  });
}

// Positions per task: enough that a task moves about kMinParallelElements elements.
int64_t PositionGrain(int64_t slice_size) {
  return std::max<int64_t>(1, kMinParallelElements / std::max<int64_t>(slice_size, 1));
}

// ForEachAddressParallel runs ForEachAddress over all positions, split across threads; each task
// calls `end_task()` when it is done with its positions.
template <typename Index, typename Fn, typename EndTask = void (*)()>
bool ForEachAddressParallel(
    const NdPlan& plan, const Fn& fn, EndTask end_task = [] {}) {
  std::atomic<bool> ok{true};
  ParallelFor(NumElements(plan.positions), PositionGrain(plan.slice_size),
              [&](int64_t begin, int64_t end) {
                if (!ok.load(std::memory_order_relaxed)) return;
                if (!ForEachAddress<Index>(plan, begin, end, fn)) {
                  ok.store(false, std::memory_order_relaxed);
                }
                end_task();
              });
  return ok.load();
}

// kMinStreamedSliceBytes: slices from this size on are copied with streaming stores when the
// result is large (ShouldStream); a smaller one would leave partly written lines in the
// write-combining buffers.
constexpr int64_t kMinStreamedSliceBytes = 256;

template <typename Elem, typename Index>
bool GatherSlices(const NdPlan& plan, const Elem* input, Elem* out) {
  const int64_t slice = plan.slice_size;
  if (slice == 1) {
    return ForEachAddressParallel<Index>(
        plan, [&](int64_t position, int64_t offset) { out[position] = input[offset]; });
  }
  const int64_t slice_bytes = slice * static_cast<int64_t>(sizeof(Elem));
  if (slice_bytes >= kMinStreamedSliceBytes &&
      ShouldStream(NumElements(plan.positions) * slice_bytes)) {
    return ForEachAddressParallel<Index>(
        plan,
        [&](int64_t position, int64_t offset) {
          StreamCopy(out + position * slice, input + offset, slice_bytes);
        },
        StreamFence);
  }
  return ForEachAddressParallel<Index>(plan, [&](int64_t position, int64_t offset) {
    std::copy_n(input + offset, slice, out + position * slice);
  });
}

// NdUpdates enumerates ScatterNd's updates for ReducingScatter: destinations resolved once,
// then applied bucket by bucket (see the file comment).
class NdUpdates {
 public:
  NdUpdates(const NdPlan& plan, int64_t dest_numel)
      : plan_(plan),
        positions_(NumElements(plan.positions)),
        slice_(plan.slice_size),
        dest_numel_(dest_numel) {}

  // Resolve computes every position's destination; false when an index is out of range.
  template <typename Index>
  bool Resolve() {
    destinations_ = Tensor(DataType::kInt64, {positions_});
    int64_t* destination = destinations_.data_as<int64_t>();
    if (!ForEachAddressParallel<Index>(plan_, [destination](int64_t position, int64_t offset) {
          destination[position] = offset;
        })) {
      return false;
    }
    PlanOrder();
    return true;
  }

  // ForEach calls apply(dest_offset, source_offset) for every updated element, honouring
  // ReducingScatter's ordering contract.
  template <typename Apply>
  void ForEach(const Apply& apply) const {
    const int64_t* destination = destinations_.data_as<int64_t>();
    const int64_t slice = slice_;
    const auto apply_position = [&](int64_t position) {
      const int64_t dest = destination[position];
      if (slice == 1) {
        apply(dest, position);
        return;
      }
      const int64_t source = position * slice;
      for (int64_t s = 0; s < slice; ++s) apply(dest + s, source + s);
    };
    if (bucket_begin_.empty()) {
      if (slice_ >= kMinParallelElements) {
        // Few large slices: positions in order, each slice split across threads.
        for (int64_t position = 0; position < positions_; ++position) {
          const int64_t dest = destination[position];
          const int64_t source = position * slice;
          ParallelFor(slice, kMinParallelElements, [&](int64_t begin, int64_t end) {
            for (int64_t s = begin; s < end; ++s) apply(dest + s, source + s);
          });
        }
      } else {
        for (int64_t position = 0; position < positions_; ++position) apply_position(position);
      }
      return;
    }
    const int64_t* order = order_.data_as<int64_t>();
    const int64_t buckets = static_cast<int64_t>(bucket_begin_.size()) - 1;
    ParallelForRanges(buckets, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        for (int64_t i = bucket_begin_[b]; i < bucket_begin_[b + 1]; ++i) apply_position(order[i]);
      }
    });
  }

 private:
  // PlanOrder sorts the positions by destination bucket (stable), when the work is large enough
  // to share and made of many small slices.
  void PlanOrder() {
    const int64_t work = positions_ * slice_;
    if (work < kMinParallelElements || slice_ >= kMinParallelElements || slice_ == 0) return;
    const int64_t rows = dest_numel_ / slice_;
    const int64_t threads = tbb::this_task_arena::max_concurrency();
    if (threads < 2) return;
    // Destinations are dealt to buckets in blocks of about kBlockElements, round robin: blocks
    // keep each thread's writes on its own cache lines, and dealing them out spreads destinations
    // that cluster (duplicate-heavy indices) over every bucket.
    constexpr int64_t kBlockElements = 4096;
    const int64_t rows_per_block = std::max<int64_t>(1, kBlockElements / slice_);
    const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
    // A power of two, and a shift for the block when it is one too: the bucket of every
    // position is computed twice, and divisions would dominate.
    const int64_t buckets =
        std::bit_floor(static_cast<uint64_t>(std::min<int64_t>(blocks, 4 * threads)));
    if (buckets < 2) return;
    const int64_t block_span = rows_per_block * slice_;
    const int block_shift = std::has_single_bit(static_cast<uint64_t>(block_span))
                                ? std::countr_zero(static_cast<uint64_t>(block_span))
                                : -1;
    const int64_t chunks = std::min<int64_t>(positions_, 4 * threads);
    const int64_t chunk_length = (positions_ + chunks - 1) / chunks;
    const int64_t* destination = destinations_.data_as<int64_t>();
    const auto bucket_of = [&](int64_t position) {
      const int64_t block = block_shift >= 0 ? destination[position] >> block_shift
                                             : destination[position] / block_span;
      return block & (buckets - 1);
    };

    // counts[c * buckets + b]: positions of chunk c that fall in bucket b; then, by an exclusive
    // scan in bucket-major order, where chunk c's positions of bucket b start in `order_`.
    std::vector<int64_t> counts(chunks * buckets, 0);
    const auto for_each_chunk = [&](const auto& body) {
      tbb::parallel_for(tbb::blocked_range<int64_t>(0, chunks, 1),
                        [&](const tbb::blocked_range<int64_t>& range) {
                          for (int64_t c = range.begin(); c < range.end(); ++c) {
                            body(c, c * chunk_length, std::min(positions_, (c + 1) * chunk_length));
                          }
                        });
    };
    for_each_chunk([&](int64_t c, int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) ++counts[c * buckets + bucket_of(p)];
    });
    bucket_begin_.assign(buckets + 1, 0);
    int64_t running = 0;
    for (int64_t b = 0; b < buckets; ++b) {
      bucket_begin_[b] = running;
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t count = counts[c * buckets + b];
        counts[c * buckets + b] = running;
        running += count;
      }
    }
    bucket_begin_[buckets] = running;
    order_ = Tensor(DataType::kInt64, {positions_});
    int64_t* order = order_.data_as<int64_t>();
    for_each_chunk([&](int64_t c, int64_t begin, int64_t end) {
      int64_t* cursor = &counts[c * buckets];
      for (int64_t p = begin; p < end; ++p) order[cursor[bucket_of(p)]++] = p;
    });
  }

  const NdPlan& plan_;
  int64_t positions_;
  int64_t slice_;
  int64_t dest_numel_;
  Tensor destinations_;
  // When set: positions grouped by bucket, bucket b being order_[bucket_begin_[b], ..[b + 1]).
  Tensor order_;
  std::vector<int64_t> bucket_begin_;
};

// Contiguous returns `view` itself when it is contiguous, else a contiguous copy kept in `storage`.
TensorView Contiguous(const TensorView& view, Tensor& storage) {
  if (view.is_contiguous()) return view;
  storage = Tensor::FromView(view);
  return storage.view();
}

// ScatterSlices applies ScatterNd's resolved updates with the reduction Op over elements of type
// T (for ASSIGN, an unsigned type of the element's size).
template <typename T, typename Op>
absl::Status ScatterSlices(const NdPlan& plan, const NdUpdates& updates, const TensorView& source,
                           const MutableTensorView& result) {
  const T* source_data = source.data_as<T>();
  ReducingScatter<T, Op> scatter(result.data_as<T>(), result.shape(), plan.reduce,
                                 plan.include_self,
                                 /*updates=*/NumElements(plan.positions) * plan.slice_size);
  scatter.Run([&](const auto& apply) {
    updates.ForEach([&](int64_t dest, int64_t from) { apply(dest, source_data[from]); });
    return true;
  });
  return absl::OkStatus();
}

// NothingAddressed: the positions address no coordinates (index.shape[-1] = 0) and empty slices,
// so there is nothing to check, read or write, however many positions the index's shape names:
// an index without elements carries no bytes, so the request's size does not bound its shape
// (a 50-byte request once named 2^50 of them).
bool NothingAddressed(const NdPlan& plan) {
  return plan.slice_size == 0 && plan.index.numel() == 0;
}

}  // namespace

absl::Status GatherNd(const NdPlan& plan, const MutableTensorView& result) {
  if (plan.single_axis_gather) return Gather(*plan.single_axis_gather, result);
  if (NumElements(plan.positions) == 0 || NothingAddressed(plan)) return absl::OkStatus();
  Tensor input_storage;
  const TensorView input = Contiguous(plan.input, input_storage);
  const bool ok = DispatchItemSize(ItemSize(plan.result_dtype), [&]<typename Elem>(TypeTag<Elem>) {
    return DispatchIndexType(plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) {
      return GatherSlices<Elem, Index>(plan, static_cast<const Elem*>(input.data()),
                                       static_cast<Elem*>(result.data()));
    });
  });
  return ok ? absl::OkStatus() : OutOfRangeError(plan);
}

absl::Status ScatterNd(const NdPlan& plan, const MutableTensorView& result) {
  if (plan.single_axis_scatter) return Scatter(*plan.single_axis_scatter, result);
  if (plan.input.data() == nullptr) {
    // Zero bytes are zero in every dtype.
    ParallelFor(result.numel() * result.itemsize(), kParallelGrainBytes,
                [&](int64_t begin, int64_t end) {
                  std::memset(static_cast<char*>(result.data()) + begin, 0, end - begin);
                });
  } else {
    CopyElements(plan.input, result);
  }
  if (NumElements(plan.positions) == 0 || NothingAddressed(plan)) return absl::OkStatus();

  NdUpdates updates(plan, result.numel());
  const bool resolved = DispatchIndexType(
      plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) { return updates.Resolve<Index>(); });
  if (!resolved) return OutOfRangeError(plan);
  if (plan.slice_size == 0) return absl::OkStatus();

  Tensor source_storage;
  const TensorView source = Contiguous(plan.source, source_storage);
  if (plan.reduce == Reduction::kAssign) {
    // ASSIGN moves elements without looking at them: one kernel per element size.
    return DispatchItemSize(ItemSize(plan.result_dtype), [&]<typename Elem>(TypeTag<Elem>) {
      return ScatterSlices<Elem, AssignOp>(plan, updates, source, result);
    });
  }
  return DispatchDataType(plan.result_dtype, [&]<typename T>(TypeTag<T>) {
    return DispatchReduction(plan.reduce, [&]<typename Op>(Op) -> absl::Status {
      constexpr bool kOrdered = std::is_same_v<Op, MaxOp> || std::is_same_v<Op, MinOp>;
      if constexpr (std::is_same_v<Op, AssignOp>) {
        return absl::InternalError("scatter_nd: ASSIGN reached a dtype's kernel, not its size's");
      } else if constexpr (kOrdered && internal::IsComplexType<T>::value) {
        return absl::InternalError("scatter_nd: AMAX/AMIN on complex passed planning");
      } else {
        return ScatterSlices<T, Op>(plan, updates, source, result);
      }
    });
  });
}

}  // namespace tensorops::cpu
