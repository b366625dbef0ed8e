// MLX's general gather and scatters (core/ops/index_more.h) on index.cpp's row kernels, and the
// ScatterReduce primitive (scatter, scatter_max, scatter_min, scatter_prod).
//
// A gather of slices becomes index.cpp's Gather of single rows: with k = max(axes) + 1, the leading
// k dims are all indexed, an axis of `axes` by its index plus 0 .. size - 1 (its window), an axis
// before k that is not in `axes` by 0 .. size - 1; the dims from k on are sliced statically. The
// index arrays then have shape B + sizes[:k] and the rows read are B + sizes, already in MLX's order.
// A scatter writes the same rows into a's leading block (its dims from k on sliced to the
// updates' sizes, then put back with slice_update). Only index arithmetic is added, and every rule
// comes from the row primitives.
#include "kiln/core/ops/index_more.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/index.h"
#include "kiln/core/ops/index_impl.h"
#include "kiln/core/ops/scan.h"
#include "kiln/core/ops/shape_primitives.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/primitive.h"
#include "kiln/core/vulkan/gpu_scatter.h"

namespace kiln {
namespace detail {
namespace {

using gpu::ScatterOp;

const char* op_name(ScatterOp op) {
  switch (op) {
    case ScatterOp::set:
      return "scatter";
    case ScatterOp::max:
      return "scatter_max";
    case ScatterOp::min:
      return "scatter_min";
    default:
      return "scatter_prod";
  }
}

// ---------------------------------------------------------------- CPU kernel

// dst[rows[j] * q + c] = f(dst[rows[j] * q + c], upd[j * q + c]) for j in order. Collisions are
// only between different j, so the work splits over chunks of the q columns.
template <class T, class F>
void combine_rows(T* dst, const T* upd, int64_t q, const int64_t* rows, int64_t j_count, F f) {
  const int64_t chunk = std::max<int64_t>(64, kElementwiseGrain / std::max<int64_t>(j_count, 1));
  const int64_t qc = std::min(chunk, std::max<int64_t>(q, 1));
  const int64_t tasks = (q + qc - 1) / qc;
  parallel_for(tasks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t q0 = t * qc, q1 = std::min(q, q0 + qc);
      for (int64_t j = 0; j < j_count; ++j) {
        T* d = dst + rows[j] * q;
        const T* u = upd + j * q;
        for (int64_t c = q0; c < q1; ++c) d[c] = f(d[c], u[c]);
      }
    }
  });
}

template <class T>
bool is_nan(T v) {
  if constexpr (std::is_integral_v<T>)
    return false;
  else
    return std::isnan(static_cast<compute_t<T>>(v));
}

// The combining functions, as the GPU's scatter_reduce_rows.comp computes them.
template <class T>
T keep_max(T acc, T v) {
  if (is_nan(acc)) return acc;
  return is_nan(v) || static_cast<compute_t<T>>(acc) < static_cast<compute_t<T>>(v) ? v : acc;
}
template <class T>
T keep_min(T acc, T v) {
  if (is_nan(acc)) return acc;
  return is_nan(v) || static_cast<compute_t<T>>(v) < static_cast<compute_t<T>>(acc) ? v : acc;
}
template <class T>
T times(T acc, T v) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(acc) * static_cast<U>(v)));  // wraps
  } else {
    return static_cast<T>(static_cast<compute_t<T>>(acc) * static_cast<compute_t<T>>(v));
  }
}

// ---------------------------------------------------------------- primitive

Array make_scatter_reduce(const Array& a, const Array& upd, std::vector<Array> indices, ScatterOp op,
                          StreamOrDevice s);

// Index arrays with the batch axis in front, led by arange(n) for the batched operand's new axis.
std::vector<Array> batched_indices(std::span<const Array> idx, std::span<const int> axes, int64_t n,
                                   Stream s) {
  std::vector<Array> out;
  for (size_t i = 0; i < idx.size(); ++i) out.push_back(batch_front(idx[i], axes[i], n, s));
  Shape ar(out[0].ndim(), 1);
  ar[0] = n;
  const Array r = reshape(arange(0, static_cast<double>(n), 1, int64, s), ar, s);
  out.insert(out.begin(), broadcast_to(r, out[0].shape(), s));
  return out;
}

