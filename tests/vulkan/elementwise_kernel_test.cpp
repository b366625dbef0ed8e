// Generated elementwise kernels against the CPU: casts between every pair of dtypes against
// kiln::astype on the CPU, expressions against float64 references, broadcasting and strided views,
// fused chains against the unfused kernels, the packed storage paths and the error cases.
// Inputs come from fixed seeds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kiln/core/array.h"
#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/error.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/vulkan/runtime/elementwise.h"
#include "kiln/core/vulkan/runtime/views.h"
#include "support/dtypes.h"
#include "vulkan_fixture.h"

namespace kiln::detail::vk {
namespace {

using Bytes = std::vector<uint8_t>;

// Values of dtype `t` as raw bytes, from a fixed seed. Floats keep within `lo`..`hi` (casts to
// narrow integers are defined only in range) and every seventh element is zero.
Bytes random_bytes(Dtype t, int64_t n, uint32_t seed, double lo = -100, double hi = 100) {
  std::mt19937_64 gen(seed);
  Bytes out(static_cast<size_t>(n) * size_of(t));
  visit_dtype<kAllTypes>(t, "test", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < n; ++i) {
      T v{};
      if constexpr (std::is_same_v<T, bool>) {
        v = gen() % 2 == 1;
      } else if constexpr (std::is_integral_v<T>) {
        v = static_cast<T>(gen());  // every bit pattern: wrapping is defined
      } else {
        v = T(std::uniform_real_distribution<double>(lo, hi)(gen));
      }
      if (i % 7 == 3) v = T(0);
      std::memcpy(out.data() + i * size_of(t), &v, sizeof v);
    }
  });
  return out;
}

// A CPU array holding `bytes`.
Array cpu_array(const Bytes& bytes, Dtype t, Shape shape) {
  Array a;
  visit_dtype<kAllTypes>(t, "test", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Holder = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;
    std::vector<Holder> v(bytes.size() / sizeof(Holder));
    std::memcpy(v.data(), bytes.data(), bytes.size());
    a = Array(v, std::move(shape), t);
  });
  return a;
}

Bytes cpu_bytes(const Array& a) {
  Bytes out(static_cast<size_t>(a.size()) * size_of(a.dtype()));
  visit_dtype<kAllTypes>(a.dtype(), "test", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto v = a.to_vector<T>();
    for (size_t i = 0; i < v.size(); ++i) {
      const T x = v[i];
      std::memcpy(out.data() + i * sizeof(T), &x, sizeof(T));
    }
  });
  return out;
}

// Element i of raw bytes as a double.
double value_at(const Bytes& b, Dtype t, int64_t i) {
  double out = 0;
  visit_dtype<kAllTypes>(t, "test", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T x;
    std::memcpy(&x, b.data() + i * sizeof(T), sizeof(T));
    out = static_cast<double>(static_cast<compute_t<T>>(x));
  });
  return out;
}

