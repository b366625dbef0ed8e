// Adam's fused update primitive (optim/fused_adam.cpp): equal to the formula in ops for float32,
// float64 and the strided and non-fused (bfloat16) cases, with and without amsgrad; its vjp, jvp
// and vmap rules agree with finite differences and with a loop over examples.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>

#include "kiln/core/transforms.h"
#include "kiln/optim/fused_adam_impl.h"
#include "kiln/optim/optimizer.h"
#include "support/op_test.h"

namespace kiln::optim::detail {
namespace {

using test::expect_close;
using test::random_array;

constexpr AdamConstants kPlain{0.9, 0.999, 1e-8, false};
constexpr AdamConstants kAmsgrad{0.8, 0.9, 1e-4, true};

// The update written in ops, as optim::Adam (and AdamW, decay = 1 - lr wd) computed it before the
// fused primitive.
std::vector<Array> formula(const AdamConstants& c, const Array& p, const Array& g, const Array& m,
                           const Array& v, const std::optional<Array>& vmax, double step, double bc2,
                           std::optional<double> decay = std::nullopt) {
  const Array m1 = lerp(m, g, 1.0 - c.beta1);
  const Array v1 = c.beta2 * v + (1.0 - c.beta2) * (g * g);
  std::vector<Array> out{Array{}, m1, v1};
  Array second = v1;
  if (c.amsgrad) out.push_back(second = maximum(*vmax, v1));
  const Array base = decay ? p * *decay : p;
  out[0] = base - step * (m1 / (sqrt(second) / bc2 + c.eps));
  return out;
}

struct Operands {
  Array p, g, m, v, vmax;
};
Operands operands(const Shape& shape, Dtype t, uint64_t seed) {
  return {random_array(shape, t, seed), random_array(shape, t, seed + 1),
          random_array(shape, t, seed + 2, -0.1, 0.1), random_array(shape, t, seed + 3, 0.0, 0.05),
          random_array(shape, t, seed + 4, 0.0, 0.05)};
}

TEST(FusedAdam, MatchesFormulaInOps) {
  uint64_t seed = 10;
  for (const AdamConstants& c : {kPlain, kAmsgrad})
    for (std::optional<double> decay : {std::optional<double>(), std::optional<double>(0.993)})
      for (Dtype t : {float32, float64, bfloat16}) {
        const Operands o = operands({37, 129}, t, seed += 10);
        const std::optional<Array> vmax = c.amsgrad ? std::optional<Array>(o.vmax) : std::nullopt;
        const std::vector<Array> got = adam_update(c, o.p, o.g, o.m, o.v, vmax, 0.013, 0.21, decay);
        const std::vector<Array> want = formula(c, o.p, o.g, o.m, o.v, vmax, 0.013, 0.21, decay);
        ASSERT_EQ(got.size(), want.size());
        ASSERT_TRUE(got[0].has_primitive());
        // bfloat16 takes the ops (the fused loop is float32 and float64 only).
        EXPECT_EQ(std::string(got[0].primitive()->name()) == "FusedAdamStep", t != bfloat16);
        const double tol = t == float64 ? 1e-14 : t == float32 ? 2e-6 : 1e-2;
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_EQ(got[i].dtype(), t);
          expect_close(got[i], want[i], tol, tol);
        }
      }
}

TEST(FusedAdam, StridedOperands) {
  const Operands o = operands({24, 31}, float32, 70);
  const Array pt = transpose(o.p), gt = transpose(o.g), mt = transpose(o.m), vt = transpose(o.v);
  const std::vector<Array> got = adam_update(kPlain, pt, gt, mt, vt, std::nullopt, 0.01, 0.5);
  const std::vector<Array> want = formula(kPlain, pt, gt, mt, vt, std::nullopt, 0.01, 0.5);
  for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], want[i], 2e-6, 2e-6);
}

// The address of an evaluated row-contiguous array's first element.
const void* address(const Array& a) {
  return a.dtype() == float64 ? (const void*)a.data<double>() : a.data<float>();
}

// When the step's inputs are its only holders (a training loop that replaced the parameter and its
// state with this step's outputs), the outputs take their buffers and the values are unchanged.
TEST(FusedAdam, WritesOverParameterAndStateNothingElseHolds) {
  uint64_t seed = 150;
  for (const AdamConstants& c : {kPlain, kAmsgrad})
    for (Dtype t : {float32, float64}) {
      Operands o = operands({33, 65}, t, seed += 10);
      std::optional<Array> vmax0 = c.amsgrad ? std::optional<Array>(o.vmax) : std::nullopt;
      std::vector<Array> want = formula(c, o.p, o.g, o.m, o.v, vmax0, 0.013, 0.21, 0.99);
      eval(want);
      vmax0.reset();  // want holds its values now
      std::vector<const void*> before{address(o.p), address(o.m), address(o.v)};
      if (c.amsgrad) before.push_back(address(o.vmax));
      std::vector<Array> got = [&] {
        const std::optional<Array> vmax = c.amsgrad ? std::optional<Array>(std::move(o.vmax)) : std::nullopt;
        o.vmax = Array{};
        return adam_update(c, std::exchange(o.p, Array{}), o.g, std::exchange(o.m, Array{}),
                           std::exchange(o.v, Array{}), vmax, 0.013, 0.21, 0.99);
      }();
      eval(got);
      ASSERT_EQ(got.size(), before.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(address(got[i]), before[i]) << "output " << i;
        expect_close(got[i], want[i], 2e-6, 2e-6);
      }
    }
}

