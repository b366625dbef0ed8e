// The CPU kernels of kiln::linalg: LAPACK (Debian's liblapacke over OpenBLAS) and OpenBLAS's trsm,
// one call per matrix of the batch, the batch split over kiln's CPU pool. The _work entry points
// are used throughout: the plain LAPACKE ones check their input for NaN and refuse it.
//
// LAPACK is column-major and kiln row-major: a row-major m x n buffer is the column-major n x m
// transpose. Where a factorization of the transpose gives the result directly (inv, slogdet,
// cholesky, svd, eigh's values) no copy is transposed; qr, solve's right-hand side and eigh's
// vectors are transposed on the way in or out.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <vector>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/ops/linalg_decomp_impl.h"

#define lapack_complex_float std::complex<float>
#define lapack_complex_double std::complex<double>
#include <lapacke.h>

namespace kiln::detail::la {
namespace {

using Int = lapack_int;

// OpenBLAS runs on one thread in kiln (core/cpu/gemm.cpp says why); its LAPACK would otherwise
// start its own threads inside each task of the pool.
void single_threaded_blas() {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

// ---------------------------------------------------------------- typed entry points

Int getrf(Int m, Int n, float* a, Int lda, Int* ipiv) {
  return LAPACKE_sgetrf_work(LAPACK_COL_MAJOR, m, n, a, lda, ipiv);
}
Int getrf(Int m, Int n, double* a, Int lda, Int* ipiv) {
  return LAPACKE_dgetrf_work(LAPACK_COL_MAJOR, m, n, a, lda, ipiv);
}
Int getri(Int n, float* a, Int lda, const Int* ipiv, float* work, Int lwork) {
  return LAPACKE_sgetri_work(LAPACK_COL_MAJOR, n, a, lda, ipiv, work, lwork);
}
Int getri(Int n, double* a, Int lda, const Int* ipiv, double* work, Int lwork) {
  return LAPACKE_dgetri_work(LAPACK_COL_MAJOR, n, a, lda, ipiv, work, lwork);
}
Int getrs(char trans, Int n, Int nrhs, const float* a, Int lda, const Int* ipiv, float* b, Int ldb) {
  return LAPACKE_sgetrs_work(LAPACK_COL_MAJOR, trans, n, nrhs, a, lda, ipiv, b, ldb);
}
Int getrs(char trans, Int n, Int nrhs, const double* a, Int lda, const Int* ipiv, double* b, Int ldb) {
  return LAPACKE_dgetrs_work(LAPACK_COL_MAJOR, trans, n, nrhs, a, lda, ipiv, b, ldb);
}
Int potrf(char uplo, Int n, float* a, Int lda) {
  return LAPACKE_spotrf_work(LAPACK_COL_MAJOR, uplo, n, a, lda);
}
Int potrf(char uplo, Int n, double* a, Int lda) {
  return LAPACKE_dpotrf_work(LAPACK_COL_MAJOR, uplo, n, a, lda);
}
Int geqrf(Int m, Int n, float* a, Int lda, float* tau, float* work, Int lwork) {
  return LAPACKE_sgeqrf_work(LAPACK_COL_MAJOR, m, n, a, lda, tau, work, lwork);
}
Int geqrf(Int m, Int n, double* a, Int lda, double* tau, double* work, Int lwork) {
  return LAPACKE_dgeqrf_work(LAPACK_COL_MAJOR, m, n, a, lda, tau, work, lwork);
}
Int orgqr(Int m, Int n, Int k, float* a, Int lda, const float* tau, float* work, Int lwork) {
  return LAPACKE_sorgqr_work(LAPACK_COL_MAJOR, m, n, k, a, lda, tau, work, lwork);
}
Int orgqr(Int m, Int n, Int k, double* a, Int lda, const double* tau, double* work, Int lwork) {
  return LAPACKE_dorgqr_work(LAPACK_COL_MAJOR, m, n, k, a, lda, tau, work, lwork);
}
Int gesdd(char jobz, Int m, Int n, float* a, Int lda, float* s, float* u, Int ldu, float* vt, Int ldvt,
          float* work, Int lwork, Int* iwork) {
  return LAPACKE_sgesdd_work(LAPACK_COL_MAJOR, jobz, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork, iwork);
}
Int gesdd(char jobz, Int m, Int n, double* a, Int lda, double* s, double* u, Int ldu, double* vt, Int ldvt,
          double* work, Int lwork, Int* iwork) {
  return LAPACKE_dgesdd_work(LAPACK_COL_MAJOR, jobz, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork, iwork);
}
Int syevd(Int n, float* a, Int lda, float* w, float* work, Int lwork, Int* iwork, Int liwork) {
  return LAPACKE_ssyevd_work(LAPACK_COL_MAJOR, 'V', 'U', n, a, lda, w, work, lwork, iwork, liwork);
}
Int syevd(Int n, double* a, Int lda, double* w, double* work, Int lwork, Int* iwork, Int liwork) {
  return LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'V', 'U', n, a, lda, w, work, lwork, iwork, liwork);
}
void trsm(bool left, bool upper, bool unit, Int m, Int n, const float* a, Int lda, float* b, Int ldb) {
  cblas_strsm(CblasRowMajor, left ? CblasLeft : CblasRight, upper ? CblasUpper : CblasLower, CblasNoTrans,
              unit ? CblasUnit : CblasNonUnit, m, n, 1.0f, a, lda, b, ldb);
}
void trsm(bool left, bool upper, bool unit, Int m, Int n, const double* a, Int lda, double* b, Int ldb) {
  cblas_dtrsm(CblasRowMajor, left ? CblasLeft : CblasRight, upper ? CblasUpper : CblasLower, CblasNoTrans,
              unit ? CblasUnit : CblasNonUnit, m, n, 1.0, a, lda, b, ldb);
}

// ---------------------------------------------------------------- batch loops

Int to_int(int64_t v) { return static_cast<Int>(std::max<int64_t>(v, 1)); }  // also a leading dimension

int64_t batch_of(const Array& a) {
  int64_t count = 1;
  for (int d = 0; d + 2 < a.ndim(); ++d) count *= a.shape(d);
  return count;
}

// body(b) for every matrix b of the batch, split over the pool; `work` estimates one call's cost.
// Each task gets its own scratch (made by `scratch()`).
template <class MakeScratch, class Body>
void for_each_matrix(int64_t count, int64_t work, MakeScratch scratch, Body body) {
  single_threaded_blas();
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(work, 1));
  parallel_for(count, grain, [&](int64_t begin, int64_t end) {
    auto s = scratch();
    for (int64_t b = begin; b < end; ++b) body(b, s);
  });
}

// Workspace size a query (lwork = -1) wrote into `w`.
template <class T>
Int lwork_of(T w) {
  return std::max<Int>(1, static_cast<Int>(w));
}

// LAPACK reports a wrong argument with a negative info: a bug here, never the user's.
void check_args(const char* routine, Int info) {
  if (info < 0) throw RuntimeError::of(routine, "LAPACK rejected an argument", "argument {}", -info);
}

std::string batch_note(int64_t b, int64_t count) {
  return count > 1 ? fmt::format(" (matrix {} of the batch)", b) : std::string();
}

// The first matrix of the batch whose info is positive, or -1.
int64_t first_failure(const std::vector<Int>& info) {
  for (size_t b = 0; b < info.size(); ++b)
    if (info[b] > 0) return static_cast<int64_t>(b);
  return -1;
}

// ---------------------------------------------------------------- kernels

template <class T>
void inv_impl(const char* op, const Array& a, Array& out) {
  const Array ad = dense_copy(a);
  out.allocate();
  const int64_t n = a.shape(-1), count = batch_of(a), nn = n * n;
  if (n == 0 || count == 0) return;
  const T* src = ad.strided_data<T>();
  T* dst = out.strided_data<T>();
  std::vector<Int> info(count, 0);
  struct Scratch {
    std::vector<Int> ipiv;
    std::vector<T> work;
  };
  for_each_matrix(
      count, nn * n,
      [&] {
        Scratch s{std::vector<Int>(n), {}};
        T query = 0;
        check_args("getri", getri(to_int(n), dst, to_int(n), s.ipiv.data(), &query, -1));
        s.work.resize(lwork_of(query));
        return s;
      },
      [&](int64_t b, Scratch& s) {
        T* x = dst + b * nn;  // the transpose's inverse is the inverse's transpose
        std::copy(src + b * nn, src + (b + 1) * nn, x);
        const Int r = getrf(to_int(n), to_int(n), x, to_int(n), s.ipiv.data());
        check_args("getrf", r);
        if ((info[b] = r) > 0) return;
        check_args("getri", getri(to_int(n), x, to_int(n), s.ipiv.data(), s.work.data(),
                                  static_cast<Int>(s.work.size())));
      });
  if (const int64_t b = first_failure(info); b >= 0)
    throw ValueError::of(op, "the matrix is singular", "pivot {} of its LU factorization is zero{}", info[b],
                         batch_note(b, count));
}

template <class T>
void solve_impl(const char* op, const Array& a, const Array& rhs, Array& x) {
  const Array ad = dense_copy(a), bd = dense_copy(rhs);
  x.allocate();
  const int64_t n = a.shape(-1), k = rhs.shape(-1), count = batch_of(a), nn = n * n, nk = n * k;
  if (n == 0 || k == 0 || count == 0) return;
  const T *src = ad.strided_data<T>(), *bsrc = bd.strided_data<T>();
  T* dst = x.strided_data<T>();
  std::vector<Int> info(count, 0);
  struct Scratch {
    std::vector<Int> ipiv;
    std::vector<T> lu, rhs;
  };
  for_each_matrix(
      count, nn * n + nn * k,
      [&] {
        return Scratch{std::vector<Int>(n), std::vector<T>(nn), std::vector<T>(nk)};
      },
      [&](int64_t b, Scratch& s) {
        std::copy(src + b * nn, src + (b + 1) * nn, s.lu.begin());  // a^T, column-major
        const Int r = getrf(to_int(n), to_int(n), s.lu.data(), to_int(n), s.ipiv.data());
        check_args("getrf", r);
        if ((info[b] = r) > 0) return;
        const T* bb = bsrc + b * nk;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < k; ++j) s.rhs[j * n + i] = bb[i * k + j];
        // (a^T)^T x = b
        check_args("getrs", getrs('T', to_int(n), to_int(k), s.lu.data(), to_int(n), s.ipiv.data(),
                                  s.rhs.data(), to_int(n)));
        T* xb = dst + b * nk;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < k; ++j) xb[i * k + j] = s.rhs[j * n + i];
      });
  if (const int64_t b = first_failure(info); b >= 0)
    throw ValueError::of(op, "the matrix is singular", "pivot {} of its LU factorization is zero{}", info[b],
                         batch_note(b, count));
}

