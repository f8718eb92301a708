#include "kernels/in_place_checks.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/dispatch.h"
#include "kernels/shape.h"
#include "kernels/tensor.h"

namespace tensorops {

absl::Status CheckBeforeWriting(const ScatterPlan& plan) {
  // The index as sent: its values are the broadcast index's, and positions in errors are its own.
  const TensorView& index = plan.original_index;
  Tensor storage;
  const TensorView values =
      index.is_contiguous() ? index : (storage = Tensor::FromView(index), storage.view());
  const int64_t axis_size = plan.input.rank() == 0 ? 1 : plan.input.size(plan.axis);
  return DispatchIndexType(values.dtype(), [&]<typename Index>(TypeTag<Index>) -> absl::Status {
    const Index* data = values.data_as<Index>();
    const int64_t count = values.numel();
    for (int64_t position = 0; position < count; ++position) {
      const int64_t value = data[position];
      if (InRange(value, axis_size)) continue;
      const std::string where =
          values.rank() == 0
              ? "index"
              : absl::StrCat("index[", absl::StrJoin(UnravelIndex(position, values.shape()), ", "),
                             "]");
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s = %d is out of range for axis %d of input with size %d (expected %d <= index "
          "< %d)",
          plan.op, where, value, plan.axis, axis_size, -axis_size, axis_size));
    }
    return absl::OkStatus();
  });
}

absl::Status CheckBeforeWriting(const NdPlan& plan) {
  if (plan.single_axis_scatter.has_value()) return CheckBeforeWriting(*plan.single_axis_scatter);
  // The general ScatterNd kernel resolves every index to its destination before it writes.
  return absl::OkStatus();
}

absl::Status CheckBeforeWriting(const MaskedScatterPlan& plan) {
  // The mask at the result's shape: a broadcast position counts once per element it covers.
  Tensor storage;
  const TensorView mask = plan.mask.is_contiguous()
                              ? plan.mask
                              : (storage = Tensor::FromView(plan.mask), storage.view());
  const auto* data = static_cast<const uint8_t*>(mask.data());
  int64_t true_count = 0;
  for (int64_t i = 0; i < mask.numel(); ++i) true_count += data[i] != 0;
  if (true_count <= plan.source.numel()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "masked_scatter: src has %d elements but mask has %d true positions (src must have at least "
      "one element per true position)",
      plan.source.numel(), true_count));
}

}  // namespace tensorops
