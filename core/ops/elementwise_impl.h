#pragma once
// CRTP bases for elementwise primitives: a derived struct states its name, dtypes, math and
// derivative once; the base supplies shapes, the CPU loops, vjp, jvp and vmap. Internal header.
#include <tuple>
#include <utility>

#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/cpu/simd.h"
#include "kiln/core/cpu/strided.h"
#include "kiln/core/operand.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/primitive.h"
#include "kiln/core/vulkan/gpu.h"

namespace kiln::detail {

// ---------------------------------------------------------------- block kernels

/// Float32 operations compile's fused chains run on register tiles (core/transforms/fusion.cpp).
enum class TileOp : uint8_t { none, add, subtract, multiply, divide, negative, exp, tanh };

/// Capability of an elementwise primitive: compute `n` outputs from input blocks (inputs in the
/// primitive's input dtype(s), output in its output dtype). Input k is a dense block of `n`
/// elements, or where bit k of `scalars` is set, one element broadcast over the block. compile's
/// fused primitive runs a chain of these block by block, so the chain makes one pass over memory.
class BlockKernel {
 public:
  virtual ~BlockKernel() = default;
  virtual void eval_block(std::span<const void* const> inputs, uint32_t scalars, Dtype in_dtype, void* out,
                          int64_t n) const = 0;
  /// Which float32 operation this is, when compile's fused chains can evaluate it in registers;
  /// TileOp::none otherwise.
  virtual TileOp tile_op() const { return TileOp::none; }
  /// Its GPU form for compile's fused chains: GLSL over x0, x1 (x2), the operands converted to
  /// gpu_compute_dtype of the dtype it computes in (a select's condition to bool); null when it
  /// has none.
  virtual const char* glsl() const { return nullptr; }
};

/// An op with a register-tile form states it as `static constexpr TileOp kTileOp`. The tile
/// interpreter computes each TileOp exactly as the op's float32 `apply` does (one IEEE operation,
/// exp_f32 or tanh_f32), so fused and eager results agree bit for bit.
template <class D>
constexpr TileOp tile_op_of() {
  if constexpr (requires { D::kTileOp; })
    return D::kTileOp;
  else
    return TileOp::none;
}

/// Step through input k of a block: 0 for a broadcast scalar, else 1.
inline int64_t block_step(uint32_t scalars, int k) { return (scalars >> k & 1u) ? 0 : 1; }

// ---------------------------------------------------------------- vector loops

// Dense float32 loops built per instruction set (KILN_SIMD_CLONES, core/cpu/simd.h).
/// An op whose `apply<float>` is branch-free states `kSimdF32`; its dense float32 loops are then
/// built for each instruction set above.
template <class D>
concept SimdF32 = requires {
  D::kSimdF32;
};

template <class D>
KILN_SIMD_CLONES void unary_f32_loop(const float* x, float* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = D::template apply<float>(x[i]);
}

/// Which operands of a float32 binary loop are dense arrays (the other a broadcast scalar).
enum class DenseOperands { both, left, right };

template <class D, DenseOperands kDense>
KILN_SIMD_CLONES void binary_f32_loop(const float* x, const float* y, float* o, int64_t n) {
  if constexpr (kDense == DenseOperands::both) {
    for (int64_t i = 0; i < n; ++i) o[i] = D::template apply<float>(x[i], y[i]);
  } else if constexpr (kDense == DenseOperands::left) {
    const float yv = *y;
    for (int64_t i = 0; i < n; ++i) o[i] = D::template apply<float>(x[i], yv);
  } else {
    const float xv = *x;
    for (int64_t i = 0; i < n; ++i) o[i] = D::template apply<float>(xv, y[i]);
  }
}

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
                     Out* orow = o + off[0];
                     const In* xrow = x + off[1];
                     const In* yrow = y + off[2];
                     // Rows of a broadcast (a bias over (N, C, H, W)): unit or zero inner strides
                     // get loops the compiler vectorizes; anything else walks the strides.
                     if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
                       const In yv = *yrow;
                       for (int64_t i = 0; i < m; ++i) orow[i] = f(xrow[i], yv);
                     } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
                       const In xv = *xrow;
                       for (int64_t i = 0; i < m; ++i) orow[i] = f(xv, yrow[i]);
                     } else if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
                       for (int64_t i = 0; i < m; ++i) orow[i] = f(xrow[i], yrow[i]);
                     } else {
                       for (int64_t i = 0; i < m; ++i) orow[i * st[0]] = f(xrow[i * st[1]], yrow[i * st[2]]);
                     }
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

// ---------------------------------------------------------------- GPU

/// The dtype the GPU computes an elementwise op in, as compute_t does on the CPU: float32 for
/// float16 and bfloat16, uint8 for bool (0 and 1, so comparisons, max and min hold), else itself.
inline Dtype gpu_compute_dtype(Dtype t) {
  if (t == float16 || t == bfloat16) return float32;
  return t == bool_ ? uint8 : t;
}

