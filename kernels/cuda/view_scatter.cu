// CUDA kernels of SelectScatter, SliceScatter and DiagonalScatter: one fused pass that writes
// every result element once, from the source inside the window and from the input elsewhere
// (WindowMap), instead of the CPU's copy followed by a window write.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/walk.cuh"
#include "kernels/cuda/window_map.h"
#include "kernels/dispatch.h"

namespace tensorops::cuda {
namespace {

template <typename Elem>
__global__ void ViewScatterKernel(WindowMap map, int64_t count, const Elem* __restrict__ input,
                                  const Elem* __restrict__ source, Elem* __restrict__ out) {
  TENSOROPS_GRID_STRIDE_LOOP(position, count) {
    int64_t input_offset;
    const int64_t source_offset = map.Locate(position, &input_offset);
    out[position] = source_offset >= 0 ? source[source_offset] : input[input_offset];
  }
}

}  // namespace

absl::Status LaunchViewScatter(const ViewScatterPlan& plan, const WindowMap& map, void* result,
                               void* stream) {
  const int64_t count = NumElements(plan.result_shape);
  if (count == 0) return absl::OkStatus();
  return cpu::DispatchItemSize(ItemSize(plan.result_dtype), [&]<typename Elem>(TypeTag<Elem>) {
    ViewScatterKernel<Elem>
        <<<GridFor(count), kThreadsPerBlock, 0, static_cast<cudaStream_t>(stream)>>>(
            map, count, static_cast<const Elem*>(plan.input.data()),
            static_cast<const Elem*>(plan.src.data()), static_cast<Elem*>(result));
    return LaunchStatus("view_scatter");
  });
}

}  // namespace tensorops::cuda
