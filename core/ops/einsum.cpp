// einsum and the contractions built on its pairwise step. Every operand axis carries a label (a
// letter, or one of the "..." dims); einsum then
//   1. takes the diagonal of labels repeated within an operand (transpose + reshape + a strided
//      slice), drops "..." dims of size 1 that broadcast against a larger one (the operand is
//      constant along them), and sums labels used by no other operand and not by the output;
//   2. contracts pairs greedily, as opt_einsum's "greedy": among the pairs sharing a label (any
//      pair when none does) the one with the least size(result) - size(a) - size(b), ties going
//      to fewer multiply-adds. A pair is one batched matmul: a to (batch, a-only, summed),
//      b to (batch, summed, b-only), each a transpose and a reshape (views where the layout
//      allows); the product reshaped to (batch, a-only, b-only). A pair with nothing summed
//      (outer and elementwise products) or nothing but batch and summed labels (dot products)
//      is a broadcast multiply (and a sum) instead, not a GEMM call of rank 1 per batch entry;
//   3. transposes the last operand to the output's order.
#include "kiln/core/ops/einsum.h"

#include <algorithm>
#include <array>
#include <bitset>

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"

namespace kiln {
namespace detail {
namespace {

using Labels = std::vector<int>;

// "..." dim i (counted from the left of the broadcast "..." dims) is label kEllipsis + i.
constexpr int kEllipsis = 256;
constexpr int kLabelCount = kEllipsis + kMaxDims;

// A set of labels (tensordot's are axis numbers, fewer than 2 * kMaxDims).
class LabelSet {
 public:
  LabelSet() = default;
  template <class It>
  LabelSet(It first, It last) {
    insert(first, last);
  }
  void insert(int x) { bits_.set(static_cast<size_t>(x)); }
  template <class It>
  void insert(It first, It last) {
    for (; first != last; ++first) insert(*first);
  }
  bool count(int x) const { return bits_.test(static_cast<size_t>(x)); }

 private:
  std::bitset<kLabelCount> bits_;
};

// Each label's size, -1 for labels not used.
class Sizes {
 public:
  Sizes() { n_.fill(-1); }
  int64_t at(int x) const { return n_[static_cast<size_t>(x)]; }
  int64_t& operator[](int x) { return n_[static_cast<size_t>(x)]; }
  bool count(int x) const { return at(x) >= 0; }

