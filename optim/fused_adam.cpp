// Adam's update as one primitive. Its rules differentiate and batch the same formula written in
// ops (adam_formula), so a step stays differentiable (e.g. for meta-learning) while evaluation is
// one pass over the parameter.
#include <cmath>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/unary.h"
#include "kiln/core/primitive.h"
#include "kiln/core/transforms.h"
#include "kiln/optim/fused_adam_impl.h"
#include "kiln/optim/optimizer.h"

namespace kiln::optim::detail {
namespace {

// Inputs: p, g, m, v, [vmax,] step_size, bc2_sqrt (0-d arrays, so a trace of the step keeps them
// as inputs rather than constants). The formula in ops; the primitive computes the same in one loop.
std::vector<Array> adam_formula(const AdamConstants& c, const std::vector<Array>& in) {
  const Array &p = in[0], &g = in[1], &m = in[2], &v = in[3];
  const size_t k = c.amsgrad ? 5 : 4;
  const Array &step_size = in[k], &bc2_sqrt = in[k + 1];
  const Array m1 = lerp(m, g, 1.0 - c.beta1);  // optim::detail::lerp, torch.lerp's formulas
  const Array v1 = c.beta2 * v + (1.0 - c.beta2) * (g * g);
  std::vector<Array> out{Array{}, m1, v1};
  Array second = v1;
  if (c.amsgrad) out.push_back(second = maximum(in[4], v1));
  out[0] = p - step_size * (m1 / (sqrt(second) / bc2_sqrt + c.eps));
  return out;
}

template <class T>
void adam_loop(const AdamConstants& c, std::span<const Array> in, std::span<Array> out) {
  std::vector<Array> dense;
  for (const Array& a : in) dense.push_back(a.row_contiguous() ? a : kiln::detail::dense_copy(a));
  for (Array& o : out) o.allocate();
  const size_t k = c.amsgrad ? 5 : 4;
  const T* p = dense[0].strided_data<T>();
  const T* g = dense[1].strided_data<T>();
  const T* m = dense[2].strided_data<T>();
  const T* v = dense[3].strided_data<T>();
  const T* vmax = c.amsgrad ? dense[4].strided_data<T>() : nullptr;
  const T step = dense[k].strided_data<T>()[0], bc2 = dense[k + 1].strided_data<T>()[0];
  T* p1 = out[0].strided_data<T>();
  T* m1 = out[1].strided_data<T>();
  T* v1 = out[2].strided_data<T>();
  T* vmax1 = c.amsgrad ? out[3].strided_data<T>() : nullptr;
  // The constants rounded to T, as the ops round weak scalars; lerp's two torch formulas.
  const double w = 1.0 - c.beta1;
  const bool lerp_from_a = w < 0.5;
  const T wt = static_cast<T>(w), one_minus_w = static_cast<T>(1.0 - w);
  const T b2 = static_cast<T>(c.beta2), one_minus_b2 = static_cast<T>(1.0 - c.beta2),
          eps = static_cast<T>(c.eps);
  kiln::detail::parallel_for(out[0].size(), kiln::detail::kElementwiseGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const T mi = lerp_from_a ? m[i] + wt * (g[i] - m[i]) : g[i] - (g[i] - m[i]) * one_minus_w;
      const T vi = b2 * v[i] + one_minus_b2 * (g[i] * g[i]);
      T second = vi;
      if (vmax) vmax1[i] = second = std::max(vmax[i], vi);
      m1[i] = mi;
      v1[i] = vi;
      p1[i] = p[i] - step * (mi / (std::sqrt(second) / bc2 + eps));
    }
  });
}

class FusedAdamStep final : public PrimitiveWithParams<FusedAdamStep> {
 public:
  FusedAdamStep(Stream s, AdamConstants c) : PrimitiveWithParams(s), c_(c) {}
  const char* name() const override { return "FusedAdamStep"; }
  auto params() const { return std::tie(c_.beta1, c_.beta2, c_.eps, c_.amsgrad); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    return std::vector<Shape>(c_.amsgrad ? 4 : 3, in[0].shape());
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    if (in[0].dtype() == float64)
      adam_loop<double>(c_, in, out);
    else
      adam_loop<float>(c_, in, out);
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

std::vector<Array> adam_update(const AdamConstants& c, const Array& p, const Array& g, const Array& m,
                               const Array& v, const std::optional<Array>& vmax, double step_size,
                               double bc2_sqrt) {
  const Dtype t = p.dtype();
  std::vector<Array> in{p, g, m, v};
  if (vmax) in.push_back(*vmax);
  bool fused = t == float32 || t == float64;
  for (const Array& a : in) fused = fused && a.dtype() == t && a.shape() == p.shape();
  in.push_back(full({}, step_size, t));
  in.push_back(full({}, bc2_sqrt, t));
  if (!fused) return adam_formula(c, in);
  auto prim = std::make_shared<FusedAdamStep>(to_stream({}), c);
  std::vector<Shape> shapes = prim->output_shapes(in);
  std::vector<Dtype> dtypes(shapes.size(), t);
  return Array::make_many(std::move(shapes), std::move(dtypes), std::move(prim), std::move(in));
}

}  // namespace kiln::optim::detail
