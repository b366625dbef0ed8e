#include "kiln/core/cpu/reduce.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/cpu/strided.h"

namespace kiln::detail {

std::ostream& operator<<(std::ostream& os, ReduceKind k) {
  constexpr const char* kNames[] = {"sum", "prod", "max", "min", "all", "any", "mean"};
  return os << kNames[static_cast<int>(k)];
}

Dtype reduce_out_dtype(ReduceKind kind, Dtype in) {
  switch (kind) {
    case ReduceKind::sum:
    case ReduceKind::prod:
      if (in == bool_ || in == int8 || in == int16) return int32;
      if (in == uint8 || in == uint16) return uint32;
      return in;
    case ReduceKind::all:
    case ReduceKind::any:
      return bool_;
    default:
      return in;
  }
}

namespace {

constexpr int kLanes = 16;               // independent accumulators of a row reduction
constexpr int64_t kPairwiseBase = 1024;  // rows longer than this are halved (pairwise summation)
constexpr int64_t kTile = 256;           // inner columns one task accumulates
constexpr int64_t kRowBlock = 128;       // rows accumulated in a block before joining the total

template <class T>
constexpr bool kIsFloat =
    std::is_floating_point_v<T> || std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>;

// ---------------------------------------------------------------- per-kind arithmetic

template <ReduceKind K, class T>
auto out_tag() {
  if constexpr (K == ReduceKind::sum || K == ReduceKind::prod)
    return TypeTag<sum_result_t<T>>{};
  else if constexpr (K == ReduceKind::all || K == ReduceKind::any)
    return TypeTag<bool>{};
  else
    return TypeTag<T>{};
}

// Integer sums and products wrap in the unsigned type of the output's width: the bits are those
// of the wrapped signed result, without signed-overflow UB.
template <ReduceKind K, class T>
auto acc_tag() {
  using Out = typename decltype(out_tag<K, T>())::type;
  if constexpr (K == ReduceKind::all || K == ReduceKind::any)
    return TypeTag<bool>{};
  else if constexpr (kIsFloat<T>)
    return TypeTag<compute_t<T>>{};
  else if constexpr (K == ReduceKind::sum || K == ReduceKind::prod)
    return TypeTag<std::make_unsigned_t<Out>>{};
  else
    return TypeTag<T>{};
}

template <ReduceKind K, class T>
struct Op {
  using Out = typename decltype(out_tag<K, T>())::type;
  using Acc = typename decltype(acc_tag<K, T>())::type;
  static constexpr bool kArithmetic = K == ReduceKind::sum || K == ReduceKind::prod;

