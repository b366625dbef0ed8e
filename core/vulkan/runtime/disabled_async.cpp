// Submits without a wait in a build without Vulkan: nothing is ever recorded.
#include "kiln/core/vulkan/gpu_async.h"

namespace kiln::gpu {

std::unique_ptr<PendingWork> submit_pending_nowait() { return nullptr; }

}  // namespace kiln::gpu
