#pragma once
// The Vulkan entry points kiln uses, resolved at run time from libvulkan.so.1 (dlopen), so libkiln
// has no link-time dependency on the loader and works on the CPU where none is installed.
// VK_NO_PROTOTYPES: no code can call a prototype by mistake and pull in the loader at link time.
#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include <vulkan/vulkan.h>

#include <memory>
#include <string>

namespace kiln::detail::vk {

// X-macro lists: one line per entry point, by the object they are resolved from.
#define KILN_VK_GLOBAL_FUNCTIONS(X) \
  X(vkCreateInstance)               \
  X(vkEnumerateInstanceVersion)

#define KILN_VK_INSTANCE_FUNCTIONS(X)         \
  X(vkDestroyInstance)                        \
  X(vkEnumeratePhysicalDevices)               \
  X(vkGetPhysicalDeviceProperties)            \
  X(vkGetPhysicalDeviceProperties2)           \
  X(vkGetPhysicalDeviceFeatures2)             \
  X(vkGetPhysicalDeviceMemoryProperties)      \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkCreateDevice)                           \
  X(vkGetDeviceProcAddr)

#define KILN_VK_DEVICE_FUNCTIONS(X) \
  X(vkDestroyDevice)                \
  X(vkGetDeviceQueue)               \
  X(vkDeviceWaitIdle)               \
  X(vkQueueSubmit)                  \
  X(vkAllocateMemory)               \
  X(vkFreeMemory)                   \
  X(vkMapMemory)                    \
  X(vkUnmapMemory)                  \
  X(vkCreateBuffer)                 \
  X(vkDestroyBuffer)                \
  X(vkGetBufferMemoryRequirements)  \
  X(vkBindBufferMemory)             \
  X(vkGetBufferDeviceAddress)       \
  X(vkCreateSemaphore)              \
  X(vkDestroySemaphore)             \
  X(vkWaitSemaphores)               \
  X(vkGetSemaphoreCounterValue)     \
  X(vkCreateCommandPool)            \
  X(vkDestroyCommandPool)           \
  X(vkResetCommandPool)             \
  X(vkAllocateCommandBuffers)       \
  X(vkBeginCommandBuffer)           \
  X(vkEndCommandBuffer)             \
  X(vkCmdBindPipeline)              \
  X(vkCmdBindDescriptorSets)        \
  X(vkCmdPushConstants)             \
  X(vkCmdDispatch)                  \
  X(vkCmdPipelineBarrier)           \
  X(vkCreateEvent)                  \
  X(vkDestroyEvent)                 \
  X(vkResetEvent)                   \
  X(vkCmdSetEvent)                  \
  X(vkCmdWaitEvents)                \
  X(vkCmdCopyBuffer)                \
  X(vkCmdExecuteCommands)           \
  X(vkCreateQueryPool)              \
  X(vkDestroyQueryPool)             \
  X(vkCmdResetQueryPool)            \
  X(vkCmdWriteTimestamp)            \
  X(vkGetQueryPoolResults)          \
  X(vkCreateDescriptorSetLayout)    \
  X(vkDestroyDescriptorSetLayout)   \
  X(vkCreateDescriptorPool)         \
  X(vkDestroyDescriptorPool)        \
  X(vkResetDescriptorPool)          \
  X(vkAllocateDescriptorSets)       \
  X(vkUpdateDescriptorSets)         \
  X(vkCreatePipelineLayout)         \
  X(vkDestroyPipelineLayout)        \
  X(vkCreateShaderModule)           \
  X(vkDestroyShaderModule)          \
  X(vkCreateComputePipelines)       \
  X(vkDestroyPipeline)              \
  X(vkCreatePipelineCache)          \
  X(vkDestroyPipelineCache)         \
  X(vkGetPipelineCacheData)

/// A loaded libvulkan and the entry points resolved from it. Instance and device functions are
/// filled by load_instance()/load_device(); one table belongs to one Context.
struct VulkanApi {
#define KILN_VK_MEMBER(name) PFN_##name name = nullptr;
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  KILN_VK_GLOBAL_FUNCTIONS(KILN_VK_MEMBER)
  KILN_VK_INSTANCE_FUNCTIONS(KILN_VK_MEMBER)
  KILN_VK_DEVICE_FUNCTIONS(KILN_VK_MEMBER)
#undef KILN_VK_MEMBER
  /// VK_KHR_push_descriptor's, set by the Context when it enables the extension; null otherwise.
  PFN_vkCmdPushDescriptorSetKHR vkCmdPushDescriptorSetKHR = nullptr;
  /// VK_KHR_pipeline_executable_properties', set likewise (ContextOptions::pipeline_stats).
  PFN_vkGetPipelineExecutablePropertiesKHR vkGetPipelineExecutablePropertiesKHR = nullptr;
  PFN_vkGetPipelineExecutableStatisticsKHR vkGetPipelineExecutableStatisticsKHR = nullptr;

  /// dlopens `library` (e.g. "libvulkan.so.1"). Throws DeviceError naming the library and the
  /// reason (dlerror) when it or vkGetInstanceProcAddr is missing.
  explicit VulkanApi(const std::string& library);
  ~VulkanApi();
  VulkanApi(const VulkanApi&) = delete;
  VulkanApi& operator=(const VulkanApi&) = delete;

  /// Resolves the instance-level functions. Throws DeviceError if one is missing.
  void load_instance(VkInstance instance);
  /// Resolves the device-level functions. Throws DeviceError if one is missing.
  void load_device(VkDevice device);

 private:
  void* handle_ = nullptr;
};

/// "VK_ERROR_OUT_OF_DEVICE_MEMORY" and so on; "VkResult(<n>)" for codes it does not know.
std::string result_name(VkResult r);

/// Throws DeviceError "[vulkan] <what> failed: <result name>" unless r is VK_SUCCESS.
void check(VkResult r, const char* what);

}  // namespace kiln::detail::vk
