#pragma once
// CPU kernels of affine group quantization (core/ops/quantized.h): a row's values, in groups of
// `group_size` along it, are stored as `bits`-bit integers q with one scale and one bias a group,
// value = scale * q + bias. A uint32 word holds 32 / bits values, the first in its lowest bits.
#include <cstdint>

namespace kiln::detail {

struct QuantLayout {
  int bits = 4;
  int group_size = 64;
  int64_t per_word() const { return 32 / bits; }
};

/// Quantizes `rows` dense rows of k values (k a multiple of group_size): q gets rows x k / per_word
/// words, scales and biases rows x k / group_size. `round` rounds a scale or bias to the dtype it is
/// stored in, so q is computed against the values dequantization will use.
template <class C>
void quantize_rows(const C* w, int64_t rows, int64_t k, QuantLayout l, C (*round)(C), uint32_t* q, C* scales,
                   C* biases);

/// The inverse: `rows` rows of k values from their words, scales and biases.
template <class C>
void dequantize_rows(const uint32_t* q, const C* scales, const C* biases, int64_t rows, int64_t k,
                     QuantLayout l, C* w);

/// y (m x n) = x (m x k) @ W^T with W (n x k) quantized along k (transpose), or x @ W with W (k x n)
/// quantized along n. W is dequantized a block at a time into a buffer that stays in cache and
/// multiplied by OpenBLAS, the blocks split over kiln's pool: at batch 1 the product reads only the
/// packed words from memory.
template <class C>
void quantized_matmul(const C* x, int64_t m, const uint32_t* q, const C* scales, const C* biases, int64_t n,
                      int64_t k, QuantLayout l, bool transpose, C* y);

}  // namespace kiln::detail
