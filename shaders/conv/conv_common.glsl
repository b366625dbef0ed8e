// Shared by the convolution shaders (conv_gemm.comp, conv_direct.comp, conv_direct_wgrad.comp):
// the push constants, one layout for every pass so that the host packs one struct
// (ConvPush in core/vulkan/runtime/conv_kernels.cpp), and the element type's loads and stores.
// Layouts are PyTorch's: x (n, c, h, w), weight (o, c / groups, kh, kw), y (n, o, oh, ow).
// The includer defines one of KILN_16BIT (float16 or bfloat16 bits, by kBfloat), KILN_F64 or
// neither (float32); ACC_T is the accumulation type (float, or double for float64).
#ifndef KILN_CONV_COMMON_GLSL
#define KILN_CONV_COMMON_GLSL

#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#include "../common/dtype_convert.glsl"
#endif

// Which product a dispatch computes (ConvPass in conv_kernels.h). Constant 0 is the workgroup size
// where a shader has a specialised one.
const uint kForward = 0u, kGradInput = 1u, kGradWeight = 2u;
layout(constant_id = 1) const uint kPass = 0u;
layout(constant_id = 2) const bool kBfloat = false;

#include "../common/typed_storage.glsl"

// Operand A is the weight (forward, grad_input) or the output gradient gy (grad_weight); operand
// B is x (forward, grad_weight) or gy (grad_input). Strides are in elements, in the operands'
// (n-or-o, c, h, w) dim order, and may be anything (transposed and sliced views are read in place).
layout(push_constant) uniform Push {
  uint n, c, h, w;         // x
  uint o, kh, kw, groups;  // weight: (o, c / groups, kh, kw)
  uint oh, ow;             // y
  int sh, sw, ph, pw, dh, dw;  // stride, padding, dilation (height, width)
  int a_strides[4];
  int a_offset;
  int b_strides[4];
  int b_offset;
  uint out_offset;
  uint k_chunk;  // conv_gemm: reduction indices per split (a multiple of its step)
} p;

#endif
