#include "kiln/core/ops/ternary.h"

#include <bit>
#include <type_traits>

#include "kiln/core/ops/elementwise_impl.h"

namespace kiln {
namespace detail {
namespace {

// c ? x : y through bit masks: a data-dependent branch mispredicts on every other element of a
// random mask (relu's where ran 25x slower than maximum), and GCC does not if-convert it itself.
// The condition is read as bytes: GCC 12 has no vector type for bool loads and leaves such a
// loop scalar (a bool is stored as one byte, 0 or 1).
template <class T>
inline T select(uint8_t c, T x, T y) {
  using U = std::conditional_t<
      sizeof(T) == 8, uint64_t,
      std::conditional_t<sizeof(T) == 4, uint32_t, std::conditional_t<sizeof(T) == 2, uint16_t, uint8_t>>>;
  static_assert(sizeof(U) == sizeof(T));
  const U mask = static_cast<U>(-static_cast<U>(c));
  return std::bit_cast<T>(
      static_cast<U>((std::bit_cast<U>(x) & mask) | (std::bit_cast<U>(y) & static_cast<U>(~mask))));
}

// f(std::true_type) or f(std::false_type), as `flag` is: a run-time flag as a compile-time one.
template <class F>
void with_constant(bool flag, F&& f) {
  if (flag)
    f(std::true_type{});
  else
    f(std::false_type{});
}

class Where final : public PrimitiveWithParams<Where>, public BlockKernel {
 public:
  using PrimitiveWithParams::PrimitiveWithParams;
  const char* name() const override { return "Where"; }
  auto params() const { return std::tuple<>(); }
  uint32_t traits() const override { return static_cast<uint32_t>(Trait::elementwise); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    return {broadcast_shapes("where", {in[0].shape(), in[1].shape(), in[2].shape()})};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    Array& o = out[0];
    allocate_or_donate(o, {&in[1], &in[2]});
    if (dense_or_scalar(in, o)) return;
    const Strides sc = broadcast_strides(in[0].shape(), in[0].strides(), o.shape());
    const Strides sx = broadcast_strides(in[1].shape(), in[1].strides(), o.shape());
    const Strides sy = broadcast_strides(in[2].shape(), in[2].strides(), o.shape());
    const auto l = collapse<4>(o.shape(), {&o.strides(), &sc, &sx, &sy});
    const auto* c = reinterpret_cast<const uint8_t*>(in[0].strided_data<bool>());
    visit_dtype<kAllTypes>(o.dtype(), "where", [&](auto t) {
      using T = typename decltype(t)::type;
      const T* x = in[1].strided_data<T>();
      const T* y = in[2].strided_data<T>();
      T* r = o.strided_data<T>();
      const int64_t inner = l.shape.back();
      parallel_for(row_count(l), std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1)),
                   [&](int64_t rb, int64_t re) {
                     for_each_row(l, rb, re, [&](const auto& off, int64_t n, const auto& st) {
                       for (int64_t i = 0; i < n; ++i)
                         r[off[0] + i * st[0]] =
                             select(c[off[1] + i * st[1]], x[off[2] + i * st[2]], y[off[3] + i * st[3]]);
                     });
                   });
    });
  }
  // v0 is the condition as stored (bool), v1 and v2 the values in their dtype.
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    gpu::elementwise("v0 ? v1 : v2", out[0].dtype(), in, out[0]);
  }
  const char* glsl() const override { return "x0 ? x1 : x2"; }
  // Inputs each dense (row-contiguous, full size) or a single element: loops the compiler
  // vectorizes (relu is where(x <= 0, 0, x)), one instantiation per scalar pattern.
  static bool dense_or_scalar(std::span<const Array> in, Array& o) {
    const int64_t n = o.size();
    uint32_t scalars = 0;
    for (int k = 0; k < 3; ++k) {
      if (in[k].size() == 1 && n != 1)
        scalars |= 1u << k;
      else if (!(in[k].row_contiguous() && in[k].size() == n))
        return false;
    }
    const auto* c = reinterpret_cast<const uint8_t*>(in[0].strided_data<bool>());
    visit_dtype<kAllTypes>(o.dtype(), "where", [&](auto t) {
      using T = typename decltype(t)::type;
      const T* x = in[1].strided_data<T>();
      const T* y = in[2].strided_data<T>();
      T* r = o.strided_data<T>();
      // One loop per scalar pattern, the pattern a compile-time constant in each.
      // Pointers and scalar operands are copied into the task: read through the captured
      // references, GCC reloads them on every element (the store might alias) and does not vectorize.
      auto run = [&](auto kC, auto kX, auto kY) {
        parallel_for(n, kElementwiseGrain, [c, x, y, r, kC, kX, kY](int64_t b, int64_t e) {
          const uint8_t c0 = c[0];
          const T x0 = x[0], y0 = y[0];
          for (int64_t i = b; i < e; ++i) r[i] = select(kC ? c0 : c[i], kX ? x0 : x[i], kY ? y0 : y[i]);
        });
      };
      with_constant(scalars & 1u, [&](auto kC) {
        with_constant(scalars & 2u,
                      [&](auto kX) { with_constant(scalars & 4u, [&](auto kY) { run(kC, kX, kY); }); });
      });
    });
    return true;
  }
  // in_dtype is the dtype of x and y; the condition block is bool.
  void eval_block(std::span<const void* const> in, uint32_t scalars, Dtype in_dtype, void* out,
                  int64_t n) const override {
    const int64_t sc = block_step(scalars, 0), sx = block_step(scalars, 1), sy = block_step(scalars, 2);
    visit_dtype<kAllTypes>(in_dtype, "where", [&](auto t) {
      using T = typename decltype(t)::type;
      const auto* c = static_cast<const uint8_t*>(in[0]);
      const T* x = static_cast<const T*>(in[1]);
      const T* y = static_cast<const T*>(in[2]);
      T* o = static_cast<T*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = select(c[i * sc], x[i * sx], y[i * sy]);
    });
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array &c = a.primals[0], &g = a.cotangents[0];
    std::vector<Array> out;
    for (int arg : a.argnums) {
      if (arg == 0)
        out.push_back(zeros_like(c, stream()));
      else if (arg == 1)
        out.push_back(sum_to_shape(where(c, g, 0, stream()), a.primals[1].shape(), stream()));
      else
        out.push_back(sum_to_shape(where(c, 0, g, stream()), a.primals[2].shape(), stream()));
    }
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const Array& c = a.primals[0];
    const Shape shape = output_shapes(a.primals)[0];
    Array tx = zeros(shape, a.primals[1].dtype(), stream()), ty = tx;
    for (size_t i = 0; i < a.argnums.size(); ++i) {
      if (a.argnums[i] == 1) tx = a.tangents[i];
      if (a.argnums[i] == 2) ty = a.tangents[i];
    }
    return {where(c, tx, ty, stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    int r = 0;
    for (int i = 0; i < 3; ++i) r = std::max(r, a.inputs[i].ndim() - (a.axes[i] >= 0));
    std::vector<Array> in;
    for (int i = 0; i < 3; ++i) {
      Array v = a.inputs[i];
      if (a.axes[i] >= 0) {
        v = moveaxis(v, a.axes[i], 0, stream());
        Shape sh = v.shape();
        const int ri = v.ndim() - 1;
        if (ri != r) {
          sh.insert(sh.begin() + 1, r - ri, 1);
          v = reshape(v, sh, stream());
        }
      }
      in.push_back(v);
    }
    return {{where(in[0], in[1], in[2], stream())}, {0}};
  }
};

}  // namespace
}  // namespace detail

Array where(const Operand& condition, const Operand& x, const Operand& y, StreamOrDevice s) {
  for (const Operand* o : {&condition, &x, &y})
    if (!o->is_scalar() && !o->array().valid())
      throw ValueError::of("where", "an operand is an empty (default-constructed) array");
  const Dtype t = result_type({&x, &y});
  Array c = condition.to_array(bool_, s), a = x.to_array(t, s), b = y.to_array(t, s);
  Shape shape = broadcast_shapes("where", {c.shape(), a.shape(), b.shape()});
  return Array::make(std::move(shape), t, std::make_shared<detail::Where>(to_stream(s)),
                     {std::move(c), std::move(a), std::move(b)});
}

Array clip(const Array& a, const std::optional<Operand>& lo, const std::optional<Operand>& hi,
           StreamOrDevice s) {
  if (!a.valid()) throw ValueError::of("clip", "the array is empty (default-constructed)");
  if (!lo && !hi) throw ValueError::of("clip", "at least one of lo and hi must be given");
  Array out = a;
  if (lo) out = maximum(out, *lo, s);
  if (hi) out = minimum(out, *hi, s);
  return out;
}

}  // namespace kiln