 private:
  std::array<int64_t, kLabelCount> n_;
};

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool contains(const Labels& l, int x) { return std::find(l.begin(), l.end(), x) != l.end(); }

// One operand's subscripts: the letters before and after its "..." (if any).
struct Term {
  Labels before, after;
  bool ellipsis = false;
};

Term parse_term(const std::string& term, const std::string& spec) {
  Term t;
  for (size_t i = 0; i < term.size(); ++i) {
    const char c = term[i];
    if (c == '.') {
      if (term.compare(i, 3, "...") != 0)
        throw ValueError::of("einsum", "'.' outside an ellipsis '...'", "in '{}'", spec);
      if (t.ellipsis)
        throw ValueError::of("einsum", "more than one ellipsis in a term", "'{}' in '{}'", term, spec);
      t.ellipsis = true;
      i += 2;
      continue;
    }
    if (!is_letter(c))
      throw ValueError::of("einsum", "invalid subscript character",
                           "'{}' in '{}' (labels are the letters a-z and A-Z)", c, spec);
    (t.ellipsis ? t.after : t.before).push_back(c);
  }
  return t;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return parts;
}

// The subscripts resolved against the operands' shapes.
struct Spec {
  std::vector<Labels> inputs;  // one label per axis of each operand
  Labels output;
  Sizes sizes;                // each label's size ("..." dims: the broadcast size)
  std::vector<Shape> shapes;  // the operands'
};

Spec parse(const std::string& subscripts, const std::vector<Shape>& shapes) {
  std::string spec;
  for (char c : subscripts)
    if (c != ' ' && c != '\t' && c != '\n') spec.push_back(c);
  const size_t arrow = spec.find("->");
  if (arrow != std::string::npos && spec.find("->", arrow + 1) != std::string::npos)
    throw ValueError::of("einsum", "more than one '->' in the subscripts", "'{}'", subscripts);
  const std::vector<std::string> terms = split(spec.substr(0, arrow), ',');
  if (shapes.empty()) throw ValueError::of("einsum", "no operands", "subscripts '{}'", subscripts);
  if (terms.size() != shapes.size())
    throw ValueError::of("einsum", "operand count differs from the subscripts",
                         "'{}' names {} operands, got {}", subscripts, terms.size(), shapes.size());

  std::vector<Term> parsed;
  int ellipsis_rank = 0;
  for (size_t k = 0; k < terms.size(); ++k) {
    parsed.push_back(parse_term(terms[k], subscripts));
    const Term& t = parsed.back();
    const int letters = static_cast<int>(t.before.size() + t.after.size());
    const int nd = static_cast<int>(shapes[k].size());
    if (t.ellipsis ? letters > nd : letters != nd)
      throw ShapeError::of("einsum", "subscripts do not match the operand's rank",
                           "operand {} has shape {} but '{}' names {}{} dims", k, shape_str(shapes[k]),
                           terms[k], t.ellipsis ? "at least " : "", letters);
    if (t.ellipsis) ellipsis_rank = std::max(ellipsis_rank, nd - letters);
  }

  Spec out;
  out.shapes = shapes;
  std::array<size_t, kLabelCount> first_operand{};
  for (size_t k = 0; k < parsed.size(); ++k) {
    const Term& t = parsed[k];
    Labels labels = t.before;
    const int e = static_cast<int>(shapes[k].size() - t.before.size() - t.after.size());
    for (int i = ellipsis_rank - e; i < ellipsis_rank; ++i) labels.push_back(kEllipsis + i);
    labels.insert(labels.end(), t.after.begin(), t.after.end());
    for (size_t ax = 0; ax < labels.size(); ++ax) {
      const int l = labels[ax];
      const int64_t n = shapes[k][ax];
      int64_t& size = out.sizes[l];
      if (size < 0) {
        size = n;
        first_operand[static_cast<size_t>(l)] = k;
      } else if (size != n) {
        if (l < kEllipsis)
          throw ShapeError::of("einsum", "label sizes differ",
                               "'{}' is {} in operand {} and {} in operand {}", static_cast<char>(l), size,
                               first_operand[static_cast<size_t>(l)], n, k);
        if (size != 1 && n != 1)
          throw ShapeError::of("einsum", "'...' dims do not broadcast",
                               "{} against {} (operand {} has shape {})", size, n, k, shape_str(shapes[k]));
        size = std::max(size, n);
      }
    }
    out.inputs.push_back(std::move(labels));
  }

  if (arrow != std::string::npos) {
    const Term t = parse_term(spec.substr(arrow + 2), subscripts);
    if (!t.ellipsis && ellipsis_rank > 0)
      throw ValueError::of("einsum", "the output has no '...' but the operands' '...' have dims",
                           "'{}' broadcasts {} dims; name them with '...' in the output", subscripts,
                           ellipsis_rank);
    Labels labels = t.before;
    for (int i = 0; i < (t.ellipsis ? ellipsis_rank : 0); ++i) labels.push_back(kEllipsis + i);
    labels.insert(labels.end(), t.after.begin(), t.after.end());
    LabelSet seen;
    for (int l : labels) {
      if (l >= kEllipsis) continue;
      if (seen.count(l))
        throw ValueError::of("einsum", "a label repeats in the output", "'{}' in '{}'", static_cast<char>(l),
                             subscripts);
      seen.insert(l);
      if (!out.sizes.count(l))
        throw ValueError::of("einsum", "an output label is in no operand", "'{}' in '{}'",
                             static_cast<char>(l), subscripts);
    }
    out.output = std::move(labels);
  } else {
    // NumPy's implicit output: the "..." dims, then the letters used exactly once, sorted.
    std::array<int, kEllipsis> count{};
    for (const Labels& l : out.inputs)
      for (int x : l)
        if (x < kEllipsis) ++count[static_cast<size_t>(x)];
    for (int i = 0; i < ellipsis_rank; ++i) out.output.push_back(kEllipsis + i);
    for (int l = 0; l < kEllipsis; ++l)
      if (count[static_cast<size_t>(l)] == 1) out.output.push_back(l);
  }
  return out;
}

double labels_size(const Labels& l, const Sizes& sizes) {
  double n = 1;
  for (int x : l) n *= static_cast<double>(sizes.at(x));
  return n;
}

// The labels a pair's product keeps, in its order: batch (in both, still needed), then the
// labels of only a, then those of only b. `keep` holds the labels needed after the pair.
struct PairLabels {
  Labels batch, summed, a_only, b_only;
  Labels result() const {
    Labels r = batch;
    r.insert(r.end(), a_only.begin(), a_only.end());
    r.insert(r.end(), b_only.begin(), b_only.end());
    return r;
  }
};
PairLabels pair_labels(const Labels& a, const Labels& b, const LabelSet& keep) {
  PairLabels p;
  for (int x : a) (contains(b, x) ? (keep.count(x) ? p.batch : p.summed) : p.a_only).push_back(x);
  for (int x : b)
    if (!contains(a, x)) p.b_only.push_back(x);
  return p;
}

LabelSet kept_labels(const std::vector<Labels>& terms, const Labels& output, size_t i, size_t j) {
  LabelSet keep(output.begin(), output.end());
  for (size_t k = 0; k < terms.size(); ++k)
    if (k != i && k != j) keep.insert(terms[k].begin(), terms[k].end());
  return keep;
}

// opt_einsum's greedy choice (see the top of the file).
std::pair<size_t, size_t> choose_pair(const std::vector<Labels>& terms, const Labels& output,
                                      const Sizes& sizes) {
  std::pair<size_t, size_t> best{0, 1};
  double best_cost = 0, best_flops = 0;
  bool found = false;
  for (int pass = 0; pass < 2 && !found; ++pass)
    for (size_t i = 0; i < terms.size(); ++i)
      for (size_t j = i + 1; j < terms.size(); ++j) {
        const bool shared =
            std::any_of(terms[i].begin(), terms[i].end(), [&](int x) { return contains(terms[j], x); });
        if (pass == 0 && !shared) continue;
        const PairLabels p = pair_labels(terms[i], terms[j], kept_labels(terms, output, i, j));
        const double cost =
            labels_size(p.result(), sizes) - labels_size(terms[i], sizes) - labels_size(terms[j], sizes);
        Labels all = p.result();
        all.insert(all.end(), p.summed.begin(), p.summed.end());
        const double flops = labels_size(all, sizes);
        if (!found || cost < best_cost || (cost == best_cost && flops < best_flops)) {
          best = {i, j};
          best_cost = cost;
          best_flops = flops;
          found = true;
        }
      }
  return best;
}

// An operand during the contraction: its labels and, when einsum runs (not einsum_path), its array.
struct Factor {
  Array a;
  Labels labels;
};

Axes positions(const Labels& labels, const Labels& order) {
  Axes axes;
  for (int x : order)
    axes.push_back(static_cast<int>(std::find(labels.begin(), labels.end(), x) - labels.begin()));
  return axes;
}
bool is_identity(const Axes& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int>(i)) return false;
  return true;
}
Array permuted(const Array& a, const Axes& perm, StreamOrDevice s) {
  return is_identity(perm) ? a : transpose(a, perm, s);
}
Shape sizes_of(const Labels& l, const Sizes& sizes) {
  Shape shape;
  for (int x : l) shape.push_back(sizes.at(x));
  return shape;
}
int64_t product(const Labels& l, const Sizes& sizes) {
  int64_t n = 1;
  for (int x : l) n *= sizes.at(x);
  return n;
}

// Sums the axes of `t` whose labels are not in `keep`.
void sum_unkept(Factor& t, const LabelSet& keep, StreamOrDevice s) {
  Axes axes;
  Labels rest;
  for (size_t i = 0; i < t.labels.size(); ++i) {
    if (keep.count(t.labels[i]))
      rest.push_back(t.labels[i]);
    else
      axes.push_back(static_cast<int>(i));
  }
  if (axes.empty()) return;
  if (t.a.valid()) t.a = sum(t.a, axes, false, s);
  t.labels = std::move(rest);
}

// Drops the size-1 "..." dims of `t` (of shape `shape`) that broadcast against a larger size,
// then replaces each label repeated in `t` by its diagonal.
void broadcasts_and_diagonals(Factor& t, const Shape& shape, const Sizes& sizes, StreamOrDevice s) {
  Axes unit;
  Labels rest;
  for (size_t i = 0; i < t.labels.size(); ++i) {
    const int l = t.labels[i];
    if (l >= kEllipsis && shape[i] == 1 && sizes.at(l) > 1)
      unit.push_back(static_cast<int>(i));
    else
      rest.push_back(l);
  }
  if (!unit.empty()) {
    if (t.a.valid()) t.a = squeeze(t.a, unit, s);
    t.labels = std::move(rest);
  }
  for (;;) {
    size_t p = 0, q = 0;
    for (size_t i = 0; i < t.labels.size() && q == 0; ++i)
      for (size_t j = i + 1; j < t.labels.size(); ++j)
        if (t.labels[i] == t.labels[j]) {
          p = i;
          q = j;
          break;
        }
    if (q == 0) break;
    // The two axes moved last and merged: a[..., i, i] is element i * (n + 1) of the merged axis.
    Axes perm;
    Labels labels;
    for (size_t i = 0; i < t.labels.size(); ++i)
      if (i != p && i != q) {
        perm.push_back(static_cast<int>(i));
        labels.push_back(t.labels[i]);
      }
    const int64_t n = sizes.at(t.labels[p]);
    if (t.a.valid()) {
      Shape flat = sizes_of(labels, sizes);
      flat.push_back(n * n);
      perm.push_back(static_cast<int>(p));
      perm.push_back(static_cast<int>(q));
      const Array a = reshape(permuted(t.a, perm, s), flat, s);
      std::vector<Slice> slices(flat.size());
      slices.back() = Slice{0, n * n, n + 1};
      t.a = slice(a, slices, s);
    }
    labels.push_back(t.labels[p]);
    t.labels = std::move(labels);
  }
}

// `f` as a (batch, rows, cols) stack of matrices (no batch dim when `batch` is empty): a reshape of
// f itself when its axes are already in that order, a transposed view of one when they are in
// (batch, cols, rows) order (matmul takes either without a copy), else a transpose and a reshape.
Array as_matrices(const Factor& f, const Labels& batch, const Labels& rows, const Labels& cols,
                  const Sizes& sizes, StreamOrDevice s) {
  Shape shape;
  if (!batch.empty()) shape.push_back(product(batch, sizes));
  const int64_t r = product(rows, sizes), c = product(cols, sizes);
  Labels flipped = batch;
  flipped.insert(flipped.end(), cols.begin(), cols.end());
  flipped.insert(flipped.end(), rows.begin(), rows.end());
  if (is_identity(positions(f.labels, flipped)) && r > 1 && c > 1) {
    shape.insert(shape.end(), {c, r});
    return swapaxes(reshape(f.a, shape, s), -1, -2, s);
  }
  Labels order = batch;
  order.insert(order.end(), rows.begin(), rows.end());
  order.insert(order.end(), cols.begin(), cols.end());
  shape.insert(shape.end(), {r, c});
  return reshape(permuted(f.a, positions(f.labels, order), s), shape, s);
}

// One pair as one batched matmul (see the top of the file).
Factor contract(Factor a, Factor b, const LabelSet& keep, const Sizes& sizes, StreamOrDevice s) {
  // Labels of one operand only that nothing needs later are summed first.
  LabelSet keep_a = keep, keep_b = keep;
  keep_a.insert(b.labels.begin(), b.labels.end());
  keep_b.insert(a.labels.begin(), a.labels.end());
  sum_unkept(a, keep_a, s);
  sum_unkept(b, keep_b, s);
  const PairLabels p = pair_labels(a.labels, b.labels, keep);
  Factor r{Array(), p.result()};
  if (!a.a.valid()) return r;
  if (p.summed.empty() || (p.a_only.empty() && p.b_only.empty())) {
    // As matrices, (M, 1) x (1, N) or (1, K) x (K, 1) per batch entry: a broadcast multiply over
    // (batch, a-only, b-only, summed), then a sum over the summed labels, instead.
    const int nb = static_cast<int>(p.batch.size()), na = static_cast<int>(p.a_only.size()),
              nbo = static_cast<int>(p.b_only.size()), ns = static_cast<int>(p.summed.size());
    Labels a_order = p.batch, b_order = p.batch;
    a_order.insert(a_order.end(), p.a_only.begin(), p.a_only.end());
    b_order.insert(b_order.end(), p.b_only.begin(), p.b_only.end());
    a_order.insert(a_order.end(), p.summed.begin(), p.summed.end());
    b_order.insert(b_order.end(), p.summed.begin(), p.summed.end());
    Axes a_units, b_units, summed;
    for (int i = 0; i < nbo; ++i) a_units.push_back(nb + na + i);
    for (int i = 0; i < na; ++i) b_units.push_back(nb + i);
    for (int i = 0; i < ns; ++i) summed.push_back(nb + na + nbo + i);
    Array x = permuted(a.a, positions(a.labels, a_order), s),
          y = permuted(b.a, positions(b.labels, b_order), s);
    if (!a_units.empty()) x = expand_dims(x, a_units, s);
    if (!b_units.empty()) y = expand_dims(y, b_units, s);
    r.a = multiply(x, y, s);
    if (!summed.empty()) r.a = sum(r.a, summed, false, s);
    return r;
  }
  const Array x = as_matrices(a, p.batch, p.a_only, p.summed, sizes, s);
  const Array y = as_matrices(b, p.batch, p.summed, p.b_only, sizes, s);
  r.a = reshape(matmul(x, y, s), sizes_of(r.labels, sizes), s);
  return r;
}

// Runs steps 1-3 on `ops` (arrays, or labels only for einsum_path); returns the result and fills
// `path` with the pairs taken.
Array run(const Spec& spec, std::vector<Factor> ops, std::vector<std::pair<int, int>>* path,
          StreamOrDevice s) {
  for (size_t k = 0; k < ops.size(); ++k) broadcasts_and_diagonals(ops[k], spec.shapes[k], spec.sizes, s);
  for (size_t i = 0; i < ops.size(); ++i) {
    LabelSet keep(spec.output.begin(), spec.output.end());
    for (size_t k = 0; k < ops.size(); ++k)
      if (k != i) keep.insert(ops[k].labels.begin(), ops[k].labels.end());
    sum_unkept(ops[i], keep, s);
  }
  while (ops.size() > 1) {
    std::vector<Labels> terms;
    for (const Factor& t : ops) terms.push_back(t.labels);
    const auto [i, j] = choose_pair(terms, spec.output, spec.sizes);
    if (path) path->emplace_back(static_cast<int>(i), static_cast<int>(j));
    Factor r = contract(ops[i], ops[j], kept_labels(terms, spec.output, i, j), spec.sizes, s);
    ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(j));
    ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(i));
    ops.push_back(std::move(r));
  }
  Factor& last = ops.front();
  sum_unkept(last, LabelSet(spec.output.begin(), spec.output.end()), s);
  if (!last.a.valid()) return Array();
  return permuted(last.a, positions(last.labels, spec.output), s);
}