int64_t strided_offset(int64_t i, const Shape& shape, const Strides& strides, int64_t offset) {
  for (size_t d = shape.size(); d-- > 0;) {
    offset += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return offset;
}

class ElementwiseKernels : public testing::VulkanTest {
 protected:
  bool supported(Dtype t) {
    const DeviceCaps& c = ctx().caps();
    return (t != int64 || c.int64) && (t != float64 || c.float64);
  }
  GpuView view(const Bytes& bytes, Dtype t, Shape shape, Strides strides = {}, int64_t offset = 0) {
    GpuView v =
        GpuView::contiguous(upload_vector(bytes.empty() ? Bytes(1) : bytes), t, std::move(shape), offset);
    if (!strides.empty()) v.strides = std::move(strides);
    return v;
  }
  GpuView output(Dtype t, Shape shape, int64_t offset = 0, int64_t extra = 0) {
    const int64_t n = std::max<int64_t>(numel(shape) + offset + extra, 1);
    return GpuView::contiguous(ctx().allocator().allocate(static_cast<size_t>(n) * size_of(t)), t,
                               std::move(shape), offset);
  }
  Bytes read(const GpuView& v, int64_t n) {
    return read_vector<uint8_t>(v.buffer, static_cast<size_t>(n) * size_of(v.dtype));
  }
  void run(const ElementwiseKernel& k, std::vector<GpuView> in, const GpuView& out,
           const ElementwiseFeatures* features = nullptr) {
    Recorder r(ctx());
    if (features)
      record_elementwise(r, k, in, out, *features);
    else
      record_elementwise(r, k, in, out);
    r.submit_and_wait();
  }
};

std::string describe(const Bytes& b, Dtype t, int64_t i) {
  return fmt::format("{} element {} = {}", dtype_name(t), i, value_at(b, t, i));
}

// Casts of every dtype pair the device stores, with the kernel's default features and with 8- and
// 16-bit dtypes packed in words, against kiln::astype on the CPU, bit for bit.
TEST_F(ElementwiseKernels, CastsBetweenAllDtypePairsMatchTheCpu) {
  const int64_t n = 1001;  // not a multiple of the workgroup, nor of 4
  const ElementwiseFeatures device = ElementwiseFeatures::of(ctx().caps());
  ElementwiseFeatures packed = device;
  packed.storage8 = packed.storage16 = false;
  uint32_t seed = 100;
  for (Dtype src : test::kAllDtypes) {
    if (!supported(src)) continue;
    for (Dtype dst : test::kAllDtypes) {
      if (!supported(dst)) continue;
      // Float sources stay where the C++ cast to dst is defined (non-negative for unsigned).
      const bool unsigned_dst = dst != bool_ && is_unsigned(dst);
      const Bytes in = random_bytes(src, n, seed++, unsigned_dst ? 0 : -127.5, 127.5);
      const Bytes want = cpu_bytes(astype(cpu_array(in, src, {n}), dst, Device::cpu));
      const ElementwiseKernel k{.inputs = {src}, .compute = dst, .out = dst, .expr = "x0"};
      const bool narrow = size_of(src) <= 2 || size_of(dst) <= 2;
      for (const ElementwiseFeatures* f :
           {&device, narrow ? &packed : static_cast<const ElementwiseFeatures*>(nullptr)}) {
        if (!f) continue;
        const GpuView out = output(dst, {n});
        run(k, {view(in, src, {n})}, out, f);
        const Bytes got = read(out, n);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(std::memcmp(got.data() + i * size_of(dst), want.data() + i * size_of(dst), size_of(dst)),
                    0)
              << dtype_name(src) << " -> " << dtype_name(dst) << (f == &packed ? " (packed)" : "") << ": "
              << describe(in, src, i) << ", got " << value_at(got, dst, i) << ", want "
              << value_at(want, dst, i);
      }
    }
  }
}

// Packed outputs at offsets inside a word keep the neighbouring bytes of the word.
TEST_F(ElementwiseKernels, PackedOutputsKeepTheirNeighbours) {
  const ElementwiseFeatures device = ElementwiseFeatures::of(ctx().caps());
  ElementwiseFeatures packed = device;
  packed.storage8 = packed.storage16 = false;
  uint32_t seed = 300;
  for (Dtype t : {bool_, uint8, int8, float16, bfloat16}) {
    for (int64_t offset : {1, 2, 3}) {
      for (int64_t n : {1, 2, 5, 258}) {
        const Bytes in = random_bytes(float32, n, seed++);
        const int64_t total = offset + n + 5;
        const Bytes before = random_bytes(t, total, seed++);
        GpuView out = GpuView::contiguous(upload_vector(before), t, {n}, offset);
        run({.inputs = {float32}, .compute = t, .out = t, .expr = "x0"}, {view(in, float32, {n})}, out,
            &packed);
        const Bytes got = read(out, total);
        const Bytes want = cpu_bytes(astype(cpu_array(in, float32, {n}), t, Device::cpu));
        const int64_t w = size_of(t);
        for (int64_t i = 0; i < total; ++i) {
          const bool inside = i >= offset && i < offset + n;
          const uint8_t* expect = inside ? want.data() + (i - offset) * w : before.data() + i * w;
          ASSERT_EQ(std::memcmp(got.data() + i * w, expect, w), 0)
              << dtype_name(t) << " offset " << offset << " n " << n << " at " << i
              << (inside ? "" : " (outside)");
        }
      }
    }
  }
}

// Dispatches of a million invocations or more have each invocation loop over several elements
// (or packed words): every element is written once, strided inputs are walked right, and packed
// outputs at an offset keep the bytes beside them.
TEST_F(ElementwiseKernels, LargeArraysLoopOverSeveralElementsPerInvocation) {
  const int64_t rows = 1031, cols = 1029;  // 1060899 elements: past 2^20, not a multiple of anything
  const int64_t n = rows * cols;
  const Bytes a = random_bytes(float32, n, 41), b = random_bytes(float32, n, 42);
  // b read transposed: [rows, cols] with strides (1, rows).
  const GpuView out = output(float32, {rows, cols});
  run({{float32, float32}, float32, float32, "x0 * 0.5 - x1"},
      {view(a, float32, {rows, cols}), view(b, float32, {rows, cols}, {1, rows})}, out);
  const Bytes got = read(out, n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = i / cols, c = i % cols;
    const double want = static_cast<double>(static_cast<float>(value_at(a, float32, i) * 0.5)) -
                        value_at(b, float32, c * rows + r);
    ASSERT_NEAR(value_at(got, float32, i), want, 1e-5 * std::abs(want) + 1e-6) << i;
  }

  ElementwiseFeatures packed = ElementwiseFeatures::of(ctx().caps());
  packed.storage8 = packed.storage16 = false;
  uint32_t seed = 43;
  for (Dtype t : {uint8, float16}) {
    const int64_t m = (int64_t{1} << 20) * (4 / size_of(t)) + 5, offset = 3, total = offset + m + 6;
    const Bytes in = random_bytes(float32, m, seed++);
    const Bytes before = random_bytes(t, total, seed++);
    GpuView o = GpuView::contiguous(upload_vector(before), t, {m}, offset);
    run({.inputs = {float32}, .compute = t, .out = t, .expr = "x0"}, {view(in, float32, {m})}, o, &packed);
    const Bytes out_bytes = read(o, total);
    const Bytes want = cpu_bytes(astype(cpu_array(in, float32, {m}), t, Device::cpu));
    const int64_t w = size_of(t);
    for (int64_t i = 0; i < total; ++i) {
      const bool inside = i >= offset && i < offset + m;
      const uint8_t* expect = inside ? want.data() + (i - offset) * w : before.data() + i * w;
      ASSERT_EQ(std::memcmp(out_bytes.data() + i * w, expect, w), 0)
          << dtype_name(t) << " at " << i << (inside ? "" : " (outside)");
    }
  }
}

// a - b + s of 32-bit values as the GPU computes them: wrapping for integers, rounded to float.
Bytes minus_plus(const Bytes& a, const Bytes& b, const Bytes& s, Dtype t, int64_t n) {
  Bytes out(static_cast<size_t>(n) * 4);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t x, y, z, r;
    std::memcpy(&x, a.data() + i * 4, 4);
    std::memcpy(&y, b.data() + i * 4, 4);
    std::memcpy(&z, s.data(), 4);
    if (t == float32) {
      float fx, fy, fz;
      std::memcpy(&fx, &x, 4);
      std::memcpy(&fy, &y, 4);
      std::memcpy(&fz, &z, 4);
      const float f = (fx - fy) + fz;
      std::memcpy(&r, &f, 4);
    } else {
      r = x - y + z;  // int32 and uint32 wrap alike
    }
    std::memcpy(out.data() + i * 4, &r, 4);
  }
  return out;
}

