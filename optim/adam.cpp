#include "kiln/optim/adam.h"

#include <cmath>

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/unary.h"
#include "kiln/optim/fused_adam_impl.h"

namespace kiln::optim {

namespace {

struct AdamMath {
  std::array<double, 2> betas;
  double eps;
  bool amsgrad;
};

// The step's bias-corrected step size and sqrt of the second bias correction, on the host.
std::array<double, 2> adam_scalars(const AdamMath& a, double lr, int64_t t) {
  const auto [b1, b2] = a.betas;
  return {lr / (1.0 - std::pow(b1, static_cast<double>(t))),
          std::sqrt(1.0 - std::pow(b2, static_cast<double>(t)))};
}

// torch.optim.Adam's single-tensor step on g (weight decay already applied); p is the parameter
// to step from. Scalars are folded on the host (adam_scalars) and reach the one fused primitive
// (fused_adam.cpp) as 0-d arrays: constants eagerly, inputs in a compiled step.
Array adam_step(const AdamMath& a, const Array& p, const Array& g, const Array& step_size,
                const Array& bc2_sqrt, std::map<std::string, Array, std::less<>>& s,
                const std::optional<Array>& decay = std::nullopt) {
  const auto [b1, b2] = a.betas;
  Array& m = s.at("exp_avg");
  Array& v = s.at("exp_avg_sq");
  std::optional<Array> vmax;
  if (a.amsgrad) vmax = s.at("max_exp_avg_sq");
  std::vector<Array> out =
      detail::adam_update({b1, b2, a.eps, a.amsgrad}, p, g, m, v, vmax, step_size, bc2_sqrt, decay);
  m = out[1];
  v = out[2];
  if (a.amsgrad) s.at("max_exp_avg_sq") = out[3];
  return out[0];
}

template <class Options, class Require>
void check_adam_options(const Options& o, const Require& require) {
  require(o.eps >= 0, "eps", ">= 0", o.eps);
  require(o.betas[0] >= 0 && o.betas[0] < 1, "betas[0]", "in [0, 1)", o.betas[0]);
  require(o.betas[1] >= 0 && o.betas[1] < 1, "betas[1]", "in [0, 1)", o.betas[1]);
  require(o.weight_decay >= 0, "weight_decay", ">= 0", o.weight_decay);
}

std::vector<std::string> adam_slot_names(bool amsgrad) {
  if (amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

}  // namespace

Adam::Adam(AdamOptions options) : Optimizer("Adam", options.lr), o_(std::move(options)) {
  check_adam_options(
      o_, [this](bool ok, const char* what, const char* bound, double v) { require(ok, what, bound, v); });
}

std::vector<Optimizer::Slot> Adam::slots(const Shape& param_shape) const {
  std::vector<Slot> out;
  for (auto& n : adam_slot_names(o_.amsgrad)) out.push_back({n, param_shape});
  return out;
}

Array Adam::update_one(const Array& param, const Array& grad, double lr, int64_t count, Slots& slots) const {
  const std::vector<double> sc = step_scalars(lr, count);
  const Array scalars[] = {full({}, sc[0], param.dtype()), full({}, sc[1], param.dtype())};
  return update_one_traced(param, grad, scalars, slots);
}

std::vector<double> Adam::step_scalars(double lr, int64_t count) const {
  const auto sc = adam_scalars({o_.betas, o_.eps, o_.amsgrad}, lr, count);
  return {sc[0], sc[1]};
}

Array Adam::update_one_traced(const Array& param, const Array& grad, std::span<const Array> scalars,
                              Slots& slots) const {
  Array g = o_.maximize ? -grad : grad;
  if (o_.weight_decay != 0) g = g + o_.weight_decay * param;
  return adam_step({o_.betas, o_.eps, o_.amsgrad}, param, g, scalars[0], scalars[1], slots);
}

AdamW::AdamW(AdamWOptions options) : Optimizer("AdamW", options.lr), o_(std::move(options)) {
  check_adam_options(
      o_, [this](bool ok, const char* what, const char* bound, double v) { require(ok, what, bound, v); });
}

std::vector<Optimizer::Slot> AdamW::slots(const Shape& param_shape) const {
  std::vector<Slot> out;
  for (auto& n : adam_slot_names(o_.amsgrad)) out.push_back({n, param_shape});
  return out;
}

Array AdamW::update_one(const Array& param, const Array& grad, double lr, int64_t count, Slots& slots) const {
  const Array g = o_.maximize ? -grad : grad;
  const auto sc = adam_scalars({o_.betas, o_.eps, o_.amsgrad}, lr, count);
  // The decoupled decay p * (1 - lr wd) is applied in the fused step's pass (one dispatch, not two).
  std::optional<Array> decay;
  if (o_.weight_decay != 0) decay = full({}, 1.0 - lr * o_.weight_decay, param.dtype());
  return adam_step({o_.betas, o_.eps, o_.amsgrad}, param, g, full({}, sc[0], param.dtype()),
                   full({}, sc[1], param.dtype()), slots, decay);
}

std::vector<double> AdamW::step_scalars(double lr, int64_t count) const {
  const auto sc = adam_scalars({o_.betas, o_.eps, o_.amsgrad}, lr, count);
  return {sc[0], sc[1], 1.0 - lr * o_.weight_decay};
}

Array AdamW::update_one_traced(const Array& param, const Array& grad, std::span<const Array> scalars,
                               Slots& slots) const {
  const Array g = o_.maximize ? -grad : grad;
  std::optional<Array> decay;
  if (o_.weight_decay != 0) decay = scalars[2];
  return adam_step({o_.betas, o_.eps, o_.amsgrad}, param, g, scalars[0], scalars[1], slots, decay);
}

Adamax::Adamax(AdamaxOptions options) : Optimizer("Adamax", options.lr), o_(std::move(options)) {
  check_adam_options(
      o_, [this](bool ok, const char* what, const char* bound, double v) { require(ok, what, bound, v); });
}

std::vector<Optimizer::Slot> Adamax::slots(const Shape& param_shape) const {
  return {{"exp_avg", param_shape}, {"exp_inf", param_shape}};
}

Array Adamax::update_one(const Array& param, const Array& grad, double lr, int64_t count,
                         Slots& slots) const {
  Array g = o_.maximize ? -grad : grad;
  if (o_.weight_decay != 0) g = g + o_.weight_decay * param;
  Array& m = slots.at("exp_avg");
  Array& u = slots.at("exp_inf");
  m = detail::lerp(m, g, 1.0 - o_.betas[0]);
  u = maximum(o_.betas[1] * u, abs(g) + o_.eps);
  const double clr = lr / (1.0 - std::pow(o_.betas[0], static_cast<double>(count)));
  return param - clr * (m / u);
}

}  // namespace kiln::optim
