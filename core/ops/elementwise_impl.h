#pragma once
// CRTP bases for elementwise primitives: a derived struct states its name, dtypes, math and
// derivative once; the base supplies shapes, the CPU loops, vjp, jvp and vmap. Internal header.
#include <tuple>

#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/cpu/strided.h"
#include "kiln/core/operand.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/primitive.h"

namespace kiln::detail {

// ---------------------------------------------------------------- block kernels

/// Capability of an elementwise primitive: compute `n` outputs from dense input blocks of `n`
/// elements (inputs in the primitive's input dtype(s), output in its output dtype). compile's fused
/// primitive runs a chain of these block by block, so the chain makes one pass over memory.
class BlockKernel {
 public:
  virtual ~BlockKernel() = default;
  virtual void eval_block(std::span<const void* const> inputs, Dtype in_dtype, void* out,
                          int64_t n) const = 0;
};

// ---------------------------------------------------------------- CPU loops

/// out[i] = f(in[i]) over a row-contiguous `out`; `in` may have any strides.
template <class In, class Out, class F>
void unary_loop(const Array& in, Array& out, F f) {
  const In* x = in.strided_data<In>();
  Out* o = out.strided_data<Out>();
  if (in.row_contiguous()) {
    parallel_for(out.size(), kElementwiseGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = f(x[i]);
    });
    return;
  }
  const auto l = collapse<2>(out.shape(), {&out.strides(), &in.strides()});
  const int64_t rows = row_count(l), inner = l.shape.back();
  parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1)),
               [&](int64_t rb, int64_t re) {
                 for_each_row(l, rb, re, [&](const auto& off, int64_t n, const auto& st) {
                   for (int64_t i = 0; i < n; ++i) o[off[0] + i * st[0]] = f(x[off[1] + i * st[1]]);
                 });
               });
}

/// out[i] = f(a[i], b[i]) with a and b broadcast to out's shape; out is row-contiguous.
template <class In, class Out, class F>
void binary_loop(const Array& a, const Array& b, Array& out, F f) {
  const In* x = a.strided_data<In>();
  const In* y = b.strided_data<In>();
  Out* o = out.strided_data<Out>();
  const int64_t n = out.size();
  const bool a_dense = a.row_contiguous() && a.size() == n, b_dense = b.row_contiguous() && b.size() == n;
  if (a_dense && b_dense) {
    parallel_for(n, kElementwiseGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) o[i] = f(x[i], y[i]);
    });
  } else if (a_dense && b.size() == 1) {
    const In yv = *y;
    parallel_for(n, kElementwiseGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) o[i] = f(x[i], yv);
    });
  } else if (a.size() == 1 && b_dense) {
    const In xv = *x;
    parallel_for(n, kElementwiseGrain, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) o[i] = f(xv, y[i]);
    });
  } else {
    const Strides sa = broadcast_strides(a.shape(), a.strides(), out.shape());
    const Strides sb = broadcast_strides(b.shape(), b.strides(), out.shape());
    const auto l = collapse<3>(out.shape(), {&out.strides(), &sa, &sb});
    const int64_t rows = row_count(l), inner = l.shape.back();
    parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1)),
                 [&](int64_t rb, int64_t re) {
                   for_each_row(l, rb, re, [&](const auto& off, int64_t m, const auto& st) {
                     for (int64_t i = 0; i < m; ++i)
                       o[off[0] + i * st[0]] = f(x[off[1] + i * st[1]], y[off[2] + i * st[2]]);
                   });
                 });
  }
}

/// Gives `out` a row-contiguous buffer, reusing `in`'s when it is donatable.
inline void allocate_or_donate(Array& out, std::initializer_list<const Array*> candidates) {
  for (const Array* in : candidates)
    if (in->shape() == out.shape() && out.donate_from(*in)) return;
  out.allocate();
}

// ---------------------------------------------------------------- unary

template <class D>
concept HasDerivative = requires(const Array& x) {
  D::derivative(x, x);
};
template <class D>
concept OutputsBool = requires {
  D::kOutBool;
};
template <class D>
concept FloatOnly = requires {
  D::kFloatOnly;
};
/// A unary op may supply `static void contiguous_f32(const float*, float*, int64_t)`: a loop built
/// for several instruction sets (target_clones) used for dense float32 input.
template <class D>
concept HasF32Loop = requires(const float* x, float* o) {
  D::contiguous_f32(x, o, int64_t{0});
};

