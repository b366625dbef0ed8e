#pragma once
// Row kernels of the fused normalizations (core/ops/fused_norm.cpp): softmax, log_softmax,
// layer_norm and rms_norm along the last axis of a dense [rows, n] block, and their backward
// passes. Each row is read from memory once and then worked on in cache; float16 and bfloat16
// compute in float32, float32 in float32 (16 partial sums per reduction), float64 in float64.
#include <cstdint>

#include "kiln/core/array.h"

namespace kiln::detail {

/// Which normalization; the integer values are also gpu::norm_rows' `kind` (core/vulkan/gpu_norm.h).
enum class RowNorm : uint8_t { softmax = 0, log_softmax = 1, layer_norm = 2, rms_norm = 3 };

/// The dtype the kernels compute in for input dtype t: float64 for float64, else float32.
inline Dtype norm_compute_dtype(Dtype t) { return t == float64 ? float64 : float32; }

/// out[r, :] = kind(x[r, :]), times w and plus b for the norms when given:
///   softmax     exp(x - m) / sum(exp(x - m)), m the row's max
///   log_softmax (x - m) - log(sum(exp(x - m))), m replaced by 0 when infinite
///   layer_norm  (x - mean) / sqrt(var + eps) * w + b      (biased variance, two passes)
///   rms_norm    x / sqrt(mean(x^2) + eps) * w
/// x and out: dense and available, [..., n] of one float dtype; w and b: dense (n) of
/// norm_compute_dtype(x), or invalid handles when absent. out has storage (allocate()).
void norm_rows(RowNorm kind, double eps, const Array& x, const Array& w, const Array& b, Array& out);

/// The vector-Jacobian product of norm_rows for the cotangent g (x's shape and dtype):
///   softmax     x is the forward output y: dx = y * (g - sum(g * y))
///   log_softmax x is the forward output y: dx = g - exp(y) * sum(g)
///   layer_norm  dx = r * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = g * w, xhat = (x - mean) * r
///   rms_norm    dx = r * (gw - xhat * mean(gw * xhat)), xhat = x * r
/// and, for the norms when gxhat is given, gxhat = g * xhat in norm_compute_dtype(x) (summed over
/// the rows, the weight's gradient). Storage as norm_rows.
void norm_rows_vjp(RowNorm kind, double eps, const Array& x, const Array& w, const Array& g, Array& dx,
                   Array* gxhat);

}  // namespace kiln::detail
