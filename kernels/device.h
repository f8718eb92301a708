// What accelerators this process can use, found once at start-up.
//
//   DeviceInventory inventory = QueryDevices();
//   if (inventory.cuda_devices.empty()) LOG("CPU only: " + inventory.note);
#ifndef TENSOROPS_KERNELS_DEVICE_H_
#define TENSOROPS_KERNELS_DEVICE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tensorops {

// CudaDevice describes one visible GPU.
struct CudaDevice {
  int ordinal = 0;
  std::string name;
  int64_t total_memory_bytes = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
};

// DeviceInventory is what QueryDevices found.
struct DeviceInventory {
  // Whether this binary was built with CUDA support.
  bool cuda_built = false;
  std::vector<CudaDevice> cuda_devices;
  // Why there are no GPUs when there are none ("built without CUDA", the CUDA runtime's error).
  std::string note;
};

// QueryDevices lists the GPUs the CUDA runtime reports. Never fails: without CUDA support, a
// driver or a device it returns an empty list and says why in `note`.
DeviceInventory QueryDevices();

}  // namespace tensorops

#endif  // TENSOROPS_KERNELS_DEVICE_H_
