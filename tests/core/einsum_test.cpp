// einsum, einsum_path, tensordot, inner, outer and kron against float64 references in plain loops,
// gradients by finite differences, jvp against the product rule, vmap against a loop over the
// batch, and argument errors.
#include "kiln/core/ops/einsum.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "support/error_of.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using test::expect_close;
using test::random_array;
using test::values;

// The definition by brute force: every assignment of every label, summed into the output. `spec`
// is explicit ("ij,jk->ik", letters only); an operand dim of size 1 broadcasts (index 0).
struct Ref {
  std::vector<double> v;
  Shape shape;
};
Ref ref_einsum(const std::string& spec, const std::vector<Array>& ops) {
  const size_t arrow = spec.find("->");
  const std::string out = spec.substr(arrow + 2);
  std::vector<std::string> terms(1);
  for (char c : spec.substr(0, arrow)) {
    if (c == ',')
      terms.emplace_back();
    else
      terms.back().push_back(c);
  }
  std::map<char, int64_t> size;
  for (size_t k = 0; k < terms.size(); ++k)
    for (size_t i = 0; i < terms[k].size(); ++i)
      size[terms[k][i]] = std::max(size[terms[k][i]], ops[k].shape(int(i)));
  std::vector<char> labels;
  for (auto [c, n] : size) labels.push_back(c);
  Ref r;
  for (char c : out) r.shape.push_back(size[c]);
  r.v.assign(static_cast<size_t>(shape_size(r.shape)), 0.0);
  std::vector<std::vector<double>> vals;
  for (const Array& a : ops) vals.push_back(values(a));
  std::map<char, int64_t> idx;
  for (char c : labels) idx[c] = 0;
  for (;;) {
    double p = 1;
    for (size_t k = 0; k < terms.size(); ++k) {
      int64_t flat = 0;
      for (size_t i = 0; i < terms[k].size(); ++i) {
        const int64_t n = ops[k].shape(int(i));
        flat = flat * n + (n == 1 ? 0 : idx[terms[k][i]]);
      }
      p *= vals[k][static_cast<size_t>(flat)];
    }
    int64_t o = 0;
    for (char c : out) o = o * size[c] + idx[c];
    r.v[static_cast<size_t>(o)] += p;
    size_t d = labels.size();
    while (d > 0 && ++idx[labels[d - 1]] == size[labels[d - 1]]) idx[labels[--d]] = 0;
    if (d == 0) break;
  }
  return r;
}

struct Case {
  std::string subscripts;  // as passed to einsum
  std::string reference;   // the same contraction with letters only, explicit
  std::vector<Shape> shapes;
};