// The vector path of contiguous 32-bit kernels (16-byte loads and stores) against the scalar one's
// results: sizes with 1 to 3 elements past the last whole vector, outputs and inputs at offsets
// that are multiples of 4 elements (vectors) and that are not (the element-wise fallback), a
// scalar input beside the linear ones, arrays past 2^20 elements (several vectors per invocation),
// and the bytes around the output left as they were.
TEST_F(ElementwiseKernels, ContiguousWordKernelsMoveVectorsWithTailsAndOffsets) {
  struct Offsets {
    int64_t out, a, b;
  };
  const Offsets offsets[] = {{0, 0, 0}, {4, 8, 12}, {1, 0, 0}, {0, 2, 0}, {4, 4, 3}};
  uint32_t seed = 700;
  for (Dtype t : {float32, int32, uint32}) {
    for (int64_t n :
         {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{1027}, (int64_t{1} << 22) + 3}) {
      for (const Offsets& o : offsets) {
        if (n > 2000 && o.out == 0 && o.a == 0) continue;  // the large size at fewer offsets
        const Bytes a = random_bytes(t, n + o.a, seed++), b = random_bytes(t, n + o.b, seed++);
        const Bytes s = random_bytes(t, 1, seed++);
        const Bytes before = random_bytes(t, o.out + n + 5, seed++);
        const GpuView out = GpuView::contiguous(upload_vector(before), t, {n}, o.out);
        run({{t, t, t}, t, t, "x0 - x1 + x2"},
            {view(a, t, {n}, {1}, o.a), view(b, t, {n}, {1}, o.b), view(s, t, {})}, out);
        const Bytes got = read(out, o.out + n + 5);
        const Bytes want =
            minus_plus(Bytes(a.begin() + o.a * 4, a.end()), Bytes(b.begin() + o.b * 4, b.end()), s, t, n);
        const std::string what = fmt::format("{} n {} offsets {} {} {}", dtype_name(t), n, o.out, o.a, o.b);
        ASSERT_EQ(std::memcmp(got.data(), before.data(), o.out * 4), 0) << what << ": before the output";
        ASSERT_EQ(std::memcmp(got.data() + (o.out + n) * 4, before.data() + (o.out + n) * 4, 20), 0)
            << what << ": after the output";
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(std::memcmp(got.data() + (o.out + i) * 4, want.data() + i * 4, 4), 0)
              << what << ": element " << i << " " << describe(got, t, o.out + i) << " vs "
              << describe(want, t, i);
      }
    }
  }
}

