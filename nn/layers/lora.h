#pragma once
// LoRALinear: a frozen Linear plus a trainable low-rank update (Hu et al., LoRA), as PEFT's
// lora.Linear: y = x W^T + b + scale * dropout(x) A^T B^T with A (r, in), B (out, r), scale = alpha / r.
//
// The base slots keep Linear's keys ("weight", "bias"), so a checkpoint of the plain model loads
// into one with LoRALinear layers in place of Linear (update with Verify::all & ~Verify::missing),
// and the adapter is exactly trainable_parameters(): "lora_a" and "lora_b".
#include "kiln/nn/layers/linear.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

struct LoRAOptions {
  int64_t r = 8;         // rank
  double alpha = 16.0;   // scale = alpha / r
  double dropout = 0.0;  // on the adapter's input, in training mode only
  bool bias = true;      // base bias (ignored when built from a Linear: its bias is kept or absent)
  Dtype dtype = float32;
  Array key = Array();  // initialization key; random::next_key() when empty
};

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
