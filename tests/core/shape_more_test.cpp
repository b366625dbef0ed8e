// The ops of core/ops/shape_more.h (and linspace's endpoint, flatten's axis checks) against
// references written here as plain index loops (NumPy's outputs where NumPy's rule is its
// algorithm: wide reflections), finite-difference vjp checks, jvp against the op on the tangent
// and against the vjp, vmap against a loop over the batch, and the errors.
#include "kiln/core/ops/shape_more.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <functional>

#include "kiln/core/vulkan/gpu.h"
#include "support/op_test.h"
#include "support/reference.h"

namespace kiln {
namespace {

using test::check_vjp;
using test::expect_close;
using test::flat;
using test::for_each_index;
using test::Idx;
using test::random_array;
using test::values;
using Args = std::vector<Array>;
using UnaryFn = std::function<Array(const Array&)>;
using V = std::vector<double>;

std::vector<double> build(const Shape& shape, const std::function<double(const Idx&)>& value) {
  std::vector<double> out;
  for_each_index(shape, [&](const Idx& i) { out.push_back(value(i)); });
  return out;
}

// One array per dtype class: float, int and bool (values 0 and 1 for bool).
std::vector<Array> dtype_inputs(const Shape& shape, uint64_t seed) {
  return {random_array(shape, float32, seed), random_array(shape, int32, seed + 1, -50, 50),
          astype(random_array(shape, int32, seed + 2, 0, 2), bool_)};
}

// The transpose of a random array of the reversed shape: a non-contiguous input.
Array transposed(const Shape& shape, Dtype dtype, uint64_t seed) {
  Shape rev(shape.rbegin(), shape.rend());
  return transpose(random_array(rev, dtype, seed));
}

// Element b of `axis`.
Array example(const Array& x, int axis, int64_t b) {
  std::vector<Slice> s(axis + 1);
  s[axis] = {b, b + 1, 1};
  return squeeze(slice(x, s), axis);
}

// vmap(f) over axis 0 and axis 1 of x (x moved so that the batch sits there) against f per example.
void expect_vmap(const UnaryFn& f, const Array& batch_first) {
  for (int axis : {0, 1}) {
    const Array x = axis == 0 ? batch_first : moveaxis(batch_first, 0, 1);
    const Array got = vmap(ScalarFn(f), axis, 0)(x);
    Args per;
    for (int64_t b = 0; b < x.shape(axis); ++b) per.push_back(f(example(x, axis, b)));
    SCOPED_TRACE("in_axis " + std::to_string(axis));
    expect_close(got, stack(per), 0, 0);
  }
}

// For an op linear in x: its jvp is the op applied to the tangent, and <jvp(t), u> = <t, vjp(u)>.
void expect_linear_jvp(const UnaryFn& f, const Array& x, uint64_t seed) {
  const Array t = random_array(x.shape(), float64, seed), xd = astype(x, float64);
  auto [out, tan] = jvp([&](const Args& a) { return Args{f(a[0])}; }, {xd}, {t});
  expect_close(out[0], values(f(xd)), 0, 0);
  expect_close(tan[0], values(f(t)), 0, 0);
  const Array u = random_array(out[0].shape(), float64, seed + 1);
  auto [o2, cot] = kiln::vjp([&](const Args& a) { return Args{f(a[0])}; }, {xd}, {u});
  const double lhs = sum(multiply(tan[0], u)).item<double>(), rhs = sum(multiply(t, cot[0])).item<double>();
  EXPECT_NEAR(lhs, rhs, 1e-10 * (1 + std::abs(lhs)));
}

// `f` throws E whose message starts with "[op]" and contains `part`.
template <class E>
void expect_error(const std::function<void()>& f, const std::string& op, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected [" << op << "] ... " << part;
  } catch (const E& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("[" + op + "]", 0), 0u) << what;
    EXPECT_NE(what.find(part), std::string::npos) << what;
  }
}

bool on_cpu() { return default_device() == Device::cpu; }

// ---------------------------------------------------------------- flip, roll

TEST(Flip, ReversesTheGivenAxes) {
  for (const Array& a : dtype_inputs({2, 3, 4}, 1)) {
    const auto av = values(a);
    const Shape sh{2, 3, 4};
    auto ref = [&](bool f0, bool f1, bool f2) {
      return build(sh, [&](const Idx& i) {
        return av[flat(sh, {f0 ? 1 - i[0] : i[0], f1 ? 2 - i[1] : i[1], f2 ? 3 - i[2] : i[2]})];
      });
    };
    expect_close(flip(a), ref(true, true, true), 0, 0);
    expect_close(flip(a, 1), ref(false, true, false), 0, 0);
    expect_close(flip(a, {-1, 0}), ref(true, false, true), 0, 0);
    EXPECT_EQ(flip(a).dtype(), a.dtype());
  }
  const Array t = transposed({3, 4}, float32, 2);
  const auto tv = values(t);
  expect_close(flip(t, 0), build({3, 4}, [&](const Idx& i) { return tv[(2 - i[0]) * 4 + i[1]]; }), 0, 0);
  EXPECT_EQ(flip(Array(2.0f)).item<float>(), 2.0f);
  expect_error<ShapeError>([] { flip(zeros({2, 3}), {0, 0}); }, "flip", "repeated axis");
  expect_error<ShapeError>([] { flip(zeros({2, 3}), 2); }, "flip", "out of range");
}

