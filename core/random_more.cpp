// More of jax.random (core/random_more.h): compositions of the random primitives and ordinary
// ops, and RandomIntRange, randint's primitive for array-valued bounds.
#include "kiln/core/random_more.h"

#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/linalg_decomp.h"
#include "kiln/core/ops/random_primitives.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/shape_more.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/ops/unary.h"
#include "kiln/core/vulkan/gpu_random.h"

namespace kiln {
namespace detail {
namespace {

/// Integers uniform on [low, high) in an integer `dtype`, the bounds per element: inputs are the
/// keys (batch..., 2) and low, high and `inclusive` (1 where high stands for the dtype's maximum
/// + 1), all three of the output's shape (batch + sample) and dtype. Element i of a sample is
/// low + multiply_high(bits64(key, i), range), range = high - low + inclusive (2^64 wrapping to 0
/// means every 64-bit value) or 1 where high <= low: RandomInt's bits for the same bounds.
class RandomIntRange final : public PrimitiveWithParams<RandomIntRange> {
 public:
  RandomIntRange(Stream s, Shape shape, Dtype dtype)
      : PrimitiveWithParams(s), shape_(std::move(shape)), dtype_(dtype) {}
  const char* name() const override { return "RandomIntRange"; }
  auto params() const { return std::tie(shape_, dtype_); }
  uint32_t traits() const override { return static_cast<uint32_t>(Trait::random); }
  Shape out_shape(const Shape& key_shape) const {
    Shape out(key_shape.begin(), key_shape.end() - 1);
    out.insert(out.end(), shape_.begin(), shape_.end());
    return out;
  }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    return {out_shape(in[0].shape())};
  }
  /// This primitive on keys (batch..., 2) and bounds broadcast to batch + sample shape.
  Array apply(const Array& keys, const Array& low, const Array& high, const Array& inclusive) const {
    Shape out = out_shape(keys.shape());
    std::vector<Array> in{keys, broadcast_to(low, out, stream()), broadcast_to(high, out, stream()),
                          broadcast_to(inclusive, out, stream())};
    return Array::make(std::move(out), dtype_, std::make_shared<RandomIntRange>(stream(), shape_, dtype_),
                       std::move(in));
  }

  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    Array& o = out[0];
    o.allocate();
    const int64_t n = o.size(), per = shape_size(shape_);
    if (n == 0) return;
    std::vector<uint32_t> keys(static_cast<size_t>(in[0].size()));
    gather_row_major(in[0], keys.data(), uint32);
    std::vector<int64_t> low(static_cast<size_t>(n)), high(low.size()), inclusive(low.size());
    gather_row_major(in[1], low.data(), int64);
    gather_row_major(in[2], high.data(), int64);
    gather_row_major(in[3], inclusive.data(), int64);
    visit_dtype<kIntTypes>(dtype_, "randint", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* dst = static_cast<T*>(o.raw_data());
      parallel_for(n, 4096, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) {
          const int64_t k = j / per;
          const Threefry2x32 key{keys[2 * k], keys[2 * k + 1]};
          const uint64_t lo = static_cast<uint64_t>(low[j]);
          const uint64_t range =
              high[j] > low[j] ? static_cast<uint64_t>(high[j]) - lo + static_cast<uint64_t>(inclusive[j])
                               : 1;
          const uint64_t bits = threefry_bits64(key, static_cast<uint64_t>(j - k * per));
          dst[j] =
              static_cast<T>(static_cast<int64_t>(lo + (range == 0 ? bits : multiply_high(bits, range))));
        }
      });
    });
  }

  // The CPU's arithmetic in 64-bit words (uvec2: high, low); the bounds arrive as stored, so the
  // comparison is signed or unsigned as the dtype is.
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    const bool wide = size_of(dtype_) == 8;
    const char* value = dtype_ == int64       ? "int64_t"
                        : dtype_ == uint64    ? "uint64_t"
                        : is_unsigned(dtype_) ? "uint"
                                              : "int";
    std::string helpers = R"(
