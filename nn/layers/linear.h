#pragma once
// Linear: y = x W^T + b, as torch.nn.Linear (weight (out, in), so PyTorch state dicts load as-is).
#include "kiln/nn/module.h"

namespace kiln::nn {

struct LinearOptions {
  bool bias = true;
  Dtype dtype = float32;
  Array key = Array();  // initialization key; random::next_key() when empty
};

class Linear : public Module {
 public:
  /// Weight and bias uniform on +-1/sqrt(in), as PyTorch. Throws ValueError for in or out < 1.
  Linear(int64_t in_features, int64_t out_features, LinearOptions options = {});
  /// x: (..., in) -> (..., out). Throws ShapeError if x's last dimension is not `in`.
  Array operator()(const Array& x) const;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

  ParameterInfo weight{this, "weight"};  // (out, in)
  ParameterInfo bias{this, "bias"};      // (out); empty and unlisted when options.bias is false

 private:
  int64_t in_, out_;
};

}  // namespace kiln::nn