// Inputs a, updates (B + a.shape[k:], a's dtype) and k index arrays of shape B; output a's shape.
//
// Every rule is linear in the tangents through two weights, wx (a's shape) and wu (the updates'):
// t_out = wx * t_a + scatter_add(0, wu * t_updates) and, transposed, g_a = wx * g and
// g_updates = wu * gather(g). set: wx is 0 where an update landed, wu 1 for the winners (found as
// JAX does, by scattering ids); max and min: 1 / count for the old value and the updates equal to
// the result; prod: the product of the other factors, from the product of the nonzero ones and the
// count of zeros (so no factor is divided by when zero).
class ScatterReduce final : public PrimitiveWithParams<ScatterReduce> {
 public:
  ScatterReduce(Stream s, ScatterOp op) : PrimitiveWithParams(s), op_(op) {}
  const char* name() const override {
    switch (op_) {
      case ScatterOp::set:
        return "Scatter";
      case ScatterOp::max:
        return "ScatterMax";
      case ScatterOp::min:
        return "ScatterMin";
      default:
        return "ScatterProd";
    }
  }
  auto params() const { return std::tie(op_); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return {in[0].shape()}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const auto indices = in.subspan(2);
    const auto rows = load_rows(op_name(op_), in[0].shape(), indices);
    const Array upd = dense_copy(in[1]);
    init_from(out[0], in[0]);
    int64_t q = 1;
    for (size_t d = indices.size(); d < in[0].shape().size(); ++d) q *= in[0].shape()[d];
    const int64_t j_count = indices[0].size();
    auto run = [&](auto tag, auto f) {
      using T = typename decltype(tag)::type;
      combine_rows(out[0].strided_data<T>(), upd.strided_data<T>(), q, rows.data(), j_count, f);
    };
    if (op_ == ScatterOp::set) {
      visit_bits(out[0].dtype(), [&](auto tag) { run(tag, [](auto, auto v) { return v; }); });
      return;
    }
    visit_dtype<kNumericTypes>(out[0].dtype(), op_name(op_), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (op_ == ScatterOp::max)
        run(tag, keep_max<T>);
      else if (op_ == ScatterOp::min)
        run(tag, keep_min<T>);
      else
        run(tag, times<T>);
    });
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    const auto indices = in.subspan(2);
    for (size_t k = 0; k < indices.size(); ++k)
      check_host_indices(op_name(op_), indices[k], in[0].shape()[k], static_cast<int>(k));
    gpu::scatter_reduce_nd(in[0], in[1], indices, op_, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const std::vector<Array> idx(a.primals.begin() + 2, a.primals.end());
    const Array& g = a.cotangents[0];
    const auto [wx, wu] = weights(a.primals[0], a.primals[1], idx, a.outputs[0], g.dtype());
    std::vector<Array> out;
    for (int arg : a.argnums) {
      if (arg == 0)
        out.push_back(multiply(wx, g, stream()));
      else if (arg == 1)
        out.push_back(multiply(wu, make_gather(g, idx, stream()), stream()));
      else
        out.push_back(zeros_like(a.primals[arg], stream()));
    }
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const Array &x = a.primals[0], &u = a.primals[1];
    const std::vector<Array> idx(a.primals.begin() + 2, a.primals.end());
    Dtype dt = x.dtype();  // the tangents' (the index arrays' tangents, if any, are not used)
    for (size_t i = 0; i < a.argnums.size(); ++i)
      if (a.argnums[i] < 2) dt = a.tangents[i].dtype();
    Array tx = zeros(x.shape(), dt, stream()), tu = zeros(u.shape(), dt, stream());
    for (size_t i = 0; i < a.argnums.size(); ++i)
      if (a.argnums[i] < 2) (a.argnums[i] == 0 ? tx : tu) = a.tangents[i];
    const Array out = op_ == ScatterOp::max || op_ == ScatterOp::min
                          ? make_scatter_reduce(x, u, idx, op_, stream())
                          : Array();
    const auto [wx, wu] = weights(x, u, idx, out, dt);
    return {add(multiply(wx, tx, stream()),
                make_scatter_nd(zeros(x.shape(), dt, stream()), multiply(wu, tu, stream()), idx, stream()),
                stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const int64_t n = batch_size(a.inputs, a.axes);
    const Array x = batch_front(a.inputs[0], a.axes[0], n, stream());
    const Array u = batch_front(a.inputs[1], a.axes[1], n, stream());
    return {{make_scatter_reduce(x, u, batched_indices(a.inputs.subspan(2), a.axes.subspan(2), n, stream()),
                                 op_, stream())},
            {0}};
  }

 private:
  struct Weights {
    Array wx, wu;
  };
  // The weights of the class comment, of dtype `dt`; `out` is the primitive's output (max, min).
  Weights weights(const Array& x, const Array& u, const std::vector<Array>& idx, const Array& out,
                  Dtype dt) const {
    const Stream s = stream();
    const Array zero = zeros(x.shape(), dt, s);
    if (op_ == ScatterOp::set) {
      const Dtype it = u.size() < (int64_t{1} << 31) ? int32 : int64;
      const Array ids = reshape(arange(1, static_cast<double>(u.size()) + 1, 1, it, s), u.shape(), s);
      const Array won = make_scatter_reduce(zeros(x.shape(), it, s), ids, idx, ScatterOp::set, s);
      return {astype(equal(won, 0, s), dt, s), astype(equal(make_gather(won, idx, s), ids, s), dt, s)};
    }
    if (op_ == ScatterOp::max || op_ == ScatterOp::min) {
      const Array eq_x = astype(equal(x, out, s), dt, s);
      const Array eq_u = astype(equal(u, make_gather(out, idx, s), s), dt, s);
      const Array count = add(eq_x, make_scatter_nd(zero, eq_u, idx, s), s);
      return {divide(eq_x, count, s), divide(eq_u, make_gather(count, idx, s), s)};
    }
    const Array zx = equal(x, 0, s), zu = equal(u, 0, s);
    const Array x1 = where(zx, 1, x, s), u1 = where(zu, 1, u, s);
    const Array zx_n = astype(zx, dt, s), zu_n = astype(zu, dt, s);
    const Array zeros_at = add(zx_n, make_scatter_nd(zero, zu_n, idx, s), s);    // zero factors per element
    const Array nonzero = make_scatter_reduce(x1, u1, idx, ScatterOp::prod, s);  // their product
    const Array wx = where(greater(subtract(zeros_at, zx_n, s), 0, s), 0, divide(nonzero, x1, s), s);
    const Array wu = where(greater(subtract(make_gather(zeros_at, idx, s), zu_n, s), 0, s), 0,
                           divide(make_gather(nonzero, idx, s), u1, s), s);
    return {astype(wx, dt, s), astype(wu, dt, s)};
  }

  ScatterOp op_;
};

Array make_scatter_reduce(const Array& a, const Array& upd, std::vector<Array> indices, ScatterOp op,
                          StreamOrDevice s) {
  indices.insert(indices.begin(), {a, upd});
  return Array::make(a.shape(), a.dtype(), std::make_shared<ScatterReduce>(to_stream(s), op),
                     std::move(indices));
}

// ---------------------------------------------------------------- slices as rows

// Every value of an available integer array, as int64 in row-major order.
std::vector<int64_t> int_values(const Array& a) {
  std::vector<int64_t> out(a.size());
  copy_strided(a.raw_data(), a.dtype(), a.strides(), out.data(), int64, row_major_strides(a.shape()),
               a.shape());
  return out;
}

// Throws unless index v (negative counting from the end) starts a slice of `size` inside [0, n).
void check_window(const char* op, int64_t v, int64_t n, int64_t size, int axis) {
  const int64_t w = v < 0 ? v + n : v;
  if (w >= 0 && w < n && w + size <= n) return;
  if (size == 1)
    throw ValueError::of(op, "index out of range", "index {} is out of bounds for axis {} with size {}", v,
                         axis, n);
  throw ValueError::of(op, "index out of range",
                       "index {} with slice size {} is out of bounds for axis {} with size {}", v, size, axis,
                       n);
}

// The rows of a gather or scatter of slices (the file comment): k index arrays of shape
// B + sizes[:k] for a's leading k dims, and the static slices of the dims from k on.
struct Rows {
  Shape batch;  // B
  std::vector<Array> indices;
  std::vector<Slice> rest;  // whole for the first k dims
  bool rest_whole = true;
};

// Validates and builds Rows. `indices` are the user's (non-empty, one per axis); `sizes` one per dim.
Rows slice_rows(const char* op, const Array& a, const std::vector<Array>& indices, const Axes& axes,
                const Shape& sizes, StreamOrDevice s) {
  const int nd = a.ndim();
  if (nd == 0) throw ShapeError::of(op, "needs an array of at least one dimension", "got a 0-d array");
  if (indices.size() != axes.size())
    throw ValueError::of(op, "needs one index array per axis", "{} index arrays for {} axes", indices.size(),
                         axes.size());
  if (static_cast<int>(sizes.size()) != nd)
    throw ShapeError::of(op, "needs one slice size per dimension", "sizes ({}) for shape {}",
                         fmt::join(sizes, ","), shape_str(a.shape()));
  for (int d = 0; d < nd; ++d)
    if (sizes[d] < 0 || sizes[d] > a.shape()[d])
      throw ShapeError::of(op, "slice sizes must lie in [0, dim]", "sizes ({}) for shape {}",
                           fmt::join(sizes, ","), shape_str(a.shape()));
  std::vector<int> axis(indices.size());
  std::vector<int> index_of(nd, -1);
  std::vector<Shape> shapes;
  for (size_t i = 0; i < indices.size(); ++i) {
    axis[i] = normalize_axis(op, axes[i], nd);
    if (index_of[axis[i]] >= 0) throw ValueError::of(op, "repeated axis", "axes ({})", fmt::join(axes, ","));
    index_of[axis[i]] = static_cast<int>(i);
    check_array(op, indices[i]);
    check_index_dtype(op, indices[i]);
    shapes.push_back(indices[i].shape());
  }
  Rows r;
  r.batch = broadcast_shapes(op, shapes);
  const int nb = static_cast<int>(r.batch.size());
  if (nb + nd > kMaxDims)
    throw ShapeError::of(op, "too many dimensions", "indices {} into {}", shape_str(r.batch),
                         shape_str(a.shape()));
  if (shape_size(r.batch) > 0 && shape_size(sizes) > 0)
    for (size_t i = 0; i < indices.size(); ++i)
      if (indices[i].is_available())
        for (int64_t v : int_values(indices[i]))
          check_window(op, v, a.shape()[axis[i]], sizes[axis[i]], axis[i]);
  const int k = *std::max_element(axis.begin(), axis.end()) + 1;
  Shape full = r.batch;
  full.insert(full.end(), sizes.begin(), sizes.begin() + k);
  for (int d = 0; d < k; ++d) {
    Shape window(nb + k, 1);
    window[nb + d] = sizes[d];
    const Array offsets = reshape(arange(0, static_cast<double>(sizes[d]), 1, int32, s), window, s);
    if (index_of[d] < 0) {
      r.indices.push_back(broadcast_to(offsets, full, s));
      continue;
    }
    const Array& idx = indices[index_of[d]];
    Shape own(nb - idx.ndim(), 1);  // idx's shape, right-aligned in B, then k ones
    own.insert(own.end(), idx.shape().begin(), idx.shape().end());
    own.resize(nb + k, 1);
    Array e = reshape(idx, own, s);
    if (sizes[d] != 1) {
      // Wrapped first, so a window never wraps; an index below -n becomes n, out of range at eval.
      const int64_t n = a.shape()[d];
      const Dtype it = idx.dtype() == int64 || idx.dtype() == uint32 ? int64 : int32;
      e = astype(e, it, s);
      e = where(less(e, 0, s), add(e, n, s), e, s);
      e = add(where(less(e, 0, s), n, e, s), offsets, s);
    }
    r.indices.push_back(broadcast_to(e, full, s));
  }
  r.rest.resize(nd);
  for (int d = k; d < nd; ++d)
    if (sizes[d] != a.shape()[d]) {
      r.rest[d] = Slice{0, sizes[d], 1};
      r.rest_whole = false;
    }
  return r;
}

Array gather_slices(const char* op, const Array& a, std::vector<Array> indices, Axes axes, const Shape& sizes,
                    StreamOrDevice s) {
  check_array(op, a);
  if (indices.empty() && a.ndim() > 0) {
    indices = {Array(0)};
    axes = {0};
  }
  const Rows r = slice_rows(op, a, indices, axes, sizes, s);
  Shape shape = r.batch;
  shape.insert(shape.end(), sizes.begin(), sizes.end());
  if (shape_size(shape) == 0) return zeros(shape, a.dtype(), s);
  return make_gather(r.rest_whole ? a : slice(a, r.rest, s), r.indices, s);
}

// ScatterOp, or add through index.cpp's ScatterAddND.
Array scatter_slices(const char* op, const Array& a, std::vector<Array> indices, const Array& updates,
                     Axes axes, std::optional<ScatterOp> combine, StreamOrDevice s) {
  check_array(op, a);
  check_array(op, updates);
  if (combine != ScatterOp::set && !kNumericTypes.has(a.dtype()))
    throw DtypeError::of(op, "dtype not supported", "{}", dtype_name(a.dtype()));
  if (indices.empty() && a.ndim() > 0) {
    indices = {Array(0)};
    axes = {0};
  }
  const int nd = a.ndim();
  if (updates.ndim() < nd)
    throw ShapeError::of(op, "updates must have shape B + slice sizes (the array's rank)",
                         "updates {} for array {}", shape_str(updates.shape()), shape_str(a.shape()));
  const Shape sizes(updates.shape().end() - nd, updates.shape().end());
  const Rows r = slice_rows(op, a, indices, axes, sizes, s);
  const Shape lead(updates.shape().begin(), updates.shape().end() - nd);
  if (broadcast_shapes(op, lead, r.batch) != r.batch)
    throw ShapeError::of(op, "updates must have shape B + slice sizes (B: the indices' shape)",
                         "updates {} for indices {} into {}", shape_str(updates.shape()), shape_str(r.batch),
                         shape_str(a.shape()));
  Shape shape = r.batch;
  shape.insert(shape.end(), sizes.begin(), sizes.end());
  if (shape_size(shape) == 0) return a;
  const Array u = broadcast_to(astype(updates, a.dtype(), s), shape, s);
  const Array block = r.rest_whole ? a : slice(a, r.rest, s);
  const Array done = combine ? make_scatter_reduce(block, u, r.indices, *combine, s)
                             : make_scatter_nd(block, u, r.indices, s);
  return r.rest_whole ? done : slice_update(a, done, r.rest, s);
}

// The entries of a dynamic slice's start as 0-d index arrays, after checking the start (and, when
// it is evaluated, its values against the axes and sizes).
std::vector<Array> start_indices(const char* op, const Array& a, const Array& start, const Axes& axes,
                                 const Shape& sizes, StreamOrDevice s) {
  check_array(op, a);
  check_array(op, start);
  check_index_dtype(op, start);
  if (start.ndim() != 1 || start.size() != static_cast<int64_t>(axes.size()))
    throw ShapeError::of(op, "start must have shape (len(axes))", "start {} for {} axes",
                         shape_str(start.shape()), axes.size());
  if (sizes.size() != axes.size())
    throw ShapeError::of(op, "needs one slice size per axis", "{} sizes for {} axes", sizes.size(),
                         axes.size());
  if (a.ndim() == 0) throw ShapeError::of(op, "needs an array of at least one dimension", "got a 0-d array");
  std::vector<Array> out;
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t at = static_cast<int64_t>(i);
    out.push_back(reshape(slice(start, {Slice{at, at + 1, 1}}, s), {}, s));
  }
  if (start.is_available() && shape_size(sizes) > 0) {
    const auto v = int_values(start);
    for (size_t i = 0; i < axes.size(); ++i) {
      const int ax = normalize_axis(op, axes[i], a.ndim());
      if (sizes[i] >= 0 && sizes[i] <= a.shape()[ax]) check_window(op, v[i], a.shape()[ax], sizes[i], ax);
    }
  }
  return out;
}

}  // namespace
}  // namespace detail

