// int16, uint16 and uint64 through every op family, on the default device (the GPU pass runs this
// suite again on the Vulkan device): values against exact references in 128-bit integers computed
// here, wrapping at each dtype's width as NumPy does.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "kiln/core/cpu/dispatch.h"
#include "support/dtypes.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using i128 = __int128;
constexpr Dtype kNew[] = {int16, uint16, uint64};

int bits(Dtype t) { return 8 * size_of(t); }
i128 lowest(Dtype t) { return is_unsigned(t) ? 0 : -(i128{1} << (bits(t) - 1)); }
i128 highest(Dtype t) { return is_unsigned(t) ? (i128{1} << bits(t)) - 1 : (i128{1} << (bits(t) - 1)) - 1; }

// v modulo 2^bits(t), as t holds it (two's complement for the signed types).
i128 wrap(i128 v, Dtype t) {
  const i128 m = i128{1} << bits(t);
  i128 r = v % m;
  if (r < 0) r += m;
  if (!is_unsigned(t) && r > highest(t)) r -= m;
  return r;
}

std::vector<i128> ints(const Array& a) {
  return detail::visit_dtype<kIntTypes | DtypeSet{bool_}>(a.dtype(), "test", [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<i128> out;
    for (T v : a.to_vector<T>()) out.push_back(static_cast<i128>(v));
    return out;
  });
}

Array make(const std::vector<i128>& v, const Shape& shape, Dtype t) {
  return detail::visit_dtype<kIntTypes | DtypeSet{bool_}>(t, "test", [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<T> typed;
    for (i128 x : v) typed.push_back(static_cast<T>(x));
    return Array(typed, shape);
  });
}

// Random values over t's whole range, with its extremes, 0 and +-1 among them.
std::vector<i128> random_ints(int64_t n, Dtype t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<i128> v;
  const i128 edges[] = {lowest(t), highest(t), 0, 1, is_unsigned(t) ? 2 : -1, lowest(t) + 1, highest(t) - 1};
  for (i128 e : edges)
    if (static_cast<int64_t>(v.size()) < n) v.push_back(e);
  while (static_cast<int64_t>(v.size()) < n) {
    const uint64_t r = rng();
    v.push_back(wrap(static_cast<i128>(r), t));
  }
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

std::string str(i128 v) {
  if (v == 0) return "0";
  std::string s;
  const bool neg = v < 0;
  for (i128 x = neg ? -v : v; x > 0; x /= 10)
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(x % 10)));
  return neg ? "-" + s : s;
}

void expect_ints(const Array& a, Dtype dtype, const std::vector<i128>& expected, const std::string& what) {
  ASSERT_EQ(a.dtype(), dtype) << what;
  const std::vector<i128> got = ints(a);
  ASSERT_EQ(got.size(), expected.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != expected[i] && ++bad <= 5)
      ADD_FAILURE() << what << " [" << i << "]: got " << str(got[i]) << ", expected " << str(expected[i]);
}

// a * b modulo 2^bits(t): in uint64, whose products wrap (two uint64 values overflow even i128).
i128 wrap_mul(i128 a, i128 b, Dtype t) {
  return wrap(static_cast<i128>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)), t);
}