/// Base of an elementwise unary primitive D, which provides:
///   kName, kTypes, `template <class T> static auto apply(T)`, and either
///   `static Array derivative(const Array& x, const Array& y)` (dy/dx) or nothing (gradient zero);
///   optionally kOutBool (result is bool) and kFloatOnly (integer input is promoted to float32).
template <class D>
class UnaryOp : public PrimitiveWithParams<D>, public BlockKernel {
 public:
  explicit UnaryOp(Stream s) : PrimitiveWithParams<D>(s) {}
  auto params() const { return std::tuple<>(); }
  const char* name() const override { return D::kName; }
  uint32_t traits() const override { return static_cast<uint32_t>(Trait::elementwise); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return {in[0].shape()}; }

  static Dtype out_dtype(Dtype in) {
    if constexpr (OutputsBool<D>) return bool_;
    return in;
  }

  static Array build(const Array& x, StreamOrDevice s) {
    if (!x.valid()) throw ValueError::of(D::kOpName, "the array is empty (default-constructed)");
    Array in = x;
    if constexpr (FloatOnly<D>)
      if (!is_floating(x.dtype())) in = astype(x, float32, s);
    if (!D::kTypes.has(in.dtype()))
      throw DtypeError::of(D::kOpName, "dtype not supported", "{}", dtype_name(in.dtype()));
    return Array::make(in.shape(), out_dtype(in.dtype()), std::make_shared<D>(to_stream(s)), {in});
  }

  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const Array& x = in[0];
    Array& o = out[0];
    if (o.dtype() == x.dtype())
      allocate_or_donate(o, {&x});
    else
      o.allocate();
    if constexpr (HasF32Loop<D>) {
      if (x.dtype() == float32 && x.row_contiguous()) {
        const float* xp = x.strided_data<float>();
        float* op = o.strided_data<float>();
        parallel_for(o.size(), kElementwiseGrain,
                     [&](int64_t b, int64_t e) { D::contiguous_f32(xp + b, op + b, e - b); });
        return;
      }
    }
    visit_dtype<D::kTypes>(x.dtype(), D::kOpName, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      if constexpr (OutputsBool<D>)
        unary_loop<T, bool>(x, o, [](T v) { return static_cast<bool>(D::apply(static_cast<C>(v))); });
      else
        unary_loop<T, T>(x, o, [](T v) { return static_cast<T>(D::apply(static_cast<C>(v))); });
    });
  }

  void eval_block(std::span<const void* const> in, Dtype in_dtype, void* out, int64_t n) const override {
    if constexpr (HasF32Loop<D>) {
      if (in_dtype == float32)
        return D::contiguous_f32(static_cast<const float*>(in[0]), static_cast<float*>(out), n);
    }
    visit_dtype<D::kTypes>(in_dtype, D::kOpName, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      using O = std::conditional_t<OutputsBool<D>, bool, T>;
      const T* x = static_cast<const T*>(in[0]);
      O* o = static_cast<O*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<O>(D::apply(static_cast<C>(x[i])));
    });
  }

  std::vector<Array> vjp(const VjpArgs& a) const override {
    if constexpr (HasDerivative<D>)
      return {multiply(a.cotangents[0], D::derivative(a.primals[0], a.outputs[0]), this->stream())};
    else
      return {zeros_like(a.primals[0], this->stream())};
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const Array& x = a.primals[0];
    if constexpr (HasDerivative<D>) {
      const Array y = build(x, this->stream());
      return {multiply(a.tangents[0], D::derivative(x, y), this->stream())};
    } else {
      return {zeros(x.shape(), out_dtype(x.dtype()), this->stream())};
    }
  }
  VmapResult vmap(const VmapArgs& a) const override {
    return {{build(a.inputs[0], this->stream())}, {a.axes[0]}};
  }
};

// ---------------------------------------------------------------- binary

template <class D>
concept HasPartials = requires(const Array& x) {
  D::partials(x, x, x);
};
/// A binary op may supply `static void contiguous_f32(const float*, const float*, float*, int64_t)`
/// built for several instruction sets, used for dense float32 operands.
template <class D>
concept HasF32Loop2 = requires(const float* x, float* o) {
  D::contiguous_f32(x, x, o, int64_t{0});
};
template <class D>
concept DividesToFloat = requires {
  D::kIntToFloat;
};

/// Base of an elementwise binary primitive D, which provides kName, kOpName, kTypes,
/// `template <class T> static auto apply(T, T)`, and optionally
/// `static std::pair<Array, Array> partials(x, y, out)` (d out/dx, d out/dy; an empty Array means 1),
/// kOutBool, and kIntToFloat (integer inputs computed in float32, as true division).
template <class D>
class BinaryOp : public PrimitiveWithParams<D>, public BlockKernel {
 public:
  explicit BinaryOp(Stream s) : PrimitiveWithParams<D>(s) {}
  auto params() const { return std::tuple<>(); }
  const char* name() const override { return D::kName; }
  uint32_t traits() const override { return static_cast<uint32_t>(Trait::elementwise); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    return {broadcast_shapes(D::kOpName, in[0].shape(), in[1].shape())};
  }
  static Dtype out_dtype(Dtype in) {
    if constexpr (OutputsBool<D>) return bool_;
    return in;
  }

