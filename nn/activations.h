#pragma once
// Activation functions. Each is a composition of core ops, so it is lazy and differentiable (grad,
// jvp, vmap, compile) with no primitive of its own. All are elementwise unless said otherwise,
// keep x's shape, and follow kiln's dtype rules: transcendental ones promote integer input to
// float32; relu, relu6 and leaky_relu keep integer dtypes. Ops run on the default stream.
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/unary.h"

namespace kiln::nn {

/// max(x, 0), as torch.relu: the gradient at 0 is 0, and NaN propagates.
Array relu(const Array& x);
/// min(max(x, 0), 6), as torch.nn.functional.relu6: the gradient is 0 at and outside 0 and 6.
Array relu6(const Array& x);
/// x where x > 0, else negative_slope * x (torch.nn.functional.leaky_relu; gradient at 0 is the slope).
Array leaky_relu(const Array& x, double negative_slope = 0.01);
/// x where x > 0, else alpha * (exp(x) - 1) (torch.nn.functional.elu). Finite value and gradient
/// for any finite x.
Array elu(const Array& x, double alpha = 1.0);
/// scale * elu(x, alpha) with PyTorch's constants alpha = 1.6732632423543772,
/// scale = 1.0507009873554805 (torch.selu).
Array selu(const Array& x);
/// Exact GELU, x * Phi(x) = 0.5 * x * (1 + erf(x / sqrt(2))): torch.nn.functional.gelu(x) with
/// approximate="none". See gelu_tanh for the tanh approximation.
Array gelu(const Array& x);
/// GELU's tanh approximation, 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))):
/// torch.nn.functional.gelu(x, approximate="tanh").
Array gelu_tanh(const Array& x);
/// x * sigmoid(x) (SiLU, also called swish; torch.nn.functional.silu).
Array silu(const Array& x);
/// x * tanh(softplus(x)) (torch.nn.functional.mish). Finite value and gradient for any finite x.
Array mish(const Array& x);
/// log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold, as
/// torch.nn.functional.softplus. Computed without overflow: finite value and gradient for any
/// finite x (softplus(1000) = 1000, softplus(-1000) = 0). Throws ValueError if beta is not > 0.
Array softplus(const Array& x, double beta = 1.0, double threshold = 20.0);
/// log(sigmoid(x)) = -softplus(-x), computed stably for any finite x (log_sigmoid(-1000) = -1000)
/// with a finite gradient (torch.nn.functional.logsigmoid).
Array log_sigmoid(const Array& x);
/// Gated linear unit along `axis`: x splits into halves a, b and the result is a * sigmoid(b), with
/// x's shape except that axis is halved (torch.nn.functional.glu, whose default axis is also -1).
/// Throws ValueError naming the axis if its size is odd, ShapeError if the axis is out of range.
Array glu(const Array& x, int axis = -1);

// The core functions, reachable as kiln::nn::tanh etc. These name the same functions as kiln::tanh,
// so code that uses both namespaces is not ambiguous:
//   tanh(x), sigmoid(x): elementwise (core/ops/unary.h);
//   softmax(x, axis = -1), log_softmax(x, axis = -1): along an axis or axes, computed stably
//   (core/ops/reduce.h; torch.softmax / torch.log_softmax with dim = axis).
using kiln::log_softmax;
using kiln::sigmoid;
using kiln::softmax;
using kiln::tanh;

}  // namespace kiln::nn
