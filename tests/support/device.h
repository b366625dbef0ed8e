#pragma once
// Which device a test runs on. The op suites run twice under ctest: as they are (the CPU) and as
// gpu.<Suite>.<Test> with KILN_DEVICE=gpu, the GPU as the default device (lavapipe in CI). A
// check whose outcome differs by design between the devices asks gpu_default() and says why.
#include <cstddef>

namespace kiln::test {

/// True when the GPU is the default device (the gpu. pass).
bool gpu_default();

/// memory_stats()'s live and peak bytes where the default device keeps arrays: the host
/// allocator's on the CPU, the device suballocator's on the GPU.
struct DeviceMemory {
  size_t active_bytes, peak_bytes;
};
DeviceMemory default_device_memory();

}  // namespace kiln::test