  static Acc init() {
    if constexpr (K == ReduceKind::sum || K == ReduceKind::any)
      return Acc(0);
    else if constexpr (K == ReduceKind::prod || K == ReduceKind::all)
      return Acc(1);
    else if constexpr (K == ReduceKind::max)
      return std::numeric_limits<Acc>::has_infinity ? -std::numeric_limits<Acc>::infinity()
                                                    : std::numeric_limits<Acc>::lowest();
    else
      return std::numeric_limits<Acc>::has_infinity ? std::numeric_limits<Acc>::infinity()
                                                    : std::numeric_limits<Acc>::max();
  }
  static Acc load(T v) {
    if constexpr (std::is_same_v<Acc, bool>)
      return convert<bool>(v);
    else
      return static_cast<Acc>(v);
  }
  static Acc combine(Acc a, Acc b) {
    if constexpr (K == ReduceKind::sum) {
      return static_cast<Acc>(a + b);
    } else if constexpr (K == ReduceKind::prod) {
      return static_cast<Acc>(a * b);
    } else if constexpr (K == ReduceKind::all) {
      return a && b;
    } else if constexpr (K == ReduceKind::any) {
      return a || b;
    } else if constexpr (std::is_floating_point_v<Acc>) {
      // NaN wins, as in NumPy: b is taken when it is further out or NaN, and a NaN `a` is never
      // replaced. Bitwise | (no short circuit) keeps the select branch-free, so it vectorizes.
      const bool take = (K == ReduceKind::max ? b > a : b < a) | (b != b);
      return take ? b : a;
    } else {
      if constexpr (K == ReduceKind::max)
        return a > b ? a : b;
      else
        return a < b ? a : b;
    }
  }
  static Out finish(Acc a) { return static_cast<Out>(a); }
};

// ---------------------------------------------------------------- task layout

// The [outer, reduced, inner] pattern cut into units: one output row (inner == 1) or one tile of
// at most kTile output columns.
struct Tiling {
  int64_t outer, reduced, inner, tiles;
  Tiling(int64_t o, int64_t r, int64_t i)
      : outer(o), reduced(r), inner(i), tiles(i == 1 ? 1 : (i + kTile - 1) / kTile) {}
  int64_t units() const { return outer * tiles; }
  int64_t width(int64_t u) const { return inner == 1 ? 1 : std::min(kTile, inner - (u % tiles) * kTile); }
  int64_t out_offset(int64_t u) const { return (u / tiles) * inner + (u % tiles) * kTile; }
  int64_t in_offset(int64_t u) const { return (u / tiles) * reduced * inner + (u % tiles) * kTile; }
};

// Splits the reduced range as well when there are too few units to keep the threads busy (a full
// reduction, or a column sum of a few wide rows).
int64_t choose_splits(const Tiling& t) {
  const int threads = num_threads();
  const int64_t work = t.units() * t.reduced * std::min(t.inner, kTile);
  if (threads <= 1 || work < 4 * kElementwiseGrain) return 1;
  const int64_t want = std::min<int64_t>(threads, work / kElementwiseGrain);
  if (t.units() >= want) return 1;
  const int64_t min_rows = std::max<int64_t>(16, 4096 / std::min(t.inner, kTile));
  return std::clamp<int64_t>((want + t.units() - 1) / t.units(), 1,
                             std::max<int64_t>(1, t.reduced / min_rows));
}

// unit(u, r0, r1, acc) reduces rows [r0, r1) of unit u into acc[0, width(u)); join merges the
// results of two consecutive row ranges; store(i, acc) writes output element i.
template <class Acc, class Unit, class Join, class Store>
void drive(const Tiling& t, const Unit& unit, const Join& join, const Store& store) {
  const int64_t splits = choose_splits(t);
  if (splits == 1) {
    const int64_t per_unit = std::max<int64_t>(1, t.reduced * std::min(t.inner, kTile));
    parallel_for(t.units(), std::max<int64_t>(1, kElementwiseGrain / per_unit), [&](int64_t b, int64_t e) {
      Acc acc[kTile];
      for (int64_t u = b; u < e; ++u) {
        unit(u, 0, t.reduced, acc);
        const int64_t o = t.out_offset(u), w = t.width(u);
        for (int64_t j = 0; j < w; ++j) store(o + j, acc[j]);
      }
    });
    return;
  }
  const int64_t n_out = t.outer * t.inner;
  const auto partial = std::make_unique<Acc[]>(static_cast<size_t>(splits * n_out));
  parallel_for(t.units() * splits, 1, [&](int64_t b, int64_t e) {
    for (int64_t task = b; task < e; ++task) {
      const int64_t u = task / splits, s = task % splits;
      unit(u, t.reduced * s / splits, t.reduced * (s + 1) / splits,
           partial.get() + s * n_out + t.out_offset(u));
    }
  });
  // Joined in split order, so the result does not depend on which thread ran what.
  parallel_for(n_out, kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      Acc a = partial[i];
      for (int64_t s = 1; s < splits; ++s) a = join(a, partial[s * n_out + i]);
      store(i, a);
    }
  });
}

// ---------------------------------------------------------------- reductions

// kLanes independent accumulators over at most kPairwiseBase elements. Its own (not inlined)
// function: inlined into the recursion below, GCC compiled some copies of the max/min selects as
// branches, 7x slower in cache.
template <class O, class T>
[[gnu::noinline]] typename O::Acc reduce_block(const T* x, int64_t n) {
  using Acc = typename O::Acc;
  Acc lane[kLanes];
  for (Acc& l : lane) l = O::init();
  int64_t i = 0;
  if constexpr (O::kArithmetic) {  // unrolled: SLP keeps the lanes in registers
    for (; i + kLanes <= n; i += kLanes)
      for (int l = 0; l < kLanes; ++l) lane[l] = O::combine(lane[l], O::load(x[i + l]));
  } else {  // a loop: the loop vectorizer if-converts the selects, SLP would not
    for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 1
      for (int l = 0; l < kLanes; ++l) lane[l] = O::combine(lane[l], O::load(x[i + l]));
    }
  }
  Acc tail = O::init();
  for (; i < n; ++i) tail = O::combine(tail, O::load(x[i]));
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) lane[l] = O::combine(lane[l], lane[l + w]);
  return O::combine(lane[0], tail);
}

// Pairwise over blocks of kPairwiseBase: the rounding error of a float sum grows with log(n), not n.
template <class O, class T>
typename O::Acc reduce_row(const T* x, int64_t n) {
  if (n < kLanes) {
    typename O::Acc r = O::init();
    for (int64_t i = 0; i < n; ++i) r = O::combine(r, O::load(x[i]));
    return r;
  }
  if (n <= kPairwiseBase) return reduce_block<O>(x, n);
  const int64_t half = (n / 2 + kLanes - 1) / kLanes * kLanes;
  return O::combine(reduce_row<O>(x, half), reduce_row<O>(x + half, n - half));
}

