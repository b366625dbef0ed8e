#include "kiln/core/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/cpu/gemm.h"
#include "kiln/core/cpu/math.h"
#include "kiln/core/cpu/parallel.h"

namespace kiln::detail {
namespace {

// Queries per block: a block's scores (kBlock x Lk) stay in L2 for Lk up to a few thousand, and the
// GEMMs are still large enough for OpenBLAS to reach its speed.
constexpr int64_t kBlock = 64;

template <class A>
A exp_of(A v) {
  if constexpr (std::is_same_v<A, float>)
    return exp_f32(v);
  else
    return std::exp(v);
}

// The mask of one (batch, head) pair: element (i, j) at base[i * row + j * col].
template <class A>
struct MaskView {
  const A* base = nullptr;
  int64_t row = 0, col = 0;
  A at(int64_t i, int64_t j) const { return base[i * row + j * col]; }
};

// Where pair n's mask starts: n unravelled over the leading dims (all but the last two).
template <class A>
MaskView<A> mask_of(const Array* mask, int64_t n) {
  if (!mask) return {};
  const Shape& shape = mask->shape();
  const Strides& strides = mask->strides();
  const int nd = mask->ndim();
  int64_t offset = 0;
  for (int a = nd - 3; a >= 0; --a) {
    offset += (n % shape[a]) * strides[a];
    n /= shape[a];
  }
  return {mask->strided_data<A>() + offset, strides[nd - 2], strides[nd - 1]};
}

// Keys visible to some query of [i0, i1): all but those past the last query's causal limit.
int64_t visible_keys(const AttentionDims& d, int64_t i1) {
  return d.causal ? std::clamp<int64_t>(i1 + d.lk - d.lq, 0, d.lk) : d.lk;
}

// Scores of queries [i0, i0 + rows) against the first nk keys into s (ld = nk), mask and causal
// limit applied (masked-out keys are -inf).
template <class A>
void block_scores(const AttentionDims& d, const A* q, const A* k, const MaskView<A>& mask, int64_t i0,
                  int64_t rows, int64_t nk, A* s) {
  gemm(false, true, rows, nk, d.d, static_cast<A>(d.scale), q + i0 * d.d, d.d, k, d.d, A(0), s, nk);
  constexpr A kInf = std::numeric_limits<A>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    A* row = s + r * nk;
    const int64_t i = i0 + r;
    if (mask.base)
      for (int64_t j = 0; j < nk; ++j) row[j] += mask.at(i, j);
    if (d.causal)
      for (int64_t j = std::max<int64_t>(0, i + d.lk - d.lq + 1); j < nk; ++j) row[j] = -kInf;
  }
}

template <class A>
void forward_pair(const AttentionDims& d, const A* q, const A* k, const A* v, const MaskView<A>& mask, A* out,
                  A* lse, std::vector<A>& s) {
  constexpr A kInf = std::numeric_limits<A>::infinity();
  for (int64_t i0 = 0; i0 < d.lq; i0 += kBlock) {
    const int64_t rows = std::min(kBlock, d.lq - i0), nk = visible_keys(d, i0 + rows);
    A* o = out + i0 * d.dv;
    if (nk == 0) {  // no query of the block sees a key: NaN rows, as softmax of all -inf
      std::fill(o, o + rows * d.dv, std::numeric_limits<A>::quiet_NaN());
      std::fill(lse + i0, lse + i0 + rows, -kInf);
      continue;
    }
    block_scores(d, q, k, mask, i0, rows, nk, s.data());
    for (int64_t r = 0; r < rows; ++r) {
      A* row = s.data() + r * nk;
      A m = -kInf;
      for (int64_t j = 0; j < nk; ++j) m = row[j] > m ? row[j] : m;
      if (m == -kInf) {  // every key masked: the composite's exp(-inf - -inf) = NaN
        std::fill(row, row + nk, std::numeric_limits<A>::quiet_NaN());
        lse[i0 + r] = -kInf;
        continue;
      }
      A sum = 0;
      for (int64_t j = 0; j < nk; ++j) {
        row[j] = exp_of(row[j] - m);
        sum += row[j];
      }
      const A inv = A(1) / sum;
      for (int64_t j = 0; j < nk; ++j) row[j] *= inv;
      lse[i0 + r] = m + std::log(sum);
    }
    gemm(false, false, rows, d.dv, nk, A(1), s.data(), nk, v, d.dv, A(0), o, d.dv);
  }
}

// dq of the pair's queries, and dk, dv accumulated over its query blocks. s and dp: kBlock x Lk.
template <class A>
void backward_pair(const AttentionDims& d, const A* q, const A* k, const A* v, const MaskView<A>& mask,
                   const A* out, const A* lse, const A* g, A* dq, A* dk, A* dv, std::vector<A>& s,
                   std::vector<A>& dp) {
  std::fill(dk, dk + d.lk * d.d, A(0));
  std::fill(dv, dv + d.lk * d.dv, A(0));
  for (int64_t i0 = 0; i0 < d.lq; i0 += kBlock) {
    const int64_t rows = std::min(kBlock, d.lq - i0), nk = visible_keys(d, i0 + rows);
    if (nk == 0) {
      // Rows that see no key have NaN outputs; their gradient is NaN as the composite's.
      std::fill(dq + i0 * d.d, dq + (i0 + rows) * d.d, std::numeric_limits<A>::quiet_NaN());
      continue;
    }
    block_scores(d, q, k, mask, i0, rows, nk, s.data());
    // P = exp(S - lse), the forward weights (NaN for a row without keys, as in the composite).
    for (int64_t r = 0; r < rows; ++r) {
      A* row = s.data() + r * nk;
      const A l = lse[i0 + r];
      for (int64_t j = 0; j < nk; ++j) row[j] = exp_of(row[j] - l);
    }
    const A* gb = g + i0 * d.dv;
    gemm(true, false, nk, d.dv, rows, A(1), s.data(), nk, gb, d.dv, A(1), dv, d.dv);  // dV += P^T dO
    gemm(false, true, rows, nk, d.dv, A(1), gb, d.dv, v, d.dv, A(0), dp.data(), nk);  // dP = dO V^T
    for (int64_t r = 0; r < rows; ++r) {
      const A* orow = out + (i0 + r) * d.dv;
      const A* grow = gb + r * d.dv;
      A delta = 0;  // sum_j P dP = dO . O
      for (int64_t c = 0; c < d.dv; ++c) delta += grow[c] * orow[c];
      A* prow = s.data() + r * nk;
      A* dprow = dp.data() + r * nk;
      for (int64_t j = 0; j < nk; ++j) dprow[j] = prow[j] * (dprow[j] - delta);  // dS
    }
    const A scale = static_cast<A>(d.scale);
    gemm(false, false, rows, d.d, nk, scale, dp.data(), nk, k, d.d, A(0), dq + i0 * d.d, d.d);  // dQ
    gemm(true, false, nk, d.d, rows, scale, dp.data(), nk, q + i0 * d.d, d.d, A(1), dk, d.d);   // dK +=
  }
}

// The array itself when it already is dense and of dtype t, else a dense temporary of that dtype.
Array dense_in(const Array& a, Dtype t) { return dense_copy(a, t); }

// An output's storage in the compute dtype: the output itself when the dtypes agree.
Array compute_out(Array& out, Dtype c) {
  if (out.dtype() == c) {
    out.allocate();
    return out;
  }
  return Array::empty_available(out.shape(), c);
}

void finish_out(const Array& computed, Array& out) {
  if (computed.id() == out.id()) return;
  out.allocate();
  convert_values(computed.raw_data(), computed.dtype(), out.raw_data(), out.dtype(), out.size());
}

}  // namespace

