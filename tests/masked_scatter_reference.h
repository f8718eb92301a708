// An independent reference for MaskedScatter (docs/semantics.md, MaskedScatter),
// `torch.masked_scatter(input, mask, source)` out of place.
//
//   absl::StatusOr<Tensor> expected =
//       testing::ReferenceMaskedScatter(x.view(), mask.view(), src.view());
//
// Written from docs/semantics.md and PyTorch's documented semantics alone, sharing no code with
// kernels/ beyond the container types: its own broadcasting of input and mask, no prefix sums, no
// blocks. It visits every result position in row-major order with plain loops, keeps a running
// count of the true positions seen so far, and reads the source's k-th element by unravelling k in
// the source's own shape and going through the source view's strides. Elements move as raw bytes.
// Sizes are kept to a few hundred thousand elements.
#ifndef TENSOROPS_TESTS_MASKED_SCATTER_REFERENCE_H_
#define TENSOROPS_TESTS_MASKED_SCATTER_REFERENCE_H_

#include <cstdint>
#include <cstring>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/tensor.h"
#include "tests/reference.h"

namespace tensorops::testing {

namespace masked_scatter_internal {

// BroadcastResultShape is NumPy's broadcast of two shapes, or nullopt when a pair of sizes
// (right-aligned) differs with neither being 1.
inline std::optional<Shape> BroadcastResultShape(const Shape& a, const Shape& b) {
  const size_t rank = a.size() > b.size() ? a.size() : b.size();
  Shape result(rank, 1);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t from_a = d < rank - a.size() ? 1 : a[d - (rank - a.size())];
    const int64_t from_b = d < rank - b.size() ? 1 : b[d - (rank - b.size())];
    if (from_a == from_b || from_b == 1) {
      result[d] = from_a;
    } else if (from_a == 1) {
      result[d] = from_b;
    } else {
      return std::nullopt;
    }
  }
  return result;
}

// MaskAt reads the mask element that position `coordinates` of the result maps onto; any nonzero
// byte is true.
inline bool MaskAt(const TensorView& mask, const Shape& coordinates) {
  const Shape mask_coordinates =
      reference_internal::BroadcastCoordinates(coordinates, mask.shape());
  return reference_internal::LoadElement(DataType::kBool, mask.data(),
                                         reference_internal::OffsetOf(mask, mask_coordinates))
             .integer != 0;
}

}  // namespace masked_scatter_internal

// ReferenceMaskedCount counts the true positions of `mask` broadcast to `shape` (which mask must
// broadcast to).
inline int64_t ReferenceMaskedCount(const TensorView& mask, const Shape& shape) {
  int64_t true_count = 0;
  const int64_t count = reference_internal::Count(shape);
  for (int64_t position = 0; position < count; ++position) {
    true_count +=
        masked_scatter_internal::MaskAt(mask, reference_internal::Unravel(position, shape));
  }
  return true_count;
}

// ReferenceMaskedScatter computes MaskedScatter (docs/semantics.md): input and mask broadcast
// against each other, the k-th true position (row-major in the result) takes source.flat[k], every
// other position input's value. Returns INVALID_ARGUMENT for any input docs/semantics.md rejects
// (message wording is its own).
inline absl::StatusOr<Tensor> ReferenceMaskedScatter(const TensorView& input,
                                                     const TensorView& mask,
                                                     const TensorView& source) {
  using namespace reference_internal;  // NOLINT
  if (mask.dtype() != DataType::kBool) return Invalid("masked_scatter: mask must be bool");
  if (source.dtype() != input.dtype()) {
    return Invalid("masked_scatter: source dtype differs from input dtype");
  }
  const std::optional<Shape> shape =
      masked_scatter_internal::BroadcastResultShape(input.shape(), mask.shape());
  if (!shape.has_value()) {
    return Invalid(absl::StrCat("masked_scatter: cannot broadcast input ",
                                ShapeString(input.shape()), " with mask ",
                                ShapeString(mask.shape())));
  }
  const int64_t true_count = ReferenceMaskedCount(mask, *shape);
  const int64_t source_count = Count(source.shape());
  if (true_count > source_count) {
    return Invalid(absl::StrCat("masked_scatter: ", true_count, " true positions but only ",
                                source_count, " source elements"));
  }

  const DataType dtype = input.dtype();
  const int64_t width = ByteWidth(dtype);
  Tensor result(dtype, *shape);
  const int64_t count = Count(*shape);
  int64_t next_source = 0;
  for (int64_t position = 0; position < count; ++position) {
    const Shape coordinates = Unravel(position, *shape);
    const char* from;
    if (masked_scatter_internal::MaskAt(mask, coordinates)) {
      const Shape source_coordinates = Unravel(next_source++, source.shape());
      from = static_cast<const char*>(source.data()) + OffsetOf(source, source_coordinates) * width;
    } else {
      const Shape input_coordinates = BroadcastCoordinates(coordinates, input.shape());
      from = static_cast<const char*>(input.data()) + OffsetOf(input, input_coordinates) * width;
    }
    std::memcpy(static_cast<char*>(result.data()) + position * width, from,
                static_cast<size_t>(width));
  }
  return result;
}

}  // namespace tensorops::testing

#endif  // TENSOROPS_TESTS_MASKED_SCATTER_REFERENCE_H_
