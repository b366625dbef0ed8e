#pragma once
// Rotary position embedding, as MLX's nn.RoPE (Su et al., RoFormer): rotates pairs of features of
// a position by angles position * scale * base^(-2i / dims).
#include "kiln/nn/module.h"

namespace kiln::nn {

struct RoPEOptions {
  bool traditional = false;  // rotate consecutive pairs (x[2i], x[2i+1]); else halves (x[i], x[i + dims/2])
  double base = 10000.0;
  double scale = 1.0;  // positions are multiplied by scale
};

/// No parameters. Feature pairs i < dims/2 rotate by (offset + t) * scale * base^(-2i / dims) at
/// sequence position t; features past `dims` pass through unchanged.
class RoPE : public Module {
 public:
  /// Throws ValueError unless dims is even and >= 2, base > 0 and scale is finite.
  explicit RoPE(int64_t dims, RoPEOptions options = {});
  /// x: (..., seq, features) with features >= dims -> same shape; the first position is `offset`
  /// (the cached length during incremental decoding). Throws ShapeError for rank < 2 or too few
  /// features, DtypeError for non-float x, ValueError for offset < 0.
  Array operator()(const Array& x, int64_t offset = 0) const;

  int64_t dims() const { return dims_; }
  const RoPEOptions& options() const { return options_; }

 private:
  int64_t dims_;
  RoPEOptions options_;
};

}  // namespace kiln::nn
