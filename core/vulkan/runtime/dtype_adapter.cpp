#include "kiln/core/vulkan/runtime/dtype_adapter.h"

#include "kiln/core/vulkan/runtime/elementwise.h"
#include "kiln/core/vulkan/runtime/recorder.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::detail::vk {
namespace {

// uint64 <-> int64 with the top bit flipped: unsigned order becomes signed order and back.
constexpr const char* kFlipTopBit = "x0 ^ (uint64_t(1) << 63)";

bool reinterprets(Dtype t, KernelUse use) { return t == uint64 && use == KernelUse::arithmetic; }

void record_conversion(Recorder& r, const GpuView& from, const GpuView& to, KernelUse use) {
  const bool flip = use == KernelUse::ordered && (from.dtype == uint64 || to.dtype == uint64);
  record_elementwise(r,
                     {.inputs = {from.dtype},
                      .compute = flip ? uint64 : to.dtype,
                      .out = to.dtype,
                      .expr = flip ? kFlipTopBit : "x0"},
                     {&from, 1}, to);
}

GpuView temporary(Recorder& r, Dtype t, const Shape& shape) {
  const int64_t n = std::max<int64_t>(numel(shape), 1);
  return GpuView::contiguous(r.context().allocator().allocate(static_cast<size_t>(n) * size_of(t)), t, shape);
}

}  // namespace

Dtype kernel_dtype(Dtype t) {
  switch (t) {
    case int16:
      return int32;
    case uint16:
      return uint32;
    case uint64:
      return int64;
    default:
      return t;
  }
}

GpuView kernel_input(Recorder& r, const GpuView& v, KernelUse use) {
  const Dtype kt = kernel_dtype(v.dtype);
  if (kt == v.dtype) return v;
  if (reinterprets(v.dtype, use) || numel(v.shape) == 0) {
    GpuView same_bits = v;
    same_bits.dtype = kt;
    if (size_of(kt) == size_of(v.dtype)) return same_bits;
  }
  GpuView dense = temporary(r, kt, v.shape);
  record_conversion(r, v, dense, use);
  return dense;
}

KernelOutput::KernelOutput(Recorder& r, const GpuView& out, KernelUse use)
    : out_(out), view_(out), use_(use) {
  const Dtype kt = kernel_dtype(out.dtype);
  if (kt == out.dtype) return;
  if (reinterprets(out.dtype, use)) {
    view_.dtype = kt;
    return;
  }
  view_ = temporary(r, kt, out.shape);
  converted_ = true;
}

void KernelOutput::finish(Recorder& r) const {
  if (converted_) record_conversion(r, view_, out_, use_);
}

}  // namespace kiln::detail::vk
