// The gpu facade (core/vulkan/gpu.h) on the Vulkan runtime: arrays become views of device
// buffers, kernels are recorded into this thread's recorder, and eval() submits it.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <string>

#include "kiln/core/cpu/strided.h"
#include "kiln/core/vulkan/gpu.h"
#include "kiln/core/vulkan/gpu_capture.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/elementwise.h"
#include "kiln/core/vulkan/runtime/kernels.h"
#include "kiln/core/vulkan/runtime/memory.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/recorder.h"
#include "kiln/core/vulkan/runtime/views.h"

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
                      const vk::GpuView& out, std::string helpers = {}) {
  vk::ElementwiseKernel k{.inputs = {},
                          .compute = compute,
                          .out = out.dtype,
                          .expr = std::string(expr),
                          .helpers = std::move(helpers)};
  for (const vk::GpuView& v : inputs) k.inputs.push_back(v.dtype);
  vk::record_elementwise(vk::thread_recorder(), k, inputs, out);
}

// v with dims [begin, end) merged into one (an empty range inserts a dim of 1 at begin). Throws
// NotImplemented when their strides do not allow it.
vk::GpuView merge_dims(vk::GpuView v, size_t begin, size_t end, const char* op) {
  const std::optional<int64_t> stride = vk::merged_stride(v, begin, end);
  if (!stride)
    throw NotImplemented::of(op, "batch dims that do not merge into one on the GPU", "{}", v.shape);
  const auto b = static_cast<long>(begin), e = static_cast<long>(end);
  Shape shape(v.shape.begin(), v.shape.begin() + b);
  Strides strides(v.strides.begin(), v.strides.begin() + b);
  shape.push_back(vk::shape_product(v.shape, begin, end));
  strides.push_back(*stride);
  shape.insert(shape.end(), v.shape.begin() + e, v.shape.end());
  strides.insert(strides.end(), v.strides.begin() + e, v.strides.end());
  v.shape = std::move(shape);
  v.strides = std::move(strides);
  return v;
}
// v with dims [0, n) merged into one (n = 0 adds a leading dim of 1).
vk::GpuView merge_leading(vk::GpuView v, size_t n, const char* op) {
  return merge_dims(std::move(v), 0, n, op);
}
// merge_leading, after a row-major copy of v into a temporary when its batch dims do not merge
// (matmul reads two batch dims in place, as attention's [batch, heads] views: this is for the
// layouts left, and for linear's rows). A view read by several GEMMs of one recording is copied
// once: the recorder keeps the recording's dense copies.
vk::GpuView merge_leading_or_copy(vk::GpuView v, size_t n, const char* op) {
  if (n > 1 && !vk::merged_stride(v, 0, n)) {
    vk::Recorder& r = vk::thread_recorder();
    std::string key = fmt::format("{} {} {} {} {}", v.buffer->id(), static_cast<int>(v.dtype), v.offset,
                                  fmt::join(v.shape, ","), fmt::join(v.strides, ","));
    if (const vk::BufferPtr* dense = r.find_dense_copy(key))
      return merge_leading(vk::GpuView::contiguous(*dense, v.dtype, v.shape), n, op);
    vk::GpuView dense = vk::GpuView::contiguous(
        r.context().allocator().allocate(static_cast<size_t>(std::max<int64_t>(vk::numel(v.shape), 1)) *
                                         static_cast<size_t>(size_of(v.dtype))),
        v.dtype, v.shape);
    vk::record_copy(r, v, dense);
    r.remember_dense_copy(std::move(key), dense.buffer);
    v = std::move(dense);
  }
  return merge_leading(std::move(v), n, op);
}
}  // namespace
}  // namespace kiln::gpu