// Whole inner rows at a time (vectorizes across columns); blocks of kRowBlock rows are summed
// separately before joining the total, which keeps long column sums accurate.
template <class O, class T>
void reduce_cols(const T* x, int64_t inner, int64_t r0, int64_t r1, int64_t w, typename O::Acc* total) {
  using Acc = typename O::Acc;
  Acc blk[kTile];
  for (int64_t j = 0; j < w; ++j) total[j] = O::init();
  for (int64_t r = r0; r < r1; r += kRowBlock) {
    const int64_t re = std::min(r1, r + kRowBlock);
    const T* row = x + r * inner;
    for (int64_t j = 0; j < w; ++j) blk[j] = O::load(row[j]);
    for (int64_t rr = r + 1; rr < re; ++rr) {
      row = x + rr * inner;
      for (int64_t j = 0; j < w; ++j) blk[j] = O::combine(blk[j], O::load(row[j]));
    }
    for (int64_t j = 0; j < w; ++j) total[j] = O::combine(total[j], blk[j]);
  }
}

template <ReduceKind K, class T>
void reduce_typed(const T* in, void* out_raw, const Tiling& t, bool mean = false) {
  using O = Op<K, T>;
  using Acc = typename O::Acc;
  auto* out = static_cast<typename O::Out*>(out_raw);
  const auto unit = [&](int64_t u, int64_t r0, int64_t r1, Acc* acc) {
    const T* x = in + t.in_offset(u);
    if (t.inner == 1)
      acc[0] = reduce_row<O>(x + r0, r1 - r0);
    else
      reduce_cols<O>(x, t.inner, r0, r1, t.width(u), acc);
  };
  if constexpr (K == ReduceKind::sum && kIsFloat<T>) {
    if (mean) {
      const Acc n = static_cast<Acc>(t.reduced);
      drive<Acc>(t, unit, O::combine, [&](int64_t i, Acc a) { out[i] = O::finish(a / n); });
      return;
    }
  }
  drive<Acc>(t, unit, O::combine, [&](int64_t i, Acc a) { out[i] = O::finish(a); });
}

// ---------------------------------------------------------------- argmax / argmin

template <class C>
struct ArgAcc {
  C value{};
  int32_t index = 0;
};

template <bool kMax, class C>
bool better(C v, C best) {
  if constexpr (std::is_floating_point_v<C>)
    if (v != v) return best == best;  // the first NaN wins, as in NumPy
  return kMax ? v > best : v < best;
}

template <bool kMax, class T>
void arg_typed(const T* in, int32_t* out, const Tiling& t) {
  using C = compute_t<T>;
  using A = ArgAcc<C>;
  const auto unit = [&](int64_t u, int64_t r0, int64_t r1, A* acc) {
    const T* x = in + t.in_offset(u);
    if (t.inner == 1) {
      A a{static_cast<C>(x[r0]), static_cast<int32_t>(r0)};
      for (int64_t r = r0 + 1; r < r1; ++r) {
        const C v = static_cast<C>(x[r]);
        if (better<kMax>(v, a.value)) a = {v, static_cast<int32_t>(r)};
      }
      acc[0] = a;
      return;
    }
    const int64_t w = t.width(u);
    for (int64_t j = 0; j < w; ++j) acc[j] = {static_cast<C>(x[r0 * t.inner + j]), static_cast<int32_t>(r0)};
    for (int64_t r = r0 + 1; r < r1; ++r) {
      const T* row = x + r * t.inner;
      for (int64_t j = 0; j < w; ++j) {
        const C v = static_cast<C>(row[j]);
        if (better<kMax>(v, acc[j].value)) acc[j] = {v, static_cast<int32_t>(r)};
      }
    }
  };
  const auto join = [](const A& a, const A& b) { return better<kMax>(b.value, a.value) ? b : a; };
  drive<A>(t, unit, join, [&](int64_t i, const A& a) { out[i] = a.index; });
}

}  // namespace

void reduce_dense(ReduceKind kind, const void* in, Dtype in_t, void* out, int64_t outer, int64_t reduced,
                  int64_t inner) {
  const Tiling t(outer, reduced, inner);
  visit_dtype<kAllTypes>(in_t, "reduce", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(in);
    switch (kind) {
      case ReduceKind::sum:
        return reduce_typed<ReduceKind::sum>(x, out, t);
      case ReduceKind::prod:
        return reduce_typed<ReduceKind::prod>(x, out, t);
      case ReduceKind::max:
        return reduce_typed<ReduceKind::max>(x, out, t);
      case ReduceKind::min:
        return reduce_typed<ReduceKind::min>(x, out, t);
      case ReduceKind::all:
        return reduce_typed<ReduceKind::all>(x, out, t);
      case ReduceKind::any:
        return reduce_typed<ReduceKind::any>(x, out, t);
      case ReduceKind::mean:
        if constexpr (kIsFloat<T>) return reduce_typed<ReduceKind::sum>(x, out, t, /*mean=*/true);
        throw DtypeError::of("mean", "the kernel takes float input only", "{}", dtype_name(in_t));
    }
  });
}

