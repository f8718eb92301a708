#include "kernels/tensor.h"

#include <cstring>
#include <new>

#include "kernels/cpu/parallel.h"

namespace tensorops {

namespace {
constexpr std::align_val_t kAlignment{64};
}  // namespace

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
  Tensor tensor(view.dtype(), view.shape());
  CopyElements(view, tensor.mutable_view());
  return tensor;
}

void CopyElements(const TensorView& source, const MutableTensorView& dest) {
  const int64_t itemsize = source.itemsize();
  if (source.is_contiguous() && dest.is_contiguous()) {
    cpu::ParallelCopy(dest.data(), source.data(), source.numel() * itemsize);
    return;
  }
  // Strided (e.g. broadcast) copies walk the coordinates with a carry counter. Elements are moved
  // as raw bytes of the dtype's size; rare enough (never on the server's path) to stay simple.
  const int64_t count = source.numel();
  const int64_t rank = source.rank();
  Shape coords(rank, 0);
  int64_t from = 0;
  int64_t to = 0;
  const auto* from_bytes = static_cast<const std::byte*>(source.data());
  auto* to_bytes = static_cast<std::byte*>(dest.data());
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(to_bytes + to * itemsize, from_bytes + from * itemsize,
                static_cast<size_t>(itemsize));
    for (int64_t d = rank - 1; d >= 0; --d) {
      from += source.strides()[d];
      to += dest.strides()[d];
      if (++coords[d] < source.shape()[d]) break;
      from -= coords[d] * source.strides()[d];
      to -= coords[d] * dest.strides()[d];
      coords[d] = 0;
    }
  }
}

}  // namespace tensorops
