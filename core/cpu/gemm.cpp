// GEMM through OpenBLAS: with core/ops/linalg_lapack.cpp (trsm), the only files that include <cblas.h>.
#include "kiln/core/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <type_traits>
#include <vector>

#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/cpu/strided.h"

namespace kiln::detail {
namespace {

CBLAS_TRANSPOSE trans(bool t) { return t ? CblasTrans : CblasNoTrans; }

// OpenBLAS runs on one thread; kiln splits large products over its own pool instead. OpenBLAS's
// threads spin in sched_yield for a while after each call, and on a small machine they take the
// cores from the elementwise work between GEMMs: LeNet's training step took twice as long with
// them (bench/core/train_step_bench, 2 cores). Concurrent callers each get a one-thread sgemm
// rather than oversubscribing. Checked on every call, as code outside kiln may change the count.
void single_threaded_blas() {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}
blasint bi(int64_t v) { return static_cast<blasint>(v); }

template <class T>
void scale_rows(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    T* row = c + i * ldc;
    if (beta == T(0))
      std::fill(row, row + n, T(0));
    else
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
  }
}

// One body for both precisions; Gemm/Gemv are the cblas entry points of that precision.
template <class T, class Gemm, class Gemv>
void gemm_impl(Gemm gemm_fn, Gemv gemv_fn, bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha,
               const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    scale_rows(m, n, beta, c, ldc);
    return;
  }
  // Matrix-vector products skip sgemm's packing, which dominates when one side is a vector.
  // gemv scales y by beta, and some OpenBLAS versions compute 0 * NaN there: clear y instead.
  if ((m == 1 || n == 1) && beta == T(0)) scale_rows(m, n, beta, c, ldc);
  single_threaded_blas();
  const int threads = num_threads();
  constexpr int64_t kMinSplit = 64, kMinMacs = int64_t{1} << 21;
  // A large one is split over kiln's pool by its output, each part a one-thread gemv: a decode
  // step's products are all matrix-vector and memory-bound, beyond one core's bandwidth. It pays
  // from an eighth of sgemm's threshold, as a gemv streams its matrix once with no packing to
  // amortize (GPT-2's attention projections, 768 x 768 and 768 x 2304, are split).
  auto split = [&](int64_t len, const auto& part) {
    if (threads > 1 && len * k >= kMinMacs / 8 && len >= 2 * kMinSplit)
      parallel_for(len, std::max(kMinSplit, (len + 2 * threads - 1) / (2 * threads)), part);
    else
      part(int64_t{0}, len);
  };
  if (m == 1) {
    // c (1 x n) = alpha * op(B)^T a + beta * c; op(B)^T is B^T when B is stored k x n. Outputs
    // c0..c1 read rows c0..c1 of a stored n x k B, columns c0..c1 of a k x n one.
    split(n, [&](int64_t c0, int64_t c1) {
      gemv_fn(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, bi(tb ? c1 - c0 : k), bi(tb ? k : c1 - c0),
              alpha, tb ? b + c0 * ldb : b + c0, bi(ldb), a, bi(ta ? lda : 1), beta, c + c0, 1);
    });
    return;
  }
  if (n == 1) {
    // c (m x 1) = alpha * op(A) b + beta * c.
    split(m, [&](int64_t r0, int64_t r1) {
      gemv_fn(CblasRowMajor, trans(ta), bi(ta ? k : r1 - r0), bi(ta ? r1 - r0 : k), alpha,
              ta ? a + r0 : a + r0 * lda, bi(lda), b, bi(tb ? 1 : ldb), beta, c + r0 * ldc, bi(ldc));
    });
    return;
  }
  // Large products split across kiln's pool, each part a one-thread sgemm (see single_threaded_blas).
  // The split is along C's longer side, in parts of at least 64 rows or columns so that each
  // part's packing of the shared operand stays small next to its arithmetic.
  if (threads > 1 && m * n * k >= kMinMacs && std::max(m, n) >= 2 * kMinSplit) {
    const int64_t grain = std::max(kMinSplit, (std::max(m, n) + 2 * threads - 1) / (2 * threads));
    if (m >= n) {
      parallel_for(m, grain, [&](int64_t r0, int64_t r1) {
        const T* ar = ta ? a + r0 : a + r0 * lda;  // rows of op(A): columns of a stored A^T
        gemm_fn(CblasRowMajor, trans(ta), trans(tb), bi(r1 - r0), bi(n), bi(k), alpha, ar, bi(lda), b,
                bi(ldb), beta, c + r0 * ldc, bi(ldc));
      });
    } else {
      parallel_for(n, grain, [&](int64_t c0, int64_t c1) {
        const T* bc = tb ? b + c0 * ldb : b + c0;  // columns of op(B): rows of a stored B^T
        gemm_fn(CblasRowMajor, trans(ta), trans(tb), bi(m), bi(c1 - c0), bi(k), alpha, a, bi(lda), bc,
                bi(ldb), beta, c + c0, bi(ldc));
      });
    }
    return;
  }
  gemm_fn(CblasRowMajor, trans(ta), trans(tb), bi(m), bi(n), bi(k), alpha, a, bi(lda), b, bi(ldb), beta, c,
          bi(ldc));
}