TEST(Roll, ShiftsWrapAroundLikeNumPy) {
  for (const Array& a : dtype_inputs({3, 5}, 3)) {
    const auto av = values(a);
    auto ref = [&](int64_t s0, int64_t s1) {
      return build({3, 5}, [&](const Idx& i) {
        const int64_t r = ((i[0] - s0) % 3 + 3) % 3, c = ((i[1] - s1) % 5 + 5) % 5;
        return av[r * 5 + c];
      });
    };
    expect_close(roll(a, 2, 1), ref(0, 2), 0, 0);
    expect_close(roll(a, -7, 1), ref(0, -7), 0, 0);
    expect_close(roll(a, 13, -1), ref(0, 13), 0, 0);
    expect_close(roll(a, {1, 2}, {0, 1}), ref(1, 2), 0, 0);
    expect_close(roll(a, {2}, {0, 1}), ref(2, 2), 0, 0);             // one shift for both axes
    expect_close(roll(a, {1, 2, -4}, {1, 0, 1}), ref(2, -3), 0, 0);  // repeated axes add up
    expect_close(roll(a, 0, 0), av, 0, 0);
    // Flattened: element k of the flat array moves to k + shift.
    expect_close(roll(a, 4),
                 build({3, 5}, [&](const Idx& i) { return av[((i[0] * 5 + i[1] - 4) % 15 + 15) % 15]; }), 0,
                 0);
    EXPECT_EQ(roll(a, 4).shape(), (Shape{3, 5}));
  }
  EXPECT_EQ(roll(zeros({0, 3}), 2, 0).shape(), (Shape{0, 3}));
  EXPECT_EQ(roll(Array(3.0f), 5).item<float>(), 3.0f);
  expect_error<ShapeError>([] { roll(zeros({2, 3}), {1, 2}, {0, 1, 1}); }, "roll", "must broadcast");
  expect_error<ShapeError>([] { roll(zeros({2, 3}), 1, 2); }, "roll", "out of range");
}

// ---------------------------------------------------------------- triangles

TEST(Triangles, TriTrilTriuMatchTheIndexRule) {
  for (int k : {-3, -1, 0, 2, 5}) {
    expect_close(tri(3, 4, k), build({3, 4}, [&](const Idx& i) { return i[1] <= i[0] + k ? 1.0 : 0.0; }), 0,
                 0);
    EXPECT_EQ(tri(3, -1, k, int32).shape(), (Shape{3, 3}));
    for (const Array& a : dtype_inputs({2, 3, 4}, 10 + k)) {
      const auto av = values(a);
      const Shape sh{2, 3, 4};
      expect_close(tril(a, k),
                   build(sh, [&](const Idx& i) { return i[2] <= i[1] + k ? av[flat(sh, i)] : 0.0; }), 0, 0);
      expect_close(triu(a, k),
                   build(sh, [&](const Idx& i) { return i[2] >= i[1] + k ? av[flat(sh, i)] : 0.0; }), 0, 0);
      EXPECT_EQ(tril(a, k).dtype(), a.dtype());
    }
  }
  EXPECT_EQ(tri(2, 3, 0, bool_).to_vector<bool>(),
            (std::vector<bool>{true, false, false, true, true, false}));
  // A 1-d input is broadcast to n x n first (NumPy).
  const Array v({1.0f, 2.0f, 3.0f});
  expect_close(tril(v), V{1, 0, 0, 1, 2, 0, 1, 2, 3}, 0, 0);
  expect_close(triu(v, 1), V{0, 2, 3, 0, 0, 3, 0, 0, 0}, 0, 0);
  EXPECT_EQ(tri(0).shape(), (Shape{0, 0}));
  const Array t = transposed({3, 2}, float32, 4);
  const auto tv = values(t);
  expect_close(tril(t), build({3, 2}, [&](const Idx& i) { return i[1] <= i[0] ? tv[i[0] * 2 + i[1]] : 0.0; }),
               0, 0);
  expect_error<ShapeError>([] { tril(Array(1.0f)); }, "tril", "at least 1 dimension");
  expect_error<ShapeError>([] { triu(Array(1.0f)); }, "triu", "at least 1 dimension");
  expect_error<ValueError>([] { tri(-1); }, "tri", "n must be >= 0");
  expect_error<ValueError>([] { tri(2, -3); }, "tri", "m must be >= 0");
}

// ---------------------------------------------------------------- diagonals

// NumPy's diagonal: out[rest..., i] = a[.. i at axis1 .., .. i + offset at axis2 ..].
std::pair<Shape, std::vector<double>> ref_diagonal(const std::vector<double>& av, const Shape& sh, int offset,
                                                   int a1, int a2) {
  Shape out;
  for (int d = 0; d < static_cast<int>(sh.size()); ++d)
    if (d != a1 && d != a2) out.push_back(sh[d]);
  int64_t n = 0;
  for (int64_t i = 0;; ++i) {
    const int64_t r = offset >= 0 ? i : i - offset, c = offset >= 0 ? i + offset : i;
    if (r >= sh[a1] || c >= sh[a2]) break;
    ++n;
  }
  out.push_back(n);
  return {out, build(out, [&](const Idx& i) {
            Idx src(sh.size());
            size_t k = 0;
            for (int d = 0; d < static_cast<int>(sh.size()); ++d)
              if (d != a1 && d != a2) src[d] = i[k++];
            const int64_t j = i.back();
            src[a1] = offset >= 0 ? j : j - offset;
            src[a2] = offset >= 0 ? j + offset : j;
            return av[flat(sh, src)];
          })};
}

TEST(Diagonal, OffsetsAndAxesAsNumPy) {
  const Shape sh{3, 4, 5};
  for (const Array& a : dtype_inputs(sh, 20)) {
    const auto av = values(a);
    for (auto [off, a1, a2] : std::vector<std::tuple<int, int, int>>{{0, 0, 1},
                                                                     {1, 0, 1},
                                                                     {-2, 0, 1},
                                                                     {2, 1, 2},
                                                                     {-1, 2, 0},
                                                                     {1, 2, 0},
                                                                     {0, -1, -3},
                                                                     {4, 0, 1},
                                                                     {-3, 0, 1}}) {
      SCOPED_TRACE(fmt::format("offset {} axes {} {}", off, a1, a2));
      const auto [shape, ref] = ref_diagonal(av, sh, off, (a1 + 3) % 3, (a2 + 3) % 3);
      const Array d = diagonal(a, off, a1, a2);
      EXPECT_EQ(d.shape(), shape);
      EXPECT_EQ(d.dtype(), a.dtype());
      expect_close(d, ref, 0, 0);
      expect_close(contiguous(d), ref, 0, 0);  // read by a kernel, not only by the host
    }
  }
  // Of a non-contiguous input, and a view of the input's buffer.
  const Array t = transposed({4, 3}, float32, 21);
  expect_close(diagonal(t, 1), ref_diagonal(values(t), {4, 3}, 1, 0, 1).second, 0, 0);
  if (on_cpu()) {
    const Array x = random_array({4, 4}, float32, 22);
    const Array d = diagonal(x, 1);
    d.eval();
    EXPECT_EQ(d.raw_data(), static_cast<const char*>(x.raw_data()) + sizeof(float));
  }
  expect_error<ShapeError>([] { diagonal(zeros({3})); }, "diagonal", "at least 2 dimensions");
  expect_error<ShapeError>([] { diagonal(zeros({3, 3}), 0, 1, -1); }, "diagonal", "must differ");
  expect_error<ShapeError>([] { diagonal(zeros({3, 3}), 0, 0, 2); }, "diagonal", "out of range");
}

