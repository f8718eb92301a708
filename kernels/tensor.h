// Tensors on the host: `TensorView` and `MutableTensorView` describe memory owned by someone else
// (a request's bytes, a response buffer); `Tensor` owns 64-byte-aligned memory.
//
//   Tensor result(DataType::kFloat32, {2, 3});       // uninitialized
//   MutableTensorView out = result.mutable_view();
//   TensorView in(DataType::kInt64, {4}, bytes);     // contiguous view of `bytes`
//
// Views carry strides in elements, so broadcasting is a view with stride 0; views never check
// that their strides stay inside the memory they point to: whoever builds one from untrusted
// input validates first (the server's codec does).
#ifndef TENSOROPS_KERNELS_TENSOR_H_
#define TENSOROPS_KERNELS_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/dtype.h"
#include "kernels/shape.h"

namespace tensorops {

namespace internal {

// ViewBase holds what both view kinds share; `Pointer` is `const void*` or `void*`.
template <typename Pointer>
class ViewBase {
 public:
  ViewBase() = default;
  // A row-major contiguous view.
  ViewBase(DataType dtype, ShapeSpan shape, Pointer data)
      : dtype_(dtype),
        shape_(shape.begin(), shape.end()),
        strides_(ContiguousStrides(shape)),
        data_(data) {}
  // A view with explicit strides, in elements.
  ViewBase(DataType dtype, ShapeSpan shape, ShapeSpan strides, Pointer data)
      : dtype_(dtype),
        shape_(shape.begin(), shape.end()),
        strides_(strides.begin(), strides.end()),
        data_(data) {}

  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t dim) const { return shape_[dim]; }
  int64_t numel() const { return NumElements(shape_); }
  int64_t itemsize() const { return ItemSize(dtype_); }
  Pointer data() const { return data_; }

  // is_contiguous is true when the strides are the row-major ones (sizes 0 and 1 excepted).
  bool is_contiguous() const {
    int64_t expected = 1;
    for (int64_t d = rank() - 1; d >= 0; --d) {
      if (shape_[d] == 0) return true;
      if (shape_[d] != 1 && strides_[d] != expected) return false;
      expected *= shape_[d];
    }
    return true;
  }

 protected:
  DataType dtype_ = DataType::kFloat32;
  Shape shape_;
  Shape strides_;
  Pointer data_ = nullptr;
};

}  // namespace internal

// TensorView is a read-only, possibly strided view of elements owned elsewhere.
class TensorView : public internal::ViewBase<const void*> {
 public:
  using ViewBase::ViewBase;

  // data_as returns the data pointer typed as T; T must be the storage type of dtype().
  template <typename T>
  const T* data_as() const {
    return static_cast<const T*>(data_);
  }
};

// MutableTensorView is a writable view; it converts to TensorView.
class MutableTensorView : public internal::ViewBase<void*> {
 public:
  using ViewBase::ViewBase;

  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }

  operator TensorView() const { return TensorView(dtype_, shape_, strides_, data_); }
};

// Tensor owns a contiguous, 64-byte-aligned buffer of elements. Move-only; Clone() copies.
class Tensor {
 public:
  Tensor() = default;
  // Allocates an uninitialized tensor. `shape` must hold sizes >= 0 whose byte size fits int64.
  Tensor(DataType dtype, ShapeSpan shape);

  // Zeros returns a tensor whose bytes are all zero (0, false, +0.0).
  static Tensor Zeros(DataType dtype, ShapeSpan shape);
  // FromView copies the elements of `view`, in row-major order, into a new contiguous tensor.
  static Tensor FromView(const TensorView& view);

  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  Tensor Clone() const { return FromView(view()); }

  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return NumElements(shape_); }
  int64_t nbytes() const { return numel() * ItemSize(dtype_); }

  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }
  template <typename T>
  T* data_as() {
    return static_cast<T*>(data());
  }
  template <typename T>
  const T* data_as() const {
    return static_cast<const T*>(data());
  }

  TensorView view() const { return TensorView(dtype_, shape_, data()); }
  MutableTensorView mutable_view() { return MutableTensorView(dtype_, shape_, data()); }

 private:
  struct AlignedDelete {
    void operator()(std::byte* bytes) const;
  };

  DataType dtype_ = DataType::kFloat32;
  Shape shape_;
  std::unique_ptr<std::byte[], AlignedDelete> data_;
};

// CopyElements copies `source` into `dest` element by element in row-major order; both must have
// the same dtype and shape (either may be strided, e.g. a broadcast source). A `dest` that is
// `source` itself (same memory and strides) is left as it is: the kernels that start by copying
// their input into the result then run in place when the caller hands them the input's memory as
// the result. Any other overlap is undefined.
void CopyElements(const TensorView& source, const MutableTensorView& dest);

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_TENSOR_H_
