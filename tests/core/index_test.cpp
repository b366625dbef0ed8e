// Gathers and scatters against naive float64 references written here, out-of-range behaviour,
// finite-difference gradients, and the vmap/jvp rules.
#include <gtest/gtest.h>

#include <functional>

#include "support/device.h"
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

// ---------------------------------------------------------------- naive references

// Element i of a row-major array of `shape`, where `shape` broadcasts (right-aligned) to i's rank.
double at(const std::vector<double>& v, const Shape& shape, const Idx& i) {
  int64_t f = 0;
  const size_t off = i.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + (shape[d] == 1 ? 0 : i[off + d]);
  return v[f];
}
int64_t wrap(double v, int64_t n) { return v < 0 ? static_cast<int64_t>(v) + n : static_cast<int64_t>(v); }

std::vector<double> ref_take(const std::vector<double>& a, const Shape& as, const std::vector<double>& idx,
                             const Shape& is, int axis) {
  Shape out(as.begin(), as.begin() + axis);
  out.insert(out.end(), is.begin(), is.end());
  out.insert(out.end(), as.begin() + axis + 1, as.end());
  std::vector<double> r;
  for_each_index(out, [&](const Idx& o) {
    Idx src(o.begin(), o.begin() + axis);
    const Idx j(o.begin() + axis, o.begin() + axis + is.size());
    src.push_back(wrap(idx[flat(is, j)], as[axis]));
    src.insert(src.end(), o.begin() + axis + is.size(), o.end());
    r.push_back(a[flat(as, src)]);
  });
  return r;
}

Array transposed_input(const Shape& shape, Dtype dtype, uint64_t seed, double lo = -1, double hi = 1) {
  return transpose(random_array(Shape(shape.rbegin(), shape.rend()), dtype, seed, lo, hi));
}
Array int_array(const std::vector<int64_t>& v, const Shape& shape, Dtype dtype = int32) {
  return Array(v, shape, dtype);
}

// `r` reads or writes through an out-of-range index computed in its own graph. The CPU checks it
// and throws ValueError; the GPU cannot before the submit (docs/gpu.md): a gather reads 0 and a
// scatter drops the update, which is `on_gpu`.
void expect_computed_index_out_of_range(const Array& r, const std::vector<double>& on_gpu) {
  if (test::gpu_default())
    expect_close(r, on_gpu, 0, 0);
  else
    EXPECT_THROW(r.eval(), ValueError);
}

// ---------------------------------------------------------------- take

TEST(Take, AlongAnAxisWithNegativeIndices) {
  const Array a = random_array({3, 4, 5}, float32, 1);
  const Array idx = int_array({0, -1, 2, 3, -4, 1}, {2, 3});
  const auto av = values(a), iv = values(idx);
  const Array r = take(a, idx, 1);
  ASSERT_EQ(r.shape(), (Shape{3, 2, 3, 5}));
  expect_close(r, ref_take(av, {3, 4, 5}, iv, {2, 3}, 1));
  const Array idx2 = int_array({4, 0, -5}, {3});
  expect_close(take(a, idx2, -1), ref_take(av, {3, 4, 5}, values(idx2), {3}, 2));
  expect_close(take(a, int_array({2, 2, 0}, {3}), 0), ref_take(av, {3, 4, 5}, {2, 2, 0}, {3}, 0));
}

TEST(Take, EveryIndexDtypeAndRejectsOthers) {
  const Array a = random_array({6, 2}, float64, 2);
  const auto av = values(a);
  for (Dtype t : {uint8, int8, int32, int64, uint32}) {
    const Array idx = int_array({5, 0, 3}, {3}, t);
    expect_close(take(a, idx, 0), ref_take(av, {6, 2}, {5, 0, 3}, {3}, 0), 0, 0);
  }
  EXPECT_THROW(take(a, Array({0.0f}), 0), DtypeError);
  EXPECT_THROW(take(a, Array(std::vector<bool>{true}, {1}), 0), DtypeError);
  EXPECT_THROW(take(a, int_array({0}, {1}), 2), ShapeError);
  EXPECT_THROW(take(Array(1.0f), int_array({0}, {1}), 0), ShapeError);
}

