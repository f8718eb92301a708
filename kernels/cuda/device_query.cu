// QueryDevices for builds with CUDA: asks the CUDA runtime, which reports a missing driver or
// device as an error code rather than failing the process.
#include <cuda_runtime.h>

#include "kernels/device.h"

namespace tensorops {

DeviceInventory QueryDevices() {
  DeviceInventory inventory;
  inventory.cuda_built = true;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    inventory.note = std::string("CUDA runtime: ") + cudaGetErrorString(status);
    // Clear the sticky last error so later CUDA calls start clean.
    cudaGetLastError();
    return inventory;
  }
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, ordinal) != cudaSuccess) continue;
    CudaDevice device;
    device.ordinal = ordinal;
    device.name = properties.name;
    device.total_memory_bytes = static_cast<int64_t>(properties.totalGlobalMem);
    device.compute_capability_major = properties.major;
    device.compute_capability_minor = properties.minor;
    inventory.cuda_devices.push_back(device);
  }
  if (inventory.cuda_devices.empty()) inventory.note = "CUDA runtime: no device found";
  return inventory;
}

}  // namespace tensorops
