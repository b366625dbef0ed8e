#include "kiln/core/allocator.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/gpu.h"

namespace kiln {
namespace {

constexpr size_t kAlign = 64;  // a cache line; also what AVX-512 loads like

// Sizes round up to a power of two below 1 MiB and to 64 KiB above, so freed blocks are reused
// by later requests of nearly the same size without wasting more than ~6% on big buffers.
size_t round_size(size_t n) {
  if (n == 0) n = 1;
  if (n <= (size_t{1} << 20)) {
    size_t s = kAlign;
    while (s < n) s <<= 1;
    return s;
  }
  constexpr size_t kPage = size_t{1} << 16;
  return (n + kPage - 1) / kPage * kPage;
}

// The memory this process may use: the machine's, or less where a cgroup (a container) caps it.
size_t usable_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  size_t total = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");  // "max" when uncapped
  unsigned long long cap = 0;
  if (cgroup >> cap && cap > 0) total = total ? std::min<size_t>(total, cap) : cap;
  return total;
}

// KILN_HOST_CACHE_LIMIT is a byte count, with an optional K, M or G (binary units). The default is a
// quarter of usable memory, at least 4 GiB: a training step frees and takes back its activations
// every step, and blocks freed past the limit come back as fresh pages the kernel must zero (GPT-2
// small's step at batch 8 x 256 peaks at 5.5 GB: with a 4 GiB cap, 15% of its time was page
// clearing). An invalid value is ignored, as KILN_NUM_THREADS's is.
size_t default_cache_limit() {
  const char* env = std::getenv("KILN_HOST_CACHE_LIMIT");
  if (env && *env >= '0' && *env <= '9') {  // strtoull would take "-1" as 2^64 - 1
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(env, &end, 10);
    const std::string unit = end ? end : "";
    const int shift = unit.empty() ? 0 : unit == "K" ? 10 : unit == "M" ? 20 : unit == "G" ? 30 : -1;
    if (errno == 0 && shift >= 0 && n <= (~0ull >> shift)) return static_cast<size_t>(n) << shift;
  }
  return std::max(size_t{4} << 30, usable_memory() / 4);
}

class CachingAllocator {
 public:
  void* allocate(size_t bytes) {
    {
      std::lock_guard lock(mu_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cache_ -= bytes;
        add_active(bytes);
        return p;
      }
    }
    void* p = std::aligned_alloc(kAlign, bytes);
    if (!p) {
      clear();
      p = std::aligned_alloc(kAlign, bytes);
      if (!p) throw DeviceError::of("allocate", "out of memory", "{} bytes requested", bytes);
    }
    std::lock_guard lock(mu_);
    add_active(bytes);
    return p;
  }

  void release(void* p, size_t bytes) {
    std::lock_guard lock(mu_);
    active_ -= bytes;
    if (cache_ + bytes > limit_) {
      std::free(p);
      return;
    }
    free_[bytes].push_back(p);
    cache_ += bytes;
  }

  void clear() {
    std::lock_guard lock(mu_);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cache_ = 0;
  }

  MemoryStats stats() {
    std::lock_guard lock(mu_);
    return {active_, peak_, cache_};
  }
  void reset_peak() {
    std::lock_guard lock(mu_);
    peak_ = active_;
  }
  size_t set_limit(size_t n) {
    std::lock_guard lock(mu_);
    const size_t old = limit_;
    limit_ = n;
    return old;
  }

 private:
  void add_active(size_t bytes) {
    active_ += bytes;
    if (active_ > peak_) peak_ = active_;
  }
  std::mutex mu_;  // guards everything below
  std::map<size_t, std::vector<void*>> free_;
  size_t active_ = 0, peak_ = 0, cache_ = 0;
  size_t limit_ = default_cache_limit();
};

CachingAllocator& allocator() {
  static auto* a = new CachingAllocator;  // never destroyed: buffers may die after main returns
  return *a;
}

}  // namespace

MemoryStats memory_stats() {
  MemoryStats s = allocator().stats();
  const gpu::MemoryCounters d = gpu::memory_counters();
  s.device_active_bytes = d.active_bytes;
  s.device_peak_bytes = d.peak_bytes;
  s.device_cache_bytes = d.cache_bytes;
  s.device_reserved_bytes = d.reserved_bytes;
  s.host_to_device_bytes = d.host_to_device_bytes;
  s.device_to_host_bytes = d.device_to_host_bytes;
  return s;
}
void reset_peak_memory() {
  allocator().reset_peak();
  gpu::reset_peak_memory();
}
void clear_cache() {
  allocator().clear();
  gpu::clear_cache();
}
size_t set_cache_limit(size_t bytes) { return allocator().set_limit(bytes); }

namespace detail {
Buffer::Buffer(size_t bytes) : bytes_(bytes), host_size_(round_size(bytes)) {
  host_.store(allocator().allocate(host_size_), std::memory_order_relaxed);
}

Buffer::Buffer(std::shared_ptr<vk::DeviceBuffer> device, size_t bytes)
    : bytes_(bytes), device_(std::move(device)) {
  has_device_.store(true, std::memory_order_relaxed);
}

Buffer::Buffer(void* data, size_t bytes, std::function<void(void*)> deleter)
    : bytes_(bytes), deleter_(std::move(deleter)) {
  host_.store(data, std::memory_order_relaxed);
}

Buffer::~Buffer() {
  void* p = host_.load(std::memory_order_relaxed);
  if (deleter_)
    deleter_(p);
  else if (p)
    allocator().release(p, host_size_);
}

void* Buffer::download() const {
  std::lock_guard lock(mirror_mutex_);
  if (void* p = host_.load(std::memory_order_acquire)) return p;  // another thread made it meanwhile
  const size_t size = round_size(bytes_);
  void* p = allocator().allocate(size);
  try {
    gpu::download(*device_, p, bytes_);
  } catch (...) {
    allocator().release(p, size);
    throw;
  }
  host_size_ = size;
  host_.store(p, std::memory_order_release);
  return p;
}

const std::shared_ptr<vk::DeviceBuffer>& Buffer::device() const {
  if (has_device_.load(std::memory_order_acquire)) return device_;
  std::lock_guard lock(mirror_mutex_);
  if (!has_device_.load(std::memory_order_relaxed)) {
    device_ = gpu::upload(host_.load(std::memory_order_acquire), bytes_);
    has_device_.store(true, std::memory_order_release);
  }
  return device_;
}

void Buffer::drop_device_copy() {
  if (!host_.load(std::memory_order_acquire)) return;  // the device holds the only copy
  std::lock_guard lock(mirror_mutex_);
  has_device_.store(false, std::memory_order_release);
  device_.reset();
}

std::shared_ptr<Buffer> allocate(size_t bytes) { return std::make_shared<Buffer>(bytes); }
}  // namespace detail

}  // namespace kiln
