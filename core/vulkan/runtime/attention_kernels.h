#pragma once
// Recording helpers for the fused attention kernels (shaders/attention/*.comp): they validate the
// views, pick the variant and record the dispatches; they never submit.
#include "kiln/core/vulkan/runtime/kernels.h"

namespace kiln::detail::vk {

/// The operands of one attention call as 4-d views (N0, N1, L, X) sharing one split of the
/// (batch, head) pairs, with unit stride along X (the mask: any column stride, may be absent).
struct AttentionOperands {
  GpuView q, k, v;
  const GpuView* mask = nullptr;
  double scale = 1.0;
  bool causal = false;
};

/// out (N0 * N1 * Lq * Dv, contiguous, q's dtype) and lse (N0 * N1 * Lq, the compute dtype):
/// shaders/attention/attention_forward.comp. Throws ShapeError or ValueError (views), NotImplemented
/// (head dims above 128, float64 without shaderFloat64, 16-bit dtypes without 16-bit storage).
void record_attention_forward(Recorder& r, const AttentionOperands& a, const GpuView& out,
                              const GpuView& lse);

/// dq, dk, dv (contiguous, q's dtype) for the cotangent g (a 4-d view as q's) from the forward's
/// out and lse (contiguous): attention_dq.comp, then attention_dkdv.comp. Throws as the forward.
void record_attention_backward(Recorder& r, const AttentionOperands& a, const GpuView& g, const GpuView& out,
                               const GpuView& lse, const GpuView& dq, const GpuView& dk, const GpuView& dv);

}  // namespace kiln::detail::vk