TEST(Diag, VectorToMatrixAndMatrixToDiagonal) {
  for (const Array& v : dtype_inputs({3}, 30)) {
    const auto vv = values(v);
    for (int k : {0, 2, -1}) {
      const int64_t n = 3 + std::abs(k);
      const Array m = diag(v, k);
      EXPECT_EQ(m.shape(), (Shape{n, n}));
      EXPECT_EQ(m.dtype(), v.dtype());
      expect_close(m,
                   build({n, n},
                         [&](const Idx& i) {
                           const int64_t j = k >= 0 ? i[0] : i[1];
                           return i[1] - i[0] == k ? vv[j] : 0.0;
                         }),
                   0, 0);
      const Array back = diag(m, k);
      expect_close(back, vv, 0, 0);
    }
  }
  const Array a = random_array({3, 4}, float32, 31);
  expect_close(diag(a, -1), ref_diagonal(values(a), {3, 4}, -1, 0, 1).second, 0, 0);
  EXPECT_EQ(diag(zeros({0})).shape(), (Shape{0, 0}));
  EXPECT_EQ(diag(zeros({0}), 2).shape(), (Shape{2, 2}));
  EXPECT_EQ(diag(a, 7).shape(), (Shape{0}));
  expect_error<ShapeError>([] { diag(zeros({2, 2, 2})); }, "diag", "1-d or 2-d");
  expect_error<ShapeError>([] { diag(Array(1.0f)); }, "diag", "1-d or 2-d");
}

TEST(Trace, SumsTheDiagonal) {
  const Shape sh{3, 4, 2};
  const Array a = random_array(sh, float64, 40);
  for (auto [off, a1, a2] :
       std::vector<std::tuple<int, int, int>>{{0, 0, 1}, {1, 0, 1}, {-1, 1, 0}, {0, 2, 1}}) {
    const auto [shape, ref] = ref_diagonal(values(a), sh, off, a1, a2);
    std::vector<double> sums(ref.size() / shape.back(), 0.0);
    for (size_t i = 0; i < ref.size(); ++i) sums[i / shape.back()] += ref[i];
    expect_close(trace(a, off, a1, a2), sums);
  }
  const Array i8 = astype(random_array({3, 3}, int32, 41, -100, 100), int8);
  const auto iv = values(i8);
  EXPECT_EQ(trace(i8).dtype(), int32);  // sum's accumulator, not a wrapped int8
  EXPECT_EQ(trace(i8).item<int32_t>(), static_cast<int32_t>(iv[0] + iv[4] + iv[8]));
  EXPECT_EQ(trace(astype(eye(3), bool_)).item<int32_t>(), 3);
  EXPECT_EQ(trace(zeros({2, 3}), 5).item<float>(), 0.0f);
  expect_error<ShapeError>([] { trace(zeros({3})); }, "diagonal", "at least 2 dimensions");
}

// ---------------------------------------------------------------- grids, unflatten, unstack

TEST(Meshgrid, XyAndIjDenseAndSparse) {
  const Array x({1.0f, 2.0f, 3.0f}), y({10, 20});
  const Array z = reshape(Array({5.0, 6.0, 7.0, 8.0}), {2, 2});  // flattened, as NumPy
  const auto xy = meshgrid({x, y});
  ASSERT_EQ(xy.size(), 2u);
  EXPECT_EQ(xy[0].shape(), (Shape{2, 3}));
  expect_close(xy[0], V{1, 2, 3, 1, 2, 3}, 0, 0);
  expect_close(xy[1], V{10, 10, 10, 20, 20, 20}, 0, 0);
  EXPECT_EQ(xy[1].dtype(), int32);
  const auto ij = meshgrid({x, y, z}, false, "ij");
  const Shape g{3, 2, 4};
  const auto zv = values(z);
  for (const Array& o : ij) EXPECT_EQ(o.shape(), g);
  expect_close(ij[0], build(g, [](const Idx& i) { return 1.0 + i[0]; }), 0, 0);
  expect_close(ij[1], build(g, [](const Idx& i) { return 10.0 * (1 + i[1]); }), 0, 0);
  expect_close(ij[2], build(g, [&](const Idx& i) { return zv[i[2]]; }), 0, 0);
  const auto xyz = meshgrid({x, y, z});  // "xy": the first two grid axes swapped
  EXPECT_EQ(xyz[0].shape(), (Shape{2, 3, 4}));
  expect_close(xyz[0], build({2, 3, 4}, [](const Idx& i) { return 1.0 + i[1]; }), 0, 0);
  const auto sparse = meshgrid({x, y}, true);
  EXPECT_EQ(sparse[0].shape(), (Shape{1, 3}));
  EXPECT_EQ(sparse[1].shape(), (Shape{2, 1}));
  EXPECT_EQ(meshgrid({x})[0].shape(), (Shape{3}));
  EXPECT_TRUE(meshgrid({}).empty());
  expect_error<ValueError>([&] { meshgrid({x}, false, "xz"); }, "meshgrid", "indexing");
}

TEST(Unflatten, SplitsOneAxis) {
  const Array a = random_array({2, 12, 3}, float32, 50);
  const auto av = values(a);
  EXPECT_EQ(unflatten(a, 1, {3, 4}).shape(), (Shape{2, 3, 4, 3}));
  EXPECT_EQ(unflatten(a, -2, {2, -1, 3}).shape(), (Shape{2, 2, 2, 3, 3}));
  EXPECT_EQ(unflatten(a, 0, {1, 2}).shape(), (Shape{1, 2, 12, 3}));
  expect_close(unflatten(a, 1, {3, 4}), av, 0, 0);
  const Array t = transposed({4, 6}, int32, 51);
  expect_close(unflatten(t, 1, {2, 3}), values(t), 0, 0);
  expect_error<ShapeError>([&] { unflatten(a, 1, {5, 2}); }, "unflatten", "multiply to the axis");
  expect_error<ShapeError>([&] { unflatten(a, 1, {5, -1}); }, "unflatten", "cannot infer");
  expect_error<ShapeError>([&] { unflatten(a, 1, {-1, -1}); }, "unflatten", "at most one -1");
  expect_error<ShapeError>([&] { unflatten(a, 1, {}); }, "unflatten", "must not be empty");
  expect_error<ShapeError>([&] { unflatten(a, 3, {1}); }, "unflatten", "out of range");
}

