#pragma once
// The kernels with per-dtype variants (reductions, scans, index and scatter rows) are written for
// 32- and 64-bit integers; int16, uint16 and uint64 run through them. int16 and uint16 widen to
// int32 and uint32 on the device (exact, and their sums and products are the CPU's, which
// accumulates them in 32 bits too). uint64 is int64 bit for bit where the kernel only moves,
// adds or multiplies (modular arithmetic is the same), and int64 with the top bit flipped where it
// compares: that maps unsigned order onto signed order, and flipping back restores the values.
#include "kiln/core/vulkan/runtime/kernels.h"

namespace kiln::detail::vk {

/// What a kernel does with the values: moves, adds or multiplies them, or compares them.
enum class KernelUse { arithmetic, ordered };

/// The dtype such a kernel computes t in: int32 for int16, uint32 for uint16, int64 for uint64,
/// t itself for the others.
Dtype kernel_dtype(Dtype t);

/// v as kernel_dtype(v.dtype) values: v itself, v reinterpreted (uint64 for arithmetic), or a new
/// row-major temporary that a recorded conversion fills.
GpuView kernel_input(Recorder& r, const GpuView& v, KernelUse use);

/// Where a kernel writing kernel_dtype(out.dtype) values writes for `out`: out itself,
/// reinterpreted, or a temporary that finish() converts into out.
class KernelOutput {
 public:
  KernelOutput(Recorder& r, const GpuView& out, KernelUse use);
  const GpuView& view() const { return view_; }
  /// Records the conversion into out, when the kernel wrote a temporary.
  void finish(Recorder& r) const;

 private:
  GpuView out_, view_;
  KernelUse use_;
  bool converted_ = false;
};

}  // namespace kiln::detail::vk
