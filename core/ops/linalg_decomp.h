#pragma once
// kiln::linalg: norms, inverses, solves and decompositions with torch.linalg's names and semantics.
//
// - Batched: every op works on the last two dimensions (the last one for vectors) and maps over
//   the leading ones; two-operand ops broadcast their batch dimensions.
// - Dtypes: float32 and float64 compute in their own precision; float16 and bfloat16 compute in
//   float32 and give their own dtype back; integers and bool compute in, and give, float32 (cross
//   keeps NumPy's promotion: integers stay integers).
// - Errors: shapes and arguments are checked when the op is called (ShapeError, ValueError). What
//   only the values show is found by the kernel, so it is thrown by the eval() (or item(), ...)
//   that computes the op, naming it, and the array stays unevaluated (as take's out-of-range
//   index): a singular matrix in inv and solve, and one that is not positive-definite in cholesky,
//   throw ValueError; an SVD or eigh whose LAPACK iteration does not converge throws RuntimeError.
// - Kernels: the CPU calls LAPACK (Debian's LAPACKE over OpenBLAS) once per matrix, the batch split
//   over kiln's CPU pool. On the GPU the primitives (Inv, Solve, Slogdet, Cholesky,
//   SolveTriangular, Qr, Svd, Eigh) run that CPU kernel inside the GPU evaluation: their inputs are
//   downloaded once (memory_stats().device_to_host_bytes), the results stay in host memory and are
//   uploaded once, on their first GPU use (host_to_device_bytes); a chain of these ops moves nothing
//   between them. The ops written as compositions (norm, det, pinv, cross, and the products and
//   masks in the gradients) run GPU kernels. A compiled function using these primitives on the GPU is
//   not captured as one GPU program (its steps are replayed one by one).
// - Gradients (vjp, jvp) and vmap exist for every op. cholesky and eigh read one triangle and give
//   the symmetric gradient, as PyTorch and JAX do (correct for symmetric perturbations); the
//   gradients of svd's and eigh's vectors assume distinct singular values / eigenvalues (a repeated
//   one's pair contributes nothing) and, with full_matrices, ignore the columns past min(m, n).
#include <optional>
#include <string_view>
#include <tuple>
#include <utility>

#include "kiln/core/array.h"

namespace kiln::linalg {

/// 2-norm of x flattened (torch.linalg.norm(x)): the Frobenius norm of a matrix. Float dtypes as
/// the header says.
Array norm(const Array& x, StreamOrDevice s = {});
/// The norm of order `ord` over `axes`: one axis gives a vector norm (any p, inf, -inf, 0 counts
/// nonzeros), two a matrix norm (1, -1, 2, -2 (largest / smallest singular value), inf, -inf).
/// Empty axes: x must be 1-d or 2-d and is taken whole. ValueError for an order the kind of norm
/// lacks, ShapeError for bad axes.
Array norm(const Array& x, double ord, const Axes& axes = {}, bool keepdims = false, StreamOrDevice s = {});
/// The matrix norm "fro" (Frobenius) or "nuc" (nuclear: the sum of the singular values) over two
/// axes (empty: x must be 2-d). ValueError for another name.
Array norm(const Array& x, std::string_view ord, const Axes& axes = {}, bool keepdims = false,
           StreamOrDevice s = {});

/// The inverse of each square matrix (LU). ShapeError unless square; ValueError at eval when a
/// matrix is singular.
Array inv(const Array& a, StreamOrDevice s = {});
/// x with a x = b (left) or x a = b (not left), a (..., n, n); b (..., n, k), or a vector (n) or
/// (..., n) with a's batch dims (torch.linalg.solve's rule), giving x of b's kind. Batch dims
/// broadcast. ShapeError for mismatched shapes; ValueError at eval when a matrix is singular.
Array solve(const Array& a, const Array& b, bool left = true, StreamOrDevice s = {});
/// x with a x = b (left) or x a = b, reading only a's upper or lower triangle (its diagonal taken as
/// ones when unitriangular); b (..., n, k) for left, (..., k, n) otherwise; batch dims broadcast.
/// ShapeError for mismatched shapes. A zero on the diagonal gives inf or NaN, as in PyTorch.
Array solve_triangular(const Array& a, const Array& b, bool upper, bool left = true,
                       bool unitriangular = false, StreamOrDevice s = {});
/// The Cholesky factor L (lower, a = L L^T, read from a's lower triangle) or, when upper, U (a =
/// U^T U, read from the upper triangle). ShapeError unless square; ValueError at eval when a matrix
/// is not positive-definite.
Array cholesky(const Array& a, bool upper = false, StreamOrDevice s = {});
/// {Q, R} with a = Q R, a (..., m, n), k = min(m, n): mode "reduced" gives Q (m, k) and R (k, n),
/// "complete" Q (m, m) and R (m, n), "r" only R (k, n) (Q is an empty Array). The signs are
/// LAPACK's (R's diagonal may be negative). ValueError for another mode; the gradient of "complete"
/// with m > n throws NotImplemented (Q's extra columns are not unique).
std::pair<Array, Array> qr(const Array& a, std::string_view mode = "reduced", StreamOrDevice s = {});
/// {U, S, Vh} with a = U diag(S) Vh, S descending (gesdd): U (m, m) and Vh (n, n) with
/// full_matrices, else U (m, k) and Vh (k, n). jvp with full_matrices needs m == n (NotImplemented
/// otherwise). RuntimeError at eval when the SVD does not converge.
std::tuple<Array, Array, Array> svd(const Array& a, bool full_matrices = true, StreamOrDevice s = {});
/// {eigenvalues (ascending), eigenvectors (columns)} of the symmetric matrix made of a's lower
/// ("L") or upper ("U") triangle (syevd). ShapeError unless square, ValueError for another uplo;
/// RuntimeError at eval when it does not converge.
std::pair<Array, Array> eigh(const Array& a, std::string_view uplo = "L", StreamOrDevice s = {});
/// The determinant, sign * exp(logabsdet) of slogdet (0 for a singular matrix; its gradient there
/// throws the ValueError of inv). ShapeError unless square.
Array det(const Array& a, StreamOrDevice s = {});
/// {sign, log|det|} of each square matrix (LU); a singular one gives {0, -inf}. ShapeError unless
/// square.
std::pair<Array, Array> slogdet(const Array& a, StreamOrDevice s = {});
/// The pseudo-inverse through the SVD (through eigh when hermitian): singular values at or below
/// max(atol, rtol * the largest) are dropped. Defaults as torch.linalg.pinv: atol 0 and rtol
/// eps * max(m, n) when neither is given, rtol 0 when only atol is. ValueError for a negative
/// tolerance.
Array pinv(const Array& a, std::optional<double> atol = {}, std::optional<double> rtol = {},
           bool hermitian = false, StreamOrDevice s = {});
/// The cross product of 3-vectors along `axis` (after broadcasting a and b). ShapeError unless that
/// axis has size 3 in both.
Array cross(const Array& a, const Array& b, int axis = -1, StreamOrDevice s = {});

}  // namespace kiln::linalg
