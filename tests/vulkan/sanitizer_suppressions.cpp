// Sanitizer suppressions of the Vulkan test binaries only: the sanitizer runtimes call these hooks
// at start-up, so the suppressions hold under ctest and when a binary is run by hand, and nothing
// else in kiln (library, other tests) is affected. Both concern Mesa's lavapipe (22.3), the CPU
// device CI runs on; neither names a kiln frame.

// LeakSanitizer: the process-wide Vulkan context is never destroyed (work may still run on other
// threads at exit), so the driver objects behind its pipelines are still held when the process
// ends, and lavapipe keeps the only pointers to some (48-byte blocks, one per pipeline) where
// LeakSanitizer does not look. Private contexts, which the tests destroy, leak nothing without
// this (check with --gtest_filter='*StagingPath*:*PipelinesAreCached*' and the line removed).
extern "C" const char* __lsan_default_suppressions() { return "leak:libvulkan_lvp.so\n"; }

// ThreadSanitizer: lavapipe hands submitted work to its queue thread through futexes (Mesa's
// util_queue fences), which ThreadSanitizer cannot see, so the queue thread freeing what a
// recording thread allocated inside the driver looks like a race. Only reports with a frame in
// the driver are dropped; kiln's own shared state (queue, pipelines, allocator, frames) is checked.
extern "C" const char* __tsan_default_suppressions() { return "race:libvulkan_lvp.so\n"; }
