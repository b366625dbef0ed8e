#pragma once
// Matrix products on the CPU through OpenBLAS. This header never includes <cblas.h>: gemm.cpp is
// the only file that sees it, so no public header names OpenBLAS.
#include <cstdint>

#include "kiln/core/array.h"

namespace kiln::detail {

/// C = alpha * op(A) op(B) + beta * C on row-major matrices: op(A) is m x k, op(B) is k x n, C is
/// m x n with leading dimension ldc. A transposed operand is stored k x m (resp. n x k). When beta
/// is 0, C is not read (NaNs in it do not propagate). Calls sgemm/dgemm, or gemv when m or n is 1.
/// OpenBLAS runs on one thread: large products are split over kiln's pool (serially inside a
/// parallel_for task or while the pool is busy).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

/// out = alpha * a @ b + beta * out, with a (..., M, K) and b (..., K, N) broadcast over their batch
/// dimensions to out (..., M, N). a and b may have any strides: operands whose last two dims are
/// row-major or transposed go to BLAS as they are, others are packed. `out` must be allocated
/// row-contiguous and, when beta != 0, hold the addend. Dtypes: float32, float64, and float16 /
/// bfloat16 (computed in float32 buffers). All three arrays share one dtype.
void batched_matmul(const Array& a, const Array& b, Array& out, double alpha, double beta);

}  // namespace kiln::detail
