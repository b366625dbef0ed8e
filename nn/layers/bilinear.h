#pragma once
// Bilinear: y = x1^T A x2 + b, as torch.nn.Bilinear (weight (out, in1, in2), so PyTorch state
// dicts load as-is).
#include "kiln/nn/module.h"

namespace kiln::nn {

struct BilinearOptions {
  bool bias = true;
  Dtype dtype = float32;
  Array key = Array();  // initialization key; random::next_key() when empty
};

class Bilinear : public Module {
 public:
  /// Weight and bias uniform on +-1/sqrt(in1), as PyTorch. Throws ValueError for a size < 1.
  Bilinear(int64_t in1_features, int64_t in2_features, int64_t out_features, BilinearOptions options = {});
  /// x1: (..., in1), x2: (..., in2) with the same leading dimensions -> (..., out), where
  /// y[..., o] = sum_ij x1[..., i] weight[o, i, j] x2[..., j] + bias[o]. Throws ShapeError for a
  /// wrong last dimension or differing leading dimensions.
  Array operator()(const Array& x1, const Array& x2) const;

  int64_t in1_features() const { return in1_; }
  int64_t in2_features() const { return in2_; }
  int64_t out_features() const { return out_; }

  ParameterInfo weight{this, "weight"};  // (out, in1, in2)
  ParameterInfo bias{this, "bias"};      // (out); empty and unlisted when options.bias is false

 private:
  int64_t in1_, in2_, out_;
};

}  // namespace kiln::nn