uvec2 kiln_ext64(int v) { return uvec2(v < 0 ? 0xFFFFFFFFu : 0u, uint(v)); }
uvec2 kiln_ext64(uint v) { return uvec2(0u, v); }
uvec2 kiln_sub64(uvec2 a, uvec2 b) {
  uint borrow;
  const uint lo = usubBorrow(a.y, b.y, borrow);
  return uvec2(a.x - b.x - borrow, lo);
}
)";
    if (wide)
      helpers +=
          "uvec2 kiln_ext64(int64_t v) { return unpackUint2x32(uint64_t(v)).yx; }\n"
          "uvec2 kiln_ext64(uint64_t v) { return unpackUint2x32(v).yx; }\n";
    helpers += fmt::format(R"(
{0} kiln_keyed(uvec2 key, uint i, {1} lo, {1} hi, {1} inclusive) {{
  const uvec2 range = hi > lo ? kiln_add64(kiln_sub64(kiln_ext64(hi), kiln_ext64(lo)), uvec2(0u, uint(inclusive)))
                              : uvec2(0u, 1u);
  const uvec2 bits = kiln_random_bits64(key, i);
  const uvec2 sum = kiln_add64(kiln_ext64(lo), range == uvec2(0u) ? bits : kiln_multiply_high64(bits, range));
  return {2};
}}
)",
                           wide ? value : "uint", value,
                           wide ? fmt::format("{}(packUint2x32(sum.yx))", value) : "sum.y");
    const std::vector<Array> bounds{in[1], in[2], in[3]};
    gpu::keyed_elementwise_inputs(helpers, wide ? dtype_ : uint32, in[0], shape_size(shape_), bounds, out[0]);
  }

  std::vector<Array> vjp(const VjpArgs& a) const override {
    std::vector<Array> out;
    for (int arg : a.argnums) out.push_back(zeros_like(a.primals[arg], stream()));
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    return {zeros(out_shape(a.primals[0].shape()), dtype_, stream())};
  }
  // The batch first in every input; unbatched keys are repeated (each batch element then draws the
  // same numbers, as a loop with one key does), unbatched bounds broadcast.
  VmapResult vmap(const VmapArgs& a) const override {
    int64_t batch = 0;
    for (size_t i = 0; i < a.inputs.size(); ++i)
      if (a.axes[i] >= 0) batch = a.inputs[i].shape(a.axes[i]);
    std::vector<Array> in;
    for (size_t i = 0; i < a.inputs.size(); ++i)
      in.push_back(a.axes[i] >= 0 ? moveaxis(a.inputs[i], a.axes[i], 0, stream()) : a.inputs[i]);
    if (a.axes[0] < 0) {
      Shape shape = in[0].shape();
      shape.insert(shape.begin(), batch);
      in[0] = broadcast_to(in[0], shape, stream());
    }
    return {{apply(in[0], in[1], in[2], in[3])}, {0}};
  }

 private:
  const Shape shape_;
  const Dtype dtype_;
};

}  // namespace

// The next value of h's float dtype toward -inf (down) or +inf, elementwise (nextafter): NaN stays,
// and so does the infinity the step goes toward.
Array next_float(const Array& h, bool down, StreamOrDevice s) {
  const Dtype t = h.dtype();
  Array r;
  if (t == float32 || t == float64) {
    // On the bits: the magnitude steps by one, zero to the smallest subnormal of the step's sign.
    const bool wide = t == float64;
    const Array b = view(h, wide ? int64 : uint32, s);
    const Array negative_sign = wide ? less(b, int64_t{0}, s) : greater_equal(b, uint32_t{0x80000000u}, s);
    const Array zero = wide ? equal(bitwise_and(b, std::numeric_limits<int64_t>::max(), s), int64_t{0}, s)
                            : equal(bitwise_and(b, uint32_t{0x7fffffffu}, s), uint32_t{0}, s);
    const Array away = down ? negative_sign : logical_not(negative_sign, s);  // |h| grows
    const Array stepped = where(away, add(b, wide ? Operand(int64_t{1}) : Operand(uint32_t{1}), s),
                                subtract(b, wide ? Operand(int64_t{1}) : Operand(uint32_t{1}), s), s);
    const Operand from_zero = wide ? Operand(down ? std::numeric_limits<int64_t>::min() + 1 : int64_t{1})
                                   : Operand(down ? uint32_t{0x80000001u} : uint32_t{1});
    r = view(where(zero, from_zero, stepped, s), t, s);
    r = where(logical_or(isnan(h, s), down ? isneginf(h, s) : isposinf(h, s), s), h, r, s);
  } else {
    // float16 / bfloat16 (p mantissa bits) in float32: h -+ 0.625 units of h's last place (at least
    // 0.625 of the smallest subnormal) is exact in float32 and rounds to the neighbor, whether the
    // spacing on that side is h's unit or, below a power of two, half of it.
    const int p = t == float16 ? 10 : 7;
    const double smallest = t == float16 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -133);
    const double largest = t == float16 ? 65504.0 : std::ldexp(2.0 - std::ldexp(1.0, -7), 127);
    const Array f = astype(h, float32, s);
    const Array d = maximum(multiply(abs(f, s), 0.625 * std::ldexp(1.0, -p), s), 0.625 * smallest, s);
    r = astype(down ? subtract(f, d, s) : add(f, d, s), t, s);
    // inf - inf is NaN: the largest finite value below +inf (above -inf).
    r = where(down ? isposinf(h, s) : isneginf(h, s), Array(down ? largest : -largest, t), r, s);
  }
  return r;
}

}  // namespace detail

