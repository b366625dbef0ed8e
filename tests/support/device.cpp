#include "support/device.h"

#include <kiln/kiln.h>

namespace kiln::test {

bool gpu_default() { return default_device() == Device::gpu; }

DeviceMemory default_device_memory() {
  const MemoryStats s = memory_stats();
  if (gpu_default()) return {s.device_active_bytes, s.device_peak_bytes};
  return {s.active_bytes, s.peak_bytes};
}

}  // namespace kiln::test
