// Codes of the elementwise ops the GPU kernels understand. Included by GLSL (shaders/common/
// elementwise_ops.glsl) and by C++ (core/vulkan/runtime/kernels.h), so the two cannot disagree.
// Plain #defines: the one syntax both languages share.
#ifndef KILN_SHADERS_OP_CODES_H
#define KILN_SHADERS_OP_CODES_H

#define KILN_UNARY_NEG 0
#define KILN_UNARY_EXP 1
#define KILN_UNARY_LOG 2
#define KILN_UNARY_TANH 3
#define KILN_UNARY_RELU 4

#define KILN_BINARY_ADD 0
#define KILN_BINARY_SUB 1
#define KILN_BINARY_MUL 2
#define KILN_BINARY_DIV 3
#define KILN_BINARY_MAX 4

#endif
