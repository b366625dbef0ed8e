#pragma once
// The fused attention of the gpu facade (gpu.h's conventions: no Vulkan types, every eval_gpu
// compiles in every build), as core/cpu/attention.h computes it on the CPU.
// core/vulkan/runtime/attention_facade.cpp implements it; without Vulkan,
// runtime/disabled_attention.cpp throws DeviceError.
#include "kiln/core/array.h"

namespace kiln::gpu {

/// out = softmax(scale * q k^T + mask) v and lse = the scores' row logsumexp, flash-attention
/// style (the weights never reach memory): q (.., Lq, D), k (.., Lk, D), v (.., Lk, Dv) of one float
/// dtype, any views; mask null or (.., Lq, Lk) of the compute dtype (float64 for float64, else
/// float32), any strides. out gets (.., Lq, Dv) in q's dtype, lse (.., Lq) in the compute dtype.
/// Throws NotImplemented for D or Dv above 128, float64 without shaderFloat64 and 16-bit dtypes
/// without 16-bit storage.
void attention_forward(double scale, bool causal, const Array& q, const Array& k, const Array& v,
                       const Array* mask, Array& out, Array& lse);

/// dq, dk, dv (q's, k's and v's shapes, q's dtype) of attention_forward for the cotangent g of out,
/// from its out and lse. Operands and errors as attention_forward.
void attention_backward(double scale, bool causal, const Array& q, const Array& k, const Array& v,
                        const Array* mask, const Array& out, const Array& lse, const Array& g, Array& dq,
                        Array& dk, Array& dv);

}  // namespace kiln::gpu
