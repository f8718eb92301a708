// Checking an op's Backward (kernels/backward.h) against central finite differences of its forward,
// in float64 (and complex128 for the conjugate-Wirtinger convention). Each op's suite checks its
// own Backward with it (CONTRIBUTING.md); tests/backward_test.cc checks what spans the ops.
//
//   Tensor input = ..., source = ...;  // float64 or complex128, filled by FillValues
//   MaskedScatterArgs args{.input = input.view(), .mask = mask.view(), .source = source.view()};
//   ExpectGradientsMatchFiniteDifferences(
//       args, [](const MaskedScatterArgs& a) { return MaskedScatter(a); },
//       {{"input", &input}, {"src", &source}}, gen);
#ifndef TENSOROPS_TESTS_GRADIENT_CHECK_H_
#define TENSOROPS_TESTS_GRADIENT_CHECK_H_

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "kernels/gradients.h"
#include "kernels/tensor.h"
#include "tests/reference.h"

namespace tensorops::testing {

// How values are drawn: any (uniform in [-2, 2]); PROD-friendly (magnitudes in [0.5, 1.5], 30%
// exact zeros, so one and several zeros meet at destinations); distinct (for AMAX/AMIN: no ties,
// at least 1/8 apart, so finite differences are valid).
enum class Values { kAny, kProduct, kDistinct };

// Fills every tensor in `tensors` (float64 or complex128) with values of `kind`; distinct values
// are distinct across all of them.
inline void FillValues(Values kind, std::vector<Tensor*> tensors, absl::BitGen& gen) {
  int64_t total = 0;
  for (Tensor* t : tensors) total += t->numel();
  std::vector<double> pool(total);
  for (int64_t i = 0; i < total; ++i) pool[i] = (i - total / 2) * 0.125 + 0.0625;
  std::shuffle(pool.begin(), pool.end(), gen);
  int64_t next = 0;
  auto draw = [&]() -> double {
    switch (kind) {
      case Values::kAny:
        return absl::Uniform(gen, -2.0, 2.0);
      case Values::kProduct:
        if (absl::Bernoulli(gen, 0.3)) return 0.0;
        return absl::Uniform(gen, 0.5, 1.5) * (absl::Bernoulli(gen, 0.5) ? 1 : -1);
      case Values::kDistinct:
        return pool[next++];
    }
    return 0;
  };
  for (Tensor* t : tensors) {
    for (int64_t i = 0; i < t->numel(); ++i) {
      if (t->dtype() == DataType::kComplex128) {
        const double re = draw();
        const double im = kind == Values::kProduct && re == 0 ? 0 : absl::Uniform(gen, -1.0, 1.0);
        t->data_as<std::complex<double>>()[i] = {re, im};
      } else {
        t->data_as<double>()[i] = draw();
      }
    }
  }
}

// RandomGrad is a grad_output of `shape` (float64 or complex128) with parts uniform in [-1, 1].
inline Tensor RandomGrad(DataType dtype, const Shape& shape, absl::BitGen& gen) {
  const int64_t count = reference_internal::Count(shape);
  if (dtype == DataType::kComplex128) {
    std::vector<std::complex<double>> values(count);
    for (auto& v : values) v = {absl::Uniform(gen, -1.0, 1.0), absl::Uniform(gen, -1.0, 1.0)};
    return TensorFromComplex(dtype, shape, values);
  }
  std::vector<double> values(count);
  for (double& v : values) v = absl::Uniform(gen, -1.0, 1.0);
  return TensorFromValues(dtype, shape, values);
}

namespace gradient_check_internal {

inline constexpr double kStep = 1e-6;

// L = Re(sum(conj(grad) * forward())): the real loss whose gradient with respect to the result is
// `grad` under PyTorch's convention.
template <typename ForwardFn>
double Loss(const ForwardFn& forward, const Tensor& grad) {
  absl::StatusOr<Tensor> result = forward();
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return 0;
  double loss = 0;
  if (grad.dtype() == DataType::kComplex128) {
    const auto* g = grad.data_as<std::complex<double>>();
    const auto* r = result->data_as<std::complex<double>>();
    for (int64_t i = 0; i < grad.numel(); ++i) loss += (std::conj(g[i]) * r[i]).real();
  } else {
    const double* g = grad.data_as<double>();
    const double* r = result->data_as<double>();
    for (int64_t i = 0; i < grad.numel(); ++i) loss += g[i] * r[i];
  }
  return loss;
}

// Central difference of the loss along one real coordinate, perturbed in place.
template <typename ForwardFn>
double Derivative(const ForwardFn& forward, const Tensor& grad, double& coordinate) {
  const double saved = coordinate;
  coordinate = saved + kStep;
  const double plus = Loss(forward, grad);
  coordinate = saved - kStep;
  const double minus = Loss(forward, grad);
  coordinate = saved;
  return (plus - minus) / (2 * kStep);
}

}  // namespace gradient_check_internal

// ExpectGradientsMatchFiniteDifferences compares Backward(args, grad) (the op's own, found by the
// type of `args`) with central finite differences of L = Re(sum(conj(grad) * forward(args))) for
// a random grad: the real and imaginary parts of a complex gradient are dL/d(re) and dL/d(im).
// `differentiable` names each argument Backward must return a gradient for, with the float64 or
// complex128 tensor that `args` views (perturbed in place, then restored).
template <typename Args, typename ForwardFn>
void ExpectGradientsMatchFiniteDifferences(
    const Args& args, const ForwardFn& forward,
    const std::vector<std::pair<std::string, Tensor*>>& differentiable, absl::BitGen& gen) {
  using gradient_check_internal::Derivative;
  const auto run_forward = [&] { return forward(args); };
  absl::StatusOr<Tensor> result = run_forward();
  ASSERT_TRUE(result.ok()) << result.status();
  const Tensor grad = RandomGrad(result->dtype(), result->shape(), gen);
  absl::StatusOr<Gradients> gradients = Backward(args, grad.view());
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  ASSERT_EQ(gradients->by_argument.size(), differentiable.size());
  for (const std::pair<std::string, Tensor*>& entry : differentiable) {
    const std::string& name = entry.first;
    Tensor* const argument = entry.second;
    SCOPED_TRACE(name);
    const Tensor* analytic = gradients->Find(name);
    ASSERT_NE(analytic, nullptr);
    ASSERT_EQ(reference_internal::ShapeString(analytic->shape()),
              reference_internal::ShapeString(argument->shape()));
    ASSERT_EQ(analytic->dtype(), argument->dtype());
    for (int64_t k = 0; k < argument->numel(); ++k) {
      if (argument->dtype() == DataType::kComplex128) {
        auto& element = argument->data_as<std::complex<double>>()[k];
        double* parts = reinterpret_cast<double*>(&element);
        const std::complex<double> numeric(Derivative(run_forward, grad, parts[0]),
                                           Derivative(run_forward, grad, parts[1]));
        const std::complex<double> got = analytic->data_as<std::complex<double>>()[k];
        EXPECT_LE(std::abs(got - numeric), 1e-6 * std::max(1.0, std::abs(numeric)))
            << name << ".flat[" << k << "]: backward " << got << ", finite difference " << numeric;
      } else {
        const double numeric = Derivative(run_forward, grad, argument->data_as<double>()[k]);
        const double got = analytic->data_as<double>()[k];
        EXPECT_NEAR(got, numeric, 1e-6 * std::max(1.0, std::abs(numeric)))
            << name << ".flat[" << k << "]";
      }
    }
  }
}

}  // namespace tensorops::testing

#endif  // TENSOROPS_TESTS_GRADIENT_CHECK_H_
