// One dtype dispatch helper for the whole library: turns a runtime DataType into a compile-time
// element type, once per kernel call, never per element.
//
//   return DispatchDataType(dtype, [&]<typename T>(TypeTag<T>) { return Kernel<T>(...); });
//
// Every branch of the switch must return the same type.
#ifndef TENSOROPS_KERNELS_DISPATCH_H_
#define TENSOROPS_KERNELS_DISPATCH_H_

#include <utility>

#include "kernels/dtype.h"

namespace tensorops {

// TypeTag<T> carries an element type into a generic lambda.
template <typename T>
struct TypeTag {
  using type = T;
};

// DispatchDataType calls `fn(TypeTag<CppType<dtype>>{})` and returns its result.
template <typename Fn>
decltype(auto) DispatchDataType(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::kBool:
      return fn(TypeTag<bool>{});
    case DataType::kUInt8:
      return fn(TypeTag<uint8_t>{});
    case DataType::kInt8:
      return fn(TypeTag<int8_t>{});
    case DataType::kInt16:
      return fn(TypeTag<int16_t>{});
    case DataType::kInt32:
      return fn(TypeTag<int32_t>{});
    case DataType::kInt64:
      return fn(TypeTag<int64_t>{});
    case DataType::kFloat16:
      return fn(TypeTag<Float16>{});
    case DataType::kBFloat16:
      return fn(TypeTag<BFloat16>{});
    case DataType::kFloat32:
      return fn(TypeTag<float>{});
    case DataType::kFloat64:
      return fn(TypeTag<double>{});
    case DataType::kComplex64:
      return fn(TypeTag<std::complex<float>>{});
    case DataType::kComplex128:
      return fn(TypeTag<std::complex<double>>{});
  }
  // Unreachable for a valid enum value; the codec rejects unknown wire dtypes.
  return fn(TypeTag<bool>{});
}

// DispatchIndexType is DispatchDataType for index tensors: int32 or int64 (callers validate first;
// anything else is treated as int64).
template <typename Fn>
decltype(auto) DispatchIndexType(DataType dtype, Fn&& fn) {
  if (dtype == DataType::kInt32) return fn(TypeTag<int32_t>{});
  return fn(TypeTag<int64_t>{});
}

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_DISPATCH_H_