TEST(Unstack, SlicesAlongAnAxis) {
  for (const Array& a : dtype_inputs({2, 3, 4}, 60)) {
    const auto av = values(a);
    for (int axis : {0, 1, -1}) {
      const int ax = (axis + 3) % 3;
      const auto parts = unstack(a, axis);
      ASSERT_EQ(static_cast<int64_t>(parts.size()), a.shape(ax));
      for (size_t p = 0; p < parts.size(); ++p) {
        Shape sh = a.shape();
        sh.erase(sh.begin() + ax);
        EXPECT_EQ(parts[p].shape(), sh);
        expect_close(parts[p],
                     build(sh,
                           [&](const Idx& i) {
                             Idx src = i;
                             src.insert(src.begin() + ax, static_cast<int64_t>(p));
                             return av[flat({2, 3, 4}, src)];
                           }),
                     0, 0);
      }
    }
  }
  EXPECT_TRUE(unstack(zeros({0, 2})).empty());
  expect_error<ShapeError>([] { unstack(Array(1.0f)); }, "unstack", "at least 1 dimension");
  expect_error<ShapeError>([] { unstack(zeros({2}), 1); }, "unstack", "out of range");
}

// ---------------------------------------------------------------- repeat, atleast_nd

TEST(Repeat, PerElementCountsAsNumPy) {
  for (const Array& a : dtype_inputs({2, 3}, 70)) {
    const auto av = values(a);
    // np.repeat(a, [2, 0, 1], axis=1) and np.repeat(a, [1, 3], axis=0).
    auto r1 = repeat(a, std::vector<int64_t>{2, 0, 1}, 1);
    EXPECT_EQ(r1.shape(), (Shape{2, 3}));
    EXPECT_EQ(r1.dtype(), a.dtype());
    expect_close(r1, V{av[0], av[0], av[2], av[3], av[3], av[5]}, 0, 0);
    const Idx rows{0, 1, 1, 1};
    expect_close(repeat(a, std::vector<int64_t>{1, 3}, 0),
                 build({4, 3}, [&](const Idx& i) { return av[rows[i[0]] * 3 + i[1]]; }), 0, 0);
    // A single count applies to every element; without an axis the array is flattened.
    expect_close(repeat(a, std::vector<int64_t>{2}, 1), values(repeat(a, 2, 1)), 0, 0);
    const std::vector<int64_t> counts{0, 1, 2, 0, 1, 2};
    std::vector<double> ref;
    for (size_t i = 0; i < counts.size(); ++i) ref.insert(ref.end(), counts[i], av[i]);
    expect_close(repeat(a, counts), ref, 0, 0);
    EXPECT_EQ(repeat(a, std::vector<int64_t>{0, 0}, 0).shape(), (Shape{0, 3}));
  }
  // The scalar count of shape.h, against NumPy: a 0-d array repeats into 1-d; axis counts from the end.
  EXPECT_EQ(repeat(Array(2.0f), 3).to_vector<float>(), (std::vector<float>{2, 2, 2}));
  EXPECT_EQ(repeat(Array({1, 2}, {2}), 2, -1).to_vector<int32_t>(), (std::vector<int32_t>{1, 1, 2, 2}));
  expect_error<ValueError>(
      [] {
        repeat(zeros({2, 3}), std::vector<int64_t>{1, 2}, 1);
      },
      "repeat", "one count per element");
  expect_error<ValueError>(
      [] {
        repeat(zeros({2, 3}), std::vector<int64_t>{1, -1, 1}, 1);
      },
      "repeat", "non-negative");
  expect_error<ShapeError>(
      [] {
        repeat(zeros({2, 3}), std::vector<int64_t>{1, 1}, 2);
      },
      "repeat", "out of range");
}

TEST(AtLeast, AddsAxesAsNumPy) {
  const Array s(2.0f), v({1, 2, 3}), m = zeros({2, 3}, bool_), t = zeros({1, 2, 3});
  EXPECT_EQ(atleast_1d(s).shape(), (Shape{1}));
  EXPECT_EQ(atleast_1d(v).id(), v.id());
  EXPECT_EQ(atleast_2d(s).shape(), (Shape{1, 1}));
  EXPECT_EQ(atleast_2d(v).shape(), (Shape{1, 3}));
  EXPECT_EQ(atleast_2d(m).id(), m.id());
  EXPECT_EQ(atleast_3d(s).shape(), (Shape{1, 1, 1}));
  EXPECT_EQ(atleast_3d(v).shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(atleast_3d(m).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(atleast_3d(t).id(), t.id());
  EXPECT_EQ(atleast_3d(v).to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3}));
  const auto all = atleast_2d(std::vector<Array>{s, v, t});
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].shape(), (Shape{1, 1}));
  EXPECT_EQ(all[1].shape(), (Shape{1, 3}));
  EXPECT_EQ(all[2].shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(atleast_1d(std::vector<Array>{s})[0].shape(), (Shape{1}));
  EXPECT_EQ(atleast_3d(std::vector<Array>{v})[0].shape(), (Shape{1, 3, 1}));
}

// ---------------------------------------------------------------- pad modes

// The source index of padded position i (from -lo) along an axis of n, for widths within one
// reflection (where NumPy's rule is this closed form).
int64_t mirror(int64_t i, int64_t n, PadMode mode) {
  if (mode == PadMode::edge || n == 1) return std::clamp<int64_t>(i, 0, n - 1);
  if (mode == PadMode::reflect) return i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i;
  return i < 0 ? -i - 1 : i >= n ? 2 * n - 1 - i : i;
}