const Case kCases[] = {
    {"ij,jk->ik", "ij,jk->ik", {{3, 4}, {4, 5}}},
    {"ij,jk", "ij,jk->ik", {{2, 3}, {3, 4}}},                  // implicit output
    {" ij , kj -> ik ", "ij,kj->ik", {{3, 4}, {2, 4}}},        // spaces, b transposed
    {"bij,bjk->bik", "bij,bjk->bik", {{2, 3, 4}, {2, 4, 3}}},  // batch matmul
    {"bhqd,bhkd->bhqk", "bhqd,bhkd->bhqk", {{2, 2, 3, 4}, {2, 2, 5, 4}}},
    {"ii->i", "ii->i", {{4, 4}}},  // diagonal
    {"ii", "ii->", {{4, 4}}},      // trace
    {"iii->i", "iii->i", {{3, 3, 3}}},
    {"iji->j", "iji->j", {{3, 2, 3}}},
    {"ij->ji", "ij->ji", {{3, 4}}},
    {"ij->", "ij->", {{3, 4}}},
    {"ij->j", "ij->j", {{3, 4}}},
    {"ijk->kji", "ijk->kji", {{2, 3, 4}}},
    {"i,j->ij", "i,j->ij", {{3}, {4}}},  // outer
    {"i,j", "i,j->ij", {{3}, {4}}},
    {"ij,ij->ij", "ij,ij->ij", {{3, 4}, {3, 4}}},  // Hadamard: batch only
    {"ij,ij->", "ij,ij->", {{3, 4}, {3, 4}}},
    {"i,i->", "i,i->", {{5}, {5}}},
    {"ba,cb", "ba,cb->ac", {{3, 2}, {4, 3}}},  // implicit output sorted
    {"aB,Bc", "aB,Bc->ac", {{2, 3}, {3, 4}}},  // upper-case labels
    {"Ab,bA", "Ab,bA->", {{3, 4}, {4, 3}}},
    {",ij->ij", ",ij->ij", {{}, {2, 3}}},  // a 0-d operand
    {"ij,jk,kl->il", "ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 2}}},
    {"ab,bc,cd,de->ae", "ab,bc,cd,de->ae", {{2, 3}, {3, 2}, {2, 4}, {4, 3}}},
    {"ijk,jl,lk->i", "ijk,jl,lk->i", {{2, 3, 4}, {3, 2}, {2, 4}}},
    {"i,i,i->", "i,i,i->", {{4}, {4}, {4}}},
    {"i,i,i->i", "i,i,i->i", {{4}, {4}, {4}}},
    {"ij,k,jk->ik", "ij,k,jk->ik", {{2, 3}, {4}, {3, 4}}},
    {"ijk,ikl,ilm->ijm", "ijk,ikl,ilm->ijm", {{2, 2, 3}, {2, 3, 2}, {2, 2, 3}}},
    {"i,jk,l->", "i,jk,l->", {{2}, {3, 2}, {3}}},                         // no shared label: outer products
    {"...ij,...jk->...ik", "abij,bjk->abik", {{2, 1, 3, 4}, {5, 4, 2}}},  // "..." broadcast
    {"...ij,...jk", "abij,bjk->abik", {{2, 1, 3, 4}, {5, 4, 2}}},
    {"...ii->...i", "aii->ai", {{3, 4, 4}}},
    {"i...->...", "iab->ab", {{3, 2, 2}}},
    {"...,...->...", "ab,ab->ab", {{2, 3}, {1, 3}}},
    {"i...j,j...->...i", "iabj,jab->abi", {{2, 3, 1, 4}, {4, 1, 2}}},
    {"...ij->ji", "ij->ji", {{3, 4}}},  // "..." of no dims
};

std::vector<Array> operands(const Case& c, Dtype t, uint64_t seed) {
  std::vector<Array> ops;
  for (const Shape& s : c.shapes) ops.push_back(random_array(s, t, seed++));
  return ops;
}

TEST(Einsum, MatchesLoopReference) {
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.subscripts);
    const std::vector<Array> ops = operands(c, float64, seed);
    seed += 10;
    const Ref r = ref_einsum(c.reference, ops);
    const Array y = einsum(c.subscripts, ops);
    EXPECT_EQ(y.dtype(), float64);
    ASSERT_EQ(y.shape(), r.shape);
    expect_close(y, r.v, 1e-12, 1e-12);
  }
}

TEST(Einsum, EveryFloatDtype) {
  const Case c{"bij,bkj,bk->bi", "bij,bkj,bk->bi", {{2, 3, 4}, {2, 5, 4}, {2, 5}}};
  uint64_t seed = 500;
  for (Dtype t : {float64, float32, float16, bfloat16}) {
    const std::vector<Array> ops = operands(c, t, seed);
    seed += 3;
    const Array y = einsum(c.subscripts, ops);
    EXPECT_EQ(y.dtype(), t);
    const double tol = t == float64 ? 1e-12 : t == float32 ? 1e-5 : t == float16 ? 2e-2 : 1e-1;
    expect_close(y, ref_einsum(c.reference, ops).v, tol, tol);
  }
  // Mixed dtypes promote; integers compute in float32 as matmul does.
  const Array a = random_array({2, 3}, float32, 520), b = random_array({3, 2}, float64, 521);
  EXPECT_EQ(einsum("ij,jk->ik", {a, b}).dtype(), float64);
  const Array ia = astype(Array(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}), int32);
  const Array y = einsum("ij,kj->ik", {ia, ia});
  EXPECT_EQ(y.dtype(), float32);
  expect_close(y, std::vector<double>{14, 32, 32, 77}, 0, 0);
}

