#include "kiln/optim/adafactor.h"

#include <algorithm>
#include <cmath>

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/unary.h"

namespace kiln::optim {

namespace {

// torch.finfo(dtype).eps: PyTorch's default eps1 depends on the parameter's dtype.
double machine_epsilon(Dtype t) {
  switch (t) {
    case float16:
      return 0.0009765625;  // 2^-10
    case bfloat16:
      return 0.0078125;  // 2^-7
    case float64:
      return 2.220446049250313e-16;
    default:
      return 1.1920928955078125e-07;  // float32: 2^-23
  }
}

Array rms(const Array& a) { return sqrt(mean(square(a))); }

}  // namespace

Adafactor::Adafactor(AdafactorOptions options) : Optimizer("Adafactor", options.lr), o_(std::move(options)) {
  require(o_.beta2_decay <= 0, "beta2_decay", "<= 0", o_.beta2_decay);
  if (o_.eps1) require(*o_.eps1 >= 0, "eps1", ">= 0", *o_.eps1);
  require(o_.eps2 >= 0, "eps2", ">= 0", o_.eps2);
  require(o_.d >= 1, "d", ">= 1", o_.d);
  require(o_.weight_decay >= 0, "weight_decay", ">= 0", o_.weight_decay);
}

std::vector<Optimizer::Slot> Adafactor::slots(const Shape& param_shape) const {
  if (param_shape.size() < 2) return {{"variance", param_shape}};
  Shape row = param_shape, col = param_shape;
  row.back() = 1;
  col[col.size() - 2] = 1;
  return {{"row_var", row}, {"col_var", col}};
}

Shape Adafactor::param_shape_of(const std::string& key, const Slots& slots) const {
  if (auto it = slots.find("variance"); it != slots.end()) return it->second.shape();
  auto row = slots.find("row_var"), col = slots.find("col_var");
  if (row == slots.end() || col == slots.end())
    throw KeyError::of(name().c_str(), "state of a parameter is incomplete",
                       "'{}' needs both row_var and col_var", key);
  const Shape& r = row->second.shape();
  const Shape& c = col->second.shape();
  if (r.size() < 2 || r.size() != c.size() || r.back() != 1 || c[c.size() - 2] != 1 ||
      !std::equal(r.begin(), r.end() - 2, c.begin()))
    throw ShapeError::of(name().c_str(), "state slot shapes do not fit one parameter",
                         "'{}.row_var' {} and '{}.col_var' {} (expected (..., R, 1) and (..., 1, C))", key,
                         shape_str(r), key, shape_str(c));
  Shape p = r;
  p.back() = c.back();
  return p;
}

Array Adafactor::update_one(const Array& param, const Array& grad, double lr, int64_t count,
                            Slots& slots) const {
  if (param.size() == 0) return param;
  const Array g = o_.maximize ? -grad : grad;
  const double t = static_cast<double>(count);
  const double one_minus_beta2 = std::pow(t, o_.beta2_decay);
  const double rho = std::min(lr, 1.0 / std::sqrt(t));
  const double eps1 = o_.eps1.value_or(machine_epsilon(param.dtype()));
  // From the parameter before weight decay, as PyTorch.
  const Array alpha = maximum(rms(param), o_.eps2) * rho;
  const Array p = o_.weight_decay != 0 ? param * (1.0 - lr * o_.weight_decay) : param;

  const Array g2 = g * g;
  Array variance;
  if (param.ndim() >= 2) {
    Array& row = slots.at("row_var");
    Array& col = slots.at("col_var");
    row = detail::lerp(row, mean(g2, -1, /*keepdims=*/true), one_minus_beta2);
    col = detail::lerp(col, mean(g2, -2, /*keepdims=*/true), one_minus_beta2);
    variance = row * col / maximum(mean(row, -2, /*keepdims=*/true), eps1);
  } else {
    Array& v = slots.at("variance");
    v = detail::lerp(v, g2, one_minus_beta2);
    variance = v;
  }
  const Array u = rsqrt(maximum(variance, eps1 * eps1)) * g;
  const Array scale = alpha / maximum(rms(u) / o_.d, 1.0);
  return p - scale * u;
}

}  // namespace kiln::optim