// Vector kernels whose output dtype differs from the inputs' (comparisons into int32, casts) and
// unary ones, against the scalar element-wise kernels at an odd offset.
TEST_F(ElementwiseKernels, VectorKernelsOfMixedWordDtypesEqualTheElementwiseOnes) {
  const int64_t n = 4099;
  const Bytes a = random_bytes(float32, n, 801), b = random_bytes(int32, n, 802);
  const ElementwiseKernel kernels[] = {
      {{float32, int32}, float32, int32, "kiln_to_float32(x0 > x1)"},
      {{float32}, float32, uint32, "kiln_abs(x0) * 3.0"},
      {{int32, float32}, int32, float32, "kiln_floor_divide(x0, x1 + 7)"},
      {{float32}, float32, float32, "kiln_exp(x0 * 0.01)"},
      {{float32}, float32, float32, "x0 + float(j)"},  // the element's index
  };
  for (const ElementwiseKernel& k : kernels) {
    std::vector<GpuView> aligned, odd;
    for (size_t i = 0; i < k.inputs.size(); ++i) {
      const Bytes& src = k.inputs[i] == float32 ? a : b;
      aligned.push_back(view(src, k.inputs[i], {n}));
      Bytes shifted(4, 0);
      shifted.insert(shifted.end(), src.begin(), src.end());
      odd.push_back(view(shifted, k.inputs[i], {n}, {1}, 1));  // offset 1: the element-wise kernel
    }
    const GpuView vec = output(k.out, {n}), scalar = output(k.out, {n}, 1);
    run(k, aligned, vec);
    run(k, odd, scalar);
    const Bytes got = read(vec, n), want = read(scalar, n + 1);
    ASSERT_EQ(std::memcmp(got.data(), want.data() + 4, static_cast<size_t>(n) * 4), 0) << k.expr;
  }
}

struct ExprCase {
  const char* name;
  ElementwiseKernel kernel;
  std::function<double(const std::vector<double>&)> reference;
  double lo = -3, hi = 3;
};

// Rounds a float64 reference as storing it in `t` does.
double stored(double v, Dtype t) {
  return value_at(cpu_bytes(astype(Array(std::vector<double>{v}, {1}), t, Device::cpu)), t, 0);
}