Array gather(const Array& a, const std::vector<Array>& indices, const Axes& axes, const Shape& slice_sizes,
             StreamOrDevice s) {
  return detail::gather_slices("gather", a, indices, axes, slice_sizes, s);
}

Array scatter(const Array& a, const std::vector<Array>& indices, const Array& updates, const Axes& axes,
              StreamOrDevice s) {
  return detail::scatter_slices("scatter", a, indices, updates, axes, gpu::ScatterOp::set, s);
}

Array scatter_add(const Array& a, const std::vector<Array>& indices, const Array& updates, const Axes& axes,
                  StreamOrDevice s) {
  return detail::scatter_slices("scatter_add", a, indices, updates, axes, std::nullopt, s);
}

Array scatter_max(const Array& a, const std::vector<Array>& indices, const Array& updates, const Axes& axes,
                  StreamOrDevice s) {
  return detail::scatter_slices("scatter_max", a, indices, updates, axes, gpu::ScatterOp::max, s);
}

Array scatter_min(const Array& a, const std::vector<Array>& indices, const Array& updates, const Axes& axes,
                  StreamOrDevice s) {
  return detail::scatter_slices("scatter_min", a, indices, updates, axes, gpu::ScatterOp::min, s);
}

Array scatter_prod(const Array& a, const std::vector<Array>& indices, const Array& updates, const Axes& axes,
                   StreamOrDevice s) {
  return detail::scatter_slices("scatter_prod", a, indices, updates, axes, gpu::ScatterOp::prod, s);
}

