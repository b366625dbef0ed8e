#pragma once
// Normalizations along the last axis, each one fused primitive with a kernel that reads a row
// once and works on it in cache (MLX's fast::layer_norm and fast::rms_norm): float16 and bfloat16
// compute in float32, the statistics are exact two-pass ones, and the gradients are fused
// kernels too (differentiable again to any order). softmax and log_softmax along the last axis
// (core/ops/reduce.h) take the same path; nn::LayerNorm and nn::RMSNorm are built on these.
#include "kiln/core/array.h"

namespace kiln {

/// torch.nn.functional.layer_norm over the last axis: (x - mean) / sqrt(var + eps) * weight + bias,
/// with the biased variance. weight and bias have shape (x.shape(-1)) or are empty Arrays
/// (absent); they may have any float dtype and are applied in the computation's precision
/// (float32, or float64 for float64 x). The result has x's shape and dtype. Throws DtypeError for
/// a non-float x, weight or bias, ShapeError for a 0-d x or a weight/bias of another shape,
/// ValueError for an empty x or an eps that is negative or not finite.
Array layer_norm(const Array& x, const Array& weight = Array(), const Array& bias = Array(),
                 double eps = 1e-5, StreamOrDevice s = {});

/// Root-mean-square normalization over the last axis (torch.nn.functional.rms_norm):
/// x / sqrt(mean(x^2) + eps) * weight. weight, dtypes and errors as layer_norm.
Array rms_norm(const Array& x, const Array& weight = Array(), double eps = 1e-5, StreamOrDevice s = {});

namespace detail {
/// softmax (log: log_softmax) of a float array along its last axis as one fused node, in x's
/// dtype (float16/bfloat16 accumulate in float32). x must have at least one dimension.
Array softmax_last_axis(const Array& x, bool log, StreamOrDevice s = {});
}  // namespace detail

}  // namespace kiln