TEST(Take, FlattenedScalarIndexAndEmpty) {
  const Array a = random_array({3, 4}, float32, 3);
  const auto av = values(a);
  const Array s = take(a, Array(7));
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.item<float>(), static_cast<float>(av[7]));
  expect_close(take(a, int_array({11, -12, 5}, {3})), {av[11], av[0], av[5]});
  EXPECT_EQ(take(a, int_array({}, {0}), 1).shape(), (Shape{3, 0}));
  EXPECT_EQ(take(zeros({0, 2}), int_array({}, {0}), 0).shape(), (Shape{0, 2}));
}

TEST(Take, NonContiguousInputsAndOtherDtypes) {
  const Array idx = transpose(int_array({0, 3, -1, 2, 1, 0}, {2, 3}));  // (3, 2), strided
  const auto iv = values(idx);
  for (Dtype dt : {float16, int64, bool_, uint8}) {
    const Array a = transposed_input({4, 3}, dt, 4, 0, 3);
    const auto av = values(a);
    expect_close(take(a, idx, 0), ref_take(av, {4, 3}, iv, {3, 2}, 0), 0, 0);
  }
  // A slice of a transpose.
  const Array b = slice(transposed_input({6, 5}, float32, 5), {{5, 0, -2}});
  expect_close(take(b, int_array({1, -1}, {2}), 1), ref_take(values(b), {3, 5}, {1, -1}, {2}, 1));
}

TEST(Take, OutOfRangeIndicesThrowValueError) {
  const Array a = random_array({3, 2}, float32, 6);
  // Known indices are checked when the op is called.
  try {
    take(a, int_array({0, 3}, {2}), 0);
    ADD_FAILURE() << "no throw";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[take]"), std::string::npos) << m;
    EXPECT_NE(m.find("index 3"), std::string::npos) << m;
    EXPECT_NE(m.find("size 3"), std::string::npos) << m;
  }
  EXPECT_THROW(take(a, int_array({-4}, {1}), 0), ValueError);
  EXPECT_THROW(take(a, int_array({2}, {1}), 1), ValueError);
  // Computed indices are checked when evaluated; the failure repeats and nothing is written.
  const Array lazy = add(int_array({1, 2}, {2}), 5);
  const Array r = take(a, lazy, 0);
  if (test::gpu_default()) {
    expect_computed_index_out_of_range(r, {0, 0, 0, 0});
    expect_computed_index_out_of_range(take(a, subtract(int_array({0}, {1}), 7), 1), {0, 0, 0});
    expect_computed_index_out_of_range(take(zeros({0, 2}), add(int_array({0}, {1}), 0), 0), {0, 0});
    return;
  }
  try {
    r.eval();
    ADD_FAILURE() << "no throw";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[take]"), std::string::npos) << m;
    EXPECT_NE(m.find("index 6"), std::string::npos) << m;
    EXPECT_NE(m.find("axis 0 with size 3"), std::string::npos) << m;
  }
  EXPECT_THROW(r.eval(), ValueError);
  EXPECT_THROW(take(a, subtract(int_array({0}, {1}), 7), 1).eval(), ValueError);
  EXPECT_THROW(take(zeros({0, 2}), add(int_array({0}, {1}), 0), 0).eval(), ValueError);
}

// ---------------------------------------------------------------- along an axis

