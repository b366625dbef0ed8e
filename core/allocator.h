#pragma once
// The caching allocator behind every array buffer.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace kiln {

struct MemoryStats {
  size_t active_bytes = 0;  ///< bytes held by live buffers
  size_t peak_bytes = 0;    ///< the most active_bytes has been since the last reset_peak_memory()
  size_t cache_bytes = 0;   ///< bytes kept for reuse in the cache
};

/// Current allocator statistics (thread-safe).
MemoryStats memory_stats();
/// Sets peak_bytes to the current active_bytes.
void reset_peak_memory();
/// Frees every cached block.
void clear_cache();
/// Caps the cache; blocks beyond it are returned to the system. Returns the previous limit.
size_t set_cache_limit(size_t bytes);

namespace detail {
/// A block of memory owned by the allocator; freed (into the cache) when the last owner goes.
class Buffer {
 public:
  explicit Buffer(size_t bytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_;
  size_t bytes_;
};
std::shared_ptr<Buffer> allocate(size_t bytes);
}  // namespace detail

}  // namespace kiln
