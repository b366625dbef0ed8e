#pragma once
// Affine group quantization of weights, as MLX and llama.cpp's Q4_1 store them: along a matrix's
// last dimension, each group of `group_size` values keeps `bits`-bit integers q (packed into uint32
// words, the first value in the lowest bits) and one scale and one bias, value = scale * q + bias.
// bits is 2, 4 or 8; group_size 32, 64 or 128.
#include "kiln/core/array.h"

namespace kiln {

/// quantize's result: `weight` (uint32, (..., d * bits / 32)), `scales` and `biases` (w's dtype,
/// (..., d / group_size)). Binds as `auto [wq, scales, biases] = quantize(w)`.
struct QuantizedWeight {
  Array weight, scales, biases;
};

/// Quantizes a floating array of at least 2 dimensions along its last, of size d (a multiple of
/// group_size). Each group's scale spans its minimum (the bias) to its maximum. Not differentiable.
QuantizedWeight quantize(const Array& w, int group_size = 64, int bits = 4, StreamOrDevice s = {});

/// scales * q + biases, in the scales' dtype: the inverse of quantize, within half a scale a value.
/// Differentiable in scales and biases (not in the integers).
Array dequantize(const Array& wq, const Array& scales, const Array& biases, int group_size = 64, int bits = 4,
                 StreamOrDevice s = {});

/// x @ W^T (transpose, W stored (out, in) as a Linear's weight, quantized along in) or x @ W
/// (W stored (in, out), quantized along out), W = dequantize(wq, scales, biases) without W ever
/// being materialized whole. x is (..., in); the result (..., out) has the floating dtype x and the
/// scales promote to. Differentiable in x, scales and biases.
Array quantized_matmul(const Array& x, const Array& wq, const Array& scales, const Array& biases,
                       bool transpose = true, int group_size = 64, int bits = 4, StreamOrDevice s = {});

}  // namespace kiln