namespace random {
namespace {

using detail::check_float_dtype;
using detail::check_key;
using detail::check_shape;
using detail::int_limits;

void check_array(const char* op, const char* what, const Array& a) {
  if (!a.valid()) throw ValueError::of(op, "an empty (default-constructed) array", "{}", what);
}

// Array parameters (JAX's _check_shape): each shape must broadcast to `shape` without growing it.
void check_broadcasts_to(const char* op, const Shape& shape, std::initializer_list<Shape> params) {
  for (const Shape& p : params) {
    bool fits = p.size() <= shape.size();
    for (size_t d = 1; fits && d <= p.size(); ++d)
      fits = p[p.size() - d] == 1 || p[p.size() - d] == shape[shape.size() - d];
    if (!fits)
      throw ShapeError::of(op, "parameters must broadcast to the shape",
                           "shape {} from a parameter of shape {}", shape_str(shape), shape_str(p));
  }
}

// float64 computes in float64, the other float dtypes in float32.
Dtype compute_dtype(Dtype t) { return t == float64 ? float64 : float32; }

}  // namespace

Array uniform(const Shape& shape, const Array& key, const Array& low, const Array& high, Dtype dtype,
              StreamOrDevice s) {
  check_key("uniform", key);
  check_shape("uniform", shape);
  check_float_dtype("uniform", dtype);
  check_array("uniform", "low", low);
  check_array("uniform", "high", high);
  check_broadcasts_to("uniform", shape, {low.shape(), high.shape()});
  // As the scalar overload: max(min(low + (high - low) * u, top), low) in the compute dtype, top
  // the largest dtype value below high, rounded once to the dtype at the end.
  const Dtype c = compute_dtype(dtype);
  const Array hi_t = astype(high, dtype, s);
  const Array lo = astype(astype(low, dtype, s), c, s);
  const Array top = astype(detail::next_float(hi_t, true, s), c, s);
  const Array span = subtract(astype(hi_t, c, s), lo, s);
  const Array u = uniform(shape, key, 0.0, 1.0, c, s);
  return astype(maximum(minimum(add(multiply(u, span, s), lo, s), top, s), lo, s), dtype, s);
}

Array randint(const Shape& shape, const Array& key, const Array& low, const Array& high, Dtype dtype,
              StreamOrDevice s) {
  check_key("randint", key);
  check_shape("randint", shape);
  if (!is_integral(dtype))
    throw DtypeError::of("randint", "dtype must be an integer type", "got {}", dtype_name(dtype));
  check_array("randint", "low", low);
  check_array("randint", "high", high);
  for (const Array* b : {&low, &high})
    if (!is_integral(b->dtype()))
      throw DtypeError::of("randint", "bounds must be integer arrays", "got {}", dtype_name(b->dtype()));
  check_broadcasts_to("randint", shape, {low.shape(), high.shape()});
  // JAX's _convert_and_clip_integer: the bounds clipped into the dtype's range, and a high past its
  // maximum makes the maximum reachable.
  const auto limits = int_limits(dtype);
  const auto t_min = limits.first, t_max = limits.second;
  auto clip_to_dtype = [&](const Array& x) {
    const auto [x_min, x_max] = int_limits(x.dtype());
    if (x_min >= t_min && x_max <= t_max) return astype(x, dtype, s);
    return astype(clip(x, Operand(std::max(x_min, t_min)), Operand(std::min(x_max, t_max)), s), dtype, s);
  };
  const Array inclusive = int_limits(high.dtype()).second > t_max ? astype(greater(high, t_max, s), dtype, s)
                                                                  : zeros({}, dtype, s);
  const detail::RandomIntRange prim(to_stream(s), shape, dtype);
  return prim.apply(key, clip_to_dtype(low), clip_to_dtype(high), inclusive);
}

Array bernoulli(const Shape& shape, const Array& key, const Array& p, StreamOrDevice s) {
  check_key("bernoulli", key);
  check_shape("bernoulli", shape);
  check_array("bernoulli", "p", p);
  if (!is_floating(p.dtype()))
    throw DtypeError::of("bernoulli", "p must be a float array", "got {}", dtype_name(p.dtype()));
  check_broadcasts_to("bernoulli", shape, {p.shape()});
  const Dtype c = compute_dtype(p.dtype());
  return less(uniform(shape, key, 0.0, 1.0, c, s), astype(p, c, s), s);
}

Array laplace(const Shape& shape, const Array& key, double loc, double scale, Dtype dtype, StreamOrDevice s) {
  check_key("laplace", key);
  check_shape("laplace", shape);
  check_float_dtype("laplace", dtype);
  if (!std::isfinite(loc) || !std::isfinite(scale) || scale < 0)
    throw ValueError::of("laplace", "loc must be finite and scale finite and >= 0", "loc {}, scale {}", loc,
                         scale);
  // JAX: u uniform on [-1 + epsneg, 1), sign(u) * log1p(-|u|); |u| < 1 keeps the log finite.
  const Dtype c = compute_dtype(dtype);
  const double epsneg = c == float64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  const Array u = uniform(shape, key, -1.0 + epsneg, 1.0, c, s);
  Array z = multiply(sign(u, s), log1p(negative(abs(u, s), s), s), s);
  if (scale != 1.0) z = multiply(z, scale, s);
  if (loc != 0.0) z = add(z, loc, s);
  return astype(z, dtype, s);
}

Array truncated_normal(const Shape& shape, const Array& key, double lower, double upper, Dtype dtype,
                       StreamOrDevice s) {
  check_float_dtype("truncated_normal", dtype);
  const Array lo(lower, dtype), hi(upper, dtype);
  const double lo_t = lo.item<double>(), hi_t = hi.item<double>();
  if (std::isnan(lo_t) || std::isnan(hi_t) || !(lo_t < hi_t))
    throw ValueError::of("truncated_normal", "lower must be below upper in the dtype, neither NaN",
                         "lower {}, upper {} for {}", lower, upper, dtype_name(dtype));
  return truncated_normal(shape, key, lo, hi, dtype, s);
}

Array truncated_normal(const Shape& shape, const Array& key, const Array& lower, const Array& upper,
                       Dtype dtype, StreamOrDevice s) {
  check_key("truncated_normal", key);
  check_shape("truncated_normal", shape);
  check_float_dtype("truncated_normal", dtype);
  check_array("truncated_normal", "lower", lower);
  check_array("truncated_normal", "upper", upper);
  check_broadcasts_to("truncated_normal", shape, {lower.shape(), upper.shape()});
  // JAX: u uniform on [erf(lower / sqrt 2), erf(upper / sqrt 2)), sqrt(2) erfinv(u), clipped to the
  // open interval so that rounding (or an infinite bound's erfinv(-1)) stays inside.
  const Dtype c = compute_dtype(dtype);
  const Array lo = astype(lower, dtype, s), hi = astype(upper, dtype, s);
  const Array a = erf(divide(astype(lo, c, s), std::numbers::sqrt2, s), s);
  const Array b = erf(divide(astype(hi, c, s), std::numbers::sqrt2, s), s);
  const Array z = multiply(erfinv(uniform(shape, key, a, b, c, s), s), std::numbers::sqrt2, s);
  return clip(astype(z, dtype, s), detail::next_float(stop_gradient(lo, s), false, s),
              detail::next_float(stop_gradient(hi, s), true, s), s);
}

Array multivariate_normal(const Array& mean, const Array& cov, const Array& key, std::optional<Shape> shape,
                          std::string_view method, StreamOrDevice s) {
  constexpr const char* op = "multivariate_normal";
  check_key(op, key);
  check_array(op, "mean", mean);
  check_array(op, "cov", cov);
  if (mean.ndim() < 1) throw ShapeError::of(op, "mean needs at least one dimension", "shape ()");
  const int64_t n = mean.shape(-1);
  if (cov.ndim() < 2 || cov.shape(-1) != n || cov.shape(-2) != n)
    throw ShapeError::of(op, "cov must be (..., n, n) for mean (..., n)", "mean {}, cov {}",
                         shape_str(mean.shape()), shape_str(cov.shape()));
  if (method != "cholesky" && method != "svd" && method != "eigh")
    throw ValueError::of(op, "method must be \"cholesky\", \"svd\" or \"eigh\"", "got \"{}\"", method);
  const Shape mean_batch(mean.shape().begin(), mean.shape().end() - 1);
  const Shape cov_batch(cov.shape().begin(), cov.shape().end() - 2);
  const Shape batch = broadcast_shapes(op, mean_batch, cov_batch);
  if (!shape) {
    shape = batch;
  } else {
    check_shape(op, *shape);
    check_broadcasts_to(op, *shape, {batch});
  }
  Dtype out = promote_types(mean.dtype(), cov.dtype());
  if (!is_floating(out)) out = float32;
  const Dtype c = compute_dtype(out);
  const Array m = astype(mean, c, s), a = astype(cov, c, s);
  Array factor;
  if (method == "cholesky") {
    factor = linalg::cholesky(a, false, s);
  } else if (method == "svd") {
    const auto [u, sv, vh] = linalg::svd(a, true, s);
    factor = multiply(u, expand_dims(sqrt(sv, s), -2, s), s);
  } else {
    // Rounding can leave a singular cov's zero eigenvalues slightly negative: they count as zero
    // (JAX takes their square root, giving NaN).
    const auto [w, v] = linalg::eigh(a, "L", s);
    factor = multiply(v, expand_dims(sqrt(maximum(w, 0.0, s), s), -2, s), s);
  }
  Shape z_shape = *shape;
  z_shape.push_back(n);
  const Array z = normal(z_shape, key, 0.0, 1.0, c, s);
  // JAX's einsum('...ij,...j->...i', factor, z), batch dims broadcast: z @ factor^T, one product
  // for all samples when cov has no batch dims.
  const Array ft = swapaxes(factor, -1, -2, s);
  const Array y =
      factor.ndim() == 2 ? matmul(z, ft, s) : squeeze(matmul(expand_dims(z, -2, s), ft, s), -2, s);
  return astype(add(m, y, s), out, s);
}

Array categorical(const Array& logits, const Array& key, int axis, const Shape& shape, StreamOrDevice s) {
  constexpr const char* op = "categorical";
  check_key(op, key);
  check_array(op, "logits", logits);
  if (logits.ndim() == 0) throw ShapeError::of(op, "logits need at least one dimension", "shape ()");
  check_shape(op, shape);
  const int ax = normalize_axis(op, axis, logits.ndim());
  if (logits.shape(ax) == 0)
    throw ShapeError::of(op, "no categories along the axis", "logits {}, axis {}", shape_str(logits.shape()),
                         axis);
  Shape batch = logits.shape();
  batch.erase(batch.begin() + ax);
  check_broadcasts_to(op, shape, {batch});
  // JAX: gumbel noise of shape prefix + (the batch part of shape with the axis inserted), added to
  // the logits (broadcast), argmax along the axis.
  const size_t prefix = shape.size() - batch.size();
  Shape noise = shape;
  noise.insert(noise.begin() + static_cast<int64_t>(prefix) + ax, logits.shape(ax));
  const Dtype t = logits.dtype() == float64 ? float64 : float32;
  const double tiny = t == float64 ? std::numeric_limits<double>::min() : std::numeric_limits<float>::min();
  const Array u = uniform(noise, key, tiny, 1.0, t, s);
  const Array gumbel = negative(log(negative(log(u, s), s), s), s);
  return argmax(add(astype(logits, t, s), gumbel, s), static_cast<int>(prefix) + ax, false, s);
}

Array categorical_samples(const Array& logits, const Array& key, int64_t num_samples, int axis,
                          StreamOrDevice s) {
  constexpr const char* op = "categorical";
  check_array(op, "logits", logits);
  if (num_samples < 0) throw ValueError::of(op, "num_samples must be >= 0", "got {}", num_samples);
  if (logits.ndim() == 0) throw ShapeError::of(op, "logits need at least one dimension", "shape ()");
  Shape shape = logits.shape();
  shape.erase(shape.begin() + normalize_axis(op, axis, logits.ndim()));
  shape.insert(shape.begin(), num_samples);
  return moveaxis(categorical(logits, key, axis, shape, s), 0, -1, s);
}

}  // namespace random
}  // namespace kiln