i128 floor_div(i128 a, i128 b) {
  i128 q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

TEST(IntDtypes, ArithmeticWrapsAtTheDtypesWidth) {
  for (Dtype t : kNew) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t n = 300;
    const std::vector<i128> a = random_ints(n, t, 1), b = random_ints(n, t, 2);
    const Array x = make(a, {n}, t), y = make(b, {n}, t);
    std::vector<i128> sum, diff, product, quotient, rest, big, small, neg, absolute, sgn, band, bor, bxor,
        inv;
    for (int64_t i = 0; i < n; ++i) {
      sum.push_back(wrap(a[i] + b[i], t));
      diff.push_back(wrap(a[i] - b[i], t));
      product.push_back(wrap_mul(a[i], b[i], t));
      // A zero divisor gives 0 (kiln's rule on both devices); the quotient of min / -1 wraps.
      quotient.push_back(b[i] == 0 ? 0 : wrap(floor_div(a[i], b[i]), t));
      rest.push_back(b[i] == 0 ? 0 : a[i] - floor_div(a[i], b[i]) * b[i]);
      big.push_back(std::max(a[i], b[i]));
      small.push_back(std::min(a[i], b[i]));
      neg.push_back(wrap(-a[i], t));
      absolute.push_back(wrap(a[i] < 0 ? -a[i] : a[i], t));
      sgn.push_back(a[i] > 0 ? 1 : (a[i] < 0 ? -1 : 0));
      const uint64_t ua = static_cast<uint64_t>(a[i]), ub = static_cast<uint64_t>(b[i]);
      band.push_back(wrap(static_cast<i128>(ua & ub), t));
      bor.push_back(wrap(static_cast<i128>(ua | ub), t));
      bxor.push_back(wrap(static_cast<i128>(ua ^ ub), t));
      inv.push_back(wrap(static_cast<i128>(~ua), t));
    }
    expect_ints(x + y, t, sum, "add");
    expect_ints(x - y, t, diff, "subtract");
    expect_ints(x * y, t, product, "multiply");
    expect_ints(floor_divide(x, y), t, quotient, "floor_divide");
    expect_ints(remainder(x, y), t, rest, "remainder");
    expect_ints(maximum(x, y), t, big, "maximum");
    expect_ints(minimum(x, y), t, small, "minimum");
    expect_ints(negative(x), t, neg, "negative");
    expect_ints(abs(x), t, absolute, "abs");
    expect_ints(sign(x), t, sgn, "sign");
    expect_ints(bitwise_and(x, y), t, band, "bitwise_and");
    expect_ints(bitwise_or(x, y), t, bor, "bitwise_or");
    expect_ints(bitwise_xor(x, y), t, bxor, "bitwise_xor");
    expect_ints(bitwise_invert(x), t, inv, "bitwise_invert");
    std::vector<i128> lt, eq, ge;
    for (int64_t i = 0; i < n; ++i) {
      lt.push_back(a[i] < b[i]);
      eq.push_back(a[i] == b[i]);
      ge.push_back(a[i] >= b[i]);
    }
    expect_ints(less(x, y), bool_, lt, "less");
    expect_ints(equal(x, x), bool_, std::vector<i128>(n, 1), "equal to itself");
    expect_ints(equal(x, y), bool_, eq, "equal");
    expect_ints(greater_equal(x, y), bool_, ge, "greater_equal");
  }
}

TEST(IntDtypes, ShiftsAndPowers) {
  for (Dtype t : kNew) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t n = 200;
    const std::vector<i128> a = random_ints(n, t, 3);
    std::vector<i128> counts, left, right;
    for (int64_t i = 0; i < n; ++i) {
      const i128 c = i % (bits(t) + 4);  // past the width too
      counts.push_back(c);
      left.push_back(c >= bits(t) ? 0 : wrap_mul(a[i], i128{1} << c, t));
      right.push_back(c >= bits(t) ? (a[i] < 0 ? -1 : 0) : floor_div(a[i], i128{1} << c));
    }
    const Array x = make(a, {n}, t), c = make(counts, {n}, t);
    expect_ints(left_shift(x, c), t, left, "left_shift");
    expect_ints(right_shift(x, c), t, right, "right_shift");
    std::vector<i128> base, exponent, powers;
    for (int64_t i = 0; i < n; ++i) {
      base.push_back(wrap(a[i], t));
      exponent.push_back(i % 7);
      i128 p = 1;
      for (int k = 0; k < i % 7; ++k) p = wrap_mul(p, a[i], t);
      powers.push_back(p);
    }
    expect_ints(power(make(base, {n}, t), make(exponent, {n}, t)), t, powers, "power");
  }
}

