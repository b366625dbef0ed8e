#pragma once
// GPU work submitted without waiting (async_eval): eval hands a thread's recording to the queue and
// returns; whoever needs the results later completes the work. Part of the gpu facade (STYLE.md
// R9): no Vulkan types; runtime/async_facade.cpp implements it, runtime/disabled_async.cpp stands
// in without Vulkan.
#include <memory>

namespace kiln::gpu {

/// Work on the GPU queue, not yet known to be complete. It keeps what the work uses alive until
/// it is; destroying it waits for the work.
class PendingWork {
 public:
  virtual ~PendingWork() = default;
  /// Whether the work has completed (never blocks). Throws DeviceError (device lost).
  virtual bool done() = 0;
  /// Blocks until the work has completed. Throws DeviceError (device lost).
  virtual void wait() = 0;
};

/// Submits this thread's recorded work without waiting for it; null when nothing was recorded.
/// Any later submit, from any thread, runs after it and sees its writes. Throws DeviceError (a
/// failed submit); the recorded work is then dropped.
std::unique_ptr<PendingWork> submit_pending_nowait();

}  // namespace kiln::gpu