TEST(PadModes, EdgeReflectSymmetricWithinOneReflection) {
  const Shape sh{3, 4};
  for (const Array& a : dtype_inputs(sh, 80)) {
    const auto av = values(a);
    for (PadMode mode : {PadMode::edge, PadMode::reflect, PadMode::symmetric}) {
      const int64_t lo0 = 2, hi0 = mode == PadMode::reflect ? 2 : 3, lo1 = 3, hi1 = 1;
      const Shape out{3 + lo0 + hi0, 4 + lo1 + hi1};
      const Array p = pad(a, {{lo0, hi0}, {lo1, hi1}}, mode);
      EXPECT_EQ(p.shape(), out);
      EXPECT_EQ(p.dtype(), a.dtype());
      expect_close(p,
                   build(out,
                         [&](const Idx& i) {
                           return av[mirror(i[0] - lo0, 3, mode) * 4 + mirror(i[1] - lo1, 4, mode)];
                         }),
                   0, 0);
    }
    expect_close(pad(a, {{1, 1}}, PadMode::constant), values(pad(a, {{1, 1}})), 0, 0);
  }
  EXPECT_EQ(pad(Array({1.0f, 2.0f, 3.0f}), {{2, 2}}, PadMode::reflect).to_vector<float>(),
            (std::vector<float>{3, 2, 1, 2, 3, 2, 1}));
  EXPECT_EQ(pad(Array({1.0f, 2.0f, 3.0f}), {{2, 2}}, PadMode::symmetric).to_vector<float>(),
            (std::vector<float>{2, 1, 1, 2, 3, 3, 2}));
  const Array t = transposed({3, 2}, float32, 81);
  const auto tv = values(t);
  expect_close(
      pad(t, {{0, 0}, {1, 1}}, PadMode::edge),
      build({3, 4}, [&](const Idx& i) { return tv[i[0] * 2 + std::clamp<int64_t>(i[1] - 1, 0, 1)]; }), 0, 0);
}

TEST(PadModes, WideReflectionsRepeatAsNumPy) {
  // np.pad(np.arange(n), (lo, hi), mode) from NumPy 1.24: past one reflection NumPy reflects the
  // padded values again, one side at a time, which is not periodic when the sides differ.
  struct Case {
    int64_t n, lo, hi;
    PadMode mode;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      {5, 14, 1, PadMode::reflect, {4, 3, 4, 3, 2, 1, 0, 1, 2, 3, 4, 3, 2, 1, 0, 1, 2, 3, 4, 3}},
      {4, 14, 1, PadMode::symmetric, {3, 3, 3, 2, 1, 0, 0, 1, 2, 3, 3, 2, 1, 0, 0, 1, 2, 3, 3}},
      {4, 9, 6, PadMode::reflect, {3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1, 2, 3}},
      {4, 9, 6, PadMode::symmetric, {0, 0, 1, 2, 3, 3, 2, 1, 0, 0, 1, 2, 3, 3, 2, 1, 0, 0, 1}},
      {3, 1, 7, PadMode::reflect, {1, 0, 1, 2, 1, 0, 1, 2, 1, 0, 1}},
      {2, 5, 4, PadMode::reflect, {1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1}},
      {3, 4, 8, PadMode::symmetric, {2, 2, 1, 0, 0, 1, 2, 2, 1, 0, 0, 1, 2, 2, 1}},
      {1, 3, 2, PadMode::reflect, {0, 0, 0, 0, 0, 0}},
  };
  for (const Case& c : cases) {
    const Array a = arange(0, static_cast<double>(c.n), 1, float32);
    expect_close(pad(a, {{c.lo, c.hi}}, c.mode), c.want, 0, 0);
  }
  // Many short runs (a 2-element axis padded far) take the gather path; the same rule.
  std::vector<double> want;
  for (int64_t i = -40; i < 2 + 40; ++i) want.push_back(static_cast<double>(((i % 2) + 2) % 2));
  expect_close(pad(Array({0, 1}), {{40, 40}}, PadMode::reflect), want, 0, 0);
}

TEST(PadModes, Errors) {
  const Array a = zeros({2, 3});
  expect_error<ValueError>(
      [] {
        pad(zeros({0, 3}), {{1, 0}, {0, 0}}, PadMode::reflect);
      },
      "pad", "empty axis");
  expect_error<ValueError>([&] { pad(a, {{-1, 0}, {0, 0}}, PadMode::edge); }, "pad", "non-negative");
  expect_error<ShapeError>([&] { pad(a, {{1, 1}, {1, 1}, {1, 1}}, PadMode::symmetric); }, "pad", "pad_width");
  EXPECT_EQ(pad(zeros({0, 3}), {{0, 0}, {1, 1}}, PadMode::edge).shape(), (Shape{0, 5}));
  EXPECT_EQ(pad(a, {{0, 0}}, PadMode::reflect).id(), a.id());
}

// ---------------------------------------------------------------- linspace, flatten

TEST(Linspace, EndpointFalseAsNumPy) {
  for (auto [start, stop, num] :
       std::vector<std::tuple<double, double, int64_t>>{{0, 1, 5}, {2, -3, 7}, {-1.5, 4.25, 1}, {0, 10, 0}}) {
    std::vector<double> ref;
    for (int64_t i = 0; i < num; ++i) ref.push_back(start + static_cast<double>(i) * (stop - start) / num);
    expect_close(linspace(start, stop, num, false, float64), ref, 1e-14, 1e-14);
    expect_close(linspace(start, stop, num, false), ref);
    std::vector<double> incl;
    for (int64_t i = 0; i < num; ++i)
      incl.push_back(num == 1 ? start : start + i * (stop - start) / (num - 1));
    expect_close(linspace(start, stop, num, true, float64), incl, 1e-14, 1e-14);
  }
  EXPECT_EQ(linspace(0, 8, 4, false, int32).to_vector<int32_t>(), (std::vector<int32_t>{0, 2, 4, 6}));
  expect_error<ValueError>([] { linspace(0, 1, -1, false); }, "linspace", "num must be >= 0");
  expect_error<DtypeError>([] { linspace(0, 1, 3, false, bool_); }, "linspace", "dtype");
}

