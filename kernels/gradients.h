// Gradients: what an op's Backward (declared beside its forward, kernels/<op>.h) returns.
#ifndef TENSOROPS_KERNELS_GRADIENTS_H_
#define TENSOROPS_KERNELS_GRADIENTS_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/tensor.h"

namespace tensorops {

// Gradients holds one gradient per differentiable input, by argument name: "input" and/or "src".
// ScatterNd with `shape` instead of an input has only "src"; Scatter with a scalar `value` has only
// "input". Each gradient has its argument's shape and dtype and is contiguous.
struct Gradients {
  std::vector<std::pair<std::string, Tensor>> by_argument;

  // Find returns the gradient of `argument`, or nullptr when the op has none for it.
  const Tensor* Find(std::string_view argument) const;
};

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_GRADIENTS_H_
