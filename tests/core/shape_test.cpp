// Shape ops against naive float64 references written here (plain index loops), finite-difference
// gradient checks, the vmap/jvp rules, and the shared strided copy kernel.
#include <gtest/gtest.h>

#include <functional>

#include "kiln/core/cpu/copy.h"
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

// Reference array of `shape` whose element at i is value(i).
std::vector<double> build(const Shape& shape, const std::function<double(const Idx&)>& value) {
  std::vector<double> out;
  for_each_index(shape, [&](const Idx& i) { out.push_back(value(i)); });
  return out;
}

// Python slice semantics written as a filter over the axis (independent of kiln's count formula).
Idx python_slice(const Slice& s, int64_t n) {
  Idx out;
  auto fix = [&](std::optional<int64_t> v, int64_t missing, int64_t lo, int64_t hi) {
    if (!v) return missing;
    int64_t x = *v < 0 ? *v + n : *v;
    return std::clamp(x, lo, hi);
  };
  if (s.step > 0) {
    const int64_t b = fix(s.start, 0, 0, n), e = fix(s.stop, n, 0, n);
    for (int64_t i = 0; i < n; ++i)
      if (i >= b && i < e && (i - b) % s.step == 0) out.push_back(i);
  } else {
    const int64_t b = fix(s.start, n - 1, -1, n - 1), e = fix(s.stop, -1, -1, n - 1);
    for (int64_t i = n - 1; i >= 0; --i)
      if (i <= b && i > e && (b - i) % (-s.step) == 0) out.push_back(i);
  }
  return out;
}

// The reference of a[slices] for a row-major `a` of `shape`.
std::pair<Shape, std::vector<double>> ref_slice(const std::vector<double>& a, const Shape& shape,
                                                const std::vector<Slice>& slices) {
  std::vector<Idx> picks;
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    picks.push_back(python_slice(d < slices.size() ? slices[d] : Slice{}, shape[d]));
    out.push_back(static_cast<int64_t>(picks.back().size()));
  }
  return {out, build(out, [&](const Idx& i) {
            Idx src(i.size());
            for (size_t d = 0; d < i.size(); ++d) src[d] = picks[d][i[d]];
            return a[flat(shape, src)];
          })};
}

std::vector<double> ref_transpose(const std::vector<double>& a, const Shape& shape, const Axes& perm) {
  Shape out;
  for (int p : perm) out.push_back(shape[p]);
  return build(out, [&](const Idx& i) {
    Idx src(i.size());
    for (size_t d = 0; d < i.size(); ++d) src[perm[d]] = i[d];
    return a[flat(shape, src)];
  });
}

// A non-contiguous array with the given shape: the transpose of a random (reversed-shape) array.
Array transposed_input(const Shape& shape, Dtype dtype, uint64_t seed) {
  Shape rev(shape.rbegin(), shape.rend());
  const Array base = random_array(rev, dtype, seed);
  return transpose(base);
}

// ---------------------------------------------------------------- reshape and friends

TEST(Reshape, KeepsRowMajorOrderAndInfersOneDimension) {
  const Array a = random_array({2, 3, 4}, float32, 1);
  const Array r = reshape(a, {4, -1});
  EXPECT_EQ(r.shape(), (Shape{4, 6}));
  expect_close(r, values(a));
  EXPECT_EQ(reshape(a, {-1}).shape(), (Shape{24}));
  EXPECT_EQ(reshape(Array(3.0f), {1, 1}).shape(), (Shape{1, 1}));
  EXPECT_EQ(reshape(zeros({0, 3}), {3, 0, 5}).shape(), (Shape{3, 0, 5}));
}

TEST(Reshape, SameShapeReturnsTheInputAndContiguousInputIsAView) {
  const Array a = random_array({2, 6}, float32, 2);
  EXPECT_EQ(reshape(a, {2, 6}).id(), a.id());
  const Array r = reshape(a, {3, 4});
  r.eval();
  EXPECT_EQ(r.raw_data(), a.raw_data());
}

TEST(Reshape, NonContiguousInputViewsWhenStridesAllowElseCopies) {
  const Array base = random_array({4, 6}, float64, 3);
  const Array t = transpose(base);  // (6, 4), strides (1, 6)
  const auto tv = ref_transpose(values(base), {4, 6}, {1, 0});
  // Splitting the stride-1 axis keeps a view.
  const Array split_view = reshape(t, {2, 3, 4});
  expect_close(split_view, tv);
  EXPECT_EQ(split_view.raw_data(), base.raw_data());
  // Merging the two axes needs a copy.
  const Array merged = reshape(t, {24});
  expect_close(merged, tv);
  EXPECT_NE(merged.raw_data(), base.raw_data());
  // Views of views: a slice of the transpose, reshaped.
  const Array s = slice(t, {{1, 5}, {std::nullopt, std::nullopt, 2}});  // (4, 2)
  auto [ss, sv] = ref_slice(tv, {6, 4}, {{1, 5}, {std::nullopt, std::nullopt, 2}});
  expect_close(reshape(s, {8}), sv);
  expect_close(reshape(s, {2, 2, 2}), sv);
}