// ---- strided operands

// How a strided (rows x cols) matrix can be handed to BLAS without a copy.
struct BlasLayout {
  bool ok = false;
  bool trans = false;
  int64_t ld = 0;
};

BlasLayout blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  // Strides of size-1 dims never move the index, so they may take any value.
  if (cols == 1 || cs == 1) {
    const int64_t ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
    if (ld >= std::max<int64_t>(cols, 1) && ld <= INT_MAX) return {true, false, ld};
  }
  if (rows == 1 || rs == 1) {
    const int64_t ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
    if (ld >= std::max<int64_t>(rows, 1) && ld <= INT_MAX) return {true, true, ld};
  }
  return {};
}

// Copies a strided matrix into a dense row-major one, converting element types.
template <class S, class D>
void pack_matrix(const S* src, int64_t rows, int64_t cols, int64_t rs, int64_t cs, D* dst) {
  parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(cols, 1)),
               [&](int64_t rb, int64_t re) {
                 for (int64_t i = rb; i < re; ++i) {
                   const S* s = src + i * rs;
                   D* d = dst + i * cols;
                   for (int64_t j = 0; j < cols; ++j)
                     d[j] = static_cast<D>(static_cast<compute_t<S>>(s[j * cs]));
                 }
               });
}

template <class S, class D>
void convert_dense(const S* src, int64_t n, D* dst) {
  parallel_for(n, kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = static_cast<D>(static_cast<compute_t<S>>(src[i]));
  });
}

// One matmul operand: the matrix dims' strides, the batch strides broadcast to out's batch shape,
// and a buffer that caches the last packed matrix (a broadcast operand is packed once).
template <class T, class C>
struct MatOperand {
  const T* base;
  int64_t rows, cols, rs, cs;
  Strides batch;
  BlasLayout layout;
  std::vector<C> buf;
  int64_t packed_offset = -1;

  MatOperand(const Array& x, const Shape& out_batch) : base(x.strided_data<T>()) {
    const int nd = x.ndim();
    rows = x.shape()[nd - 2];
    cols = x.shape()[nd - 1];
    rs = x.strides()[nd - 2];
    cs = x.strides()[nd - 1];
    const Shape xb(x.shape().begin(), x.shape().end() - 2);
    const Strides xs(x.strides().begin(), x.strides().end() - 2);
    batch = broadcast_strides(xb, xs, out_batch);
    if constexpr (std::is_same_v<T, C>) layout = blas_layout(rows, cols, rs, cs);
  }

