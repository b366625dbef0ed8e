#pragma once
// GLSL compute shaders compiled at run time through the glslang library (STYLE.md R8): the kernels
// generated from elementwise snippets and compile's fused chains. Each SPIR-V is found again by a
// digest of its source, in memory and in <cache_dir>/spirv/, so a second process starts warm.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kiln/core/vulkan/runtime/pipeline_cache.h"

namespace kiln::detail::vk {

/// What a compiler did so far (a snapshot).
struct GlslCounters {
  size_t compiles = 0;     ///< sources compiled by glslang
  size_t disk_hits = 0;    ///< SPIR-V read from the disk cache instead
  size_t memory_hits = 0;  ///< found in memory
};

/// Compiles GLSL compute sources (#version 450, target Vulkan 1.2 / SPIR-V 1.5) and keeps the results.
/// `#include "common/<file>"` resolves to the files of shaders/common/ built into libkiln
/// (embedded_glsl()). Thread-safe: glslang's process start-up runs once, each compile uses its
/// own glslang objects, lookups take a shared lock; two threads missing on one source may both
/// compile it, and one result is kept.
class GlslCompiler {
 public:
  GlslCompiler();
  ~GlslCompiler();
  GlslCompiler(const GlslCompiler&) = delete;
  GlslCompiler& operator=(const GlslCompiler&) = delete;

  /// SPIR-V for `source`; `name` labels messages and the ShaderCode. With a non-empty cache_dir,
  /// <cache_dir>/spirv/<digest>.spv is read when valid (one that is short or corrupt is ignored
  /// and rewritten) and written atomically after a compile; disk failures are not errors.
  /// The result lives as long as the compiler. Throws ValueError with glslang's log and the
  /// numbered source lines around each error when the source does not compile.
  const ShaderCode& compile(std::string_view name, const std::string& source,
                            const std::filesystem::path& cache_dir);

  GlslCounters counters() const;

 private:
  struct Entry {
    std::string name;
    std::vector<uint32_t> spirv;
    ShaderCode code;
  };
  mutable std::shared_mutex mutex_;  // guards entries_; entries are never removed
  std::unordered_map<std::string, std::unique_ptr<Entry>> entries_;  // by digest
  std::atomic<size_t> compiles_{0}, disk_hits_{0}, memory_hits_{0};
};

/// The process-wide compiler, created on first use (thread-safe), never destroyed.
GlslCompiler& glsl_compiler();

/// glsl_compiler().compile(name, source, cache_dir).
const ShaderCode& compile_glsl(std::string_view name, const std::string& source,
                               const std::filesystem::path& cache_dir);

/// The digest naming `source` in the caches: XXH3-128 of the source, the target, glslang's
/// version and the embedded shaders/common/ files, as 32 hex digits.
std::string glsl_digest(const std::string& source);

}  // namespace kiln::detail::vk
