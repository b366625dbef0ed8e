// gpu::attention_forward and attention_backward (core/vulkan/gpu_attention.h) on the attention
// kernels (attention_kernels.h): each operand (.., L, X) becomes a 4-d view (N0, N1, L, X) read in
// place, the leading dims merged into at most two (the GPT's transposed (B, H, T, D) heads need
// two); an operand whose leading dims do not fit, or whose last dim is strided, is copied first.
#include <array>

#include "kiln/core/vulkan/gpu.h"
#include "kiln/core/vulkan/gpu_attention.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/attention_kernels.h"
#include "kiln/core/vulkan/runtime/elementwise.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::gpu {
namespace vk = kiln::detail::vk;
namespace {

vk::GpuView dense(vk::Recorder& r, const vk::GpuView& v) {
  vk::GpuView out = vk::GpuView::contiguous(r.context().allocator().allocate(static_cast<size_t>(
                                                std::max<int64_t>(1, vk::numel(v.shape)) * size_of(v.dtype))),
                                            v.dtype, v.shape);
  vk::record_elementwise(r, {.inputs = {v.dtype}, .compute = v.dtype, .out = v.dtype, .expr = "x0"}, {&v, 1},
                         out);
  return out;
}

// The leading dims of every view as (N0, N1) with each view's two strides, when they merge that far.
bool split_pairs(std::vector<vk::GpuView>& views) {
  const size_t lead = views[0].shape.size() - 2;
  Shape shape(views[0].shape.begin(), views[0].shape.begin() + static_cast<std::ptrdiff_t>(lead));
  std::vector<Strides> strides;
  for (const vk::GpuView& v : views)
    strides.emplace_back(v.strides.begin(), v.strides.begin() + static_cast<std::ptrdiff_t>(lead));
  std::vector<Strides*> ptrs;
  for (Strides& s : strides) ptrs.push_back(&s);
  vk::collapse(shape, std::span<Strides* const>(ptrs));
  if (shape.size() > 2) return false;
  while (shape.size() < 2) {
    shape.insert(shape.begin(), 1);
    for (Strides& s : strides) s.insert(s.begin(), 0);
  }
  for (size_t i = 0; i < views.size(); ++i) {
    vk::GpuView& v = views[i];
    v.shape = {shape[0], shape[1], v.shape[lead], v.shape[lead + 1]};
    v.strides = {strides[i][0], strides[i][1], v.strides[lead], v.strides[lead + 1]};
  }
  return true;
}

bool has_negative(const vk::GpuView& v) {
  for (int64_t s : v.strides)
    if (s < 0) return true;
  return false;
}

// views[0 .. n_unit) need unit stride along their last dim; a mask (if any) is last.
std::vector<vk::GpuView> as_pairs(vk::Recorder& r, std::vector<vk::GpuView> views, size_t n_unit) {
  for (size_t i = 0; i < views.size(); ++i)
    if ((i < n_unit && views[i].shape.back() > 1 && views[i].strides.back() != 1) || has_negative(views[i]))
      views[i] = dense(r, views[i]);
  std::vector<vk::GpuView> tried = views;
  if (split_pairs(tried)) return tried;
  // Copy the operands (the mask last: a broadcast one is the largest) until the dims merge.
  for (size_t i = 0; i < views.size(); ++i) {
    views[i] = dense(r, views[i]);
    tried = views;
    if (split_pairs(tried)) return tried;
  }
  throw ShapeError::of("gpu attention", "leading dims do not merge even when dense");
}

vk::AttentionOperands operands(const std::vector<vk::GpuView>& v, bool has_mask, double scale, bool causal) {
  return {.q = v[0],
          .k = v[1],
          .v = v[2],
          .mask = has_mask ? &v.back() : nullptr,
          .scale = scale,
          .causal = causal};
}

vk::GpuView flat_out(Array& a) { return vk::array_out_view(a, {a.size()}); }

}  // namespace

void attention_forward(double scale, bool causal, const Array& q, const Array& k, const Array& v,
                       const Array* mask, Array& out, Array& lse) {
  allocate(out);
  allocate(lse);
  if (out.size() == 0) return;
  vk::Recorder& r = vk::thread_recorder();
  std::vector<vk::GpuView> views{vk::array_view(q), vk::array_view(k), vk::array_view(v)};
  if (mask) views.push_back(vk::array_view(*mask));
  views = as_pairs(r, std::move(views), 3);
  vk::record_attention_forward(r, operands(views, mask != nullptr, scale, causal), flat_out(out),
                               flat_out(lse));
}

void attention_backward(double scale, bool causal, const Array& q, const Array& k, const Array& v,
                        const Array* mask, const Array& out, const Array& lse, const Array& g, Array& dq,
                        Array& dk, Array& dv) {
  allocate(dq);
  allocate(dk);
  allocate(dv);
  if (dq.size() == 0 && dk.size() == 0) return;
  vk::Recorder& r = vk::thread_recorder();
  std::vector<vk::GpuView> views{vk::array_view(q), vk::array_view(k), vk::array_view(v), vk::array_view(g)};
  if (mask) views.push_back(vk::array_view(*mask));
  views = as_pairs(r, std::move(views), 4);
  // out and lse come from the forward kernel or its vmap: dense unless a view made them otherwise.
  vk::GpuView ov = vk::array_view(out), lv = vk::array_view(lse);
  if (!out.row_contiguous()) ov = dense(r, ov);
  if (!lse.row_contiguous()) lv = dense(r, lv);
  ov = vk::GpuView{ov.buffer, ov.dtype, {out.size()}, {1}, ov.offset};
  lv = vk::GpuView{lv.buffer, lv.dtype, {lse.size()}, {1}, lv.offset};
  vk::record_attention_backward(r, operands(views, mask != nullptr, scale, causal), views[3], ov, lv,
                                flat_out(dq), flat_out(dk), flat_out(dv));
}

}  // namespace kiln::gpu