TEST(Flatten, AxesAreCheckedNotClamped) {
  const Array a = zeros({2, 3, 4});
  expect_error<ShapeError>([&] { flatten(a, 1, 3); }, "flatten", "end_axis 3");
  expect_error<ShapeError>([&] { flatten(a, -4, 1); }, "flatten", "start_axis -4");
  expect_error<ShapeError>([&] { flatten(a, 2, 1); }, "flatten", "must not come after");
  EXPECT_EQ(flatten(a, 1, 2).shape(), (Shape{2, 12}));
  EXPECT_EQ(flatten(Array(1.0f), 0, -1).shape(), (Shape{1}));
  expect_error<ShapeError>([] { flatten(Array(1.0f), 0, 1); }, "flatten", "end_axis 1");
}

// ---------------------------------------------------------------- as_strided

TEST(AsStrided, WindowsBroadcastsAndReversals) {
  for (const Array& a : dtype_inputs({12}, 90)) {
    const auto av = values(a);
    // Overlapping windows: out[i, j] = a[1 + 2i + j].
    const Array w = as_strided(a, {4, 3}, {2, 1}, 1);
    EXPECT_EQ(w.dtype(), a.dtype());
    expect_close(w, build({4, 3}, [&](const Idx& i) { return av[1 + 2 * i[0] + i[1]]; }), 0, 0);
    expect_close(contiguous(w), values(w), 0, 0);
    // A zero stride repeats, a negative one walks back.
    expect_close(as_strided(a, {2, 3}, {0, -3}, 11),
                 build({2, 3}, [&](const Idx& i) { return av[11 - 3 * i[1]]; }), 0, 0);
    EXPECT_EQ(as_strided(a, {}, {}, 5).item<double>(), av[5]);
  }
  // A non-contiguous input is read in its row-major order.
  const Array t = transposed({3, 4}, float32, 91);
  const auto tv = values(t);
  expect_close(as_strided(t, {3, 2}, {4, 2}, 1),
               build({3, 2}, [&](const Idx& i) { return tv[1 + 4 * i[0] + 2 * i[1]]; }), 0, 0);
  if (on_cpu()) {
    const Array x = random_array({6}, float32, 92);
    const Array v = as_strided(x, {2, 2}, {1, 2}, 1);
    v.eval();
    EXPECT_EQ(v.raw_data(), static_cast<const char*>(x.raw_data()) + sizeof(float));
  }
  EXPECT_EQ(as_strided(zeros({3}), {0, 4}, {100, 100}, 50).shape(), (Shape{0, 4}));
  expect_error<ValueError>([] { as_strided(zeros({6}), {3}, {3}, 1); }, "as_strided", "outside the array");
  expect_error<ValueError>([] { as_strided(zeros({6}), {3}, {-1}, 1); }, "as_strided", "outside the array");
  expect_error<ValueError>([] { as_strided(zeros({6}), {3}, {int64_t{1} << 62}, 0); }, "as_strided",
                           "outside");
  expect_error<ShapeError>([] { as_strided(zeros({6}), {2, 2}, {1}, 0); }, "as_strided", "same length");
  expect_error<ShapeError>([] { as_strided(zeros({6}), {-1}, {1}, 0); }, "as_strided", "negative dimension");
}

// ---------------------------------------------------------------- view (bit reinterpretation)

template <class To, class From>
std::vector<double> reinterpret(const std::vector<From>& from) {
  std::vector<To> to(from.size() * sizeof(From) / sizeof(To));
  std::memcpy(to.data(), from.data(), to.size() * sizeof(To));
  return std::vector<double>(to.begin(), to.end());
}

TEST(View, ReinterpretsBitsAsNumPy) {
  const std::vector<float> f{1.5f, -2.25f, 3.0e-3f, 7.0f, -0.0f, 1e30f};
  const Array x(f, {2, 3});
  const Array i = view(x, int32);
  EXPECT_EQ(i.shape(), (Shape{2, 3}));
  expect_close(i, reinterpret<int32_t>(f), 0, 0);
  const Array b = view(x, uint8);
  EXPECT_EQ(b.shape(), (Shape{2, 12}));
  expect_close(b, reinterpret<uint8_t>(f), 0, 0);
  expect_close(b + zeros_like(b), reinterpret<uint8_t>(f), 0, 0);  // a kernel reading the byte view
  expect_close(view(b, float32), values(x), 0, 0);
  expect_close(view(view(x, float16), uint32), reinterpret<uint32_t>(f), 0, 0);
  EXPECT_EQ(view(x, float16).shape(), (Shape{2, 6}));
  const std::vector<double> d{0.5, -3.75};
  expect_close(view(Array(d, {2}), int32), reinterpret<int32_t>(d), 0, 0);
  expect_close(view(Array(d, {2}), uint32) + 0u, reinterpret<uint32_t>(d), 0, 0);
  const Array bits(std::vector<int32_t>{0, 1, 1, 0}, {4}, uint8);
  EXPECT_EQ(view(bits, bool_).to_vector<bool>(), (std::vector<bool>{false, true, true, false}));
  EXPECT_EQ(view(view(bits, bool_), uint8).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 1, 0}));
  EXPECT_EQ(view(x, float32).id(), x.id());
  EXPECT_EQ(view(Array(1.0f), int32).item<int32_t>(), std::bit_cast<int32_t>(1.0f));
}

TEST(View, CopiesWhenTheLayoutDoesNotAllowAView) {
  // Not row-contiguous: copied to row-major first.
  const Array t = transposed({2, 3}, float32, 100);
  std::vector<float> tf;
  for (double v : values(t)) tf.push_back(static_cast<float>(v));
  expect_close(view(t, int32), reinterpret<int32_t>(tf), 0, 0);
  expect_close(view(t, uint8), reinterpret<uint8_t>(tf), 0, 0);
  // A byte slice starting at byte 1 cannot be read as float32 in place; one at byte 4 can.
  std::vector<uint8_t> bytes(13);
  const std::vector<float> f{2.5f, -1.0f, 4.0f};
  std::memcpy(bytes.data() + 1, f.data(), 12);
  const Array raw(std::vector<int32_t>(bytes.begin(), bytes.end()), {13}, uint8);
  raw.eval();
  const Array odd = slice(raw, {{1, 13, 1}});
  expect_close(view(odd, float32), V{2.5, -1.0, 4.0}, 0, 0);
  const Array four = slice(raw, {{4, 12, 1}});
  expect_close(view(four, float32),
               reinterpret<float>(std::vector<uint8_t>(bytes.begin() + 4, bytes.begin() + 12)), 0, 0);
  if (on_cpu()) {
    const Array v = view(four, float32);
    v.eval();
    EXPECT_EQ(v.raw_data(), static_cast<const char*>(raw.raw_data()) + 4);
  }
  EXPECT_EQ(view(zeros({2, 0}), float64).shape(), (Shape{2, 0}));
}

