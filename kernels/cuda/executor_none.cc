// CreateCudaExecutor in builds without CUDA.
#include "kernels/cuda/executor.h"

namespace tensorops {

absl::StatusOr<std::unique_ptr<DeviceExecutor>> CreateCudaExecutor(const CudaExecutorOptions&) {
  return absl::FailedPreconditionError("this server was built without CUDA");
}

}  // namespace tensorops
