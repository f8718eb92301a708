// The parts of every op's Backward (kernels/backward.h), built from the forward kernels.
#include "kernels/backward.h"

#include <complex>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "kernels/dispatch.h"
#include "kernels/dtype.h"
#include "kernels/gather.h"
#include "kernels/reduction.h"
#include "kernels/scalar.h"
#include "kernels/scatter.h"
#include "kernels/shape.h"
#include "kernels/status_macros.h"

namespace tensorops {

const Tensor* Gradients::Find(std::string_view argument) const {
  for (const auto& [name, gradient] : by_argument) {
    if (name == argument) return &gradient;
  }
  return nullptr;
}

namespace backward_internal {
namespace {

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

template <typename T>
Tensor Full(ShapeSpan shape, T value) {
  Tensor tensor(DataTypeOf<T>, shape);
  T* data = tensor.data_as<T>();
  for (int64_t i = 0; i < tensor.numel(); ++i) data[i] = value;
  return tensor;
}

template <typename T, typename Fn>
Tensor Map(const Tensor& a, Fn fn) {
  Tensor out(a.dtype(), a.shape());
  const T* a_data = a.data_as<T>();
  T* out_data = out.data_as<T>();
  for (int64_t i = 0; i < out.numel(); ++i) out_data[i] = fn(a_data[i]);
  return out;
}

template <typename T, typename Fn>
Tensor Zip(const Tensor& a, const Tensor& b, Fn fn) {
  Tensor out(a.dtype(), a.shape());
  const T* a_data = a.data_as<T>();
  const T* b_data = b.data_as<T>();
  T* out_data = out.data_as<T>();
  for (int64_t i = 0; i < out.numel(); ++i) out_data[i] = fn(a_data[i], b_data[i]);
  return out;
}

template <typename T, typename Fn>
Tensor Zip3(const Tensor& a, const Tensor& b, const Tensor& c, Fn fn) {
  Tensor out(a.dtype(), a.shape());
  const T* a_data = a.data_as<T>();
  const T* b_data = b.data_as<T>();
  const T* c_data = c.data_as<T>();
  T* out_data = out.data_as<T>();
  for (int64_t i = 0; i < out.numel(); ++i) out_data[i] = fn(a_data[i], b_data[i], c_data[i]);
  return out;
}

template <typename T>
T Conj(T value) {
  if constexpr (internal::IsComplexType<T>::value) {
    return std::conj(value);
  } else {
    return value;
  }
}

// ScatterFamilyBackward computes both gradients in the compute type T with the formulas of
// PyTorch's scatter_reduce_backward (as Paddle's put_along_axis design adopts them). `source_scale`
// (SUM only) is index_add's alpha: the source gradient is scaled by its conjugate.
template <typename T>
absl::StatusOr<FamilyGradients> ScatterFamilyBackward(const ScatterFamily& family,
                                                      const Tensor& input, const Tensor& source,
                                                      const Tensor& grad, Reduction reduce,
                                                      bool include_self,
                                                      std::optional<T> source_scale) {
  const T zero(0);
  const T one(1);
  const Shape& block_shape = source.shape();
  FamilyGradients out;
  if (source.numel() == 0) {
    // Nothing is written: the result is the input.
    out.input = grad.Clone();
    out.source = Full<T>(block_shape, zero);
    return out;
  }
  // Zeroes the positions that receive at least one source element.
  auto zero_written = [&](const Tensor& tensor) -> absl::StatusOr<Tensor> {
    return family.Reduce(tensor.view(), Full<T>(block_shape, zero).view(), Reduction::kAssign,
                         /*include_self=*/true);
  };

  switch (reduce) {
    case Reduction::kAssign:
    case Reduction::kSum: {
      // PyTorch's `scatter` and `index_copy` backward gather the gradient for every source
      // element, duplicates included (grad_src = grad.gather(dim, index)), although only the last
      // writer reaches the result; we follow PyTorch, as docs/semantics.md asks for its autograd's
      // values.
      if (reduce == Reduction::kAssign || !include_self) {
        TENSOROPS_ASSIGN_OR_RETURN(out.input, zero_written(grad));
      } else {
        out.input = grad.Clone();
      }
      TENSOROPS_ASSIGN_OR_RETURN(out.source, family.Select(grad.view()));
      if (source_scale.has_value()) {
        const T scale = Conj(*source_scale);
        out.source = Map<T>(out.source, [scale](T g) { return g * scale; });
      }
      return out;
    }
    case Reduction::kMean: {
      // count = (1 if include_self) + sources per destination; 1 where nothing counts.
      TENSOROPS_ASSIGN_OR_RETURN(
          Tensor count,
          family.Reduce(Full<T>(input.shape(), include_self ? one : zero).view(),
                        Full<T>(block_shape, one).view(), Reduction::kSum, /*include_self=*/true));
      Tensor grad_over_count = Zip<T>(grad, count, [&](T g, T n) { return n == zero ? g : g / n; });
      TENSOROPS_ASSIGN_OR_RETURN(out.source, family.Select(grad_over_count.view()));
      out.input = std::move(grad_over_count);
      break;
    }
    case Reduction::kProd: {
      // d result / d self = product of the others: result / self, or, for a zero self, the
      // product computed with that self replaced by 1.
      Tensor masked_self = Map<T>(input, [&](T v) { return v == zero ? one : v; });
      TENSOROPS_ASSIGN_OR_RETURN(
          Tensor masked_self_result,
          family.Reduce(masked_self.view(), source.view(), Reduction::kProd, include_self));
      out.input = Zip3<T>(grad, masked_self_result, masked_self,
                          [](T g, T r, T s) { return g * Conj(r / s); });
      // For the source: a zero that is the only zero source of its destination gets the product
      // of the others (computed with it replaced by 1); every other element gets result / src
      // (0 when its destination has two or more zero sources).
      Tensor source_is_zero = Map<T>(source, [&](T v) { return v == zero ? one : zero; });
      TENSOROPS_ASSIGN_OR_RETURN(
          Tensor zeros_per_destination,
          family.Reduce(Full<T>(input.shape(), zero).view(), source_is_zero.view(), Reduction::kSum,
                        /*include_self=*/true));
      TENSOROPS_ASSIGN_OR_RETURN(Tensor zeros_at_source,
                                 family.Select(zeros_per_destination.view()));
      Tensor single_zero = Zip<T>(source_is_zero, zeros_at_source,
                                  [&](T z, T n) { return z == one && n == one ? one : zero; });
      Tensor masked_source =
          Zip<T>(source, single_zero, [&](T v, T single) { return single == one ? one : v; });
      TENSOROPS_ASSIGN_OR_RETURN(
          Tensor masked_source_result,
          family.Reduce(input.view(), masked_source.view(), Reduction::kProd, include_self));
      TENSOROPS_ASSIGN_OR_RETURN(Tensor result, family.Reduce(input.view(), source.view(),
                                                              Reduction::kProd, include_self));
      auto times_conj = [](T g, T r) { return g * Conj(r); };
      TENSOROPS_ASSIGN_OR_RETURN(
          Tensor via_single_zero,
          family.Select(Zip<T>(grad, masked_source_result, times_conj).view()));
      TENSOROPS_ASSIGN_OR_RETURN(Tensor via_result,
                                 family.Select(Zip<T>(grad, result, times_conj).view()));
      out.source = Zip3<T>(single_zero, via_single_zero, via_result,
                           [&](T single, T a, T b) { return single == one ? a : b; });
      out.source =
          Zip<T>(out.source,
                 Zip<T>(single_zero, source,
                        [&](T single, T v) { return single == one || v == zero ? one : v; }),
                 [](T g, T v) { return g / Conj(v); });
      break;
    }
    case Reduction::kAmax:
    case Reduction::kAmin: {
      // Every element equal to the result shares the gradient equally. The destination's own
      // value takes part only when include_self (or when nothing is written there).
      TENSOROPS_ASSIGN_OR_RETURN(Tensor result,
                                 family.Reduce(input.view(), source.view(), reduce, include_self));
      TENSOROPS_ASSIGN_OR_RETURN(Tensor result_at_source, family.Select(result.view()));
      Tensor self_is_result = Zip<T>(input, result, [&](T v, T r) { return v == r ? one : zero; });
      if (!include_self) {
        TENSOROPS_ASSIGN_OR_RETURN(self_is_result, zero_written(self_is_result));
      }
      Tensor source_is_result =
          Zip<T>(source, result_at_source, [&](T v, T r) { return v == r ? one : zero; });
      TENSOROPS_ASSIGN_OR_RETURN(Tensor sharers,
                                 family.Reduce(self_is_result.view(), source_is_result.view(),
                                               Reduction::kSum, /*include_self=*/true));
      // As PyTorch: a NaN result equals nothing, 0 sharers, and the gradient becomes NaN.
      Tensor share = Zip<T>(grad, sharers, [](T g, T n) { return g / n; });
      TENSOROPS_ASSIGN_OR_RETURN(Tensor share_at_source, family.Select(share.view()));
      out.input = Zip<T>(self_is_result, share, [](T is, T s) { return is * s; });
      out.source = Zip<T>(source_is_result, share_at_source, [](T is, T s) { return is * s; });
      break;
    }
  }
  if (!include_self) {
    TENSOROPS_ASSIGN_OR_RETURN(out.input, zero_written(out.input));
  }
  return out;
}

}  // namespace

absl::Status CheckDifferentiable(std::string_view op, std::string_view argument, DataType dtype) {
  if (IsFloating(dtype) || IsComplex(dtype)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s backward: %s.dtype = %s is not differentiable (expected a floating or "
                      "complex dtype)",
                      op, argument, DataTypeName(dtype)));
}

absl::Status CheckGradOutput(std::string_view op, const TensorView& grad_output,
                             DataType result_dtype, ShapeSpan result_shape) {
  if (ShapeSpan(grad_output.shape()) != result_shape) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s backward: grad_output.shape = %s does not match the result's shape %s",
                        op, ShapeToString(grad_output.shape()), ShapeToString(result_shape)));
  }
  if (grad_output.dtype() != result_dtype) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s backward: grad_output.dtype = %s does not match the result's dtype %s",
                        op, DataTypeName(grad_output.dtype()), DataTypeName(result_dtype)));
  }
  return absl::OkStatus();
}