TEST(IntDtypes, CastsToAndFromEveryDtype) {
  for (Dtype t : kNew) {
    for (Dtype u : test::kAllDtypes) {
      SCOPED_TRACE(std::string(dtype_name(u)) + " -> " + std::string(dtype_name(t)));
      // Small values every pair of dtypes holds exactly (bool: 0 and 1).
      const int64_t n = 64;
      std::vector<double> small(n);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t v = (i * 37) % 201 - 100;
        small[i] = u == bool_ ? (i % 3 == 0) : (is_unsigned(u) || is_unsigned(t)) ? std::abs(v) : v;
      }
      const Array src = astype(Array(small, {n}), u);
      std::vector<i128> expected(small.begin(), small.end());
      expect_ints(astype(src, t), t, expected, "exact values");
      // And back: the new dtype into u.
      const Array back = astype(make(expected, {n}, t), u);
      EXPECT_EQ(back.dtype(), u);
      const std::vector<double> got = test::values(back);
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(got[i], u == bool_ ? (small[i] != 0) : small[i]) << i;
    }
    // Integers wrap into t bit for bit (NumPy's astype), from the widest of both signs.
    for (Dtype u : {int64, uint64, int32, uint32}) {
      SCOPED_TRACE(std::string(dtype_name(u)) + " wraps into " + std::string(dtype_name(t)));
      const std::vector<i128> v = random_ints(100, u, 7);
      std::vector<i128> expected;
      for (i128 x : v) expected.push_back(wrap(x, t));
      expect_ints(astype(make(v, {100}, u), t), t, expected, "wrapped");
    }
    // Floats truncate toward zero.
    const Array f = Array(std::vector<double>{2.75, 1000.5, 0.25, 30000.0, 12.999}, {5});
    expect_ints(astype(f, t), t, {2, 1000, 0, 30000, 12}, "float64 truncated");
    expect_ints(astype(astype(f, float32), t), t, {2, 1000, 0, 30000, 12}, "float32 truncated");
  }
  // uint64 values past 2^53 and 2^63 to float64: correctly rounded.
  const Array big =
      Array(std::vector<uint64_t>{(uint64_t{1} << 63) + 1, ~uint64_t{0}, uint64_t{1} << 53}, {3});
  EXPECT_EQ(astype(big, float64).to_vector<double>(), (std::vector<double>{0x1p63, 0x1p64, 0x1p53}));
}

TEST(IntDtypes, ReductionsAccumulateAsNumPyWhereKilnDoes) {
  for (Dtype t : kNew) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t rows = 6, cols = 45;
    const std::vector<i128> a = random_ints(rows * cols, t, 11);
    const Array x = make(a, {rows, cols}, t);
    // sum and prod: int16 into int32 and uint16 into uint32 (as int8 and uint8 do), uint64 wraps.
    const Dtype acc = t == int16 ? int32 : t == uint16 ? uint32 : uint64;
    std::vector<i128> row_sum(rows, 0), col_sum(cols, 0), row_max(rows, lowest(t) - 1),
        row_min(rows, highest(t) + 1);
    std::vector<i128> argmax_r(rows, 0), argmin_r(rows, 0), row_prod(rows, 1);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const i128 v = a[r * cols + c];
        row_sum[r] = wrap(row_sum[r] + v, acc);
        col_sum[c] = wrap(col_sum[c] + v, acc);
        if (v > row_max[r]) row_max[r] = v, argmax_r[r] = c;
        if (v < row_min[r]) row_min[r] = v, argmin_r[r] = c;
        if (c < 5) row_prod[r] = wrap(row_prod[r] * (((v % 9) + 9) % 9), acc);
      }
    expect_ints(sum(x, 1), acc, row_sum, "sum over columns");
    expect_ints(sum(x, 0), acc, col_sum, "sum over rows");
    expect_ints(sum(transpose(x), 0), acc, row_sum, "sum of a transposed view");
    expect_ints(max(x, 1), t, row_max, "max");
    expect_ints(min(x, 1), t, row_min, "min");
    expect_ints(argmax(x, 1), int32, argmax_r, "argmax");
    expect_ints(argmin(x, 1), int32, argmin_r, "argmin");
    // Small factors: an int32 product past its range is undefined on the CPU.
    expect_ints(prod(slice(remainder(x, make({9}, {1}, t)), {0, 0}, {rows, 5}), 1), acc, row_prod, "prod");
    expect_ints(any(x, Axes{1}), bool_, std::vector<i128>(rows, 1), "any");
  }
}

TEST(IntDtypes, ScansKeepOrderAndWidth) {
  for (Dtype t : kNew) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t rows = 3, cols = 70;
    const std::vector<i128> a = random_ints(rows * cols, t, 13);
    const Array x = make(a, {rows, cols}, t);
    const Dtype acc = t == int16 ? int32 : t == uint16 ? uint32 : uint64;
    std::vector<i128> csum(a.size()), cmax(a.size()), cmin(a.size());
    for (int64_t r = 0; r < rows; ++r) {
      i128 s = 0, hi = lowest(t), lo = highest(t);
      for (int64_t c = 0; c < cols; ++c) {
        const i128 v = a[r * cols + c];
        s = wrap(s + v, acc);
        hi = std::max(hi, v);
        lo = std::min(lo, v);
        csum[r * cols + c] = s;
        cmax[r * cols + c] = hi;
        cmin[r * cols + c] = lo;
      }
    }
    expect_ints(cumsum(x, 1), acc, csum, "cumsum");
    expect_ints(cummax(x, 1), t, cmax, "cummax");
    expect_ints(cummin(x, 1), t, cmin, "cummin");
  }
}