void check_operand(const char* op, const Array& a, size_t k) {
  if (!a.valid())
    throw ValueError::of(op, "an operand is an empty (default-constructed) array", "operand {}", k);
}

Dtype contraction_dtype(const std::vector<Array>& operands) {
  Dtype t = operands.front().dtype();
  for (const Array& a : operands) t = promote_types(t, a.dtype());
  return is_floating(t) ? t : float32;
}

// a and b contracted over axes_a[i] == axes_b[i] (already normalized), as one pair of einsum.
Array contract_axes(const char* op, const Array& a, const Array& b, const Axes& axes_a, const Axes& axes_b,
                    StreamOrDevice s) {
  Sizes sizes;
  Labels la(static_cast<size_t>(a.ndim())), lb(static_cast<size_t>(b.ndim()));
  int next = 0;
  for (int i = 0; i < a.ndim(); ++i) {
    la[static_cast<size_t>(i)] = next;
    sizes[next++] = a.shape(i);
  }
  for (int i = 0; i < b.ndim(); ++i) {
    const auto it = std::find(axes_b.begin(), axes_b.end(), i);
    if (it != axes_b.end()) {
      const int ax = axes_a[static_cast<size_t>(it - axes_b.begin())];
      if (a.shape(ax) != b.shape(i))
        throw ShapeError::of(op, "contracted dims differ", "axis {} of {} against axis {} of {}", ax,
                             shape_str(a.shape()), i, shape_str(b.shape()));
      lb[static_cast<size_t>(i)] = ax;
    } else {
      lb[static_cast<size_t>(i)] = next;
      sizes[next++] = b.shape(i);
    }
  }
  LabelSet keep;
  for (int i = 0; i < next; ++i)
    if (!contains(axes_a, i)) keep.insert(i);
  const Dtype t = contraction_dtype({a, b});
  return contract({astype(a, t, s), la}, {astype(b, t, s), lb}, keep, sizes, s).a;
}

