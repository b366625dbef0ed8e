#pragma once
// The Vulkan instance, the chosen physical and logical device, its compute queue and the services
// built on them (memory, pipelines). A Context is created once per process by context() and is
// thread-safe; tests may create private ones with their own options.
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kiln/core/vulkan/runtime/vulkan_api.h"

namespace kiln::detail::vk {

class DeviceAllocator;
class PipelineCache;

/// The queue family a context takes its queue from: the first that computes without graphics, or
/// the first that computes and also does graphics (the universal family) when `universal`; else
/// the first that computes at all. -1 when none computes.
int pick_queue_family(std::span<const VkQueueFamilyProperties> families, bool universal);

/// Whether environment variable `name` is "1" (the form of kiln's on/off switches).
bool env_flag(const char* name);

/// How a Context picks and uses its device. from_env() reads the documented variables.
struct ContextOptions {
  std::string loader = "libvulkan.so.1";  ///< KILN_VULKAN_LOADER: library to dlopen
  bool allow_cpu = false;                 ///< KILN_VULKAN_ALLOW_CPU=1: accept a CPU device (lavapipe)
  int device_index = -1;                  ///< KILN_VULKAN_DEVICE=<i>: this device, whatever its type
  std::string cache_dir;                  ///< KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln
  bool force_staging = false;             ///< KILN_VULKAN_FORCE_STAGING=1: never map device memory
  /// KILN_VULKAN_DISABLE_COOPMAT=1: leave VK_NV_cooperative_matrix off (the plain GEMM kernels run)
  bool disable_coopmat = false;
  /// KILN_VULKAN_DISABLE_PUSH_DESCRIPTORS=1: leave VK_KHR_push_descriptor off (each dispatch then
  /// allocates and writes a descriptor set from a pool)
  bool disable_push_descriptors = false;
  /// KILN_VULKAN_ELEMENTWISE_DESCRIPTORS=1: elementwise kernels bind their buffers as descriptors
  /// instead of taking their device addresses in push constants (to compare)
  bool elementwise_descriptors = false;
  /// KILN_VULKAN_UNIVERSAL_QUEUE=1: take the queue from the family that also does graphics instead
  /// of a compute-only one (the default, which may run beside a display's work). On the H200 the
  /// two measured alike within the noise (docs/gpu.md); the switch is there to compare them.
  bool universal_queue = false;
  /// KILN_VULKAN_SUBMIT_CHUNK=<n>: a recording goes to the queue after n commands, then after 2n,
  /// 4n, ... (at most Recorder::kMaxChunk) more, as it is recorded; 0 submits each recording once,
  /// at its end. -1: Context::kDefaultSubmitChunk on a GPU, 0 on a CPU device (lavapipe)
  int submit_chunk = -1;
  /// KILN_VULKAN_PIPELINE_STATS=1: enable VK_KHR_pipeline_executable_properties where the device
  /// has it and print each new pipeline's compiler statistics (registers, shared memory, ...) to
  /// stderr, to see what limits a kernel's occupancy on a real GPU.
  bool pipeline_stats = false;
  /// The options the environment asks for.
  static ContextOptions from_env();
};

/// A cooperative-matrix shape for float16 x float16 + float32 -> float32 at subgroup scope
/// (VK_NV_cooperative_matrix): A is m x k, B k x n, the accumulator m x n.
struct CoopmatShape {
  uint32_t m = 0, n = 0, k = 0;
  bool operator==(const CoopmatShape&) const = default;
};

/// What the device offers, recorded once for kernels to choose variants from. Kernels must read
/// the subgroup size here (8 on lavapipe, 32 on NVIDIA), never assume it.
struct DeviceCaps {
  std::string name;
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  uint32_t vendor_id = 0, device_id = 0, driver_version = 0, api_version = 0;
  std::array<uint8_t, VK_UUID_SIZE> pipeline_cache_uuid{};
  uint32_t subgroup_size = 0;
  bool subgroup_arithmetic = false;  ///< subgroupAdd & co. in compute shaders
  uint32_t max_workgroup_invocations = 0;
  std::array<uint32_t, 3> max_workgroup_size{}, max_workgroup_count{};
  uint32_t max_shared_memory = 0;
  uint32_t max_push_constants = 0;
  VkDeviceSize min_storage_offset_alignment = 0;
  uint32_t max_storage_buffer_range = 0;
  /// Nanoseconds per timestamp tick; 0 where compute queues cannot write timestamps.
  float timestamp_period = 0;
  VkDeviceSize max_allocation_size = 0;
  VkDeviceSize device_local_heap_size = 0;
  bool float16 = false, int8 = false, int64 = false, storage16 = false;
  bool storage8 = false, float64 = false;  ///< storageBuffer8BitAccess, shaderFloat64
  bool timeline_semaphore = false, buffer_device_address = false, vulkan_memory_model = false;
  /// Device-local memory is host-visible and coherent, so buffers are mapped (zero copy).
  bool unified_memory = false;
  /// VK_NV_cooperative_matrix is enabled (the device offers it for compute shaders and the options
  /// did not turn it off), with these float16 shapes in the driver's order.
  bool coopmat_nv = false;
  std::vector<CoopmatShape> coopmat_f16_shapes;
  /// VK_KHR_push_descriptor is enabled: a dispatch pushes its bindings into the command buffer
  /// (vkCmdPushDescriptorSetKHR) instead of allocating and writing a descriptor set.
  bool push_descriptor = false;
  /// Elementwise kernels take their buffers' device addresses in push constants where they fit
  /// (buffer_device_address, unless options.elementwise_descriptors).
  bool elementwise_addresses = false;
  /// VK_KHR_pipeline_executable_properties is enabled (options.pipeline_stats and the device has it):
  /// pipelines are created with their statistics captured (PipelineCache::statistics).
  bool pipeline_stats = false;
  bool is_cpu() const { return type == VK_PHYSICAL_DEVICE_TYPE_CPU; }
};

/// Whether a Vulkan device can be used, and why not.
struct Availability {
  bool available = false;
  std::string reason;       ///< empty when available
  std::string device_name;  ///< the device that would be used
  bool is_cpu = false;      ///< it is a CPU device (lavapipe)
};

/// Looks for a device as a Context with these options would, without keeping anything. Never
/// throws: a missing loader, no device, or only a CPU device without allow_cpu is a reason.
Availability probe(const ContextOptions& options);

/// A command pool with one command buffer and descriptor pools, reused across recordings.
struct Frame {
  VkCommandPool pool = VK_NULL_HANDLE;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  std::vector<VkDescriptorPool> descriptor_pools;
  size_t current_pool = 0;
};

class Context {
 public:
  /// Most storage buffers one dispatch binds.
  static constexpr uint32_t kMaxBindings = 12;
  /// Push-constant bytes every pipeline layout declares (Vulkan guarantees 128).
  static constexpr uint32_t kPushConstantBytes = 128;
  /// Commands of a recording's first early submit on a GPU (ContextOptions::submit_chunk).
  static constexpr uint32_t kDefaultSubmitChunk = 16;