TEST_F(ElementwiseKernels, UnaryBinaryTernaryExpressionsMatchFloat64References) {
  const ExprCase cases[] = {
      {"exp f32", {{float32}, float32, float32, "exp(x0)"}, [](auto& x) { return std::exp(x[0]); }},
      {"tanh f16",
       {{float16}, float32, float16, "kiln_tanh(x0)"},
       [](auto& x) { return std::tanh(x[0]); },
       -20,
       20},
      {"mul-add bf16",
       {{bfloat16, bfloat16}, float32, bfloat16, "x0 * x1 + 2.0"},
       [](auto& x) { return x[0] * x[1] + 2.0; }},
      {"mixed f16 i32 -> f32",
       {{float16, int32}, float32, float32, "x0 - x1 / 4.0"},
       [](auto& x) { return x[0] - x[1] / 4.0; }},
      {"where f32",
       {{bool_, float32, float32}, float32, float32, "(x0 != 0.0) ? x1 : x2"},
       [](auto& x) { return x[0] != 0 ? x[1] : x[2]; }},
      {"compare -> bool",
       {{float32, float32}, float32, bool_, "x0 < x1"},
       [](auto& x) { return x[0] < x[1] ? 1.0 : 0.0; }},
      {"int32 arithmetic",
       {{int32, int32}, int32, int32, "x0 * 3 - x1"},
       [](auto& x) { return x[0] * 3 - x[1]; }},
      {"uint8 wraps",
       {{uint8, uint8}, uint8, uint8, "x0 + x1"},
       [](auto& x) { return std::fmod(x[0] + x[1], 256.0); }},
      {"int8 to f32 compute",
       {{int8, float32, uint32}, float32, float32, "max(x0, x1) + x2 * 0.5"},
       [](auto& x) { return std::max(x[0], x[1]) + x[2] * 0.5; }},
      {"f64 mul-add",
       {{float64, float64}, float64, float64, "x0 * x1 + 1.0"},
       [](auto& x) { return x[0] * x[1] + 1.0; }},
      {"int64 from int32", {{int32, int64}, int64, int64, "x0 * x1"}, [](auto& x) { return x[0] * x[1]; }},
  };
  const int64_t n = 3001;
  uint32_t seed = 500;
  for (const ExprCase& c : cases) {
    const ElementwiseKernel& k = c.kernel;
    if (!supported(k.out) || !supported(k.compute) ||
        !std::ranges::all_of(k.inputs, [&](Dtype t) { return supported(t); }))
      continue;
    std::vector<Bytes> in;
    std::vector<GpuView> views;
    for (Dtype t : k.inputs) {
      // Small integers, so that int32 and int64 products stay exact in double.
      Bytes b = is_integral(t) && size_of(t) > 1
                    ? cpu_bytes(astype(cpu_array(random_bytes(int8, n, seed++), int8, {n}), t, Device::cpu))
                    : random_bytes(t, n, seed++, c.lo, c.hi);
      views.push_back(view(b, t, {n}));
      in.push_back(std::move(b));
    }
    const GpuView out = output(k.out, {n});
    run(k, views, out);
    const Bytes got = read(out, n);
    for (int64_t i = 0; i < n; ++i) {
      std::vector<double> x;
      for (size_t j = 0; j < in.size(); ++j) x.push_back(stored(value_at(in[j], k.inputs[j], i), k.compute));
      const double want = c.reference(x);
      const double g = value_at(got, k.out, i);
      const double wanted = stored(want, k.out);
      // float32 transcendental functions are not correctly rounded on GPUs: a few ulps. GLSL lets a
      // driver fuse a * b + c into one fma (NVIDIA's does, lavapipe's does not): in float64 the
      // unfused product's rounding, half an ulp of |a * b|, plus the sum's.
      double magnitude = 1.0;
      for (double v : x) magnitude *= std::abs(v);
      const double tol = k.out == float32   ? 4e-6 * std::abs(want) + 1e-6
                         : k.out == float64 ? 0x1p-52 * (std::abs(want) + magnitude)
                                            : 0.0;
      if (k.out == float16 || k.out == bfloat16) {
        const double ulp = (k.out == float16 ? 1.0 / 1024 : 1.0 / 128) * std::max(std::abs(want), 1e-4);
        ASSERT_LE(std::abs(g - want), ulp) << c.name << " at " << i;
      } else {
        ASSERT_LE(std::abs(g - wanted), tol) << c.name << " at " << i << ": got " << g << ", want " << wanted;
      }
    }
  }
}

// Broadcast inputs of lower rank, explicit zero strides, negative strides and offsets.
TEST_F(ElementwiseKernels, BroadcastingAndStridedViews) {
  const Shape shape = {3, 4, 5};
  const Bytes a = random_bytes(float32, 4, 1);    // shape [4, 1]: lower rank, broadcast twice
  const Bytes b = random_bytes(float32, 100, 2);  // [3, 4, 5] walked backwards along axis 0
  const Bytes c = random_bytes(float32, 4, 3);    // [5] read with stride 0: one value
  const Bytes d = random_bytes(int32, 64, 4);     // [3, 1, 5]: strides (-20, -, 2), offset
  const GpuView va = view(a, float32, {4, 1});
  const GpuView vb = view(b, float32, shape, {-20, 5, 1}, 60);
  const GpuView vc = view(c, float32, {5}, {0}, 2);
  const GpuView vd = view(d, int32, {3, 1, 5}, {-20, 0, 2}, 41);
  const GpuView out = output(float32, shape);
  run({{float32, float32, float32, int32}, float32, float32, "x0 * x1 - x2 + x3"}, {va, vb, vc, vd}, out);
  const Bytes got = read(out, 60);
  for (int64_t i = 0; i < 60; ++i) {
    const int64_t i0 = i / 20, i1 = (i / 5) % 4, i2 = i % 5;
    const double want = value_at(a, float32, i1) * value_at(b, float32, 60 - 20 * i0 + 5 * i1 + i2) -
                        value_at(c, float32, 2) + value_at(d, int32, 41 - 20 * i0 + 2 * i2);
    ASSERT_NEAR(value_at(got, float32, i), want, 1e-5 * std::abs(want) + 1e-5) << i;
  }
}

