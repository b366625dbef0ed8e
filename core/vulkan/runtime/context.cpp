#include "kiln/core/vulkan/runtime/context.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/memory.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"

namespace kiln::detail::vk {
namespace {

// The feature structs kiln reads and enables, linked: features -> 1.2 -> 1.1. Used to query what
// a device has and to enable it at device creation. Not copyable: the links point inside it.
struct FeatureChain {
  VkPhysicalDeviceVulkan11Features f11{};
  VkPhysicalDeviceVulkan12Features f12{};
  VkPhysicalDeviceFeatures2 features{};
  FeatureChain() {
    f11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
    f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
    f12.pNext = &f11;
    features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    features.pNext = &f12;
  }
  FeatureChain(const FeatureChain&) = delete;
  FeatureChain& operator=(const FeatureChain&) = delete;
};

const char* type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return "CPU";
    default:
      return "other";
  }
}

// Lower is preferred: a real GPU first, a CPU device last.
int type_rank(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return 4;
    default:
      return 3;
  }
}

VkInstance create_instance(VulkanApi& api) {
  uint32_t version = VK_API_VERSION_1_0;
  if (api.vkEnumerateInstanceVersion) api.vkEnumerateInstanceVersion(&version);
  if (version < VK_API_VERSION_1_2)
    throw DeviceError::of("vulkan", "the Vulkan loader is too old", "instance version {}.{}, kiln needs 1.2",
                          VK_API_VERSION_MAJOR(version), VK_API_VERSION_MINOR(version));
  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "kiln";
  app.pEngineName = "kiln";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  info.pApplicationInfo = &app;
  VkInstance instance = VK_NULL_HANDLE;
  check(api.vkCreateInstance(&info, nullptr, &instance), "vkCreateInstance");
  return instance;
}

// Why a device cannot run kiln's kernels; empty when it can.
std::string unusable_reason(const VulkanApi& api, VkPhysicalDevice pd) {
  VkPhysicalDeviceProperties props;
  api.vkGetPhysicalDeviceProperties(pd, &props);
  if (props.apiVersion < VK_API_VERSION_1_2) return "supports only Vulkan 1.0/1.1";
  VkPhysicalDeviceVulkan12Features f12{};
  f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  VkPhysicalDeviceFeatures2 f{};
  f.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  f.pNext = &f12;
  api.vkGetPhysicalDeviceFeatures2(pd, &f);
  if (!f12.timelineSemaphore) return "has no timeline semaphores";
  if (props.limits.maxPerStageDescriptorStorageBuffers < Context::kMaxBindings)
    return fmt::format("binds {} storage buffers per shader stage, kiln needs {}",
                       props.limits.maxPerStageDescriptorStorageBuffers, Context::kMaxBindings);
  uint32_t n = 0;
  api.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
  std::vector<VkQueueFamilyProperties> families(n);
  api.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, families.data());
  const bool compute =
      std::ranges::any_of(families, [](auto& q) { return q.queueFlags & VK_QUEUE_COMPUTE_BIT; });
  if (!compute) return "has no compute queue";
  return {};
}