Axes normalized_axes(const char* op, const Axes& axes, int ndim, const char* which) {
  Axes out;
  for (int ax : axes) {
    const int n = ax < 0 ? ax + ndim : ax;
    if (n < 0 || n >= ndim)
      throw ValueError::of(op, "axis out of range", "{} for {}'s {} dims", ax, which, ndim);
    if (contains(out, n)) throw ValueError::of(op, "an axis repeats", "{} in {}'s axes", ax, which);
    out.push_back(n);
  }
  return out;
}

}  // namespace
}  // namespace detail

Array einsum(const std::string& subscripts, const std::vector<Array>& operands, StreamOrDevice s) {
  std::vector<Shape> shapes;
  for (size_t k = 0; k < operands.size(); ++k) {
    detail::check_operand("einsum", operands[k], k);
    shapes.push_back(operands[k].shape());
  }
  const detail::Spec spec = detail::parse(subscripts, shapes);
  const Dtype t = detail::contraction_dtype(operands);
  std::vector<detail::Factor> ops;
  for (size_t k = 0; k < operands.size(); ++k) ops.push_back({astype(operands[k], t, s), spec.inputs[k]});
  return detail::run(spec, std::move(ops), nullptr, s);
}

std::vector<std::pair<int, int>> einsum_path(const std::string& subscripts,
                                             const std::vector<Shape>& shapes) {
  const detail::Spec spec = detail::parse(subscripts, shapes);
  std::vector<detail::Factor> ops;
  for (const detail::Labels& l : spec.inputs) ops.push_back({Array(), l});
  std::vector<std::pair<int, int>> path;
  detail::run(spec, std::move(ops), &path, {});
  return path;
}