// ComputeDtype is the dtype the backward does arithmetic in: float32 for the 16-bit floats
// (docs/semantics.md: accumulate in float32, round once), the dtype itself otherwise.
DataType ComputeDtype(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ? DataType::kFloat32 : dtype;
}

// ConvertTo returns a contiguous copy of `view` in `dtype`, which is `view`'s own dtype or its
// ComputeDtype (or back).
Tensor ConvertTo(const TensorView& view, DataType dtype) {
  Tensor contiguous = Tensor::FromView(view);
  if (view.dtype() == dtype) return contiguous;
  Tensor converted(dtype, view.shape());
  const int64_t count = converted.numel();
  DispatchDataType(view.dtype(), [&]<typename From>(TypeTag<From>) {
    DispatchDataType(dtype, [&]<typename To>(TypeTag<To>) {
      if constexpr ((kIsHalf<From> && std::is_same_v<To, float>) ||
                    (std::is_same_v<From, float> && kIsHalf<To>)) {
        const From* in = contiguous.data_as<From>();
        To* out = converted.data_as<To>();
        for (int64_t i = 0; i < count; ++i) out[i] = static_cast<To>(in[i]);
      }
    });
  });
  return converted;
}

// Reshaped returns `tensor`'s elements, in row-major order, at `shape` (same element count).
Tensor Reshaped(Tensor tensor, ShapeSpan shape) {
  if (ShapeSpan(tensor.shape()) == shape) return tensor;
  Tensor out(tensor.dtype(), shape);
  if (out.nbytes() > 0) std::memcpy(out.data(), tensor.data(), static_cast<size_t>(out.nbytes()));
  return out;
}

