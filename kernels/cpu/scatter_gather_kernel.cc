// CPU kernels of Gather and Scatter. Both walk the index tensor with AxisWalk and differ only in
// the run they apply; dtype and reduction are dispatched once per call.
//
// Scatter's order of work:
//   1. result = input (a parallel copy);
//   2. when accumulating float16/bfloat16 (SUM, PROD, MEAN), a float32 shadow of the result;
//   3. when include_self is false, every destination that receives a source is reset to the
//      reduction's identity (the same walk, so PyTorch's semantics fall out exactly);
//   4. the reducing walk (MEAN also counts arrivals per destination);
//   5. MEAN divides by the counts (floor division for integers); shadows round once into the
//   result.
// An out-of-range index stops the walk; the error names the first bad index in row-major order,
// found by a scan that only runs on that error path.
#include <complex>
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/axis_walk.h"
#include "kernels/cpu/parallel.h"
#include "kernels/dispatch.h"
#include "kernels/gather.h"
#include "kernels/reduction.h"
#include "kernels/scatter.h"

namespace tensorops::cpu {
namespace {

using Offsets = AxisWalk::Offsets;

// Builds the INVALID_ARGUMENT for the first index of `index` (row-major) outside [-size, size).
absl::Status OutOfRangeError(std::string_view op, const TensorView& index, int64_t axis,
                             int64_t axis_size, std::string_view operand) {
  return DispatchIndexType(index.dtype(), [&]<typename Index>(TypeTag<Index>) -> absl::Status {
    const Index* data = index.data_as<Index>();
    const int64_t count = index.numel();
    const bool contiguous = index.is_contiguous();
    for (int64_t position = 0; position < count; ++position) {
      int64_t offset = position;
      Shape coords;
      if (!contiguous) {
        coords = UnravelIndex(position, index.shape());
        offset = 0;
        for (int64_t d = 0; d < index.rank(); ++d) offset += coords[d] * index.strides()[d];
      }
      const int64_t value = data[offset];
      if (InRange(value, axis_size)) continue;
      if (contiguous) coords = UnravelIndex(position, index.shape());
      const std::string where =
          index.rank() == 0 ? "index" : absl::StrCat("index[", absl::StrJoin(coords, ", "), "]");
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s = %d is out of range for axis %d of %s with size %d (expected %d <= index < %d)",
          op, where, value, axis, operand, axis_size, -axis_size, axis_size));
    }
    return absl::InternalError(absl::StrFormat(
        "%s: the kernel reported an out-of-range index that a rescan did not find", op));
  });
}

// Element storage of one size: Gather moves elements without looking at them.
template <int kBytes>
struct alignas(kBytes < 16 ? kBytes : 8) Bytes {
  unsigned char bytes[kBytes];
};

template <typename Fn>
decltype(auto) DispatchItemSize(int64_t itemsize, Fn&& fn) {
  switch (itemsize) {
    case 1:
      return fn(TypeTag<uint8_t>{});
    case 2:
      return fn(TypeTag<uint16_t>{});
    case 4:
      return fn(TypeTag<uint32_t>{});
    case 8:
      return fn(TypeTag<uint64_t>{});
    default:
      return fn(TypeTag<Bytes<16>>{});
  }
}

template <typename Elem, typename Index>
bool GatherWalk(const GatherPlan& plan, const MutableTensorView& result) {
  const Index* index = plan.index.data_as<Index>();
  const Elem* input = static_cast<const Elem*>(plan.input.data());
  Elem* out = result.data_as<Elem>();
  const int64_t axis_size = plan.input_axis_size;
  const int64_t axis_stride = plan.input_axis_stride;

  const AxisWalk walk(
      plan.index.shape(), plan.axis,
      {plan.index.strides(), ContiguousStrides(plan.index.shape()), plan.input.strides()});
  const auto run = [&](const Offsets& at, int64_t count, const Offsets& step) {
    const Index* index_run = index + at[AxisWalk::kIndex];
    Elem* out_run = out + at[AxisWalk::kDirect];
    const Elem* input_run = input + at[AxisWalk::kIndexed];
    const int64_t index_step = step[AxisWalk::kIndex];
    const int64_t out_step = step[AxisWalk::kDirect];
    const int64_t input_step = step[AxisWalk::kIndexed];
    for (int64_t i = 0; i < count; ++i) {
      const int64_t value = index_run[i * index_step];
      if (!InRange(value, axis_size)) return false;
      out_run[i * out_step] = input_run[i * input_step + WrapIndex(value, axis_size) * axis_stride];
    }
    return true;
  };
  return walk.ForEachRun(run, /*ordered=*/false);
}