Array tensordot(const Array& a, const Array& b, int axes, StreamOrDevice s) {
  detail::check_operand("tensordot", a, 0);
  detail::check_operand("tensordot", b, 1);
  if (axes < 0 || axes > a.ndim() || axes > b.ndim())
    throw ValueError::of("tensordot", "axes out of range", "{} for shapes {} and {}", axes,
                         shape_str(a.shape()), shape_str(b.shape()));
  Axes xa, xb;
  for (int i = 0; i < axes; ++i) {
    xa.push_back(a.ndim() - axes + i);
    xb.push_back(i);
  }
  return detail::contract_axes("tensordot", a, b, xa, xb, s);
}

Array tensordot(const Array& a, const Array& b, const std::vector<int>& axes_a,
                const std::vector<int>& axes_b, StreamOrDevice s) {
  detail::check_operand("tensordot", a, 0);
  detail::check_operand("tensordot", b, 1);
  if (axes_a.size() != axes_b.size())
    throw ValueError::of("tensordot", "the axis lists differ in length", "{} against {}", axes_a.size(),
                         axes_b.size());
  return detail::contract_axes("tensordot", a, b, detail::normalized_axes("tensordot", axes_a, a.ndim(), "a"),
                               detail::normalized_axes("tensordot", axes_b, b.ndim(), "b"), s);
}