namespace kiln::detail::vk {
namespace {
bool builtin_cast(Dtype t) { return t == float32 || t == float16 || t == int32; }
}  // namespace

void record_copy_any(Recorder& r, const GpuView& src, const GpuView& dst) {
  // The built-in copy kernel moves 2- and 4-byte elements and casts among float32, float16 and
  // int32; every other pair goes through a generated kernel (the CPU's casting rules). A same-type
  // copy of contiguous views is a plain buffer copy.
  const size_t item = static_cast<size_t>(size_of(src.dtype));
  if (src.dtype == dst.dtype && is_row_major(src) && is_row_major(dst)) {
    const auto n = static_cast<size_t>(numel(src.shape));
    return r.copy(src.buffer, static_cast<size_t>(src.offset) * item, dst.buffer,
                  static_cast<size_t>(dst.offset) * item, n * item);
  }
  const bool builtin = (src.dtype == dst.dtype && (item == 2 || item == 4)) ||
                       (builtin_cast(src.dtype) && builtin_cast(dst.dtype));
  if (builtin) return record_copy(r, src, dst);
  ElementwiseKernel k{
      .inputs = {src.dtype}, .compute = dst.dtype, .out = dst.dtype, .expr = "x0", .helpers = {}};
  record_elementwise(r, k, {&src, 1}, dst);
}

void record_byte_copies(Recorder& r, std::span<const ByteCopy> copies) {
  // One copy_many dispatch moves the copies it can (whole 4-byte words at 4-byte addresses, on a
  // device with buffer device addresses); each other copy is one command.
  Context& ctx = r.context();
  std::vector<uint32_t> table;
  std::vector<Binding> touched;
  table.reserve(8 * copies.size());
  touched.reserve(2 * copies.size());
  uint64_t most_bytes = 0;
  for (const ByteCopy& c : copies) {
    if (c.bytes == 0) continue;
    const BufferPtr &src = *c.src, &dst = *c.dst;
    const uint64_t from = src->address() + c.src_offset, to = dst->address() + c.dst_offset;
    const bool batched = src->address() != 0 && dst->address() != 0 && c.bytes % 4 == 0 && from % 4 == 0 &&
                         to % 4 == 0 && c.bytes <= UINT32_MAX &&
                         table.size() / 8 < ctx.caps().max_workgroup_count[1];
    if (!batched) {
      r.copy(src, c.src_offset, dst, c.dst_offset, c.bytes);
      continue;
    }
    table.insert(table.end(),
                 {static_cast<uint32_t>(from), static_cast<uint32_t>(from >> 32), static_cast<uint32_t>(to),
                  static_cast<uint32_t>(to >> 32), static_cast<uint32_t>(c.bytes), 0, 0, 0});
    touched.push_back({src, Access::read});
    touched.push_back({dst, Access::write});
    most_bytes = std::max(most_bytes, c.bytes);
  }
  if (table.empty()) return;
  // The table lives in mapped memory the host writes now; a fresh block per call, released when the
  // work completes, so a table in flight is never overwritten.
  const BufferPtr entries = ctx.upload_allocator().allocate(table.size() * sizeof(uint32_t));
  std::memcpy(entries->mapped(), table.data(), table.size() * sizeof(uint32_t));
  const uint32_t wg = workgroup_size(ctx);
  // Enough workgroups along x for the largest entry's 16-byte words, at most 256 (they stride).
  const uint64_t x = std::clamp<uint64_t>((most_bytes / 16 + wg - 1) / wg, 1, 256);
  const Binding table_binding{entries, Access::read};
  const uint32_t spec[] = {wg};
  r.dispatch(builtin_shader("copy_many"), spec, std::span<const Binding>(&table_binding, 1), {},
             Groups{static_cast<uint32_t>(x), static_cast<uint32_t>(table.size() / 8), 1}, touched);
}

void record_copies(Recorder& r, std::span<const GpuView> src, std::span<const GpuView> dst) {
  if (src.size() != dst.size())
    throw ValueError::of("gpu copies", "as many destinations as sources", "{} and {}", src.size(),
                         dst.size());
  std::vector<ByteCopy> dense;
  for (size_t i = 0; i < src.size(); ++i) {
    const GpuView &s = src[i], &d = dst[i];
    if (s.shape != d.shape)
      throw ShapeError::of("gpu copies", "shapes differ", "pair {}: {} vs {}", i, s.shape, d.shape);
    if (numel(s.shape) == 0) continue;
    if (const auto c = byte_copy(s, d))
      dense.push_back(*c);
    else
      record_copy_any(r, s, d);
  }
  record_byte_copies(r, dense);
}

}  // namespace kiln::detail::vk

namespace kiln::gpu {
namespace vk = kiln::detail::vk;

bool available() { return vk::availability().available; }
std::string unavailable_reason() { return vk::availability().reason; }
bool supports(Dtype t) {
  if (!available()) return false;
  if (t == float64) return vk::context().caps().float64;
  if (t == int64) return vk::context().caps().int64;
  return true;
}

void allocate(Array& out) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(out.nbytes(), 1));
  detail::set_buffer(out, std::make_shared<detail::Buffer>(vk::context().allocator().allocate(bytes), bytes));
}

