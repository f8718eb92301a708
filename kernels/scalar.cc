#include "kernels/scalar.h"

#include <cmath>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/dispatch.h"

namespace tensorops {

std::string Scalar::ToString() const {
  struct Printer {
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(int64_t v) const { return absl::StrCat(v); }
    std::string operator()(double v) const { return absl::StrCat(v); }
    std::string operator()(std::complex<double> v) const {
      return absl::StrFormat("(%g%+gj)", v.real(), v.imag());
    }
  };
  return std::visit(Printer{}, value_);
}

namespace {

// The largest finite value of a floating storage type.
template <typename T>
double FloatingMax() {
  if constexpr (std::is_same_v<T, Float16>) {
    return 65504.0;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return 3.3895313892515355e38;  // (2 - 2^-7) * 2^127.
  } else {
    return static_cast<double>(std::numeric_limits<T>::max());
  }
}

// Converts a real number to T under c10's `overflows` rule, or returns false when it does not
// fit: integers must lie in the target's range, except that unsigned targets also take values
// down to -max and wrap (PyTorch keeps `-1` -> 255 for uint8); floats truncate toward zero first;
// floating targets reject finite values beyond their largest finite value but take inf and NaN.
template <typename T>
bool ConvertReal(double real, bool is_integer, int64_t integer, T* out) {
  if constexpr (std::is_same_v<T, bool>) {
    *out = is_integer ? integer != 0 : real != 0.0;
    return true;
  } else if constexpr (std::is_integral_v<T>) {
    // As doubles the bounds are exact: int64's max + 1 is 2^63.
    const double lowest = std::is_signed_v<T> ? static_cast<double>(std::numeric_limits<T>::min())
                                              : -static_cast<double>(std::numeric_limits<T>::max());
    const double end = static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
    if (is_integer) {
      const int64_t lowest_integer = std::is_signed_v<T>
                                         ? static_cast<int64_t>(std::numeric_limits<T>::min())
                                         : -static_cast<int64_t>(std::numeric_limits<T>::max());
      if (integer < lowest_integer ||
          integer > static_cast<int64_t>(std::numeric_limits<T>::max())) {
        return false;
      }
      *out = static_cast<T>(integer);
      return true;
    }
    const double truncated = std::trunc(real);  // NaN and infinities fail the range test.
    if (!(truncated >= lowest && truncated < end)) return false;
    *out = std::is_signed_v<T> ? static_cast<T>(truncated)
                               : static_cast<T>(static_cast<int64_t>(truncated));
    return true;
  } else {
    const double number = is_integer ? static_cast<double>(integer) : real;
    if (std::isfinite(number) && std::abs(number) > FloatingMax<T>()) return false;
    if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
      *out = T(static_cast<float>(number));
    } else {
      *out = static_cast<T>(number);
    }
    return true;
  }
}

}  // namespace

absl::StatusOr<Tensor> ScalarToTensor(const Scalar& scalar, DataType dtype, std::string_view op,
                                      std::string_view arg) {
  Tensor tensor(dtype, {});
  const bool ok = DispatchDataType(dtype, [&]<typename T>(TypeTag<T>) {
    T* out = tensor.data_as<T>();
    const Scalar::Value& value = scalar.value();
    if (const auto* complex_value = std::get_if<std::complex<double>>(&value)) {
      if constexpr (internal::IsComplexType<T>::value) {
        *out = T(*complex_value);
        return true;
      } else {
        return false;
      }
    }
    double real = 0.0;
    int64_t integer = 0;
    bool is_integer = true;
    if (const auto* b = std::get_if<bool>(&value)) {
      integer = *b ? 1 : 0;
    } else if (const auto* i = std::get_if<int64_t>(&value)) {
      integer = *i;
    } else {
      real = std::get<double>(value);
      is_integer = false;
    }
    if constexpr (internal::IsComplexType<T>::value) {
      *out = T(is_integer ? static_cast<double>(integer) : real);
      return true;
    } else {
      return ConvertReal<T>(real, is_integer, integer, out);
    }
  });
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s = %s cannot be converted to %s without overflow or loss of the "
                        "imaginary part",
                        op, arg, scalar.ToString(), DataTypeName(dtype)));
  }
  return tensor;
}

}  // namespace tensorops