template <class T>
void slogdet_impl(const Array& a, Array& sign, Array& logabsdet) {
  const Array ad = dense_copy(a);
  sign.allocate();
  logabsdet.allocate();
  const int64_t n = a.shape(-1), count = batch_of(a), nn = n * n;
  const T* src = ad.strided_data<T>();
  T *sg = sign.strided_data<T>(), *la = logabsdet.strided_data<T>();
  if (count == 0) return;
  if (n == 0) {  // the determinant of an empty matrix is 1
    std::fill(sg, sg + count, T(1));
    std::fill(la, la + count, T(0));
    return;
  }
  struct Scratch {
    std::vector<Int> ipiv;
    std::vector<T> lu;
  };
  for_each_matrix(
      count, nn * n,
      [&] {
        return Scratch{std::vector<Int>(n), std::vector<T>(nn)};
      },
      [&](int64_t b, Scratch& s) {
        std::copy(src + b * nn, src + (b + 1) * nn, s.lu.begin());  // det(a^T) = det(a)
        const Int r = getrf(to_int(n), to_int(n), s.lu.data(), to_int(n), s.ipiv.data());
        check_args("getrf", r);
        if (r > 0) {
          sg[b] = 0;
          la[b] = -std::numeric_limits<T>::infinity();
          return;
        }
        bool negative = false;
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          const T d = s.lu[i * n + i];
          negative ^= (d < 0) != (s.ipiv[i] != i + 1);
          sum += std::log(std::abs(static_cast<double>(d)));
        }
        sg[b] = negative ? T(-1) : T(1);
        la[b] = static_cast<T>(sum);
      });
}

