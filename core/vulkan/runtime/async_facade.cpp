// gpu::submit_pending_nowait: the thread's recorder submitted without a wait.
#include "kiln/core/vulkan/gpu_async.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/recorder.h"

namespace kiln::gpu {
namespace {

class SubmittedWork final : public PendingWork {
 public:
  explicit SubmittedWork(std::unique_ptr<detail::vk::Submission> s) : submission_(std::move(s)) {}
  bool done() override { return submission_->done(); }
  void wait() override { submission_->wait(); }

 private:
  std::unique_ptr<detail::vk::Submission> submission_;
};

}  // namespace

std::unique_ptr<PendingWork> submit_pending_nowait() {
  namespace vk = detail::vk;
  if (!vk::tls_thread_recorder || vk::tls_thread_recorder->pending() == 0) return nullptr;
  std::unique_ptr<vk::Submission> s = vk::tls_thread_recorder->submit();
  if (!s) return nullptr;
  return std::make_unique<SubmittedWork>(std::move(s));
}

}  // namespace kiln::gpu