TEST(TakeAlongAxis, MatchesReferenceWithBroadcasting) {
  const Array a = random_array({3, 4, 5}, float32, 7);
  const auto av = values(a);
  const Array idx = int_array({0, -1, 2, 3, 1, 0, -4, 2, 2, 3}, {1, 2, 5});  // broadcasts over axis 0
  const auto iv = values(idx);
  const Array r = take_along_axis(a, idx, 1);
  ASSERT_EQ(r.shape(), (Shape{3, 2, 5}));
  std::vector<double> ref;
  for_each_index({3, 2, 5}, [&](const Idx& o) {
    ref.push_back(av[flat({3, 4, 5}, {o[0], wrap(at(iv, {1, 2, 5}, o), 4), o[2]})]);
  });
  expect_close(r, ref);
  // `a` broadcasts too: (1, 4) with indices (3, 2).
  const Array b = random_array({1, 4}, float64, 8);
  const auto bv = values(b);
  const Array r2 = take_along_axis(b, int_array({0, 1, 2, 3, -1, -2}, {3, 2}), 1);
  EXPECT_EQ(r2.shape(), (Shape{3, 2}));
  expect_close(r2, {bv[0], bv[1], bv[2], bv[3], bv[3], bv[2]});
  // Non-contiguous data, last axis.
  const Array t = transposed_input({4, 3}, float64, 9);
  const auto tv = values(t);
  const Array ti = int_array({2, 0, 1, 1, 0, 2, 2, 2}, {4, 2});
  ref.clear();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j) ref.push_back(tv[i * 3 + static_cast<int>(values(ti)[i * 2 + j])]);
  expect_close(take_along_axis(t, ti, -1), ref);
}

TEST(TakeAlongAxis, RejectsBadArguments) {
  const Array a = zeros({3, 4});
  EXPECT_THROW(take_along_axis(a, int_array({0}, {1}), 0), ShapeError);
  EXPECT_THROW(take_along_axis(a, int_array({0, 0}, {2, 1}), 1), ShapeError);
  EXPECT_THROW(take_along_axis(a, Array({0.0f}, {1, 1}), 0), DtypeError);
  EXPECT_THROW(take_along_axis(a, int_array({4}, {1, 1}), 1), ValueError);
  expect_computed_index_out_of_range(take_along_axis(ones({3, 4}), add(int_array({-5}, {1, 1}), 0), 1),
                                     {0, 0, 0});
}

TEST(PutAlongAxis, WritesValuesAtIndices) {
  const Array a = random_array({3, 4}, float64, 10);
  const Array v = random_array({3, 2}, float64, 11);
  const Array idx = int_array({1, -1, 0, 2, 3, 1}, {3, 2});
  const auto av = values(a), vv = values(v), iv = values(idx);
  std::vector<double> ref = av;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) ref[i * 4 + wrap(iv[i * 2 + j], 4)] = vv[i * 2 + j];
  expect_close(put_along_axis(a, idx, v, 1), ref);
  expect_close(a, av);
  // Scalar values of another dtype; indices broadcast along axis 1; axis 0.
  const Array r = put_along_axis(a, int_array({2}, {1, 1}), Array(5), 0);
  ref = av;
  for (int j = 0; j < 4; ++j) ref[8 + j] = 5;
  expect_close(r, ref);
  // Non-contiguous target.
  const Array t = transposed_input({4, 3}, float32, 12);
  const auto tv = values(t);
  ref = tv;
  for (int j = 0; j < 3; ++j) ref[3 * 3 + j] = -2;
  expect_close(put_along_axis(t, int_array({-1, 3, 3}, {1, 3}), Array(-2.0f), 0), ref);
  EXPECT_THROW(put_along_axis(a, int_array({0, 1}, {2, 1}), v, 1), ShapeError);
  EXPECT_THROW(put_along_axis(a, idx, zeros({3, 3}), 1), ShapeError);
  EXPECT_THROW(put_along_axis(a, int_array({4}, {1, 1}), v, 1), ValueError);
}

// ---------------------------------------------------------------- scatter_add and gather

