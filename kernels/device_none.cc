// QueryDevices for builds without CUDA.
#include "kernels/device.h"

namespace tensorops {

DeviceInventory QueryDevices() {
  DeviceInventory inventory;
  inventory.note = "built without CUDA";
  return inventory;
}

}  // namespace tensorops
