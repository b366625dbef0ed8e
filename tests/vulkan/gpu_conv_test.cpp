// Convolutions on the GPU: conv1d/conv2d and their gradients on Device::gpu against the same ops
// on the CPU (stride, padding, dilation, groups, batch 1 and 3, odd sizes, strided and flipped
// operands, empty arrays, second order) in float32 and float64, and every kernel (the implicit
// GEMM's four blocks with split-k, the direct kernels) through the recording layer in float32,
// float16 and bfloat16 against float64 results. Runs on lavapipe in CI.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "kiln/core/half.h"
#include "kiln/core/vulkan/runtime/array_views.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/conv_kernels.h"
#include "kiln/core/vulkan/runtime/recorder.h"
#include "support/op_test.h"
#include "vulkan_fixture.h"

namespace kiln {
namespace {

namespace vk = detail::vk;

struct ConvCase {
  Shape x, w;
  std::array<int, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int groups = 1;
};

// Cases on both sides of choose_conv_kernel's thresholds (the ops pick the kernel); the kernel-level
// tests run every case through every kernel.
const ConvCase kCases[] = {
    {{3, 3, 7, 6}, {4, 3, 3, 3}},                               // direct (4 output channels)
    {{1, 3, 9, 8}, {4, 3, 3, 3}, {2, 2}, {1, 1}},               // direct, stride and padding
    {{3, 2, 10, 9}, {3, 2, 3, 2}, {3, 2}, {1, 2}, {2, 1}},      // direct, everything mixed
    {{3, 6, 6, 6}, {12, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 6},   // depthwise, multiplier 2
    {{3, 5, 11, 13}, {20, 5, 3, 3}, {1, 1}, {1, 1}},            // GEMM, odd sizes
    {{1, 7, 12, 11}, {17, 7, 3, 2}, {2, 2}, {0, 1}},            // GEMM, stride 2
    {{3, 4, 13, 12}, {16, 4, 3, 3}, {1, 2}, {2, 2}, {2, 2}},    // GEMM, dilation 2
    {{3, 8, 9, 7}, {32, 4, 3, 3}, {2, 1}, {1, 1}, {1, 2}, 2},   // GEMM, 2 groups
    {{1, 18, 7, 7}, {48, 6, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 3},  // GEMM, pointwise, 3 groups
    {{3, 6, 28, 28}, {16, 6, 5, 5}},                            // LeNet's conv2 at 28x28: split-k
    {{3, 17, 33, 35}, {24, 17, 3, 3}, {1, 1}, {1, 1}},          // 1000+ columns of 33x35 pixels
    {{3, 2, 4, 4}, {20, 2, 4, 4}},                              // the kernel covers the input
    {{2, 130, 6, 5}, {130, 130, 1, 1}, {2, 2}},                 // 128-wide grad_weight tiles
    {{2, 4, 128, 128}, {128, 4, 3, 3}, {1, 1}, {1, 1}},         // 128-wide forward tiles
};

std::string label(const ConvCase& k) {
  return "x " + shape_str(k.x) + " w " + shape_str(k.w) + " stride (" + std::to_string(k.stride[0]) + "," +
         std::to_string(k.stride[1]) + ") padding (" + std::to_string(k.padding[0]) + "," +
         std::to_string(k.padding[1]) + ") dilation (" + std::to_string(k.dilation[0]) + "," +
         std::to_string(k.dilation[1]) + ") groups " + std::to_string(k.groups);
}

Array run(const ConvCase& k, const Array& x, const Array& w, StreamOrDevice s) {
  return conv2d(x, w, k.stride, k.padding, k.dilation, k.groups, s);
}

vk::ConvDims dims_of(const ConvCase& k) {
  auto out = [](int64_t in, int64_t kk, int s, int p, int d) {
    return (in + 2 * p - d * (kk - 1) - 1) / s + 1;
  };
  return {.n = k.x[0],
          .c = k.x[1],
          .h = k.x[2],
          .w = k.x[3],
          .o = k.w[0],
          .kh = k.w[2],
          .kw = k.w[3],
          .oh = out(k.x[2], k.w[2], k.stride[0], k.padding[0], k.dilation[0]),
          .ow = out(k.x[3], k.w[3], k.stride[1], k.padding[1], k.dilation[1]),
          .stride = k.stride,
          .padding = k.padding,
          .dilation = k.dilation,
          .groups = k.groups};
}

int64_t test_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Array rand(const Shape& s, uint64_t seed, Dtype t = float32) {
  return test::random_array(s, t, seed, -1.0, 1.0);
}

// Lengths of the sums behind each pass's outputs (forward, grad_input, grad_weight): rounding
// differences between two correct float32 results grow with them.
std::array<int64_t, 3> sum_lengths(const vk::ConvDims& d) {
  return {d.c / d.groups * d.kh * d.kw, d.o / d.groups * d.kh * d.kw, d.n * d.oh * d.ow};
}
double tolerance(Dtype t, int64_t length) {
  return t == float64 ? 1e-12 * static_cast<double>(length + 10) : 2e-5 + 1e-7 * static_cast<double>(length);
}

const vk::ConvKernel kKernels[] = {vk::ConvKernel::gemm64x64, vk::ConvKernel::gemm128x128,
                                   vk::ConvKernel::gemm32x128, vk::ConvKernel::gemm16x256,
                                   vk::ConvKernel::direct};

const char* kernel_name(vk::ConvKernel k) {
  switch (k) {
    case vk::ConvKernel::gemm64x64:
      return "gemm 64x64";
    case vk::ConvKernel::gemm128x128:
      return "gemm 128x128";
    case vk::ConvKernel::gemm32x128:
      return "gemm 32x128";
    case vk::ConvKernel::gemm16x256:
      return "gemm 16x256";
    case vk::ConvKernel::direct:
      break;
  }
  return "direct";
}

class GpuConv : public vk::testing::VulkanTest {
 protected:
  bool has_float64() { return ctx().caps().float64; }

  // fn on the GPU must equal fn on the CPU: same shape and dtype, values within tolerance.
  static void expect_same(const std::function<Array(StreamOrDevice)>& fn, double tol,
                          const std::string& what) {
    SCOPED_TRACE(what);
    const Array cpu = fn(Device::cpu);
    const Array gpu = fn(Device::gpu);
    ASSERT_EQ(gpu.shape(), cpu.shape());
    ASSERT_EQ(gpu.dtype(), cpu.dtype());
    test::expect_close(gpu, test::values(cpu), tol, tol);
  }
};

TEST_F(GpuConv, KernelChoice) {
  std::set<vk::ConvKernel> seen;  // the kernels the ops reach with kCases, over the three passes
  bool split = false;
  for (const ConvCase& k : kCases)
    for (vk::ConvPass pass : {vk::ConvPass::forward, vk::ConvPass::grad_input, vk::ConvPass::grad_weight}) {
      const vk::ConvKernel kernel = vk::choose_conv_kernel(pass, dims_of(k), float32);
      seen.insert(kernel);
      EXPECT_EQ(vk::choose_conv_kernel(pass, dims_of(k), float64), vk::ConvKernel::direct);
      if (pass == vk::ConvPass::grad_weight) split = split || vk::conv_weight_splits(dims_of(k), kernel) > 1;
    }
  EXPECT_EQ(seen.size(), std::size(kKernels)) << "a kernel is not reached through the ops by kCases";
  EXPECT_TRUE(split) << "no case splits grad_weight's reduction";
  // Blocks follow the rows of a group's GEMM (output channels forward, input channels for
  // grad_input); depthwise convolutions and 3-channel inputs run the direct kernel.
  const auto choose = [](vk::ConvPass pass, const ConvCase& k) {
    return vk::choose_conv_kernel(pass, dims_of(k), float32);
  };
  using K = vk::ConvKernel;
  EXPECT_EQ(choose(vk::ConvPass::forward, kCases[3]), K::direct);
  EXPECT_EQ(choose(vk::ConvPass::forward, kCases[13]), K::gemm128x128);
  EXPECT_EQ(choose(vk::ConvPass::grad_weight, kCases[12]), K::gemm128x128);
  EXPECT_EQ(choose(vk::ConvPass::grad_input, ConvCase{{8, 256, 56, 56}, {256, 256, 3, 3}, {1, 1}, {1, 1}}),
            K::gemm128x128);
  EXPECT_EQ(choose(vk::ConvPass::grad_input, ConvCase{{8, 64, 56, 56}, {256, 64, 3, 3}}), K::gemm64x64);
  EXPECT_EQ(choose(vk::ConvPass::grad_input, ConvCase{{8, 24, 56, 56}, {256, 24, 3, 3}}), K::gemm32x128);
  EXPECT_EQ(choose(vk::ConvPass::grad_input, ConvCase{{8, 8, 56, 56}, {256, 8, 3, 3}}), K::gemm16x256);
  EXPECT_EQ(choose(vk::ConvPass::grad_input, ConvCase{{8, 3, 56, 56}, {256, 3, 3, 3}}), K::direct);
  EXPECT_EQ(choose(vk::ConvPass::grad_weight, ConvCase{{8, 3, 56, 56}, {8, 3, 3, 3}}), K::direct);
  // A weight gradient of a large batch splits its reduction; the direct kernel never does.
  const vk::ConvDims big_batch = dims_of(ConvCase{{256, 64, 56, 56}, {64, 64, 3, 3}, {1, 1}, {1, 1}});
  EXPECT_GT(vk::conv_weight_splits(big_batch, K::gemm64x64), 1);
  EXPECT_EQ(vk::conv_weight_splits(big_batch, K::direct), 1);
}

TEST_F(GpuConv, ForwardMatchesCpu) {
  uint64_t seed = 1;
  for (const ConvCase& k : kCases)
    for (Dtype t : {float32, float64}) {
      const Array x = rand(k.x, seed++, t), w = rand(k.w, seed++, t);
      if (t == float64 && !has_float64()) {
        EXPECT_THROW(eval(run(k, x, w, Device::gpu)), NotImplemented);
        continue;
      }
      expect_same([&](StreamOrDevice s) { return run(k, x, w, s); }, tolerance(t, sum_lengths(dims_of(k))[0]),
                  label(k) + " " + std::string(dtype_name(t)));
    }
}

TEST_F(GpuConv, GradientsMatchCpu) {
  uint64_t seed = 100;
  for (const ConvCase& k : kCases)
    for (Dtype t : {float32, float64}) {
      if (t == float64 && !has_float64()) continue;
      const Array x = rand(k.x, seed++, t), w = rand(k.w, seed++, t);
      const Array r = rand(run(k, x, w, Device::cpu).shape(), seed++, t);
      // grad of sum(conv(x, w) * r): ConvGradInput and ConvGradWeight with gy = r.
      const auto grads = [&](Device d) {
        return grad(
            [&, d](const std::vector<Array>& in) {
              return std::vector<Array>{sum(multiply(run(k, in[0], in[1], d), r, d), false, d)};
            },
            {0, 1})({x, w});
      };
      const std::vector<Array> cpu = grads(Device::cpu);
      const std::vector<Array> gpu = grads(Device::gpu);
      SCOPED_TRACE(label(k) + " " + std::string(dtype_name(t)));
      ASSERT_EQ(gpu.size(), 2u);
      const auto lengths = sum_lengths(dims_of(k));
      test::expect_close(gpu[0], test::values(cpu[0]), tolerance(t, lengths[1]), tolerance(t, lengths[1]));
      test::expect_close(gpu[1], test::values(cpu[1]), tolerance(t, lengths[2]), tolerance(t, lengths[2]));
    }
}

// Every case through every kernel, the three passes recorded directly, against the CPU's float64
// results on the same values (float32 inputs; 16-bit ones where the device has 16-bit storage).
class GpuConvKernels : public GpuConv {
 protected:
  void check(const ConvCase& k, Dtype t, vk::ConvKernel kernel, uint64_t seed) {
    const vk::ConvDims d = dims_of(k);
    const Shape ys{d.n, d.o, d.oh, d.ow};
    const Array x = rand(k.x, seed, t), w = rand(k.w, seed + 1, t), gy = rand(ys, seed + 2, t);
    const auto [y, grads] = vjp(
        [&](const std::vector<Array>& in) { return std::vector<Array>{run(k, in[0], in[1], Device::cpu)}; },
        {astype(x, float64), astype(w, float64)}, {astype(gy, float64)});
    auto out_view = [&](const Shape& s) {
      return vk::GpuView::contiguous(
          ctx().allocator().allocate(static_cast<size_t>(std::max<int64_t>(test_numel(s), 1)) * size_of(t)),
          t, s);
    };
    const vk::GpuView yv = out_view(ys), dxv = out_view(k.x), dwv = out_view(k.w);
    vk::Recorder r(ctx());
    vk::record_conv_forward(r, d, vk::array_view(x), vk::array_view(w), yv, kernel);
    vk::record_conv_grad_input(r, d, vk::array_view(gy), vk::array_view(w), dxv, kernel);
    vk::record_conv_grad_weight(r, d, vk::array_view(x), vk::array_view(gy), dwv, kernel);
    r.submit_and_wait();
    const auto lengths = sum_lengths(d);
    expect_near(read(yv), test::values(y[0]), t, lengths[0], "y");
    expect_near(read(dxv), test::values(grads[0]), t, lengths[1], "dx");
    expect_near(read(dwv), test::values(grads[1]), t, lengths[2], "dw");
  }

 private:
  std::vector<double> read(const vk::GpuView& v) {
    const size_t n = static_cast<size_t>(test_numel(v.shape));
    std::vector<double> out;
    if (v.dtype == float32) {
      for (float f : read_vector<float>(v.buffer, n)) out.push_back(f);
    } else {
      for (uint16_t b : read_vector<uint16_t>(v.buffer, n))
        out.push_back(v.dtype == float16 ? static_cast<float>(float16_t::from_bits(b))
                                         : static_cast<float>(bfloat16_t::from_bits(b)));
    }
    return out;
  }
  // 16-bit results are float32 sums rounded once to the storage type.
  static void expect_near(const std::vector<double>& got, const std::vector<double>& want, Dtype t,
                          int64_t length, const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    const double rtol = t == float16 ? 1e-3 : t == bfloat16 ? 8e-3 : 0.0;
    const double tol = tolerance(float32, length);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], tol + rtol * std::abs(want[i])) << what << " at " << i;
  }
};

TEST_F(GpuConvKernels, EveryKernelFloat32) {
  uint64_t seed = 700;
  for (const ConvCase& k : kCases)
    for (vk::ConvKernel kernel : kKernels) {
      SCOPED_TRACE(label(k) + " " + kernel_name(kernel));
      check(k, float32, kernel, seed += 3);
    }
}

TEST_F(GpuConvKernels, EveryKernelSixteenBit) {
  if (!ctx().caps().storage16) GTEST_SKIP() << "the device lacks 16-bit storage buffers";
  uint64_t seed = 800;
  for (Dtype t : {float16, bfloat16}) {
    for (const ConvCase& k : {kCases[0], kCases[3], kCases[7]})
      for (vk::ConvKernel kernel : kKernels) {
        SCOPED_TRACE(label(k) + " " + std::string(dtype_name(t)) + " " + kernel_name(kernel));
        check(k, t, kernel, seed += 3);
      }
    SCOPED_TRACE("split-k weight gradient " + std::string(dtype_name(t)));
    check(kCases[9], t, vk::ConvKernel::gemm64x64, seed += 3);
  }
}

TEST_F(GpuConv, StridedFlippedAndTransposedOperands) {
  const ConvCase k{{3, 5, 9, 8}, {20, 5, 3, 2}, {2, 1}, {1, 1}};
  // x as an (N, C, W, H) array with its last two axes swapped, w sliced with a step and flipped.
  const Array x = swapaxes(rand({3, 5, 8, 9}, 1), 2, 3);
  const Array w = slice(rand({40, 5, 3, 2}, 2), {Slice{std::nullopt, std::nullopt, -2}});
  const Array xf = slice(rand({3, 5, 9, 8}, 3), {Slice{}, Slice{}, Slice{std::nullopt, std::nullopt, -1}});
  for (const ConvCase& c : {k, ConvCase{{3, 5, 9, 8}, {4, 5, 3, 2}}}) {  // GEMM and direct
    const Array wc = slice(w, {Slice{0, c.w[0]}});
    expect_same([&](StreamOrDevice s) { return run(c, x, wc, s); }, 2e-5, "transposed x " + label(c));
    expect_same([&](StreamOrDevice s) { return run(c, xf, wc, s); }, 2e-5, "flipped x " + label(c));
    // Transposed cotangents reach ConvGradInput and ConvGradWeight as strided gy.
    const Shape ys = run(c, x, wc, Device::cpu).shape();
    const Array gy = swapaxes(rand({ys[0], ys[1], ys[3], ys[2]}, 4), 2, 3);
    const auto pullback = [&](Device d) {
      return vjp([&, d](const std::vector<Array>& in) { return std::vector<Array>{run(c, in[0], in[1], d)}; },
                 {x, wc}, {gy})
          .second;
    };
    const std::vector<Array> cpu = pullback(Device::cpu), gpu = pullback(Device::gpu);
    test::expect_close(gpu[0], test::values(cpu[0]), 2e-5, 2e-5);
    test::expect_close(gpu[1], test::values(cpu[1]), 1e-4, 1e-4);
  }
}

TEST_F(GpuConv, Conv1dMatchesCpu) {
  struct Case1 {
    Shape x, w;
    int stride = 1, padding = 0, dilation = 1, groups = 1;
  };
  const Case1 cases[] = {{{3, 3, 11}, {4, 3, 3}},
                         {{1, 4, 1001}, {32, 2, 5}, 2, 2, 1, 2},
                         {{3, 3, 15}, {3, 1, 4}, 1, 3, 2, 3},
                         {{3, 16, 40}, {16, 16, 3}, 1, 1, 3}};
  uint64_t seed = 200;
  for (const Case1& c : cases) {
    const Array x = rand(c.x, seed++), w = rand(c.w, seed++);
    const auto f = [&](StreamOrDevice s) {
      return conv1d(x, w, c.stride, c.padding, c.dilation, c.groups, s);
    };
    expect_same(f, 2e-5, "conv1d x " + shape_str(c.x) + " w " + shape_str(c.w));
    const auto dw = [&](StreamOrDevice s) {
      const Device d = std::get<Device>(s);
      return grad([&, d](const std::vector<Array>& in) {
        return std::vector<Array>{
            sum(square(conv1d(x, in[0], c.stride, c.padding, c.dilation, c.groups, d), d), false, d)};
      })({w})[0];
    };
    expect_same(dw, 2e-4, "conv1d weight gradient x " + shape_str(c.x));
  }
}

TEST_F(GpuConv, SecondOrderMatchesCpu) {
  // d/dw of |d loss/dx|^2: the vjp of ConvGradInput runs Conv and ConvGradWeight on the GPU.
  for (const ConvCase& k : {kCases[1], kCases[5]}) {
    const Array x = rand(k.x, 300), w = rand(k.w, 301);
    const auto f = [&](StreamOrDevice s) {
      const Device d = std::get<Device>(s);
      const auto g = [&, d](const std::vector<Array>& in) {
        return std::vector<Array>{sum(square(run(k, in[0], in[1], d), d), false, d)};
      };
      return grad(
          [&, d](const std::vector<Array>& in) {
            const Array gx = grad(g, {0})(in)[0];
            return std::vector<Array>{sum(square(gx, d), false, d)};
          },
          {0, 1})({x, w})[1];
    };
    expect_same(f, 1e-3, "second order " + label(k));
  }
}

TEST_F(GpuConv, EmptyArrays) {
  // No samples: y is empty and the weight gradient zeros; no input channels: y is zeros.
  const ConvCase none{{0, 3, 7, 6}, {20, 3, 3, 3}};
  const Array x0 = rand(none.x, 400), w0 = rand(none.w, 401);
  expect_same([&](StreamOrDevice s) { return run(none, x0, w0, s); }, 0, "no samples");
  const auto dw = [&](StreamOrDevice s) {
    const Device d = std::get<Device>(s);
    return grad([&, d](const std::vector<Array>& in) {
      return std::vector<Array>{sum(run(none, x0, in[0], d), false, d)};
    })({w0})[0];
  };
  expect_same(dw, 0, "weight gradient over no samples");
  const ConvCase no_channels{{2, 0, 5, 5}, {3, 0, 3, 3}};
  const Array y = run(no_channels, zeros(no_channels.x), zeros(no_channels.w), Device::gpu);
  test::expect_close(y, std::vector<double>(2 * 3 * 3 * 3, 0.0), 0, 0);
}

TEST_F(GpuConv, ErrorsFromTheRecordingLayer) {
  const ConvCase k = kCases[4];
  const vk::ConvDims d = dims_of(k);
  const Array x = rand(k.x, 500), w = rand(k.w, 501), xh = astype(x, float16), xi = astype(x, int32),
              wi = astype(w, int32), x64 = astype(x, float64), w64 = astype(w, float64);
  eval(xh, xi, wi, x64, w64);
  const Shape ys{d.n, d.o, d.oh, d.ow};
  const auto out = [&](Dtype t) {
    return vk::GpuView::contiguous(ctx().allocator().allocate(static_cast<size_t>(test_numel(ys)) * 8), t,
                                   ys);
  };
  vk::Recorder r(ctx());
  const vk::GpuView y = out(float32);
  EXPECT_THROW(vk::record_conv_forward(r, d, vk::array_view(xh), vk::array_view(w), y), ValueError);  // mixed
  EXPECT_THROW(vk::record_conv_forward(r, d, vk::array_view(w), vk::array_view(x), y),
               ShapeError);  // swapped
  vk::ConvDims bad = d;
  bad.oh += 1;
  EXPECT_THROW(vk::record_conv_forward(r, bad, vk::array_view(x), vk::array_view(w), y), ShapeError);
  bad = d;
  bad.groups = 2;  // 5 input channels do not split in two
  EXPECT_THROW(vk::record_conv_forward(r, bad, vk::array_view(x), vk::array_view(w), y), ShapeError);
  EXPECT_THROW(vk::record_conv_forward(r, d, vk::array_view(xi), vk::array_view(wi), out(int32)),
               NotImplemented);
  if (has_float64())
    EXPECT_THROW(vk::record_conv_forward(r, d, vk::array_view(x64), vk::array_view(w64), out(float64),
                                         vk::ConvKernel::gemm64x64),
                 ValueError);
  else
    EXPECT_THROW(vk::record_conv_forward(r, d, vk::array_view(x64), vk::array_view(w64), out(float64)),
                 NotImplemented);
  EXPECT_EQ(r.pending(), 0u);
}

}  // namespace
}  // namespace kiln
