#pragma once
// CPU kernels of the fused attention (core/ops/attention.cpp): per (batch, head) pair and block of
// queries, the scores go through OpenBLAS (scale * Q K^T), the softmax is taken in cache, and the
// weights meet V in a second GEMM; the (Lq, Lk) weights never exist for more than one block.
// float16 and bfloat16 compute in float32, float32 in float32, float64 in float64.
#include <cstdint>

#include "kiln/core/array.h"

namespace kiln::detail {

/// The sizes of one attention call: `batch` (batch, head) pairs, Lq queries, Lk keys, head dims D
/// (q, k) and Dv (v, out).
struct AttentionDims {
  int64_t batch = 0, lq = 0, lk = 0, d = 0, dv = 0;
  double scale = 1.0;
  bool causal = false;  ///< query i sees keys j <= i + lk - lq
};

/// The dtype the kernels compute in for input dtype t: float64 for float64, else float32.
inline Dtype attention_compute_dtype(Dtype t) { return t == float64 ? float64 : float32; }

/// out = softmax(scale * q k^T + mask) v and lse = the scores' row logsumexp (-inf for a row that
/// sees no key, whose output is NaN). q (.., Lq, D), k (.., Lk, D), v (.., Lk, Dv): available, any
/// layout, one float dtype; mask: null or a (.., Lq, Lk) array of the compute dtype with any strides
/// (0 where broadcast). out (.., Lq, Dv) of q's dtype and lse (.., Lq) of the compute dtype are
/// allocated here.
void attention_forward(const AttentionDims& dims, const Array& q, const Array& k, const Array& v,
                       const Array* mask, Array& out, Array& lse);

/// The gradients of attention_forward for the cotangent g of out (out's shape): dq, dk, dv (the
/// shapes and dtype of q, k, v), from out and lse of the forward pass. Allocated here.
void attention_backward(const AttentionDims& dims, const Array& q, const Array& k, const Array& v,
                        const Array* mask, const Array& out, const Array& lse, const Array& g, Array& dq,
                        Array& dk, Array& dv);

}  // namespace kiln::detail
