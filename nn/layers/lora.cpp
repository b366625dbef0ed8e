#include "kiln/nn/layers/lora.h"

#include <cmath>

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/random.h"
#include "kiln/nn/init.h"
#include "kiln/nn/layers/dropout.h"
#include "kiln/nn/module_names.h"

namespace kiln::nn {

std::vector<std::string> add_lora(Module& model, const LoRAConfig& config) {
  std::vector<std::pair<std::string, Linear*>> targets;
  std::vector<std::string> linears;
  for (auto& [key, m] : model.named_modules())
    if (auto* l = dynamic_cast<Linear*>(m)) {
      linears.push_back(key);
      if (key_names_module(key, config.target_modules)) targets.emplace_back(key, l);
    }
  if (targets.empty()) {
    std::string targets_list, present;
    for (const auto& t : config.target_modules) targets_list += (targets_list.empty() ? "" : ", ") + t;
    for (size_t i = 0; i < linears.size() && i < 8; ++i) present += (i ? ", " : "") + linears[i];
    if (linears.size() > 8) present += ", ...";
    throw ValueError::of("add_lora", "no Linear layer matches the target modules",
                         "targets [{}]; Linear layers: [{}]", targets_list,
                         present.empty() ? std::string("none") : present);
  }
  if (config.r < 1) throw ValueError::of("add_lora", "rank r must be >= 1", "got {}", config.r);
  if (!(config.dropout >= 0 && config.dropout < 1))
    throw ValueError::of("add_lora", "dropout must be in [0, 1)", "got {}", config.dropout);
  model.freeze();
  const auto keys = random::split_keys(config.key.valid() ? config.key : random::next_key(),
                                       static_cast<int>(targets.size()));
  std::vector<std::string> adapted, adapters;
  for (size_t i = 0; i < targets.size(); ++i) {
    const auto& [key, l] = targets[i];
    l->add_lora({.r = config.r, .alpha = config.alpha, .dropout = config.dropout, .key = keys[i]});
    adapted.push_back(key);
    const std::string prefix = key.empty() ? "" : key + ".";
    adapters.push_back(prefix + "lora_A");
    adapters.push_back(prefix + "lora_B");
  }
  model.unfreeze(adapters);
  return adapted;
}

std::vector<std::string> merge_lora(Module& model) {
  std::vector<std::string> merged;
  for (auto& [key, m] : model.named_modules())
    if (auto* l = dynamic_cast<Linear*>(m); l && l->has_lora()) {
      l->merge_lora();
      merged.push_back(key);
    }
  return merged;
}

LoRALinear::LoRALinear(int64_t in_features, int64_t out_features, LoRAOptions o)
    : in_(in_features), out_(out_features), r_(o.r), scale_(0), dropout_(o.dropout) {
  if (in_features < 1 || out_features < 1)
    throw ValueError::of("LoRALinear", "features must be >= 1", "in {}, out {}", in_features, out_features);
  const auto keys = random::split_keys(o.key.valid() ? o.key : random::next_key(), 3);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight.set(init::uniform({out_features, in_features}, -bound, bound, o.dtype, keys[0]));
  if (o.bias) bias.set(init::uniform({out_features}, -bound, bound, o.dtype, keys[1]));
  init_adapter(o, keys[2]);
}

LoRALinear::LoRALinear(const Linear& base, LoRAOptions o)
    : in_(base.in_features()), out_(base.out_features()), r_(o.r), scale_(0), dropout_(o.dropout) {
  weight.set(base.weight.value());
  if (base.bias.has_value()) bias.set(base.bias.value());
  o.dtype = base.weight.value().dtype();
  init_adapter(o, o.key.valid() ? o.key : random::next_key());
}

void LoRALinear::init_adapter(const LoRAOptions& o, const Array& key) {
  if (o.r < 1) throw ValueError::of("LoRALinear", "rank r must be >= 1", "got {}", o.r);
  if (!(o.dropout >= 0 && o.dropout < 1))
    throw ValueError::of("LoRALinear", "dropout must be in [0, 1)", "got {}", o.dropout);
  scale_ = o.alpha / static_cast<double>(o.r);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
  lora_a.set(init::uniform({o.r, in_}, -bound, bound, o.dtype, key));
  lora_b.set(zeros({out_, o.r}, o.dtype));
  freeze({"weight"}, /*recurse=*/false);
  if (bias.has_value()) freeze({"bias"}, /*recurse=*/false);
}

Array LoRALinear::operator()(const Array& x) const { return (*this)(x, Array()); }

Array LoRALinear::operator()(const Array& x, const Array& dropout_key) const {
  if (!x.valid() || x.ndim() < 1 || x.shape().back() != in_)
    throw ShapeError::of("LoRALinear", "input's last dimension must be in_features",
                         "expected (..., {}), got {}", in_,
                         x.valid() ? shape_str(x.shape()) : std::string("an empty Array"));
  Array y = matmul(x, transpose(weight.value()));
  if (bias.has_value()) y = y + bias.value();
  if (merged_) return y;
  const Array xa = is_training() && dropout_ > 0 ? dropout(x, dropout_, dropout_key) : x;
  const Array low = matmul(matmul(xa, transpose(lora_a.value())), transpose(lora_b.value()));
  return y + low * scale_;
}

Array LoRALinear::delta() const { return matmul(lora_b.value(), lora_a.value()) * scale_; }

void LoRALinear::merge() {
  if (merged_) return;
  const Array w = weight.value() + delta();
  w.eval();
  weight.set(w);
  merged_ = true;
}

void LoRALinear::unmerge() {
  if (!merged_) return;
  const Array w = weight.value() - delta();
  w.eval();
  weight.set(w);
  merged_ = false;
}

}  // namespace kiln::nn
