// WindowMap: the view scatters (SelectScatter, SliceScatter, DiagonalScatter) as one fused pass.
// The CPU copies the input and then writes the source into a strided window of the result; the
// GPU instead writes every result element once, deciding per element whether it lies in the
// window (and where in the source) from its coordinates:
//
//   WindowMap map = *MakeWindowMap(plan);               // on the host
//   int64_t input_offset;
//   int64_t source = map.Locate(position, &input_offset);  // in the kernel: -1 = not in window
//
// A window of these ops moves along each result dimension independently, except the diagonal,
// whose one window dimension moves two result dimensions together. MakeWindowMap derives that
// from the plan's window strides and returns nullopt for a window it cannot express (then the
// call runs on the CPU). Plain host/device code: tested on the CPU (window_map_test).
#ifndef TENSOROPS_KERNELS_CUDA_WINDOW_MAP_H_
#define TENSOROPS_KERNELS_CUDA_WINDOW_MAP_H_

#include <cstdint>
#include <optional>

#include "kernels/half.h"
#include "kernels/shape.h"
#include "kernels/view_scatter.h"

namespace tensorops::cuda {

struct WindowMap {
  // An empty window: every element comes from the input.
  bool empty = false;
  int rank = 0;
  int window_rank = 0;
  int64_t sizes[kMaxRank] = {};
  // The input's strides at the result's shape (0 where broadcast).
  int64_t input_strides[kMaxRank] = {};
  // Per result dimension: the window's first coordinate, the window dimension that moves it (-1:
  // fixed at `start`) and by how much per step.
  int64_t start[kMaxRank] = {};
  int window_dim[kMaxRank] = {};
  int64_t step[kMaxRank] = {};
  // Per window dimension: its size and the source's stride along it.
  int64_t window_sizes[kMaxRank] = {};
  int64_t source_strides[kMaxRank] = {};

  // Locate returns the source offset of result element `position` (row-major), or -1 when it is
  // not in the window; `input_offset` receives the input's offset for it either way.
  TENSOROPS_HOST_DEVICE int64_t Locate(int64_t position, int64_t* input_offset) const {
    int64_t window[kMaxRank];
    for (int k = 0; k < window_rank; ++k) window[k] = -1;
    int64_t in = 0;
    bool inside = true;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t coordinate = position % sizes[d];
      position /= sizes[d];
      in += coordinate * input_strides[d];
      const int64_t from_start = coordinate - start[d];
      const int k = window_dim[d];
      if (k < 0) {
        inside = inside && from_start == 0;
        continue;
      }
      if (from_start < 0 || from_start % step[d] != 0 || from_start / step[d] >= window_sizes[k]) {
        inside = false;
        continue;
      }
      const int64_t at = from_start / step[d];
      // The diagonal: both result dimensions must agree on the window coordinate.
      if (window[k] >= 0 && window[k] != at) inside = false;
      window[k] = at;
    }
    *input_offset = in;
    if (!inside || empty) return -1;
    int64_t source = 0;
    for (int k = 0; k < window_rank; ++k)
      source += (window[k] < 0 ? 0 : window[k]) * source_strides[k];
    return source;
  }
};

// MakeWindowMap expresses `plan` (whose result is contiguous) as a WindowMap, or nullopt.
inline std::optional<WindowMap> MakeWindowMap(const ViewScatterPlan& plan) {
  WindowMap map;
  const Shape result_strides = ContiguousStrides(plan.result_shape);
  map.rank = static_cast<int>(plan.result_shape.size());
  map.window_rank = static_cast<int>(plan.window_shape.size());
  map.empty = NumElements(plan.window_shape) == 0;
  if (map.rank > kMaxRank || map.window_rank > kMaxRank) return std::nullopt;
  int64_t offset = plan.window_offset;
  for (int d = 0; d < map.rank; ++d) {
    map.sizes[d] = plan.result_shape[d];
    map.input_strides[d] = plan.input.strides()[d];
    map.start[d] = offset / result_strides[d];
    offset %= result_strides[d];
    map.window_dim[d] = -1;
  }
  for (int k = 0; k < map.window_rank; ++k) {
    map.window_sizes[k] = plan.window_shape[k];
    map.source_strides[k] = plan.src.strides()[k];
    if (plan.window_shape[k] <= 1) continue;  // Never moves: nothing to decompose.
    // Split the window stride into result strides, largest first: each window dimension of these
    // ops moves one result dimension by a step (two by one each on a diagonal).
    int64_t remaining = plan.window_strides[k];
    for (int d = 0; d < map.rank && remaining > 0; ++d) {
      if (plan.result_shape[d] <= 1) continue;
      const int64_t step = remaining / result_strides[d];
      if (step == 0) continue;
      if (map.window_dim[d] >= 0) return std::nullopt;
      map.window_dim[d] = k;
      map.step[d] = step;
      remaining -= step * result_strides[d];
    }
    if (remaining != 0) return std::nullopt;
  }
  return map;
}

}  // namespace tensorops::cuda

#endif  // TENSOROPS_KERNELS_CUDA_WINDOW_MAP_H_