TEST(ScatterAdd, RepeatedIndicesAccumulate) {
  const Array a = random_array({5, 3}, float64, 13);
  const Array u = random_array({4, 3}, float64, 14);
  const Array idx = int_array({0, 2, 0, -1}, {4});
  const auto av = values(a), uv = values(u);
  std::vector<double> ref = av;
  const int rows[] = {0, 2, 0, 4};
  for (int j = 0; j < 4; ++j)
    for (int q = 0; q < 3; ++q) ref[rows[j] * 3 + q] += uv[j * 3 + q];
  expect_close(scatter_add(a, idx, u, 0), ref);
  // Axis 1 with 2-d indices and broadcast (scalar) updates into an int array.
  const Array b = int_array({1, 2, 3, 4, 5, 6}, {2, 3});
  const Array r = scatter_add(b, int_array({0, 0, 2, -1}, {2, 2}), Array(10), 1);
  EXPECT_EQ(r.to_vector<int32_t>(), (std::vector<int32_t>{21, 2, 23, 24, 5, 26}));
  // Non-contiguous a and updates.
  const Array t = transposed_input({3, 4}, float32, 15), ut = transposed_input({3, 2}, float32, 16);
  const auto tv = values(t), utv = values(ut);
  ref = tv;
  for (int p = 0; p < 3; ++p) {
    ref[p * 4 + 3] += utv[p * 2];
    ref[p * 4 + 3] += utv[p * 2 + 1];
  }
  expect_close(scatter_add(t, int_array({3, -1}, {2}), ut, 1), ref);
}

TEST(ScatterAdd, LargeScattersMatchTheReference) {
  // Embedding-backward shape (axis 0, many repeats) and a many-rows case (axis 1).
  const int64_t n = 3000, v = 50, d = 40;
  std::vector<int64_t> iv;
  for (double x : test::random_values(n, 17, 0, v)) iv.push_back(static_cast<int64_t>(x));
  const Array idx = int_array(iv, {n}, int64);
  const Array u = random_array({n, d}, float64, 18);
  const auto uv = values(u);
  std::vector<double> ref(v * d, 0.0);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t q = 0; q < d; ++q) ref[iv[j] * d + q] += uv[j * d + q];
  expect_close(scatter_add(zeros({v, d}, float64), idx, u, 0), ref, 1e-12, 1e-12);
  const Array u2 = random_array({d, n}, float64, 19);
  const auto u2v = values(u2);
  std::vector<double> ref2(d * v, 0.0);
  for (int64_t p = 0; p < d; ++p)
    for (int64_t j = 0; j < n; ++j) ref2[p * v + iv[j]] += u2v[p * n + j];
  expect_close(scatter_add(zeros({d, v}, float64), idx, u2, 1), ref2, 1e-12, 1e-12);
}

TEST(ScatterAdd, RejectsBadArguments) {
  const Array a = zeros({5, 3});
  EXPECT_THROW(scatter_add(a, int_array({0, 1}, {2}), zeros({3, 3}), 0), ShapeError);
  EXPECT_THROW(scatter_add(a, Array({0.0f}), zeros({1, 3}), 0), DtypeError);
  EXPECT_THROW(scatter_add(zeros({2}, bool_), int_array({0}, {1}), zeros({1}, bool_), 0), DtypeError);
  EXPECT_THROW(scatter_add(a, int_array({5}, {1}), zeros({1, 3}), 0), ValueError);
  expect_computed_index_out_of_range(scatter_add(a, add(int_array({-6}, {1}), 0), ones({1, 3}), 0),
                                     std::vector<double>(15, 0.0));
}