// A parameter someone still holds keeps its values; the moments nobody holds are still reused.
TEST(FusedAdam, CopiesWhatIsHeldElsewhere) {
  Operands o = operands({40, 17}, float32, 200);
  const Array held = o.p;
  const std::vector<float> held_values = held.to_vector<float>();
  std::vector<Array> want = formula(kPlain, o.p, o.g, o.m, o.v, std::nullopt, 0.02, 0.3);
  eval(want);
  const void* m_before = address(o.m);
  std::vector<Array> got = adam_update(kPlain, std::exchange(o.p, Array{}), o.g, std::exchange(o.m, Array{}),
                                       std::exchange(o.v, Array{}), std::nullopt, 0.02, 0.3);
  eval(got);
  EXPECT_NE(address(got[0]), address(held));
  EXPECT_EQ(address(got[1]), m_before);
  EXPECT_EQ(held.to_vector<float>(), held_values);
  for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], want[i], 2e-6, 2e-6);
}

// Differentiating through the update (e.g. for learned learning rates) still works.
TEST(FusedAdam, VjpMatchesFiniteDifferences) {
  for (const AdamConstants& c : {kPlain, kAmsgrad}) {
    const Operands o = operands({3, 5}, float64, 90);
    const auto f = [c](const std::vector<Array>& in) {
      const std::optional<Array> vmax = c.amsgrad ? std::optional<Array>(in[4]) : std::nullopt;
      const std::vector<Array> out = adam_update(c, in[0], in[1], in[2], in[3], vmax, 0.05, 0.3);
      Array total = out[0] + 2.0 * out[1] + 3.0 * out[2];
      if (c.amsgrad) total = total + out[3];
      return total;
    };
    test::check_vjp(f, {o.p, o.g, o.m, o.v, o.vmax}, 1e-6, 1e-5);
  }
  // AdamW's decay is an input too: the update is differentiable in it (a learned decay).
  const Operands o = operands({3, 5}, float64, 95);
  const auto decayed = [](const std::vector<Array>& in) {
    const std::vector<Array> out = adam_update(kPlain, in[0], in[1], in[2], in[3], std::nullopt,
                                               full({}, 0.05, float64), full({}, 0.3, float64), in[4]);
    EXPECT_EQ(std::string(out[0].primitive()->name()), "FusedAdamStep");
    return out[0] + 2.0 * out[1];
  };
  test::check_vjp(decayed, {o.p, o.g, o.m, o.v, full({}, 0.98, float64)}, 1e-6, 1e-5);
}

TEST(FusedAdam, JvpMatchesVjpFormula) {
  const Operands o = operands({4, 6}, float64, 110);
  const Operands t = operands({4, 6}, float64, 120);
  const ArrayFn fused = [](const std::vector<Array>& in) {
    return adam_update(kPlain, in[0], in[1], in[2], in[3], std::nullopt, 0.02, 0.4);
  };
  const ArrayFn ops = [](const std::vector<Array>& in) {
    return formula(kPlain, in[0], in[1], in[2], in[3], std::nullopt, 0.02, 0.4);
  };
  const auto got = jvp(fused, {o.p, o.g, o.m, o.v}, {t.p, t.g, t.m, t.v}).second;
  const auto want = jvp(ops, {o.p, o.g, o.m, o.v}, {t.p, t.g, t.m, t.v}).second;
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], want[i], 1e-12, 1e-12);
}

TEST(FusedAdam, VmapEqualsLoop) {
  const Operands o = operands({5, 7, 3}, float32, 130);
  const Array p_shared = random_array({7, 3}, float32, 140);  // unbatched: shared by every example
  const ArrayFn f = [](const std::vector<Array>& in) {
    return adam_update(kAmsgrad, in[0], in[1], in[2], in[3], in[4], 0.03, 0.6);
  };
  const std::vector<Array> batched = vmap(f, {-1, 0, 0, 0, 0})({p_shared, o.g, o.m, o.v, o.vmax});
  for (int64_t b = 0; b < 5; ++b) {
    auto at = [b](const Array& a) { return squeeze(slice(a, {Slice{b, b + 1}}), 0); };
    const std::vector<Array> one = f({p_shared, at(o.g), at(o.m), at(o.v), at(o.vmax)});
    for (size_t i = 0; i < one.size(); ++i) expect_close(at(batched[i]), one[i], 1e-6, 1e-6);
  }
}

}  // namespace
}  // namespace kiln::optim::detail