TEST(Einsum, EmptyDims) {
  EXPECT_EQ(einsum("ij,jk->ik", {ones({0, 3}), ones({3, 2})}).shape(), (Shape{0, 2}));
  // Summing over an empty label gives zeros.
  expect_close(einsum("ij,jk->ik", {ones({2, 0}), ones({0, 3})}), std::vector<double>(6, 0.0), 0, 0);
  expect_close(einsum("ii->", {ones({0, 0})}), std::vector<double>{0.0}, 0, 0);
}

TEST(Einsum, NonContiguousOperands) {
  const Array a = swapaxes(random_array({4, 3}, float32, 530), 0, 1);           // (3, 4)
  const Array b = slice(random_array({8, 5}, float32, 531), {Slice{0, 8, 2}});  // (4, 5)
  expect_close(einsum("ij,jk->ik", {a, b}), ref_einsum("ij,jk->ik", {a, b}).v, 1e-5, 1e-5);
  expect_close(einsum("ii->i", {slice(a, {Slice{}, Slice{0, 3}})}),
               ref_einsum("ii->i", {slice(a, {Slice{}, Slice{0, 3}})}).v, 1e-6, 1e-6);
}

TEST(Einsum, GreedyPath) {
  // The pair that removes the most elements goes first; ties go to fewer multiply-adds.
  EXPECT_EQ(einsum_path("ij,jk,kl->il", {{50, 50}, {50, 50}, {50, 1}}),
            (std::vector<std::pair<int, int>>{{1, 2}, {0, 1}}));
  EXPECT_EQ(einsum_path("ij,jk,kl->il", {{100, 100}, {100, 2}, {2, 100}}),
            (std::vector<std::pair<int, int>>{{0, 1}, {0, 1}}));
  // Pairs sharing a label come before outer products, whatever their size.
  EXPECT_EQ(einsum_path("i,jk,k->ij", {{2}, {30, 40}, {40}}),
            (std::vector<std::pair<int, int>>{{1, 2}, {0, 1}}));
  EXPECT_TRUE(einsum_path("ij->ji", {{2, 3}}).empty());
  // The order does not change the value: a chain whose greedy order is right to left.
  const Case c{"ij,jk,kl->il", "ij,jk,kl->il", {{6, 6}, {6, 6}, {6, 1}}};
  const std::vector<Array> ops = operands(c, float64, 540);
  expect_close(einsum(c.subscripts, ops), ref_einsum(c.reference, ops).v, 1e-12, 1e-12);
}

// Primitives named `name` in the unevaluated graph of `a`.
int count_primitives(const Array& a, const std::string& name) {
  if (!a.has_primitive()) return 0;
  int n = a.primitive()->name() == name ? 1 : 0;
  for (const Array& in : a.inputs()) n += count_primitives(in, name);
  return n;
}

TEST(Einsum, LowersToOneMatmulPerPair) {
  const Array a = random_array({2, 3, 4}, float32, 550), b = random_array({2, 5, 4}, float32, 551),
              c = random_array({5, 6}, float32, 552);
  EXPECT_EQ(count_primitives(einsum("bij,bkj->bik", {a, b}), "Matmul"), 1);
  EXPECT_EQ(count_primitives(einsum("bij,bkj,kl->bil", {a, b, c}), "Matmul"), 2);
  // Outer, elementwise and dot products multiply instead.
  EXPECT_EQ(count_primitives(einsum("bij,bij->bi", {a, a}), "Matmul"), 0);
  const Array v = random_array({4}, float32, 553);
  EXPECT_EQ(count_primitives(einsum("i,j->ij", {v, v}), "Matmul"), 0);
}