// Accumulator of a reduction over elements of type T: float32 for the 16-bit floats under
// SUM/PROD/MEAN (rounded once at the end), T itself otherwise.
template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;
template <typename Op>
constexpr bool kIsArithmetic = std::is_same_v<Op, SumOp> || std::is_same_v<Op, ProdOp>;
template <typename T, typename Op>
using Accumulator = std::conditional_t<kIsHalf<T> && kIsArithmetic<Op>, float, T>;

template <typename T, typename Acc>
Acc ToAccumulator(T value) {
  if constexpr (std::is_same_v<T, Acc>) {
    return value;
  } else {
    return static_cast<Acc>(value);
  }
}

template <typename T, typename Index, typename Op>
class ScatterKernel {
 public:
  using Acc = Accumulator<T, Op>;

  ScatterKernel(const ScatterPlan& plan, const MutableTensorView& result)
      : plan_(plan),
        result_(result.data_as<T>()),
        numel_(result.numel()),
        index_(plan.index.data_as<Index>()),
        source_(plan.source.data_as<T>()),
        axis_size_(plan.input.rank() == 0 ? 1 : plan.input.size(plan.axis)),
        walk_(plan.index.shape(), plan.axis, DestinationWalkStrides(plan, &axis_stride_)) {}

  absl::Status Run() {
    Acc* dest = reinterpret_cast<Acc*>(result_);
    Tensor shadow;
    if constexpr (!std::is_same_v<Acc, T>) {
      shadow = Tensor(DataType::kFloat32, {numel_});
      dest = shadow.data_as<Acc>();
      ParallelFor(numel_, kMinParallelElements, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) dest[i] = static_cast<Acc>(result_[i]);
      });
    }
    if (!plan_.include_self && plan_.reduce != Reduction::kAssign) {
      if (!Walk<false>(dest, nullptr, [](Acc& d, T) { d = Identity<Op, Acc>(); })) {
        return IndexError();
      }
    }
    if constexpr (std::is_same_v<Op, SumOp>) {
      if (plan_.reduce == Reduction::kMean) return RunMean(dest);
    }
    if (!Walk<false>(dest, nullptr, Reduce())) return IndexError();
    if constexpr (!std::is_same_v<Acc, T>) {
      ParallelFor(numel_, kMinParallelElements, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) result_[i] = T(dest[i]);
      });
    }
    return absl::OkStatus();
  }

 private:
  // MEAN: sums and arrival counts in one walk, then one division pass.
  absl::Status RunMean(Acc* dest) {
    Tensor counts = Tensor(DataType::kInt64, {numel_});
    int64_t* count = counts.data_as<int64_t>();
    const int64_t initial = plan_.include_self ? 1 : 0;
    ParallelFor(numel_, kMinParallelElements, [&](int64_t begin, int64_t end) {
      std::fill(count + begin, count + end, initial);
    });
    if (!Walk<true>(dest, count, Reduce())) return IndexError();
    DivideByCounts(dest, count);
    return absl::OkStatus();
  }

  // The walk's strides: index and source as planned; the destination (contiguous, the input's
  // shape) with its axis stride moved out into `axis_stride`.
  static std::array<Shape, AxisWalk::kOperands> DestinationWalkStrides(const ScatterPlan& plan,
                                                                       int64_t* axis_stride) {
    Shape dest_strides = plan.input.rank() == 0 ? Shape{1} : ContiguousStrides(plan.input.shape());
    *axis_stride = dest_strides[plan.axis];
    dest_strides[plan.axis] = 0;
    return {plan.index.strides(), plan.source.strides(), dest_strides};
  }

  static auto Reduce() {
    return [](Acc& dest, T value) { Op{}(dest, ToAccumulator<T, Acc>(value)); };
  }

  template <bool kCount, typename Combine>
  bool Walk(Acc* dest, int64_t* count, const Combine& combine) const {
    const int64_t axis_size = axis_size_;
    const int64_t axis_stride = axis_stride_;
    const auto run = [&](const Offsets& at, int64_t length, const Offsets& step) {
      const Index* index_run = index_ + at[AxisWalk::kIndex];
      const T* source_run = source_ + at[AxisWalk::kDirect];
      const int64_t dest_base = at[AxisWalk::kIndexed];
      const int64_t index_step = step[AxisWalk::kIndex];
      const int64_t source_step = step[AxisWalk::kDirect];
      const int64_t dest_step = step[AxisWalk::kIndexed];
      for (int64_t i = 0; i < length; ++i) {
        const int64_t value = index_run[i * index_step];
        if (!InRange(value, axis_size)) return false;
        const int64_t offset =
            dest_base + i * dest_step + WrapIndex(value, axis_size) * axis_stride;
        combine(dest[offset], source_run[i * source_step]);
        if constexpr (kCount) ++count[offset];
      }
      return true;
    };
    return walk_.ForEachRun(run);
  }

  void DivideByCounts(Acc* dest, const int64_t* count) const {
    ParallelFor(numel_, kMinParallelElements, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        // A destination nobody wrote (count 0 without include_self) keeps its value.
        const int64_t n = std::max<int64_t>(count[i], 1);
        if constexpr (std::is_integral_v<Acc>) {
          result_[i] = FloorDivide(dest[i], n);
        } else if constexpr (std::is_same_v<Acc, T>) {
          using Real = decltype(std::abs(dest[i]));
          result_[i] = dest[i] / static_cast<Real>(n);
        } else {
          result_[i] = T(dest[i] / static_cast<float>(n));
        }
      }
    });
  }

  absl::Status IndexError() const {
    return OutOfRangeError(plan_.op, plan_.original_index, plan_.axis, axis_size_, "input");
  }

  const ScatterPlan& plan_;
  T* result_;
  int64_t numel_;
  const Index* index_;
  const T* source_;
  int64_t axis_size_;
  int64_t axis_stride_ = 0;
  AxisWalk walk_;
};

}  // namespace

