// Sorting along one axis: sort, argsort and argtopk primitives (rows in parallel); topk is a
// gather of argtopk's indices, so its gradient comes from take_along_axis.
#include "kiln/core/ops/sort.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/index.h"
#include "kiln/core/primitive.h"
#include "kiln/core/shape_polymorphic.h"
#include "kiln/core/vulkan/gpu_sort.h"

namespace kiln {
namespace detail {
namespace {

// Element type of the sort buffers: halves compare as float, bool as a byte (no vector<bool>).
template <class T>
using SortKey = std::conditional_t<std::is_same_v<T, bool>, uint8_t, compute_t<T>>;

// Ascending order with NaNs after every number (NumPy's order); NaNs are equivalent to each other.
template <class C>
bool nan_last_less(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

template <class C>
struct Keyed {
  C v;
  int32_t i;
};

// Calls body(in_offset, out_offset, scratch) for every row along `axis` of `in`, with the rows split
// across the CPU pool. `out` is row-contiguous; `scratch` is a per-task buffer of `len` entries.
template <class Scratch, class Body>
void for_each_line(const Array& in, const Array& out, int axis, int64_t len, Body body) {
  Shape outer;
  Strides in_st, out_st;
  for (int d = 0; d < in.ndim(); ++d) {
    if (d == axis) continue;
    outer.push_back(in.shape()[d]);
    in_st.push_back(in.strides()[d]);
    out_st.push_back(out.strides()[d]);
  }
  const int64_t rows = shape_size(outer);
  const double work = static_cast<double>(std::max<int64_t>(len, 1)) * std::log2(std::max<int64_t>(len, 2));
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(kElementwiseGrain / work));
  parallel_for(rows, grain, [&](int64_t rb, int64_t re) {
    std::vector<Scratch> scratch(static_cast<size_t>(len));
    for (int64_t r = rb; r < re; ++r) {
      int64_t rem = r, io = 0, oo = 0;
      for (size_t d = outer.size(); d-- > 0;) {
        const int64_t idx = rem % outer[d];
        rem /= outer[d];
        io += idx * in_st[d];
        oo += idx * out_st[d];
      }
      body(io, oo, scratch);
    }
  });
}

class Sort final : public PrimitiveWithParams<Sort> {
 public:
  Sort(Stream s, int axis) : PrimitiveWithParams(s), axis_(axis) {}
  const char* name() const override { return "Sort"; }
  auto params() const { return std::tie(axis_); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return {in[0].shape()}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const Array& x = in[0];
    Array& o = out[0];
    o.allocate();
    const int64_t len = x.shape()[axis_], si = x.strides()[axis_], so = o.strides()[axis_];
    visit_dtype<kAllTypes>(x.dtype(), "sort", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = SortKey<T>;
      const T* src = x.strided_data<T>();
      T* dst = o.strided_data<T>();
      for_each_line<C>(x, o, axis_, len, [&](int64_t io, int64_t oo, std::vector<C>& buf) {
        for (int64_t j = 0; j < len; ++j) buf[j] = static_cast<C>(src[io + j * si]);
        std::stable_sort(buf.begin(), buf.end(), nan_last_less<C>);
        for (int64_t j = 0; j < len; ++j) dst[oo + j * so] = static_cast<T>(buf[j]);
      });
    });
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    gpu::sort(in[0], axis_, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    // Each input element went to one output position: scatter the cotangent back through it.
    const Array& x = a.primals[0];
    const Array idx = argsort(x, axis_, stream());
    return {put_along_axis(zeros_like(x, stream()), idx, a.cotangents[0], axis_, stream())};
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    return {take_along_axis(a.tangents[0], argsort(a.primals[0], axis_, stream()), axis_, stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const int b = a.axes[0];
    const int axis = b >= 0 && b <= axis_ ? axis_ + 1 : axis_;
    return {{sort(a.inputs[0], axis, stream())}, {b}};
  }

 private:
  int axis_;
};

// Shared by ArgSort and ArgTopK: integer outputs, so gradients are zero.
template <class D>
class IndexPrimitive : public PrimitiveWithParams<D> {
 public:
  using PrimitiveWithParams<D>::PrimitiveWithParams;
  std::vector<Array> vjp(const VjpArgs& a) const override {
    return {zeros_like(a.primals[0], this->stream())};
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    return {zeros(this->output_shapes(a.primals)[0], int32, this->stream())};
  }
};

class ArgSort final : public IndexPrimitive<ArgSort> {
 public:
  ArgSort(Stream s, int axis) : IndexPrimitive(s), axis_(axis) {}
  const char* name() const override { return "ArgSort"; }
  auto params() const { return std::tie(axis_); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override { return {in[0].shape()}; }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const Array& x = in[0];
    Array& o = out[0];
    o.allocate();
    const int64_t len = x.shape()[axis_], si = x.strides()[axis_], so = o.strides()[axis_];
    int32_t* dst = o.strided_data<int32_t>();
    visit_dtype<kAllTypes>(x.dtype(), "argsort", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = SortKey<T>;
      const T* src = x.strided_data<T>();
      for_each_line<Keyed<C>>(x, o, axis_, len, [&](int64_t io, int64_t oo, std::vector<Keyed<C>>& buf) {
        for (int64_t j = 0; j < len; ++j)
          buf[j] = {static_cast<C>(src[io + j * si]), static_cast<int32_t>(j)};
        std::stable_sort(buf.begin(), buf.end(),
                         [](const Keyed<C>& p, const Keyed<C>& q) { return nan_last_less(p.v, q.v); });
        for (int64_t j = 0; j < len; ++j) dst[oo + j * so] = buf[j].i;
      });
    });
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    gpu::argsort(in[0], axis_, out[0]);
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const int b = a.axes[0];
    const int axis = b >= 0 && b <= axis_ ? axis_ + 1 : axis_;
    return {{argsort(a.inputs[0], axis, stream())}, {b}};
  }

 private:
  int axis_;
};

class ArgTopK final : public IndexPrimitive<ArgTopK> {
 public:
  ArgTopK(Stream s, int k, int axis) : IndexPrimitive(s), k_(k), axis_(axis) {}
  const char* name() const override { return "ArgTopK"; }
  auto params() const { return std::tie(k_, axis_); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    Shape sh = in[0].shape();
    sh[axis_] = k_;
    return {sh};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const Array& x = in[0];
    Array& o = out[0];
    o.allocate();
    const int64_t len = x.shape()[axis_], si = x.strides()[axis_], so = o.strides()[axis_];
    int32_t* dst = o.strided_data<int32_t>();
    visit_dtype<kAllTypes>(x.dtype(), "argtopk", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = SortKey<T>;
      const T* src = x.strided_data<T>();
      // Descending, NaNs first (they sort last ascending), ties by lower index: a strict total order,
      // so the unstable partial_sort is deterministic.
      const auto before = [](const Keyed<C>& p, const Keyed<C>& q) {
        if (nan_last_less(q.v, p.v)) return true;
        if (nan_last_less(p.v, q.v)) return false;
        return p.i < q.i;
      };
      for_each_line<Keyed<C>>(x, o, axis_, len, [&](int64_t io, int64_t oo, std::vector<Keyed<C>>& buf) {
        for (int64_t j = 0; j < len; ++j)
          buf[j] = {static_cast<C>(src[io + j * si]), static_cast<int32_t>(j)};
        std::partial_sort(buf.begin(), buf.begin() + k_, buf.end(), before);
        for (int64_t j = 0; j < k_; ++j) dst[oo + j * so] = buf[j].i;
      });
    });
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    gpu::argtopk(in[0], k_, axis_, out[0]);
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const int b = a.axes[0];
    const int axis = b >= 0 && b <= axis_ ? axis_ + 1 : axis_;
    return {{argtopk(a.inputs[0], k_, axis, stream())}, {b}};
  }

