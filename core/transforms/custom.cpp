// custom_function / custom_vjp: one Custom node stands for fn and carries the user's rules, so a
// transform that meets it asks the rules (or, where one is missing, transforms fn itself).
#include "kiln/core/custom_transforms.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/index.h"
#include "kiln/core/ops/reduce.h"

namespace kiln {
namespace detail {

struct CustomRules {
  ArrayFn fn;
  CustomVjpFn vjp;  // empty when not given, as are the two below
  CustomJvpFn jvp;
  CustomVmapFn vmap;
};

namespace {

constexpr const char* kOp = "custom_function";

using Rules = std::shared_ptr<const CustomRules>;

std::vector<Array> call_custom(const Rules& rules, const std::vector<Array>& inputs);

std::vector<Array> slice(std::span<const Array> x, size_t begin, size_t n) {
  return {x.begin() + static_cast<std::ptrdiff_t>(begin), x.begin() + static_cast<std::ptrdiff_t>(begin + n)};
}

// A rule's result for one array: empty means zero; the shape must match; the dtype is converted.
Array conform(const Array& r, const Array& like, const char* what, size_t i) {
  if (!r.valid()) return zeros_like(like);
  if (r.shape() != like.shape())
    throw ShapeError::of(kOp, "a rule returned an array of the wrong shape", "{} {}: {}, expected {}", what,
                         i, shape_str(r.shape()), shape_str(like.shape()));
  return r.dtype() == like.dtype() ? r : astype(r, like.dtype());
}

// The user's vjp rule, checked: one cotangent per primal, each conformed to its primal.
std::vector<Array> run_vjp_rule(const CustomRules& r, const std::vector<Array>& primals,
                                const std::vector<Array>& outputs, const std::vector<Array>& cotangents) {
  std::vector<Array> g = r.vjp(primals, outputs, cotangents);
  if (g.size() != primals.size())
    throw ValueError::of(kOp, "the vjp rule must return one cotangent per input",
                         "{} cotangents for {} inputs", g.size(), primals.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = conform(g[i], primals[i], "cotangent of input", i);
  return g;
}

// The user's jvp rule, checked against fn's outputs (traced for their shapes, not evaluated).
std::vector<Array> run_jvp_rule(const CustomRules& r, const std::vector<Array>& primals,
                                const std::vector<Array>& tangents) {
  const std::vector<Array> outputs = call_function(r.fn, primals, kOp);
  std::vector<Array> t = r.jvp(primals, tangents);
  if (t.size() != outputs.size())
    throw ValueError::of(kOp, "the jvp rule must return one tangent per output", "{} tangents for {} outputs",
                         t.size(), outputs.size());
  for (size_t j = 0; j < t.size(); ++j) t[j] = conform(t[j], outputs[j], "tangent of output", j);
  return t;
}

// Tangents for every primal: the given ones at argnums, zeros elsewhere.
std::vector<Array> full_tangents(std::span<const Array> primals, std::span<const int> argnums,
                                 std::span<const Array> given) {
  std::vector<Array> t(primals.size());
  for (size_t k = 0; k < argnums.size(); ++k) t[argnums[k]] = given[k];
  for (size_t i = 0; i < t.size(); ++i)
    if (!t[i].valid()) t[i] = zeros_like(primals[i]);
  return t;
}

// The rules of the batched function vmap(fn, axes): fn is vmapped, and so are the vjp and jvp rules,
// so grad of vmap of a custom function still uses them.
Rules batched_rules(const Rules& r, const std::vector<int>& axes) {
  auto b = std::make_shared<CustomRules>();
  b->fn = kiln::vmap([r](const std::vector<Array>& x) { return r->fn(x); }, axes);
  const size_t n = axes.size();
  if (r->vjp) {
    b->vjp = [r, axes, n](const std::vector<Array>& p, const std::vector<Array>& o,
                          const std::vector<Array>& c) {
      const size_t m = o.size();
      // Outputs and cotangents of the batched function carry the batch on axis 0.
      std::vector<int> in_axes = axes;
      in_axes.insert(in_axes.end(), 2 * m, 0);
      std::vector<int> out_axes;
      for (int a : axes) out_axes.push_back(a >= 0 ? a : 0);
      const ArrayFn per_example = [r, n, m](const std::vector<Array>& x) {
        return run_vjp_rule(*r, slice(x, 0, n), slice(x, n, m), slice(x, n + m, m));
      };
      std::vector<Array> args = p;
      args.insert(args.end(), o.begin(), o.end());
      args.insert(args.end(), c.begin(), c.end());
      std::vector<Array> g = kiln::vmap(per_example, in_axes, out_axes)(args);
      // An input shared by every example gets the sum of the per-example cotangents.
      for (size_t i = 0; i < n; ++i)
        if (axes[i] < 0) g[i] = sum(g[i], 0);
      return g;
    };
  }
  if (r->jvp) {
    b->jvp = [r, axes, n](const std::vector<Array>& p, const std::vector<Array>& t) {
      std::vector<int> in_axes = axes;  // a tangent is batched as its primal is
      in_axes.insert(in_axes.end(), axes.begin(), axes.end());
      const ArrayFn per_example = [r, n](const std::vector<Array>& x) {
        return run_jvp_rule(*r, slice(x, 0, n), slice(x, n, n));
      };
      std::vector<Array> args = p;
      args.insert(args.end(), t.begin(), t.end());
      return kiln::vmap(per_example, in_axes)(args);
    };
  }
  // No batching rule: a nested vmap batches the batched function again.
  return b;
}

class Custom final : public PrimitiveWithParams<Custom> {
 public:
  Custom(Stream s, Rules rules) : PrimitiveWithParams(s), rules_(std::move(rules)) {}
  const char* name() const override { return "Custom"; }
  // The rules' identity: std::function cannot be compared, and copies of a CustomFunction share them.
  auto params() const { return std::tie(rules_); }

  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    std::vector<Shape> shapes;
    for (const Array& o : call_function(rules_->fn, {in.begin(), in.end()}, kOp)) shapes.push_back(o.shape());
    return shapes;
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    eval_function(rules_->fn, kOp, in, out);
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    eval_function(rules_->fn, kOp, in, out);
  }

  std::vector<Array> vjp(const VjpArgs& a) const override {
    const std::vector<Array> primals(a.primals.begin(), a.primals.end());
    if (rules_->vjp) {
      const std::vector<Array> g = run_vjp_rule(*rules_, primals, {a.outputs.begin(), a.outputs.end()},
                                                {a.cotangents.begin(), a.cotangents.end()});
      std::vector<Array> out;
      for (int i : a.argnums) out.push_back(g[i]);
      return out;
    }
    if (!rules_->jvp) return vjp_of_function(rules_->fn, a);
    // Transpose of the jvp rule: t -> jvp(primals, t) is linear, so its vjp (at any t; zeros here)
    // is the vjp of fn. This keeps reverse mode consistent with the user's jvp, as in JAX.
    const ArrayFn linear = [&](const std::vector<Array>& t) {
      return run_jvp_rule(*rules_, primals, full_tangents(a.primals, a.argnums, t));
    };
    std::vector<Array> zero;
    for (int i : a.argnums) zero.push_back(zeros_like(primals[i]));
    return kiln::vjp(linear, zero, {a.cotangents.begin(), a.cotangents.end()}).second;
  }

  std::vector<Array> jvp(const JvpArgs& a) const override {
    if (!rules_->jvp) return jvp_of_function(rules_->fn, a);
    return run_jvp_rule(*rules_, {a.primals.begin(), a.primals.end()},
                        full_tangents(a.primals, a.argnums, a.tangents));
  }

  VmapResult vmap(const VmapArgs& a) const override {
    const std::vector<Array> inputs(a.inputs.begin(), a.inputs.end());
    const std::vector<int> axes(a.axes.begin(), a.axes.end());
    if (!rules_->vmap) {
      std::vector<Array> outputs = call_custom(batched_rules(rules_, axes), inputs);
      std::vector<int> out_axes(outputs.size(), 0);
      return {std::move(outputs), std::move(out_axes)};
    }
    auto [outputs, out_axes] = rules_->vmap(inputs, axes);
    check_vmap_result(inputs, axes, outputs, out_axes);
    return {std::move(outputs), std::move(out_axes)};
  }

 private:
  // The rule's outputs must be fn's outputs of one example with the batch inserted at their axis.
  void check_vmap_result(const std::vector<Array>& inputs, const std::vector<int>& axes,
                         const std::vector<Array>& outputs, const std::vector<int>& out_axes) const {
    std::vector<Array> example;
    int64_t batch = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (axes[i] < 0) {
        example.push_back(inputs[i]);
        continue;
      }
      batch = inputs[i].shape(axes[i]);
      example.push_back(take(inputs[i], Array(0), axes[i]));
    }
    const std::vector<Array> expected = call_function(rules_->fn, example, kOp);
    if (outputs.size() != expected.size() || out_axes.size() != expected.size())
      throw ValueError::of(kOp, "the vmap rule must return one output and one axis per output",
                           "{} outputs and {} axes for {} outputs", outputs.size(), out_axes.size(),
                           expected.size());
    for (size_t j = 0; j < outputs.size(); ++j) {
      if (!outputs[j].valid() && out_axes[j] != -1)
        throw ValueError::of(kOp, "the vmap rule returned an empty (default-constructed) array", "output {}",
                             j);
      if (out_axes[j] == -1) continue;
      Shape shape = expected[j].shape();
      if (out_axes[j] < -1 || out_axes[j] > static_cast<int>(shape.size()))
        throw ValueError::of(kOp, "the vmap rule returned an axis out of range",
                             "output {}: axis {} for rank {}", j, out_axes[j], shape.size() + 1);
      shape.insert(shape.begin() + out_axes[j], batch);
      if (outputs[j].shape() != shape)
        throw ShapeError::of(kOp, "the vmap rule returned an output of the wrong shape",
                             "output {}: {}, expected {}", j, shape_str(outputs[j].shape()),
                             shape_str(shape));
    }
  }

