#pragma once
// Compute pipelines, created on first use and found again by a digest of (SPIR-V, specialization
// constants, binding count) (STYLE.md R8). Backed by a VkPipelineCache whose contents are saved
// to disk, so a second process creates its pipelines warm.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kiln/core/vulkan/runtime/vulkan_api.h"

namespace kiln::detail::vk {

class Context;

/// SPIR-V words with their digest (XXH3-64), computed once.
struct ShaderCode {
  std::string_view name;  ///< for messages
  std::span<const uint32_t> spirv;
  uint64_t digest = 0;
  /// Digests `spirv`. The words must outlive every pipeline made from them.
  static ShaderCode of(std::string_view name, std::span<const uint32_t> spirv);
};

/// A built-in shader variant by name (shaders/**/*.comp). Throws NotImplemented if none has it.
const ShaderCode& builtin_shader(std::string_view name);

/// What a pipeline is made of. Specialization constant i gets id i (id 0 is the workgroup size
/// by the shaders' convention, local_size_x_id = 0).
struct PipelineKey {
  const ShaderCode* shader = nullptr;
  std::span<const uint32_t> spec;
  uint32_t bindings = 0;
};

struct Pipeline {
  VkPipeline pipeline = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  uint32_t bindings = 0;
};

/// One compiler statistic of a pipeline's executable (VK_KHR_pipeline_executable_properties), as
/// the driver names it: NVIDIA's "Register Count", lavapipe's instruction counts, ...
struct PipelineStatistic {
  std::string executable;  ///< the driver's name for the compiled stage
  std::string name;
  double value = 0;  ///< booleans as 0 / 1
};

class PipelineCache {
 public:
  /// Loads `<cache_dir>/<file_name()>` when it exists and matches the device (a file that does
  /// not is ignored). An empty cache_dir keeps nothing on disk.
  PipelineCache(Context& ctx, std::filesystem::path cache_dir);
  /// Saves the cache if pipelines were created since the last save.
  ~PipelineCache();
  PipelineCache(const PipelineCache&) = delete;
  PipelineCache& operator=(const PipelineCache&) = delete;

  /// The pipeline for `key`, created on first use. Thread-safe: hits take a shared lock; a miss
  /// creates the pipeline outside the lock (two threads may both create it; one copy is kept).
  /// Throws DeviceError if the driver rejects the shader.
  const Pipeline& get(const PipelineKey& key);

  /// Writes the VkPipelineCache data to disk if it changed: a temporary file, fsync, rename, so
  /// a reader never sees half a file. Failures to write are not errors (the cache is an
  /// optimisation); returns whether a file was written.
  bool save();
  /// The file the cache is kept in (empty path when there is no disk cache).
  std::filesystem::path path() const { return path_; }
  /// Bytes of cache data read from disk at start-up and accepted (0 when cold).
  size_t loaded_bytes() const { return loaded_bytes_; }
  /// Pipelines created (misses) so far.
  size_t created() const;
  /// The compiler's statistics for a pipeline made here, when the context captures them
  /// (DeviceCaps::pipeline_stats); empty otherwise. With ContextOptions::pipeline_stats each new
  /// pipeline's are also printed to stderr, one line per pipeline.
  std::vector<PipelineStatistic> statistics(const Pipeline& pipeline) const;

 private:
  struct Entry {
    uint64_t shader_digest;
    std::vector<uint32_t> spec;
    uint32_t bindings;
    Pipeline pipeline;
  };
  void print_statistics(const PipelineKey& key, const Pipeline& pipeline) const;

  Context& ctx_;
  std::filesystem::path path_;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  size_t loaded_bytes_ = 0;

  mutable std::shared_mutex mutex_;  // guards entries_, created_, dirty_
  std::unordered_map<uint64_t, std::unique_ptr<Entry>> entries_;
  std::vector<std::unique_ptr<Entry>> collided_;  // digest collisions, kept apart
  size_t created_ = 0;
  bool dirty_ = false;
  std::mutex save_mutex_;  // one writer of the file at a time
};

/// The folder ContextOptions::from_env() picks: KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else
/// $HOME/.cache/kiln, else empty (no disk cache).
std::filesystem::path default_cache_dir();

}  // namespace kiln::detail::vk
