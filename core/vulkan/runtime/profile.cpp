#include "kiln/core/vulkan/runtime/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace kiln::detail::vk {
namespace {

struct Entry {
  size_t dispatches = 0;
  double seconds = 0;
};

struct Profile;
std::string format_report(Profile& p);

struct Profile {
  std::mutex mutex;  // guards entries
  std::map<std::string, Entry, std::less<>> entries;
  ~Profile() {
    const std::string table = format_report(*this);
    if (!table.empty()) std::fputs(table.c_str(), stderr);
  }
};

Profile& profile() {
  static Profile p;  // destroyed at exit, after printing what was timed
  return p;
}

bool env_is(const char* value) {
  const char* v = std::getenv("KILN_VULKAN_PROFILE");
  return v && std::strcmp(v, value) == 0;
}

std::atomic<bool>& enabled() {
  static std::atomic<bool> on{env_is("1") || env_is("groups")};
  return on;
}

}  // namespace

bool profiling() { return enabled().load(std::memory_order_relaxed); }
bool profiling_by_groups() {
  static const bool by_groups = env_is("groups");
  return by_groups;
}
void set_profiling(bool on) { enabled().store(on, std::memory_order_relaxed); }

void profile_add(std::string_view shader, double seconds) {
  Profile& p = profile();
  std::lock_guard lock(p.mutex);
  auto it = p.entries.find(shader);
  if (it == p.entries.end()) it = p.entries.emplace(std::string(shader), Entry{}).first;
  ++it->second.dispatches;
  it->second.seconds += seconds;
}

std::string profile_report() { return format_report(profile()); }

namespace {
std::string format_report(Profile& p) {
  std::vector<std::pair<std::string, Entry>> rows;
  double total = 0;
  {
    std::lock_guard lock(p.mutex);
    for (const auto& [name, e] : p.entries) {
      rows.emplace_back(name, e);
      // A replayed program's own dispatches are inside its "captured program" row already.
      if (!name.starts_with(kCapturedPrefix)) total += e.seconds;
    }
  }
  if (rows.empty()) return {};
  std::ranges::sort(rows, [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  std::string s = fmt::format(
      "kiln GPU time by shader (KILN_VULKAN_PROFILE): {:.3f} ms in all (\"{}\" rows: inside \"captured "
      "program\")\n",
      total * 1e3, kCapturedPrefix);
  size_t width = 32;  // the longest name (a captured program's row names its size)
  for (const auto& row : rows) width = std::max(width, row.first.size());
  s += fmt::format("{:<{}} {:>10} {:>12} {:>10} {:>7}\n", "shader", width, "dispatches", "total ms",
                   "mean us", "share");
  for (const auto& [name, e] : rows)
    s += fmt::format("{:<{}} {:>10} {:>12.3f} {:>10.2f} {:>6.1f}%\n", name, width, e.dispatches,
                     e.seconds * 1e3, e.seconds / static_cast<double>(e.dispatches) * 1e6,
                     total > 0 ? 100 * e.seconds / total : 0.0);
  return s;
}
}  // namespace

void profile_clear() {
  Profile& p = profile();
  std::lock_guard lock(p.mutex);
  p.entries.clear();
}

}  // namespace kiln::detail::vk