template <class T>
void cholesky_impl(const char* op, const Array& a, Array& l) {
  const Array ad = dense_copy(a);
  l.allocate();
  const int64_t n = a.shape(-1), count = batch_of(a), nn = n * n;
  if (n == 0 || count == 0) return;
  const T* src = ad.strided_data<T>();
  T* dst = l.strided_data<T>();
  std::vector<Int> info(count, 0);
  for_each_matrix(
      count, nn * n / 3, [] { return 0; },
      [&](int64_t b, int) {
        // The upper factor of a^T (read from a^T's upper triangle, a's lower one) is, row-major, the
        // lower factor of a.
        T* x = dst + b * nn;
        std::copy(src + b * nn, src + (b + 1) * nn, x);
        const Int r = potrf('U', to_int(n), x, to_int(n));
        check_args("potrf", r);
        info[b] = r;
        for (int64_t i = 0; i < n; ++i) std::fill(x + i * n + i + 1, x + (i + 1) * n, T(0));
      });
  if (const int64_t b = first_failure(info); b >= 0)
    throw ValueError::of(op, "the matrix is not positive-definite",
                         "its leading minor of order {} is not positive-definite{}", info[b],
                         batch_note(b, count));
}

template <class T>
void solve_triangular_impl(const Array& a, const Array& rhs, bool upper, bool left, bool unit, Array& x) {
  const Array ad = dense_copy(a);
  x.allocate();
  copy_strided(rhs, x);
  const int64_t n = a.shape(-1), rows = rhs.shape(-2), cols = rhs.shape(-1), count = batch_of(a);
  if (rows == 0 || cols == 0 || count == 0) return;
  const T* src = ad.strided_data<T>();
  T* dst = x.strided_data<T>();
  for_each_matrix(
      count, n * rows * cols, [] { return 0; },
      [&](int64_t b, int) {
        trsm(left, upper, unit, to_int(rows), to_int(cols), src + b * n * n, to_int(n), dst + b * rows * cols,
             to_int(cols));
      });
}