Array masked_scatter(const Array& a, const Array& mask, const Array& values, StreamOrDevice s) {
  constexpr const char* op = "masked_scatter";
  detail::check_array(op, a);
  detail::check_array(op, mask);
  detail::check_array(op, values);
  if (mask.dtype() != bool_)
    throw DtypeError::of(op, "the mask must be bool", "got {}", dtype_name(mask.dtype()));
  if (broadcast_shapes(op, mask.shape(), a.shape()) != a.shape())
    throw ShapeError::of(op, "the mask does not broadcast to the array", "mask {} for array {}",
                         shape_str(mask.shape()), shape_str(a.shape()));
  const int64_t n = values.size();
  if (mask.is_available() && mask.size() > 0) {
    int64_t trues = 0;
    for (int64_t v : detail::int_values(mask)) trues += v;
    trues *= a.size() / mask.size();  // each mask element covers that many of a's
    if (trues > n)
      throw ValueError::of(op, "not enough values", "the mask has {} true positions, values has {} elements",
                           trues, n);
  }
  if (a.size() == 0) return a;
  // Position p takes values[count of true positions up to p - 1]; false ones read element 0 (any
  // valid one). Without values every read is out of range, which only a true position does.
  const Array m = reshape(broadcast_to(mask, a.shape(), s), {-1}, s);
  const Array count = cumsum(astype(m, int32, s), 0, false, true, s);
  const Array flat = n == 0 ? zeros({1}, a.dtype(), s) : reshape(astype(values, a.dtype(), s), {-1}, s);
  const Array idx = where(m, n == 0 ? count : subtract(count, 1, s), 0, s);
  return where(broadcast_to(mask, a.shape(), s), reshape(take(flat, idx, 0, s), a.shape(), s), a, s);
}