  // Pointer, transpose flag and leading dimension of the matrix at `offset`.
  const C* get(int64_t offset, bool& trans, int64_t& ld) {
    if (layout.ok) {
      trans = layout.trans;
      ld = layout.ld;
      if constexpr (std::is_same_v<T, C>) return base + offset;
    }
    if (offset != packed_offset) {
      buf.resize(static_cast<size_t>(rows * cols));
      pack_matrix(base + offset, rows, cols, rs, cs, buf.data());
      packed_offset = offset;
    }
    trans = false;
    ld = std::max<int64_t>(cols, 1);
    return buf.data();
  }
};

// Row stride of the (batch * rows) x cols matrix that `x`'s batch and row dims form together, if
// they nest into one dimension.
std::optional<int64_t> folded_row_stride(const Shape& out_batch, const Strides& batch, int64_t rows,
                                         int64_t rs) {
  Shape shape = out_batch;
  shape.push_back(rows);
  Strides st = batch;
  st.push_back(rs);
  const auto l = collapse<1>(shape, {&st});
  if (l.shape.size() != 1) return std::nullopt;
  return l.strides[0][0];
}

template <class T>
void batched_matmul_impl(const Array& a, const Array& b, Array& out, double alpha_d, double beta_d) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  constexpr bool kDirect = std::is_same_v<T, C>;
  const C alpha = static_cast<C>(alpha_d), beta = static_cast<C>(beta_d);
  const int nd = out.ndim();
  const int64_t M = out.shape()[nd - 2], N = out.shape()[nd - 1], K = a.shape(-1);
  if (out.size() == 0) return;
  T* o = out.strided_data<T>();
  const Shape out_batch(out.shape().begin(), out.shape().end() - 2);
  int64_t batches = shape_size(out_batch);

  MatOperand<T, C> A(a, out_batch), B(b, out_batch);
  int64_t M_eff = M;
  // When b is shared by every batch entry and a's batch and row dims nest (x @ W with x of shape
  // (batch, tokens, K), as in a Linear layer), the whole batch is one GEMM with batch * M rows.
  if (batches > 1 && std::all_of(B.batch.begin(), B.batch.end(), [](int64_t s) { return s == 0; })) {
    if (const auto rs = folded_row_stride(out_batch, A.batch, M, A.rs)) {
      M_eff = batches * M;
      A.rows = M_eff;
      A.rs = *rs;
      if constexpr (kDirect) A.layout = blas_layout(M_eff, K, *rs, A.cs);
      batches = 1;
    }
  }

  std::vector<C> cbuf;
  std::array<int64_t, kMaxDims> idx{};
  const int bd = static_cast<int>(out_batch.size());
  for (int64_t i = 0; i < batches; ++i) {
    int64_t off_a = 0, off_b = 0;
    for (int d = 0; d < bd; ++d) {
      off_a += idx[d] * A.batch[d];
      off_b += idx[d] * B.batch[d];
    }
    bool ta, tb;
    int64_t lda, ldb;
    const C* pa = A.get(off_a, ta, lda);
    const C* pb = B.get(off_b, tb, ldb);
    T* po = o + i * M_eff * N;
    if constexpr (kDirect) {
      gemm(ta, tb, M_eff, N, K, alpha, pa, lda, pb, ldb, beta, po, N);
    } else {
      cbuf.resize(static_cast<size_t>(M_eff * N));
      if (beta != C(0)) convert_dense(po, M_eff * N, cbuf.data());
      gemm(ta, tb, M_eff, N, K, alpha, pa, lda, pb, ldb, beta, cbuf.data(), N);
      convert_dense(cbuf.data(), M_eff * N, po);
    }
    for (int d = bd - 1; d >= 0; --d) {  // odometer over out's batch dims
      if (++idx[d] < out_batch[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_impl<float>(cblas_sgemm, cblas_sgemv, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  gemm_impl<double>(cblas_dgemm, cblas_dgemv, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void batched_matmul(const Array& a, const Array& b, Array& out, double alpha, double beta) {
  constexpr DtypeSet kTypes{float16, bfloat16, float32, float64};
  visit_dtype<kTypes>(out.dtype(), "matmul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    batched_matmul_impl<T>(a, b, out, alpha, beta);
  });
}

}  // namespace kiln::detail