  const Rules rules_;
};

std::vector<Array> call_custom(const Rules& rules, const std::vector<Array>& inputs) {
  for (const Array& x : inputs)
    if (!x.valid()) throw ValueError::of(kOp, "an input is an empty (default-constructed) array");
  // Tracing fn only builds a graph (nothing is evaluated) for the output shapes and dtypes.
  std::vector<Shape> shapes;
  std::vector<Dtype> dtypes;
  for (const Array& o : call_function(rules->fn, inputs, kOp)) {
    shapes.push_back(o.shape());
    dtypes.push_back(o.dtype());
  }
  return Array::make_many(std::move(shapes), std::move(dtypes),
                          std::make_shared<Custom>(to_stream({}), rules), inputs);
}

template <class Rule>
Rules with_rule(const Rules& r, Rule CustomRules::*slot, Rule rule, const char* what) {
  if (!rule) throw ValueError::of(kOp, "the rule is empty", "{}", what);
  auto next = std::make_shared<CustomRules>(*r);
  (*next).*slot = std::move(rule);
  return next;
}

}  // namespace
}  // namespace detail

CustomFunction::CustomFunction(ArrayFn fn) {
  if (!fn) throw ValueError::of(detail::kOp, "the function is empty");
  auto r = std::make_shared<detail::CustomRules>();
  r->fn = std::move(fn);
  rules_ = std::move(r);
}

CustomFunction CustomFunction::vjp(CustomVjpFn rule) const {
  return CustomFunction(detail::with_rule(rules_, &detail::CustomRules::vjp, std::move(rule), "vjp"));
}
CustomFunction CustomFunction::jvp(CustomJvpFn rule) const {
  return CustomFunction(detail::with_rule(rules_, &detail::CustomRules::jvp, std::move(rule), "jvp"));
}
CustomFunction CustomFunction::vmap(CustomVmapFn rule) const {
  return CustomFunction(detail::with_rule(rules_, &detail::CustomRules::vmap, std::move(rule), "vmap"));
}

std::vector<Array> CustomFunction::operator()(const std::vector<Array>& inputs) const {
  return detail::call_custom(rules_, inputs);
}

CustomFunction custom_function(ArrayFn fn) { return CustomFunction(std::move(fn)); }

ArrayFn custom_vjp(ArrayFn fn, CustomVjpFn vjp_fn) {
  return custom_function(std::move(fn)).vjp(std::move(vjp_fn));
}

}  // namespace kiln