void copy(const Array& x, Array& out) {
  if (x.size() != out.size())
    throw ShapeError::of("gpu copy", "sizes differ", "{} into {}", shape_str(x.shape()),
                         shape_str(out.shape()));
  allocate(out);
  if (x.size() == 0) return;
  // out's buffer viewed with x's shape: the same row-major order.
  vk::record_copy_any(vk::thread_recorder(), vk::array_view(x), vk::array_out_view(out, x.shape()));
}

void elementwise(std::string_view expr, Dtype compute, std::span<const Array> inputs, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  std::vector<vk::GpuView> views;
  for (const Array& x : inputs) views.push_back(broadcast_view(x, out.shape()));
  record_generated(expr, compute, views, vk::array_out_view(out, out.shape()));
}

void elementwise_chain(std::span<const ChainStep> steps, std::string_view helpers,
                       std::span<const Array> inputs, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  vk::ElementwiseKernel k{.inputs = {},
                          .compute = inputs.empty() ? uint32 : inputs[0].dtype(),  // x<i> go unused
                          .out = out.dtype(),
                          .expr = fmt::format("t{}", steps.size() - 1),
                          .steps = {},
                          .helpers = std::string(helpers)};
  if (k.compute == bool_ || k.compute == float16 || k.compute == bfloat16) k.compute = uint32;
  for (const ChainStep& st : steps) k.steps.push_back({st.dtype, st.expr});
  std::vector<vk::GpuView> views;
  for (const Array& x : inputs) {
    views.push_back(broadcast_view(x, out.shape()));
    k.inputs.push_back(x.dtype());
  }
  vk::record_elementwise(vk::thread_recorder(), k, views, vk::array_out_view(out, out.shape()));
}

void keyed_elementwise(std::string_view body, Dtype compute, const Array& keys, int64_t sample_size,
                       Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  if (sample_size > vk::kMaxIndex)
    throw NotImplemented::of("gpu random", "samples past 2^31 elements are not supported on the GPU",
                             "{} elements", sample_size);
  // The keys' two words as inputs broadcast over each sample: (batch..., 1, ..., 1) views.
  const vk::GpuView kv = vk::array_view(keys);
  const size_t batch = kv.shape.size() - 1, sample_rank = out.shape().size() - batch;
  vk::GpuView word0 = kv;
  word0.shape.pop_back();
  word0.strides.pop_back();
  word0.shape.insert(word0.shape.end(), sample_rank, 1);
  word0.strides.insert(word0.strides.end(), sample_rank, 0);
  vk::GpuView word1 = word0;
  word1.offset += kv.strides.back();
  const vk::GpuView words[] = {word0, word1};
  const std::string index = batch == 0 ? "j" : fmt::format("j % {}u", sample_size);
  record_generated(
      fmt::format("kiln_keyed(uvec2(v0, v1), {})", index), compute, words,
      vk::array_out_view(out, out.shape()),
      fmt::format("#include \"common/random.glsl\"\n{} kiln_keyed(uvec2 key, uint i) {{ return {}; }}\n",
                  vk::glsl_value_type(compute), body));
}

namespace {
// A GEMM operand: v with its first `batch` dims merged into one. The GEMM takes no negative strides
// (flipped views), and record_copy moves no 8-byte elements: such operands, and float64 ones whose
// batch dims do not merge, go through a row-major temporary written by the generated copy kernel
// first; others whose batch dims do not merge through record_copy.
vk::GpuView gemm_operand(vk::GpuView v, size_t batch, const char* op) {
  const bool negative = std::ranges::any_of(v.strides, [](int64_t st) { return st < 0; });
  if (vk::numel(v.shape) == 0) {  // nothing is read: any strides do
    v = vk::GpuView::contiguous(v.buffer, v.dtype, v.shape);
  } else if (negative || (size_of(v.dtype) == 8 && batch > 1 && !vk::merged_stride(v, 0, batch))) {
    vk::GpuView dense =
        vk::GpuView::contiguous(vk::context().allocator().allocate(static_cast<size_t>(vk::numel(v.shape)) *
                                                                   static_cast<size_t>(size_of(v.dtype))),
                                v.dtype, v.shape);
    record_generated("x0", v.dtype, {&v, 1}, dense);
    v = std::move(dense);
  }
  return merge_leading_or_copy(std::move(v), batch, op);
}
}  // namespace