TEST(Gather, MultiIndexWithBroadcasting) {
  const Array a = random_array({4, 5, 6}, float32, 20);
  const auto av = values(a);
  const Array i0 = int_array({0, -1}, {2, 1}), i1 = int_array({4, 0, -2}, {3});
  const Array r = gather(a, {i0, i1});
  ASSERT_EQ(r.shape(), (Shape{2, 3, 6}));
  const auto i0v = values(i0), i1v = values(i1);
  std::vector<double> ref;
  for_each_index({2, 3, 6}, [&](const Idx& o) {
    ref.push_back(av[flat({4, 5, 6}, {wrap(i0v[o[0]], 4), wrap(i1v[o[1]], 5), o[2]})]);
  });
  expect_close(r, ref);
  // Every axis indexed; a non-contiguous array; a single index array.
  const Array t = transposed_input({3, 4}, float64, 21);
  const auto tv = values(t);
  expect_close(gather(t, {int_array({2, 0}, {2}), int_array({3, -4}, {2})}), {tv[11], tv[0]});
  expect_close(gather(t, {int_array({1}, {1})}), {tv[4], tv[5], tv[6], tv[7]});
  EXPECT_EQ(gather(t, {}).id(), t.id());
}

TEST(Gather, RejectsBadArguments) {
  const Array a = zeros({3, 4});
  EXPECT_THROW(gather(a, {int_array({0}, {1}), int_array({0}, {1}), int_array({0}, {1})}), ShapeError);
  EXPECT_THROW(gather(a, {int_array({0, 1}, {2}), int_array({0, 1, 2}, {3})}), ShapeError);
  EXPECT_THROW(gather(a, {Array({0.0f})}), DtypeError);
  const Array bad = gather(ones({3, 4}), {int_array({0}, {1}), add(int_array({4}, {1}), 0)});
  if (test::gpu_default()) return expect_computed_index_out_of_range(bad, {0});
  try {
    bad.eval();
    ADD_FAILURE() << "no throw";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("axis 1 with size 4"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- gradients

TEST(IndexGradients, FiniteDifferences) {
  const Array x = random_array({4, 5}, float64, 30);
  const Array idx = int_array({1, -1, 1, 0, 3, 3}, {2, 3});
  check_vjp([&](const Args& a) { return take(a[0], idx, 1); }, {x});
  check_vjp([&](const Args& a) { return take(transpose(a[0]), idx, 0); }, {x});
  check_vjp([&](const Args& a) { return take(a[0], int_array({7, -1, 7}, {3})); }, {x});
  const Array along = int_array({0, 4, 4, 1, -1, 2, 3, 3}, {4, 2});
  check_vjp([&](const Args& a) { return take_along_axis(a[0], along, 1); }, {x});
  check_vjp(
      [&](const Args& a) {
        return take_along_axis(a[0], int_array({0, 2, 2, 1, 1}, {1, 5}), 0);
      },
      {random_array({3, 1}, float64, 31)});  // a broadcasts
  const Array distinct = int_array({0, 4, 2, 1, 3, 2, 1, 0}, {4, 2});
  check_vjp([&](const Args& a) { return put_along_axis(a[0], distinct, a[1], 1); },
            {x, random_array({4, 2}, float64, 32)});
  check_vjp([&](const Args& a) { return put_along_axis(a[0], distinct, a[1], 1); },
            {x, random_array({1}, float64, 33)});  // broadcast values
  const Array rep = int_array({0, 3, 0, -1, 0}, {5});
  check_vjp([&](const Args& a) { return scatter_add(a[0], rep, a[1], 1); },
            {x, random_array({4, 5}, float64, 34)});
  check_vjp([&](const Args& a) { return scatter_add(transpose(a[0]), rep, a[1], 0); },
            {x, random_array({5, 4}, float64, 35)});
  const Array g0 = int_array({0, 3, 3, -4}, {2, 2}), g1 = int_array({1, 4}, {2});
  check_vjp([&](const Args& a) { return gather(a[0], {g0, g1}); }, {x});
  check_vjp([&](const Args& a) { return gather(a[0], {g0}); }, {x});
}

TEST(IndexGradients, IndexInputsGetZeros) {
  const Array x = random_array({4, 3}, float64, 36);
  const Array idx = int_array({0, 2, 2}, {3});
  auto f = [](const Args& a) { return Args{sum(take(a[0], a[1], 0) * take(a[0], a[1], 0))}; };
  auto [outs, grads] = value_and_grad(f, {0, 1})({x, idx});
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_EQ(grads[1].dtype(), int32);
  EXPECT_EQ(grads[1].shape(), idx.shape());
  EXPECT_EQ(grads[1].to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0}));
  const auto xv = values(x);
  std::vector<double> ref(12, 0.0);
  for (int r : {0, 2, 2})
    for (int q = 0; q < 3; ++q) ref[r * 3 + q] += 2 * xv[r * 3 + q];
  expect_close(grads[0], ref);
}

TEST(IndexGradients, SecondOrder) {
  const Array x = random_array({4, 3}, float64, 37);
  const Array idx = int_array({3, 0, 3, -1}, {4});
  test::check_second_order([&](const Args& a) { return take(square(a[0]), idx, 0); }, {x});
  test::check_second_order([&](const Args& a) { return scatter_add(a[0], idx, square(a[1]), 0); },
                           {x, random_array({4, 3}, float64, 38)});
  test::check_second_order(
      [&](const Args& a) {
        return take_along_axis(a[0] * a[0], int_array({2, 0, 1, 1}, {4, 1}), 1);
      },
      {x});
  test::check_second_order(
      [&](const Args& a) {
        return gather(square(a[0]), {idx, int_array({1}, {1})});
      },
      {x});
}

// ---------------------------------------------------------------- vmap and jvp rules

// Applies the vmap rule of `prim` to batched inputs and compares it against `prim` applied to
// each example.
void expect_vmap_prim(const std::shared_ptr<const Primitive>& prim, Dtype dtype, const Args& batched,
                      const std::vector<int>& axes) {
  int64_t n = 0;
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] >= 0) n = batched[i].shape(axes[i]);
  Args per;
  for (int64_t b = 0; b < n; ++b) {
    Args ex;
    for (size_t i = 0; i < batched.size(); ++i)
      ex.push_back(axes[i] < 0 ? batched[i] : take(batched[i], Array(static_cast<int>(b)), axes[i]));
    per.push_back(Array::make(prim->output_shapes(ex)[0], dtype, prim, ex));
  }
  const VmapResult r = prim->vmap({batched, axes});
  ASSERT_EQ(r.outputs.size(), 1u);
  expect_close(r.axes[0] >= 0 ? moveaxis(r.outputs[0], r.axes[0], 0) : r.outputs[0], stack(per), 0, 0);
}
// The primitive that `f` builds from example-shaped inputs.
template <class F>
void expect_vmap_rule(F f, const Args& examples, const Args& batched, const std::vector<int>& axes) {
  const Array y = f(examples);
  ASSERT_EQ(y.inputs().size(), batched.size());
  expect_vmap_prim(y.primitive(), y.dtype(), batched, axes);
}

