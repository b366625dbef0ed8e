#include "kiln/core/vulkan/runtime/vulkan_api.h"

#include <dlfcn.h>

#include "kiln/core/error.h"

namespace kiln::detail::vk {

VulkanApi::VulkanApi(const std::string& library) {
  handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* why = dlerror();
    throw DeviceError::of("vulkan", "cannot load the Vulkan loader", "{}", why ? why : library);
  }
  vkGetInstanceProcAddr =
      reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(handle_, "vkGetInstanceProcAddr"));
  if (!vkGetInstanceProcAddr) {
    dlclose(handle_);
    throw DeviceError::of("vulkan", "the Vulkan loader lacks vkGetInstanceProcAddr", "{}", library);
  }
#define KILN_VK_LOAD(name)                                                                  \
  name = reinterpret_cast<PFN_##name>(vkGetInstanceProcAddr(VK_NULL_HANDLE, #name));        \
  if (!name) {                                                                              \
    dlclose(handle_);                                                                       \
    throw DeviceError::of("vulkan", "the Vulkan loader lacks an entry point", "{}", #name); \
  }
  KILN_VK_GLOBAL_FUNCTIONS(KILN_VK_LOAD)
#undef KILN_VK_LOAD
}

VulkanApi::~VulkanApi() {
  if (handle_) dlclose(handle_);
}

void VulkanApi::load_instance(VkInstance instance) {
#define KILN_VK_LOAD(name)                                                     \
  name = reinterpret_cast<PFN_##name>(vkGetInstanceProcAddr(instance, #name)); \
  if (!name) throw DeviceError::of("vulkan", "the Vulkan instance lacks an entry point", "{}", #name);
  KILN_VK_INSTANCE_FUNCTIONS(KILN_VK_LOAD)
#undef KILN_VK_LOAD
}

void VulkanApi::load_device(VkDevice device) {
#define KILN_VK_LOAD(name)                                                 \
  name = reinterpret_cast<PFN_##name>(vkGetDeviceProcAddr(device, #name)); \
  if (!name) throw DeviceError::of("vulkan", "the device lacks an entry point", "{}", #name);
  KILN_VK_DEVICE_FUNCTIONS(KILN_VK_LOAD)
#undef KILN_VK_LOAD
}

std::string result_name(VkResult r) {
  switch (r) {
#define KILN_VK_CASE(x) \
  case x:               \
    return #x;
    KILN_VK_CASE(VK_SUCCESS)
    KILN_VK_CASE(VK_NOT_READY)
    KILN_VK_CASE(VK_TIMEOUT)
    KILN_VK_CASE(VK_INCOMPLETE)
    KILN_VK_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    KILN_VK_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    KILN_VK_CASE(VK_ERROR_INITIALIZATION_FAILED)
    KILN_VK_CASE(VK_ERROR_DEVICE_LOST)
    KILN_VK_CASE(VK_ERROR_MEMORY_MAP_FAILED)
    KILN_VK_CASE(VK_ERROR_LAYER_NOT_PRESENT)
    KILN_VK_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    KILN_VK_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    KILN_VK_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    KILN_VK_CASE(VK_ERROR_TOO_MANY_OBJECTS)
    KILN_VK_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
    KILN_VK_CASE(VK_ERROR_FRAGMENTED_POOL)
    KILN_VK_CASE(VK_ERROR_UNKNOWN)
    KILN_VK_CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
    KILN_VK_CASE(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    KILN_VK_CASE(VK_ERROR_FRAGMENTATION)
    KILN_VK_CASE(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
    KILN_VK_CASE(VK_PIPELINE_COMPILE_REQUIRED)
#undef KILN_VK_CASE
    default:
      return "VkResult(" + std::to_string(static_cast<int>(r)) + ")";
  }
}

void check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) throw DeviceError::of("vulkan", "call failed", "{}: {}", what, result_name(r));
}

}  // namespace kiln::detail::vk
