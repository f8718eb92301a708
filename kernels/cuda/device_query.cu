// QueryDevices for builds with CUDA: asks the CUDA runtime, which reports a missing driver or
// device as an error code rather than failing the process.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <string>

#include "kernels/device.h"

namespace tensorops {
namespace {

// WhyNoDevice says why the runtime found no device, in the words a user acts on: the runtime's
// own text for a machine without a driver ("CUDA driver version is insufficient for CUDA runtime
// version") reads as if the driver were old.
std::string WhyNoDevice(cudaError_t status) {
  if (status == cudaErrorInsufficientDriver) {
    // The runtime loads the driver's library itself; whether it can be loaded at all tells a
    // missing driver from an old one.
    if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL); driver != nullptr) {
      dlclose(driver);
      return "the NVIDIA driver is older than this build's CUDA runtime (" +
             std::to_string(CUDART_VERSION / 1000) + "." +
             std::to_string(CUDART_VERSION % 1000 / 10) + "): update the driver";
    }
    return "no NVIDIA driver found (libcuda.so.1 cannot be loaded)";
  }
  if (status == cudaErrorNoDevice) return "no NVIDIA GPU found";
  return std::string("CUDA runtime: ") + cudaGetErrorString(status);
}

}  // namespace

DeviceInventory QueryDevices() {
  DeviceInventory inventory;
  inventory.cuda_built = true;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    inventory.note = WhyNoDevice(status);
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
  if (inventory.cuda_devices.empty()) inventory.note = WhyNoDevice(cudaErrorNoDevice);
  return inventory;
}

}  // namespace tensorops