// A chain of three float16 steps fused into one kernel equals the three unfused kernels, bit for
// bit: each step rounds to float16 as storing the unfused result does.
TEST_F(ElementwiseKernels, FusedChainEqualsUnfusedKernels) {
  const int64_t n = 777;
  const Bytes a = random_bytes(float16, n, 11, -2, 2), b = random_bytes(float16, n, 12, -2, 2);
  const GpuView va = view(a, float16, {n}), vb = view(b, float16, {n});
  const GpuView t0 = output(float16, {n}), t1 = output(float16, {n}), unfused = output(float16, {n});
  const GpuView fused = output(float16, {n});
  {
    Recorder r(ctx());
    const std::vector<GpuView> in0 = {va}, in1 = {t0, vb}, in2 = {t1, va};
    record_elementwise(r, {{float16}, float32, float16, "exp(x0)"}, in0, t0);
    record_elementwise(r, {{float16, float16}, float32, float16, "x0 * x1"}, in1, t1);
    record_elementwise(r, {{float16, float16}, float32, float16, "(x0 > 1.0) ? x0 : x1"}, in2, unfused);
    const ElementwiseKernel chain{
        .inputs = {float16, float16},
        .compute = float32,
        .out = float16,
        .expr = "t2",
        .steps = {{float16, "exp(x0)"}, {float16, "t0 * x1"}, {float16, "(t1 > 1.0) ? t1 : x0"}}};
    const std::vector<GpuView> in = {va, vb};
    record_elementwise(r, chain, in, fused);
    r.submit_and_wait();
  }
  EXPECT_EQ(read(fused, n), read(unfused, n));
  // Steps may also mix dtypes through the raw values v<i> and kiln_to_<dtype>.
  const GpuView mixed = output(int32, {n});
  run({.inputs = {float16, float16},
       .compute = float32,
       .out = int32,
       .expr = "t1 + kiln_to_int32(t0)",
       .steps = {{bool_, "v0 > v1"}, {int32, "kiln_to_int32(v0 * 10.0)"}}},
      {va, vb}, mixed);
  const Bytes got = read(mixed, n);
  for (int64_t i = 0; i < n; ++i) {
    const double x = value_at(a, float16, i), y = value_at(b, float16, i);
    ASSERT_EQ(value_at(got, int32, i), std::trunc(static_cast<float>(x) * 10.0f) + (x > y ? 1 : 0)) << i;
  }
}

// A kernel reaches its buffers through device addresses in its push constants where the device has
// them and they fit beside the index words, else through descriptors; both forms write the same
// bits, for vector, strided and broadcast, packed and native narrow dtypes at offsets.
TEST_F(ElementwiseKernels, AddressedAndDescriptorFormsWriteTheSameBits) {
  const ElementwiseFeatures device = ElementwiseFeatures::of(ctx().caps());
  if (!ctx().caps().buffer_device_address) GTEST_SKIP() << "the device has no buffer device addresses";
  // KILN_VULKAN_ELEMENTWISE_DESCRIPTORS=1 (the elementwise_descriptors ctest pass) turns addresses off.
  EXPECT_EQ(device.addresses, !ctx().options().elementwise_descriptors);
  const Shape shape = {3, 4, 5};
  const int64_t n = 1001;
  const Bytes a = random_bytes(float32, n, 51), b = random_bytes(float32, 100, 52),
              h = random_bytes(float16, n, 53, -4, 4), u = random_bytes(uint8, n, 54, 0, 255);
  struct Case {
    std::string name;
    ElementwiseKernel kernel;
    std::vector<GpuView> inputs;
    Dtype out;
    Shape shape;
    int64_t offset;
    bool packed;
    bool addressed;  // whether the form with addresses on uses them
  };
  ElementwiseFeatures packed = device;
  packed.storage8 = packed.storage16 = false;
  const Shape rank8 = {2, 3, 2, 3, 2, 2, 3, 2};
  Strides reversed(8);
  for (int64_t d = 0, st = 1; d < 8; ++d) reversed[d] = st, st *= rank8[d];
  const Bytes big = random_bytes(float32, numel(rank8), 55);
  const std::vector<Case> cases = {
      {"vector with a scalar",
       {{float32, float32}, float32, float32, "x0 * x1 + 0.5"},
       {view(a, float32, {n}), view(b, float32, {}, {}, 7)},
       float32,
       {n},
       4,
       false,
       true},
      {"strided and broadcast",
       {{float32, float32, float32}, float32, float32, "x0 * x1 - x2"},
       {view(a, float32, {4, 1}), view(b, float32, shape, {-20, 5, 1}, 60), view(b, float32, {5}, {0}, 2)},
       float32,
       shape,
       0,
       false,
       true},
      {"packed float16 at an offset",
       {{float16, uint8}, float32, float16, "x0 * x1"},
       {view(h, float16, {n - 3}, {}, 3), view(u, uint8, {n - 3})},
       float16,
       {n - 3},
       3,
       true,
       true},
      {"native narrow dtypes",
       {{uint8, float16}, float32, int8, "x0 - x1"},
       {view(u, uint8, {n}), view(h, float16, {n})},
       int8,
       {n},
       1,
       false,
       true},
      // 3 x 2 words of addresses and 28 index words: more than the 32 push constant words.
      {"index words that leave no room",
       {{float32, float32}, float32, float32, "x0 + x1"},
       {view(big, float32, rank8, reversed), view(big, float32, rank8, reversed)},
       float32,
       rank8,
       0,
       false,
       false},
  };
  for (const Case& c : cases) {
    Bytes results[2];
    for (bool addresses : {false, true}) {
      ElementwiseFeatures f = c.packed ? packed : device;
      f.addresses = addresses;
      const int64_t total = numel(c.shape) + c.offset + 2;
      const GpuView out =
          GpuView::contiguous(upload_vector(random_bytes(c.out, total, 56)), c.out, c.shape, c.offset);
      run(c.kernel, c.inputs, out, &f);
      EXPECT_EQ(last_elementwise_addressed(), addresses && c.addressed) << c.name;
      results[addresses] = read(out, total);
    }
    EXPECT_EQ(results[0], results[1]) << c.name;
  }
}

