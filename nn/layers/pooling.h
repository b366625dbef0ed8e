#pragma once
// 2-d pooling layers, as torch.nn.MaxPool2d and AvgPool2d, over (N, C, H, W) or unbatched
// (C, H, W) floating-point input. MaxPool2d runs core max_pool2d (one primitive, one pass each
// way), AvgPool2d core avg_pool2d (a composition of core ops). Both are lazy and differentiable
// (grad, jvp, vmap) and hold no parameters. 1-d, 3-d and adaptive pooling: pooling_more.h.
//
//   kiln::nn::MaxPool2d pool(2);                          // stride defaults to the kernel size
//   kiln::nn::AvgPool2d avg(3, {.stride = 2, .padding = 1, .count_include_pad = false});
#include <optional>

#include "kiln/nn/layers/conv.h"

namespace kiln::nn {

/// Options of MaxPool2d, in torch.nn.MaxPool2d's argument order (return_indices is not offered).
struct MaxPool2dOptions {
  std::optional<IntPair> stride = std::nullopt;  // the kernel size when absent
  IntPair padding = 0;                           // implicit -inf on each side
  IntPair dilation = 1;
  bool ceil_mode = false;  // round the output size up (a last window may start in the padding-free tail)
};

/// Options of AvgPool2d, in torch.nn.AvgPool2d's argument order.
struct AvgPool2dOptions {
  std::optional<IntPair> stride = std::nullopt;  // the kernel size when absent
  IntPair padding = 0;                           // implicit zeros on each side
  bool ceil_mode = false;
  bool count_include_pad = true;                       // divide by the window size including padding
  std::optional<int> divisor_override = std::nullopt;  // divide every window by this instead
};

/// The maximum of each window. The gradient goes to the window's first maximum in row-major
/// order, as PyTorch's CPU kernel; a NaN in a window is its maximum.
class MaxPool2d : public Module {
 public:
  /// Throws ValueError for a kernel, stride or dilation < 1, padding < 0, or padding larger than
  /// half the dilated kernel ((k - 1) dilation + 1) / 2, as PyTorch.
  MaxPool2d(IntPair kernel_size, MaxPool2dOptions options = {});
  /// (N, C, H, W) -> (N, C, H_out, W_out), H_out = floor or ceil((H + 2 p - d (k - 1) - 1) / s) + 1
  /// (ceil_mode drops a last window that would start in the right padding). Throws ShapeError for
  /// another rank or an output size < 1, DtypeError for non-floating input.
  Array operator()(const Array& x) const;

 private:
  IntPair k_, stride_, padding_, dilation_;
  bool ceil_mode_;
};

/// The mean of each window.
class AvgPool2d : public Module {
 public:
  /// Throws ValueError for a kernel or stride < 1, padding < 0, padding larger than half the
  /// kernel, or divisor_override < 1 (PyTorch's checks).
  AvgPool2d(IntPair kernel_size, AvgPool2dOptions options = {});
  /// (N, C, H, W) -> (N, C, H_out, W_out) with MaxPool2d's sizes (dilation 1). The divisor of a
  /// window is, as PyTorch: divisor_override if set; else with count_include_pad its extent
  /// clipped to the padded input (not to ceil_mode's extra area); else the count of real
  /// elements. Throws as MaxPool2d.
  Array operator()(const Array& x) const;

 private:
  IntPair k_, stride_, padding_;
  bool ceil_mode_, count_include_pad_;
  std::optional<int> divisor_override_;
};

}  // namespace kiln::nn
