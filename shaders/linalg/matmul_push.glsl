// The push constants of every GEMM kernel (MatmulPush in core/vulkan/runtime/matmul_kernels.cpp).
// Product `batch` is (outer, inner) = (batch / batch_inner, batch % batch_inner): A, B and D step by
// an outer and an inner batch stride each, so two batch dims that do not merge into one (attention's
// [batch, heads] views of [batch, tokens, heads, ...] arrays) need no copy. C is written whole and
// row-major: one stride. A single batch dim has batch_inner 1 and inner strides 0. The includer
// declares the specialization constant kTwoBatchDims, set by the host only when batch_inner > 1:
// the split costs registers (the tensor-core kernel 128 -> 146 on the H200, which halved its
// workgroups per compute unit), so kernels of one batch dim keep the plain product.
layout(push_constant) uniform Push {
  uint M, N, K;
  uint a_row_stride, a_col_stride, b_row_stride, b_col_stride, c_row_stride;
  uint a_offset, b_offset, c_offset;
  uint a_batch_stride, b_batch_stride, c_batch_stride;
  uint d_row_stride, d_col_stride, d_offset, d_batch_stride;
  float alpha, beta;
  uint splits, k_chunk;
  uint batch_inner, a_inner_stride, b_inner_stride, d_inner_stride;
  uvec2 alpha64, beta64;  // alpha and beta as doubles' (low, high) words, for matmul_f64
} p;

// The element offset of product `batch` in an operand with these batch strides.
uint kiln_batch_offset(uint batch, uint outer_stride, uint inner_stride) {
  if (!kTwoBatchDims) return batch * outer_stride;
  return (batch / p.batch_inner) * outer_stride + (batch % p.batch_inner) * inner_stride;
}
