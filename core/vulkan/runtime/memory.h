#pragma once
// Device memory: a caching suballocator. Requests up to kMaxPooledBytes are rounded up to a power
// of two (at least kMinBlockBytes) and carved from large VkBuffers ("chunks"); a freed block goes
// on its size class's free list and is handed out again. Bigger requests get a VkBuffer of their
// own, kept in a cache after use. All blocks are bound whole as storage buffers, at offsets that
// meet minStorageBufferOffsetAlignment.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "kiln/core/vulkan/runtime/vulkan_api.h"

namespace kiln::detail::vk {

class Context;
class DeviceAllocator;

/// Byte counts of one allocator, a snapshot. Same meaning as kiln::MemoryStats.
struct MemoryCounters {
  size_t active_bytes = 0;    ///< bytes of live blocks (their rounded sizes)
  size_t peak_bytes = 0;      ///< the most active_bytes has been since reset_peak()
  size_t cache_bytes = 0;     ///< bytes of freed blocks kept for reuse
  size_t reserved_bytes = 0;  ///< bytes of VkDeviceMemory held (chunks and big buffers)
  size_t allocations = 0;     ///< vkAllocateMemory calls so far (a cache that works keeps it flat)
};

/// One block of device memory: a range of a VkBuffer. Returns to its allocator's cache when the
/// last shared_ptr goes. Must not outlive the Context that made it.
class DeviceBuffer {
 public:
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  VkBuffer buffer() const { return buffer_; }
  VkDeviceSize offset() const { return offset_; }
  /// Bytes asked for.
  size_t size() const { return size_; }
  /// Bytes reserved (the size class); a binding covers these.
  size_t capacity() const { return capacity_; }
  /// The block's bytes in host memory when it is mapped (unified memory, staging), else nullptr.
  std::byte* mapped() const { return mapped_; }
  /// Unique per block for the life of the process; the recorder tracks hazards by it.
  uint64_t id() const { return id_; }
  /// The block's device address (shaders reach it through GL_EXT_buffer_reference), or 0 when the
  /// device lacks bufferDeviceAddress.
  VkDeviceAddress address() const { return address_; }

 private:
  friend class DeviceAllocator;
  DeviceBuffer() = default;
  DeviceAllocator* owner_ = nullptr;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceSize offset_ = 0;
  size_t size_ = 0, capacity_ = 0;
  std::byte* mapped_ = nullptr;
  VkDeviceAddress address_ = 0;
  uint64_t id_ = 0;
  int32_t chunk_ = -1;  // index into owner's chunks_, -1 for a big buffer of its own
  VkDeviceMemory own_memory_ = VK_NULL_HANDLE;
};

using BufferPtr = std::shared_ptr<DeviceBuffer>;

class DeviceAllocator {
 public:
  /// Requests up to this size share chunks; bigger ones get their own VkBuffer.
  static constexpr size_t kMaxPooledBytes = size_t{16} << 20;
  static constexpr size_t kMinBlockBytes = 256;
  static constexpr size_t kChunkBytes = size_t{64} << 20;

  enum class Kind {
    device,   ///< device-local; mapped when the device has unified memory
    staging,  ///< host-visible and coherent (host-cached where offered), always mapped
    /// Storage buffers the host writes straight into: device-local and host-visible where the
    /// device offers it (a discrete GPU's BAR window), else host memory the device reads.
    upload,
  };
  DeviceAllocator(Context& ctx, Kind kind);
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  /// A block of at least `bytes` (> 0) bytes. Thread-safe. Throws DeviceError when the device is
  /// out of memory or the size exceeds what one storage binding can address.
  BufferPtr allocate(size_t bytes);
  /// Blocks are mapped (host-visible memory).
  bool mapped() const { return mapped_; }

  MemoryCounters counters() const;
  void reset_peak();
  /// Frees every cached block that can be freed (big buffers, and chunks with no live block).
  void clear_cache();
  /// Caps the bytes of cached big buffers; returns the previous cap.
  size_t set_cache_limit(size_t bytes);

 private:
  friend class DeviceBuffer;
  struct Chunk {
    VkDeviceMemory memory = VK_NULL_HANDLE;
    VkBuffer buffer = VK_NULL_HANDLE;
    std::byte* mapped = nullptr;
    VkDeviceAddress address = 0;
    VkDeviceSize size = 0, used = 0;
    uint32_t blocks = 0;  // blocks carved from it that are live or on a free list
  };
  struct Block {  // a free block of a chunk
    int32_t chunk;
    VkDeviceSize offset;
  };
  struct Dedicated {
    VkDeviceMemory memory;
    VkBuffer buffer;
    std::byte* mapped;
    VkDeviceAddress address = 0;
    uint64_t released = 0;  // release order, for trimming the least recently used first
  };
  void release(DeviceBuffer& b);
  // Creates a VkBuffer with its own memory; returns false when the device is out of memory.
  bool create_dedicated(size_t bytes, Dedicated& out);
  void destroy_dedicated(const Dedicated& d);
  void trim_locked(size_t limit);  // frees cached big buffers down to `limit` bytes

  Context& ctx_;
  uint32_t memory_type_ = 0;
  bool mapped_ = false;
  VkDeviceSize alignment_ = kMinBlockBytes;
  VkBufferUsageFlags usage_ = 0;

  mutable std::mutex mutex_;  // guards everything below
  std::vector<Chunk> chunks_;
  std::vector<std::vector<Block>> free_blocks_;  // by size class
  std::multimap<size_t, Dedicated> free_dedicated_;
  size_t cache_limit_ = size_t{1} << 30;  // a quarter of the device's memory on a discrete GPU
  uint64_t releases_ = 0;
  // Bytes of cached big buffers, what cache_limit_ bounds (counters_.cache_bytes also counts the
  // chunks' free blocks: bounding that sum freed a just-released big buffer whenever small blocks
  // were cached, so a loop over one big array allocated device memory every step).
  size_t big_cache_bytes_ = 0;
  MemoryCounters counters_;
};

/// Bytes copied between host memory and the device since process start, by upload() and
/// readback() and by the facade's writes into upload memory (kiln::MemoryStats's
/// host_to_device_bytes, device_to_host_bytes). A copy through staging counts once. Kernel
/// parameters written into buffers (an elementwise kernel's long shapes and strides) are not
/// array bytes and are not counted.
struct TransferCounters {
  size_t host_to_device_bytes = 0;
  size_t device_to_host_bytes = 0;
};
TransferCounters transfer_counters() noexcept;
/// Adds `bytes` to host_to_device_bytes: for a memcpy of array bytes into mapped device memory
/// made outside upload() (gpu::upload's upload-memory path).
void count_host_to_device(size_t bytes) noexcept;

/// Copies `bytes` host bytes into `dst` at `dst_offset`: a memcpy when the block is mapped, else
/// through a staging block and a copy on the queue. Waits until done. Throws DeviceError.
void upload(Context& ctx, const BufferPtr& dst, const void* src, size_t bytes, size_t dst_offset = 0);
/// Copies `bytes` from `src` at `src_offset` to host memory; waits. Throws DeviceError.
void readback(Context& ctx, const BufferPtr& src, void* dst, size_t bytes, size_t src_offset = 0);

}  // namespace kiln::detail::vk
