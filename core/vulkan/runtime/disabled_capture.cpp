// Captured programs in a build without Vulkan: there is nothing to capture.
#include "kiln/core/error.h"
#include "kiln/core/vulkan/gpu_capture.h"

namespace kiln::gpu {

struct CapturedProgram {};

void begin_capture() { throw DeviceError::of("gpu capture", "kiln was built without the Vulkan backend"); }
std::shared_ptr<const CapturedProgram> end_capture() {
  throw DeviceError::of("gpu capture", "kiln was built without the Vulkan backend");
}
void abort_capture() noexcept {}
bool capturing() { return false; }
size_t captured_commands(const CapturedProgram&) { return 0; }
size_t captured_barriers(const CapturedProgram&) { return 0; }
void replay_and_wait(const std::shared_ptr<const CapturedProgram>&) {
  throw DeviceError::of("gpu capture", "kiln was built without the Vulkan backend");
}
void run_captured(const std::shared_ptr<const CapturedProgram>&, std::span<const Array>,
                  std::span<const Array>, std::span<const Array>, std::span<Array>) {
  throw DeviceError::of("gpu capture", "kiln was built without the Vulkan backend");
}

}  // namespace kiln::gpu