  static Array build(const Operand& a, const Operand& b, StreamOrDevice s) {
    if ((!a.is_scalar() && !a.array().valid()) || (!b.is_scalar() && !b.array().valid()))
      throw ValueError::of(D::kOpName, "an operand is an empty (default-constructed) array");
    Dtype t = result_type({&a, &b});
    if constexpr (DividesToFloat<D>)
      if (!is_floating(t)) t = float32;
    if (!D::kTypes.has(t)) throw DtypeError::of(D::kOpName, "dtype not supported", "{}", dtype_name(t));
    Array x = a.to_array(t, s), y = b.to_array(t, s);
    Shape shape = broadcast_shapes(D::kOpName, x.shape(), y.shape());
    return Array::make(std::move(shape), out_dtype(t), std::make_shared<D>(to_stream(s)),
                       {std::move(x), std::move(y)});
  }

  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    Array& o = out[0];
    if (o.dtype() == in[0].dtype())
      allocate_or_donate(o, {&in[0], &in[1]});
    else
      o.allocate();
    visit_dtype<D::kTypes>(in[0].dtype(), D::kOpName, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      using O = std::conditional_t<OutputsBool<D>, bool, T>;
      binary_loop<T, O>(in[0], in[1], o, [](T x, T y) {
        return static_cast<O>(D::apply(static_cast<C>(x), static_cast<C>(y)));
      });
    });
  }

  void eval_block(std::span<const void* const> in, Dtype in_dtype, void* out, int64_t n) const override {
    if constexpr (HasF32Loop2<D>) {
      if (in_dtype == float32)
        return D::contiguous_f32(static_cast<const float*>(in[0]), static_cast<const float*>(in[1]),
                                 static_cast<float*>(out), n);
    }
    visit_dtype<D::kTypes>(in_dtype, D::kOpName, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      using O = std::conditional_t<OutputsBool<D>, bool, T>;
      const T* x = static_cast<const T*>(in[0]);
      const T* y = static_cast<const T*>(in[1]);
      O* o = static_cast<O*>(out);
      for (int64_t i = 0; i < n; ++i)
        o[i] = static_cast<O>(D::apply(static_cast<C>(x[i]), static_cast<C>(y[i])));
    });
  }

  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array &x = a.primals[0], &y = a.primals[1], &g = a.cotangents[0];
    std::vector<Array> out;
    if constexpr (HasPartials<D>) {
      const auto [px, py] = D::partials(x, y, a.outputs[0]);
      for (int arg : a.argnums) {
        const Array& p = arg == 0 ? px : py;
        const Array c = p.valid() ? multiply(g, p, this->stream()) : g;
        out.push_back(sum_to_shape(c, a.primals[arg].shape(), this->stream()));
      }
    } else {
      for (int arg : a.argnums) out.push_back(zeros_like(a.primals[arg], this->stream()));
    }
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const Array &x = a.primals[0], &y = a.primals[1];
    const Array out = build(x, y, this->stream());
    if constexpr (HasPartials<D>) {
      const auto [px, py] = D::partials(x, y, out);
      Array total;
      for (size_t i = 0; i < a.argnums.size(); ++i) {
        const Array& p = a.argnums[i] == 0 ? px : py;
        Array t = p.valid() ? multiply(a.tangents[i], p, this->stream()) : a.tangents[i];
        if (t.shape() != out.shape()) t = broadcast_to(t, out.shape(), this->stream());
        total = total.valid() ? add(total, t, this->stream()) : t;
      }
      return {total};
    } else {
      return {zeros_like(out, this->stream())};
    }
  }
  VmapResult vmap(const VmapArgs& a) const override {
    // Move batch axes to the front and pad the batched operand's rank so that right-aligned
    // broadcasting lines the per-example dimensions up.
    const int rx = a.inputs[0].ndim() - (a.axes[0] >= 0), ry = a.inputs[1].ndim() - (a.axes[1] >= 0);
    const int r = std::max(rx, ry);
    std::vector<Array> in;
    for (int i = 0; i < 2; ++i) {
      Array v = a.inputs[i];
      if (a.axes[i] >= 0) {
        v = moveaxis(v, a.axes[i], 0, this->stream());
        const int ri = i == 0 ? rx : ry;
        Shape sh = v.shape();
        sh.insert(sh.begin() + 1, r - ri, 1);
        if (r != ri) v = reshape(v, sh, this->stream());
      }
      in.push_back(v);
    }
    return {{build(in[0], in[1], this->stream())}, {0}};
  }
};

}  // namespace kiln::detail
