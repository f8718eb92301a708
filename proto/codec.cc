#include "proto/codec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "kernels/shape.h"
#include "kernels/status_macros.h"

namespace tensorops::wire {
namespace {

// The strictest alignment any element type needs (int64, double, complex<double>). Protobuf keeps
// `bytes` in a std::string: heap buffers come from malloc (16-byte aligned) and short strings live
// inside the 8-byte-aligned string object, so 8 always holds and nothing stricter may be assumed.
constexpr uintptr_t kMaxElementAlignment = 8;

// ProductOfNonzeroSizes multiplies every size but zeros; false when that overflows int64. Zeros
// are skipped on purpose: a shape like [0, 2^40, 2^40] holds no elements but its row-major
// strides (2^80) would still overflow the kernels' 64-bit index arithmetic.
bool ProductOfNonzeroSizes(ShapeSpan shape, int64_t* product) {
  int64_t result = 1;
  for (int64_t size : shape) {
    if (size == 0) continue;
    if (__builtin_mul_overflow(result, size, &result)) return false;
  }
  *product = result;
  return true;
}

}  // namespace

absl::StatusOr<DataType> DataTypeFromProto(int proto_dtype, std::string_view op,
                                           std::string_view arg) {
  switch (proto_dtype) {
    case v1::DATA_TYPE_BOOL:
      return DataType::kBool;
    case v1::DATA_TYPE_UINT8:
      return DataType::kUInt8;
    case v1::DATA_TYPE_INT8:
      return DataType::kInt8;
    case v1::DATA_TYPE_INT16:
      return DataType::kInt16;
    case v1::DATA_TYPE_INT32:
      return DataType::kInt32;
    case v1::DATA_TYPE_INT64:
      return DataType::kInt64;
    case v1::DATA_TYPE_FLOAT16:
      return DataType::kFloat16;
    case v1::DATA_TYPE_BFLOAT16:
      return DataType::kBFloat16;
    case v1::DATA_TYPE_FLOAT32:
      return DataType::kFloat32;
    case v1::DATA_TYPE_FLOAT64:
      return DataType::kFloat64;
    case v1::DATA_TYPE_COMPLEX64:
      return DataType::kComplex64;
    case v1::DATA_TYPE_COMPLEX128:
      return DataType::kComplex128;
    case v1::DATA_TYPE_UNSPECIFIED:
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s.dtype = %d is not a known dtype (DATA_TYPE_UNSPECIFIED: the dtype must be set)",
          op, arg, proto_dtype));
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s.dtype = %d is not a known dtype (expected %d..%d)", op, arg, proto_dtype,
          static_cast<int>(v1::DATA_TYPE_BOOL), static_cast<int>(v1::DATA_TYPE_COMPLEX128)));
  }
}

v1::DataType DataTypeToProto(DataType dtype) {
  switch (dtype) {
    case DataType::kBool:
      return v1::DATA_TYPE_BOOL;
    case DataType::kUInt8:
      return v1::DATA_TYPE_UINT8;
    case DataType::kInt8:
      return v1::DATA_TYPE_INT8;
    case DataType::kInt16:
      return v1::DATA_TYPE_INT16;
    case DataType::kInt32:
      return v1::DATA_TYPE_INT32;
    case DataType::kInt64:
      return v1::DATA_TYPE_INT64;
    case DataType::kFloat16:
      return v1::DATA_TYPE_FLOAT16;
    case DataType::kBFloat16:
      return v1::DATA_TYPE_BFLOAT16;
    case DataType::kFloat32:
      return v1::DATA_TYPE_FLOAT32;
    case DataType::kFloat64:
      return v1::DATA_TYPE_FLOAT64;
    case DataType::kComplex64:
      return v1::DATA_TYPE_COMPLEX64;
    case DataType::kComplex128:
      return v1::DATA_TYPE_COMPLEX128;
  }
  return v1::DATA_TYPE_UNSPECIFIED;
}