absl::Status Gather(const GatherPlan& plan, const MutableTensorView& result) {
  if (NumElements(result.shape()) == 0) return absl::OkStatus();
  const bool ok = DispatchItemSize(ItemSize(plan.result_dtype), [&]<typename Elem>(TypeTag<Elem>) {
    return DispatchIndexType(plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) {
      return GatherWalk<Elem, Index>(plan, result);
    });
  });
  if (ok) return absl::OkStatus();
  return OutOfRangeError(plan.op, plan.original_index, plan.axis, plan.input_axis_size, "input");
}

absl::Status Scatter(const ScatterPlan& plan, const MutableTensorView& result) {
  CopyElements(plan.input, result);
  if (plan.original_index.numel() == 0) return absl::OkStatus();
  return DispatchDataType(plan.result_dtype, [&]<typename T>(TypeTag<T>) {
    return DispatchIndexType(plan.index.dtype(), [&]<typename Index>(TypeTag<Index>) {
      return DispatchReduction(plan.reduce, [&]<typename Op>(Op) -> absl::Status {
        constexpr bool kOrdered = std::is_same_v<Op, MaxOp> || std::is_same_v<Op, MinOp>;
        if constexpr (kOrdered && internal::IsComplexType<T>::value) {
          return absl::InternalError("scatter: AMAX/AMIN on complex passed planning");
        } else {
          return ScatterKernel<T, Index, Op>(plan, result).Run();
        }
      });
    });
  });
}

}  // namespace tensorops::cpu
