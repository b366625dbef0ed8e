#pragma once
// How a layer stores a quantized weight (core/ops/quantized.h): bits per value (2, 4 or 8) and the
// group size along the input dimension (32, 64 or 128).

namespace kiln::nn {

struct QuantizeOptions {
  int bits = 4;
  int group_size = 64;
  bool operator==(const QuantizeOptions&) const = default;
};

}  // namespace kiln::nn
