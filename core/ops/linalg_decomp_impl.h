#pragma once
// Internals of kiln::linalg (core/ops/linalg_decomp.h), shared by core/ops/linalg_*.cpp: the
// validation and promotion every op does, batched-matrix helpers built of kiln ops (so the rules
// that use them are differentiable and batchable), the base of the LAPACK primitives, and the
// LAPACK kernels themselves (linalg_lapack.cpp).
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kiln/core/array.h"
#include "kiln/core/primitive.h"

namespace kiln::detail::la {

// ---------------------------------------------------------------- validation and dtypes

/// Throws unless `a` is a valid array of rank >= 2 (a square one when `square`) whose matrix
/// dimensions fit LAPACK's 32-bit integers.
void check_matrix(const char* op, const Array& a, bool square);
/// float64 stays float64; every other dtype (halves, integers, bool) computes in float32.
Dtype compute_dtype(Dtype t);
/// `a` in its compute dtype.
Array to_compute(const Array& a, Stream s);
/// A result computed in float32 for a float16/bfloat16 input, converted back to that dtype; other
/// results as they are (integer inputs give float32).
Array to_result(const Array& out, Dtype input, Stream s);
/// The broadcast of the batch dims (all but the last two) of a and b, with each one's own last two.
std::pair<Array, Array> broadcast_batch(const char* op, const Array& a, const Array& b, Stream s);

// ---------------------------------------------------------------- matrix helpers (kiln ops)

/// The transpose of the last two dims.
Array mT(const Array& x, Stream s);
/// x with the elements above diagonal k (tril) or below it (triu) of its last two dims set to 0.
Array tril(const Array& x, int k, Stream s);
Array triu(const Array& x, int k, Stream s);
/// The main diagonal of the last two dims: (..., m, n) -> (..., min(m, n)).
Array diagonal(const Array& x, Stream s);
/// (..., k) -> (..., k, k) with v on the diagonal.
Array diag_embed(const Array& v, Stream s);
/// (x + x^T) / 2 over the last two dims.
Array sym(const Array& x, Stream s);
/// 1 / x where `keep` holds, 0 elsewhere, with no inf or NaN in either branch's gradient.
Array safe_reciprocal(const Array& x, const Array& keep, Stream s);
/// F[..., i, j] = 1 / (d[..., j] - d[..., i]) where that difference is nonzero, else 0 (the diagonal
/// included): the divisor of the eigenvector and singular-vector derivatives.
Array inverse_gaps(const Array& d, Stream s);
/// The batch axis of a vmap rule's input moved to the front; an unbatched input as it is.
Array batch_first(const Array& x, int axis, Stream s);
/// batch_first for the two inputs of a binary matrix op, with size-1 dims inserted after the batch
/// axis of the input of lower rank so that their batch dims line up when they broadcast.
std::pair<Array, Array> batch_first(const VmapArgs& args, Stream s);

// ---------------------------------------------------------------- primitives

/// Base of the LAPACK primitives: eval_gpu is the CPU kernel run on the host
/// (gpu::eval_on_host, core/vulkan/gpu_host.h).
class HostPrimitive : public Primitive {
 public:
  using Primitive::Primitive;
  void eval_gpu(std::span<const Array> inputs, std::span<Array> outputs) const override;
};

// The primitives built on arrays already checked, in one compute dtype (float32 or float64), for
// the op functions and the rules. Batch dims broadcast where two arrays meet.

/// a^-1.
Array inv_matrices(const Array& a, Stream s);
/// a^-1 b for matrices b (..., n, k).
Array solve_matrices(const Array& a, const Array& b, Stream s);
/// {sign, log|det|}.
std::pair<Array, Array> slogdet_matrices(const Array& a, Stream s);
/// The lower Cholesky factor from a's lower triangle.
Array cholesky_lower(const Array& a, Stream s);
/// solve_triangular without its checks.
Array solve_tri(const Array& a, const Array& b, bool upper, bool left, bool unit, Stream s);
/// {Q, R}; complete only matters for m > n.
std::pair<Array, Array> qr_matrices(const Array& a, bool complete, Stream s);
/// {U, S, Vh}.
std::tuple<Array, Array, Array> svd_matrices(const Array& a, bool full, Stream s);
/// {w, V} of the symmetric matrix of a's lower triangle.
std::pair<Array, Array> eigh_lower(const Array& a, Stream s);

// ---------------------------------------------------------------- LAPACK kernels

// Each takes evaluated float32 or float64 inputs of any layout whose batch dims (all but the last
// two) are equal, loops over the batch on the CPU pool and allocates its outputs (row-major). A
// matrix the routine cannot handle throws the error named in each comment, naming `op`, after the
// whole batch ran.

/// out = a^-1 (getrf, getri). ValueError when a matrix is singular.
void lapack_inv(const char* op, const Array& a, Array& out);
/// x = a^-1 b, b (..., n, k) (getrf, getrs). ValueError when a matrix is singular.
void lapack_solve(const char* op, const Array& a, const Array& b, Array& x);
/// sign and log|det| of each matrix (getrf); a singular one gives 0 and -inf.
void lapack_slogdet(const Array& a, Array& sign, Array& logabsdet);
/// The lower Cholesky factor from a's lower triangle (potrf), zeros above the diagonal. ValueError
/// when a matrix is not positive-definite.
void lapack_cholesky(const char* op, const Array& a, Array& l);
/// x = a^-1 b (left) or b a^-1 with a's upper or lower triangle (trsm); no check for zeros on the
/// diagonal (they give inf or NaN, as in PyTorch).
void blas_solve_triangular(const Array& a, const Array& b, bool upper, bool left, bool unit, Array& x);
/// a = q r (geqrf, orgqr): q (..., m, m) and r (..., m, n) when complete, else (..., m, k), (..., k, n).
void lapack_qr(const Array& a, bool complete, Array& q, Array& r);
/// a = u diag(s) vh (gesdd), s descending. RuntimeError when it does not converge.
void lapack_svd(const char* op, const Array& a, bool full, Array& u, Array& s, Array& vh);
/// Eigenvalues w (ascending) and eigenvectors v (columns) of the symmetric matrix a's lower triangle
/// makes (syevd). RuntimeError when it does not converge.
void lapack_eigh(const char* op, const Array& a, Array& w, Array& v);

}  // namespace kiln::detail::la
