#pragma once
// GPU time per shader (KILN_VULKAN_PROFILE=1, or =groups): each recorder brackets its dispatches with
// timestamps (written once all earlier work of the command buffer completed, so a dispatch's time
// includes waiting for the barrier before it) and adds them here after its submit completes. At
// exit the process prints the table to stderr, most time first.
#include <string>
#include <string_view>

namespace kiln::detail::vk {

/// The profile's name for a dispatch inside a replayed captured program: "captured: <shader>".
inline constexpr std::string_view kCapturedPrefix = "captured: ";

/// Whether dispatches are timed: KILN_VULKAN_PROFILE=1, read once, or set_profiling().
bool profiling();
/// KILN_VULKAN_PROFILE=groups: timed as with 1, each shader's dispatches counted apart by their
/// workgroup counts ("matmul_f32_t64w [12x64x1]"), to tell the shapes of one kernel apart.
bool profiling_by_groups();
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
