#pragma once
// The caching allocator behind every array buffer.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

namespace kiln {

struct MemoryStats {
  size_t active_bytes = 0;  ///< bytes held by live host buffers
  size_t peak_bytes = 0;    ///< the most active_bytes has been since the last reset_peak_memory()
  size_t cache_bytes = 0;   ///< bytes kept for reuse in the host cache
  // GPU memory (the Vulkan device's caching suballocator); zeros while no GPU has been used.
  size_t device_active_bytes = 0;    ///< bytes of live device blocks
  size_t device_peak_bytes = 0;      ///< the most device_active_bytes has been since the last reset
  size_t device_cache_bytes = 0;     ///< bytes of freed device blocks kept for reuse
  size_t device_reserved_bytes = 0;  ///< device memory held from the driver (chunks, big buffers)
  // Cumulative since process start (never reset): bytes of array data copied between host memory
  // and the GPU, each copy counted once where its bytes cross (a memcpy into mapped device or
  // upload memory, a copy through staging). A training step on the GPU should move only its batch
  // and a few scalars up and its loss down.
  size_t host_to_device_bytes = 0;  ///< host arrays uploaded (a first GPU use of a host array)
  size_t device_to_host_bytes = 0;  ///< GPU results read on the host (a first host read)
};

/// Current allocator statistics, host and device (thread-safe; never starts a GPU).
MemoryStats memory_stats();
/// Sets peak_bytes (and device_peak_bytes) to the current active bytes.
void reset_peak_memory();
/// Frees every cached block, on the host and on the device.
void clear_cache();
/// Caps the cache; blocks beyond it are returned to the system. Returns the previous limit.
size_t set_cache_limit(size_t bytes);

namespace detail {
namespace vk {
class DeviceBuffer;
}

/// The storage of an array: host memory, device memory, or both holding the same bytes. An
/// array's values never change once it is evaluated, so a second copy, made on first use on the
/// other side (a download on the first host read, an upload on the first GPU read), stays valid.
/// Freed into the caches when the last owner goes.
class Buffer {
 public:
  /// Host memory of `bytes` bytes.
  explicit Buffer(size_t bytes);
  /// Device memory holding `bytes` bytes; host memory is made on the first host read.
  Buffer(std::shared_ptr<vk::DeviceBuffer> device, size_t bytes);
  /// The caller's host memory, `bytes` bytes at `data`, used in place (no copy); `deleter(data)`
  /// runs when the last owner goes. Never donated: kiln does not write into it.
  Buffer(void* data, size_t bytes, std::function<void(void*)> deleter);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  /// The host bytes; on a device buffer the first call downloads them (the GPU work that wrote
  /// them has completed: an array is published only then). Thread-safe.
  void* ptr() const {
    void* p = host_.load(std::memory_order_acquire);
    return p ? p : download();
  }
  size_t bytes() const { return bytes_; }
  /// True when the bytes are in host memory (no download needed).
  bool on_host() const { return host_.load(std::memory_order_acquire) != nullptr; }
  /// True for the caller's memory (the deleter's constructor).
  bool external() const { return static_cast<bool>(deleter_); }
  /// The device copy, uploaded on the first call for a host buffer. Thread-safe. Throws
  /// DeviceError when there is no GPU.
  const std::shared_ptr<vk::DeviceBuffer>& device() const;
  /// True when a device copy exists.
  bool on_device() const { return has_device_.load(std::memory_order_acquire); }
  /// Drops the device copy of a host buffer before its host bytes are overwritten in place (a
  /// donated buffer; its caller is the sole owner).
  void drop_device_copy();

 private:
  void* download() const;
  mutable std::atomic<void*> host_{nullptr};
  size_t bytes_;                                      // bytes asked for
  mutable size_t host_size_ = 0;                      // the host block's size class (0 until there is one)
  mutable std::mutex mirror_mutex_;                   // serializes making the second copy
  mutable std::shared_ptr<vk::DeviceBuffer> device_;  // written once under mirror_mutex_, then read-only
  mutable std::atomic<bool> has_device_{false};
  std::function<void(void*)> deleter_;  // set for external memory
};
std::shared_ptr<Buffer> allocate(size_t bytes);
}  // namespace detail

}  // namespace kiln