TEST(IndexRules, Vmap) {
  const Array a = random_array({4, 5}, float32, 40),
              ab = random_array({4, 3, 5}, float32, 41);  // batch 3 at axis 1
  const Array i = int_array({1, -1, 0}, {3}),
              ib = int_array({1, -1, 0, 4, 2, 2}, {2, 3});  // batch 3 at axis 1
  auto tk = [](const Args& x) { return take(x[0], x[1], 1); };
  expect_vmap_rule(tk, {a, i}, {ab, i}, {1, -1});
  expect_vmap_rule(tk, {a, i}, {a, int_array({1, -1, 0, 4, 2, 2}, {3, 2})}, {-1, 0});
  expect_vmap_rule(tk, {a, int_array({1, 2}, {2})}, {ab, ib}, {1, 1});
  auto along = [](const Args& x) { return take_along_axis(x[0], x[1], 1); };
  const Array ia = int_array({0, 1, 2, 3, 4, 0, 1, 2}, {4, 2});
  expect_vmap_rule(along, {a, ia}, {ab, ia}, {1, -1});
  expect_vmap_rule(along, {a, ia}, {a, int_array(std::vector<int64_t>(24, 3), {3, 4, 2})}, {-1, 0});
  auto sa = [](const Args& x) { return scatter_add(x[0], x[1], x[2], 1); };
  const Array u = random_array({4, 3}, float32, 42), ub = random_array({3, 4, 3}, float32, 43);
  expect_vmap_rule(sa, {a, i, u}, {ab, i, u}, {1, -1, -1});
  expect_vmap_rule(sa, {a, i, u}, {a, i, ub}, {-1, -1, 0});
  expect_vmap_rule(sa, {a, int_array({1, 2}, {2}), random_array({4, 2}, float32, 44)},
                   {a, ib, random_array({4, 2, 3}, float32, 45)}, {-1, 1, 2});
  auto put = [](const Args& x) { return put_along_axis(x[0], x[1], x[2], 1); };
  const Array pi = int_array({0, 4, 1, 3, 2, 2, 3, 0}, {4, 2});
  expect_vmap_rule(put, {a, pi, random_array({4, 2}, float32, 46)},
                   {ab, pi, random_array({3, 4, 2}, float32, 47)}, {1, -1, 0});
  auto ga = [](const Args& x) { return gather(x[0], {x[1]}); };
  expect_vmap_rule(ga, {a, i}, {ab, i}, {1, -1});
  const Array ig = int_array({1, -1, 0, 3, 2, 2}, {2, 3});  // in range for a's 4 rows
  expect_vmap_rule(ga, {a, int_array({1, 2}, {2})}, {a, ig}, {-1, 1});
  expect_vmap_rule(ga, {a, int_array({1, 2}, {2})}, {ab, ig}, {1, 1});
}