TEST(Einsum, VjpMatchesFiniteDifferences) {
  const Case grad_cases[] = {
      {"ij,jk->ik", "", {{2, 3}, {3, 2}}},
      {"bij,bjk->bik", "", {{2, 2, 3}, {2, 3, 2}}},
      {"ii->i", "", {{3, 3}}},
      {"ii", "", {{3, 3}}},
      {"i,j->ij", "", {{3}, {2}}},
      {"...ij,...jk->...ik", "", {{2, 1, 2, 3}, {3, 3, 2}}},
      {"ij,jk,kl->il", "", {{2, 3}, {3, 2}, {2, 2}}},
      {"iji,jk->k", "", {{2, 3, 2}, {3, 2}}},
      {"i,i,i->", "", {{3}, {3}, {3}}},
  };
  uint64_t seed = 600;
  for (const Case& c : grad_cases) {
    SCOPED_TRACE(c.subscripts);
    const std::string sub = c.subscripts;
    test::check_vjp([sub](const std::vector<Array>& in) { return einsum(sub, in); },
                    operands(c, float64, seed));
    seed += 5;
  }
  test::check_second_order(
      [](const std::vector<Array>& in) {
        return einsum("ij,jk,kl->il", {in[0], in[1], in[1] * in[0]});
      },
      {random_array({3, 3}, float64, 650), random_array({3, 3}, float64, 651)});
}

// einsum is multilinear: its tangent is the sum over operands of einsum with that operand's tangent.
TEST(Einsum, JvpIsTheProductRule) {
  const Case cases[] = {
      {"ij,jk->ik", "ij,jk->ik", {{2, 3}, {3, 4}}},
      {"ij,jk,kl->il", "ij,jk,kl->il", {{2, 3}, {3, 4}, {4, 2}}},
      {"...ii,...i->...", "aii,ai->a", {{2, 3, 3}, {2, 3}}},
  };
  uint64_t seed = 700;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.subscripts);
    const std::vector<Array> x = operands(c, float64, seed), t = operands(c, float64, seed + 5);
    seed += 10;
    const std::string sub = c.subscripts;
    const auto f = [sub](const std::vector<Array>& in) { return std::vector<Array>{einsum(sub, in)}; };
    const auto [y, ty] = jvp(f, x, t);
    std::vector<double> e(values(y[0]).size(), 0.0);
    for (size_t k = 0; k < x.size(); ++k) {
      std::vector<Array> mixed = x;
      mixed[k] = t[k];
      const Ref r = ref_einsum(c.reference, mixed);
      for (size_t i = 0; i < e.size(); ++i) e[i] += r.v[i];
    }
    expect_close(ty[0], e, 1e-12, 1e-12);
  }
}

TEST(Einsum, VmapMatchesLoopOverBatch) {
  const int kB = 3;
  const Array a = random_array({kB, 2, 3}, float64, 800);  // batched on axis 0
  const Array b = random_array({3, kB, 4}, float64, 801);  // batched on axis 1
  const Array w = random_array({4, 2}, float64, 802);      // shared
  const auto f = [](const std::vector<Array>& in) {
    return std::vector<Array>{einsum("ij,jk,kl->il", in), einsum("ii->i", {einsum("ij,jk,kl->il", in)})};
  };
  const auto out = vmap(f, {0, 1, -1}, {0, 1})({a, b, w});
  for (int i = 0; i < kB; ++i) {
    const Array ai = take(a, Array(i), 0), bi = take(b, Array(i), 1);
    const Ref r = ref_einsum("ij,jk,kl->il", {ai, bi, w});
    expect_close(take(out[0], Array(i), 0), r.v, 1e-12, 1e-12);
    const std::vector<double> diag{r.v[0], r.v[3]};
    expect_close(take(out[1], Array(i), 1), diag, 1e-12, 1e-12);
  }
  // An ellipsis einsum under vmap: the batch is one more broadcast dim.
  const Array x = random_array({kB, 2, 2, 3}, float64, 803), y = random_array({3, 2}, float64, 804);
  const auto g = [](const std::vector<Array>& in) {
    return std::vector<Array>{einsum("...ij,jk->...ik", in)};
  };
  const Array gy = vmap(g, {0, -1})({x, y})[0];
  for (int i = 0; i < kB; ++i)
    expect_close(take(gy, Array(i), 0), ref_einsum("aij,jk->aik", {take(x, Array(i), 0), y}).v, 1e-12, 1e-12);
}

