// gpu::submit_pending_nowait: the thread's recorder submitted without a wait (its Submission is
// the PendingWork).
#include "kiln/core/vulkan/gpu_async.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/recorder.h"

namespace kiln::gpu {

std::unique_ptr<PendingWork> submit_pending_nowait() {
  if (!has_pending()) return nullptr;
  return detail::vk::tls_thread_recorder->submit();
}

}  // namespace kiln::gpu