// The index of the device to use, or a DeviceError saying why there is none.
uint32_t select_device(const VulkanApi& api, VkInstance instance, const ContextOptions& o,
                       std::vector<VkPhysicalDevice>& devices) {
  uint32_t n = 0;
  check(api.vkEnumeratePhysicalDevices(instance, &n, nullptr), "vkEnumeratePhysicalDevices");
  devices.resize(n);
  check(api.vkEnumeratePhysicalDevices(instance, &n, devices.data()), "vkEnumeratePhysicalDevices");
  if (n == 0)
    throw DeviceError::of("vulkan", "no Vulkan device found", "the loader lists no physical device");
  auto describe = [&](uint32_t i) {
    VkPhysicalDeviceProperties p;
    api.vkGetPhysicalDeviceProperties(devices[i], &p);
    return fmt::format("{} ({})", p.deviceName, type_name(p.deviceType));
  };
  if (o.device_index >= 0) {
    if (static_cast<uint32_t>(o.device_index) >= n)
      throw DeviceError::of("vulkan", "no such Vulkan device", "device {} asked for, {} found",
                            o.device_index, n);
    const std::string why = unusable_reason(api, devices[o.device_index]);
    if (!why.empty())
      throw DeviceError::of("vulkan", "the chosen Vulkan device is unusable", "{} {}",
                            describe(o.device_index), why);
    return static_cast<uint32_t>(o.device_index);
  }
  int best = -1, best_rank = 100;
  std::vector<std::string> skipped;
  for (uint32_t i = 0; i < n; ++i) {
    VkPhysicalDeviceProperties p;
    api.vkGetPhysicalDeviceProperties(devices[i], &p);
    std::string why = unusable_reason(api, devices[i]);
    if (why.empty() && p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU && !o.allow_cpu)
      why = "is a CPU device (set KILN_VULKAN_ALLOW_CPU=1 to use it)";
    if (!why.empty()) {
      skipped.push_back(describe(i) + " " + why);
      continue;
    }
    if (type_rank(p.deviceType) < best_rank) best = static_cast<int>(i), best_rank = type_rank(p.deviceType);
  }
  if (best < 0) throw DeviceError::of("vulkan", "no usable Vulkan GPU", "{}", fmt::join(skipped, "; "));
  return static_cast<uint32_t>(best);
}