TEST(Einsum, Errors) {
  const Array a = ones({2, 3}), b = ones({3, 4}), c = ones({4, 4});
  using test::error_of;
  EXPECT_EQ(error_of<ValueError>([&] { einsum("ij,jk->ik", {a}); }),
            "[einsum] operand count differs from the subscripts: 'ij,jk->ik' names 2 operands, got 1");
  EXPECT_EQ(error_of<ShapeError>([&] {
              einsum("ij,jk->ik", {a, c});
            }),
            "[einsum] label sizes differ: 'j' is 3 in operand 0 and 4 in operand 1");
  EXPECT_EQ(error_of<ShapeError>([&] {
              einsum("ijk,jk->i", {a, b});
            }),
            "[einsum] subscripts do not match the operand's rank: operand 0 has shape (2,3) but 'ijk' names "
            "3 dims");
  EXPECT_EQ(error_of<ValueError>([&] {
              einsum("ij,jk->iq", {a, b});
            }),
            "[einsum] an output label is in no operand: 'q' in 'ij,jk->iq'");
  EXPECT_THROW(einsum("ij->ii", {c}), ValueError);        // repeated output label
  EXPECT_THROW(einsum("i1,jk->ik", {a, b}), ValueError);  // not a letter
  EXPECT_THROW(einsum("i.j->i", {a}), ValueError);        // a lone '.'
  EXPECT_THROW(einsum("...i...->i", {a}), ValueError);    // two ellipses
  EXPECT_THROW(einsum("ij->i->j", {a}), ValueError);      // two arrows
  EXPECT_THROW(einsum("ij", {}), ValueError);             // no operands
  EXPECT_THROW(einsum("ij", {Array()}), ValueError);      // empty array
  EXPECT_THROW(einsum("ii->i", {a}), ShapeError);         // diagonal of a non-square pair
  EXPECT_THROW(einsum("...i,...i->...", {ones({2, 3}), ones({4, 3})}), ShapeError);  // no broadcast
  EXPECT_THROW(einsum("...ij,jk->ik", {ones({5, 2, 3}), b}), ValueError);            // '...' dims dropped
  EXPECT_THROW(einsum("...ijk->i", {a}), ShapeError);                                // more labels than dims
  EXPECT_THROW(einsum_path("ij,jk", {{2, 3}, {4, 4}}), ShapeError);
}

// ---- tensordot, inner, outer, kron

TEST(Tensordot, MatchesLoopReference) {
  const Array a = random_array({2, 3, 4}, float64, 900), b = random_array({3, 4, 5}, float64, 901);
  expect_close(tensordot(a, b), ref_einsum("ijk,jkl->il", {a, b}).v, 1e-12, 1e-12);
  EXPECT_EQ(tensordot(a, b).shape(), (Shape{2, 5}));
  const Array c = random_array({4, 5}, float64, 902);
  expect_close(tensordot(a, c, 1), ref_einsum("ijk,kl->ijl", {a, c}).v, 1e-12, 1e-12);
  const Array d = random_array({2, 2}, float64, 903);
  EXPECT_EQ(tensordot(a, d, 0).shape(), (Shape{2, 3, 4, 2, 2}));
  expect_close(tensordot(a, d, 0), ref_einsum("ijk,lm->ijklm", {a, d}).v, 1e-12, 1e-12);
  // Axis lists, in any order, negative axes counted from the end.
  const Array e = random_array({4, 6, 2}, float64, 904);
  expect_close(tensordot(a, e, {0, -1}, {2, 0}), ref_einsum("ijk,kmi->jm", {a, e}).v, 1e-12, 1e-12);
  for (Dtype t : {float32, float16, bfloat16}) {
    const Array at = astype(a, t), bt = astype(b, t);
    EXPECT_EQ(tensordot(at, bt).dtype(), t);
    expect_close(tensordot(at, bt), ref_einsum("ijk,jkl->il", {at, bt}).v, 5e-2, 5e-2);
  }
  test::check_vjp(
      [](const std::vector<Array>& in) {
        return tensordot(in[0], in[1], {1, 0}, {0, 2});
      },
      {random_array({2, 3, 2}, float64, 905), random_array({3, 2, 2}, float64, 906)});
  EXPECT_THROW(tensordot(a, b, 3), ValueError);
  EXPECT_THROW(tensordot(a, b, -1), ValueError);
  EXPECT_THROW(tensordot(a, c, 2), ShapeError);
  EXPECT_THROW(tensordot(a, b, {0}, {0, 1}), ValueError);
  EXPECT_THROW(tensordot(a, b, {3}, {0}), ValueError);
  EXPECT_THROW(tensordot(a, b, {1, 1}, {0, 1}), ValueError);
  EXPECT_EQ(test::error_of<ShapeError>([&] { tensordot(a, b, {0}, {0}); }),
            "[tensordot] contracted dims differ: axis 0 of (2,3,4) against axis 0 of (3,4,5)");
}

