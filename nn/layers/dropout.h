#pragma once
// Dropout, as torch.nn.Dropout: in training mode each element is zeroed with probability p and the
// survivors are scaled by 1 / (1 - p); in evaluation mode (or for p = 0) it is the identity.
#include "kiln/nn/module.h"

namespace kiln::nn {

class Dropout : public Module {
 public:
  /// Throws ValueError unless 0 <= p < 1.
  explicit Dropout(double p = 0.5);
  /// Draws its mask from random::next_key() (only when it drops anything). x: any float shape.
  Array operator()(const Array& x) const;
  /// The same with an explicit key: equal keys give equal masks, on any thread.
  Array operator()(const Array& x, const Array& key) const;

  double p() const { return p_; }

 private:
  double p_;
};

/// Functional dropout: zeroes elements of x with probability p (a mask from `key`, or from
/// random::next_key() when key is empty) and scales the rest by 1 / (1 - p). Identity for p = 0.
/// Throws ValueError unless 0 <= p < 1, DtypeError for non-float x.
Array dropout(const Array& x, double p, const Array& key = Array());

}  // namespace kiln::nn
