#include "kernels/tensor.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "kernels/cpu/parallel.h"

namespace tensorops {

namespace {
constexpr std::align_val_t kAlignment{64};
}  // namespace

namespace internal {

void ThrowDeviceMemoryOnHost(const char* what) {
  throw DeviceMemoryOnHost(std::string(what) +
                           ": the tensor is in device memory, which the host must not read or "
                           "write (copy it to the host first)");
}

}  // namespace internal

void Tensor::AlignedDelete::operator()(std::byte* bytes) const {
  ::operator delete[](bytes, kAlignment);
}

Tensor::Tensor(DataType dtype, ShapeSpan shape)
    : dtype_(dtype), shape_(shape.begin(), shape.end()) {
  // Allocate at least one byte so that data() is never null, even for zero elements.
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(nbytes(), 1));
  data_.reset(static_cast<std::byte*>(::operator new[](bytes, kAlignment)));
}

Tensor Tensor::Zeros(DataType dtype, ShapeSpan shape) {
  Tensor tensor(dtype, shape);
  std::memset(tensor.data(), 0, static_cast<size_t>(tensor.nbytes()));
  return tensor;
}

Tensor Tensor::FromView(const TensorView& view) {
  internal::CheckHostAccess(view.space(), "Tensor::FromView");
  Tensor tensor(view.dtype(), view.shape());
  CopyElements(view, tensor.mutable_view());
  return tensor;
}

namespace {

// Storage of a 16-byte element (complex128), which needs only its components' 8-byte alignment.
// Smaller elements move as unsigned integers of their size.
struct ElementBytes16 {
  uint64_t words[2];
};

// A strided copy after coalescing: `shape` has at least one dimension, none of size 1 unless it is
// the only one, and no two adjacent dimensions that one stride could walk for both tensors.
struct CopyLayout {
  Shape shape;
  Shape source_strides;
  Shape dest_strides;
};

CopyLayout Coalesce(const TensorView& source, const MutableTensorView& dest) {
  CopyLayout layout;
  for (int64_t d = 0; d < source.rank(); ++d) {
    const int64_t size = source.shape()[d];
    if (size == 1) continue;
    const int64_t source_stride = source.strides()[d];
    const int64_t dest_stride = dest.strides()[d];
    if (!layout.shape.empty() && layout.source_strides.back() == source_stride * size &&
        layout.dest_strides.back() == dest_stride * size) {
      // The previous dimension steps exactly over this one in both tensors: merge them.
      layout.shape.back() *= size;
      layout.source_strides.back() = source_stride;
      layout.dest_strides.back() = dest_stride;
      continue;
    }
    layout.shape.push_back(size);
    layout.source_strides.push_back(source_stride);
    layout.dest_strides.push_back(dest_stride);
  }
  if (layout.shape.empty()) {  // A single element.
    layout.shape.push_back(1);
    layout.source_strides.push_back(0);
    layout.dest_strides.push_back(0);
  }
  return layout;
}

// StridedCopy walks the outer dimensions of `layout` and copies one run along the last dimension
// at a time. Work is split across cores in pieces of whole runs, or of parts of a run when runs
// are long (a broadcast fill of one long row, a big window with few rows).
template <typename Elem>
void StridedCopy(const CopyLayout& layout, const Elem* source, Elem* dest) {
  const int64_t rank = static_cast<int64_t>(layout.shape.size());
  const int64_t run_length = layout.shape.back();
  const int64_t source_step = layout.source_strides.back();
  const int64_t dest_step = layout.dest_strides.back();
  const int64_t outer_count = NumElements(ShapeSpan(layout.shape).subspan(0, rank - 1));
  const int64_t pieces_per_run =
      (run_length + cpu::kMinParallelElements - 1) / cpu::kMinParallelElements;
  const int64_t piece_length = (run_length + pieces_per_run - 1) / pieces_per_run;
  const int64_t grain = std::max<int64_t>(1, cpu::kMinParallelElements / piece_length);
  cpu::ParallelFor(outer_count * pieces_per_run, grain, [&](int64_t begin, int64_t end) {
    // Coordinates of the outer position of piece `begin`, then a carry counter from there.
    Shape coords(rank - 1, 0);
    int64_t from = 0;
    int64_t to = 0;
    int64_t rest = begin / pieces_per_run;
    for (int64_t d = rank - 2; d >= 0; --d) {
      coords[d] = rest % layout.shape[d];
      rest /= layout.shape[d];
      from += coords[d] * layout.source_strides[d];
      to += coords[d] * layout.dest_strides[d];
    }
    for (int64_t piece = begin; piece < end; ++piece) {
      const int64_t piece_in_run = piece % pieces_per_run;
      const int64_t run_begin = std::min(piece_in_run * piece_length, run_length);
      const int64_t count = std::min(piece_length, run_length - run_begin);
      const Elem* from_run = source + from + run_begin * source_step;
      Elem* to_run = dest + to + run_begin * dest_step;
      if (source_step == 1 && dest_step == 1) {
        std::memcpy(to_run, from_run, static_cast<size_t>(count) * sizeof(Elem));
      } else if (source_step == 0) {
        const Elem value = *from_run;
        for (int64_t i = 0; i < count; ++i) to_run[i * dest_step] = value;
      } else {
        for (int64_t i = 0; i < count; ++i) to_run[i * dest_step] = from_run[i * source_step];
      }
      if (piece_in_run + 1 < pieces_per_run) continue;
      for (int64_t d = rank - 2; d >= 0; --d) {
        from += layout.source_strides[d];
        to += layout.dest_strides[d];
        if (++coords[d] < layout.shape[d]) break;
        from -= coords[d] * layout.source_strides[d];
        to -= coords[d] * layout.dest_strides[d];
        coords[d] = 0;
      }
    }
  });
}

}  // namespace

void CopyElements(const TensorView& source, const MutableTensorView& dest) {
  internal::CheckHostAccess(source.space(), "CopyElements (source)");
  internal::CheckHostAccess(dest.space(), "CopyElements (destination)");
  const int64_t itemsize = source.itemsize();
  if (source.numel() == 0) return;
  if (source.data() == dest.data() && source.strides() == dest.strides()) return;
  if (source.is_contiguous() && dest.is_contiguous()) {
    cpu::ParallelCopy(dest.data(), source.data(), source.numel() * itemsize);
    return;
  }
  // Strided copies (broadcast sources, windows of a result) move elements as unsigned words of
  // the dtype's size, dispatched once per call.
  const CopyLayout layout = Coalesce(source, dest);
  switch (itemsize) {
    case 1:
      return StridedCopy(layout, static_cast<const uint8_t*>(source.data()),
                         static_cast<uint8_t*>(dest.data()));
    case 2:
      return StridedCopy(layout, static_cast<const uint16_t*>(source.data()),
                         static_cast<uint16_t*>(dest.data()));
    case 4:
      return StridedCopy(layout, static_cast<const uint32_t*>(source.data()),
                         static_cast<uint32_t*>(dest.data()));
    case 8:
      return StridedCopy(layout, static_cast<const uint64_t*>(source.data()),
                         static_cast<uint64_t*>(dest.data()));
    default:
      return StridedCopy(layout, static_cast<const ElementBytes16*>(source.data()),
                         static_cast<ElementBytes16*>(dest.data()));
  }
}

}  // namespace tensorops