TEST(View, Errors) {
  expect_error<ShapeError>([] { view(Array(1.0f), float16); }, "view", "0-d");
  expect_error<ShapeError>([] { view(zeros({2, 3}, uint8), float32); }, "view", "divide");
  expect_error<ShapeError>([] { view(zeros({2, 3}, float16), float32); }, "view", "divide");
}

// ---------------------------------------------------------------- gradients, jvp, vmap

// Ops linear in their input, with an example's shape, for the vjp, jvp and vmap checks. Braced
// arguments are named constants (kept out of the lambdas, which clang-format would unfold).
const Shape kShift{2, -1}, kCounts{0, 2, 1, 3}, kCountsFlat{1, 0, 2, 3}, kSplit{-1, 1}, kWindow{3, 4},
    kPair{2, 2};
const Strides kStep31{3, 1}, kStep0m1{0, -1}, kStep11{1, 1}, kStep02{0, 2}, kStep21{2, 1};
const Shape kShape32{3, 2};
const Axes kAxes01{0, 1};
std::vector<Array> mesh2(const Array& a, const Array& b, bool sparse = false,
                         std::string_view indexing = "xy") {
  return meshgrid({a, b}, sparse, indexing);
}
const std::vector<std::pair<int64_t, int64_t>> kReflect{{3, 1}, {2, 6}}, kOne{{1, 1}}, kEdge{{0, 3}};

struct LinearOp {
  const char* name;
  UnaryFn f;
  Shape shape;
};
std::vector<LinearOp> linear_ops() {
  return {
      {"flip", [](const Array& x) { return flip(x, -1); }, {4, 5}},
      {"roll", [](const Array& x) { return roll(x, kShift, kAxes01); }, {4, 5}},
      {"roll flat", [](const Array& x) { return roll(x, 7); }, {4, 5}},
      {"roll 1-d", [](const Array& x) { return roll(x, -1, 0); }, {5}},
      {"tril", [](const Array& x) { return tril(x, 1); }, {4, 5}},
      {"triu", [](const Array& x) { return triu(x, -1); }, {2, 4, 5}},
      {"tril 1-d", [](const Array& x) { return tril(x); }, {4}},
      {"diagonal", [](const Array& x) { return diagonal(x, 1); }, {4, 5}},
      {"diagonal axes", [](const Array& x) { return diagonal(x, -1, 2, 0); }, {2, 3, 4}},
      {"diag 2-d", [](const Array& x) { return diag(x); }, {4, 5}},
      {"diag 1-d", [](const Array& x) { return diag(x, 2); }, {4}},
      {"diag 1-d below", [](const Array& x) { return diag(x, -1); }, {3}},
      {"trace", [](const Array& x) { return trace(x, -1); }, {4, 5}},
      {"trace axes", [](const Array& x) { return trace(x, 0, 0, 2); }, {2, 3, 4}},
      {"meshgrid", [](const Array& x) { return mesh2(x, x * 2.0)[1]; }, {4}},
      {"unflatten", [](const Array& x) { return unflatten(x, 1, kSplit); }, {4, 5}},
      {"unstack", [](const Array& x) { return unstack(x, 1)[2]; }, {4, 5}},
      {"repeat", [](const Array& x) { return repeat(x, kCounts, 0); }, {4, 5}},
      {"repeat flat", [](const Array& x) { return repeat(x, kCountsFlat); }, {4}},
      {"atleast_3d", [](const Array& x) { return atleast_3d(x); }, {4}},
      {"pad reflect", [](const Array& x) { return pad(x, kReflect, PadMode::reflect); }, {4, 5}},
      {"pad symmetric", [](const Array& x) { return pad(x, kOne, PadMode::symmetric); }, {4, 5}},
      {"pad edge", [](const Array& x) { return pad(x, kEdge, PadMode::edge); }, {4}},
      {"as_strided", [](const Array& x) { return as_strided(x, kWindow, kStep31, 2); }, {4, 5}},
      {"as_strided T", [](const Array& x) { return as_strided(transpose(x), kPair, kStep0m1, 5); }, {4, 5}},
      {"as_strided 1-d", [](const Array& x) { return as_strided(x, kShape32, kStep11, 0); }, {4}},
  };
}

TEST(ShapeMoreGradients, FiniteDifferences) {
  uint64_t seed = 110;
  for (const LinearOp& op : linear_ops()) {
    SCOPED_TRACE(op.name);
    check_vjp([&](const Args& a) { return op.f(a[0]); }, {random_array(op.shape, float64, seed++)});
  }
  const Array c = random_array({2, 3, 4}, float64, 150);
  check_vjp([](const Args& a) { return diagonal(transpose(a[0]), -1, 1, 2); }, {c});
  check_vjp([](const Args& a) { return mesh2(a[0], a[1])[0] * mesh2(a[0], a[1])[1]; },
            {random_array({4}, float64, 151), random_array({3}, float64, 152)});
  check_vjp(
      [](const Args& a) { return unstack(a[0], 1)[0] * 2.0 + unstack(a[0], 1)[2] * unstack(a[0], 1)[1]; },
      {c});
  for (PadMode mode : {PadMode::edge, PadMode::reflect, PadMode::symmetric}) {
    SCOPED_TRACE(static_cast<int>(mode));
    const std::vector<std::pair<int64_t, int64_t>> wide{{30, 1}};  // the gather path for reflections
    check_vjp([&](const Args& a) { return pad(a[0], wide, mode); }, {random_array({2}, float64, 153)});
  }
  check_vjp([](const Args& a) { return as_strided(transpose(a[0]), kWindow, kStep02, 2); },
            {random_array({3, 4}, float64, 154)});
  // Bits have no derivative: view's gradient is zero (the float32 -> float32 view is the input).
  const Array g = grad([](const Array& x) {
    return sum(astype(view(x, int32), float32)) + sum(view(x, float32));
  })(random_array({4}, float32, 155));
  expect_close(g, std::vector<double>(4, 1.0), 0, 0);
  const Array g2 = grad([](const Array& x) { return sum(astype(view(x, float16), float32)); })(
      random_array({2, 2}, float32, 156));
  expect_close(g2, std::vector<double>(4, 0.0), 0, 0);
}

