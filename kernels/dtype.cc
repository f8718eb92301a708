#include "kernels/dtype.h"

namespace tensorops {

std::string_view DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kBool:
      return "bool";
    case DataType::kUInt8:
      return "uint8";
    case DataType::kInt8:
      return "int8";
    case DataType::kInt16:
      return "int16";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kComplex64:
      return "complex64";
    case DataType::kComplex128:
      return "complex128";
  }
  return "unknown";
}

std::optional<DataType> DataTypeFromName(std::string_view name) {
  for (DataType dtype : kAllDataTypes) {
    if (DataTypeName(dtype) == name) return dtype;
  }
  return std::nullopt;
}

int64_t ItemSize(DataType dtype) {
  switch (dtype) {
    case DataType::kBool:
    case DataType::kUInt8:
    case DataType::kInt8:
      return 1;
    case DataType::kInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
    case DataType::kComplex64:
      return 8;
    case DataType::kComplex128:
      return 16;
  }
  return 0;
}

bool IsFloating(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

bool IsComplex(DataType dtype) {
  return dtype == DataType::kComplex64 || dtype == DataType::kComplex128;
}

bool IsIntegral(DataType dtype, bool include_bool) {
  switch (dtype) {
    case DataType::kBool:
      return include_bool;
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kInt32:
    case DataType::kInt64:
      return true;
    default:
      return false;
  }
}

}  // namespace tensorops