TEST_F(ElementwiseKernels, EmptyAndOneElementArrays) {
  Recorder r(ctx());
  const Bytes one = random_bytes(float32, 1, 21), two = random_bytes(float32, 1, 22);
  const std::vector<GpuView> empty_in = {view({}, float32, {0, 3})};
  record_elementwise(r, {{float32}, float32, float32, "exp(x0)"}, empty_in, output(float32, {0, 3}));
  EXPECT_EQ(r.pending(), 0u);  // nothing to do, nothing recorded
  for (const Shape& s : {Shape{}, Shape{1, 1, 1}}) {
    const GpuView out = output(float32, s);
    run({{float32, float32}, float32, float32, "x0 - x1"}, {view(one, float32, s), view(two, float32, {})},
        out);
    EXPECT_FLOAT_EQ(static_cast<float>(value_at(read(out, 1), float32, 0)),
                    static_cast<float>(value_at(one, float32, 0) - value_at(two, float32, 0)));
  }
}

// Rank 8 after merging: transposed (unmergeable) inputs, with the index words in push constants
// (two strided inputs) and in a buffer (three), on mapped memory and through staging.
TEST_F(ElementwiseKernels, Rank8StridedInputs) {
  const Shape shape = {2, 3, 2, 3, 2, 2, 3, 2};
  const int64_t n = numel(shape);
  Strides reversed(8);  // the transposed layout: the last dim varies slowest
  int64_t s = 1;
  for (size_t d = 0; d < 8; ++d) reversed[d] = s, s *= shape[d];
  const Bytes a = random_bytes(float32, n, 31), b = random_bytes(float32, n, 32),
              c = random_bytes(int8, n, 33);
  auto check = [&](const Bytes& got, bool three) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = strided_offset(i, shape, reversed, 0);
      const double want =
          value_at(a, float32, t) + value_at(b, float32, t) * (three ? value_at(c, int8, t) : 1.0);
      ASSERT_NEAR(value_at(got, float32, i), want, 1e-5 * std::abs(want) + 1e-5) << i;
    }
  };
  {
    const GpuView out2 = output(float32, shape), out3 = output(float32, shape);
    run({{float32, float32}, float32, float32, "x0 + x1"},
        {view(a, float32, shape, reversed), view(b, float32, shape, reversed)}, out2);
    run({{float32, float32, int8}, float32, float32, "x0 + x1 * x2"},
        {view(a, float32, shape, reversed), view(b, float32, shape, reversed),
         view(c, int8, shape, reversed)},
        out3);
    check(read(out2, n), false);
    check(read(out3, n), true);
  }
  // Nine dims that do not merge are refused.
  Shape nine = shape;
  nine.push_back(2);
  Strides nine_strides = reversed;
  nine_strides.push_back(s);
  const Bytes big = random_bytes(float32, 2 * n, 34);
  Recorder r(ctx());
  const std::vector<GpuView> in9 = {view(big, float32, nine, nine_strides)};
  EXPECT_THROW(record_elementwise(r, {{float32}, float32, float32, "x0"}, in9, output(float32, nine)),
               NotImplemented);

  // Through staging: the index buffer is copied to device memory inside the recording.
  ContextOptions o = ContextOptions::from_env();
  o.cache_dir.clear();
  o.force_staging = true;
  auto staged = Context::create(o);
  {
    auto put = [&](const Bytes& v, Dtype t) {
      BufferPtr buf = staged->allocator().allocate(v.size());
      upload(*staged, buf, v.data(), v.size());
      return GpuView{buf, t, shape, reversed, 0};
    };
    const std::vector<GpuView> in = {put(a, float32), put(b, float32), put(c, int8)};
    const GpuView out = GpuView::contiguous(staged->allocator().allocate(n * 4), float32, shape);
    Recorder sr(*staged);
    record_elementwise(sr, {{float32, float32, int8}, float32, float32, "x0 + x1 * x2"}, in, out);
    sr.submit_and_wait();
    Bytes got(n * 4);
    readback(*staged, out.buffer, got.data(), got.size());
    check(got, true);
  }
}

