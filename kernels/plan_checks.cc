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

}  // namespace tensorops::internal
