#include "kiln/core/vulkan/runtime/memory.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/recorder.h"

namespace kiln::detail::vk {
namespace {

std::atomic<uint64_t> next_buffer_id{1};

// Size class c holds blocks of kMinBlockBytes << c bytes.
size_t size_class(size_t bytes) {
  const size_t rounded = std::bit_ceil(std::max(bytes, DeviceAllocator::kMinBlockBytes));
  return static_cast<size_t>(std::countr_zero(rounded) - std::countr_zero(DeviceAllocator::kMinBlockBytes));
}

// Big buffers are rounded to an eighth of their power of two, so a cached one serves requests
// within about 12% of its size.
size_t round_big(size_t bytes) {
  const size_t step = std::max<size_t>(std::bit_floor(bytes) / 8, 1 << 20);
  return (bytes + step - 1) / step * step;
}

uint32_t find_memory_type(const VkPhysicalDeviceMemoryProperties& mem, uint32_t type_bits,
                          VkMemoryPropertyFlags required, VkMemoryPropertyFlags preferred) {
  int fallback = -1;
  for (uint32_t t = 0; t < mem.memoryTypeCount; ++t) {
    if (!(type_bits & (1u << t))) continue;
    const auto flags = mem.memoryTypes[t].propertyFlags;
    if ((flags & required) != required) continue;
    if ((flags & preferred) == preferred) return t;
    if (fallback < 0) fallback = static_cast<int>(t);
  }
  if (fallback < 0)
    throw DeviceError::of("vulkan", "no suitable memory type", "required flags {:#x}",
                          static_cast<uint32_t>(required));
  return static_cast<uint32_t>(fallback);
}

}  // namespace

DeviceBuffer::~DeviceBuffer() {
  if (owner_) owner_->release(*this);
}

DeviceAllocator::DeviceAllocator(Context& ctx, Kind kind) : ctx_(ctx) {
  const VulkanApi& api = ctx.api();
  usage_ = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  if (kind != Kind::staging) usage_ |= VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  if (kind != Kind::staging && ctx.caps().buffer_device_address)
    usage_ |= VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  alignment_ = std::max<VkDeviceSize>(kMinBlockBytes, ctx.caps().min_storage_offset_alignment);
  // The memory types a buffer of this usage may live in, from a probe buffer.
  VkBufferCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  info.size = kMinBlockBytes;
  info.usage = usage_;
  VkBuffer probe = VK_NULL_HANDLE;
  check(api.vkCreateBuffer(ctx.device(), &info, nullptr, &probe), "vkCreateBuffer");
  VkMemoryRequirements req;
  api.vkGetBufferMemoryRequirements(ctx.device(), probe, &req);
  api.vkDestroyBuffer(ctx.device(), probe, nullptr);
  VkPhysicalDeviceMemoryProperties mem;
  api.vkGetPhysicalDeviceMemoryProperties(ctx.physical_device(), &mem);
  constexpr auto host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  if (kind == Kind::staging) {
    memory_type_ = find_memory_type(mem, req.memoryTypeBits, host, VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    mapped_ = true;
  } else if (kind == Kind::upload) {
    memory_type_ = find_memory_type(mem, req.memoryTypeBits, host, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    mapped_ = true;
  } else if (ctx.caps().unified_memory) {
    memory_type_ = find_memory_type(mem, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | host, 0);
    mapped_ = true;
  } else {
    memory_type_ = find_memory_type(mem, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
  }
  free_blocks_.resize(size_class(kMaxPooledBytes) + 1);
  // A discrete GPU's memory serves nothing else: keep up to a quarter of it cached. Where the device
  // shares the host's memory, 1 GiB.
  if (kind == Kind::device && !mapped_)
    cache_limit_ = std::max(cache_limit_, ctx.caps().device_local_heap_size / 4);
}

DeviceAllocator::~DeviceAllocator() {
  clear_cache();
  const VulkanApi& api = ctx_.api();
  for (Chunk& c : chunks_) {
    if (!c.memory) continue;
    api.vkDestroyBuffer(ctx_.device(), c.buffer, nullptr);
    api.vkFreeMemory(ctx_.device(), c.memory, nullptr);
  }
}

bool DeviceAllocator::create_dedicated(size_t bytes, Dedicated& out) {
  const VulkanApi& api = ctx_.api();
  VkDevice dev = ctx_.device();
  VkBufferCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  info.size = bytes;
  info.usage = usage_;
  check(api.vkCreateBuffer(dev, &info, nullptr, &out.buffer), "vkCreateBuffer");
  VkMemoryRequirements req;
  api.vkGetBufferMemoryRequirements(dev, out.buffer, &req);
  VkMemoryAllocateInfo alloc{};
  alloc.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
  alloc.allocationSize = req.size;
  alloc.memoryTypeIndex = memory_type_;
  VkMemoryAllocateFlagsInfo flags{};
  if (usage_ & VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT) {
    flags.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO;
    flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
    alloc.pNext = &flags;
  }
  const VkResult r = api.vkAllocateMemory(dev, &alloc, nullptr, &out.memory);
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) {
    api.vkDestroyBuffer(dev, out.buffer, nullptr);
    return false;
  }
  if (r != VK_SUCCESS) api.vkDestroyBuffer(dev, out.buffer, nullptr);
  check(r, "vkAllocateMemory");
  ++counters_.allocations;
  counters_.reserved_bytes += bytes;
  try {
    check(api.vkBindBufferMemory(dev, out.buffer, out.memory, 0), "vkBindBufferMemory");
    out.mapped = nullptr;
    out.address = 0;
    if (usage_ & VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT) {
      VkBufferDeviceAddressInfo where{};
      where.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO;
      where.buffer = out.buffer;
      out.address = api.vkGetBufferDeviceAddress(dev, &where);
    }
    if (mapped_) {
      void* p = nullptr;
      check(api.vkMapMemory(dev, out.memory, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory");
      out.mapped = static_cast<std::byte*>(p);
    }
  } catch (...) {
    counters_.reserved_bytes -= bytes;
    api.vkDestroyBuffer(dev, out.buffer, nullptr);
    api.vkFreeMemory(dev, out.memory, nullptr);
    throw;
  }
  return true;
}

void DeviceAllocator::destroy_dedicated(const Dedicated& d) {
  ctx_.api().vkDestroyBuffer(ctx_.device(), d.buffer, nullptr);
  ctx_.api().vkFreeMemory(ctx_.device(), d.memory, nullptr);
}

BufferPtr DeviceAllocator::allocate(size_t bytes) {
  if (bytes == 0) throw ValueError::of("vulkan", "cannot allocate an empty buffer");
  const DeviceCaps& caps = ctx_.caps();
  const size_t limit = std::min<size_t>(caps.max_storage_buffer_range, caps.max_allocation_size);
  if (bytes > limit)
    throw DeviceError::of("vulkan", "buffer too large for one storage binding",
                          "{} bytes requested, device limit {}", bytes, limit);
  ctx_.check_usable();
  std::unique_ptr<DeviceBuffer> b(new DeviceBuffer());
  b->size_ = bytes;
  b->id_ = next_buffer_id.fetch_add(1);
  std::lock_guard lock(mutex_);
  if (bytes > kMaxPooledBytes) {
    const size_t cap = round_big(bytes);
    Dedicated d{};
    auto it = free_dedicated_.lower_bound(cap);
    if (it != free_dedicated_.end() && it->first <= cap + cap / 4) {
      d = it->second;
      b->capacity_ = it->first;
      counters_.cache_bytes -= it->first;
      big_cache_bytes_ -= it->first;
      free_dedicated_.erase(it);
    } else {
      bool ok = create_dedicated(cap, d);
      if (!ok && !free_dedicated_.empty()) {  // out of memory: give the cache back and retry once
        trim_locked(0);
        ok = create_dedicated(cap, d);
      }
      if (!ok)
        throw DeviceError::of("vulkan", "out of device memory", "allocating {} bytes ({} active, {} cached)",
                              cap, counters_.active_bytes, counters_.cache_bytes);
      b->capacity_ = cap;
    }
    b->buffer_ = d.buffer;
    b->own_memory_ = d.memory;
    b->mapped_ = d.mapped;
    b->address_ = d.address;
  } else {
    const size_t cls = size_class(bytes);
    const size_t cap = kMinBlockBytes << cls;
    std::vector<Block>& list = free_blocks_[cls];
    Block block{};
    if (!list.empty()) {
      block = list.back();
      list.pop_back();
      counters_.cache_bytes -= cap;
    } else {
      int32_t chosen = -1;
      for (size_t i = chunks_.size(); i-- > 0;) {  // the newest chunks have the most room
        const Chunk& c = chunks_[i];
        const VkDeviceSize start = (c.used + alignment_ - 1) / alignment_ * alignment_;
        if (c.memory && start + cap <= c.size) {
          chosen = static_cast<int32_t>(i);
          break;
        }
      }
      if (chosen < 0) {
        Dedicated d{};
        if (!create_dedicated(kChunkBytes, d))
          throw DeviceError::of("vulkan", "out of device memory",
                                "allocating a {} byte chunk ({} active, {} cached)", kChunkBytes,
                                counters_.active_bytes, counters_.cache_bytes);
        auto slot = std::ranges::find_if(chunks_, [](const Chunk& c) { return !c.memory; });
        if (slot == chunks_.end()) slot = chunks_.insert(chunks_.end(), Chunk{});
        *slot = Chunk{d.memory, d.buffer, d.mapped, d.address, kChunkBytes, 0, 0};
        chosen = static_cast<int32_t>(slot - chunks_.begin());
      }
      Chunk& c = chunks_[chosen];
      const VkDeviceSize start = (c.used + alignment_ - 1) / alignment_ * alignment_;
      c.used = start + cap;
      ++c.blocks;
      block = {chosen, start};
    }
    const Chunk& c = chunks_[block.chunk];
    b->chunk_ = block.chunk;
    b->buffer_ = c.buffer;
    b->offset_ = block.offset;
    b->capacity_ = cap;
    b->mapped_ = c.mapped ? c.mapped + block.offset : nullptr;
    b->address_ = c.address ? c.address + block.offset : 0;
  }
  b->owner_ = this;
  counters_.active_bytes += b->capacity_;
  counters_.peak_bytes = std::max(counters_.peak_bytes, counters_.active_bytes);
  return BufferPtr(b.release());
}

void DeviceAllocator::release(DeviceBuffer& b) {
  std::lock_guard lock(mutex_);
  counters_.active_bytes -= b.capacity_;
  counters_.cache_bytes += b.capacity_;
  if (b.chunk_ < 0) {
    free_dedicated_.emplace(b.capacity_,
                            Dedicated{b.own_memory_, b.buffer_, b.mapped_, b.address_, ++releases_});
    big_cache_bytes_ += b.capacity_;
    trim_locked(cache_limit_);
  } else {
    free_blocks_[size_class(b.capacity_)].push_back({b.chunk_, b.offset_});
  }
}

void DeviceAllocator::trim_locked(size_t limit) {
  // Least recently released first: the buffer just released is the one a loop asks for next (freeing
  // the largest first evicted a step's 1 GiB output whenever smaller buffers were cached, and every
  // step allocated it again: 64 ms instead of 1 ms for an add of 1 GiB on the H200).
  while (big_cache_bytes_ > limit && !free_dedicated_.empty()) {
    auto it = std::ranges::min_element(free_dedicated_, {}, [](const auto& e) { return e.second.released; });
    destroy_dedicated(it->second);
    counters_.cache_bytes -= it->first;
    big_cache_bytes_ -= it->first;
    counters_.reserved_bytes -= it->first;
    free_dedicated_.erase(it);
  }
}

MemoryCounters DeviceAllocator::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

void DeviceAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  counters_.peak_bytes = counters_.active_bytes;
}

size_t DeviceAllocator::set_cache_limit(size_t bytes) {
  std::lock_guard lock(mutex_);
  const size_t previous = cache_limit_;
  cache_limit_ = bytes;
  trim_locked(bytes);
  return previous;
}

void DeviceAllocator::clear_cache() {
  std::lock_guard lock(mutex_);
  trim_locked(0);
  for (size_t cls = 0; cls < free_blocks_.size(); ++cls) {
    for (const Block& blk : free_blocks_[cls]) {
      --chunks_[blk.chunk].blocks;
      counters_.cache_bytes -= kMinBlockBytes << cls;
    }
    free_blocks_[cls].clear();
  }
  for (Chunk& c : chunks_) {
    if (!c.memory || c.blocks > 0) continue;
    ctx_.api().vkDestroyBuffer(ctx_.device(), c.buffer, nullptr);
    ctx_.api().vkFreeMemory(ctx_.device(), c.memory, nullptr);
    counters_.reserved_bytes -= c.size;
    c = Chunk{};
  }
}

namespace {
// Relaxed: each is a sum read by statistics, ordered with nothing else.
std::atomic<size_t> host_to_device_bytes{0};
std::atomic<size_t> device_to_host_bytes{0};
}  // namespace

TransferCounters transfer_counters() noexcept {
  return {host_to_device_bytes.load(std::memory_order_relaxed),
          device_to_host_bytes.load(std::memory_order_relaxed)};
}

void count_host_to_device(size_t bytes) noexcept {
  host_to_device_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

namespace {
void check_range(const BufferPtr& b, size_t offset, size_t bytes, const char* op) {
  if (!b) throw ValueError::of(op, "no buffer");
  if (offset > b->capacity() || bytes > b->capacity() - offset)
    throw ValueError::of(op, "range outside the buffer", "{} bytes at {} in a {} byte buffer", bytes, offset,
                         b->capacity());
}
}  // namespace

void upload(Context& ctx, const BufferPtr& dst, const void* src, size_t bytes, size_t dst_offset) {
  check_range(dst, dst_offset, bytes, "vulkan upload");
  if (bytes == 0) return;
  if (dst->mapped()) {
    std::memcpy(dst->mapped() + dst_offset, src, bytes);
    count_host_to_device(bytes);
    return;
  }
  BufferPtr staging = ctx.staging_allocator().allocate(bytes);
  std::memcpy(staging->mapped(), src, bytes);
  Recorder r(ctx);
  r.copy(staging, 0, dst, dst_offset, bytes);
  r.submit_and_wait();
  count_host_to_device(bytes);
}

void readback(Context& ctx, const BufferPtr& src, void* dst, size_t bytes, size_t src_offset) {
  check_range(src, src_offset, bytes, "vulkan readback");
  if (bytes == 0) return;
  if (src->mapped()) {
    std::memcpy(dst, src->mapped() + src_offset, bytes);
  } else {
    BufferPtr staging = ctx.staging_allocator().allocate(bytes);
    Recorder r(ctx);
    r.copy(src, src_offset, staging, 0, bytes);
    r.submit_and_wait();
    std::memcpy(dst, staging->mapped(), bytes);
  }
  device_to_host_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

}  // namespace kiln::detail::vk