  /// Loads the loader, picks a device (a GPU first; a CPU device only if allowed or chosen) and
  /// creates it. Throws DeviceError with the reason when no usable device exists.
  static std::unique_ptr<Context> create(const ContextOptions& options);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const VulkanApi& api() const { return *api_; }
  VkDevice device() const { return device_; }
  VkPhysicalDevice physical_device() const { return physical_; }
  const DeviceCaps& caps() const { return caps_; }
  const ContextOptions& options() const { return options_; }
  /// Commands before a recording's first early submit (0: none), from ContextOptions::submit_chunk.
  uint32_t submit_chunk() const { return submit_chunk_; }
  /// Whether float16 GEMMs may run on cooperative matrices (tensor cores): VK_NV_cooperative_matrix
  /// with a float16 shape, float16 arithmetic, 16-bit storage, the Vulkan memory model, and
  /// subgroups of 32 (what shaders/linalg/matmul_f16_coopmat.comp assumes).
  bool has_coopmat_f16() const {
    return caps_.coopmat_nv && !caps_.coopmat_f16_shapes.empty() && caps_.float16 && caps_.storage16 &&
           caps_.vulkan_memory_model && caps_.subgroup_size == 32;
  }
  DeviceAllocator& allocator() { return *allocator_; }
  /// Host-visible memory for uploads and readbacks through a copy.
  DeviceAllocator& staging_allocator() { return *staging_; }
  /// Mapped storage buffers for small uploads: the host writes them, no copy on the queue.
  DeviceAllocator& upload_allocator() { return *upload_; }
  PipelineCache& pipelines() { return *pipelines_; }

