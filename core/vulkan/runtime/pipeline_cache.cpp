#include "kiln/core/vulkan/runtime/pipeline_cache.h"

#include <fcntl.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/shader_table.h"

namespace kiln::detail::vk {
namespace {

uint64_t key_digest(const PipelineKey& k) {
  // One XXH3 call over the key packed on the stack (the common case: a few constants), the
  // streaming state otherwise; this runs on every dispatch.
  constexpr size_t kPackedSpec = 13;
  if (k.spec.size() <= kPackedSpec) {
    std::array<uint32_t, 3 + kPackedSpec> words{};
    std::memcpy(words.data(), &k.shader->digest, sizeof k.shader->digest);
    words[2] = k.bindings;
    std::ranges::copy(k.spec, words.begin() + 3);
    return XXH3_64bits(words.data(), (3 + k.spec.size()) * sizeof(uint32_t));
  }
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, &k.shader->digest, sizeof k.shader->digest);
  XXH3_64bits_update(&state, &k.bindings, sizeof k.bindings);
  XXH3_64bits_update(&state, k.spec.data(), k.spec.size_bytes());
  return XXH3_64bits_digest(&state);
}

// Writes `data` to `path` so that readers see the old file or the whole new one: a temporary file
// beside it, fsync, rename. Returns false on any failure.
bool write_atomically(const std::filesystem::path& path, const std::vector<char>& data) {
  static std::atomic<uint64_t> counter{0};
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  const std::filesystem::path tmp =
      path.string() + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const bool ok = done == data.size() && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

ShaderCode ShaderCode::of(std::string_view name, std::span<const uint32_t> spirv) {
  return ShaderCode{name, spirv, XXH3_64bits(spirv.data(), spirv.size_bytes())};
}

const ShaderCode& builtin_shader(std::string_view name) {
  // Filled once (thread-safe static initialisation); read-only afterwards.
  static const std::unordered_map<std::string_view, ShaderCode> table = [] {
    std::unordered_map<std::string_view, ShaderCode> t;
    for (const EmbeddedShader& s : embedded_shaders()) t.emplace(s.name, ShaderCode::of(s.name, s.spirv));
    return t;
  }();
  auto it = table.find(name);
  if (it == table.end()) throw NotImplemented::of("vulkan", "no built-in shader of that name", "{}", name);
  return it->second;
}

std::filesystem::path default_cache_dir() {
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::filesystem::path(d) / "kiln";
  if (const char* d = std::getenv("HOME"); d && *d) return std::filesystem::path(d) / ".cache" / "kiln";
  return {};
}

PipelineCache::PipelineCache(Context& ctx, std::filesystem::path cache_dir) : ctx_(ctx) {
  const DeviceCaps& caps = ctx.caps();
  std::vector<char> data;
  if (!cache_dir.empty()) {
    std::string uuid;
    for (uint8_t b : caps.pipeline_cache_uuid) uuid += fmt::format("{:02x}", b);
    path_ = cache_dir / fmt::format("vulkan-pipelines-{:04x}-{:04x}-{:x}-{}.bin", caps.vendor_id,
                                    caps.device_id, caps.driver_version, uuid);
    std::ifstream in(path_, std::ios::binary);
    if (in) data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    // The driver checks the header too, but not every driver survives a file from another one:
    // accept only a header (VkPipelineCacheHeaderVersionOne) naming this device.
    VkPipelineCacheHeaderVersionOne header{};
    if (data.size() >= sizeof header) std::memcpy(&header, data.data(), sizeof header);
    const bool matches =
        data.size() >= sizeof header && header.headerSize >= sizeof header &&
        header.headerSize <= data.size() && header.headerVersion == VK_PIPELINE_CACHE_HEADER_VERSION_ONE &&
        header.vendorID == caps.vendor_id && header.deviceID == caps.device_id &&
        std::memcmp(header.pipelineCacheUUID, caps.pipeline_cache_uuid.data(), VK_UUID_SIZE) == 0;
    if (!matches) data.clear();
  }
  VkPipelineCacheCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO;
  info.initialDataSize = data.size();
  info.pInitialData = data.empty() ? nullptr : data.data();
  if (ctx.api().vkCreatePipelineCache(ctx.device(), &info, nullptr, &cache_) != VK_SUCCESS) {
    info.initialDataSize = 0;  // a driver may refuse old data: start cold rather than fail
    info.pInitialData = nullptr;
    data.clear();
    check(ctx.api().vkCreatePipelineCache(ctx.device(), &info, nullptr, &cache_), "vkCreatePipelineCache");
  }
  loaded_bytes_ = data.size();
}

PipelineCache::~PipelineCache() {
  save();
  const VulkanApi& api = ctx_.api();
  for (auto& [digest, entry] : entries_)
    api.vkDestroyPipeline(ctx_.device(), entry->pipeline.pipeline, nullptr);
  for (auto& entry : collided_) api.vkDestroyPipeline(ctx_.device(), entry->pipeline.pipeline, nullptr);
  api.vkDestroyPipelineCache(ctx_.device(), cache_, nullptr);
}

size_t PipelineCache::created() const {
  std::shared_lock lock(mutex_);
  return created_;
}

const Pipeline& PipelineCache::get(const PipelineKey& key) {
  KILN_ASSERT(key.shader != nullptr);
  const uint64_t digest = key_digest(key);
  auto same = [&](const Entry& e) {
    return e.shader_digest == key.shader->digest && e.bindings == key.bindings &&
           std::equal(e.spec.begin(), e.spec.end(), key.spec.begin(), key.spec.end());
  };
  {
    std::shared_lock lock(mutex_);
    auto it = entries_.find(digest);
    if (it != entries_.end() && same(*it->second)) return it->second->pipeline;
  }
  const VulkanApi& api = ctx_.api();
  VkShaderModuleCreateInfo module_info{};
  module_info.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
  module_info.codeSize = key.shader->spirv.size_bytes();
  module_info.pCode = key.shader->spirv.data();
  VkShaderModule module = VK_NULL_HANDLE;
  check(api.vkCreateShaderModule(ctx_.device(), &module_info, nullptr, &module), "vkCreateShaderModule");
  std::vector<VkSpecializationMapEntry> map(key.spec.size());
  for (uint32_t i = 0; i < map.size(); ++i) map[i] = {i, i * 4, 4};
  VkSpecializationInfo spec{static_cast<uint32_t>(map.size()), map.data(), key.spec.size_bytes(),
                            key.spec.data()};
  VkComputePipelineCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
  info.stage = {};
  info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = module;
  info.stage.pName = "main";
  info.stage.pSpecializationInfo = map.empty() ? nullptr : &spec;
  info.layout = ctx_.pipeline_layout(key.bindings);
  if (ctx_.caps().pipeline_stats) info.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  auto entry = std::make_unique<Entry>(Entry{key.shader->digest,
                                             {key.spec.begin(), key.spec.end()},
                                             key.bindings,
                                             {VK_NULL_HANDLE, info.layout, key.bindings}});
  const VkResult r =
      api.vkCreateComputePipelines(ctx_.device(), cache_, 1, &info, nullptr, &entry->pipeline.pipeline);
  api.vkDestroyShaderModule(ctx_.device(), module, nullptr);
  if (r != VK_SUCCESS)
    throw DeviceError::of("vulkan", "cannot create a compute pipeline", "shader {}: {}", key.shader->name,
                          result_name(r));
  std::unique_lock lock(mutex_);
  auto [it, inserted] = entries_.try_emplace(digest, nullptr);
  if (!inserted) {
    // Another thread made it first (or, astronomically unlikely, a digest collision: then the new
    // pipeline is used uncached rather than wrongly shared).
    if (same(*it->second)) {
      api.vkDestroyPipeline(ctx_.device(), entry->pipeline.pipeline, nullptr);
      return it->second->pipeline;
    }
    collided_.push_back(std::move(entry));
    return collided_.back()->pipeline;
  }
  it->second = std::move(entry);
  ++created_;
  dirty_ = true;
  if (ctx_.caps().pipeline_stats) print_statistics(key, it->second->pipeline);
  return it->second->pipeline;
}

namespace {
// Vulkan's two-call idiom: the count, then the items, each with its sType set.
template <class T, class Query>
std::vector<T> enumerate(VkStructureType type, Query query, const char* what) {
  uint32_t n = 0;
  check(query(&n, nullptr), what);
  std::vector<T> items(n);
  for (T& item : items) item.sType = type;
  check(query(&n, items.data()), what);
  items.resize(n);
  return items;
}
}  // namespace

std::vector<PipelineStatistic> PipelineCache::statistics(const Pipeline& pipeline) const {
  std::vector<PipelineStatistic> out;
  if (!ctx_.caps().pipeline_stats) return out;
  const VulkanApi& api = ctx_.api();
  VkPipelineInfoKHR info{};
  info.sType = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR;
  info.pipeline = pipeline.pipeline;
  const auto executables = enumerate<VkPipelineExecutablePropertiesKHR>(
      VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR,
      [&](uint32_t* n, VkPipelineExecutablePropertiesKHR* items) {
        return api.vkGetPipelineExecutablePropertiesKHR(ctx_.device(), &info, n, items);
      },
      "vkGetPipelineExecutablePropertiesKHR");
  for (uint32_t i = 0; i < executables.size(); ++i) {
    VkPipelineExecutableInfoKHR which{};
    which.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR;
    which.pipeline = pipeline.pipeline;
    which.executableIndex = i;
    const auto stats = enumerate<VkPipelineExecutableStatisticKHR>(
        VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR,
        [&](uint32_t* n, VkPipelineExecutableStatisticKHR* items) {
          return api.vkGetPipelineExecutableStatisticsKHR(ctx_.device(), &which, n, items);
        },
        "vkGetPipelineExecutableStatisticsKHR");
    for (const VkPipelineExecutableStatisticKHR& s : stats) {
      double v = 0;
      switch (s.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
          v = s.value.b32 ? 1 : 0;
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
          v = static_cast<double>(s.value.i64);
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
          v = static_cast<double>(s.value.u64);
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR:
          v = s.value.f64;
          break;
        default:
          continue;
      }
      out.push_back({executables[i].name, s.name, v});
    }
  }
  return out;
}

void PipelineCache::print_statistics(const PipelineKey& key, const Pipeline& pipeline) const {
  std::string line;
  for (const PipelineStatistic& s : statistics(pipeline))
    line += fmt::format("{}{} {}", line.empty() ? "" : ", ", s.name, s.value);
  fmt::print(stderr, "kiln: pipeline {} spec [{}]: {}\n", key.shader->name, fmt::join(key.spec, " "), line);
}

bool PipelineCache::save() {
  if (path_.empty()) return false;
  {
    std::shared_lock lock(mutex_);  // the common case, after every evaluation: nothing new
    if (!dirty_) return false;
  }
  std::lock_guard save_lock(save_mutex_);
  {
    std::unique_lock lock(mutex_);
    if (!dirty_) return false;
    dirty_ = false;
  }
  const VulkanApi& api = ctx_.api();
  size_t size = 0;
  if (api.vkGetPipelineCacheData(ctx_.device(), cache_, &size, nullptr) != VK_SUCCESS || size == 0)
    return false;
  std::vector<char> data(size);
  if (api.vkGetPipelineCacheData(ctx_.device(), cache_, &size, data.data()) != VK_SUCCESS) return false;
  data.resize(size);
  return write_atomically(path_, data);
}

}  // namespace kiln::detail::vk