Array inner(const Array& a, const Array& b, StreamOrDevice s) {
  detail::check_operand("inner", a, 0);
  detail::check_operand("inner", b, 1);
  if (a.ndim() == 0 || b.ndim() == 0) return multiply(a, b, s);
  if (a.shape(-1) != b.shape(-1))
    throw ShapeError::of("inner", "last dims differ", "{} and {}", shape_str(a.shape()),
                         shape_str(b.shape()));
  return detail::contract_axes("inner", a, b, {a.ndim() - 1}, {b.ndim() - 1}, s);
}

Array outer(const Array& a, const Array& b, StreamOrDevice s) {
  detail::check_operand("outer", a, 0);
  detail::check_operand("outer", b, 1);
  return multiply(reshape(a, {a.size(), 1}, s), reshape(b, {1, b.size()}, s), s);
}

Array kron(const Array& a, const Array& b, StreamOrDevice s) {
  detail::check_operand("kron", a, 0);
  detail::check_operand("kron", b, 1);
  const int nd = std::max(a.ndim(), b.ndim());
  Shape sa(static_cast<size_t>(nd - a.ndim()), 1), sb(static_cast<size_t>(nd - b.ndim()), 1);
  sa.insert(sa.end(), a.shape().begin(), a.shape().end());
  sb.insert(sb.end(), b.shape().begin(), b.shape().end());
  // a as (a0, 1, a1, 1, ...), b as (1, b0, 1, b1, ...): their product interleaves the dims.
  Shape ea, eb, out;
  for (size_t i = 0; i < static_cast<size_t>(nd); ++i) {
    ea.insert(ea.end(), {sa[i], 1});
    eb.insert(eb.end(), {1, sb[i]});
    out.push_back(sa[i] * sb[i]);
  }
  return reshape(multiply(reshape(a, ea, s), reshape(b, eb, s), s), out, s);
}

}  // namespace kiln
