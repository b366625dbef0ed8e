#pragma once
// The random kernels of the gpu facade with inputs besides the keys, for the random primitives of
// core/random_more.cpp. core/vulkan/runtime/random_facade.cpp implements them; without Vulkan,
// runtime/disabled_random.cpp throws DeviceError.
#include <span>
#include <string_view>

#include "kiln/core/array.h"

namespace kiln::gpu {

/// As keyed_elementwise (core/vulkan/gpu.h), with `inputs` broadcast to out's shape: each element
/// is `kiln_keyed(key, i, v2, v3, ...)`, a function that `helpers` defines (after
/// shaders/common/random.glsl) over the element's key (uvec2), its index in its sample (uint) and
/// the inputs' elements as stored (v2 is inputs[0]); it returns `compute`'s GLSL type, converted to
/// out's dtype. Throws NotImplemented for samples past 2^31 elements or a dtype the device lacks.
void keyed_elementwise_inputs(std::string_view helpers, Dtype compute, const Array& keys, int64_t sample_size,
                              std::span<const Array> inputs, Array& out);

}  // namespace kiln::gpu
