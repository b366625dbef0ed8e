#pragma once
// Recording helpers for the fused normalization kernels (shaders/norm/norm_rows.comp,
// norm_rows_vjp.comp): they validate the views, pick the variant and the layout (invocations per
// row) and record one dispatch; they never submit.
#include "kiln/core/cpu/norm.h"
#include "kiln/core/vulkan/runtime/kernels.h"

namespace kiln::detail::vk {

/// out = the normalization `kind` of each row of x (core/cpu/norm.h's norm_rows): x a [rows, n]
/// view with any strides, of float32, float64, float16 or bfloat16; w and b (norms only; null when
/// absent) [n] views with any stride, of norm_compute_dtype(x.dtype); out contiguous [rows, n] of
/// x's dtype. Throws ShapeError or ValueError (views, dtypes), NotImplemented (float64 without
/// shaderFloat64, 16-bit dtypes without 16-bit storage).
void record_norm_rows(Recorder& r, RowNorm kind, double eps, const GpuView& x, const GpuView* w,
                      const GpuView* b, const GpuView& out);

/// dx (and for the norms, when gxhat is not null, gxhat) as core/cpu/norm.h's norm_rows_vjp: x and
/// g [rows, n] views of one dtype with any strides, w as for record_norm_rows, dx contiguous of x's
/// dtype, gxhat contiguous of norm_compute_dtype(x.dtype). Throws as record_norm_rows.
void record_norm_rows_vjp(Recorder& r, RowNorm kind, double eps, const GpuView& x, const GpuView* w,
                          const GpuView& g, const GpuView& dx, const GpuView* gxhat);

}  // namespace kiln::detail::vk