TEST(Reshape, RejectsBadShapes) {
  const Array a = zeros({2, 3});
  EXPECT_THROW(reshape(a, {4, 2}), ShapeError);
  EXPECT_THROW(reshape(a, {-1, -1}), ShapeError);
  EXPECT_THROW(reshape(a, {-2, -3}), ShapeError);
  EXPECT_THROW(reshape(a, {4, -1}), ShapeError);
  EXPECT_THROW(reshape(zeros({0, 2}), {0, -1}), ShapeError);
  EXPECT_THROW(reshape(Array(), {1}), ValueError);
  try {
    reshape(a, {4, 2});
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[reshape]"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("(2,3)"), std::string::npos);
  }
}

TEST(Transpose, PermutesAxes) {
  const Array a = random_array({2, 3, 4}, float32, 4);
  const auto av = values(a);
  expect_close(transpose(a), ref_transpose(av, {2, 3, 4}, {2, 1, 0}));
  const Array t = transpose(a, {1, -1, 0});
  EXPECT_EQ(t.shape(), (Shape{3, 4, 2}));
  expect_close(t, ref_transpose(av, {2, 3, 4}, {1, 2, 0}));
  EXPECT_EQ(transpose(a, {0, 1, 2}).id(), a.id());
  // A transpose of a transpose of a slice.
  const Array s = slice(a, {{}, {std::nullopt, std::nullopt, -1}});
  auto [ss, sv] = ref_slice(av, {2, 3, 4}, {{}, {std::nullopt, std::nullopt, -1}});
  expect_close(transpose(transpose(s, {2, 0, 1}), {0, 2, 1}), ref_transpose(sv, ss, {2, 1, 0}));
}

TEST(Transpose, RejectsBadAxes) {
  const Array a = zeros({2, 3, 4});
  EXPECT_THROW(transpose(a, {0, 1}), ShapeError);
  EXPECT_THROW(transpose(a, {0, 1, 1}), ShapeError);
  EXPECT_THROW(transpose(a, {0, 1, 3}), ShapeError);
  EXPECT_THROW(swapaxes(a, 0, 3), ShapeError);
  EXPECT_THROW(moveaxis(a, -4, 0), ShapeError);
}

TEST(SwapAndMoveAxis, MatchTransposes) {
  const Array a = random_array({2, 3, 4, 5}, float32, 5);
  const auto av = values(a);
  expect_close(swapaxes(a, 0, -1), ref_transpose(av, {2, 3, 4, 5}, {3, 1, 2, 0}));
  expect_close(moveaxis(a, 0, -1), ref_transpose(av, {2, 3, 4, 5}, {1, 2, 3, 0}));
  expect_close(moveaxis(a, -1, 1), ref_transpose(av, {2, 3, 4, 5}, {0, 3, 1, 2}));
  EXPECT_EQ(moveaxis(a, -1, 1).shape(), (Shape{2, 5, 3, 4}));
}