namespace {
template <class F>
Array slice_update_with(const char* op, const Array& a, const Array& update, const std::vector<Slice>& slices,
                        F f, StreamOrDevice s) {
  detail::check_array(op, a);
  detail::check_array(op, update);
  if (!kNumericTypes.has(a.dtype()))
    throw DtypeError::of(op, "dtype not supported", "{}", dtype_name(a.dtype()));
  const Array region = slice(a, slices, s);
  const Shape& target = region.shape();
  bool ok = update.ndim() <= region.ndim();
  for (int i = 0; ok && i < update.ndim(); ++i) {
    const int64_t d = update.shape()[i], t = target[target.size() - update.ndim() + i];
    ok = d == t || d == 1;
  }
  if (!ok)
    throw ShapeError::of(op, "update does not fit the slice", "update {} into slice {} of {}",
                         shape_str(update.shape()), shape_str(target), shape_str(a.shape()));
  if (region.size() == 0) return a;
  return slice_update(a, f(region, astype(update, a.dtype(), s)), slices, s);
}
}  // namespace

Array slice_update_add(const Array& a, const Array& update, const std::vector<Slice>& slices,
                       StreamOrDevice s) {
  return slice_update_with(
      "slice_update_add", a, update, slices, [&](const Array& x, const Array& u) { return add(x, u, s); }, s);
}