TEST(IntDtypes, SortsInTheirOwnOrder) {
  for (Dtype t : kNew) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t rows = 4, cols = 300;  // past one sort tile on the GPU for 64-bit keys
    std::vector<i128> a = random_ints(rows * cols, t, 17);
    for (int64_t i = 0; i < rows * cols; i += 9) a[i] = a[i / 2];  // ties
    const Array x = make(a, {rows, cols}, t);
    std::vector<i128> sorted(a.size()), order(a.size());
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<int64_t> idx(cols);
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(),
                       [&](int64_t i, int64_t j) { return a[r * cols + i] < a[r * cols + j]; });
      for (int64_t c = 0; c < cols; ++c) {
        sorted[r * cols + c] = a[r * cols + idx[c]];
        order[r * cols + c] = idx[c];
      }
    }
    expect_ints(sort(x, 1), t, sorted, "sort");
    expect_ints(argsort(x, 1), int32, order, "argsort");
  }
}

TEST(IntDtypes, IndexingAndJoinsMoveValuesUnchanged) {
  for (Dtype t : kNew) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t rows = 5, cols = 7;
    const std::vector<i128> a = random_ints(rows * cols, t, 19);
    const Array x = make(a, {rows, cols}, t);
    auto at = [&](int64_t r, int64_t c) { return a[r * cols + c]; };
    // take along axis 0 with repeats and a negative index.
    const Array rows_idx = Array(std::vector<int32_t>{4, 0, -1, 2, 0}, {5});
    std::vector<i128> taken;
    for (int64_t r : {4, 0, 4, 2, 0})
      for (int64_t c = 0; c < cols; ++c) taken.push_back(at(r, c));
    expect_ints(take(x, rows_idx, 0), t, taken, "take");
    // take_along_axis and put_along_axis.
    std::vector<int32_t> pick(rows * 2);
    std::vector<i128> along;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < 2; ++k) {
        pick[r * 2 + k] = static_cast<int32_t>((r + 3 * k) % cols);
        along.push_back(at(r, pick[r * 2 + k]));
      }
    const Array p = Array(pick, {rows, 2});
    expect_ints(take_along_axis(x, p, 1), t, along, "take_along_axis");
    const std::vector<i128> fill = random_ints(rows * 2, t, 23);
    std::vector<i128> put(a);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < 2; ++k) put[r * cols + pick[r * 2 + k]] = fill[r * 2 + k];
    expect_ints(put_along_axis(x, p, make(fill, {rows, 2}, t), 1), t, put, "put_along_axis");
    // scatter_add wraps.
    const std::vector<i128> upd = random_ints(3 * cols, t, 29);
    std::vector<i128> added(a);
    const int32_t targets[] = {1, 3, 1};
    for (int k = 0; k < 3; ++k)
      for (int64_t c = 0; c < cols; ++c)
        added[targets[k] * cols + c] = wrap(added[targets[k] * cols + c] + upd[k * cols + c], t);
    expect_ints(scatter_add(x, Array(std::vector<int32_t>{1, 3, 1}, {3}), make(upd, {3, cols}, t), 0), t,
                added, "scatter_add");
    // Joins, pads, flips and where.
    std::vector<i128> joined(a);
    joined.insert(joined.end(), a.begin(), a.begin() + cols);
    expect_ints(concatenate({x, slice(x, {0, 0}, {1, cols})}, 0), t, joined, "concatenate");
    std::vector<i128> padded;
    for (int64_t r = 0; r < rows; ++r) {
      padded.push_back(7);
      for (int64_t c = 0; c < cols; ++c) padded.push_back(at(r, c));
    }
    expect_ints(pad(x, {{0, 0}, {1, 0}}, 7), t, padded, "pad");
    std::vector<i128> flipped, transposed, chosen;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) flipped.push_back(at(r, cols - 1 - c));
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = 0; r < rows; ++r) transposed.push_back(at(r, c));
    expect_ints(flip(x, 1), t, flipped, "flip");
    expect_ints(contiguous(transpose(x)), t, transposed, "transposed copy");
    const Array y = make(random_ints(rows * cols, t, 31), {rows, cols}, t);
    const std::vector<i128> b = ints(y);
    for (int64_t i = 0; i < rows * cols; ++i) chosen.push_back(i % 3 == 0 ? a[i] : b[i]);
    std::vector<bool> mask(rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) mask[i] = i % 3 == 0;
    expect_ints(where(Array(mask, {rows, cols}), x, y), t, chosen, "where");
    expect_ints(full({2, 3}, 5, t), t, std::vector<i128>(6, 5), "full");
    std::vector<i128> updated(a);
    for (int64_t c = 2; c < 5; ++c) updated[1 * cols + c] = b[c - 2];
    expect_ints(slice_update(x, slice(y, {0, 0}, {1, 3}), {Slice{1, 2}, Slice{2, 5}}), t, updated,
                "slice_update");
  }
}

