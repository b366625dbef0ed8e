#pragma once
// Scaled dot-product attention as one fused node (PyTorch's F.scaled_dot_product_attention, MLX's
// fast::scaled_dot_product_attention): softmax(scale * q k^T + mask) v without materializing the
// (Lq, Lk) weights in memory on the GPU, and one query block at a time on the CPU. The forward node
// keeps each row's logsumexp, so the backward pass (also fused) recomputes the weights in one pass.
#include "kiln/core/array.h"

namespace kiln {

/// softmax(scale * q @ k^T + mask, -1) @ v for q (..., Lq, D), k (..., Lk, D), v (..., Lk, Dv), whose
/// leading dims (batch, heads, ...) must be equal; the result is (..., Lq, Dv) in the inputs'
/// promoted float dtype (float16 and bfloat16 compute in float32). With `causal`, query i sees only
/// keys j <= i + Lk - Lq (the queries are the last Lq positions, as with a KV cache). `mask` (empty:
/// none) broadcasts to (..., Lq, Lk): bool (true = masked out) or float (added to the scores). A row
/// that sees no key comes out NaN, as the unfused softmax gives. Throws DtypeError for non-float
/// inputs or a mask neither bool nor float, ShapeError for mismatched shapes, ValueError for a scale
/// that is not finite.
Array scaled_dot_product_attention(const Array& q, const Array& k, const Array& v, double scale,
                                   bool causal = false, const Array& mask = Array(), StreamOrDevice s = {});

}  // namespace kiln
