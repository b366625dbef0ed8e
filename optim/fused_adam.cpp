// Adam's update as one primitive. Its rules differentiate and batch the same formula written in
// ops (adam_formula), so a step stays differentiable (e.g. for meta-learning) while evaluation is
// one pass over the parameter.
#include <cmath>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/cpu/simd.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/unary.h"
#include "kiln/core/primitive.h"
#include "kiln/core/shape_polymorphic.h"
#include "kiln/core/transforms.h"
#include "kiln/core/vulkan/gpu.h"
#include "kiln/optim/fused_adam_impl.h"
#include "kiln/optim/optimizer.h"

namespace kiln::optim::detail {
namespace {

// Inputs: p, g, m, v, [vmax,] step_size, bc2_sqrt, [decay] (0-d arrays, so a trace of the step keeps
// them as inputs rather than constants). The formula in ops; the primitive computes the same in one
// loop.
std::vector<Array> adam_formula(const AdamConstants& c, const std::vector<Array>& in) {
  const Array &p = in[0], &g = in[1], &m = in[2], &v = in[3];
  const size_t k = c.amsgrad ? 5 : 4;
  const Array &step_size = in[k], &bc2_sqrt = in[k + 1];
  const Array m1 = lerp(m, g, 1.0 - c.beta1);  // optim::detail::lerp, torch.lerp's formulas
  const Array v1 = c.beta2 * v + (1.0 - c.beta2) * (g * g);
  std::vector<Array> out{Array{}, m1, v1};
  Array second = v1;
  if (c.amsgrad) out.push_back(second = maximum(in[4], v1));
  const Array base = c.decay ? p * in[k + 2] : p;
  out[0] = base - step_size * (m1 / (sqrt(second) / bc2_sqrt + c.eps));
  return out;
}

// No fused multiply-adds: the AVX2 and AVX-512 clones would otherwise contract a * b + c, and a
// step's values would depend on the machine and differ from the same formula in ops.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#else
#pragma STDC FP_CONTRACT OFF
#endif

template <class T>
struct AdamScalars {
  T step, bc2, w, one_minus_w, b2, one_minus_b2, eps;
  T decay;  // 1 without AdamW's decay: p * 1 is p exactly
};

// One element's update; the kernels below inline it.
template <class T, bool kAmsgrad, bool kLerpFromM>
[[gnu::always_inline]] inline void adam_element(T p, T g, T m, T v, T vmax, const AdamScalars<T>& s, T& p1,
                                                T& m1, T& v1, T& vmax1) {
  const T mi = kLerpFromM ? m + s.w * (g - m) : g - (g - m) * s.one_minus_w;
  const T vi = s.b2 * v + s.one_minus_b2 * (g * g);
  T second = vi;
  if constexpr (kAmsgrad)  // maximum(vmax, v) with NaN propagating, as the op
    vmax1 = second = (vmax > vi || vmax != vmax) ? vmax : vi;
  m1 = mi;
  v1 = vi;
  p1 = p * s.decay - s.step * (mi / (std::sqrt(second) / s.bc2 + s.eps));
}

// One pass over n elements into fresh outputs. Options are template parameters so the loop has no
// branch; pointers are restrict parameters (GCC 12 does not vectorize through restrict locals copied
// from a struct, nor at all when the seven pointers may alias).
template <class T, bool kAmsgrad, bool kLerpFromM>
KILN_SIMD_CLONES void adam_kernel(const T* __restrict p, const T* __restrict g, const T* __restrict m,
                                  const T* __restrict v, const T* __restrict vmax, T* __restrict p1,
                                  T* __restrict m1, T* __restrict v1, T* __restrict vmax1,
                                  const AdamScalars<T> s, int64_t n) {
  T unused = 0;
  for (int64_t i = 0; i < n; ++i)
    adam_element<T, kAmsgrad, kLerpFromM>(p[i], g[i], m[i], v[i], kAmsgrad ? vmax[i] : T(0), s, p1[i], m1[i],
                                          v1[i], kAmsgrad ? vmax1[i] : unused);
}

// The same pass overwriting the parameter and its state where they were donated.
template <class T, bool kAmsgrad, bool kLerpFromM>
KILN_SIMD_CLONES void adam_kernel_in_place(T* __restrict p, const T* __restrict g, T* __restrict m,
                                           T* __restrict v, T* __restrict vmax, const AdamScalars<T> s,
                                           int64_t n) {
  T unused = 0;
  for (int64_t i = 0; i < n; ++i)
    adam_element<T, kAmsgrad, kLerpFromM>(p[i], g[i], m[i], v[i], kAmsgrad ? vmax[i] : T(0), s, p[i], m[i],
                                          v[i], kAmsgrad ? vmax[i] : unused);
}

// out[j] (p, m, v [, vmax]) updates in[kStateInput[j]].
constexpr size_t kStateInput[] = {0, 2, 3, 4};

template <class T>
void adam_loop(const AdamConstants& c, std::span<const Array> in, std::span<Array> out) {
  // Where nothing else holds the old parameter and state (a training loop that replaced them with
  // this step's outputs), the step writes over them: a model's weights and moments are not
  // allocated twice. When only some are donated, the others are copied into fresh outputs first.
  bool took[4] = {};
  size_t donated = 0;
  for (size_t j = 0; j < out.size(); ++j) donated += took[j] = out[j].donate_from(in[kStateInput[j]]);
  if (donated > 0)
    for (size_t j = 0; j < out.size(); ++j)
      if (!took[j]) {
        out[j].allocate();
        kiln::detail::copy_strided(in[kStateInput[j]], out[j]);
      }
  const bool in_place = donated > 0;
  std::vector<Array> dense;
  for (const Array& a : in) dense.push_back(a.row_contiguous() ? a : kiln::detail::dense_copy(a));
  if (!in_place)
    for (Array& o : out) o.allocate();  // fresh buffers: no output aliases an input
  const size_t k = c.amsgrad ? 5 : 4;
  const auto ptr = [&](std::span<const Array> v, size_t i) {
    return i < v.size() ? v[i].strided_data<T>() : nullptr;
  };
  const T *p = ptr(dense, 0), *g = ptr(dense, 1), *m = ptr(dense, 2), *v = ptr(dense, 3),
          *vmax = c.amsgrad ? ptr(dense, 4) : nullptr;
  T *p1 = ptr(out, 0), *m1 = ptr(out, 1), *v1 = ptr(out, 2), *vmax1 = c.amsgrad ? ptr(out, 3) : nullptr;
  // The constants rounded to T, as the ops round weak scalars; lerp has torch's two formulas.
  const double w = 1.0 - c.beta1;
  const AdamScalars<T> s{dense[k].strided_data<T>()[0],
                         dense[k + 1].strided_data<T>()[0],
                         static_cast<T>(w),
                         static_cast<T>(1.0 - w),
                         static_cast<T>(c.beta2),
                         static_cast<T>(1.0 - c.beta2),
                         static_cast<T>(c.eps),
                         c.decay ? dense[k + 2].strided_data<T>()[0] : T(1)};
  auto run = [&](auto amsgrad, auto from_m) {
    constexpr bool kA = decltype(amsgrad)::value, kM = decltype(from_m)::value;
    kiln::detail::parallel_for(out[0].size(), kiln::detail::kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      const auto at = [lo](auto* q) { return q ? q + lo : q; };
      if (in_place)
        adam_kernel_in_place<T, kA, kM>(at(p1), at(g), at(m1), at(v1), at(vmax1), s, hi - lo);
      else
        adam_kernel<T, kA, kM>(at(p), at(g), at(m), at(v), at(vmax), at(p1), at(m1), at(v1), at(vmax1), s,
                               hi - lo);
    });
  };
  const bool from_m = w < 0.5;
  if (c.amsgrad)
    from_m ? run(std::true_type{}, std::true_type{}) : run(std::true_type{}, std::false_type{});
  else
    from_m ? run(std::false_type{}, std::true_type{}) : run(std::false_type{}, std::false_type{});
}

class FusedAdamStep final : public PrimitiveWithParams<FusedAdamStep> {
 public:
  FusedAdamStep(Stream s, AdamConstants c) : PrimitiveWithParams(s), c_(c) {}
  const char* name() const override { return "FusedAdamStep"; }
  auto params() const { return std::tie(c_.beta1, c_.beta2, c_.eps, c_.amsgrad, c_.decay); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  // p, g, m, v [, vmax] of one shape, checked: shapeless compile replays it on new shapes.
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    for (size_t i = 1; i < (c_.amsgrad ? 5u : 4u); ++i)
      if (in[i].shape() != in[0].shape())
        throw ShapeError::of("adam", "parameter, gradient and state of different shapes", "{} and {}",
                             shape_str(in[0].shape()), shape_str(in[i].shape()));
    return std::vector<Shape>(c_.amsgrad ? 4 : 3, in[0].shape());
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    if (in[0].dtype() == float64)
      adam_loop<double>(c_, in, out);
    else
      adam_loop<float>(c_, in, out);
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    const double w = 1.0 - c_.beta1;
    gpu::adam_step(in, out, {w, 1.0 - w, c_.beta2, 1.0 - c_.beta2, c_.eps, c_.amsgrad, w < 0.5, c_.decay});
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const std::vector<Array> primals(a.primals.begin(), a.primals.end());
    const std::vector<Array> cts(a.cotangents.begin(), a.cotangents.end());
    const auto all = kiln::vjp(formula(), primals, cts).second;
    std::vector<Array> out;
    for (int i : a.argnums) out.push_back(all[static_cast<size_t>(i)]);
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    std::vector<Array> primals(a.primals.begin(), a.primals.end()), tangents;
    for (const Array& x : primals) tangents.push_back(zeros_like(x));
    for (size_t i = 0; i < a.argnums.size(); ++i) tangents[static_cast<size_t>(a.argnums[i])] = a.tangents[i];
    return kiln::jvp(formula(), primals, tangents).second;
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const std::vector<Array> in(a.inputs.begin(), a.inputs.end());
    const std::vector<int> axes(a.axes.begin(), a.axes.end());
    std::vector<Array> out = kiln::vmap(formula(), axes)(in);
    return {out, std::vector<int>(out.size(), 0)};
  }

