#include "kiln/core/cpu/quantized.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/core/cpu/gemm.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/cpu/simd.h"

// No fused multiply-adds: the AVX2 and AVX-512 clones would contract scale * q + bias, and a
// dequantized weight would depend on the machine.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#else
#pragma STDC FP_CONTRACT OFF
#endif

namespace kiln::detail {
namespace {

// W's values a block at a time: 64K of them (256 KB in float32) stay in a core's L2 cache between
// their dequantization and the product that reads them. The block depends only on the shapes, so a
// result never depends on the thread count.
constexpr int64_t kBlockValues = int64_t{1} << 16;

// `groups` groups of gs values from their words (kBits-bit fields, the first lowest).
template <class C, int kBits>
KILN_SIMD_CLONES void dequantize_groups(const uint32_t* __restrict q, const C* __restrict scales,
                                        const C* __restrict biases, int64_t groups, int64_t gs,
                                        C* __restrict out) {
  constexpr int kPer = 32 / kBits;
  constexpr uint32_t kMask = (uint32_t{1} << kBits) - 1;
  for (int64_t g = 0; g < groups; ++g) {
    const C s = scales[g], b = biases[g];
    const uint32_t* words = q + g * gs / kPer;
    C* o = out + g * gs;
    for (int64_t w = 0; w < gs / kPer; ++w) {
      const uint32_t word = words[w];
      for (int j = 0; j < kPer; ++j) o[w * kPer + j] = static_cast<C>((word >> (j * kBits)) & kMask) * s + b;
    }
  }
}

template <class C>
void dequantize_groups(const uint32_t* q, const C* scales, const C* biases, int64_t groups, QuantLayout l,
                       C* out) {
  switch (l.bits) {
    case 2:
      return dequantize_groups<C, 2>(q, scales, biases, groups, l.group_size, out);
    case 4:
      return dequantize_groups<C, 4>(q, scales, biases, groups, l.group_size, out);
    default:
      return dequantize_groups<C, 8>(q, scales, biases, groups, l.group_size, out);
  }
}

// y[r, j] for rows j0..j1 of W (n, k) and m <= kGemvRows rows of x, over groups g0..g1. Bit field
// b of a group's word i holds value i * per + b, so x comes permuted (xp): kG groups at a time (kL
// = kG * kGw lanes, 16 where a group's words are fewer), ordered by field, then group, then word.
// Their kL words then give, field by field, kL lanes that load, shift and mask as one vector and
// meet contiguous x values. Each lane sums its products with its group's scale, the biases add
// bias * (the x group's sum), and a row's lanes are summed at its end (added to y when
// `accumulate`): the loop vectorizes without reassociation, so the order is the code's on every
// machine. Memory-bound products (decoding) read only the packed words.
constexpr int64_t kGemvRows = 4;

template <int kBits, int kGroup>
constexpr int groups_per_step() {
  constexpr int kGw = kGroup / (32 / kBits);
  return kGw >= 16 ? 1 : 16 / kGw;
}

template <class C, int kBits, int kGroup, int kG>
KILN_SIMD_CLONES void gemv_rows(const C* __restrict xp, const C* __restrict xsums, int64_t m,
                                const uint32_t* __restrict q, const C* __restrict scales,
                                const C* __restrict biases, int64_t j0, int64_t j1, int64_t k, int64_t g0,
                                int64_t g1, bool accumulate, C* __restrict y, int64_t n) {
  constexpr int kPer = 32 / kBits, kGw = kGroup / kPer, kL = kG * kGw;
  constexpr uint32_t kMask = (uint32_t{1} << kBits) - 1;
  const int64_t groups = k / kGroup, words = k / kPer;
  for (int64_t j = j0; j < j1; ++j) {
    C lanes[kGemvRows][kL] = {};
    C shift[kGemvRows] = {};
    for (int64_t g = g0; g < g1; g += kG) {
      const uint32_t* packed = q + j * words + g * kGw;  // kG groups' words, contiguous
      C levels[kPer][kL], step_scales[kL];
      for (int b = 0; b < kPer; ++b)
        for (int l = 0; l < kL; ++l) levels[b][l] = static_cast<C>((packed[l] >> (b * kBits)) & kMask);
      for (int gg = 0; gg < kG; ++gg)
        for (int i = 0; i < kGw; ++i) step_scales[gg * kGw + i] = scales[j * groups + g + gg];
      for (int64_t r = 0; r < m; ++r) {
        const C* xg = xp + r * k + g * kGroup;
        C t[kL] = {};
        for (int b = 0; b < kPer; ++b)
          for (int l = 0; l < kL; ++l) t[l] += levels[b][l] * xg[b * kL + l];
        for (int l = 0; l < kL; ++l) lanes[r][l] += step_scales[l] * t[l];
        for (int gg = 0; gg < kG; ++gg) shift[r] += biases[j * groups + g + gg] * xsums[r * groups + g + gg];
      }
    }
    for (int64_t r = 0; r < m; ++r) {
      C dot = 0;
      for (int l = 0; l < kL; ++l) dot += lanes[r][l];
      y[r * n + j] = (accumulate ? y[r * n + j] : C(0)) + (dot + shift[r]);
    }
  }
}

// x's groups g0..g1 in gemv_rows's order for steps of kG groups.
template <class C, int kPer, int kGroup>
void permute_groups(const C* x, int64_t g0, int64_t g1, int kG, C* xp) {
  const int kGw = kGroup / kPer, kL = kG * kGw;
  for (int64_t g = g0; g < g1; g += kG)
    for (int gg = 0; gg < kG; ++gg)
      for (int b = 0; b < kPer; ++b)
        for (int i = 0; i < kGw; ++i)
          xp[g * kGroup + b * kL + gg * kGw + i] = x[(g + gg) * kGroup + i * kPer + b];
}

template <class C, int kBits, int kGroup>
void quantized_gemv(const C* x, int64_t m, const uint32_t* q, const C* scales, const C* biases, int64_t n,
                    int64_t k, C* y) {
  constexpr int kPer = 32 / kBits, kG = groups_per_step<kBits, kGroup>();
  const int64_t groups = k / kGroup, main = groups / kG * kG;  // the rest go one group a step
  std::vector<C> xp(static_cast<size_t>(m * k)), xsums(static_cast<size_t>(m * groups), C(0));
  for (int64_t r = 0; r < m; ++r) {
    permute_groups<C, kPer, kGroup>(x + r * k, 0, main, kG, xp.data() + r * k);
    permute_groups<C, kPer, kGroup>(x + r * k, main, groups, 1, xp.data() + r * k);
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t i = 0; i < kGroup; ++i) xsums[r * groups + g] += x[r * k + g * kGroup + i];
  }
  // Chunks of rows fixed by the shapes: about 16K weights a task.
  const int64_t rows = std::max<int64_t>(1, (int64_t{1} << 14) / k);
  parallel_for((n + rows - 1) / rows, 1, [&](int64_t b0, int64_t b1) {
    const int64_t j0 = b0 * rows, j1 = std::min(n, b1 * rows);
    gemv_rows<C, kBits, kGroup, kG>(xp.data(), xsums.data(), m, q, scales, biases, j0, j1, k, 0, main, false,
                                    y, n);
    if (main < groups)
      gemv_rows<C, kBits, kGroup, 1>(xp.data(), xsums.data(), m, q, scales, biases, j0, j1, k, main, groups,
                                     true, y, n);
  });
}

template <class C, int kBits>
void quantized_gemv(const C* x, int64_t m, const uint32_t* q, const C* scales, const C* biases, int64_t n,
                    int64_t k, int group_size, C* y) {
  if (group_size == 32) return quantized_gemv<C, kBits, 32>(x, m, q, scales, biases, n, k, y);
  if (group_size == 64) return quantized_gemv<C, kBits, 64>(x, m, q, scales, biases, n, k, y);
  quantized_gemv<C, kBits, 128>(x, m, q, scales, biases, n, k, y);
}

template <class C>
void quantized_gemv(const C* x, int64_t m, const uint32_t* q, const C* scales, const C* biases, int64_t n,
                    int64_t k, QuantLayout l, C* y) {
  if (l.bits == 2) return quantized_gemv<C, 2>(x, m, q, scales, biases, n, k, l.group_size, y);
  if (l.bits == 4) return quantized_gemv<C, 4>(x, m, q, scales, biases, n, k, l.group_size, y);
  quantized_gemv<C, 8>(x, m, q, scales, biases, n, k, l.group_size, y);
}

// One group: the scale spans min..max in 2^bits - 1 steps from the bias (the minimum), both rounded
// to their stored dtype first; a constant group has scale 0 and dequantizes exactly.
template <class C>
void quantize_group(const C* w, QuantLayout l, C (*round)(C), uint32_t* q, C& scale, C& bias) {
  C lo = w[0], hi = w[0];
  for (int64_t i = 1; i < l.group_size; ++i) {
    lo = std::min(lo, w[i]);
    hi = std::max(hi, w[i]);
  }
  const C levels = static_cast<C>((1 << l.bits) - 1);
  bias = round(lo);
  scale = round((hi - lo) / levels);
  const int64_t per = l.per_word();
  for (int64_t word = 0; word < l.group_size / per; ++word) {
    uint32_t packed = 0;
    for (int64_t j = 0; j < per; ++j) {
      const C v = scale > 0 ? std::round((w[word * per + j] - bias) / scale) : C(0);
      const auto level = v == v ? static_cast<uint32_t>(std::clamp(v, C(0), levels)) : 0u;  // NaN: level 0
      packed |= level << (j * l.bits);
    }
    q[word] = packed;
  }
}

}  // namespace

