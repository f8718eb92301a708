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
//
// A view also says where its elements are (MemorySpace): host memory, or device memory (a stored
// tensor in GPU memory, an input a device kernel reads) that the CPU must not touch. Every host
// read or write of a view's elements (data_as, CopyElements, Tensor::FromView) checks it and
// throws DeviceMemoryOnHost for device memory: the call that did it fails with an error instead
// of the process crashing. Views derived from a view (Relaid) keep its memory space; device
// kernels take their typed pointers with device_data_as, which does not check.
#ifndef TENSOROPS_KERNELS_TENSOR_H_
#define TENSOROPS_KERNELS_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/dtype.h"
#include "kernels/shape.h"

namespace tensorops {

// MemorySpace is where a view's elements are.
enum class MemorySpace {
  kHost,    // memory the CPU reads and writes
  kDevice,  // GPU memory: only device kernels and explicit copies touch it
};

// DeviceMemoryOnHost is thrown by a host read or write of a view of device memory: a bug in the
// caller, which should have worked from what is on the host or copied the bytes out first. The
// server turns it into an INTERNAL error of the one call (GuardExceptions).
class DeviceMemoryOnHost : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace internal {

// CheckHostAccess throws DeviceMemoryOnHost when `space` is device memory; `what` names the
// host path that was about to touch it.
void ThrowDeviceMemoryOnHost(const char* what);
inline void CheckHostAccess(MemorySpace space, const char* what) {
  if (space == MemorySpace::kDevice) [[unlikely]] {
    ThrowDeviceMemoryOnHost(what);
  }
}

// ViewBase holds what both view kinds share; `Derived` is the view class, `Pointer` is
// `const void*` or `void*`.
template <typename Derived, typename Pointer>
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
  // data is the address of the first element, wherever it is; reading through it on the host
  // is for host memory only (data_as checks that).
  Pointer data() const { return data_; }
  MemorySpace space() const { return space_; }
  bool on_device() const { return space_ == MemorySpace::kDevice; }

  // Relaid is a view of the same memory (same dtype, address and memory space) with another
  // shape and strides; the caller keeps it inside the memory. With `dtype`, the elements are
  // read as that dtype (of the same size).
  Derived Relaid(ShapeSpan shape, ShapeSpan strides) const {
    return Relaid(dtype_, shape, strides);
  }
  Derived Relaid(DataType dtype, ShapeSpan shape, ShapeSpan strides) const {
    Derived view(dtype, shape, strides, data_);
    view.space_ = space_;
    return view;
  }
  // InSpace is this view marked as being in `space`.
  Derived InSpace(MemorySpace space) const {
    Derived view(dtype_, shape_, strides_, data_);
    view.space_ = space;
    return view;
  }

  // device_data_as is the data pointer typed as T for a device kernel's launch: unchecked, it
  // is never read on the host.
  template <typename T>
  auto device_data_as() const {
    if constexpr (std::is_const_v<std::remove_pointer_t<Pointer>>) {
      return static_cast<const T*>(data_);
    } else {
      return static_cast<T*>(data_);
    }
  }

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
  MemorySpace space_ = MemorySpace::kHost;
};

}  // namespace internal

// TensorView is a read-only, possibly strided view of elements owned elsewhere.
class TensorView : public internal::ViewBase<TensorView, const void*> {
 public:
  using ViewBase::ViewBase;

  // data_as returns the data pointer typed as T, for the host to read; T must be the storage
  // type of dtype(). Throws DeviceMemoryOnHost for a view of device memory.
  template <typename T>
  const T* data_as() const {
    internal::CheckHostAccess(space_, "TensorView::data_as");
    return static_cast<const T*>(data_);
  }
};

// MutableTensorView is a writable view; it converts to TensorView.
class MutableTensorView : public internal::ViewBase<MutableTensorView, void*> {
 public:
  using ViewBase::ViewBase;

  // As TensorView::data_as, for the host to write.
  template <typename T>
  T* data_as() const {
    internal::CheckHostAccess(space_, "MutableTensorView::data_as");
    return static_cast<T*>(data_);
  }

  operator TensorView() const {
    return TensorView(dtype_, shape_, strides_, data_).InSpace(space_);
  }
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
  // `view` must be in host memory (DeviceMemoryOnHost otherwise).
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
// the result. Any other overlap is undefined. Both must be in host memory (DeviceMemoryOnHost
// otherwise).
void CopyElements(const TensorView& source, const MutableTensorView& dest);

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_TENSOR_H_