TEST(IndexRules, VmapOfTheGatherGradient) {
  const Array a = random_array({4, 5}, float32, 48);
  const Array i0 = int_array({1, 3, 1}, {3}), i1 = int_array({0, -1, 0}, {3});
  auto [outs, cots] = vjp([&](const Args& x) { return Args{gather(x[0], {i0, i1})}; }, {a}, {ones({3})});
  const auto prim = cots[0].primitive();  // ScatterAddND(zeros, g, i0, i1)
  ASSERT_NE(prim, nullptr);
  const Array ub = random_array({2, 3}, float32, 49), abatch = random_array({2, 4, 5}, float32, 50);
  expect_vmap_prim(prim, float32, {abatch, ub, i0, i1}, {0, 0, -1, -1});
  expect_vmap_prim(prim, float32, {a, ub, int_array({0, 1, 2, 3, 3, 3}, {2, 3}), i1}, {-1, 0, 0, -1});
}

TEST(IndexRules, JvpAppliesTheOpToTheTangents) {
  const Array a = random_array({4, 3}, float64, 51), t = random_array({4, 3}, float64, 52);
  const Array u = random_array({2, 3}, float64, 53), tu = random_array({2, 3}, float64, 54);
  const Array idx = int_array({3, 3}, {2});
  const Array y = scatter_add(a, idx, u, 0);
  const Args primals = y.inputs(), tangents{t, tu};
  const std::vector<int> argnums{0, 2};
  expect_close(y.primitive()->jvp({primals, tangents, argnums})[0], scatter_add(t, idx, tu, 0), 1e-12, 1e-12);
  const Array z = take(a, idx, 0);
  const Args zp = z.inputs(), zt{t};
  const std::vector<int> first{0};
  expect_close(z.primitive()->jvp({zp, zt, first})[0], take(t, idx, 0), 0, 0);
  const Array pi = int_array({0, 2}, {2, 1});
  const Array w = put_along_axis(a, pi, u, 0);
  const Args wp = w.inputs(), wt{tu};
  const std::vector<int> third{2};
  expect_close(w.primitive()->jvp({wp, wt, third})[0], put_along_axis(zeros_like(a), pi, tu, 0), 0, 0);
}

}  // namespace
}  // namespace kiln
