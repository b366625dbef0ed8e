#include "kiln/nn/layers/rope.h"

#include <cmath>

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/unary.h"

namespace kiln::nn {

RoPE::RoPE(int64_t dims, RoPEOptions o) : dims_(dims), options_(o) {
  if (dims < 2 || dims % 2 != 0) throw ValueError::of("RoPE", "dims must be even and >= 2", "got {}", dims);
  if (!(o.base > 0) || !std::isfinite(o.base))
    throw ValueError::of("RoPE", "base must be finite and > 0", "got {}", o.base);
  if (!std::isfinite(o.scale)) throw ValueError::of("RoPE", "scale must be finite", "got {}", o.scale);
}

Array RoPE::operator()(const Array& x, int64_t offset) const {
  if (!x.valid()) throw ValueError::of("RoPE", "input is an empty Array");
  if (!is_floating(x.dtype()))
    throw DtypeError::of("RoPE", "input must be floating point", "got {}", dtype_name(x.dtype()));
  if (x.ndim() < 2 || x.shape().back() < dims_)
    throw ShapeError::of("RoPE", "input must be (..., seq, features) with features >= dims",
                         "dims {}, got {}", dims_, shape_str(x.shape()));
  if (offset < 0) throw ValueError::of("RoPE", "offset must be >= 0", "got {}", offset);
  const int nd = x.ndim();
  const int64_t len = x.shape()[nd - 2], half = dims_ / 2;
  // Angles in float32 at least (float64 for float64 input): positions past 2^11 lose their
  // fractional angle in float16.
  const Dtype t = x.dtype() == float64 ? float64 : float32;
  const Array pos =
      reshape(arange(static_cast<double>(offset), static_cast<double>(offset + len), 1.0, t), {len, 1});
  const Array inv_freq = exp(arange(0, static_cast<double>(half), 1.0, t) *
                             (-2.0 * std::log(options_.base) / static_cast<double>(dims_)));
  const Array theta = pos * options_.scale * reshape(inv_freq, {1, half});  // (seq, half)
  const Array c = astype(cos(theta), x.dtype()), s = astype(sin(theta), x.dtype());

  Shape stop = x.shape();
  Shape start(nd, 0);
  Array rot = x;
  if (x.shape().back() > dims_) {
    stop.back() = dims_;
    rot = slice(x, start, stop);
  }
  Array out;
  if (options_.traditional) {
    Shape pairs = rot.shape();
    pairs.back() = half;
    pairs.push_back(2);
    const auto xs = split(reshape(rot, pairs), 2, -1);  // (..., seq, half, 1) each
    const Array x1 = squeeze(xs[0], Axes{-1}), x2 = squeeze(xs[1], Axes{-1});
    out = reshape(stack({x1 * c - x2 * s, x1 * s + x2 * c}, -1), rot.shape());
  } else {
    const auto xs = split(rot, 2, -1);
    out = concatenate({xs[0] * c - xs[1] * s, xs[0] * s + xs[1] * c}, -1);
  }
  if (x.shape().back() == dims_) return out;
  start.back() = dims_;
  return concatenate({out, slice(x, start, x.shape())}, -1);
}

}  // namespace kiln::nn
