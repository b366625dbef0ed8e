#pragma once
// More of jax.random: the Laplace, truncated-normal and multivariate-normal distributions,
// categorical draws of several samples, and uniform / randint / bernoulli with array-valued
// bounds and probabilities broadcast against the shape. Keys and layouts as core/random.h: the
// same key gives the same numbers on either device (compositions of the random primitives and
// ordinary ops, plus one primitive for randint's array bounds).
//
// Array-valued parameters follow JAX: they are converted to the result's dtype and must broadcast
// to `shape` (ShapeError otherwise); their values are not checked, as JAX does not check them
// (only what the values show on evaluation could be, and a graph op cannot throw then): where
// high <= low, uniform gives low and randint gives low; bernoulli's p below 0 gives false and
// above 1 true (u < p, u uniform on [0, 1)), NaN gives false. The scalar overloads (core/random.h)
// keep their eager checks.
#include <optional>
#include <string_view>

#include "kiln/core/random.h"

namespace kiln::random {

/// Uniform on [low, high) with low and high arrays broadcast to `shape` (converted to `dtype`, as
/// JAX), computed as the scalar overload does: low + (high - low) * u clamped to [low, the largest
/// dtype value below high], u uniform on [0, 1) (float32, or float64 for float64). Differentiable
/// in low and high (u and 1 - u). Unchecked values as the header says. DtypeError for a non-float
/// dtype, ShapeError when the bounds do not broadcast to `shape`.
Array uniform(const Shape& shape, const Array& key, const Array& low, const Array& high,
              Dtype dtype = float32, StreamOrDevice s = {});
/// Integers uniform on [low, high) with low and high integer arrays broadcast to `shape`, by JAX's
/// rules: the bounds are clipped into `dtype`'s range, a high past the dtype's maximum makes that
/// maximum reachable, and high <= low gives low. The same bits as the scalar overload for the
/// same bounds (64 random bits, multiply-high). DtypeError for a non-integer dtype or bounds,
/// ShapeError when the bounds do not broadcast to `shape`.
Array randint(const Shape& shape, const Array& key, const Array& low, const Array& high, Dtype dtype = int32,
              StreamOrDevice s = {});
/// bool, true with probability p, p a float array broadcast to `shape`: u < p with u uniform on
/// [0, 1) in float32 (float64 for a float64 p), the scalar overload's u. p outside [0, 1] is not
/// checked (as JAX): below 0 never, above 1 always, NaN never. DtypeError for a non-float p,
/// ShapeError when p does not broadcast to `shape`.
Array bernoulli(const Shape& shape, const Array& key, const Array& p, StreamOrDevice s = {});

/// Laplace (double exponential) with location `loc` and scale `scale`, by JAX's inverse CDF:
/// loc + scale * sign(u) * log1p(-|u|), u uniform on (-1, 1). float16/bfloat16 are computed in
/// float32. ValueError for a non-finite parameter or scale < 0, DtypeError for a non-float dtype.
Array laplace(const Shape& shape, const Array& key, double loc = 0.0, double scale = 1.0,
              Dtype dtype = float32, StreamOrDevice s = {});

/// Standard normal truncated to (lower, upper), by JAX's algorithm: u uniform between
/// erf(lower / sqrt 2) and erf(upper / sqrt 2), sqrt(2) * erfinv(u), clamped into the open
/// interval (the dtype's next values inward from the bounds). Infinite bounds are allowed. As in
/// JAX, precision fades when both bounds lie far in one tail (erf rounds to +-1: |bound| past
/// about 5 in float32, 8 in float64). float16/bfloat16 are computed in float32. ValueError unless
/// lower < upper in `dtype` and neither is NaN, DtypeError for a non-float dtype.
Array truncated_normal(const Shape& shape, const Array& key, double lower, double upper,
                       Dtype dtype = float32, StreamOrDevice s = {});
/// truncated_normal with array bounds broadcast to `shape` (converted to `dtype`); their values are
/// not checked (as JAX): where lower >= upper the result is not meaningful. As in JAX, gradients
/// reach the bounds through the erf-space draw, not through the clamp (stop_gradient). DtypeError
/// for a non-float dtype, ShapeError when the bounds do not broadcast to `shape`.
Array truncated_normal(const Shape& shape, const Array& key, const Array& lower, const Array& upper,
                       Dtype dtype = float32, StreamOrDevice s = {});

/// Samples from N(mean, cov) as JAX: mean (..., n) + factor @ z with z standard normal of shape
/// shape + (n,) and factor from `method`: "cholesky" (cov = L L^T; cov must be positive-definite,
/// else the eval throws linalg::cholesky's ValueError), "svd" (U sqrt(S)) or "eigh" (V sqrt(w),
/// negative eigenvalues taken as 0 where JAX gives NaN); both allow a singular positive-semidefinite
/// cov. `shape` is the batch of samples, which must
/// broadcast with mean's and cov's batch dims and defaults to their broadcast; the result is
/// shape + (n,), in the float dtype mean and cov promote to (float32 for integers; float16 and
/// bfloat16 are computed in float32). Differentiable in mean and cov. ShapeError for mean 0-d, cov
/// not (..., n, n) or a shape that does not fit; ValueError for another method.
Array multivariate_normal(const Array& mean, const Array& cov, const Array& key,
                          std::optional<Shape> shape = std::nullopt, std::string_view method = "cholesky",
                          StreamOrDevice s = {});

/// Class indices (int32) sampled from logits along `axis`, `shape` of them (JAX's `shape`): shape
/// must end in the logits' batch shape (logits without `axis`; broadcasting allowed) and may add
/// leading dims of independent samples. Gumbel-max with its own noise for every sample:
/// argmax(logits + gumbel(shape with axis inserted)). categorical(logits, key, axis, batch shape)
/// is the one-sample categorical. ShapeError for 0-d logits, a bad axis, an empty axis or a shape
/// that does not end in the batch shape.
Array categorical(const Array& logits, const Array& key, int axis, const Shape& shape, StreamOrDevice s = {});
/// `num_samples` independent class indices (int32) per distribution along the last dim of the
/// result (MLX's num_samples): shape batch shape + (num_samples,); sample k is element k of JAX's
/// categorical with shape (num_samples,) + batch shape. Errors as categorical, and ValueError for
/// num_samples < 0.
Array categorical_samples(const Array& logits, const Array& key, int64_t num_samples, int axis = -1,
                          StreamOrDevice s = {});

}  // namespace kiln::random

namespace kiln::detail {

/// Internal, declared for the tests: the next value of h's float dtype toward -inf (down) or +inf,
/// elementwise, as std::nextafter; NaN stays, and so does the infinity the step goes toward.
Array next_float(const Array& h, bool down, StreamOrDevice s = {});

}  // namespace kiln::detail
