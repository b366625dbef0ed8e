#pragma once
// 1-d, 3-d and adaptive pooling layers, as torch.nn.MaxPool1d, MaxPool3d, AvgPool1d, AvgPool3d and
// AdaptiveAvgPool1d/2d/3d, over (N, C, spatial...) or unbatched (C, spatial...) floating-point
// input. Each runs the core op of the same name (core/ops/pooling.h), holds no parameters and is
// lazy and differentiable (grad, jvp, vmap). The constructors check the options (ValueError,
// naming the layer); the call's errors (rank, dtype, output size) come from the core op and name it.
//
//   kiln::nn::MaxPool3d pool(2);                             // stride defaults to the kernel size
//   kiln::nn::AvgPool1d avg(3, {.stride = 2, .padding = 1, .count_include_pad = false});
//   kiln::nn::AdaptiveAvgPool2d gap(1);                      // global average pooling
#include <cstdint>
#include <optional>

#include "kiln/nn/layers/pooling.h"

namespace kiln::nn {

/// A (depth, height, width) triple built from one int (all three) or three, as PyTorch's
/// int-or-tuple arguments: `.stride = 2` or `.stride = {1, 2, 2}`.
struct IntTriple {
  int d = 0, h = 0, w = 0;
  IntTriple(int all = 0) : d(all), h(all), w(all) {}  // NOLINT: implicit, as PyTorch's int arguments
  IntTriple(int depth, int height, int width) : d(depth), h(height), w(width) {}
  bool operator==(const IntTriple&) const = default;
};

/// Options of MaxPool1d, in torch.nn.MaxPool1d's argument order (return_indices is not offered).
struct MaxPool1dOptions {
  std::optional<int> stride = std::nullopt;  // the kernel size when absent
  int padding = 0;                           // implicit -inf on each side
  int dilation = 1;
  bool ceil_mode = false;
};

/// Options of MaxPool3d, in torch.nn.MaxPool3d's argument order (return_indices is not offered).
struct MaxPool3dOptions {
  std::optional<IntTriple> stride = std::nullopt;  // the kernel size when absent
  IntTriple padding = 0;
  IntTriple dilation = 1;
  bool ceil_mode = false;
};

/// Options of AvgPool1d, in torch.nn.AvgPool1d's argument order.
struct AvgPool1dOptions {
  std::optional<int> stride = std::nullopt;  // the kernel size when absent
  int padding = 0;                           // implicit zeros on each side
  bool ceil_mode = false;
  bool count_include_pad = true;
};

/// Options of AvgPool3d, in torch.nn.AvgPool3d's argument order.
struct AvgPool3dOptions {
  std::optional<IntTriple> stride = std::nullopt;  // the kernel size when absent
  IntTriple padding = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;
  std::optional<int> divisor_override = std::nullopt;
};

/// The maximum of each window of (N, C, L): core max_pool1d.
class MaxPool1d : public Module {
 public:
  /// Throws ValueError for a kernel, stride or dilation < 1, padding < 0, or padding larger than
  /// half the dilated kernel, as PyTorch.
  MaxPool1d(int kernel_size, MaxPool1dOptions options = {});
  Array operator()(const Array& x) const;

 private:
  int k_, stride_, padding_, dilation_;
  bool ceil_mode_;
};

/// The maximum of each window of (N, C, D, H, W): core max_pool3d (the gradient goes to the first
/// maximum in (d, h, w) order).
class MaxPool3d : public Module {
 public:
  /// Throws as MaxPool1d.
  MaxPool3d(IntTriple kernel_size, MaxPool3dOptions options = {});
  Array operator()(const Array& x) const;

 private:
  IntTriple k_, stride_, padding_, dilation_;
  bool ceil_mode_;
};

/// The mean of each window of (N, C, L): core avg_pool1d.
class AvgPool1d : public Module {
 public:
  /// Throws ValueError for a kernel or stride < 1, padding < 0 or larger than half the kernel.
  AvgPool1d(int kernel_size, AvgPool1dOptions options = {});
  Array operator()(const Array& x) const;

 private:
  int k_, stride_, padding_;
  bool ceil_mode_, count_include_pad_;
};

/// The mean of each window of (N, C, D, H, W): core avg_pool3d (AvgPool2d's divisors).
class AvgPool3d : public Module {
 public:
  /// Throws as AvgPool1d, and ValueError for divisor_override < 1.
  AvgPool3d(IntTriple kernel_size, AvgPool3dOptions options = {});
  Array operator()(const Array& x) const;

 private:
  IntTriple k_, stride_, padding_;
  bool ceil_mode_, count_include_pad_;
  std::optional<int> divisor_override_;
};

/// Adaptive average pooling of (N, C, L) to (N, C, output_size): core adaptive_avg_pool1d.
class AdaptiveAvgPool1d : public Module {
 public:
  /// Throws ValueError for an output size < 1.
  explicit AdaptiveAvgPool1d(int64_t output_size);
  Array operator()(const Array& x) const;

 private:
  int64_t out_;
};

/// Adaptive average pooling of (N, C, H, W) to (N, C, output_size.h, output_size.w).
class AdaptiveAvgPool2d : public Module {
 public:
  /// Throws ValueError for an output size < 1.
  explicit AdaptiveAvgPool2d(IntPair output_size);
  Array operator()(const Array& x) const;

 private:
  IntPair out_;
};

/// Adaptive average pooling of (N, C, D, H, W) to (N, C, output_size.d, .h, .w).
class AdaptiveAvgPool3d : public Module {
 public:
  /// Throws ValueError for an output size < 1.
  explicit AdaptiveAvgPool3d(IntTriple output_size);
  Array operator()(const Array& x) const;

 private:
  IntTriple out_;
};

}  // namespace kiln::nn