TEST(IntDtypes, MixedDtypesPromoteAsNumPy) {
  const Array i8 = Array(std::vector<int8_t>{-128, 127, -1}, {3}),
              u8 = Array(std::vector<uint8_t>{255, 255, 1}, {3});
  expect_ints(i8 + u8, int16, {127, 382, 0}, "int8 + uint8");
  const Array i16 = Array(std::vector<int16_t>{-32768, 32767, 5}, {3});
  const Array u16 = Array(std::vector<uint16_t>{65535, 1, 7}, {3});
  expect_ints(i16 + u16, int32, {32767, 32768, 12}, "int16 + uint16");
  expect_ints(u16 * u8, uint16, {wrap(65535 * 255, uint16), 255, 7}, "uint16 * uint8");
  const Array u64 = Array(std::vector<uint64_t>{uint64_t{1} << 63, 3, 0}, {3});
  const Array mixed = u64 + Array(std::vector<int64_t>{-1, 2, -5}, {3});
  EXPECT_EQ(mixed.dtype(), float64);
  EXPECT_EQ(mixed.to_vector<double>(), (std::vector<double>{0x1p63, 5.0, -5.0}));
  EXPECT_EQ((i16 * 2.5).dtype(), float32);
  expect_ints(i16 + 1, int16, {-32767, -32768, 6}, "a weak scalar keeps int16 and wraps");
  EXPECT_THROW(i16 + 40000, ValueError);
  EXPECT_THROW(u16 + 70000, ValueError);
  EXPECT_THROW(u64 + (-1), ValueError);
  expect_ints(u64 + 1, uint64, {(i128{1} << 63) + 1, 4, 1}, "uint64 + 1");
}

TEST(IntDtypes, RandintSpansEachRange) {
  const Array key = random::key(5);
  for (Dtype t : kNew) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t lo = t == int16 ? -32768 : 0;
    const int64_t hi = t == uint64 ? (int64_t{1} << 62) : t == int16 ? 32768 : 65536;
    const Array r = random::randint({4000}, key, lo, hi, t);
    ASSERT_EQ(r.dtype(), t);
    const std::vector<i128> v = ints(r);
    const auto [mn, mx] = std::minmax_element(v.begin(), v.end());
    EXPECT_GE(*mn, lo);
    EXPECT_LT(*mx, hi);
    // 4000 draws reach within 1% of both ends.
    EXPECT_LT(*mn - lo, (hi - lo) / 100);
    EXPECT_LT(hi - 1 - *mx, (hi - lo) / 100);
  }
}

TEST(IntDtypes, IntegerInputsCarryZeroTangents) {
  const Array w = Array(std::vector<float>{0.5f, -2.0f, 3.0f}, {3});
  const Array i = Array(std::vector<int16_t>{3, -4, 100}, {3});
  auto f = [](const std::vector<Array>& a) { return std::vector<Array>{astype(a[0], float32) * a[1]}; };
  const auto [outs, cots] = vjp(f, {i, w}, {Array(std::vector<float>{1.0f, 1.0f, 1.0f}, {3})});
  EXPECT_EQ(cots[1].to_vector<float>(), (std::vector<float>{3.0f, -4.0f, 100.0f}));
  EXPECT_EQ(cots[0].to_vector<int16_t>(), (std::vector<int16_t>{0, 0, 0}));
  const auto [jouts, tangents] =
      jvp(f, {i, w},
          {Array(std::vector<int16_t>{1, 1, 1}, {3}), Array(std::vector<float>{1.0f, 0.0f, 2.0f}, {3})});
  EXPECT_EQ(tangents[0].to_vector<float>(), (std::vector<float>{3.0f, 0.0f, 200.0f}));
}

}  // namespace
}  // namespace kiln
