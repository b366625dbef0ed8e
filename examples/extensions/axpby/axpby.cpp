// The axpby primitive: a BLAS fast path, a strided fallback, and rules built from kiln ops.
#include "axpby.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>

namespace axpby_ext {

using kiln::Array;
using kiln::Shape;
using kiln::Strides;

Array axpby(const kiln::Operand& x, const kiln::Operand& y, double alpha, double beta,
            kiln::StreamOrDevice s) {
  // Every check happens here, before the node exists: eval_cpu must never meet bad input.
  if ((!x.is_scalar() && !x.array().valid()) || (!y.is_scalar() && !y.array().valid()))
    throw kiln::ValueError::of("axpby", "an operand is an empty (default-constructed) array");
  kiln::Dtype t = kiln::result_type({&x, &y});
  if (!kiln::is_floating(t)) t = kiln::float32;
  Array xt = x.to_array(t, s), yt = y.to_array(t, s);
  Shape shape = kiln::broadcast_shapes("axpby", xt.shape(), yt.shape());
  // The inputs stay unbroadcast: the kernel reads a broadcast operand through zero strides instead
  // of a materialized copy.
  return Array::make(std::move(shape), t, std::make_shared<Axpby>(kiln::to_stream(s), alpha, beta),
                     {std::move(xt), std::move(yt)});
}

std::vector<Shape> Axpby::output_shapes(std::span<const Array> inputs) const {
  return {kiln::broadcast_shapes("axpby", inputs[0].shape(), inputs[1].shape())};
}

namespace {

// Strides (in elements) that read `a` as if broadcast to `shape`: 0 along broadcast dimensions.
Strides broadcast_strides(const Array& a, const Shape& shape) {
  Strides out(shape.size(), 0);
  const size_t lead = shape.size() - a.shape().size();
  for (size_t d = 0; d < a.shape().size(); ++d)
    if (a.shape()[d] != 1) out[lead + d] = a.strides()[d];
  return out;
}

// z = alpha * x + beta * y over row-contiguous z, in compute type C (float for the 16-bit floats):
// an odometer over the outer dimensions and a stride loop over the last one.
template <class T>
void axpby_strided(const Array& x, const Array& y, Array& z, double alpha, double beta) {
  using C = kiln::compute_t<T>;
  const C a = static_cast<C>(alpha), b = static_cast<C>(beta);
  const T* xp = x.strided_data<T>();
  const T* yp = y.strided_data<T>();
  T* zp = z.strided_data<T>();
  const Shape& shape = z.shape();
  if (shape.empty()) {
    zp[0] = static_cast<T>(a * static_cast<C>(xp[0]) + b * static_cast<C>(yp[0]));
    return;
  }
  const Strides sx = broadcast_strides(x, shape), sy = broadcast_strides(y, shape);
  const int last = static_cast<int>(shape.size()) - 1;
  const int64_t inner = shape[last], ix = sx[last], iy = sy[last];
  const int64_t rows = z.size() / inner;
  std::vector<int64_t> index(last, 0);
  int64_t ox = 0, oy = 0;
  for (int64_t r = 0; r < rows; ++r) {
    T* zr = zp + r * inner;
    for (int64_t i = 0; i < inner; ++i)
      zr[i] = static_cast<T>(a * static_cast<C>(xp[ox + i * ix]) + b * static_cast<C>(yp[oy + i * iy]));
    for (int d = last - 1; d >= 0; --d) {
      ox += sx[d];
      oy += sy[d];
      if (++index[d] < shape[d]) break;
      ox -= sx[d] * shape[d];
      oy -= sy[d] * shape[d];
      index[d] = 0;
    }
  }
}

}  // namespace

void Axpby::eval_cpu(std::span<const Array> inputs, std::span<Array> outputs) const {
  const Array& x = inputs[0];
  const Array& y = inputs[1];
  Array& z = outputs[0];
  const int64_t n = z.size();

  if (z.dtype() == kiln::float32 && x.row_contiguous() && y.row_contiguous() && x.size() == n &&
      y.size() == n) {
    // saxpby updates its y argument in place, so z starts as y: y's own buffer when nobody else can
    // see it (donation), else a copy. The copy goes block by block, each block updated while it is
    // still in L1: on 4M elements that took 3.1 ms against 3.4 ms for copying all of y first
    // (saxpby alone: 2.3 ms).
    const float* xp = x.strided_data<float>();
    const float* yp = y.strided_data<float>();
    const bool donated = z.donate_from(y);
    if (!donated) z.allocate();
    float* zp = z.strided_data<float>();
    constexpr int64_t kBlock = 1024;  // 4 KiB each of x, y and z; 4096 was slower
    for (int64_t i = 0; i < n; i += kBlock) {
      const auto m = static_cast<blasint>(std::min(kBlock, n - i));
      if (!donated) std::memcpy(zp + i, yp + i, static_cast<size_t>(m) * sizeof(float));
      cblas_saxpby(m, static_cast<float>(alpha_), xp + i, 1, static_cast<float>(beta_), zp + i, 1);
    }
    return;
  }

  z.allocate();
  if (n == 0) return;
  switch (z.dtype()) {
    case kiln::float16:
      return axpby_strided<kiln::float16_t>(x, y, z, alpha_, beta_);
    case kiln::bfloat16:
      return axpby_strided<kiln::bfloat16_t>(x, y, z, alpha_, beta_);
    case kiln::float32:
      return axpby_strided<float>(x, y, z, alpha_, beta_);
    case kiln::float64:
      return axpby_strided<double>(x, y, z, alpha_, beta_);
    default:
      throw kiln::RuntimeError::of("Axpby", "internal: non-float dtype reached the kernel");
  }
}

std::vector<Array> Axpby::vjp(const kiln::VjpArgs& args) const {
  // d z/d x = alpha, d z/d y = beta; broadcasting in the forward pass is a sum in the backward one.
  // The rule is made of kiln ops, so it is itself differentiable (grad of grad works).
  const Array& g = args.cotangents[0];
  std::vector<Array> out;
  for (int arg : args.argnums) {
    const double scale = arg == 0 ? alpha_ : beta_;
    out.push_back(
        kiln::sum_to_shape(kiln::multiply(g, scale, stream()), args.primals[arg].shape(), stream()));
  }
  return out;
}

std::vector<Array> Axpby::jvp(const kiln::JvpArgs& args) const {
  // axpby is linear: its tangent is axpby of the tangents (a missing tangent counts as zero).
  Array tx, ty;
  for (size_t i = 0; i < args.argnums.size(); ++i) (args.argnums[i] == 0 ? tx : ty) = args.tangents[i];
  if (tx.valid() && ty.valid()) return {axpby(tx, ty, alpha_, beta_, stream())};
  const Shape shape = kiln::broadcast_shapes("axpby", args.primals[0].shape(), args.primals[1].shape());
  const Array t = tx.valid() ? kiln::multiply(tx, alpha_, stream()) : kiln::multiply(ty, beta_, stream());
  return {t.shape() == shape ? t : kiln::broadcast_to(t, shape, stream())};
}

kiln::VmapResult Axpby::vmap(const kiln::VmapArgs& args) const {
  // Move each batch axis to the front, then pad the batched operand with size-1 dimensions after
  // it so that right-aligned broadcasting lines the per-example dimensions up. An unbatched operand
  // (axis -1) is left as it is and broadcasts over the batch.
  int rank[2];
  for (int i = 0; i < 2; ++i) rank[i] = args.inputs[i].ndim() - (args.axes[i] >= 0 ? 1 : 0);
  const int r = std::max(rank[0], rank[1]);
  Array in[2];
  for (int i = 0; i < 2; ++i) {
    in[i] = args.inputs[i];
    if (args.axes[i] < 0) continue;
    in[i] = kiln::moveaxis(in[i], args.axes[i], 0, stream());
    if (rank[i] < r) {
      Shape shape = in[i].shape();
      shape.insert(shape.begin() + 1, r - rank[i], 1);
      in[i] = kiln::reshape(in[i], shape, stream());
    }
  }
  return {{axpby(in[0], in[1], alpha_, beta_, stream())}, {0}};
}

}  // namespace axpby_ext