 private:
  int k_, axis_;
};

int checked_axis(const char* op, const Array& a, int axis) {
  if (!a.valid()) throw ValueError::of(op, "the array is empty (default-constructed)");
  if (a.ndim() == 0) throw ShapeError::of(op, "cannot sort a 0-d array", "shape ()");
  const int ax = normalize_axis(op, axis, a.ndim());
  if (a.shape()[ax] > INT_MAX)
    throw ShapeError::of(op, "axis is too long for int32 indices", "shape {}, axis {}", shape_str(a.shape()),
                         axis);
  return ax;
}

int checked_k(const char* op, const Array& a, int k, int axis) {
  const int ax = checked_axis(op, a, axis);
  if (k <= 0 || k > a.shape()[ax])
    throw ValueError::of(op, "k must satisfy 0 < k <= the axis length", "k {}, shape {}, axis {}", k,
                         shape_str(a.shape()), axis);
  return ax;
}

}  // namespace
}  // namespace detail

Array sort(const Array& a, int axis, StreamOrDevice s) {
  const int ax = detail::checked_axis("sort", a, axis);
  return Array::make(a.shape(), a.dtype(), std::make_shared<detail::Sort>(to_stream(s), ax), {a});
}

Array argsort(const Array& a, int axis, StreamOrDevice s) {
  const int ax = detail::checked_axis("argsort", a, axis);
  return Array::make(a.shape(), int32, std::make_shared<detail::ArgSort>(to_stream(s), ax), {a});
}

Array argtopk(const Array& a, int k, int axis, StreamOrDevice s) {
  const int ax = detail::checked_k("argtopk", a, k, axis);
  Shape shape = a.shape();
  shape[ax] = k;
  return Array::make(std::move(shape), int32, std::make_shared<detail::ArgTopK>(to_stream(s), k, ax), {a});
}

Array topk(const Array& a, int k, int axis, StreamOrDevice s) {
  const int ax = detail::checked_k("topk", a, k, axis);
  return take_along_axis(a, argtopk(a, k, ax, s), ax, s);
}

}  // namespace kiln
