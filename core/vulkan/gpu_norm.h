#pragma once
// The fused normalizations of the gpu facade (gpu.h's conventions: no Vulkan types, every eval_gpu
// compiles in every build): softmax, log_softmax, layer_norm and rms_norm along the last axis and
// their backward passes, as core/cpu/norm.h computes them on the CPU. core/vulkan/runtime/
// norm_facade.cpp implements them; without Vulkan, runtime/disabled_norm.cpp throws DeviceError.
#include <cstdint>

#include "kiln/core/array.h"

namespace kiln::gpu {

/// out = the normalization `kind` (detail::RowNorm of core/cpu/norm.h, as its integer value) of
/// x along its last axis, times *weight and plus *bias when given (the norms only). x: float16,
/// bfloat16, float32 or float64, any view, at least one dim; weight and bias: (x.shape(-1)) of
/// x's compute dtype (float64 for float64 x, else float32), any strides. out gets x's shape and
/// dtype. float16/bfloat16 accumulate in float32. Throws NotImplemented for float64 on a device
/// without shaderFloat64 and for 16-bit dtypes on one without 16-bit storage.
void norm_rows(uint8_t kind, double eps, const Array& x, const Array* weight, const Array* bias, Array& out);

/// The backward pass (core/cpu/norm.h's norm_rows_vjp): dx (x's shape and dtype) for the cotangent
/// g (x's shape and dtype, any view, broadcasts included), x being the forward output for
/// softmax/log_softmax and its input for the norms; and for the norms when gxhat is given,
/// gxhat = g * normalized x in the compute dtype. Dtypes and errors as norm_rows.
void norm_rows_vjp(uint8_t kind, double eps, const Array& x, const Array* weight, const Array& g, Array& dx,
                   Array* gxhat);

}  // namespace kiln::gpu