void arg_reduce_dense(bool is_max, const void* in, Dtype in_t, int32_t* out, int64_t outer, int64_t reduced,
                      int64_t inner) {
  const Tiling t(outer, reduced, inner);
  visit_dtype<kAllTypes>(in_t, "argmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (is_max)
      arg_typed<true>(static_cast<const T*>(in), out, t);
    else
      arg_typed<false>(static_cast<const T*>(in), out, t);
  });
}

ReducePlan plan_reduce(const Shape& shape, const Strides& strides, const Axes& axes) {
  const int nd = static_cast<int>(shape.size());
  std::vector<bool> reduced(nd, false);
  for (int a : axes) reduced[a] = true;
  ReducePlan p;
  int64_t kept = 1;
  for (int d = 0; d < nd; ++d) (reduced[d] ? p.reduced : kept) *= shape[d];

  // Size-1 axes never move the index; the rest, ordered by stride, must tile memory densely.
  std::vector<int> dims;
  for (int d = 0; d < nd; ++d)
    if (shape[d] != 1) dims.push_back(d);
  std::stable_sort(dims.begin(), dims.end(), [&](int a, int b) { return strides[a] > strides[b]; });
  bool direct = dims.empty() || strides[dims.back()] == 1;
  for (size_t i = 0; direct && i + 1 < dims.size(); ++i)
    direct = strides[dims[i]] == strides[dims[i + 1]] * shape[dims[i + 1]];
  // Kept axes in their own order (the output is written densely in memory order), and the reduced
  // axes one block among them.
  int last_kept = -1;
  size_t first_red = dims.size(), last_red = 0;
  for (size_t i = 0; direct && i < dims.size(); ++i) {
    if (reduced[dims[i]]) {
      first_red = std::min(first_red, i);
      last_red = i;
    } else {
      direct = dims[i] > last_kept;
      last_kept = dims[i];
    }
  }
  for (size_t i = first_red; direct && i < last_red; ++i) direct = reduced[dims[i]];

  if (direct) {
    if (first_red == dims.size()) {
      p.outer = kept;
    } else {
      for (size_t i = 0; i < first_red; ++i) p.outer *= shape[dims[i]];
      for (size_t i = last_red + 1; i < dims.size(); ++i) p.inner *= shape[dims[i]];
    }
    return p;
  }
  p.direct = false;
  p.outer = kept;
  for (int d = 0; d < nd; ++d)
    if (!reduced[d]) p.perm.push_back(d);
  for (int d = 0; d < nd; ++d)
    if (reduced[d]) p.perm.push_back(d);
  return p;
}

void copy_permuted(const Array& a, const Axes& perm, void* dst) {
  Shape shape;
  Strides src_strides;
  for (int p : perm) {
    shape.push_back(a.shape()[p]);
    src_strides.push_back(a.strides()[p]);
  }
  const Strides dense = row_major_strides(shape);
  const auto l = collapse<2>(shape, {&dense, &src_strides});
  const int64_t rows = row_count(l), inner = l.shape.back();
  const auto copy = [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* src = static_cast<const U*>(a.raw_data());
    U* out = static_cast<U*>(dst);
    parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(inner, 1)),
                 [&](int64_t rb, int64_t re) {
                   for_each_row(l, rb, re, [&](const auto& off, int64_t n, const auto& st) {
                     for (int64_t i = 0; i < n; ++i) out[off[0] + i * st[0]] = src[off[1] + i * st[1]];
                   });
                 });
  };
  switch (a.itemsize()) {
    case 1:
      return copy(TypeTag<uint8_t>{});
    case 2:
      return copy(TypeTag<uint16_t>{});
    case 4:
      return copy(TypeTag<uint32_t>{});
    default:
      return copy(TypeTag<uint64_t>{});
  }
}

void reduce_array(ReduceKind kind, const Array& in, const Axes& axes, Array& out) {
  if (in.size() == 0) {  // the identity of the reduction everywhere (max/min never get here)
    reduce_dense(kind, in.raw_data(), in.dtype(), out.raw_data(), out.size(), 0, 1);
    return;
  }
  const ReducePlan p = plan_reduce(in.shape(), in.strides(), axes);
  if (p.direct) {
    reduce_dense(kind, in.raw_data(), in.dtype(), out.raw_data(), p.outer, p.reduced, p.inner);
    return;
  }
  const Array tmp = Array::empty_available({in.size()}, in.dtype());
  copy_permuted(in, p.perm, tmp.raw_data());
  reduce_dense(kind, tmp.raw_data(), in.dtype(), out.raw_data(), p.outer, p.reduced, 1);
}

}  // namespace kiln::detail