namespace {
// matmul's products as one 2-D GEMM when b's batch dims are broadcast (stride 0) and a's batch and
// row dims, and the addend's, merge into one; false (nothing recorded) otherwise.
bool fold_shared_rhs(const Array& a, const Array& b, const Array* addend, Array& out, double alpha,
                     double beta, const Shape& as, const Shape& bs) {
  const size_t batch = as.size() - 2;
  vk::GpuView bv = broadcast_view(b, bs), av = broadcast_view(a, as);
  auto non_negative = [](const vk::GpuView& v) {
    return std::ranges::all_of(v.strides, [](int64_t s) { return s >= 0; });
  };
  for (size_t i = 0; i < batch; ++i)
    if (bv.shape[i] != 1 && bv.strides[i] != 0) return false;
  if (!non_negative(av) || !non_negative(bv) || !vk::merged_stride(av, 0, batch + 1)) return false;
  std::optional<vk::GpuView> d;
  if (addend) {
    d = broadcast_view(*addend, out.shape());
    if (!non_negative(*d) || !vk::merged_stride(*d, 0, batch + 1)) return false;
    d = merge_leading(std::move(*d), batch + 1, "matmul");
  }
  bv.shape.erase(bv.shape.begin(), bv.shape.begin() + static_cast<long>(batch));
  bv.strides.erase(bv.strides.begin(), bv.strides.begin() + static_cast<long>(batch));
  vk::record_matmul(vk::thread_recorder(), merge_leading(std::move(av), batch + 1, "matmul"), bv,
                    merge_leading(vk::array_out_view(out, out.shape()), batch + 1, "matmul"),
                    d ? &*d : nullptr, alpha, d ? beta : 0.0);
  return true;
}
}  // namespace

namespace {
// v's dims [0, split) and [split, batch) merged into one each: a GEMM view with two batch dims.
vk::GpuView merge_batch_in_two(vk::GpuView v, size_t split, size_t batch) {
  return merge_dims(merge_dims(std::move(v), split, batch, "matmul"), 0, split, "matmul");
}

// matmul's products as one GEMM with two batch dims when some operand's batch dims do not merge into
// one but every operand's merge into two groups at one split (attention's [batch, heads] views of
// [batch, tokens, heads, head_dim] arrays): no row-major copy of the operand (the GPT step's 4 MiB
// copies); false (nothing recorded) otherwise.
bool two_batch_dims(const Array& a, const Array& b, const Array* addend, Array& out, double alpha,
                    double beta, const Shape& as, const Shape& bs) {
  const size_t batch = as.size() - 2;
  if (batch < 2) return false;
  std::vector<vk::GpuView> views{broadcast_view(a, as), broadcast_view(b, bs)};
  if (addend) views.push_back(broadcast_view(*addend, out.shape()));
  const bool one_dim = std::ranges::all_of(
      views, [&](const vk::GpuView& v) { return vk::merged_stride(v, 0, batch).has_value(); });
  const bool negative = std::ranges::any_of(views, [](const vk::GpuView& v) {
    return std::ranges::any_of(v.strides, [](int64_t st) { return st < 0; });
  });
  if (one_dim || negative) return false;
  for (size_t split = 1; split < batch; ++split) {
    const bool merges = std::ranges::all_of(views, [&](const vk::GpuView& v) {
      return vk::merged_stride(v, 0, split).has_value() && vk::merged_stride(v, split, batch).has_value();
    });
    if (!merges) continue;
    for (vk::GpuView& v : views) v = merge_batch_in_two(std::move(v), split, batch);
    const vk::GpuView c = merge_batch_in_two(vk::array_out_view(out, out.shape()), split, batch);
    vk::record_matmul(vk::thread_recorder(), views[0], views[1], c, addend ? &views[2] : nullptr, alpha,
                      addend ? beta : 0.0);
    return true;
  }
  return false;
}
}  // namespace

