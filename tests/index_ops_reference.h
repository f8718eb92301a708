// An independent reference for IndexSelect and IndexReduce (docs/semantics.md, IndexSelect and
// IndexReduce), written from docs/semantics.md and PyTorch's documentation alone. It shares no code
// with kernels/ (not the Gather/Scatter plans, not their kernels): it loops over every output
// position (IndexSelect) or every source position (IndexReduce), reads the 1-D index directly, and
// accumulates in float64 / complex<double> / wrapping 64-bit integers with the element helpers of
// tests/reference.h.
//
//   absl::StatusOr<Tensor> expected = testing::ReferenceIndexReduce(
//       x.view(), 0, idx.view(), src.view(), Reduction::kSum, /*include_self=*/true,
//       /*alpha=*/2.0);
#ifndef TENSOROPS_TESTS_INDEX_OPS_REFERENCE_H_
#define TENSOROPS_TESTS_INDEX_OPS_REFERENCE_H_

#include <complex>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/reduction.h"
#include "kernels/tensor.h"
#include "tests/reference.h"

namespace tensorops::testing {

namespace index_reference_internal {

// The 1-D index (rank 0 = one entry) read as int64 values, or INVALID_ARGUMENT.
inline absl::StatusOr<std::vector<int64_t>> IndexValues(const char* op, const TensorView& index) {
  using reference_internal::Invalid;
  if (index.rank() > 1) return Invalid(absl::StrCat(op, ": index must be 1-D"));
  if (index.dtype() != DataType::kInt32 && index.dtype() != DataType::kInt64) {
    return Invalid(absl::StrCat(op, ": index must be int32 or int64"));
  }
  std::vector<int64_t> values;
  const int64_t count = index.rank() == 0 ? 1 : index.shape()[0];
  for (int64_t k = 0; k < count; ++k) {
    values.push_back(reference_internal::LoadIndex(index, index.rank() == 0 ? Shape{} : Shape{k}));
  }
  return values;
}

// `shape` with rank 0 read as [1], the way PyTorch's index ops treat scalars.
inline Shape WalkShapeOf(const Shape& shape) { return shape.empty() ? Shape{1} : shape; }

}  // namespace index_reference_internal

// ReferenceIndexSelect: out.shape = x.shape with `axis` sized len(idx) (rank 0 stays rank 0, with
// exactly one index); out[i] = x[i with i_ax := idx[i_ax]]. Index values are checked at every
// output position that reads them.
inline absl::StatusOr<Tensor> ReferenceIndexSelect(const TensorView& input, int64_t axis,
                                                   const TensorView& index) {
  using namespace reference_internal;  // NOLINT
  absl::StatusOr<std::vector<int64_t>> values =
      index_reference_internal::IndexValues("index_select", index);
  if (!values.ok()) return values.status();
  absl::StatusOr<int64_t> ax = NormalizedAxis("index_select", axis, input.rank());
  if (!ax.ok()) return ax.status();
  const int64_t count = static_cast<int64_t>(values->size());
  if (input.rank() == 0 && count != 1) {
    return Invalid("index_select: a scalar input takes exactly one index");
  }
  const Shape input_shape = index_reference_internal::WalkShapeOf(input.shape());
  Shape out_shape = input_shape;
  out_shape[*ax] = count;
  const int64_t axis_size = input_shape[*ax];
  const int64_t width = ByteWidth(input.dtype());
  Tensor result(input.dtype(), input.rank() == 0 ? Shape{} : out_shape);
  for (int64_t position = 0; position < Count(out_shape); ++position) {
    Shape coordinates = Unravel(position, out_shape);
    const int64_t value = (*values)[coordinates[*ax]];
    if (value < -axis_size || value >= axis_size) {
      return Invalid(absl::StrCat("index_select: index[", coordinates[*ax], "] = ", value,
                                  " is out of range for size ", axis_size));
    }
    coordinates[*ax] = value < 0 ? value + axis_size : value;
    const int64_t offset = input.rank() == 0 ? 0 : OffsetOf(input, coordinates);
    std::memcpy(static_cast<char*>(result.data()) + position * width,
                static_cast<const char*>(input.data()) + offset * width,
                static_cast<size_t>(width));
  }
  return result;
}

// ReferenceIndexReduce: out = x, then for every position j of src (row-major),
// out[j with j_ax := idx[j_ax]] (+)= alpha * src[j], with the include_self, MEAN, bool and
// ASSIGN (last in row-major order wins) rules. `alpha` must be 1 unless reduce is SUM; integer
// dtypes take its real part truncated, bool "alpha != 0".
inline absl::StatusOr<Tensor> ReferenceIndexReduce(const TensorView& input, int64_t axis,
                                                   const TensorView& index, const TensorView& src,
                                                   Reduction reduce, bool include_self,
                                                   std::complex<double> alpha = 1.0) {
  using namespace reference_internal;  // NOLINT
  const DataType dtype = input.dtype();
  const Kind kind = KindOf(dtype);
  absl::StatusOr<std::vector<int64_t>> values =
      index_reference_internal::IndexValues("index_reduce", index);
  if (!values.ok()) return values.status();
  if (src.dtype() != dtype) return Invalid("index_reduce: src dtype differs from input dtype");
  if (IsComplexKind(kind) && (reduce == Reduction::kAmax || reduce == Reduction::kAmin)) {
    return Invalid("index_reduce: AMAX/AMIN are not defined for complex");
  }
  if (kind == Kind::kBool && reduce == Reduction::kMean) {
    return Invalid("index_reduce: MEAN is not defined for bool");
  }
  if (alpha != std::complex<double>(1.0) && reduce != Reduction::kSum) {
    return Invalid("index_reduce: alpha is only defined for SUM");
  }
  absl::StatusOr<int64_t> ax = NormalizedAxis("index_reduce", axis, input.rank());
  if (!ax.ok()) return ax.status();
  const Shape x_shape = index_reference_internal::WalkShapeOf(input.shape());
  const Shape src_shape = index_reference_internal::WalkShapeOf(src.shape());
  if (x_shape.size() != src_shape.size()) return Invalid("index_reduce: src rank != input rank");
  const int64_t rank = static_cast<int64_t>(x_shape.size());
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t expected = d == *ax ? static_cast<int64_t>(values->size()) : x_shape[d];
    if (src_shape[d] != expected) return Invalid("index_reduce: src shape mismatch");
  }
  const int64_t axis_size = x_shape[*ax];
  const int64_t out_count = Count(x_shape);
  std::vector<Element> accumulators(static_cast<size_t>(out_count));
  std::vector<int64_t> counts(static_cast<size_t>(out_count), include_self ? 1 : 0);
  for (int64_t position = 0; position < out_count; ++position) {
    const Shape coordinates = Unravel(position, x_shape);
    accumulators[position] =
        LoadElement(dtype, input.data(), input.rank() == 0 ? 0 : OffsetOf(input, coordinates));
  }
  for (int64_t position = 0; position < Count(src_shape); ++position) {
    const Shape coordinates = Unravel(position, src_shape);
    const int64_t value = (*values)[coordinates[*ax]];
    if (value < -axis_size || value >= axis_size) {
      return Invalid(absl::StrCat("index_reduce: index[", coordinates[*ax], "] = ", value,
                                  " is out of range for size ", axis_size));
    }
    int64_t dest = 0;
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t coordinate =
          d == *ax ? (value < 0 ? value + axis_size : value) : coordinates[d];
      dest = dest * x_shape[d] + coordinate;
    }
    Element source =
        LoadElement(dtype, src.data(), src.rank() == 0 ? 0 : OffsetOf(src, coordinates));
    if (alpha == std::complex<double>(1.0)) {
      // Unscaled: complex NaN * 1 would turn (nan, b) into (nan, nan).
    } else if (kind == Kind::kBool) {
      source.integer = source.integer && alpha.real() != 0.0;
    } else if (IsIntegerKind(kind)) {
      source.integer =
          static_cast<int64_t>(static_cast<uint64_t>(source.integer) *
                               static_cast<uint64_t>(static_cast<int64_t>(alpha.real())));
    } else if (IsComplexKind(kind)) {
      source.number *= alpha;
    } else {
      source.number *= alpha.real();
    }
    if (counts[dest] == 0) {
      accumulators[dest] = source;
    } else {
      Combine(kind, reduce, accumulators[dest], source);
    }
    ++counts[dest];
  }
  return reference_internal::FinishReduction(dtype, input.shape(), reduce, accumulators, counts);
}

}  // namespace tensorops::testing

#endif  // TENSOROPS_TESTS_INDEX_OPS_REFERENCE_H_
