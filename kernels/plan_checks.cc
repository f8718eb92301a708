#include "kernels/plan_checks.h"

#include "absl/strings/str_format.h"

namespace tensorops::internal {

WalkShape AsWalkShape(const TensorView& view) {
  if (view.rank() == 0) return {Shape{1}, Shape{1}};
  return {view.shape(), view.strides()};
}

absl::Status CheckIndexDtype(std::string_view op, const TensorView& index) {
  if (IsIndexType(index.dtype())) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: index.dtype = %s is not an index type (expected int32 or int64)", op,
                      DataTypeName(index.dtype())));
}

absl::Status CheckSourceDtype(std::string_view op, DataType source_dtype, DataType input_dtype) {
  if (source_dtype == input_dtype) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: src.dtype = %s does not match input.dtype = %s (no implicit casts)", op,
                      DataTypeName(source_dtype), DataTypeName(input_dtype)));
}

absl::Status CheckReductionDefined(std::string_view op, Reduction reduce, DataType dtype) {
  if (IsComplex(dtype) && (reduce == Reduction::kAmax || reduce == Reduction::kAmin)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: reduce = %s is not defined for %s input",
                                                      op, ReductionName(reduce),
                                                      DataTypeName(dtype)));
  }
  if (dtype == DataType::kBool && reduce == Reduction::kMean) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: reduce = MEAN is not defined for bool input", op));
  }
  return absl::OkStatus();
}

}  // namespace tensorops::internal