bool has_extension(const VulkanApi& api, VkInstance instance, VkPhysicalDevice pd, const char* name) {
  auto enumerate = reinterpret_cast<PFN_vkEnumerateDeviceExtensionProperties>(
      api.vkGetInstanceProcAddr(instance, "vkEnumerateDeviceExtensionProperties"));
  if (!enumerate) return false;
  uint32_t n = 0;
  if (enumerate(pd, nullptr, &n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkExtensionProperties> list(n);
  if (enumerate(pd, nullptr, &n, list.data()) != VK_SUCCESS) return false;
  list.resize(n);
  return std::ranges::any_of(
      list, [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

// VK_NV_cooperative_matrix's float16 x float16 + float32 subgroup shapes, when the device offers the
// extension with its feature in compute shaders; empty otherwise.
std::vector<CoopmatShape> coopmat_f16_shapes(const VulkanApi& api, VkInstance instance, VkPhysicalDevice pd) {
  if (!has_extension(api, instance, pd, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME)) return {};
  VkPhysicalDeviceCooperativeMatrixFeaturesNV feature{};
  feature.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV;
  VkPhysicalDeviceFeatures2 f{};
  f.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  f.pNext = &feature;
  api.vkGetPhysicalDeviceFeatures2(pd, &f);
  VkPhysicalDeviceCooperativeMatrixPropertiesNV props{};
  props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_NV;
  VkPhysicalDeviceProperties2 p{};
  p.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  p.pNext = &props;
  api.vkGetPhysicalDeviceProperties2(pd, &p);
  auto get = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
      api.vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
  if (!feature.cooperativeMatrix || !(props.cooperativeMatrixSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) ||
      !get)
    return {};
  uint32_t n = 0;
  if (get(pd, &n, nullptr) != VK_SUCCESS) return {};
  std::vector<VkCooperativeMatrixPropertiesNV> list(n, VkCooperativeMatrixPropertiesNV{});
  for (auto& e : list) e.sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
  if (get(pd, &n, list.data()) != VK_SUCCESS) return {};
  list.resize(n);
  std::vector<CoopmatShape> shapes;
  for (const auto& e : list)
    if (e.AType == VK_COMPONENT_TYPE_FLOAT16_NV && e.BType == VK_COMPONENT_TYPE_FLOAT16_NV &&
        e.CType == VK_COMPONENT_TYPE_FLOAT32_NV && e.DType == VK_COMPONENT_TYPE_FLOAT32_NV &&
        e.scope == VK_SCOPE_SUBGROUP_NV)
      shapes.push_back({e.MSize, e.NSize, e.KSize});
  return shapes;
}

DeviceCaps read_caps(const VulkanApi& api, VkInstance instance, VkPhysicalDevice pd, bool coopmat) {
  DeviceCaps c;
  VkPhysicalDeviceVulkan11Properties p11{};
  p11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES;
  VkPhysicalDeviceProperties2 p{};
  p.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  p.pNext = &p11;
  api.vkGetPhysicalDeviceProperties2(pd, &p);
  const VkPhysicalDeviceLimits& l = p.properties.limits;
  c.name = p.properties.deviceName;
  c.timestamp_period = l.timestampComputeAndGraphics ? l.timestampPeriod : 0.0f;
  c.type = p.properties.deviceType;
  c.vendor_id = p.properties.vendorID;
  c.device_id = p.properties.deviceID;
  c.driver_version = p.properties.driverVersion;
  c.api_version = p.properties.apiVersion;
  std::copy_n(p.properties.pipelineCacheUUID, VK_UUID_SIZE, c.pipeline_cache_uuid.begin());
  c.subgroup_size = p11.subgroupSize;
  c.subgroup_arithmetic = (p11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                          (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
  c.max_workgroup_invocations = l.maxComputeWorkGroupInvocations;
  std::copy_n(l.maxComputeWorkGroupSize, 3, c.max_workgroup_size.begin());
  std::copy_n(l.maxComputeWorkGroupCount, 3, c.max_workgroup_count.begin());
  c.max_shared_memory = l.maxComputeSharedMemorySize;
  c.max_push_constants = l.maxPushConstantsSize;
  c.min_storage_offset_alignment = l.minStorageBufferOffsetAlignment;
  c.max_storage_buffer_range = l.maxStorageBufferRange;
  c.max_allocation_size = p11.maxMemoryAllocationSize;

  FeatureChain f;
  api.vkGetPhysicalDeviceFeatures2(pd, &f.features);
  c.float16 = f.f12.shaderFloat16;
  c.int8 = f.f12.shaderInt8;
  c.int64 = f.features.features.shaderInt64;
  c.storage16 = f.f11.storageBuffer16BitAccess;
  c.storage8 = f.f12.storageBuffer8BitAccess;
  c.float64 = f.features.features.shaderFloat64;
  c.timeline_semaphore = f.f12.timelineSemaphore;
  c.buffer_device_address = f.f12.bufferDeviceAddress;
  c.vulkan_memory_model = f.f12.vulkanMemoryModel;
  if (coopmat) {
    c.coopmat_f16_shapes = coopmat_f16_shapes(api, instance, pd);
    c.coopmat_nv = !c.coopmat_f16_shapes.empty();
  }

  VkPhysicalDeviceMemoryProperties mem;
  api.vkGetPhysicalDeviceMemoryProperties(pd, &mem);
  for (uint32_t h = 0; h < mem.memoryHeapCount; ++h)
    if (mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      c.device_local_heap_size = std::max(c.device_local_heap_size, mem.memoryHeaps[h].size);
  // Unified memory: the largest device-local heap is also host-visible and coherent, and the device
  // shares the host's memory (discrete GPUs also list a small host-visible window, not meant for
  // every buffer).
  const bool shares_host_memory =
      c.type == VK_PHYSICAL_DEVICE_TYPE_CPU || c.type == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
  for (uint32_t t = 0; t < mem.memoryTypeCount && shares_host_memory; ++t) {
    const auto flags = mem.memoryTypes[t].propertyFlags;
    const auto want = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                      VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    if ((flags & want) == want &&
        mem.memoryHeaps[mem.memoryTypes[t].heapIndex].size == c.device_local_heap_size)
      c.unified_memory = true;
  }
  return c;
}

}  // namespace

int pick_queue_family(std::span<const VkQueueFamilyProperties> families, bool universal) {
  int family = -1;
  for (size_t i = 0; i < families.size(); ++i) {
    if (!(families[i].queueFlags & VK_QUEUE_COMPUTE_BIT)) continue;
    const bool graphics = (families[i].queueFlags & VK_QUEUE_GRAPHICS_BIT) != 0;
    if (graphics == universal) return static_cast<int>(i);
    if (family < 0) family = static_cast<int>(i);
  }
  return family;
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "1") == 0;
}

ContextOptions ContextOptions::from_env() {
  ContextOptions o;
  if (const char* v = std::getenv("KILN_VULKAN_LOADER"); v && *v) o.loader = v;
  o.allow_cpu = env_flag("KILN_VULKAN_ALLOW_CPU");
  if (const char* v = std::getenv("KILN_VULKAN_DEVICE"); v && *v) {
    char* end = nullptr;
    const long i = std::strtol(v, &end, 10);
    if (*end != '\0' || i < 0 || i > 1024)
      throw ValueError::of("vulkan", "KILN_VULKAN_DEVICE must be a device index", "got '{}'", v);
    o.device_index = static_cast<int>(i);
  }
  o.cache_dir = default_cache_dir().string();
  o.force_staging = env_flag("KILN_VULKAN_FORCE_STAGING");
  o.disable_coopmat = env_flag("KILN_VULKAN_DISABLE_COOPMAT");
  o.disable_push_descriptors = env_flag("KILN_VULKAN_DISABLE_PUSH_DESCRIPTORS");
  o.elementwise_descriptors = env_flag("KILN_VULKAN_ELEMENTWISE_DESCRIPTORS");
  o.universal_queue = env_flag("KILN_VULKAN_UNIVERSAL_QUEUE");
  o.pipeline_stats = env_flag("KILN_VULKAN_PIPELINE_STATS");
  if (const char* v = std::getenv("KILN_VULKAN_SUBMIT_CHUNK"); v && *v) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 0 || n > 1 << 20)
      throw ValueError::of("vulkan", "KILN_VULKAN_SUBMIT_CHUNK must be a command count (0: off)", "got '{}'",
                           v);
    o.submit_chunk = static_cast<int>(n);
  }
  return o;
}

// The instance of a probe or of a context that failed to start is kept, not destroyed, and with it
// the driver stays loaded until the process exits. Destroying the last instance makes the loader unload the
// driver, and lavapipe's LLVM then leaves allocations that only the unloaded library's globals pointed to:
// LeakSanitizer reports them from an "unknown module", where no suppression can name the driver.
// Kept instances are few (one per probe or failed context) and small; the process-wide context is
// never destroyed either.
namespace {
void keep_driver_loaded(std::unique_ptr<VulkanApi> api, VkInstance instance) {
  static std::mutex mutex;
  static auto* kept = new std::vector<std::pair<std::unique_ptr<VulkanApi>, VkInstance>>();
  std::lock_guard lock(mutex);
  kept->emplace_back(std::move(api), instance);
}
}  // namespace

Availability probe(const ContextOptions& options) {
  Availability a;
  try {
    auto api = std::make_unique<VulkanApi>(options.loader);
    VkInstance instance = create_instance(*api);
    try {
      api->load_instance(instance);
      std::vector<VkPhysicalDevice> devices;
      const uint32_t i = select_device(*api, instance, options, devices);
      VkPhysicalDeviceProperties p;
      api->vkGetPhysicalDeviceProperties(devices[i], &p);
      a.available = true;
      a.device_name = p.deviceName;
      a.is_cpu = p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    } catch (const Error& e) {
      a.reason = e.what();
    }
    keep_driver_loaded(std::move(api), instance);
  } catch (const Error& e) {
    a.reason = e.what();
  }
  return a;
}

std::unique_ptr<Context> Context::create(const ContextOptions& options) {
  return std::unique_ptr<Context>(new Context(options));
}

Context::Context(const ContextOptions& options) : options_(options) {
  api_ = std::make_unique<VulkanApi>(options.loader);
  instance_ = create_instance(*api_);
  // From here on a throw must undo what was made: the destructor does not run for a constructor
  // that throws.
  try {
    api_->load_instance(instance_);
    std::vector<VkPhysicalDevice> devices;
    physical_ = devices[select_device(*api_, instance_, options, devices)];
    caps_ = read_caps(*api_, instance_, physical_, !options.disable_coopmat);
    // A CPU device runs on the host's cores: early chunks would only take them from the recording.
    submit_chunk_ = options.submit_chunk >= 0 ? static_cast<uint32_t>(options.submit_chunk)
                    : caps_.is_cpu()          ? 0
                                              : kDefaultSubmitChunk;
    caps_.elementwise_addresses = caps_.buffer_device_address && !options.elementwise_descriptors;
    caps_.push_descriptor = !options.disable_push_descriptors &&
                            has_extension(*api_, instance_, physical_, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
    if (options.pipeline_stats &&
        has_extension(*api_, instance_, physical_, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME)) {
      VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR offered{};
      offered.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR;
      VkPhysicalDeviceFeatures2 features{};
      features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
      features.pNext = &offered;
      api_->vkGetPhysicalDeviceFeatures2(physical_, &features);
      caps_.pipeline_stats = offered.pipelineExecutableInfo == VK_TRUE;
    }
    if (options.force_staging) caps_.unified_memory = false;

    uint32_t n = 0;
    api_->vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n, nullptr);
    std::vector<VkQueueFamilyProperties> families(n);
    api_->vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n, families.data());
    const int family = pick_queue_family(families, options.universal_queue);
    if (family < 0) throw DeviceError::of("vulkan", "the device has no compute queue", "{}", caps_.name);
    queue_family_ = static_cast<uint32_t>(family);

    // Enable what the device has among the features kernels may use.
    FeatureChain enabled;
    enabled.f11.storageBuffer16BitAccess = caps_.storage16;
    enabled.f12.timelineSemaphore = VK_TRUE;
    enabled.f12.shaderFloat16 = caps_.float16;
    enabled.f12.shaderInt8 = caps_.int8;
    enabled.f12.bufferDeviceAddress = caps_.buffer_device_address;
    enabled.f12.vulkanMemoryModel = caps_.vulkan_memory_model;
    enabled.features.features.shaderInt64 = caps_.int64;
    enabled.features.features.shaderFloat64 = caps_.float64;
    enabled.f12.storageBuffer8BitAccess = caps_.storage8;
    // Cooperative matrices (float16 GEMMs on tensor cores): the extension and its feature.
    VkPhysicalDeviceCooperativeMatrixFeaturesNV coopmat{};
    coopmat.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV;
    std::vector<const char*> extensions;
    if (caps_.coopmat_nv) {
      coopmat.cooperativeMatrix = VK_TRUE;
      coopmat.pNext = enabled.features.pNext;
      enabled.features.pNext = &coopmat;
      extensions.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
    }
    if (caps_.push_descriptor) extensions.push_back(VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR executables{};
    executables.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR;
    if (caps_.pipeline_stats) {
      executables.pipelineExecutableInfo = VK_TRUE;
      executables.pNext = enabled.features.pNext;
      enabled.features.pNext = &executables;
      extensions.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    }

    const float priority = 1.0f;
    VkDeviceQueueCreateInfo queue_info{};
    queue_info.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    queue_info.queueFamilyIndex = queue_family_;
    queue_info.queueCount = 1;
    queue_info.pQueuePriorities = &priority;
    VkDeviceCreateInfo device_info{};
    device_info.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
    device_info.pNext = &enabled.features;
    device_info.queueCreateInfoCount = 1;
    device_info.pQueueCreateInfos = &queue_info;
    device_info.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
    device_info.ppEnabledExtensionNames = extensions.data();
    check(api_->vkCreateDevice(physical_, &device_info, nullptr, &device_), "vkCreateDevice");
    api_->load_device(device_);
    if (caps_.push_descriptor) {
      api_->vkCmdPushDescriptorSetKHR = reinterpret_cast<PFN_vkCmdPushDescriptorSetKHR>(
          api_->vkGetDeviceProcAddr(device_, "vkCmdPushDescriptorSetKHR"));
      caps_.push_descriptor = api_->vkCmdPushDescriptorSetKHR != nullptr;
    }
    if (caps_.pipeline_stats) {
      api_->vkGetPipelineExecutablePropertiesKHR = reinterpret_cast<PFN_vkGetPipelineExecutablePropertiesKHR>(
          api_->vkGetDeviceProcAddr(device_, "vkGetPipelineExecutablePropertiesKHR"));
      api_->vkGetPipelineExecutableStatisticsKHR = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
          api_->vkGetDeviceProcAddr(device_, "vkGetPipelineExecutableStatisticsKHR"));
      caps_.pipeline_stats =
          api_->vkGetPipelineExecutablePropertiesKHR && api_->vkGetPipelineExecutableStatisticsKHR;
    }
    api_->vkGetDeviceQueue(device_, queue_family_, 0, &queue_);

    VkSemaphoreTypeCreateInfo type_info{};

    type_info.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO;
    type_info.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
    VkSemaphoreCreateInfo sem_info{};
    sem_info.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO;
    sem_info.pNext = &type_info;
    check(api_->vkCreateSemaphore(device_, &sem_info, nullptr, &timeline_), "vkCreateSemaphore");

    std::array<VkDescriptorSetLayoutBinding, kMaxBindings> slots{};
    for (uint32_t i = 0; i < kMaxBindings; ++i)
      slots[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
    const VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushConstantBytes};
    // Layout 0 has no descriptor set: kernels that reach every buffer through device addresses
    // carried in push constants, so a dispatch records no descriptors at all.
    for (uint32_t b = 0; b <= kMaxBindings; ++b) {
      VkPipelineLayoutCreateInfo layout{};
      layout.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
      layout.pushConstantRangeCount = 1;
      layout.pPushConstantRanges = &push;
      if (b == 0) {
        check(api_->vkCreatePipelineLayout(device_, &layout, nullptr, &pipeline_layouts_[b]),
              "vkCreatePipelineLayout");
        continue;
      }
      VkDescriptorSetLayoutCreateInfo info{};
      info.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
      if (caps_.push_descriptor) info.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR;
      info.bindingCount = b;
      info.pBindings = slots.data();
      check(api_->vkCreateDescriptorSetLayout(device_, &info, nullptr, &set_layouts_[b]),
            "vkCreateDescriptorSetLayout");
      layout.setLayoutCount = 1;
      layout.pSetLayouts = &set_layouts_[b];
      check(api_->vkCreatePipelineLayout(device_, &layout, nullptr, &pipeline_layouts_[b]),
            "vkCreatePipelineLayout");
    }
    allocator_ = std::make_unique<DeviceAllocator>(*this, DeviceAllocator::Kind::device);
    staging_ = std::make_unique<DeviceAllocator>(*this, DeviceAllocator::Kind::staging);
    upload_ = std::make_unique<DeviceAllocator>(*this, DeviceAllocator::Kind::upload);
    pipelines_ = std::make_unique<PipelineCache>(*this, options.cache_dir);
  } catch (...) {
    destroy(/*keep_instance=*/true);
    if (instance_) keep_driver_loaded(std::move(api_), instance_);
    throw;
  }
}

Context::~Context() { destroy(); }

void Context::destroy(bool keep_instance) noexcept {
  if (device_) api_->vkDeviceWaitIdle(device_);
  pipelines_.reset();
  const bool leaked = (allocator_ && allocator_->counters().active_bytes > 0) ||
                      (staging_ && staging_->counters().active_bytes > 0) ||
                      (upload_ && upload_->counters().active_bytes > 0);
  if (leaked) {
    // Freeing the device under live buffers would crash when they go; keep it instead.
    std::fprintf(stderr,
                 "kiln: a Vulkan context was destroyed while buffers were alive; keeping its device\n");
    return;
  }
  allocator_.reset();
  staging_.reset();
  upload_.reset();
  if (device_) {
    for (auto& f : free_frames_) {
      for (VkDescriptorPool p : f->descriptor_pools) api_->vkDestroyDescriptorPool(device_, p, nullptr);
      api_->vkDestroyCommandPool(device_, f->pool, nullptr);
    }
    free_frames_.clear();
    for (uint32_t b = 0; b <= kMaxBindings; ++b) {
      if (pipeline_layouts_[b]) api_->vkDestroyPipelineLayout(device_, pipeline_layouts_[b], nullptr);
      if (set_layouts_[b]) api_->vkDestroyDescriptorSetLayout(device_, set_layouts_[b], nullptr);
    }
    if (timeline_) api_->vkDestroySemaphore(device_, timeline_, nullptr);
    api_->vkDestroyDevice(device_, nullptr);
    device_ = VK_NULL_HANDLE;
  }
  if (keep_instance) return;
  if (instance_) api_->vkDestroyInstance(instance_, nullptr);
  instance_ = VK_NULL_HANDLE;
}

VkDescriptorSetLayout Context::set_layout(uint32_t bindings) const {
  KILN_ASSERT(bindings >= 1 && bindings <= kMaxBindings);
  return set_layouts_[bindings];
}

VkPipelineLayout Context::pipeline_layout(uint32_t bindings) const {
  KILN_ASSERT(bindings <= kMaxBindings);
  return pipeline_layouts_[bindings];
}

void Context::check_usable() const {
  if (lost_.load()) throw DeviceError::of("vulkan", "the device was lost earlier", "{}", caps_.name);
}

void Context::fail(VkResult r, const char* what) {
  if (r == VK_ERROR_DEVICE_LOST) lost_.store(true);
  check(r, what);
}

uint64_t Context::submit(VkCommandBuffer cmd) {
  check_usable();
  std::lock_guard lock(queue_mutex_);
  const uint64_t value = timeline_value_ + 1, previous = timeline_value_;
  VkTimelineSemaphoreSubmitInfo timeline{};
  timeline.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO;
  timeline.signalSemaphoreValueCount = 1;
  timeline.pSignalSemaphoreValues = &value;
  // The wait orders this batch after the previous one and makes its writes visible here (a signal
  // makes a batch's writes available; a wait makes them visible to the commands after it).
  const VkPipelineStageFlags wait_stages =
      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  timeline.waitSemaphoreValueCount = 1;
  timeline.pWaitSemaphoreValues = &previous;
  VkSubmitInfo info{};
  info.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  info.pNext = &timeline;
  info.waitSemaphoreCount = 1;
  info.pWaitSemaphores = &timeline_;
  info.pWaitDstStageMask = &wait_stages;
  info.commandBufferCount = 1;
  info.pCommandBuffers = &cmd;
  info.signalSemaphoreCount = 1;
  info.pSignalSemaphores = &timeline_;
  VkResult r = static_cast<VkResult>(injected_failure_.exchange(0));
  if (r == VK_SUCCESS) r = api_->vkQueueSubmit(queue_, 1, &info, VK_NULL_HANDLE);
  fail(r, "vkQueueSubmit");
  timeline_value_ = value;
  return value;
}

void Context::wait(uint64_t value) {
  VkSemaphoreWaitInfo info{};
  info.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO;
  info.semaphoreCount = 1;
  info.pSemaphores = &timeline_;
  info.pValues = &value;
  // In short slices, each checking the value again: NVIDIA's driver (580) can return up to 1.5 ms
  // after the value is reached when another thread waits on or submits to the same timeline (the
  // loader's prefetch thread and the training loop, say). A missed wake-up then costs one slice.
  constexpr uint64_t kSliceNs = 50'000;
  for (;;) {
    const VkResult r = api_->vkWaitSemaphores(device_, &info, kSliceNs);
    if (r == VK_SUCCESS) return;
    if (r != VK_TIMEOUT) fail(r, "vkWaitSemaphores");
  }
}

bool Context::reached(uint64_t value) {
  uint64_t now = 0;
  fail(api_->vkGetSemaphoreCounterValue(device_, timeline_, &now), "vkGetSemaphoreCounterValue");
  return now >= value;
}

std::unique_ptr<Frame> Context::acquire_frame() {
  {
    std::lock_guard lock(frames_mutex_);
    if (!free_frames_.empty()) {
      auto f = std::move(free_frames_.back());
      free_frames_.pop_back();
      return f;
    }
  }
  return new_frame(VK_COMMAND_BUFFER_LEVEL_PRIMARY);
}

std::unique_ptr<Frame> Context::create_secondary_frame() {
  return new_frame(VK_COMMAND_BUFFER_LEVEL_SECONDARY);
}

std::unique_ptr<Frame> Context::new_frame(VkCommandBufferLevel level) {
  auto f = std::make_unique<Frame>();
  VkCommandPoolCreateInfo pool_info{};
  pool_info.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  pool_info.flags = level == VK_COMMAND_BUFFER_LEVEL_PRIMARY ? VK_COMMAND_POOL_CREATE_TRANSIENT_BIT : 0;
  pool_info.queueFamilyIndex = queue_family_;
  check(api_->vkCreateCommandPool(device_, &pool_info, nullptr, &f->pool), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo alloc{};
  alloc.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  alloc.commandPool = f->pool;
  alloc.level = level;
  alloc.commandBufferCount = 1;
  const VkResult r = api_->vkAllocateCommandBuffers(device_, &alloc, &f->cmd);
  if (r != VK_SUCCESS) {
    api_->vkDestroyCommandPool(device_, f->pool, nullptr);
    check(r, "vkAllocateCommandBuffers");
  }
  return f;
}

void Context::destroy_frame(std::unique_ptr<Frame> frame) noexcept {
  if (!frame) return;
  for (VkDescriptorPool p : frame->descriptor_pools) api_->vkDestroyDescriptorPool(device_, p, nullptr);
  api_->vkDestroyCommandPool(device_, frame->pool, nullptr);
}

void Context::release_frame(std::unique_ptr<Frame> frame) {
  api_->vkResetCommandPool(device_, frame->pool, 0);
  for (VkDescriptorPool p : frame->descriptor_pools) api_->vkResetDescriptorPool(device_, p, 0);
  frame->current_pool = 0;
  std::lock_guard lock(frames_mutex_);
  free_frames_.push_back(std::move(frame));
}

namespace {
// The process-wide context. Never destroyed: work may still be in flight on other threads at exit,
// and drivers' own exit handlers may run before ours. Guarded by the once_flag.
struct GlobalContext {
  std::once_flag once;
  Context* context = nullptr;
  std::string error;
  std::atomic<bool> created{false};  // context is set (release after the store)
};
GlobalContext& global() {
  static GlobalContext g;
  return g;
}
void init_global() {
  GlobalContext& g = global();
  std::call_once(g.once, [&] {
    try {
      g.context = Context::create(ContextOptions::from_env()).release();
      g.created.store(true, std::memory_order_release);
    } catch (const Error& e) {
      g.error = e.what();
    }
  });
}
}  // namespace

Context& context() {
  init_global();
  GlobalContext& g = global();
  if (!g.context) throw DeviceError(g.error);
  return *g.context;
}

Context* existing_context() {
  // A call_once that is still running counts as not created yet; one that finished is visible.
  GlobalContext& g = global();
  if (!g.created.load(std::memory_order_acquire)) return nullptr;
  return g.context;
}

Availability availability() {
  init_global();
  GlobalContext& g = global();
  Availability a;
  a.available = g.context != nullptr;
  if (g.context) {
    a.device_name = g.context->caps().name;
    a.is_cpu = g.context->caps().is_cpu();
  } else {
    a.reason = g.error;
  }
  return a;
}

}  // namespace kiln::detail::vk
