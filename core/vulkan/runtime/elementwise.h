#pragma once
// Elementwise kernels generated at run time from GLSL snippets (STYLE.md R6): any number of
// inputs of any dtype the device can store, strided and broadcast inputs, and fused chains. The
// GLSL is compiled through glslang on first use (glsl_compiler.h) and cached in memory and on disk.
#include <span>
#include <string>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/vulkan/runtime/kernels.h"

namespace kiln::detail::vk {

struct DeviceCaps;

/// One temporary of a fused chain: t<i> = kiln_to_<dtype>(expr).
struct ElementwiseStep {
  Dtype dtype = float32;
  std::string expr = {};  ///< GLSL over the names below, and t0..t<i-1>
  bool operator==(const ElementwiseStep&) const = default;
};

/// What an elementwise kernel computes; equal kernels share one shader. In `expr`, `steps` and
/// `helpers` these GLSL names are defined (dtype_convert.glsl lists each dtype's GLSL type):
///   x0, x1, ...   input i converted to `compute` by the CPU's casting rules (core/ops/cast.cpp)
///   v0, v1, ...   input i as stored, in its own dtype's GLSL type (for chains of mixed dtypes)
///   t0, t1, ...   the steps' results, in order
///   j             the output element's index (uint, from 0), for kernels that need it (arange, random)
///   kiln_to_<dtype>(v)   any such value converted to <dtype> (kiln_to_float16, kiln_to_int8, ...)
///   kiln_exp, kiln_tanh, ... of shaders/common/elementwise_ops.glsl
/// The output is kiln_to_<out>(expr).
struct ElementwiseKernel {
  std::vector<Dtype> inputs;  ///< dtype of each input as stored
  Dtype compute = float32;    ///< the type x<i> are converted to (float32 for float16/bfloat16 storage)
  Dtype out = float32;        ///< stored output dtype
  std::string expr;           ///< e.g. "exp(x0)", "x0 + x1", "(x0 > 0.0) ? x1 : x2", "t2"
  std::vector<ElementwiseStep> steps = {};  ///< a fused chain's temporaries, evaluated before expr
  std::string helpers = {};                 ///< extra GLSL functions the expressions call
  bool operator==(const ElementwiseKernel&) const = default;
};

/// Device features a generated kernel may use. 8- and 16-bit dtypes are stored as bytes and
/// halves when the device can address them (storage8/16), else packed in 32-bit words, each
/// invocation then writing whole words; int64 and float64 need the device's 64-bit types.
/// `addresses`: the kernel reaches its buffers through device addresses in its push constants
/// instead of descriptors, where they fit (a descriptor costs NVIDIA's driver about 0.6 us a
/// dispatch on the H200, docs/gpu.md); otherwise, or without it, through pushed descriptors.
struct ElementwiseFeatures {
  bool storage8 = false, storage16 = false, int64 = false, float64 = false, addresses = false;
  static ElementwiseFeatures of(const DeviceCaps& caps);
  bool operator==(const ElementwiseFeatures&) const = default;
};

/// Records out = kernel(inputs...) elementwise over out's shape. Each input has out's rank or
/// fewer (aligned to the right, NumPy broadcasting: a dim of 1, or stride 0, repeats), any
/// strides (0 and negative included) and an offset; out must be row-major contiguous. Up to
/// kMaxStridedRank dims after merging, and 11 inputs (10 when their strides do not fit the push
/// constants). Compiles the kernel on first use. Throws ShapeError or ValueError (views, dtypes,
/// counts), ValueError with the numbered GLSL when the expression does not compile, and
/// NotImplemented when a dtype needs a feature the device lacks (naming both).
void record_elementwise(Recorder& r, const ElementwiseKernel& k, std::span<const GpuView> inputs,
                        const GpuView& out);

/// The same with features chosen by the caller; they must be a subset of the device's (tests use
/// it to force the packed storage paths). Throws ValueError otherwise.
void record_elementwise(Recorder& r, const ElementwiseKernel& k, std::span<const GpuView> inputs,
                        const GpuView& out, const ElementwiseFeatures& features);

/// Whether the calling thread's last record_elementwise reached its buffers through device
/// addresses rather than descriptors (for tests).
bool last_elementwise_addressed();

/// The GLSL name of the value type of `t` ("float" for float16, "uint" for uint8, ...).
std::string_view glsl_value_type(Dtype t);

}  // namespace kiln::detail::vk
