#include "kiln/nn/layers/pooling_more.h"

#include <algorithm>
#include <array>

#include "kiln/core/error.h"
#include "kiln/core/ops/pooling.h"

namespace kiln::nn {
namespace {

void check_at_least(const char* layer, const char* what, int value, int least) {
  if (value < least) throw ValueError::of(layer, what, "must be >= {}, got {}", least, value);
}
int min3(const IntTriple& t) { return std::min({t.d, t.h, t.w}); }
std::array<int, 3> arr(const IntTriple& t) { return {t.d, t.h, t.w}; }

// PyTorch's padding check: at most half of the (dilated) kernel, ((k - 1) d + 1) / 2.
void check_padding(const char* layer, int k, int p, int d) {
  check_at_least(layer, "padding", p, 0);
  if (p > ((k - 1) * d + 1) / 2)
    throw ValueError::of(layer, "padding must be at most half of the (dilated) kernel size",
                         "padding {}, kernel {}, dilation {}", p, k, d);
}
void check_padding(const char* layer, const IntTriple& k, const IntTriple& p, const IntTriple& d) {
  check_padding(layer, k.d, p.d, d.d);
  check_padding(layer, k.h, p.h, d.h);
  check_padding(layer, k.w, p.w, d.w);
}

}  // namespace

MaxPool1d::MaxPool1d(int kernel_size, MaxPool1dOptions o)
    : k_(kernel_size),
      stride_(o.stride.value_or(kernel_size)),
      padding_(o.padding),
      dilation_(o.dilation),
      ceil_mode_(o.ceil_mode) {
  check_at_least("MaxPool1d", "kernel_size", k_, 1);
  check_at_least("MaxPool1d", "stride", stride_, 1);
  check_at_least("MaxPool1d", "dilation", dilation_, 1);
  check_padding("MaxPool1d", k_, padding_, dilation_);
}
Array MaxPool1d::operator()(const Array& x) const {
  return max_pool1d(x, k_, stride_, padding_, dilation_, ceil_mode_);
}

MaxPool3d::MaxPool3d(IntTriple kernel_size, MaxPool3dOptions o)
    : k_(kernel_size),
      stride_(o.stride.value_or(kernel_size)),
      padding_(o.padding),
      dilation_(o.dilation),
      ceil_mode_(o.ceil_mode) {
  check_at_least("MaxPool3d", "kernel_size", min3(k_), 1);
  check_at_least("MaxPool3d", "stride", min3(stride_), 1);
  check_at_least("MaxPool3d", "dilation", min3(dilation_), 1);
  check_padding("MaxPool3d", k_, padding_, dilation_);
}
Array MaxPool3d::operator()(const Array& x) const {
  return max_pool3d(x, arr(k_), arr(stride_), arr(padding_), arr(dilation_), ceil_mode_);
}

AvgPool1d::AvgPool1d(int kernel_size, AvgPool1dOptions o)
    : k_(kernel_size),
      stride_(o.stride.value_or(kernel_size)),
      padding_(o.padding),
      ceil_mode_(o.ceil_mode),
      count_include_pad_(o.count_include_pad) {
  check_at_least("AvgPool1d", "kernel_size", k_, 1);
  check_at_least("AvgPool1d", "stride", stride_, 1);
  check_padding("AvgPool1d", k_, padding_, 1);
}
Array AvgPool1d::operator()(const Array& x) const {
  return avg_pool1d(x, k_, stride_, padding_, ceil_mode_, count_include_pad_);
}

AvgPool3d::AvgPool3d(IntTriple kernel_size, AvgPool3dOptions o)
    : k_(kernel_size),
      stride_(o.stride.value_or(kernel_size)),
      padding_(o.padding),
      ceil_mode_(o.ceil_mode),
      count_include_pad_(o.count_include_pad),
      divisor_override_(o.divisor_override) {
  check_at_least("AvgPool3d", "kernel_size", min3(k_), 1);
  check_at_least("AvgPool3d", "stride", min3(stride_), 1);
  check_padding("AvgPool3d", k_, padding_, IntTriple(1));
  if (divisor_override_) check_at_least("AvgPool3d", "divisor_override", *divisor_override_, 1);
}
Array AvgPool3d::operator()(const Array& x) const {
  return avg_pool3d(x, arr(k_), arr(stride_), arr(padding_), ceil_mode_, count_include_pad_,
                    divisor_override_);
}

AdaptiveAvgPool1d::AdaptiveAvgPool1d(int64_t output_size) : out_(output_size) {
  if (out_ < 1) throw ValueError::of("AdaptiveAvgPool1d", "output_size must be >= 1", "got {}", out_);
}
Array AdaptiveAvgPool1d::operator()(const Array& x) const { return adaptive_avg_pool1d(x, out_); }

AdaptiveAvgPool2d::AdaptiveAvgPool2d(IntPair output_size) : out_(output_size) {
  check_at_least("AdaptiveAvgPool2d", "output_size", std::min(out_.h, out_.w), 1);
}
Array AdaptiveAvgPool2d::operator()(const Array& x) const { return adaptive_avg_pool2d(x, {out_.h, out_.w}); }

AdaptiveAvgPool3d::AdaptiveAvgPool3d(IntTriple output_size) : out_(output_size) {
  check_at_least("AdaptiveAvgPool3d", "output_size", min3(out_), 1);
}
Array AdaptiveAvgPool3d::operator()(const Array& x) const {
  return adaptive_avg_pool3d(x, {out_.d, out_.h, out_.w});
}

}  // namespace kiln::nn
