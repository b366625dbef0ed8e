#pragma once
// Arrays as GpuViews and the thread's recorder, for the facade files that turn gpu:: calls into
// recorded kernels (facade.cpp, reduce_facade.cpp, index_facade.cpp). eval() submits the recorder
// through gpu::submit_pending() (facade.cpp).
#include <algorithm>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

#include "kiln/core/array.h"
#include "kiln/core/vulkan/gpu.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/kernels.h"
#include "kiln/core/vulkan/runtime/memory.h"
#include "kiln/core/vulkan/runtime/recorder.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::detail::vk {

/// This thread's recorder (one per thread, reused by every eval on it; gpu::discard_pending()
/// replaces it after an error).
inline thread_local std::unique_ptr<Recorder> tls_thread_recorder;

inline Recorder& thread_recorder() {
  if (!tls_thread_recorder) tls_thread_recorder = std::make_unique<Recorder>(context());
  return *tls_thread_recorder;
}

/// The array's storage as a device view; a host buffer is uploaded first (once per buffer).
inline GpuView array_view(const Array& a) {
  const ArrayNode& n = a.node();
  return {n.buffer->device(), n.dtype, n.shape, n.strides, n.offset};
}

/// array_view for a kernel input that may be empty: an empty array has no storage to view, and
/// its view has no buffer (kernels never read one).
inline GpuView input_view(const Array& a) {
  if (a.size() == 0) return {nullptr, a.dtype(), a.shape(), a.strides(), 0};
  return array_view(a);
}

/// `out`'s storage (made by gpu::allocate) as a row-major view of `shape`, which has out's size.
inline GpuView array_out_view(const Array& out, const Shape& shape) {
  return GpuView::contiguous(out.node().buffer->device(), out.dtype(), shape);
}

/// Whether v walks its elements in row-major order without gaps (size-1 dims may have any stride).
inline bool is_row_major(const GpuView& v) {
  int64_t expect = 1;
  for (size_t d = v.shape.size(); d-- > 0;) {
    if (v.shape[d] != 1 && v.strides[d] != expect) return false;
    expect *= v.shape[d];
  }
  return true;
}

/// dst = src converted to dst's dtype over their common shape, for every dtype pair the CPU casts
/// (record_copy where it can, a generated kernel otherwise; a buffer copy when both are row-major
/// of one dtype). Either view may be strided. Defined in facade.cpp.
void record_copy_any(Recorder& r, const GpuView& src, const GpuView& dst);

/// `bytes` bytes from src at byte src_offset to dst at byte dst_offset (offsets from each
/// DeviceBuffer's start). The pointers must outlive the call.
struct ByteCopy {
  const BufferPtr* src;
  uint64_t src_offset;
  const BufferPtr* dst;
  uint64_t dst_offset;
  uint64_t bytes;
};

/// Every copy of `copies`: in one dispatch those whose ends are 4-byte aligned (where the device
/// has buffer device addresses), a buffer copy each for the others. A copy may not write a buffer
/// another reads. Defined in facade.cpp.
void record_byte_copies(Recorder& r, std::span<const ByteCopy> copies);

/// dst[i] = src[i] for every i, as record_copy_any does each, but the pairs of one dtype that are
/// both row-major go through record_byte_copies. Defined in facade.cpp.
void record_copies(Recorder& r, std::span<const GpuView> src, std::span<const GpuView> dst);

/// The copy of `src` into `dst` as a ByteCopy when both are row-major, of one dtype and shape, and
/// not empty; nullopt otherwise (a strided or converting copy: record_copy_any). Not
/// detail::dense_copy, which makes a dense array.
inline std::optional<ByteCopy> byte_copy(const GpuView& src, const GpuView& dst) {
  const auto item = static_cast<uint64_t>(size_of(src.dtype));
  const auto bytes = static_cast<uint64_t>(numel(src.shape)) * item;
  if (bytes == 0 || src.dtype != dst.dtype || src.shape != dst.shape || !is_row_major(src) ||
      !is_row_major(dst))
    return std::nullopt;
  return ByteCopy{&src.buffer, static_cast<uint64_t>(src.offset) * item, &dst.buffer,
                  static_cast<uint64_t>(dst.offset) * item, bytes};
}

/// byte_copy for arrays (a replay's input into its slot, say), without building views: both
/// row-contiguous, of one dtype and size, not empty.
inline std::optional<ByteCopy> byte_copy(const Array& src, const Array& dst) {
  if (!src.row_contiguous() || !dst.row_contiguous() || src.dtype() != dst.dtype() ||
      src.size() != dst.size() || src.size() == 0)
    return std::nullopt;
  const ArrayNode &s = src.node(), &d = dst.node();
  const auto item = static_cast<uint64_t>(size_of(s.dtype));
  return ByteCopy{&s.buffer->device(), static_cast<uint64_t>(s.offset) * item, &d.buffer->device(),
                  static_cast<uint64_t>(d.offset) * item, static_cast<uint64_t>(src.nbytes())};
}

/// v with the dims listed in `axes` moved to the end, the others keeping their order.
inline GpuView move_axes_to_end(GpuView v, std::span<const int> axes) {
  Shape shape;
  Strides strides;
  std::vector<bool> moved(v.shape.size(), false);
  for (int a : axes) moved[static_cast<size_t>(a)] = true;
  for (int pass = 0; pass < 2; ++pass)
    for (size_t d = 0; d < v.shape.size(); ++d)
      if (moved[d] == (pass == 1)) {
        shape.push_back(v.shape[d]);
        strides.push_back(v.strides[d]);
      }
  v.shape = std::move(shape);
  v.strides = std::move(strides);
  return v;
}

/// The stride with which dims [begin, end) of v step through their elements as one dim, when they
/// can (size-1 dims aside, each dim's stride is the next one's times its size); nullopt otherwise.
inline std::optional<int64_t> merged_stride(const GpuView& v, size_t begin, size_t end) {
  int64_t size = 1, stride = 0;
  bool first = true;
  for (size_t d = end; d-- > begin;) {
    if (v.shape[d] == 1) continue;
    if (first) {
      stride = v.strides[d];
      first = false;
    } else if (v.strides[d] != stride * size) {
      return std::nullopt;
    }
    size *= v.shape[d];
  }
  return stride;
}

inline int64_t shape_product(const Shape& s, size_t begin, size_t end) {
  return std::accumulate(s.begin() + static_cast<long>(begin), s.begin() + static_cast<long>(end), int64_t{1},
                         std::multiplies<>());
}

}  // namespace kiln::detail::vk