TEST(SqueezeExpandDims, ShapesValuesAndErrors) {
  const Array a = random_array({1, 3, 1, 2}, float32, 6);
  EXPECT_EQ(squeeze(a).shape(), (Shape{3, 2}));
  EXPECT_EQ(squeeze(a, {-2}).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(squeeze(a, {0, 2}).shape(), (Shape{3, 2}));
  EXPECT_EQ(squeeze(a, 0).shape(), (Shape{3, 1, 2}));
  expect_close(squeeze(a), values(a));
  EXPECT_THROW(squeeze(a, {1}), ShapeError);
  EXPECT_THROW(squeeze(a, {0, 0}), ShapeError);
  EXPECT_THROW(squeeze(a, {4}), ShapeError);
  const Array b = zeros({2, 3});
  EXPECT_EQ(expand_dims(b, 0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(expand_dims(b, -1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(expand_dims(b, {0, -1}).shape(), (Shape{1, 2, 3, 1}));
  EXPECT_EQ(expand_dims(b, {1, 3}).shape(), (Shape{2, 1, 3, 1}));
  EXPECT_THROW(expand_dims(b, 3), ShapeError);
  EXPECT_THROW(expand_dims(b, {1, 1}), ShapeError);
  // Squeezing a non-contiguous array stays a view.
  const Array t = transposed_input({3, 1, 4}, float32, 7);
  const Array sq = squeeze(t);
  expect_close(sq, values(t));
  EXPECT_EQ(sq.raw_data(), t.raw_data());
}

TEST(BroadcastTo, RepeatsAlongNewAndUnitAxes) {
  const Array a = random_array({3, 1}, float32, 8);
  const auto av = values(a);
  const Array b = broadcast_to(a, {2, 3, 4});
  expect_close(b, build({2, 3, 4}, [&](const Idx& i) { return av[i[1]]; }));
  EXPECT_EQ(broadcast_to(a, {3, 1}).id(), a.id());
  EXPECT_THROW(broadcast_to(a, {3, 2, 4}), ShapeError);
  EXPECT_THROW(broadcast_to(a, {4}), ShapeError);
  EXPECT_THROW(broadcast_to(zeros({2, 3}), {3}), ShapeError);
  // Broadcast of a transposed view.
  const Array t = transposed_input({2, 1, 3}, float64, 9);
  const auto tv = values(t);
  expect_close(broadcast_to(t, {2, 5, 3}),
               build({2, 5, 3}, [&](const Idx& i) { return tv[i[0] * 3 + i[2]]; }));
}

TEST(Flatten, MergesAxisRanges) {
  const Array a = random_array({2, 3, 4, 5}, float32, 10);
  EXPECT_EQ(flatten(a).shape(), (Shape{120}));
  EXPECT_EQ(flatten(a, 1, 2).shape(), (Shape{2, 12, 5}));
  EXPECT_EQ(flatten(a, -2).shape(), (Shape{2, 3, 20}));
  EXPECT_EQ(flatten(Array(1.0f)).shape(), (Shape{1}));
  expect_close(flatten(a, 1, 2), values(a));
  EXPECT_THROW(flatten(a, 2, 1), ShapeError);
  EXPECT_THROW(flatten(a, 0, 4), ShapeError);
}

// ---------------------------------------------------------------- slicing

TEST(Slice, FollowsPythonRules) {
  // Expected indices from CPython: list(range(7))[start:stop:step].
  const std::vector<std::pair<Slice, Idx>> cases = {
      {{std::nullopt, std::nullopt, 1}, {0, 1, 2, 3, 4, 5, 6}},
      {{std::nullopt, std::nullopt, -1}, {6, 5, 4, 3, 2, 1, 0}},
      {{2, std::nullopt, 1}, {2, 3, 4, 5, 6}},
      {{-2, std::nullopt, 1}, {5, 6}},
      {{std::nullopt, -2, 1}, {0, 1, 2, 3, 4}},
      {{1, 6, 2}, {1, 3, 5}},
      {{6, 1, -2}, {6, 4, 2}},
      {{-1, -8, -1}, {6, 5, 4, 3, 2, 1, 0}},
      {{-100, 100, 1}, {0, 1, 2, 3, 4, 5, 6}},
      {{100, -100, -1}, {6, 5, 4, 3, 2, 1, 0}},
      {{5, 2, 1}, {}},
      {{2, 5, -1}, {}},
      {{std::nullopt, std::nullopt, 3}, {0, 3, 6}},
      {{std::nullopt, std::nullopt, -3}, {6, 3, 0}},
      {{3, std::nullopt, -2}, {3, 1}},
      {{-3, -1, 1}, {4, 5}},
      {{0, 0, 1}, {}},
      {{10, std::nullopt, -1}, {6, 5, 4, 3, 2, 1, 0}},
      {{-10, std::nullopt, -1}, {}},
      {{std::nullopt, -10, -1}, {6, 5, 4, 3, 2, 1, 0}},
      {{std::nullopt, 10, 2}, {0, 2, 4, 6}},
      {{-7, -6, 1}, {0}},
  };
  const Array a = arange(0, 7, 1, float32);
  for (const auto& [s, want] : cases) {
    const Array r = slice(a, {s});
    EXPECT_EQ(r.shape(), (Shape{static_cast<int64_t>(want.size())}));
    std::vector<double> w(want.begin(), want.end());
    expect_close(r, w);
    EXPECT_EQ(python_slice(s, 7), want);  // the test's own reference agrees with CPython
  }
}

TEST(Slice, SeveralAxesWithNegativeStepsOnViews) {
  const Array a = random_array({4, 5, 6}, float32, 11);
  const auto av = values(a);
  const std::vector<Slice> s = {{1, std::nullopt, 2}, {std::nullopt, std::nullopt, -1}, {-2, 0, -3}};
  auto [shape, ref] = ref_slice(av, {4, 5, 6}, s);
  const Array r = slice(a, s);
  EXPECT_EQ(r.shape(), shape);
  expect_close(r, ref);
  // A slice of a slice of a transpose.
  const Array t = transpose(a, {2, 0, 1});  // (6, 4, 5)
  const auto tv = ref_transpose(av, {4, 5, 6}, {2, 0, 1});
  const std::vector<Slice> s1 = {{std::nullopt, std::nullopt, -1}, {1, 4}},
                           s2 = {{1, std::nullopt, 2}, {}, {-1, 0, -2}};
  auto [sh1, r1] = ref_slice(tv, {6, 4, 5}, s1);
  auto [sh2, r2] = ref_slice(r1, sh1, s2);
  const Array got = slice(slice(t, s1), s2);
  EXPECT_EQ(got.shape(), sh2);
  expect_close(got, r2);
  EXPECT_EQ(slice(a, {}).id(), a.id());
}

TEST(Slice, StartStopStridesOverload) {
  const Array a = random_array({5, 6}, float64, 12);
  const auto av = values(a);
  auto [shape, ref] = ref_slice(av, {5, 6}, {{1, 4, 1}, {5, 0, -2}});
  const Array r = slice(a, {1, 5}, {4, 0}, {1, -2});
  EXPECT_EQ(r.shape(), shape);
  expect_close(r, ref);
  expect_close(slice(a, {0, 2}, {5, 4}), ref_slice(av, {5, 6}, {{0, 5, 1}, {2, 4, 1}}).second);
  EXPECT_THROW(slice(a, {0}, {1}), ShapeError);
  EXPECT_THROW(slice(a, {0, 0}, {1, 1}, {1}), ShapeError);
}

TEST(Slice, RejectsBadArguments) {
  const Array a = zeros({2, 3});
  EXPECT_THROW(slice(a, {{}, {}, {}}), ShapeError);
  EXPECT_THROW(slice(a, {{0, 1, 0}}), ValueError);
  EXPECT_EQ(slice(a, {{5, 9}}).shape(), (Shape{0, 3}));
}

TEST(SliceUpdate, WritesIntoACopy) {
  const Array a = random_array({4, 5}, float64, 13);
  const Array u = random_array({2, 3}, float64, 14);
  const auto av = values(a), uv = values(u);
  const std::vector<Slice> s = {{3, 0, -2}, {1, 4}};
  const Array r = slice_update(a, u, s);
  const Idx rows = python_slice(s[0], 4), cols = python_slice(s[1], 5);
  std::vector<double> ref = av;
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < cols.size(); ++j) ref[rows[i] * 5 + cols[j]] = uv[i * 3 + j];
  expect_close(r, ref);
  expect_close(a, av);  // the input is untouched
  // The update broadcasts and converts to a's dtype.
  const Array r2 = slice_update(a, Array(7, int32), {{1, 2}});
  ref = av;
  for (int j = 0; j < 5; ++j) ref[5 + j] = 7;
  EXPECT_EQ(r2.dtype(), float64);
  expect_close(r2, ref);
  // A non-contiguous target and update.
  const Array t = transposed_input({5, 4}, float32, 15);
  const Array ut = transposed_input({2, 4}, float32, 16);
  const auto tv = values(t), utv = values(ut);
  ref = tv;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) ref[(1 + 2 * i) * 4 + j] = utv[i * 4 + j];
  expect_close(slice_update(t, ut, {{1, 4, 2}}), ref);
}

TEST(SliceUpdate, InPlaceOnlyWhenNobodyElseSeesTheBuffer) {
  const Array a = random_array({6}, float32, 17);
  const auto av = values(a);
  // `b` is an intermediate nobody keeps: its buffer may be reused; `a` must stay intact either way.
  Array c = slice_update(a * 2.0f, Array({1.0f, 2.0f}), {{0, 2}});
  c = slice_update(c, Array({3.0f}), {{-1, std::nullopt}});
  std::vector<double> ref;
  for (double v : av) ref.push_back(2 * v);
  ref[0] = 1;
  ref[1] = 2;
  ref[5] = 3;
  expect_close(c, ref);
  expect_close(a, av);
  // A kept intermediate is not overwritten.
  const Array b = a * 2.0f;
  b.eval();
  const Array d = slice_update(b, Array({9.0f}), {{0, 1}});
  d.eval();
  std::vector<double> twice;
  for (double v : av) twice.push_back(2 * v);
  expect_close(b, twice);
  EXPECT_EQ(d.to_vector<float>()[0], 9.0f);
}

TEST(SliceUpdate, RejectsUpdatesThatDoNotFit) {
  const Array a = zeros({4, 5});
  EXPECT_THROW(slice_update(a, zeros({3, 3}), {{0, 2}, {0, 3}}), ShapeError);
  EXPECT_THROW(slice_update(a, zeros({1, 2, 3}), {{0, 2}, {0, 3}}), ShapeError);
  EXPECT_THROW(slice_update(a, zeros({2}), {{}, {}, {}}), ShapeError);
  EXPECT_THROW(slice_update(a, zeros({2}), {{0, 2, 0}}), ValueError);
}

// ---------------------------------------------------------------- joining and splitting

TEST(Concatenate, JoinsAlongAnyAxisAndPromotes) {
  const Array a = random_array({2, 3, 4}, float32, 18), b = random_array({2, 1, 4}, float32, 19);
  const Array c = transposed_input({2, 2, 4}, float32, 20);
  const auto av = values(a), bv = values(b), cv = values(c);
  const Array r = concatenate({a, b, c}, -2);
  ASSERT_EQ(r.shape(), (Shape{2, 6, 4}));
  expect_close(r, build({2, 6, 4}, [&](const Idx& i) {
                 if (i[1] < 3) return av[(i[0] * 3 + i[1]) * 4 + i[2]];
                 if (i[1] < 4) return bv[i[0] * 4 + i[2]];
                 return cv[(i[0] * 2 + i[1] - 4) * 4 + i[2]];
               }));
  const Array mixed = concatenate({Array({1, 2}, {2}), Array({0.5f})});
  EXPECT_EQ(mixed.dtype(), float32);
  expect_close(mixed, {1, 2, 0.5});
  EXPECT_EQ(concatenate({Array(std::vector<bool>{true}, {1}), Array({3}, {1})}).dtype(), int32);
  EXPECT_EQ(concatenate({a}).id(), a.id());
  EXPECT_EQ(concatenate({zeros({0, 2}), ones({1, 2})}).shape(), (Shape{1, 2}));
}

TEST(Concatenate, RejectsMismatchedShapes) {
  EXPECT_THROW(concatenate({}), ValueError);
  EXPECT_THROW(concatenate({zeros({2, 3}), zeros({3, 3})}, 1), ShapeError);
  EXPECT_THROW(concatenate({zeros({2, 3}), zeros({2})}), ShapeError);
  EXPECT_THROW(concatenate({Array(1.0f), Array(2.0f)}), ShapeError);
  EXPECT_THROW(concatenate({zeros({2}), zeros({2})}, 1), ShapeError);
  try {
    concatenate({zeros({2, 3}), zeros({3, 3})}, 1);
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[concatenate]"), std::string::npos) << m;
    EXPECT_NE(m.find("(2,3)"), std::string::npos) << m;
    EXPECT_NE(m.find("(3,3)"), std::string::npos) << m;
  }
}

TEST(Stack, AddsANewAxis) {
  const Array a = random_array({2, 3}, float32, 21), b = transposed_input({2, 3}, float32, 22);
  const auto av = values(a), bv = values(b);
  const Array s0 = stack({a, b});
  EXPECT_EQ(s0.shape(), (Shape{2, 2, 3}));
  expect_close(s0, build({2, 2, 3}, [&](const Idx& i) { return (i[0] ? bv : av)[i[1] * 3 + i[2]]; }));
  const Array s_last = stack({a, b}, -1);
  EXPECT_EQ(s_last.shape(), (Shape{2, 3, 2}));
  expect_close(s_last, build({2, 3, 2}, [&](const Idx& i) { return (i[2] ? bv : av)[i[0] * 3 + i[1]]; }));
  EXPECT_EQ(stack({a, b}, -2).shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(stack({Array(1.0f), Array(2.0f)}).shape(), (Shape{2}));
  EXPECT_THROW(stack({a, zeros({3, 2})}), ShapeError);
  EXPECT_THROW(stack({a, b}, 3), ShapeError);
  EXPECT_THROW(stack({}), ValueError);
}

TEST(Split, EqualSectionsAndIndices) {
  const Array a = random_array({3, 10}, float64, 23);
  const auto av = values(a);
  auto piece = [&](int64_t b, int64_t e) {
    return build({3, e - b}, [&](const Idx& i) { return av[i[0] * 10 + b + i[1]]; });
  };
  const auto parts = split(a, 5, -1);
  ASSERT_EQ(parts.size(), 5u);
  for (int k = 0; k < 5; ++k) expect_close(parts[k], piece(2 * k, 2 * k + 2));
  const auto byidx = split(a, {3, -2}, 1);  // [0:3], [3:-2], [-2:]
  ASSERT_EQ(byidx.size(), 3u);
  expect_close(byidx[0], piece(0, 3));
  expect_close(byidx[1], piece(3, 8));
  expect_close(byidx[2], piece(8, 10));
  const auto unsorted = split(a, {5, 2, 20}, 1);  // [0:5], [5:2] (empty), [2:20], [20:]
  ASSERT_EQ(unsorted.size(), 4u);
  expect_close(unsorted[0], piece(0, 5));
  EXPECT_EQ(unsorted[1].shape(), (Shape{3, 0}));
  expect_close(unsorted[2], piece(2, 10));
  EXPECT_EQ(unsorted[3].shape(), (Shape{3, 0}));
  // Split of a transposed view.
  const auto tparts = split(transpose(a), 2, 0);
  expect_close(tparts[1], ref_transpose(piece(5, 10), {3, 5}, {1, 0}));
  EXPECT_THROW(split(a, 3, 1), ValueError);
  EXPECT_THROW(split(a, 0, 1), ValueError);
  EXPECT_THROW(split(a, 2, 2), ShapeError);
  EXPECT_THROW(split(Array(1.0f), 1), ShapeError);
}

TEST(Pad, ConstantValuePerAxis) {
  const Array a = random_array({2, 3}, float32, 24);
  const auto av = values(a);
  const Array p = pad(a, {{1, 2}, {0, 1}}, 5.0);
  ASSERT_EQ(p.shape(), (Shape{5, 4}));
  EXPECT_EQ(p.dtype(), float32);
  expect_close(p, build({5, 4}, [&](const Idx& i) {
                 const int64_t r = i[0] - 1, c = i[1];
                 return (r >= 0 && r < 2 && c < 3) ? av[r * 3 + c] : 5.0;
               }));
  // One pair for every axis, a 0-d array value, a non-contiguous input.
  const Array t = transposed_input({2, 3}, float64, 25);
  const auto tv = values(t);
  const Array q = pad(t, {{1, 1}}, Array(-1.0));
  expect_close(q, build({4, 5}, [&](const Idx& i) {
                 const int64_t r = i[0] - 1, c = i[1] - 1;
                 return (r >= 0 && r < 2 && c >= 0 && c < 3) ? tv[r * 3 + c] : -1.0;
               }));
  EXPECT_EQ(pad(Array({1, 2}, {2}), {{1, 0}}).to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pad(a, {{0, 0}, {0, 0}}).id(), a.id());
  EXPECT_THROW(pad(a, {{1, 1}, {1, 1}, {1, 1}}), ShapeError);
  EXPECT_THROW(pad(a, {{-1, 0}, {0, 0}}), ValueError);
  EXPECT_THROW(pad(a, {{1, 0}}, Array({1.0f, 2.0f})), ShapeError);
}

TEST(Repeat, WithAndWithoutAxis) {
  const Array a = random_array({2, 3}, float32, 26);
  const auto av = values(a);
  const Array r1 = repeat(a, 2, 1);
  ASSERT_EQ(r1.shape(), (Shape{2, 6}));
  expect_close(r1, build({2, 6}, [&](const Idx& i) { return av[i[0] * 3 + i[1] / 2]; }));
  const Array r0 = repeat(a, 3, -2);
  ASSERT_EQ(r0.shape(), (Shape{6, 3}));
  expect_close(r0, build({6, 3}, [&](const Idx& i) { return av[i[0] / 3 * 3 + i[1]]; }));
  const Array rf = repeat(transpose(a), 2);
  const auto tv = ref_transpose(av, {2, 3}, {1, 0});
  ASSERT_EQ(rf.shape(), (Shape{12}));
  expect_close(rf, build({12}, [&](const Idx& i) { return tv[i[0] / 2]; }));
  EXPECT_EQ(repeat(a, 0, 0).shape(), (Shape{0, 3}));
  EXPECT_EQ(repeat(Array(2.0f), 3).shape(), (Shape{3}));
  EXPECT_THROW(repeat(a, -1, 0), ValueError);
  EXPECT_THROW(repeat(a, 2, 2), ShapeError);
}

TEST(Tile, RepsShorterAndLongerThanRank) {
  const Array a = random_array({2, 3}, float32, 27);
  const auto av = values(a);
  const Array t1 = tile(a, {2});
  ASSERT_EQ(t1.shape(), (Shape{2, 6}));
  expect_close(t1, build({2, 6}, [&](const Idx& i) { return av[i[0] * 3 + i[1] % 3]; }));
  const Array t2 = tile(a, {2, 1, 2});
  ASSERT_EQ(t2.shape(), (Shape{2, 2, 6}));
  expect_close(t2, build({2, 2, 6}, [&](const Idx& i) { return av[i[1] * 3 + i[2] % 3]; }));
  const Array t3 = tile(transpose(a), {3, 2});
  const auto tv = ref_transpose(av, {2, 3}, {1, 0});
  ASSERT_EQ(t3.shape(), (Shape{9, 4}));
  expect_close(t3, build({9, 4}, [&](const Idx& i) { return tv[i[0] % 3 * 2 + i[1] % 2]; }));
  EXPECT_EQ(tile(a, {0, 1}).shape(), (Shape{0, 3}));
  EXPECT_EQ(tile(a, {1, 1, 1}).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(tile(Array(1.0f), {2, 2}).shape(), (Shape{2, 2}));
  EXPECT_THROW(tile(a, {-1}), ValueError);
}

// ---------------------------------------------------------------- gradients

TEST(ShapeGradients, ViewsAndReshapes) {
  const Array x = random_array({2, 3, 4}, float64, 30);
  check_vjp([](const Args& a) { return reshape(a[0], {4, 6}); }, {x});
  check_vjp([](const Args& a) { return reshape(transpose(a[0]), {6, 4}); }, {x});
  check_vjp([](const Args& a) { return transpose(a[0], {1, 2, 0}); }, {x});
  check_vjp([](const Args& a) { return moveaxis(swapaxes(a[0], 0, -1), 0, 1); }, {x});
  check_vjp([](const Args& a) { return broadcast_to(a[0], {5, 2, 3, 4}); }, {x});
  check_vjp([](const Args& a) { return broadcast_to(a[0], {2, 3, 4}); }, {random_array({3, 1}, float64, 31)});
  check_vjp([](const Args& a) { return squeeze(expand_dims(a[0], {0, -1}), {0}); }, {x});
  check_vjp([](const Args& a) { return flatten(a[0], 1); }, {x});
}

TEST(ShapeGradients, SlicingAndUpdates) {
  const Array x = random_array({4, 5, 3}, float64, 32);
  check_vjp(
      [](const Args& a) {
        return slice(a[0], {{1, 4}, {std::nullopt, std::nullopt, -2}, {-1, 0, -1}});
      },
      {x});
  check_vjp([](const Args& a) { return slice(transpose(a[0]), {{1, 3}, {4, 0, -3}}); }, {x});
  const Array u = random_array({2, 3, 3}, float64, 33);
  check_vjp([](const Args& a) { return slice_update(a[0], a[1], {{3, 0, -2}, {0, 5, 2}}); }, {x, u});
  check_vjp(
      [](const Args& a) {
        return slice_update(a[0], a[1], {{1, 2}, {1, 4}});
      },
      {x, random_array({3}, float64, 34)});  // a broadcast update
  check_vjp(
      [](const Args& a) {
        auto parts = split(a[0], {1, 3}, 1);
        return parts[0] * 2.0 + sum(parts[1], 1, true) + sum(parts[2] * parts[2], 1, true);
      },
      {x});
  check_vjp(  // overlapping pieces [0:4], [4:2] (empty), [2:5]: the vjp cannot simply concatenate
      [](const Args& a) {
        auto parts = split(a[0], {4, 2}, 1);
        return concatenate({parts[0], parts[2]}, 1);
      },
      {x});
}

TEST(ShapeGradients, JoiningOps) {
  const Array a = random_array({2, 3}, float64, 35), b = random_array({2, 2}, float64, 36);
  check_vjp(
      [](const Args& x) {
        return concatenate({x[0], transpose(x[1]), x[0]}, -1);
      },
      {a, random_array({2, 2}, float64, 37)});
  check_vjp([](const Args& x) { return concatenate({x[0], x[1]}, 1); }, {a, b});
  check_vjp(
      [](const Args& x) {
        return stack({x[0], x[1] * 2.0}, -1);
      },
      {a, random_array({2, 3}, float64, 38)});
  check_vjp([](const Args& x) { return pad(x[0], {{1, 2}, {0, 1}}, x[1]); }, {a, Array(0.7)});
  check_vjp([](const Args& x) { return pad(transpose(x[0]), {{2, 0}}, 1.5); }, {a});
  check_vjp([](const Args& x) { return repeat(x[0], 3, 1); }, {a});
  check_vjp([](const Args& x) { return repeat(transpose(x[0]), 2); }, {a});
  check_vjp([](const Args& x) { return tile(x[0], {2, 1, 3}); }, {a});
}

TEST(ShapeGradients, SecondOrder) {
  const Array x = random_array({3, 4}, float64, 39);
  test::check_second_order([](const Args& a) { return slice(a[0] * a[0], {{1, 3}, {3, 0, -1}}); }, {x});
  test::check_second_order(
      [](const Args& a) {
        return concatenate({square(a[0]), transpose(a[0])}, 0) * 1.0;
      },
      {random_array({3, 3}, float64, 40)});
  test::check_second_order([](const Args& a) { return pad(a[0] * a[0], {{1, 1}, {0, 2}}, 0.5); }, {x});
  test::check_second_order([](const Args& a) { return tile(square(a[0]), {2, 2}); }, {x});
  test::check_second_order(
      [](const Args& a) {
        return slice_update(square(a[0]), a[0], {{}, {std::nullopt, std::nullopt, 1}});
      },
      {x});
}

// ---------------------------------------------------------------- jvp and vmap rules

// Calls the vmap rule of the primitive that `f` builds on unbatched inputs, with batched ones,
// and compares it against f applied to each example.
void expect_vmap_rule(const std::function<Array(const Args&)>& f, const Args& batched,
                      const std::vector<int>& axes) {
  int64_t n = 0;
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] >= 0) n = batched[i].shape(axes[i]);
  auto example = [&](int64_t b) {
    Args ex;
    for (size_t i = 0; i < batched.size(); ++i) {
      if (axes[i] < 0) {
        ex.push_back(batched[i]);
        continue;
      }
      std::vector<Slice> s(axes[i] + 1);
      s[axes[i]] = {b, b + 1, 1};
      ex.push_back(squeeze(slice(batched[i], s), {axes[i]}));
    }
    return ex;
  };
  const Array first = f(example(0));
  ASSERT_TRUE(first.has_primitive());
  ASSERT_EQ(first.inputs().size(), batched.size());
  const VmapResult r = first.primitive()->vmap({batched, axes});
  ASSERT_EQ(r.outputs.size(), 1u);
  const Array got = r.axes[0] >= 0 ? moveaxis(r.outputs[0], r.axes[0], 0) : r.outputs[0];
  Args per;
  for (int64_t b = 0; b < n; ++b) per.push_back(f(example(b)));
  expect_close(got, stack(per), 0, 0);
}

TEST(ShapeRules, Vmap) {
  const Array x = random_array({3, 4, 5}, float32, 41);  // batch of 4 along axis 1 in most cases
  expect_vmap_rule([](const Args& a) { return reshape(a[0], {5, 3}); }, {x}, {1});
  expect_vmap_rule([](const Args& a) { return transpose(a[0]); }, {x}, {1});
  expect_vmap_rule([](const Args& a) { return broadcast_to(a[0], {2, 3, 5}); }, {x}, {1});
  expect_vmap_rule(
      [](const Args& a) {
        return broadcast_to(a[0], {2, 3, 4});
      },
      {random_array({3, 1, 4}, float32, 42)}, {1});
  expect_vmap_rule([](const Args& a) { return slice(a[0], {{2, 0, -1}, {1, 5, 2}}); }, {x}, {1});
  const Array u = random_array({3, 2}, float32, 43);
  expect_vmap_rule([](const Args& a) { return slice_update(a[0], a[1], {{}, {1, 3}}); }, {x, u}, {1, -1});
  expect_vmap_rule(
      [](const Args& a) {
        return slice_update(a[0], a[1], {{}, {1, 3}});
      },
      {random_array({3, 5}, float32, 44), random_array({3, 2, 4}, float32, 45)}, {-1, 2});
  expect_vmap_rule(
      [](const Args& a) {
        return concatenate({a[0], a[1]}, -1);
      },
      {x, random_array({3, 2}, float32, 46)}, {1, -1});
  expect_vmap_rule(
      [](const Args& a) {
        return pad(a[0], {{1, 0}, {0, 2}}, a[1]);
      },
      {x, Array(3.0f)}, {1, -1});
  expect_vmap_rule(
      [](const Args& a) {
        return pad(a[0], {{1, 0}, {0, 2}}, a[1]);
      },
      {x, Array({1.0f, 2.0f, 3.0f, 4.0f})}, {1, 0});
}

TEST(ShapeRules, VmapOfSplit) {
  const Array x = random_array({3, 4, 6}, float32, 47);
  const auto first = split(squeeze(slice(x, {{}, {0, 1}}), {1}), {2, 5}, 1);
  const Args in{x};
  const std::vector<int> axes{1};
  const VmapResult r = first[0].primitive()->vmap({in, axes});
  ASSERT_EQ(r.outputs.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    Args per;
    for (int b = 0; b < 4; ++b) per.push_back(split(squeeze(slice(x, {{}, {b, b + 1}}), {1}), {2, 5}, 1)[k]);
    expect_close(moveaxis(r.outputs[k], r.axes[k], 0), stack(per), 0, 0);
  }
}

TEST(ShapeRules, JvpAppliesTheOpToTheTangent) {
  const Array x = random_array({3, 4}, float64, 48), t = random_array({3, 4}, float64, 49);
  const std::vector<std::function<Array(const Array&)>> ops = {
      [](const Array& a) {
        return reshape(a, {2, 6});
      },
      [](const Array& a) { return transpose(a); },
      [](const Array& a) {
        return broadcast_to(a, {2, 3, 4});
      },
      [](const Array& a) {
        return slice(a, {{2, 0, -1}});
      },
  };
  for (const auto& op : ops) {
    const Array y = op(x);
    const std::vector<int> argnums{0};
    const Args primals = y.inputs(), tangents{t};
    const auto out = y.primitive()->jvp({primals, tangents, argnums});
    expect_close(out[0], op(t), 0, 0);
  }
  // concatenate with a tangent for its second input only.
  const Array y = concatenate({x, x * 1.0}, 0);
  const std::vector<int> second{1};
  const Args primals = y.inputs(), tangents{t};
  const auto out = y.primitive()->jvp({primals, tangents, second});
  expect_close(out[0], concatenate({zeros_like(x), t}, 0), 0, 0);
}

// ---------------------------------------------------------------- the strided copy kernel

TEST(CopyStrided, LargeTransposesAndConversions) {
  // Large enough for the tiled path and the CPU pool.
  for (Dtype dt : {float32, float64, float16, int8}) {
    const Array base = random_array({300, 517}, dt, 50, -100, 100);
    const auto bv = values(base);
    const Array c = contiguous(transpose(base));
    expect_close(c, ref_transpose(bv, {300, 517}, {1, 0}), 0, 0);
    const Array b3 = reshape(base, {3, 100, 517});
    expect_close(reshape(transpose(b3, {0, 2, 1}), {-1}), ref_transpose(bv, {3, 100, 517}, {0, 2, 1}), 0, 0);
  }
  const Array x = random_array({64, 70}, float32, 51, -3, 3);
  const auto xv = values(x);
  for (Dtype to : {float64, bfloat16, int32, uint8, bool_}) {
    Array dst = Array::empty_available({70, 64}, to);
    Array t = transpose(x);
    t.eval();
    detail::copy_strided(t, dst);
    const Array expect = astype(Array(ref_transpose(xv, {64, 70}, {1, 0}), {70, 64}, float32), to);
    expect_close(dst, values(expect), 0, 0);
  }
}

TEST(CopyStrided, BroadcastSourceAndStridedDestination) {
  const Array row = random_array({5}, float64, 52);
  row.eval();
  Array dst = Array::empty_available({4, 5}, float32);
  detail::copy_strided(row, dst);
  const auto rv = values(row);
  expect_close(dst, build({4, 5}, [&](const Idx& i) { return static_cast<float>(rv[i[1]]); }), 0, 0);
  // Into every other column of a wider buffer.
  Array wide = Array::empty_available({4, 10}, float64);
  const Array zero(0.0);
  detail::copy_strided(zero.raw_data(), float64, {0, 0}, wide.raw_data(), float64, {10, 1}, {4, 10});
  detail::copy_strided(dst.raw_data(), float32, dst.strides(), wide.strided_data<double>() + 1, float64,
                       {10, 2}, {4, 5});
  expect_close(
      wide, build({4, 10}, [&](const Idx& i) { return i[1] % 2 ? static_cast<float>(rv[i[1] / 2]) : 0.0; }),
      0, 0);
}

}  // namespace
}  // namespace kiln