  /// The layouts for `bindings` storage buffers (1..kMaxBindings; pipeline layout 0 has no set).
  VkDescriptorSetLayout set_layout(uint32_t bindings) const;
  VkPipelineLayout pipeline_layout(uint32_t bindings) const;

  /// Submits a recorded command buffer (queue mutex held), signalling the timeline semaphore with
  /// a new value, which it returns. Throws DeviceError if the submit fails or the device is lost.
  /// Each submit first waits on the timeline for the one before: a command buffer may read what
  /// an earlier one, submitted without waiting (async_eval), is still writing.
  uint64_t submit(VkCommandBuffer cmd);
  /// Blocks until the timeline reaches `value`. Throws DeviceError if the device is lost.
  void wait(uint64_t value);
  /// Whether the timeline has reached `value` (never blocks). Throws DeviceError if the device is lost.
  bool reached(uint64_t value);
  /// Throws DeviceError if the device was lost earlier.
  void check_usable() const;
  bool lost() const { return lost_.load(); }

  /// A frame for one recording: recycled, or new. Thread-safe.
  std::unique_ptr<Frame> acquire_frame();
  /// Resets a frame's pools and keeps it for reuse. Thread-safe.
  void release_frame(std::unique_ptr<Frame> frame);
  /// A frame whose command buffer is secondary: a captured program's (Recorder::Mode::capture),
  /// recorded once and executed from many primaries. Not recycled: destroy_frame.
  std::unique_ptr<Frame> create_secondary_frame();
  /// Destroys a frame's pools (its command buffer must no longer be pending). Never throws.
  void destroy_frame(std::unique_ptr<Frame> frame) noexcept;

  /// Makes the next submit fail with `r` as if the driver had returned it (VK_ERROR_DEVICE_LOST
  /// marks the context lost). For tests of the error paths only.
  void inject_submit_failure_for_testing(VkResult r) { injected_failure_.store(static_cast<int>(r)); }

 private:
  explicit Context(const ContextOptions& options);
  // Releases everything made so far; also what a throwing constructor calls. Idempotent.
  // keep_instance: everything but the instance (see keep_driver_loaded in context.cpp).
  void destroy(bool keep_instance = false) noexcept;
  void fail(VkResult r, const char* what);
  std::unique_ptr<Frame> new_frame(VkCommandBufferLevel level);

  ContextOptions options_;
  std::unique_ptr<VulkanApi> api_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  DeviceCaps caps_;
  uint32_t submit_chunk_ = 0;
  std::array<VkDescriptorSetLayout, kMaxBindings + 1> set_layouts_{};
  std::array<VkPipelineLayout, kMaxBindings + 1> pipeline_layouts_{};

  std::mutex queue_mutex_;  // guards queue_ and timeline_value_ (vkQueueSubmit needs it)
  VkSemaphore timeline_ = VK_NULL_HANDLE;
  uint64_t timeline_value_ = 0;
  std::atomic<bool> lost_{false};
  std::atomic<int> injected_failure_{0};

  std::mutex frames_mutex_;  // guards free_frames_
  std::vector<std::unique_ptr<Frame>> free_frames_;

  std::unique_ptr<DeviceAllocator> allocator_;
  std::unique_ptr<DeviceAllocator> staging_;
  std::unique_ptr<DeviceAllocator> upload_;
  std::unique_ptr<PipelineCache> pipelines_;
};

/// The process-wide context, created on first use from ContextOptions::from_env() (once, also when
/// called from several threads). Throws DeviceError with the reason when there is no device; the
/// failure is remembered, so later calls throw the same error without retrying.
Context& context();

/// The process-wide context if context() has created it, else nullptr; never creates one (for
/// memory statistics and cache clearing, which must not start a device). Never throws.
Context* existing_context();

/// Whether context() would succeed, and why not. Never throws.
Availability availability();

}  // namespace kiln::detail::vk
