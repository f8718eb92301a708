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

// Converts a real number to T, or returns false when it does not fit.
template <typename T>
bool ConvertReal(double real, bool is_integer, int64_t integer, T* out) {
  if constexpr (std::is_same_v<T, bool>) {
    *out = is_integer ? integer != 0 : real != 0.0;
    return true;
  } else if constexpr (std::is_integral_v<T>) {
    if (is_integer) {
      if (integer < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
          integer > static_cast<int64_t>(std::numeric_limits<T>::max())) {
        return false;
      }
      *out = static_cast<T>(integer);
      return true;
    }
    // Truncate toward zero, then require the result to fit (NaN and infinities never do). The
    // upper bound is exclusive: max + 1.0 is a power of two, exact in double even for int64.
    const double truncated = std::trunc(real);
    if (!(truncated >= static_cast<double>(std::numeric_limits<T>::min()) &&
          truncated < static_cast<double>(std::numeric_limits<T>::max()) + 1.0)) {
      return false;
    }
    *out = static_cast<T>(truncated);
    return true;
  } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    *out = T(static_cast<float>(is_integer ? static_cast<double>(integer) : real));
    return true;
  } else {
    *out = static_cast<T>(is_integer ? static_cast<double>(integer) : real);
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
