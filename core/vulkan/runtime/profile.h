#pragma once
// GPU time per shader (KILN_VULKAN_PROFILE=1): each recorder brackets its dispatches with
// timestamps (written once all earlier work of the command buffer completed, so a dispatch's time
// includes waiting for the barrier before it) and adds them here after its submit completes. At
// exit the process prints the table to stderr, most time first.
#include <string>
#include <string_view>

namespace kiln::detail::vk {

/// Whether dispatches are timed: KILN_VULKAN_PROFILE=1, read once, or set_profiling().
bool profiling();
/// Turns timing on or off for recordings begun from now on (tests).
void set_profiling(bool on);
/// Adds one timed dispatch of `shader`. Thread-safe.
void profile_add(std::string_view shader, double seconds);
/// The table so far (shader, dispatches, total and mean time), most time first; empty when nothing
/// was timed.
std::string profile_report();
/// Forgets what was timed.
void profile_clear();

}  // namespace kiln::detail::vk
