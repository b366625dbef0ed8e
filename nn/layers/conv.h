#pragma once
// Convolution layers, as torch.nn.Conv1d, Conv2d and ConvTranspose2d: channels-first layouts
// ((N, C, L), (N, C, H, W); unbatched (C, L) and (C, H, W) are accepted too), PyTorch's weight
// layouts and names, so PyTorch state dicts load as-is, and PyTorch's default initialization.
//
//   kiln::nn::Conv2d conv(3, 16, 3, {.padding = 1});
//   kiln::nn::Conv2d depthwise(16, 16, {3, 5}, {.padding = "same", .groups = 16, .bias = false});
//   kiln::nn::ConvTranspose2d up(16, 8, 4, {.stride = 2, .padding = 1});
#include <cstdint>
#include <string>

#include "kiln/nn/module.h"

namespace kiln::nn {

/// A (height, width) pair built from one int (both) or two, as PyTorch's int-or-tuple arguments:
/// `.stride = 2` or `.stride = {2, 1}`.
struct IntPair {
  int h = 0, w = 0;
  IntPair(int both = 0) : h(both), w(both) {}  // NOLINT: implicit, as PyTorch's int arguments
  IntPair(int height, int width) : h(height), w(width) {}
  bool operator==(const IntPair&) const = default;
};

/// Conv1d padding: an amount per side, or "same" (output length = input length; stride must be 1)
/// or "valid" (no padding), as PyTorch's padding strings. Any other string is rejected by the layer.
struct Padding1d {
  int amount = 0;
  std::string mode;                      // "" when an amount is given
  Padding1d(int p = 0) : amount(p) {}    // NOLINT: implicit
  Padding1d(const char* m) : mode(m) {}  // NOLINT: implicit
};

/// Conv2d padding: one int, an (h, w) pair, "same" or "valid" (see Padding1d).
struct Padding2d {
  IntPair amount;
  std::string mode;                    // "" when an amount is given
  Padding2d(int p = 0) : amount(p) {}  // NOLINT: implicit
  Padding2d(int h, int w) : amount(h, w) {}
  Padding2d(const char* m) : mode(m) {}  // NOLINT: implicit
};

/// Options of Conv1d, in torch.nn.Conv1d's argument order (padding_mode is always "zeros").
struct Conv1dOptions {
  int stride = 1;
  Padding1d padding = 0;
  int dilation = 1;
  int groups = 1;
  bool bias = true;
  Dtype dtype = float32;
  Array key = Array();  // initialization key; random::next_key() when empty
};

/// Options of Conv2d, in torch.nn.Conv2d's argument order (padding_mode is always "zeros").
struct Conv2dOptions {
  IntPair stride = 1;
  Padding2d padding = 0;
  IntPair dilation = 1;
  int groups = 1;
  bool bias = true;
  Dtype dtype = float32;
  Array key = Array();  // initialization key; random::next_key() when empty
};

/// Options of ConvTranspose2d, in torch.nn.ConvTranspose2d's argument order.
struct ConvTranspose2dOptions {
  IntPair stride = 1;
  IntPair padding = 0;
  IntPair output_padding = 0;  // extra rows/columns at the bottom/right of the output
  int groups = 1;
  bool bias = true;
  IntPair dilation = 1;
  Dtype dtype = float32;
  Array key = Array();  // initialization key; random::next_key() when empty
};

/// 1-d convolution (cross-correlation) over (N, C_in, L) or (C_in, L).
class Conv1d : public Module {
 public:
  /// Weight and bias uniform on +-1/sqrt(fan_in), fan_in = in_channels / groups * kernel_size (as
  /// PyTorch's kaiming_uniform(a = sqrt(5))). Throws ValueError for sizes, stride or dilation < 1,
  /// padding < 0, groups not dividing both channel counts, an unknown padding string, or "same"
  /// with stride > 1.
  Conv1d(int64_t in_channels, int64_t out_channels, int kernel_size, Conv1dOptions options = {});
  /// (N, C_in, L) -> (N, C_out, L_out), L_out = (L + 2 padding - dilation (k - 1) - 1) / stride + 1;
  /// (C_in, L) -> (C_out, L_out). Throws ShapeError for another rank, a channel count other than
  /// in_channels, or an input shorter than the dilated kernel; DtypeError for integer input.
  Array operator()(const Array& x) const;

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }

  ParameterInfo weight{this, "weight"};  // (out, in / groups, k)
  ParameterInfo bias{this, "bias"};      // (out); empty and unlisted when options.bias is false

 private:
  int64_t in_, out_;
  int k_, stride_, dilation_, groups_;
  int pad_lo_, pad_hi_;  // per side; they differ only for "same" with an odd total
};

/// 2-d convolution (cross-correlation) over (N, C_in, H, W) or (C_in, H, W).
class Conv2d : public Module {
 public:
  /// Weight and bias uniform on +-1/sqrt(fan_in), fan_in = in_channels / groups * kH * kW.
  /// Throws ValueError as Conv1d.
  Conv2d(int64_t in_channels, int64_t out_channels, IntPair kernel_size, Conv2dOptions options = {});
  /// (N, C_in, H, W) -> (N, C_out, H_out, W_out) with PyTorch's output sizes; (C_in, H, W) ->
  /// (C_out, H_out, W_out). Throws as Conv1d.
  Array operator()(const Array& x) const;

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }

  ParameterInfo weight{this, "weight"};  // (out, in / groups, kH, kW)
  ParameterInfo bias{this, "bias"};      // (out); empty and unlisted when options.bias is false

 private:
  int64_t in_, out_;
  IntPair k_, stride_, dilation_;
  int groups_;
  IntPair pad_lo_, pad_hi_;  // top/left and bottom/right; they differ only for "same"
};

/// Transposed 2-d convolution (the gradient of Conv2d with respect to its input), as
/// torch.nn.ConvTranspose2d: H_out = (H - 1) stride - 2 padding + dilation (kH - 1) + output_padding + 1.
class ConvTranspose2d : public Module {
 public:
  /// Weight and bias uniform on +-1/sqrt(fan_in) with PyTorch's fan_in of the (in, out / groups,
  /// kH, kW) weight: out_channels / groups * kH * kW. Throws ValueError for sizes, stride or
  /// dilation < 1, padding or output_padding < 0, output_padding not smaller than stride or
  /// dilation, or groups not dividing both channel counts.
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, IntPair kernel_size,
                  ConvTranspose2dOptions options = {});
  /// (N, C_in, H, W) -> (N, C_out, H_out, W_out); (C_in, H, W) -> (C_out, H_out, W_out). Throws
  /// ShapeError for another rank or channel count, or an output size < 1; DtypeError for integer input.
  Array operator()(const Array& x) const;

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }

  ParameterInfo weight{this, "weight"};  // (in, out / groups, kH, kW)
  ParameterInfo bias{this, "bias"};      // (out); empty and unlisted when options.bias is false

 private:
  int64_t in_, out_;
  IntPair k_, stride_, padding_, output_padding_, dilation_;
  int groups_;
};

}  // namespace kiln::nn