template <class T>
void qr_impl(const Array& a, bool complete, Array& q, Array& r) {
  const Array ad = dense_copy(a);
  q.allocate();
  r.allocate();
  const int64_t m = a.shape(-2), n = a.shape(-1), k = std::min(m, n), count = batch_of(a);
  const int64_t qcols = complete ? m : k, rrows = complete ? m : k;
  if (count == 0 || m == 0) return;  // q and r are empty
  const T* src = ad.strided_data<T>();
  T *qd = q.strided_data<T>(), *rd = r.strided_data<T>();
  const int64_t wcols = std::max(n, qcols);  // the reflectors, then q in place
  struct Scratch {
    std::vector<T> w, tau, work;
  };
  for_each_matrix(
      count, m * n * k,
      [&] {
        Scratch s{std::vector<T>(m * wcols), std::vector<T>(std::max<int64_t>(k, 1)), {}};
        T q1 = 0, q2 = 0;
        check_args("geqrf", geqrf(to_int(m), to_int(n), s.w.data(), to_int(m), s.tau.data(), &q1, -1));
        check_args("orgqr", orgqr(to_int(m), static_cast<Int>(qcols), static_cast<Int>(k), s.w.data(),
                                  to_int(m), s.tau.data(), &q2, -1));
        s.work.resize(std::max(lwork_of(q1), lwork_of(q2)));
        return s;
      },
      [&](int64_t b, Scratch& s) {
        const T* ab = src + b * m * n;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) s.w[j * m + i] = ab[i * n + j];
        const Int lw = static_cast<Int>(s.work.size());
        check_args("geqrf", geqrf(to_int(m), static_cast<Int>(n), s.w.data(), to_int(m), s.tau.data(),
                                  s.work.data(), lw));
        T* rb = rd + b * rrows * n;
        for (int64_t i = 0; i < rrows; ++i)
          for (int64_t j = 0; j < n; ++j) rb[i * n + j] = i <= j ? s.w[j * m + i] : T(0);
        if (qcols == 0) return;
        check_args("orgqr", orgqr(to_int(m), static_cast<Int>(qcols), static_cast<Int>(k), s.w.data(),
                                  to_int(m), s.tau.data(), s.work.data(), lw));
        T* qb = qd + b * m * qcols;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < qcols; ++j) qb[i * qcols + j] = s.w[j * m + i];
      });
}