namespace {

// CheckShapeNamed is CheckShape and CheckShapeField: `name` names the tensor in the rank messages
// ("input has rank 17"), `shape_name` its shape in the others ("input.shape[0] = -1").
absl::StatusOr<int64_t> CheckShapeNamed(DataType dtype, ShapeSpan shape, std::string_view op,
                                        std::string_view name, std::string_view shape_name,
                                        const DecodeLimits& limits) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (rank > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s has rank %d > %d (the largest rank tensorops accepts)", op, name, rank, kMaxRank));
  }
  if (rank > limits.max_rank) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: %s has rank %d > %d, the server's limit (--max_rank)", op, name, rank,
                        limits.max_rank));
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (shape[d] < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s[%d] = %d is negative (sizes must be >= 0)", op, shape_name, d, shape[d]));
    }
  }
  int64_t nonzero_product = 0;
  if (!ProductOfNonzeroSizes(shape, &nonzero_product)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s %s has more elements than fit in int64", op, shape_name, ShapeToString(shape)));
  }
  const int64_t itemsize = ItemSize(dtype);
  int64_t nonzero_bytes = 0;
  if (__builtin_mul_overflow(nonzero_product, itemsize, &nonzero_bytes)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s %s of %s has more bytes than fit in int64 (%d elements * %d bytes)", op, shape_name,
        ShapeToString(shape), DataTypeName(dtype), nonzero_product, itemsize));
  }
  const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
  const int64_t numel = empty ? 0 : nonzero_product;
  const int64_t nbytes = numel * itemsize;
  if (numel > limits.max_elements) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: %s %s has %d elements, more than the server's limit of %d (--max_elements)", op,
        shape_name, ShapeToString(shape), numel, limits.max_elements));
  }
  if (nbytes > limits.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: %s %s of %s has %d bytes, more than the server's limit of %d "
        "(--max_message_bytes)",
        op, shape_name, ShapeToString(shape), DataTypeName(dtype), nbytes, limits.max_bytes));
  }
  return numel;
}

}  // namespace

absl::StatusOr<int64_t> CheckShape(DataType dtype, ShapeSpan shape, std::string_view op,
                                   std::string_view arg, const DecodeLimits& limits) {
  return CheckShapeNamed(dtype, shape, op, arg, std::string(arg) + ".shape", limits);
}

absl::StatusOr<int64_t> CheckShapeField(DataType dtype, ShapeSpan shape, std::string_view op,
                                        std::string_view field, const DecodeLimits& limits) {
  return CheckShapeNamed(dtype, shape, op, field, field, limits);
}

absl::StatusOr<TensorView> DecodeTensor(const v1::Tensor& tensor, std::string_view op,
                                        std::string_view arg, const DecodeLimits& limits) {
  TENSOROPS_ASSIGN_OR_RETURN(const DataType dtype, DataTypeFromProto(tensor.dtype(), op, arg));
  const ShapeSpan shape(tensor.shape().data(), tensor.shape().size());
  TENSOROPS_ASSIGN_OR_RETURN(const int64_t numel, CheckShape(dtype, shape, op, arg, limits));

  const std::string& data = tensor.data();
  const int64_t nbytes = numel * ItemSize(dtype);
  if (static_cast<int64_t>(data.size()) != nbytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s.data has %d bytes but shape %s of %s needs %d", op, arg,
                        data.size(), ShapeToString(shape), DataTypeName(dtype), nbytes));
  }
  if (dtype == DataType::kBool) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(data.data());
    const auto* bad = std::find_if(bytes, bytes + data.size(), [](uint8_t b) { return b > 1; });
    if (bad != bytes + data.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %s.data[%d] = %d is not a valid bool (0 or 1)", op, arg, bad - bytes,
                          static_cast<int>(*bad)));
    }
  }
  const uintptr_t alignment =
      std::min<uintptr_t>(static_cast<uintptr_t>(ItemSize(dtype)), kMaxElementAlignment);
  if (nbytes > 0 && reinterpret_cast<uintptr_t>(data.data()) % alignment != 0) {
    // Cannot happen with protobuf's std::string storage (see kMaxElementAlignment); refusing is
    // still better than undefined behaviour in the kernels should that storage ever change.
    return absl::InternalError(
        absl::StrFormat("%s: %s.data is not aligned to %d bytes; the codec cannot view it in place",
                        op, arg, alignment));
  }
  return TensorView(dtype, shape, static_cast<const void*>(data.data()));
}