void attention_forward(const AttentionDims& dims, const Array& q, const Array& k, const Array& v,
                       const Array* mask, Array& out, Array& lse) {
  const Dtype c = attention_compute_dtype(q.dtype());
  const Array qc = dense_in(q, c), kc = dense_in(k, c), vc = dense_in(v, c);
  Array oc = compute_out(out, c);
  lse.allocate();
  const auto run = [&]<class A>(A*) {
    const A *qp = qc.strided_data<A>(), *kp = kc.strided_data<A>(), *vp = vc.strided_data<A>();
    A *op = oc.strided_data<A>(), *lp = lse.strided_data<A>();
    parallel_for(dims.batch, 1, [&](int64_t b0, int64_t b1) {
      std::vector<A> s(static_cast<size_t>(kBlock * dims.lk));
      for (int64_t n = b0; n < b1; ++n)
        forward_pair<A>(dims, qp + n * dims.lq * dims.d, kp + n * dims.lk * dims.d,
                        vp + n * dims.lk * dims.dv, mask_of<A>(mask, n), op + n * dims.lq * dims.dv,
                        lp + n * dims.lq, s);
    });
  };
  if (c == float64)
    run(static_cast<double*>(nullptr));
  else
    run(static_cast<float*>(nullptr));
  finish_out(oc, out);
}

void attention_backward(const AttentionDims& dims, const Array& q, const Array& k, const Array& v,
                        const Array* mask, const Array& out, const Array& lse, const Array& g, Array& dq,
                        Array& dk, Array& dv) {
  const Dtype c = attention_compute_dtype(q.dtype());
  const Array qc = dense_in(q, c), kc = dense_in(k, c), vc = dense_in(v, c);
  const Array oc = dense_in(out, c), lc = dense_in(lse, c), gc = dense_in(g, c);
  Array dqc = compute_out(dq, c), dkc = compute_out(dk, c), dvc = compute_out(dv, c);
  const auto run = [&]<class A>(A*) {
    const A *qp = qc.strided_data<A>(), *kp = kc.strided_data<A>(), *vp = vc.strided_data<A>();
    const A *op = oc.strided_data<A>(), *lp = lc.strided_data<A>(), *gp = gc.strided_data<A>();
    A *dqp = dqc.strided_data<A>(), *dkp = dkc.strided_data<A>(), *dvp = dvc.strided_data<A>();
    parallel_for(dims.batch, 1, [&](int64_t b0, int64_t b1) {
      std::vector<A> s(static_cast<size_t>(kBlock * dims.lk)), dp(s.size());
      for (int64_t n = b0; n < b1; ++n) {
        const int64_t qo = n * dims.lq * dims.d, ko = n * dims.lk * dims.d, vo = n * dims.lk * dims.dv;
        const int64_t oo = n * dims.lq * dims.dv;
        backward_pair<A>(dims, qp + qo, kp + ko, vp + vo, mask_of<A>(mask, n), op + oo, lp + n * dims.lq,
                         gp + oo, dqp + qo, dkp + ko, dvp + vo, s, dp);
      }
    });
  };
  if (c == float64)
    run(static_cast<double*>(nullptr));
  else
    run(static_cast<float*>(nullptr));
  finish_out(dqc, dq);
  finish_out(dkc, dk);
  finish_out(dvc, dv);
}

}  // namespace kiln::detail