TEST(Inner, MatchesLoopReference) {
  const Array a = random_array({2, 3, 4}, float64, 910), b = random_array({5, 4}, float64, 911);
  const Array y = inner(a, b);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5}));
  expect_close(y, ref_einsum("ijk,lk->ijl", {a, b}).v, 1e-12, 1e-12);
  const Array v = random_array({4}, float64, 912);
  expect_close(inner(v, v), ref_einsum("i,i->", {v, v}).v, 1e-12, 1e-12);
  const Array s = random_array({}, float64, 913);
  expect_close(inner(s, a), ref_einsum(",ijk->ijk", {s, a}).v, 1e-12, 1e-12);
  test::check_vjp([](const std::vector<Array>& in) { return inner(in[0], in[1]); },
                  {random_array({2, 3}, float64, 914), random_array({2, 2, 3}, float64, 915)});
  EXPECT_EQ(test::error_of<ShapeError>([&] {
              inner(a, random_array({4, 3}, float64, 916));
            }),
            "[inner] last dims differ: (2,3,4) and (4,3)");
}

TEST(Outer, MatchesLoopReference) {
  const Array a = random_array({2, 3}, float64, 920), b = random_array({4}, float64, 921);
  const Array y = outer(a, b);
  EXPECT_EQ(y.shape(), (Shape{6, 4}));
  expect_close(y, ref_einsum("i,j->ij", {reshape(a, {6}), b}).v, 1e-12, 1e-12);
  EXPECT_EQ(outer(astype(a, float16), astype(b, float16)).dtype(), float16);
  test::check_vjp([](const std::vector<Array>& in) { return outer(in[0], in[1]); },
                  {random_array({3}, float64, 922), random_array({2, 2}, float64, 923)});
  EXPECT_THROW(outer(Array(), b), ValueError);
}

TEST(Kron, MatchesLoopReference) {
  const Array a = random_array({2, 3}, float64, 930), b = random_array({4, 2}, float64, 931);
  const Array y = kron(a, b);
  EXPECT_EQ(y.shape(), (Shape{8, 6}));
  const std::vector<double> va = values(a), vb = values(b);
  std::vector<double> e(48);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        for (int l = 0; l < 2; ++l) e[(i * 4 + k) * 6 + j * 2 + l] = va[i * 3 + j] * vb[k * 2 + l];
  expect_close(y, e, 1e-12, 1e-12);
  // Ranks differ: the vector gets a leading unit dim.
  const Array v = random_array({3}, float64, 932);
  EXPECT_EQ(kron(v, b).shape(), (Shape{4, 6}));
  std::vector<double> ev(24);
  const std::vector<double> vv = values(v);
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int l = 0; l < 2; ++l) ev[k * 6 + j * 2 + l] = vv[j] * vb[k * 2 + l];
  expect_close(kron(v, b), ev, 1e-12, 1e-12);
  test::check_vjp([](const std::vector<Array>& in) { return kron(in[0], in[1]); },
                  {random_array({2, 2}, float64, 933), random_array({3, 2}, float64, 934)});
  const auto f = [](const std::vector<Array>& in) { return std::vector<Array>{kron(in[0], in[1])}; };
  const Array batch = random_array({3, 2, 3}, float64, 935);
  const Array yb = vmap(f, {0, -1})({batch, b})[0];
  for (int i = 0; i < 3; ++i)
    expect_close(take(yb, Array(i), 0), values(kron(take(batch, Array(i), 0), b)), 0, 0);
  EXPECT_THROW(kron(a, Array()), ValueError);
}

}  // namespace
}  // namespace kiln
