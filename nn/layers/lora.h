#pragma once
// LoRALinear: a frozen Linear plus a trainable low-rank update (Hu et al., LoRA), as PEFT's
// lora.Linear: y = x W^T + b + scale * dropout(x) A^T B^T with A (r, in), B (out, r), scale = alpha / r.
//
// The base slots keep Linear's keys ("weight", "bias"), so a checkpoint of the plain model loads
// into one with LoRALinear layers in place of Linear (update with Verify::all & ~Verify::missing),
// and the adapter is exactly trainable_parameters(): "lora_a" and "lora_b".
#include <string>
#include <vector>

#include "kiln/nn/layers/linear.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

/// Which Linear layers of a model get adapters, and their shape: PEFT's LoraConfig.
struct LoRAConfig {
  int64_t r = 8;
  double alpha = 16.0;
  double dropout = 0.0;
  /// Module names: a Linear whose key is one of them or ends with "." and one of them
  /// ("q_proj" adapts model.layers.0.self_attn.q_proj).
  std::vector<std::string> target_modules = {"q_proj", "v_proj"};
  Array key = Array();  // initialization key; random::next_key() when empty
};

/// Adds a LoRA adapter (Linear::add_lora) to every nn::Linear that config.target_modules names and
/// freezes every other parameter, so that the adapters alone train (PEFT's get_peft_model).
/// Returns the adapted modules' keys in model order. Throws ValueError, naming the targets and the
/// model's Linear layers, when no Linear matches a target (the model is unchanged then), and what
/// Linear::add_lora throws.
std::vector<std::string> add_lora(Module& model, const LoRAConfig& config);
/// Folds every adapter into its weight (Linear::merge_lora): the model is plain again, with the
/// keys it had before add_lora. Frozen parameters stay frozen. Returns the merged modules' keys.
std::vector<std::string> merge_lora(Module& model);

class LoRALinear : public Module {
 public:
  /// A fresh base Linear(in, out) (PyTorch's init) with the adapter. Throws ValueError for in, out
  /// or r < 1, or dropout outside [0, 1).
  LoRALinear(int64_t in_features, int64_t out_features, LoRAOptions options = {});
  /// The adapter around `base`'s weight and bias (the same arrays, not copies; later changes to
  /// `base` do not reach this layer). options.bias and options.dtype are ignored: base's are kept.
  explicit LoRALinear(const Linear& base, LoRAOptions options = {});

  /// x: (..., in) -> (..., out). Draws the adapter dropout's key from random::next_key() when it
  /// drops anything. Throws ShapeError if x's last dimension is not in_features.
  Array operator()(const Array& x) const;
  /// The same with an explicit dropout key.
  Array operator()(const Array& x, const Array& dropout_key) const;

  /// Folds scale * B A into the base weight; forward then skips the adapter (same outputs up to
  /// rounding, one GEMM). No-op when already merged. Training a merged layer gives zero gradients
  /// to lora_a and lora_b: unmerge first.
  void merge();
  /// Subtracts scale * B A from the base weight again. No-op when not merged.
  void unmerge();
  bool merged() const { return merged_; }

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  int64_t rank() const { return r_; }
  double scale() const { return scale_; }

  ParameterInfo weight{this, "weight"};  // (out, in), frozen
  ParameterInfo bias{this, "bias"};      // (out), frozen; absent without bias
  ParameterInfo lora_a{this,
                       "lora_a"};  // (r, in): uniform on +-1/sqrt(in) (PEFT's kaiming_uniform(a=sqrt 5))
  ParameterInfo lora_b{this, "lora_b"};  // (out, r): zeros, so the layer starts as its base

 private:
  void init_adapter(const LoRAOptions& o, const Array& key);
  Array delta() const;  // scale * B A, (out, in)

  int64_t in_, out_, r_;
  double scale_, dropout_;
  bool merged_ = false;
};

}  // namespace kiln::nn
