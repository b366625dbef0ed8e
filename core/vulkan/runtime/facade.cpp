// The gpu facade (core/vulkan/gpu.h) on the Vulkan runtime: arrays become views of device
// buffers, kernels are recorded into this thread's recorder, and eval() submits it.
#include <algorithm>
#include <memory>
#include <numeric>
#include <optional>

#include "kiln/core/cpu/strided.h"
#include "kiln/core/vulkan/gpu.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/elementwise.h"
#include "kiln/core/vulkan/runtime/kernels.h"
#include "kiln/core/vulkan/runtime/memory.h"
#include "kiln/core/vulkan/runtime/recorder.h"

namespace kiln::gpu {
namespace vk = kiln::detail::vk;
namespace {

// x viewed with out_shape's rank and size: broadcast dims get stride 0.
vk::GpuView broadcast_view(const Array& x, const Shape& out_shape) {
  vk::GpuView v = vk::array_view(x);
  v.strides = detail::broadcast_strides(v.shape, v.strides, out_shape);
  v.shape = out_shape;
  return v;
}

// Records the generated elementwise kernel out = expr(inputs) (elementwise.h).
void record_generated(std::string_view expr, Dtype compute, std::span<const vk::GpuView> inputs,
                      const vk::GpuView& out) {
  vk::ElementwiseKernel k{.inputs = {}, .compute = compute, .out = out.dtype, .expr = std::string(expr)};
  for (const vk::GpuView& v : inputs) k.inputs.push_back(v.dtype);
  vk::record_elementwise(vk::thread_recorder(), k, inputs, out);
}

bool builtin_cast(Dtype t) { return t == float32 || t == float16 || t == int32; }

// v with dims [0, n) merged into one (n = 0 adds a leading dim of 1). Throws NotImplemented when
// their strides do not allow it.
vk::GpuView merge_leading(vk::GpuView v, size_t n, const char* op) {
  const std::optional<int64_t> stride = vk::merged_stride(v, 0, n);
  if (!stride)
    throw NotImplemented::of(op, "batch dims that do not merge into one on the GPU", "{}", v.shape);
  Shape shape{vk::shape_product(v.shape, 0, n)};
  Strides strides{*stride};
  shape.insert(shape.end(), v.shape.begin() + static_cast<long>(n), v.shape.end());
  strides.insert(strides.end(), v.strides.begin() + static_cast<long>(n), v.strides.end());
  v.shape = std::move(shape);
  v.strides = std::move(strides);
  return v;
}
}  // namespace

bool available() { return vk::availability().available; }
std::string unavailable_reason() { return vk::availability().reason; }

void allocate(Array& out) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(out.nbytes(), 1));
  detail::set_buffer(out, std::make_shared<detail::Buffer>(vk::context().allocator().allocate(bytes), bytes));
}

void copy(const Array& x, Array& out) {
  if (x.size() != out.size())
    throw ShapeError::of("gpu copy", "sizes differ", "{} into {}", shape_str(x.shape()),
                         shape_str(out.shape()));
  // The built-in copy kernel moves 2- and 4-byte elements and casts among float32, float16 and
  // int32; every other pair goes through a generated kernel (the CPU's casting rules).
  const bool builtin = (x.dtype() == out.dtype() && (x.itemsize() == 2 || x.itemsize() == 4)) ||
                       (builtin_cast(x.dtype()) && builtin_cast(out.dtype()));
  allocate(out);
  if (x.size() == 0) return;
  if (!builtin) {
    // out's buffer viewed with x's shape: the same row-major order.
    const vk::GpuView in = vk::array_view(x);
    return record_generated("x0", out.dtype(), {&in, 1}, vk::array_out_view(out, x.shape()));
  }
  vk::record_copy(vk::thread_recorder(), vk::array_view(x), vk::array_out_view(out, x.shape()));
}

void elementwise(std::string_view expr, Dtype compute, std::span<const Array> inputs, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  std::vector<vk::GpuView> views;
  for (const Array& x : inputs) views.push_back(broadcast_view(x, out.shape()));
  record_generated(expr, compute, views, vk::array_out_view(out, out.shape()));
}

void matmul(const Array& a, const Array& b, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  const Shape& s = out.shape();
  const size_t batch = s.size() - 2;
  const int64_t k = a.shape(-1);
  Shape as(s.begin(), s.end() - 2), bs = as;
  as.insert(as.end(), {s[batch], k});
  bs.insert(bs.end(), {k, s[batch + 1]});
  vk::record_matmul(vk::thread_recorder(), merge_leading(broadcast_view(a, as), batch, "matmul"),
                    merge_leading(broadcast_view(b, bs), batch, "matmul"),
                    merge_leading(vk::array_out_view(out, s), batch, "matmul"));
}

bool has_pending() { return vk::tls_thread_recorder && vk::tls_thread_recorder->pending() > 0; }

void submit_pending() {
  if (has_pending()) vk::tls_thread_recorder->submit_and_wait();
}

void discard_pending() noexcept {
  // A fresh recorder for the next eval; the old one's destructor drops what it recorded.
  vk::tls_thread_recorder.reset();
}

std::shared_ptr<detail::vk::DeviceBuffer> upload(const void* src, size_t bytes) {
  vk::Context& ctx = vk::context();
  vk::BufferPtr b = ctx.allocator().allocate(std::max<size_t>(bytes, 1));
  vk::upload(ctx, b, src, bytes);
  return b;
}

void download(const detail::vk::DeviceBuffer& src, void* dst, size_t bytes) {
  vk::Context& ctx = vk::context();
  // readback() takes shared ownership for the recorder's keep-alive; the caller holds the buffer
  // for the whole call, so an aliasing pointer that owns nothing is enough.
  const vk::BufferPtr alias(vk::BufferPtr{}, const_cast<vk::DeviceBuffer*>(&src));
  vk::readback(ctx, alias, dst, bytes);
}

MemoryCounters memory_counters() noexcept {
  const vk::Context* ctx = vk::existing_context();
  if (!ctx) return {};
  const vk::MemoryCounters c = const_cast<vk::Context*>(ctx)->allocator().counters();
  return {c.active_bytes, c.peak_bytes, c.cache_bytes, c.reserved_bytes};
}

void reset_peak_memory() noexcept {
  if (vk::Context* ctx = vk::existing_context()) ctx->allocator().reset_peak();
}

void clear_cache() noexcept {
  if (vk::Context* ctx = vk::existing_context()) ctx->allocator().clear_cache();
}

}  // namespace kiln::gpu
