#include "kiln/optim/grad_scaler.h"

#include <cmath>

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/unary.h"
#include "kiln/nn/mixed_precision.h"
#include "kiln/optim/optimizer.h"

namespace kiln::optim {

GradScaler::GradScaler(GradScalerOptions o) : options_(o), scale_(o.init_scale) {
  constexpr const char* op = "GradScaler";
  if (!(o.init_scale > 0) || !std::isfinite(o.init_scale))
    throw ValueError::of(op, "init_scale must be > 0 and finite", "got {}", o.init_scale);
  if (!(o.growth_factor > 1) || !std::isfinite(o.growth_factor))
    throw ValueError::of(op, "growth_factor must be > 1 and finite", "got {}", o.growth_factor);
  if (!(o.backoff_factor > 0 && o.backoff_factor < 1))
    throw ValueError::of(op, "backoff_factor must be in (0, 1)", "got {}", o.backoff_factor);
  if (o.growth_interval < 1)
    throw ValueError::of(op, "growth_interval must be >= 1", "got {}", o.growth_interval);
}

Array GradScaler::scale(const Array& loss) const {
  if (!loss.valid()) throw ValueError::of("GradScaler::scale", "the loss is an empty array");
  if (loss.size() != 1)
    throw ShapeError::of("GradScaler::scale", "the loss must be a scalar", "got shape {}",
                         shape_str(loss.shape()));
  if (!is_floating(loss.dtype()))
    throw DtypeError::of("GradScaler::scale", "the loss must be floating point", "got {}",
                         dtype_name(loss.dtype()));
  const Array l = nn::detail::to_float32(loss);
  return options_.enabled ? l * scale_ : l;
}

std::pair<nn::ParamTree, Array> GradScaler::unscale(const nn::ParamTree& scaled_grads) const {
  const double inverse = 1.0 / scale_value();
  nn::ParamTree out;
  Array finite(true);
  for (const auto& [key, g] : scaled_grads) {
    out.set(key, options_.enabled ? g * inverse : g);
    if (is_floating(g.dtype())) finite = logical_and(finite, all(isfinite(g)));
  }
  return {std::move(out), finite};
}

bool GradScaler::step(Optimizer& optimizer, nn::Module& model, const nn::ParamTree& scaled_grads) {
  auto [grads, finite] = unscale(scaled_grads);
  if (!options_.enabled) {
    optimizer.update(model, grads);
    return true;
  }
  const bool ok = finite.item<bool>();
  if (ok) optimizer.update(model, grads);  // throws before update() changes the scale
  update(ok);
  return ok;
}

void GradScaler::update(bool all_finite) {
  if (!options_.enabled) return;
  if (!all_finite) {
    scale_ *= options_.backoff_factor;
    tracker_ = 0;
    ++skipped_;
    return;
  }
  if (++tracker_ >= options_.growth_interval) {
    // As PyTorch, a scale that would overflow float32 stays where it is.
    const double grown = scale_ * options_.growth_factor;
    if (std::isfinite(static_cast<float>(grown))) scale_ = grown;
    tracker_ = 0;
  }
}

nn::ParamTree GradScaler::state() const {
  return nn::ParamTree{{"scale", Array(scale_)}, {"growth_tracker", Array(tracker_)}};
}

void GradScaler::set_state(const nn::ParamTree& state) {
  constexpr const char* op = "GradScaler::set_state";
  for (const auto& [key, value] : state)
    if (key != "scale" && key != "growth_tracker")
      throw KeyError::of(op, "unknown key", "'{}' (a scaler's state has 'scale' and 'growth_tracker')", key);
  const Array& s = state.at("scale");
  const Array& t = state.at("growth_tracker");
  for (const auto& [key, a] : {std::pair<const char*, const Array*>{"scale", &s}, {"growth_tracker", &t}})
    if (a->ndim() != 0)
      throw ShapeError::of(op, "entries must be 0-d", "'{}' has shape {}", key, shape_str(a->shape()));
  if (!is_floating(s.dtype()))
    throw DtypeError::of(op, "'scale' must be floating point", "got {}", dtype_name(s.dtype()));
  if (!is_integral(t.dtype()))
    throw DtypeError::of(op, "'growth_tracker' must be an integer", "got {}", dtype_name(t.dtype()));
  const double scale = astype(s, float64).item<double>();
  const int64_t tracker = astype(t, int64).item<int64_t>();
  if (!(scale > 0) || !std::isfinite(scale))
    throw ValueError::of(op, "'scale' must be > 0 and finite", "got {}", scale);
  if (tracker < 0) throw ValueError::of(op, "'growth_tracker' must be >= 0", "got {}", tracker);
  scale_ = scale;
  tracker_ = tracker;
}

}  // namespace kiln::optim
