// The elementwise math of the GPU, written once (STYLE.md R6). The unfused kernels
// (shaders/unary, shaders/binary) select a function by a specialization constant; compile's fused
// kernels will paste this file (embedded as text, see kiln_embedded_glsl) in front of generated code
// and call the kiln_* functions by name.
#ifndef KILN_ELEMENTWISE_OPS_GLSL
#define KILN_ELEMENTWISE_OPS_GLSL
#include "op_codes.h"

float kiln_neg(float x) { return -x; }
float kiln_exp(float x) { return exp(x); }
float kiln_log(float x) { return log(x); }
// tanh(±9.1) is ±1 in float32; clamping first keeps drivers that lower tanh through exp(2x)
// from computing inf/inf = NaN for large |x|.
float kiln_tanh(float x) { return tanh(clamp(x, -15.0, 15.0)); }
float kiln_relu(float x) { return max(x, 0.0); }

float kiln_add(float a, float b) { return a + b; }
float kiln_sub(float a, float b) { return a - b; }
float kiln_mul(float a, float b) { return a * b; }
float kiln_div(float a, float b) { return a / b; }
// NaN propagates, as in NumPy's maximum (GLSL max may return either operand for NaN).
float kiln_max(float a, float b) { return (isnan(a) || isnan(b)) ? a + b : max(a, b); }

float kiln_unary(uint op, float x) {
  switch (op) {
    case KILN_UNARY_NEG: return kiln_neg(x);
    case KILN_UNARY_EXP: return kiln_exp(x);
    case KILN_UNARY_LOG: return kiln_log(x);
    case KILN_UNARY_TANH: return kiln_tanh(x);
    case KILN_UNARY_RELU: return kiln_relu(x);
  }
  return x;
}

float kiln_binary(uint op, float a, float b) {
  switch (op) {
    case KILN_BINARY_ADD: return kiln_add(a, b);
    case KILN_BINARY_SUB: return kiln_sub(a, b);
    case KILN_BINARY_MUL: return kiln_mul(a, b);
    case KILN_BINARY_DIV: return kiln_div(a, b);
    case KILN_BINARY_MAX: return kiln_max(a, b);
  }
  return a;
}
#endif
