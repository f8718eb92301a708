// Scalar: a single number sent in place of a tensor (Scatter's `value`), converted to a tensor's
// dtype under PyTorch's rules: floats truncate toward zero into integers, and a value that does
// not fit the target dtype is rejected instead of wrapping.
//
//   absl::StatusOr<Tensor> value = ScalarToTensor(Scalar(2.5), DataType::kInt32, "scatter",
//   "value");
//   // a rank-0 int32 tensor holding 2
#ifndef TENSOROPS_KERNELS_SCALAR_H_
#define TENSOROPS_KERNELS_SCALAR_H_

#include <complex>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"
#include "kernels/tensor.h"

namespace tensorops {

// Scalar holds one of bool, int64, double or complex<double>.
class Scalar {
 public:
  using Value = std::variant<bool, int64_t, double, std::complex<double>>;

  Scalar() : value_(int64_t{0}) {}
  explicit Scalar(bool value) : value_(value) {}
  explicit Scalar(int64_t value) : value_(value) {}
  explicit Scalar(double value) : value_(value) {}
  explicit Scalar(std::complex<double> value) : value_(value) {}

  const Value& value() const { return value_; }
  // ToString prints the value as error messages show it.
  std::string ToString() const;

 private:
  Value value_;
};

// ScalarToTensor returns a rank-0 tensor of `dtype` holding `scalar`, or INVALID_ARGUMENT naming
// `op` and `arg` when the value cannot be represented (out of the integer range, NaN or infinity
// into an integer, a complex value into a real dtype, a non-0/1 integer into bool is allowed and
// means true, as in PyTorch).
absl::StatusOr<Tensor> ScalarToTensor(const Scalar& scalar, DataType dtype, std::string_view op,
                                      std::string_view arg);

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_SCALAR_H_
