// DataType: the element types tensorops serves, with their traits.
//
//   DataType dtype = DataType::kFloat32;
//   ItemSize(dtype);      // 4
//   DataTypeName(dtype);  // "float32"
//   CppType<DataType::kFloat16>  // Float16
//
// The numbering matches nothing on the wire; the server's codec maps protobuf enums to these.
#ifndef TENSOROPS_KERNELS_DTYPE_H_
#define TENSOROPS_KERNELS_DTYPE_H_

#include <complex>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

#include "kernels/half.h"

namespace tensorops {

enum class DataType : int8_t {
  kBool,
  kUInt8,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kComplex64,
  kComplex128,
};

// kAllDataTypes lists every DataType, in enum order.
inline constexpr DataType kAllDataTypes[] = {
    DataType::kBool,    DataType::kUInt8,   DataType::kInt8,      DataType::kInt16,
    DataType::kInt32,   DataType::kInt64,   DataType::kFloat16,   DataType::kBFloat16,
    DataType::kFloat32, DataType::kFloat64, DataType::kComplex64, DataType::kComplex128,
};

namespace internal {
template <DataType>
struct CppTypeOf;
template <>
struct CppTypeOf<DataType::kBool> {
  using type = bool;
};
template <>
struct CppTypeOf<DataType::kUInt8> {
  using type = uint8_t;
};
template <>
struct CppTypeOf<DataType::kInt8> {
  using type = int8_t;
};
template <>
struct CppTypeOf<DataType::kInt16> {
  using type = int16_t;
};
template <>
struct CppTypeOf<DataType::kInt32> {
  using type = int32_t;
};
template <>
struct CppTypeOf<DataType::kInt64> {
  using type = int64_t;
};
template <>
struct CppTypeOf<DataType::kFloat16> {
  using type = Float16;
};
template <>
struct CppTypeOf<DataType::kBFloat16> {
  using type = BFloat16;
};
template <>
struct CppTypeOf<DataType::kFloat32> {
  using type = float;
};
template <>
struct CppTypeOf<DataType::kFloat64> {
  using type = double;
};
template <>
struct CppTypeOf<DataType::kComplex64> {
  using type = std::complex<float>;
};
template <>
struct CppTypeOf<DataType::kComplex128> {
  using type = std::complex<double>;
};
}  // namespace internal

namespace internal {
// IsComplexType<T>::value is true for std::complex<float> and std::complex<double>.
template <typename T>
struct IsComplexType : std::false_type {};
template <typename T>
struct IsComplexType<std::complex<T>> : std::true_type {};
}  // namespace internal

// CppType<dtype> is the C++ storage type of one element of `dtype`.
template <DataType dtype>
using CppType = typename internal::CppTypeOf<dtype>::type;

// DataTypeOf<T> is the DataType whose storage type is T.
template <typename T>
inline constexpr DataType DataTypeOf = [] {
  if constexpr (std::is_same_v<T, bool>) return DataType::kBool;
  if constexpr (std::is_same_v<T, uint8_t>) return DataType::kUInt8;
  if constexpr (std::is_same_v<T, int8_t>) return DataType::kInt8;
  if constexpr (std::is_same_v<T, int16_t>) return DataType::kInt16;
  if constexpr (std::is_same_v<T, int32_t>) return DataType::kInt32;
  if constexpr (std::is_same_v<T, int64_t>) return DataType::kInt64;
  if constexpr (std::is_same_v<T, Float16>) return DataType::kFloat16;
  if constexpr (std::is_same_v<T, BFloat16>) return DataType::kBFloat16;
  if constexpr (std::is_same_v<T, float>) return DataType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return DataType::kFloat64;
  if constexpr (std::is_same_v<T, std::complex<float>>) return DataType::kComplex64;
  if constexpr (std::is_same_v<T, std::complex<double>>) return DataType::kComplex128;
}();

// DataTypeName returns the lower-case name PyTorch and NumPy use ("float32", "bfloat16", ...).
std::string_view DataTypeName(DataType dtype);

// DataTypeFromName parses a name returned by DataTypeName; nullopt for anything else.
std::optional<DataType> DataTypeFromName(std::string_view name);

// ItemSize returns the bytes one element of `dtype` occupies.
int64_t ItemSize(DataType dtype);

// IsFloating is true for float16, bfloat16, float32 and float64.
bool IsFloating(DataType dtype);

// IsComplex is true for complex64 and complex128.
bool IsComplex(DataType dtype);

// IsIntegral is true for the integer dtypes; bool counts only when `include_bool`.
bool IsIntegral(DataType dtype, bool include_bool);

// IsIndexType is true for the dtypes an index tensor may have: int32 and int64.
inline bool IsIndexType(DataType dtype) {
  return dtype == DataType::kInt32 || dtype == DataType::kInt64;
}

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_DTYPE_H_
