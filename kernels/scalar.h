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

// ScalarToTensor returns a rank-0 tensor of `dtype` holding `scalar`, converted under PyTorch's
// rules, or INVALID_ARGUMENT naming `op` and `arg` when it cannot be represented: an integer target
// out of range (unsigned targets also take values down to -max and wrap, so -1 becomes 255 in
// uint8), NaN or infinity into an integer, a finite value beyond a floating target's range (inf
// and NaN themselves are fine), a complex value into a real dtype. Any nonzero value into bool is
// true.
absl::StatusOr<Tensor> ScalarToTensor(const Scalar& scalar, DataType dtype, std::string_view op,
                                      std::string_view arg);

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_SCALAR_H_