/// An op with a GPU kernel states it in GLSL as `static constexpr const char* kGlsl`, over x0 (and
/// x1), its inputs in gpu_compute_dtype; shaders/common/elementwise_ops.glsl defines the kiln_*
/// functions, overloaded per type, float64 included.
template <class D>
concept HasGlsl = requires {
  D::kGlsl;
};
template <class D>
void eval_gpu_elementwise(std::span<const Array> in, Array& out) {
  const Dtype t = in[0].dtype();  // a binary op's operands share one dtype (build converts them)
  if constexpr (HasGlsl<D>) return gpu::elementwise(D::kGlsl, gpu_compute_dtype(t), in, out);
  throw NotImplemented::of(D::kName, "no GPU kernel yet", "{}", dtype_name(t));
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
/// Base of an elementwise unary primitive D, which provides:
///   kName, kTypes, `template <class T> static auto apply(T)`, and either
///   `static Array derivative(const Array& x, const Array& y)` (dy/dx) or nothing (gradient zero);
///   optionally kOutBool (result is bool), kFloatOnly (integer input is promoted to float32),
///   kTileOp (its register-tile form in compile's fused chains) and kGlsl (its GPU kernel).
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
    if constexpr (SimdF32<D>) {
      if (x.dtype() == float32 && x.row_contiguous()) {
        const float* xp = x.strided_data<float>();
        float* op = o.strided_data<float>();
        parallel_for(o.size(), kElementwiseGrain,
                     [&](int64_t b, int64_t e) { unary_f32_loop<D>(xp + b, op + b, e - b); });
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

  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    eval_gpu_elementwise<D>(in, out[0]);
  }

  TileOp tile_op() const override { return tile_op_of<D>(); }
  const char* glsl() const override {
    if constexpr (HasGlsl<D>)
      return D::kGlsl;
    else
      return nullptr;
  }

  void eval_block(std::span<const void* const> in, uint32_t scalars, Dtype in_dtype, void* out,
                  int64_t n) const override {
    if constexpr (SimdF32<D>) {
      if (in_dtype == float32 && !scalars)
        return unary_f32_loop<D>(static_cast<const float*>(in[0]), static_cast<float*>(out), n);
    }
    const int64_t sx = block_step(scalars, 0);
    visit_dtype<D::kTypes>(in_dtype, D::kOpName, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      using O = std::conditional_t<OutputsBool<D>, bool, T>;
      const T* x = static_cast<const T*>(in[0]);
      O* o = static_cast<O*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<O>(D::apply(static_cast<C>(x[i * sx])));
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
template <class D>
concept DividesToFloat = requires {
  D::kIntToFloat;
};

/// Base of an elementwise binary primitive D, which provides kName, kOpName, kTypes,
/// `template <class T> static auto apply(T, T)`, and optionally
/// `static std::pair<Array, Array> partials(x, y, out)` (d out/dx, d out/dy; an empty Array means 1),
/// kOutBool, kIntToFloat (integer inputs computed in float32, as true division), kTileOp (its
/// register-tile form in compile's fused chains) and kGlsl (its GPU kernel).
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
    if constexpr (SimdF32<D>)
      if (o.dtype() == float32 && dense_f32(in[0], in[1], o)) return;
    visit_dtype<D::kTypes>(in[0].dtype(), D::kOpName, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      using O = std::conditional_t<OutputsBool<D>, bool, T>;
      binary_loop<T, O>(in[0], in[1], o, [](T x, T y) {
        return static_cast<O>(D::apply(static_cast<C>(x), static_cast<C>(y)));
      });
    });
  }

  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    eval_gpu_elementwise<D>(in, out[0]);
  }

  TileOp tile_op() const override { return tile_op_of<D>(); }
  const char* glsl() const override {
    if constexpr (HasGlsl<D>)
      return D::kGlsl;
    else
      return nullptr;
  }

  void eval_block(std::span<const void* const> in, uint32_t scalars, Dtype in_dtype, void* out,
                  int64_t n) const override {
    if constexpr (SimdF32<D>) {
      if (in_dtype == float32) {
        const auto* x = static_cast<const float*>(in[0]);
        const auto* y = static_cast<const float*>(in[1]);
        auto* o = static_cast<float*>(out);
        switch (scalars) {
          case 0:
            return binary_f32_loop<D, DenseOperands::both>(x, y, o, n);
          case 1:
            return binary_f32_loop<D, DenseOperands::right>(x, y, o, n);
          case 2:
            return binary_f32_loop<D, DenseOperands::left>(x, y, o, n);
          default:
            break;
        }
      }
    }
    const int64_t sx = block_step(scalars, 0), sy = block_step(scalars, 1);
    visit_dtype<D::kTypes>(in_dtype, D::kOpName, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      using O = std::conditional_t<OutputsBool<D>, bool, T>;
      const T* x = static_cast<const T*>(in[0]);
      const T* y = static_cast<const T*>(in[1]);
      O* o = static_cast<O*>(out);
      for (int64_t i = 0; i < n; ++i)
        o[i] = static_cast<O>(D::apply(static_cast<C>(x[i * sx]), static_cast<C>(y[i * sy])));
    });
  }

  // The vector loops for float32 operands that are dense or a single element; false otherwise.
  static bool dense_f32(const Array& a, const Array& b, Array& out) {
    const int64_t n = out.size();
    const bool a_dense = a.row_contiguous() && a.size() == n, b_dense = b.row_contiguous() && b.size() == n;
    const float* x = a.strided_data<float>();
    const float* y = b.strided_data<float>();
    float* o = out.strided_data<float>();
    auto run = [&](auto loop, int64_t x_step, int64_t y_step) {
      parallel_for(n, kElementwiseGrain,
                   [&](int64_t s, int64_t e) { loop(x + s * x_step, y + s * y_step, o + s, e - s); });
    };
    if (a_dense && b_dense)
      run(binary_f32_loop<D, DenseOperands::both>, 1, 1);
    else if (a_dense && b.size() == 1)
      run(binary_f32_loop<D, DenseOperands::left>, 1, 0);
    else if (a.size() == 1 && b_dense)
      run(binary_f32_loop<D, DenseOperands::right>, 0, 1);
    else
      return false;
    return true;
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
