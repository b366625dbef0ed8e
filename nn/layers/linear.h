#pragma once
// Linear: y = x W^T + b, as torch.nn.Linear (weight (out, in), so PyTorch state dicts load as-is).
//
// Any Linear can carry a LoRA adapter (Hu et al.), laid out as PEFT's lora.Linear keeps it:
// add_lora() adds `lora_A.weight` (r, in) and `lora_B.weight` (out, r), and the layer computes
// x W^T + b + (alpha / r) dropout(x) A^T B^T. nn::add_lora (lora.h) adds adapters across a model by
// module name, as PEFT's target_modules.
#include "kiln/nn/module.h"

namespace kiln::nn {

struct LinearOptions {
  bool bias = true;
  Dtype dtype = float32;
  Array key = Array();  // initialization key; random::next_key() when empty
};

/// A LoRA adapter's shape and initialization (for Linear::add_lora and nn::LoRALinear).
struct LoRAOptions {
  int64_t r = 8;          // rank
  double alpha = 16.0;    // scale = alpha / r
  double dropout = 0.0;   // on the adapter's input, in training mode only
  bool bias = true;       // LoRALinear only: its fresh base's bias (a Linear's own bias is kept)
  Dtype dtype = float32;  // LoRALinear only: its fresh base's dtype (add_lora uses the weight's)
  Array key = Array();    // initialization key; random::next_key() when empty
};

/// One factor of a LoRA adapter: a bias-free projection's weight, as PEFT stores lora_A and lora_B.
class LoRAFactor : public Module {
 public:
  bool present() const override { return weight.has_value(); }
  ParameterInfo weight{this, "weight"};
};

class Linear : public Module {
 public:
  /// Weight and bias uniform on +-1/sqrt(in), as PyTorch. Throws ValueError for in or out < 1.
  Linear(int64_t in_features, int64_t out_features, LinearOptions options = {});
  /// x: (..., in) -> (..., out). Throws ShapeError if x's last dimension is not `in`.
  Array operator()(const Array& x) const;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

  /// Adds (or replaces) a LoRA adapter: lora_A uniform on +-1/sqrt(in) (PEFT's
  /// kaiming_uniform(a = sqrt 5)), lora_B zeros, so the outputs do not change until it trains; in
  /// the weight's dtype. options.bias and options.dtype are not used. Freezes nothing (nn::add_lora
  /// freezes the rest of the model). Throws ValueError for r < 1 or dropout outside [0, 1).
  void add_lora(const LoRAOptions& options);
  /// Folds (alpha / r) B A into the weight and removes the adapter. No-op without one.
  void merge_lora();
  /// Removes the adapter, leaving the weight as it is. No-op without one.
  void remove_lora();
  bool has_lora() const { return lora_A->weight.has_value(); }
  /// alpha / r of the adapter (0 without one).
  double lora_scale() const { return has_lora() ? lora_scale_ : 0.0; }

  ParameterInfo weight{this, "weight"};           // (out, in)
  ParameterInfo bias{this, "bias"};               // (out); empty and unlisted when options.bias is false
  ModuleInfo<LoRAFactor> lora_A{this, "lora_A"};  // weight (r, in); empty without an adapter
  ModuleInfo<LoRAFactor> lora_B{this, "lora_B"};  // weight (out, r); empty without an adapter

 private:
  int64_t in_, out_;
  double lora_scale_ = 0.0, lora_dropout_ = 0.0;
};

}  // namespace kiln::nn
