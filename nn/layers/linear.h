#pragma once
// Linear: y = x W^T + b, as torch.nn.Linear (weight (out, in), so PyTorch state dicts load as-is).
//
// Any Linear can carry a LoRA adapter (Hu et al.), laid out as PEFT's lora.Linear keeps it:
// add_lora() adds `lora_A.weight` (r, in) and `lora_B.weight` (out, r), and the layer computes
// x W^T + b + (alpha / r) dropout(x) A^T B^T. nn::add_lora (lora.h) adds adapters across a model by
// module name, as PEFT's target_modules.
//
// quantize() stores the weight in place as MLX's QuantizedLinear does: `weight` the packed uint32
// words, `scales` and `biases` beside it, the layer computing quantized_matmul. A LoRA adapter on a
// quantized Linear trains over the frozen quantized base: QLoRA.
#include <optional>

#include "kiln/nn/layers/quantize_options.h"
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
  /// Folds (alpha / r) B A into the weight and removes the adapter (a quantized weight is
  /// dequantized, merged and quantized again with its options). No-op without one.
  void merge_lora();
  /// Removes the adapter, leaving the weight as it is. No-op without one.
  void remove_lora();
  bool has_lora() const { return lora_A->weight.has_value(); }
  /// alpha / r of the adapter (0 without one).
  double lora_scale() const { return has_lora() ? lora_scale_ : 0.0; }

  /// Quantizes the weight in place (kiln::quantize along in_features) and freezes the layer's own
  /// parameters (weight, scales, biases, bias); an adapter stays trainable. Throws ValueError when
  /// already quantized, for bits or a group size quantize rejects, or when in_features is not a
  /// multiple of the group size (naming the layer's shape).
  void quantize(const QuantizeOptions& options = {});
  /// The options the weight was quantized with; empty for a float weight.
  const std::optional<QuantizeOptions>& quantization() const { return quantization_; }
  bool is_quantized() const { return quantization_.has_value(); }
  /// The weight as floats (out, in): dequantized when quantized, else the weight itself.
  Array dequantized_weight() const;
  /// The dtype the layer computes in: the weight's, or the scales' when quantized.
  Dtype compute_dtype() const;

  ParameterInfo weight{this, "weight"};           // (out, in); uint32 (out, in * bits / 32) when quantized
  ParameterInfo bias{this, "bias"};               // (out); empty and unlisted when options.bias is false
  ParameterInfo scales{this, "scales"};           // (out, in / group_size) when quantized, else empty
  ParameterInfo biases{this, "biases"};           // (out, in / group_size) when quantized, else empty
  ModuleInfo<LoRAFactor> lora_A{this, "lora_A"};  // weight (r, in); empty without an adapter
  ModuleInfo<LoRAFactor> lora_B{this, "lora_B"};  // weight (out, r); empty without an adapter

 private:
  int64_t in_, out_;
  double lora_scale_ = 0.0, lora_dropout_ = 0.0;
  std::optional<QuantizeOptions> quantization_;
};

}  // namespace kiln::nn