template <class C>
void quantize_rows(const C* w, int64_t rows, int64_t k, QuantLayout l, C (*round)(C), uint32_t* q, C* scales,
                   C* biases) {
  const int64_t groups = k / l.group_size, words = k / l.per_word();
  parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(k, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r)
                   for (int64_t g = 0; g < groups; ++g)
                     quantize_group(w + r * k + g * l.group_size, l, round,
                                    q + r * words + g * l.group_size / l.per_word(), scales[r * groups + g],
                                    biases[r * groups + g]);
               });
}

template <class C>
void dequantize_rows(const uint32_t* q, const C* scales, const C* biases, int64_t rows, int64_t k,
                     QuantLayout l, C* w) {
  const int64_t groups = k / l.group_size, words = k / l.per_word();
  parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(k, 1)),
               [&](int64_t r0, int64_t r1) {
                 dequantize_groups(q + r0 * words, scales + r0 * groups, biases + r0 * groups,
                                   (r1 - r0) * groups, l, w + r0 * k);
               });
}

template <class C>
void quantized_matmul(const C* x, int64_t m, const uint32_t* q, const C* scales, const C* biases, int64_t n,
                      int64_t k, QuantLayout l, bool transpose, C* y) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::fill(y, y + m * n, C(0));
    return;
  }
  const int64_t stored = transpose ? k : n;  // the length of W's stored (quantized) rows
  const int64_t groups = stored / l.group_size, words = stored / l.per_word();
  if (transpose && m <= kGemvRows) return quantized_gemv(x, m, q, scales, biases, n, k, l, y);
  if (transpose) {  // W (n, k): blocks of whole rows, each a product with x's rows
    const int64_t rows = std::clamp<int64_t>(kBlockValues / k, 1, n), blocks = (n + rows - 1) / rows;
    parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
      std::vector<C> w(static_cast<size_t>(rows * k));
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t j0 = b * rows, j1 = std::min(n, j0 + rows);
        dequantize_rows(q + j0 * words, scales + j0 * groups, biases + j0 * groups, j1 - j0, k, l, w.data());
        gemm(false, true, m, j1 - j0, k, C(1), x, k, w.data(), k, C(0), y + j0, n);
      }
    });
    return;
  }
  // W (k, n): blocks of whole groups of columns, each gathered from every row of W.
  const int64_t gs = l.group_size;
  const int64_t cols = std::clamp<int64_t>(kBlockValues / k / gs * gs, gs, n), blocks = (n + cols - 1) / cols;
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<C> w(static_cast<size_t>(cols * k));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t c0 = b * cols, width = std::min(n, c0 + cols) - c0;
      for (int64_t r = 0; r < k; ++r)
        dequantize_groups(q + r * words + c0 / l.per_word(), scales + r * groups + c0 / gs,
                          biases + r * groups + c0 / gs, width / gs, l, w.data() + r * width);
      gemm(false, false, m, width, k, C(1), x, k, w.data(), width, C(0), y + c0, n);
    }
  });
}

template void quantize_rows(const float*, int64_t, int64_t, QuantLayout, float (*)(float), uint32_t*, float*,
                            float*);
template void quantize_rows(const double*, int64_t, int64_t, QuantLayout, double (*)(double), uint32_t*,
                            double*, double*);
template void dequantize_rows(const uint32_t*, const float*, const float*, int64_t, int64_t, QuantLayout,
                              float*);
template void dequantize_rows(const uint32_t*, const double*, const double*, int64_t, int64_t, QuantLayout,
                              double*);
template void quantized_matmul(const float*, int64_t, const uint32_t*, const float*, const float*, int64_t,
                               int64_t, QuantLayout, bool, float*);
template void quantized_matmul(const double*, int64_t, const uint32_t*, const double*, const double*, int64_t,
                               int64_t, QuantLayout, bool, double*);

}  // namespace kiln::detail