// EmbedBlock returns zeros of `shape` with `block` written into its leading block: the gradient
// of a source tensor of which the op read only the leading `block.shape()` (Scatter's src may be
// larger than its index).
Tensor EmbedBlock(Tensor block, ShapeSpan shape) {
  if (ShapeSpan(block.shape()) == shape) return block;
  Tensor out = Tensor::Zeros(block.dtype(), shape);
  if (block.numel() == 0) return out;
  if (block.rank() != static_cast<int64_t>(shape.size())) return Reshaped(std::move(block), shape);
  CopyElements(block.view(), MutableTensorView(block.dtype(), block.shape(),
                                               ContiguousStrides(shape), out.data()));
  return out;
}

// SumToShape sums `tensor` over the dimensions broadcasting expanded from `shape` (NumPy rules,
// `shape` broadcastable to tensor's shape). Each summed dimension is a Scatter SUM along it with
// an all-zero index, so the summation is the forward kernel's; 16-bit floats are summed in float32
// across all dimensions and rounded once.
absl::StatusOr<Tensor> SumToShape(Tensor tensor, ShapeSpan shape) {
  if (ShapeSpan(tensor.shape()) == shape) return tensor;
  const DataType dtype = tensor.dtype();
  if (ComputeDtype(dtype) != dtype) tensor = ConvertTo(tensor.view(), ComputeDtype(dtype));
  static constexpr int64_t kZeroIndex = 0;
  const int64_t rank = tensor.rank();
  const int64_t leading = rank - static_cast<int64_t>(shape.size());
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t target = d < leading ? 1 : shape[d - leading];
    if (tensor.shape()[d] == target) continue;
    Shape reduced = tensor.shape();
    reduced[d] = 1;
    const Tensor zeros = Tensor::Zeros(tensor.dtype(), reduced);
    const TensorView zero_index(DataType::kInt64, tensor.shape(), Shape(rank, 0), &kZeroIndex);
    TENSOROPS_ASSIGN_OR_RETURN(Tensor summed, Scatter(ScatterArgs{.input = zeros.view(),
                                                                  .index = zero_index,
                                                                  .source = tensor.view(),
                                                                  .axis = d,
                                                                  .reduce = Reduction::kSum}));
    tensor = std::move(summed);
  }
  return ConvertTo(Reshaped(std::move(tensor), shape).view(), dtype);
}

// Dispatched on the compute dtype; `alpha`, when set, is converted to it.
absl::StatusOr<FamilyGradients> RunScatterFamilyBackward(
    std::string_view op, const ScatterFamily& family, const Tensor& input, const Tensor& source,
    const Tensor& grad, Reduction reduce, bool include_self, const std::optional<Scalar>& alpha) {
  std::optional<Tensor> alpha_tensor;
  if (alpha.has_value()) {
    TENSOROPS_ASSIGN_OR_RETURN(alpha_tensor, ScalarToTensor(*alpha, input.dtype(), op, "alpha"));
  }
  return DispatchDataType(
      input.dtype(), [&]<typename T>(TypeTag<T>) -> absl::StatusOr<FamilyGradients> {
        if constexpr (std::is_floating_point_v<T> || internal::IsComplexType<T>::value) {
          std::optional<T> scale;
          if (alpha_tensor.has_value()) scale = *alpha_tensor->data_as<T>();
          return ScatterFamilyBackward<T>(family, input, source, grad, reduce, include_self, scale);
        } else {
          return absl::InternalError(absl::StrFormat("%s backward: no compute type for %s", op,
                                                     DataTypeName(input.dtype())));
        }
      });
}

}  // namespace backward_internal
}  // namespace tensorops