template <class T>
void svd_impl(const char* op, const Array& a, bool full, Array& u, Array& sv, Array& vh) {
  const Array ad = dense_copy(a);
  u.allocate();
  sv.allocate();
  vh.allocate();
  const int64_t m = a.shape(-2), n = a.shape(-1), k = std::min(m, n), count = batch_of(a);
  const int64_t ucols = full ? m : k, vrows = full ? n : k;
  if (count == 0) return;
  const T* src = ad.strided_data<T>();
  T *ud = u.strided_data<T>(), *sd = sv.strided_data<T>(), *vd = vh.strided_data<T>();
  if (k == 0) {  // nothing to factor: full bases are the identity
    for (int64_t b = 0; b < count; ++b) {
      for (int64_t i = 0; i < m * ucols; ++i) ud[b * m * ucols + i] = i % (ucols + 1) == 0 ? T(1) : T(0);
      for (int64_t i = 0; i < vrows * n; ++i) vd[b * vrows * n + i] = i % (n + 1) == 0 ? T(1) : T(0);
    }
    return;
  }
  const char jobz = full ? 'A' : 'S';
  std::vector<Int> info(count, 0);
  struct Scratch {
    std::vector<T> w, work;
    std::vector<Int> iwork;
  };
  // a^T = v s u^T: the factorization of the column-major transpose writes vh (as its "u") and u (as
  // its "vt") row-major, straight into the outputs.
  for_each_matrix(
      count, m * n * k * 4,
      [&] {
        Scratch s{std::vector<T>(m * n), {}, std::vector<Int>(8 * k)};
        T query = 0;
        check_args("gesdd", gesdd(jobz, to_int(n), to_int(m), s.w.data(), to_int(n), sd, vd, to_int(n), ud,
                                  to_int(ucols), &query, -1, s.iwork.data()));
        s.work.resize(lwork_of(query));
        return s;
      },
      [&](int64_t b, Scratch& s) {
        std::copy(src + b * m * n, src + (b + 1) * m * n, s.w.begin());
        const Int r = gesdd(jobz, to_int(n), to_int(m), s.w.data(), to_int(n), sd + b * k, vd + b * vrows * n,
                            to_int(n), ud + b * m * ucols, to_int(ucols), s.work.data(),
                            static_cast<Int>(s.work.size()), s.iwork.data());
        check_args("gesdd", r);
        info[b] = r;
      });
  if (const int64_t b = first_failure(info); b >= 0)
    throw RuntimeError::of(op, "the SVD did not converge", "LAPACK's gesdd returned {}{}", info[b],
                           batch_note(b, count));
}

