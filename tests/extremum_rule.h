// The order-independent AMAX/AMIN rule of docs/semantics.md (Reductions) for the Scatter-like
// suites: sets of floating values whose extremum depends on the order of the updates unless NaNs
// and signed zeros follow the rule, every order of each set, and the bits the rule selects,
// computed here from the values' bits alone (no kernel code).
//
//   for (const ExtremumCase& c : ExtremumCases(DataType::kFloat16)) {
//     const std::vector<std::vector<uint64_t>> orders = AllOrders(c.sources);
//     // ... scatter every order into its own destination, then for each destination:
//     EXPECT_EQ(BitsAt(result, d), SpecExtremum(dtype, Reduction::kAmax, c.input, c.sources,
//                                               include_self));
//   }
#ifndef TENSOROPS_TESTS_EXTREMUM_RULE_H_
#define TENSOROPS_TESTS_EXTREMUM_RULE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/reduction.h"
#include "kernels/tensor.h"
#include "tests/reference.h"

namespace tensorops::testing {

// The floating dtypes the rule applies to.
inline constexpr DataType kExtremumDtypes[] = {DataType::kFloat32, DataType::kFloat64,
                                               DataType::kFloat16, DataType::kBFloat16};

// FloatLayout: where a dtype keeps its sign, exponent and mantissa bits.
struct FloatLayout {
  int sign_shift;
  uint64_t exponent_mask;
  uint64_t mantissa_mask;
};

inline FloatLayout LayoutOf(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat64:
      return {63, uint64_t{0x7ff} << 52, (uint64_t{1} << 52) - 1};
    case DataType::kFloat16:
      return {15, uint64_t{0x1f} << 10, 0x3ff};
    case DataType::kBFloat16:
      return {15, uint64_t{0xff} << 7, 0x7f};
    default:
      return {31, uint64_t{0xff} << 23, (uint64_t{1} << 23) - 1};
  }
}

// BitsAt and SetBits read and write element `position` of a contiguous tensor as raw bits.
inline uint64_t BitsAt(const Tensor& tensor, int64_t position) {
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const char*>(tensor.data()) + position * ItemSize(tensor.dtype()),
              static_cast<size_t>(ItemSize(tensor.dtype())));
  return bits;
}
inline void SetBits(Tensor& tensor, int64_t position, uint64_t bits) {
  std::memcpy(static_cast<char*>(tensor.data()) + position * ItemSize(tensor.dtype()), &bits,
              static_cast<size_t>(ItemSize(tensor.dtype())));
}

// NanBits is a NaN of `dtype` with the given sign and mantissa payload (quiet: the mantissa's top
// bit set; signaling when `quiet` is false, the payload then nonzero).
inline uint64_t NanBits(DataType dtype, bool negative, bool quiet, uint64_t payload) {
  const FloatLayout layout = LayoutOf(dtype);
  const uint64_t quiet_bit = (layout.mantissa_mask + 1) >> 1;
  return (negative ? uint64_t{1} << layout.sign_shift : 0) | layout.exponent_mask |
         (quiet ? quiet_bit : 0) | payload;
}

// NumberBits is the bits of `value` (exact in every dtype) in `dtype`; -0.0 keeps its sign.
inline uint64_t NumberBits(DataType dtype, double value) {
  if (value == 0) return std::signbit(value) ? uint64_t{1} << LayoutOf(dtype).sign_shift : 0;
  return BitsAt(TensorFromValues(dtype, {1}, {value}), 0);
}

inline bool IsNanBits(DataType dtype, uint64_t bits) {
  const FloatLayout layout = LayoutOf(dtype);
  return (bits & layout.exponent_mask) == layout.exponent_mask &&
         (bits & layout.mantissa_mask) != 0;
}

// ExtremumCase is an input value and the source values scattered into one destination.
struct ExtremumCase {
  std::string name;
  uint64_t input;
  std::vector<uint64_t> sources;
};

// ExtremumCases: NaNs of both signs and several payloads (a signaling one too) among numbers,
// with a NaN input that beats the sources or loses to them; and zeros of both signs, below and
// above a number.
inline std::vector<ExtremumCase> ExtremumCases(DataType dtype) {
  const auto nan = [dtype](bool negative, bool quiet, uint64_t payload) {
    return NanBits(dtype, negative, quiet, payload);
  };
  const auto number = [dtype](double value) { return NumberBits(dtype, value); };
  return {
      {"nans_of_both_signs",
       nan(false, true, 3),
       {number(2), nan(false, true, 5), nan(true, true, 1), nan(false, false, 1), number(-1)}},
      {"positive_nans_input_greatest",
       nan(false, true, 0x1f),
       {number(1), nan(false, true, 2), nan(false, true, 9), nan(false, true, 4), number(-3)}},
      {"zeros_above_a_number",
       number(-0.0),
       {number(0.0), number(-0.0), number(-0.0), number(0.0), number(-1)}},
      {"zeros_below_a_number",
       number(0.0),
       {number(-0.0), number(0.0), number(0.0), number(-0.0), number(1)}},
  };
}

// AllOrders returns every permutation of `values` (positions, so that equal values still count as
// distinct arrivals).
inline std::vector<std::vector<uint64_t>> AllOrders(const std::vector<uint64_t>& values) {
  std::vector<int> order(values.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::vector<std::vector<uint64_t>> orders;
  do {
    std::vector<uint64_t>& permuted = orders.emplace_back();
    for (int i : order) permuted.push_back(values[i]);
  } while (std::next_permutation(order.begin(), order.end()));
  return orders;
}

// SpecExtremum is the bits the AMAX or AMIN of docs/semantics.md selects from the sources (and the
// input, with include_self): the NaN with the greatest bit pattern when there is one, else the
// largest (smallest) value, -0.0 ordered below +0.0.
inline uint64_t SpecExtremum(DataType dtype, Reduction reduce, uint64_t input,
                             const std::vector<uint64_t>& sources, bool include_self) {
  std::vector<uint64_t> values = sources;
  if (include_self) values.push_back(input);
  uint64_t greatest_nan = 0;
  bool any_nan = false;
  for (uint64_t bits : values) {
    if (IsNanBits(dtype, bits)) {
      greatest_nan = any_nan ? std::max(greatest_nan, bits) : bits;
      any_nan = true;
    }
  }
  if (any_nan) return greatest_nan;
  const int sign_shift = LayoutOf(dtype).sign_shift;
  const auto key = [&](uint64_t bits) {
    Tensor one(dtype, {1});
    SetBits(one, 0, bits);
    return std::make_pair(ElementAsDouble(one, 0), ((bits >> sign_shift) & 1) == 0 ? 1 : 0);
  };
  uint64_t chosen = values.front();
  for (uint64_t bits : values) {
    const bool better =
        reduce == Reduction::kAmax ? key(bits) > key(chosen) : key(bits) < key(chosen);
    if (better) chosen = bits;
  }
  return chosen;
}

}  // namespace tensorops::testing

#endif  // TENSOROPS_TESTS_EXTREMUM_RULE_H_