Array slice_update_prod(const Array& a, const Array& update, const std::vector<Slice>& slices,
                        StreamOrDevice s) {
  return slice_update_with(
      "slice_update_prod", a, update, slices,
      [&](const Array& x, const Array& u) { return multiply(x, u, s); }, s);
}

Array slice_update_max(const Array& a, const Array& update, const std::vector<Slice>& slices,
                       StreamOrDevice s) {
  return slice_update_with(
      "slice_update_max", a, update, slices, [&](const Array& x, const Array& u) { return maximum(x, u, s); },
      s);
}

Array slice_update_min(const Array& a, const Array& update, const std::vector<Slice>& slices,
                       StreamOrDevice s) {
  return slice_update_with(
      "slice_update_min", a, update, slices, [&](const Array& x, const Array& u) { return minimum(x, u, s); },
      s);
}

Array dynamic_slice(const Array& a, const Array& start, const Axes& axes, const Shape& slice_size,
                    StreamOrDevice s) {
  constexpr const char* op = "dynamic_slice";
  const auto idx = detail::start_indices(op, a, start, axes, slice_size, s);
  Shape sizes = a.shape();
  for (size_t i = 0; i < axes.size(); ++i) sizes[normalize_axis(op, axes[i], a.ndim())] = slice_size[i];
  return detail::gather_slices(op, a, idx, axes, sizes, s);
}

Array dynamic_slice_update(const Array& a, const Array& update, const Array& start, const Axes& axes,
                           StreamOrDevice s) {
  constexpr const char* op = "dynamic_slice_update";
  detail::check_array(op, update);
  if (update.ndim() != a.ndim())
    throw ShapeError::of(op, "the update must have the array's rank", "update {} for array {}",
                         shape_str(update.shape()), shape_str(a.shape()));
  Shape sizes;
  for (int ax : axes) sizes.push_back(update.shape()[normalize_axis(op, ax, a.ndim())]);
  const auto idx = detail::start_indices(op, a, start, axes, sizes, s);
  return detail::scatter_slices(op, a, idx, update, axes, gpu::ScatterOp::set, s);
}

}  // namespace kiln