template <class T>
void eigh_impl(const char* op, const Array& a, Array& w, Array& v) {
  const Array ad = dense_copy(a);
  w.allocate();
  v.allocate();
  const int64_t n = a.shape(-1), count = batch_of(a), nn = n * n;
  if (n == 0 || count == 0) return;
  const T* src = ad.strided_data<T>();
  T *wd = w.strided_data<T>(), *vd = v.strided_data<T>();
  std::vector<Int> info(count, 0);
  struct Scratch {
    std::vector<T> z, work;
    std::vector<Int> iwork;
  };
  for_each_matrix(
      count, nn * n * 4,
      [&] {
        Scratch s{std::vector<T>(nn), {}, {}};
        T query = 0;
        Int iquery = 0;
        check_args("syevd", syevd(to_int(n), s.z.data(), to_int(n), wd, &query, -1, &iquery, -1));
        s.work.resize(lwork_of(query));
        s.iwork.resize(std::max<Int>(1, iquery));
        return s;
      },
      [&](int64_t b, Scratch& s) {
        // a^T's upper triangle is a's lower one; the eigenvectors come back as columns, column-major.
        std::copy(src + b * nn, src + (b + 1) * nn, s.z.begin());
        const Int r =
            syevd(to_int(n), s.z.data(), to_int(n), wd + b * n, s.work.data(),
                  static_cast<Int>(s.work.size()), s.iwork.data(), static_cast<Int>(s.iwork.size()));
        check_args("syevd", r);
        if ((info[b] = r) > 0) return;
        T* vb = vd + b * nn;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < n; ++j) vb[i * n + j] = s.z[j * n + i];
      });
  if (const int64_t b = first_failure(info); b >= 0)
    throw RuntimeError::of(op, "the eigenvalue algorithm did not converge", "LAPACK's syevd returned {}{}",
                           info[b], batch_note(b, count));
}

}  // namespace

void lapack_inv(const char* op, const Array& a, Array& out) {
  a.dtype() == float64 ? inv_impl<double>(op, a, out) : inv_impl<float>(op, a, out);
}
void lapack_solve(const char* op, const Array& a, const Array& b, Array& x) {
  a.dtype() == float64 ? solve_impl<double>(op, a, b, x) : solve_impl<float>(op, a, b, x);
}
void lapack_slogdet(const Array& a, Array& sign, Array& logabsdet) {
  a.dtype() == float64 ? slogdet_impl<double>(a, sign, logabsdet) : slogdet_impl<float>(a, sign, logabsdet);
}
void lapack_cholesky(const char* op, const Array& a, Array& l) {
  a.dtype() == float64 ? cholesky_impl<double>(op, a, l) : cholesky_impl<float>(op, a, l);
}
void blas_solve_triangular(const Array& a, const Array& b, bool upper, bool left, bool unit, Array& x) {
  a.dtype() == float64 ? solve_triangular_impl<double>(a, b, upper, left, unit, x)
                       : solve_triangular_impl<float>(a, b, upper, left, unit, x);
}
void lapack_qr(const Array& a, bool complete, Array& q, Array& r) {
  a.dtype() == float64 ? qr_impl<double>(a, complete, q, r) : qr_impl<float>(a, complete, q, r);
}
void lapack_svd(const char* op, const Array& a, bool full, Array& u, Array& s, Array& vh) {
  a.dtype() == float64 ? svd_impl<double>(op, a, full, u, s, vh) : svd_impl<float>(op, a, full, u, s, vh);
}
void lapack_eigh(const char* op, const Array& a, Array& w, Array& v) {
  a.dtype() == float64 ? eigh_impl<double>(op, a, w, v) : eigh_impl<float>(op, a, w, v);
}

}  // namespace kiln::detail::la