TEST(ShapeMoreGradients, SecondOrderThroughTheNewViews) {
  test::check_second_order(
      [](const Args& a) { return square(diagonal(a[0], 1)) * sum(diagonal(a[0], 0, 1, 0)); },
      {random_array({3, 3}, float64, 160)});
  test::check_second_order([](const Args& a) { return square(as_strided(a[0], kPair, kStep11, 0)); },
                           {random_array({4}, float64, 161)});
}

TEST(ShapeMoreRules, JvpOfLinearOps) {
  uint64_t seed = 130;
  for (const LinearOp& op : linear_ops()) {
    SCOPED_TRACE(op.name);
    expect_linear_jvp(op.f, random_array(op.shape, float64, seed), seed + 1);
    seed += 2;
  }
  // view: a zero tangent of the new dtype's shape.
  auto [out, tan] = jvp([](const Args& a) { return Args{view(a[0], float32)}; },
                        {random_array({3}, float64, 190)}, {random_array({3}, float64, 191)});
  EXPECT_EQ(tan[0].shape(), (Shape{6}));
  expect_close(tan[0], std::vector<double>(6, 0.0), 0, 0);
}

TEST(ShapeMoreRules, VmapAgainstALoop) {
  uint64_t seed = 170;
  for (const LinearOp& op : linear_ops()) {
    SCOPED_TRACE(op.name);
    Shape batch = op.shape;
    batch.insert(batch.begin(), 3);
    expect_vmap(op.f, random_array(batch, float32, seed++));
  }
  // view keeps the batch axis unless it is the last one, which the view rescales.
  expect_vmap([](const Array& x) { return view(x, uint8); }, random_array({3, 4, 5}, float32, 200));
  expect_vmap([](const Array& x) { return view(x, uint8); }, random_array({3, 4}, float32, 201));
  expect_vmap([](const Array& x) { return view(x, int32) + 1; }, random_array({3, 2, 4}, float16, 202));
  // Integer and bool inputs batch the same way.
  expect_vmap([](const Array& x) { return tril(flip(x, 0), -1); },
              random_array({2, 3, 3}, int32, 203, -9, 9));
  expect_vmap([](const Array& x) { return diagonal(roll(x, 1, 1)); },
              astype(random_array({2, 3, 3}, int32, 204, 0, 2), bool_));
  // unstack's several outputs, batched.
  const Array x = random_array({3, 2, 4}, float32, 205);
  const auto got = vmap([](const Args& a) { return unstack(a[0], 0); }, {0})({x});
  ASSERT_EQ(got.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    Args per;
    for (int b = 0; b < 3; ++b) per.push_back(unstack(example(x, 0, b), 0)[k]);
    expect_close(got[k], stack(per), 0, 0);
  }
}

TEST(ShapeMoreRules, CompiledAndCapturedAsEager) {
  // Three calls: traced, then (on the GPU) captured, then replayed; each as the eager ops.
  auto f = [](const Args& a) {
    const Array x = a[0];
    const Array bytes = slice(view(x, uint8), {{}, {1, 13, 1}});  // a misaligned byte view, copied
    return Args{diagonal(x, 1) * 2.0f, as_strided(x, kWindow, kStep21, 1) + 1.0f, view(bytes, float32) + 0.0f,
                pad(roll(x, 1, 1), kOne, PadMode::reflect), trace(tril(x))};
  };
  const CompiledFunction cf = compile(f);
  for (uint64_t seed : {220, 221, 222}) {
    const Array x = random_array({3, 4}, float32, seed);
    const Args got = cf({x}), want = f({x});
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], values(want[i]), 0, 0);
  }
  EXPECT_EQ(cf.trace_count(), 1);
  EXPECT_EQ(cf.capture_count(), on_cpu() ? 0 : 1);
}

// ---------------------------------------------------------------- every dtype

TEST(ShapeMoreDtypes, EveryDtypeHoldsItsFloat64Values) {
  // The ops move elements without computing on them: each dtype's result holds the values of the
  // float64 one (which the tests above check against loops).
  const std::vector<std::pair<int64_t, int64_t>> widths{{1, 1}, {0, 4}, {2, 0}};
  const std::vector<UnaryFn> ops = {
      [](const Array& x) { return flip(x, kAxes01); },
      [](const Array& x) { return roll(x, -2, 2); },
      [](const Array& x) { return tril(x, 1); },
      [](const Array& x) { return diagonal(x, 1, 2, 1); },
      [](const Array& x) { return diag(flatten(x), -1); },
      [&](const Array& x) { return pad(x, widths, PadMode::reflect); },
      [](const Array& x) { return as_strided(x, kWindow, kStep21, 3); },
      [](const Array& x) { return repeat(x, kCounts, 2); },
      [](const Array& x) { return mesh2(x, x, true, "ij")[1]; },
  };
  if (!on_cpu() && !gpu::supports(float64)) GTEST_SKIP() << "the reference needs float64";
  for (int t = 0; t < kNumDtypes; ++t) {
    const Dtype dt = static_cast<Dtype>(t);
    if (default_device() == Device::gpu && !gpu::supports(dt)) continue;
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const Array a = dt == bool_ ? astype(random_array({2, 3, 4}, int32, 210, 0, 2), bool_)
                                : random_array({2, 3, 4}, dt, 210 + t, is_unsigned(dt) ? 0 : -60, 60);
    const Array a64 = astype(a, float64);
    for (const UnaryFn& f : ops) {
      const Array y = f(a);
      EXPECT_EQ(y.dtype(), dt);
      expect_close(contiguous(y), values(f(a64)), 0, 0);
    }
    // Viewed as bytes and back: the same values.
    if (dt != bool_) expect_close(view(view(a, uint8), dt), values(a), 0, 0);
  }
}

}  // namespace
}  // namespace kiln