void matmul(const Array& a, const Array& b, Array& out, const Array* addend, double alpha, double beta) {
  allocate(out);
  if (out.size() == 0) return;
  const Shape& s = out.shape();
  const size_t batch = s.size() - 2;
  const int64_t k = a.shape(-1);
  Shape as(s.begin(), s.end() - 2), bs = as;
  as.insert(as.end(), {s[batch], k});
  bs.insert(bs.end(), {k, s[batch + 1]});
  // B shared by every product (a weight under (B, T, C) rows, as in a linear layer's input
  // gradient): when A's batch and row dims step as one, the products are one [batch * M, K] GEMM,
  // whose tiles fill the GPU better than batch products of M rows (the GPT's 32 x [128, 1024]
  // outputs: 85 -> 80 us each in the H200 step).
  const Array* d_array = addend && beta != 0.0 ? addend : nullptr;
  if (batch > 0 && fold_shared_rhs(a, b, d_array, out, alpha, beta, as, bs)) return;
  if (two_batch_dims(a, b, d_array, out, alpha, beta, as, bs)) return;
  auto operand = [&](const Array& x, const Shape& shape) {
    return gemm_operand(broadcast_view(x, shape), batch, "matmul");
  };
  std::optional<vk::GpuView> d;
  if (addend && beta != 0.0) d = operand(*addend, s);
  vk::record_matmul(vk::thread_recorder(), operand(a, as), operand(b, bs),
                    merge_leading(vk::array_out_view(out, s), batch, "matmul"), d ? &*d : nullptr, alpha,
                    d ? beta : 0.0);
}

void linear(const Array& x, const Array& w, const Array* bias, Array& out) {
  allocate(out);
  if (out.size() == 0) return;
  const int64_t units = w.shape(0), rows = out.size() / units;
  // x as [rows, in] (its leading dims merged, through a copy where they do not: a transposed
  // [tokens, batch, ...] view), w^T as the [in, units] view of w, the bias broadcast over the rows.
  const vk::GpuView xv = gemm_operand(vk::array_view(x), x.shape().size() - 1, "linear");
  vk::GpuView wt = vk::array_view(w);
  std::swap(wt.shape[0], wt.shape[1]);
  std::swap(wt.strides[0], wt.strides[1]);
  std::optional<vk::GpuView> d;
  if (bias) {
    d = vk::array_view(*bias);
    d->shape = {rows, units};
    d->strides = {0, d->strides[0]};
  }
  vk::record_matmul(vk::thread_recorder(), xv, wt, vk::array_out_view(out, {rows, units}), d ? &*d : nullptr,
                    1.0f, d ? 1.0f : 0.0f);
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
  const size_t size = std::max<size_t>(bytes, 1);
  // Small host arrays (scalars, a batch) go into mapped memory the kernels bind directly: a copy
  // through staging is a submit and a wait of its own (about 50 us on a discrete GPU), once per
  // constant of a graph. The host's writes are visible to every later submit, on any thread.
  if (!ctx.allocator().mapped() && size <= vk::DeviceAllocator::kMaxPooledBytes) {
    vk::BufferPtr b = ctx.upload_allocator().allocate(size);
    std::memcpy(b->mapped(), src, bytes);
    vk::count_host_to_device(bytes);
    return b;
  }
  vk::BufferPtr b = ctx.allocator().allocate(size);
  vk::upload(ctx, b, src, bytes);
  return b;
}

void download(const detail::vk::DeviceBuffer& src, void* dst, size_t bytes, size_t offset) {
  // A captured recording has not run: what a host read would see is not the value it means.
  if (capturing())
    throw NotImplemented::of("gpu capture", "the graph reads GPU values on the host while captured");
  vk::Context& ctx = vk::context();
  // readback() takes shared ownership for the recorder's keep-alive; the caller holds the buffer
  // for the whole call, so an aliasing pointer that owns nothing is enough.
  const vk::BufferPtr alias(vk::BufferPtr{}, const_cast<vk::DeviceBuffer*>(&src));
  vk::readback(ctx, alias, dst, bytes, offset);
}

MemoryCounters memory_counters() noexcept {
  const vk::Context* ctx = vk::existing_context();
  if (!ctx) return {};
  // Device memory and upload memory together (the peak is the sum of each one's peak: a bound).
  auto& c = *const_cast<vk::Context*>(ctx);
  const vk::MemoryCounters d = c.allocator().counters(), u = c.upload_allocator().counters();
  const vk::TransferCounters t = vk::transfer_counters();
  return {d.active_bytes + u.active_bytes,     d.peak_bytes + u.peak_bytes, d.cache_bytes + u.cache_bytes,
          d.reserved_bytes + u.reserved_bytes, t.host_to_device_bytes,      t.device_to_host_bytes};
}

void reset_peak_memory() noexcept {
  if (vk::Context* ctx = vk::existing_context()) {
    ctx->allocator().reset_peak();
    ctx->upload_allocator().reset_peak();
  }
}

void clear_cache() noexcept {
  if (vk::Context* ctx = vk::existing_context()) {
    ctx->allocator().clear_cache();
    ctx->upload_allocator().clear_cache();
  }
}

}  // namespace kiln::gpu