MutableTensorView AllocateTensor(DataType dtype, ShapeSpan shape, v1::Tensor* tensor) {
  tensor->set_dtype(DataTypeToProto(dtype));
  tensor->mutable_shape()->Assign(shape.begin(), shape.end());
  std::string* data = tensor->mutable_data();
  data->resize(static_cast<size_t>(NumElements(shape) * ItemSize(dtype)));
  return MutableTensorView(dtype, shape, static_cast<void*>(data->data()));
}

void EncodeTensor(const TensorView& view, v1::Tensor* tensor) {
  const MutableTensorView out = AllocateTensor(view.dtype(), view.shape(), tensor);
  if (view.numel() == 0) return;
  if (view.is_contiguous()) {
    std::memcpy(out.data(), view.data(), static_cast<size_t>(view.numel() * view.itemsize()));
  } else {
    CopyElements(view, out);
  }
}

absl::StatusOr<Scalar> DecodeScalar(const v1::Scalar& scalar, std::string_view op,
                                    std::string_view arg) {
  switch (scalar.value_case()) {
    case v1::Scalar::kBoolValue:
      return Scalar(scalar.bool_value());
    case v1::Scalar::kIntValue:
      return Scalar(static_cast<int64_t>(scalar.int_value()));
    case v1::Scalar::kFloatValue:
      return Scalar(scalar.float_value());
    case v1::Scalar::kComplexValue:
      return Scalar(
          std::complex<double>(scalar.complex_value().real(), scalar.complex_value().imag()));
    case v1::Scalar::VALUE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: %s has no value set (one of bool_value, int_value, float_value or complex_value is "
      "required)",
      op, arg));
}

void EncodeScalar(const Scalar& scalar, v1::Scalar* out) {
  struct Encoder {
    v1::Scalar* out;
    void operator()(bool value) const { out->set_bool_value(value); }
    void operator()(int64_t value) const { out->set_int_value(value); }
    void operator()(double value) const { out->set_float_value(value); }
    void operator()(std::complex<double> value) const {
      out->mutable_complex_value()->set_real(value.real());
      out->mutable_complex_value()->set_imag(value.imag());
    }
  };
  std::visit(Encoder{out}, scalar.value());
}

absl::StatusOr<Reduction> ReductionFromProto(int proto_reduction, std::string_view op) {
  switch (proto_reduction) {
    case v1::REDUCTION_ASSIGN:
      return Reduction::kAssign;
    case v1::REDUCTION_SUM:
      return Reduction::kSum;
    case v1::REDUCTION_PROD:
      return Reduction::kProd;
    case v1::REDUCTION_MEAN:
      return Reduction::kMean;
    case v1::REDUCTION_AMAX:
      return Reduction::kAmax;
    case v1::REDUCTION_AMIN:
      return Reduction::kAmin;
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: reduce = %d is not a known reduction (expected 0..5: ASSIGN, SUM, PROD, MEAN, "
          "AMAX, AMIN)",
          op, proto_reduction));
  }
}

v1::Reduction ReductionToProto(Reduction reduction) {
  switch (reduction) {
    case Reduction::kAssign:
      return v1::REDUCTION_ASSIGN;
    case Reduction::kSum:
      return v1::REDUCTION_SUM;
    case Reduction::kProd:
      return v1::REDUCTION_PROD;
    case Reduction::kMean:
      return v1::REDUCTION_MEAN;
    case Reduction::kAmax:
      return v1::REDUCTION_AMAX;
    case Reduction::kAmin:
      return v1::REDUCTION_AMIN;
  }
  return v1::REDUCTION_ASSIGN;
}

}  // namespace tensorops::wire
