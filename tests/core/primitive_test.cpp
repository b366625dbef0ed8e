// A primitive defined outside the library, with two outputs: exercises sibling groups in eval and
// in vjp (an output dropped before eval, cotangents for one or both outputs), params-based
// equivalence and printing.
#include <gtest/gtest.h>

#include <cmath>

#include "support/op_test.h"

namespace kiln {
namespace {

// (sin(x) * scale, cos(x) * scale) in one pass.
class SinCos final : public PrimitiveWithParams<SinCos> {
 public:
  SinCos(Stream s, double scale) : PrimitiveWithParams(s), scale_(scale) {}
  const char* name() const override { return "SinCos"; }
  auto params() const { return std::tie(scale_); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    return {in[0].shape(), in[0].shape()};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const Array x = contiguous(in[0]);
    x.eval();
    out[0].allocate();
    out[1].allocate();
    const double* v = x.strided_data<double>();
    double* s = out[0].strided_data<double>();
    double* c = out[1].strided_data<double>();
    for (int64_t i = 0; i < x.size(); ++i) {
      s[i] = std::sin(v[i]) * scale_;
      c[i] = std::cos(v[i]) * scale_;
    }
    ++evaluations;
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    // d sin = cos, d cos = -sin: both outputs already hold them (times scale).
    return {a.cotangents[0] * a.outputs[1] - a.cotangents[1] * a.outputs[0]};
  }
  static inline int evaluations = 0;

 private:
  double scale_;
};

// SinCos has no eval_gpu, so it runs on the CPU whatever the default device is; in the gpu. pass
// its inputs and the rest of each graph (the vjp's ops) are on the GPU.
std::vector<Array> sincos(const Array& x, double scale = 1.0) {
  return Array::make_many({x.shape(), x.shape()}, {float64, float64},
                          std::make_shared<SinCos>(to_stream(Device::cpu), scale), {x});
}

TEST(CustomPrimitive, BothOutputsComputedInOnePass) {
  const Array x({0.1, 0.7, -1.2});
  auto sc = sincos(x, 2.0);
  SinCos::evaluations = 0;
  eval(sc);
  EXPECT_EQ(SinCos::evaluations, 1);
  test::expect_close(sc[0], {2 * std::sin(0.1), 2 * std::sin(0.7), 2 * std::sin(-1.2)});
  test::expect_close(sc[1], {2 * std::cos(0.1), 2 * std::cos(0.7), 2 * std::cos(-1.2)});
  // Evaluating the sibling later does not run the primitive again.
  sc[1].eval();
  EXPECT_EQ(SinCos::evaluations, 1);
}

TEST(CustomPrimitive, DroppedSiblingDoesNotBreakEval) {
  const Array x({0.3, 0.4});
  Array s = sincos(x)[0];  // the cos output is dropped before eval
  test::expect_close(s, {std::sin(0.3), std::sin(0.4)});
}

TEST(CustomPrimitive, GradientThroughOneOrBothOutputs) {
  const Array x = test::random_array({5}, float64, 1);
  test::check_vjp([](const std::vector<Array>& a) { return sincos(a[0], 1.5)[0]; }, {x});
  test::check_vjp([](const std::vector<Array>& a) { return sincos(a[0], 1.5)[1]; }, {x});
  test::check_vjp(
      [](const std::vector<Array>& a) {
        auto sc = sincos(a[0], 0.5);
        return sc[0] * sc[1] + exp(sc[1]);
      },
      {x});
}

TEST(CustomPrimitive, EquivalenceAndPrintComeFromParams) {
  const SinCos a(to_stream({}), 2.0), b(to_stream({}), 2.0), c(to_stream({}), 3.0);
  EXPECT_TRUE(a.is_equivalent(b));
  EXPECT_FALSE(a.is_equivalent(c));
  std::ostringstream os;
  a.print(os);
  EXPECT_EQ(os.str(), "SinCos(2)");
}

TEST(CustomPrimitive, MissingRulesSayWhichAndWhat) {
  const SinCos p(to_stream({}), 1.0);
  try {
    p.jvp({});
    FAIL();
  } catch (const NotImplemented& e) {
    EXPECT_STREQ(e.what(), "[SinCos] jvp is not implemented");
  }
}

}  // namespace
}  // namespace kiln