 private:
  ArrayFn formula() const {
    return [c = c_](const std::vector<Array>& in) { return adam_formula(c, in); };
  }
  AdamConstants c_;
};

}  // namespace

std::vector<Array> adam_update(const AdamConstants& constants, const Array& p, const Array& g, const Array& m,
                               const Array& v, const std::optional<Array>& vmax, const Array& step_size,
                               const Array& bc2_sqrt, const std::optional<Array>& decay) {
  AdamConstants c = constants;
  c.decay = decay.has_value();
  const Dtype t = p.dtype();
  std::vector<Array> in{p, g, m, v};
  if (vmax) in.push_back(*vmax);
  bool fused = t == float32 || t == float64;
  for (const Array& a : in) fused = fused && a.dtype() == t && a.shape() == p.shape();
  in.push_back(step_size);
  in.push_back(bc2_sqrt);
  if (decay) in.push_back(*decay);
  for (size_t i = in.size() - (decay ? 3 : 2); i < in.size(); ++i)
    fused = fused && in[i].dtype() == t && in[i].ndim() == 0;
  if (!fused) return adam_formula(c, in);
  auto prim = std::make_shared<FusedAdamStep>(to_stream({}), c);
  std::vector<Shape> shapes = prim->output_shapes(in);
  std::vector<Dtype> dtypes(shapes.size(), t);
  return Array::make_many(std::move(shapes), std::move(dtypes), std::move(prim), std::move(in));
}

std::vector<Array> adam_update(const AdamConstants& c, const Array& p, const Array& g, const Array& m,
                               const Array& v, const std::optional<Array>& vmax, double step_size,
                               double bc2_sqrt, std::optional<double> decay) {
  std::optional<Array> d;
  if (decay) d = full({}, *decay, p.dtype());
  return adam_update(c, p, g, m, v, vmax, full({}, step_size, p.dtype()), full({}, bc2_sqrt, p.dtype()), d);
}

}  // namespace kiln::optim::detail