TEST_F(ElementwiseKernels, SevenInputsAndNone) {
  const int64_t n = 300;
  std::vector<Bytes> in;
  std::vector<GpuView> views;
  for (uint32_t i = 0; i < 7; ++i) {
    in.push_back(random_bytes(float32, n, 40 + i));
    views.push_back(view(in.back(), float32, {n}));
  }
  const GpuView out = output(float32, {n});
  run({std::vector<Dtype>(7, float32), float32, float32, "x0 + x1 + x2 + x3 + x4 + x5 + x6"}, views, out);
  const Bytes got = read(out, n);
  for (int64_t i = 0; i < n; ++i) {
    double want = 0;
    for (const Bytes& b : in) want += value_at(b, float32, i);
    ASSERT_NEAR(value_at(got, float32, i), want, 1e-4) << i;
  }
  // No inputs: a fill.
  const GpuView filled = output(int32, {n});
  run({{}, int32, int32, "7 - 9"}, {}, filled);
  const Bytes f = read(filled, n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(value_at(f, int32, i), -2) << i;
}

TEST_F(ElementwiseKernels, BadKernelsAndViewsAreClearErrors) {
  Recorder r(ctx());
  const Bytes x = random_bytes(float32, 12, 51);
  const std::vector<GpuView> in = {view(x, float32, {3, 4})};
  const GpuView out = output(float32, {3, 4});
  const ElementwiseKernel good{{float32}, float32, float32, "x0"};
  auto message = [&](const ElementwiseKernel& k, std::span<const GpuView> v, const GpuView& o,
                     const ElementwiseFeatures* f = nullptr) -> std::string {
    try {
      f ? record_elementwise(r, k, v, o, *f) : record_elementwise(r, k, v, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  // A snippet that does not compile shows the generated line.
  const std::string bad = message({{float32}, float32, float32, "no_such_function(x0)"}, in, out);
  EXPECT_NE(bad.find("no_such_function"), std::string::npos) << bad;
  EXPECT_NE(bad.find("|   return kiln_to_float32(no_such_function(x0));"), std::string::npos) << bad;
  EXPECT_THROW(record_elementwise(r, {{float32}, float32, float32, "x0 +"}, in, out), ValueError);
  // Dtypes, counts, shapes, layouts.
  EXPECT_THROW(record_elementwise(r, {{int32}, float32, float32, "x0"}, in, out), ValueError);
  EXPECT_THROW(record_elementwise(r, {{float32, float32}, float32, float32, "x0"}, in, out), ValueError);
  EXPECT_THROW(record_elementwise(r, good, in, output(int32, {3, 4})), ValueError);
  EXPECT_THROW(record_elementwise(r, good, in, output(float32, {3, 5})), ShapeError);
  EXPECT_THROW(record_elementwise(r, good, in, output(float32, {4})), ShapeError);
  GpuView transposed = output(float32, {4, 3});
  transposed.shape = {3, 4};
  transposed.strides = {1, 3};
  EXPECT_THROW(record_elementwise(r, good, in, transposed), ValueError);
  GpuView outside = in[0];
  outside.offset = 1000;
  EXPECT_THROW(record_elementwise(r, good, std::vector<GpuView>{outside}, out), ValueError);
  EXPECT_THROW(record_elementwise(r, {{float32}, float32, float32, ""}, in, out), ValueError);
  // 64-bit dtypes without the device's feature name the dtype and the feature.
  ElementwiseFeatures no64 = ElementwiseFeatures::of(ctx().caps());
  no64.int64 = no64.float64 = false;
  const std::string i64 = message({{float32}, int64, float32, "x0"}, in, out, &no64);
  EXPECT_NE(i64.find("int64"), std::string::npos) << i64;
  EXPECT_NE(i64.find("shaderInt64"), std::string::npos) << i64;
  const std::string f64 = message({{float32}, float32, float64, "x0"}, in, output(float64, {3, 4}), &no64);
  EXPECT_NE(f64.find("shaderFloat64"), std::string::npos) << f64;
  EXPECT_EQ(r.pending(), 0u);
}

}  // namespace
}  // namespace kiln::detail::vk
