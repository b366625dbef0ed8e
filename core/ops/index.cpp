// Gathers and scatters by integer index arrays: take, take_along_axis, gather and their scatters.
//
// Every kernel sees its operands as dense (P, N, Q) blocks: P is the product of the dims before
// the indexed axis, N that axis, Q the product of the dims after it. Indices are first copied to
// int64, wrapped and range-checked, so a bad index throws before anything is written.
#include "kiln/core/ops/index.h"

#include <algorithm>
#include <cstring>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/cpu/strided.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/index_impl.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/shape_primitives.h"
#include "kiln/core/primitive.h"
#include "kiln/core/shape_polymorphic.h"
#include "kiln/core/vulkan/gpu.h"
#include "kiln/core/vulkan/gpu_gather.h"

namespace kiln {
namespace detail {
namespace {

// ---------------------------------------------------------------- helpers

struct Block {
  int64_t p, n, q;
};
Block block(const Shape& shape, int axis) {
  Block b{1, shape[axis], 1};
  for (int i = 0; i < axis; ++i) b.p *= shape[i];
  for (size_t i = axis + 1; i < shape.size(); ++i) b.q *= shape[i];
  return b;
}

}  // namespace

void check_index_dtype(const char* op, const Array& idx) {
  if (!is_integral(idx.dtype()))
    throw DtypeError::of(op, "indices must have an integer dtype", "got {}", dtype_name(idx.dtype()));
}

// Indices as dense int64 over `shape` (which idx broadcasts to), wrapped into [0, n).
std::vector<int64_t> load_indices(const char* op, const Array& idx, const Shape& shape, int64_t n, int axis) {
  std::vector<int64_t> out(shape_size(shape));
  const Strides st =
      idx.shape() == shape ? idx.strides() : broadcast_strides(idx.shape(), idx.strides(), shape);
  copy_strided(idx.raw_data(), idx.dtype(), st, out.data(), int64, row_major_strides(shape), shape);
  bool bad = false;
  for (int64_t& v : out) {
    v += v < 0 ? n : 0;
    bad |= static_cast<uint64_t>(v) >= static_cast<uint64_t>(n);
  }
  if (bad)
    for (int64_t v : out)
      if (v < 0 || v >= n)
        throw ValueError::of(op, "index out of range", "index {} is out of bounds for axis {} with size {}",
                             v < 0 ? v - n : v, axis, n);
  return out;
}

// Checks indices already known when the op is called, so the error points at the call.
void check_known(const char* op, const Array& idx, int64_t n, int axis) {
  if (idx.is_available()) load_indices(op, idx, idx.shape(), n, axis);
}

// For eval_gpu: indices held on the host are checked before recording, as on the CPU; the kernels
// read 0 for (or drop the updates of) bad indices computed on the device, which cannot be seen
// before the submit (core/vulkan/gpu_gather.h).
void check_host_indices(const char* op, const Array& idx, int64_t n, int axis) {
  if (idx.node().buffer->on_host()) load_indices(op, idx, idx.shape(), n, axis);
}

// Flat row numbers into a's leading k dims from k index arrays of one shape.
std::vector<int64_t> load_rows(const char* op, const Shape& a_shape, std::span<const Array> indices) {
  const Shape& shape = indices[0].shape();
  std::vector<int64_t> rows(shape_size(shape), 0);
  for (size_t k = 0; k < indices.size(); ++k) {
    const auto v = load_indices(op, indices[k], shape, a_shape[k], static_cast<int>(k));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = rows[i] * a_shape[k] + v[i];
  }
  return rows;
}

// Output storage holding a copy of `a` (taking a's buffer when nobody else holds it).
void init_from(Array& out, const Array& a) {
  if (out.donate_from(a)) return;
  out.allocate();
  copy_strided(a, out);
}

namespace {

template <class T>
T combine(T old, T v, bool add) {
  if (!add) return v;
  using C = compute_t<T>;
  return static_cast<T>(static_cast<C>(old) + static_cast<C>(v));
}

// ---------------------------------------------------------------- kernels

// dst[p, j, :] = src[p, rows[j], :]
template <class T>
void take_rows(const T* src, T* dst, Block b, const int64_t* rows, int64_t j_count) {
  parallel_for(b.p * j_count, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(b.q, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t t = lo; t < hi; ++t) {
                   const int64_t p = t / j_count, j = t % j_count;
                   const T* s = src + (p * b.n + rows[j]) * b.q;
                   if (b.q == 1)
                     dst[t] = *s;
                   else
                     std::memcpy(dst + t * b.q, s, static_cast<size_t>(b.q) * sizeof(T));
                 }
               });
}

// dst[p, j, q] = src[p, idx[p, j, q], q]
template <class T>
void take_along(const T* src, T* dst, Block b, const int64_t* idx, int64_t j_count) {
  parallel_for(b.p * j_count, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(b.q, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t t = lo; t < hi; ++t) {
                   const T* s = src + t / j_count * b.n * b.q;
                   const int64_t* ix = idx + t * b.q;
                   T* d = dst + t * b.q;
                   for (int64_t q = 0; q < b.q; ++q) d[q] = s[ix[q] * b.q + q];
                 }
               });
}

// Scatters collide only between different j, so the work splits over p and chunks of q; each
// task walks all j in order (for put, the last write wins).
template <class F>
void scatter_tasks(Block b, int64_t j_count, F&& body) {
  const int64_t want = std::max<int64_t>(64, kElementwiseGrain / std::max<int64_t>(j_count, 1));
  const int64_t qc = std::min(want, std::max<int64_t>(b.q, 1));
  const int64_t nq = (b.q + qc - 1) / qc;
  const int64_t work = std::max<int64_t>(1, j_count * qc);
  parallel_for(b.p * nq, std::max<int64_t>(1, kElementwiseGrain / work), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t p = t / nq, q0 = t % nq * qc;
      body(p, q0, std::min(b.q, q0 + qc));
    }
  });
}

// dst[p, rows[j], q] (+)= upd[p, j, q]
template <class T>
void scatter_rows(T* dst, const T* upd, Block b, const int64_t* rows, int64_t j_count, bool add) {
  scatter_tasks(b, j_count, [&](int64_t p, int64_t q0, int64_t q1) {
    for (int64_t j = 0; j < j_count; ++j) {
      T* d = dst + (p * b.n + rows[j]) * b.q;
      const T* u = upd + (p * j_count + j) * b.q;
      for (int64_t q = q0; q < q1; ++q) d[q] = combine(d[q], u[q], add);
    }
  });
}

// dst[p, idx[p, j, q], q] (+)= val[p, j, q]
template <class T>
void scatter_along(T* dst, const T* val, Block b, const int64_t* idx, int64_t j_count, bool add) {
  scatter_tasks(b, j_count, [&](int64_t p, int64_t q0, int64_t q1) {
    T* d = dst + p * b.n * b.q;
    for (int64_t j = 0; j < j_count; ++j) {
      const int64_t base = (p * j_count + j) * b.q;
      for (int64_t q = q0; q < q1; ++q)
        d[idx[base + q] * b.q + q] = combine(d[idx[base + q] * b.q + q], val[base + q], add);
    }
  });
}

// Runs f(TypeTag<T>) with bits for copies, or the real type when values are added.
template <class F>
void visit_values(Dtype t, bool add, const char* op, F&& f) {
  if (add)
    visit_dtype<kNumericTypes>(t, op, std::forward<F>(f));
  else
    visit_bits(t, std::forward<F>(f));
}

Array make_take(const Array& a, const Array& idx, int axis, StreamOrDevice s);
Array make_take_along(const Array& a, const Array& idx, int axis, StreamOrDevice s);
Array make_scatter(const Array& a, const Array& idx, const Array& upd, int axis, StreamOrDevice s);
Array make_scatter_along(const Array& a, const Array& idx, const Array& vals, int axis, bool add,
                         StreamOrDevice s);

// Tangents by input position; inputs that got none are zeros.
std::vector<Array> tangents_by_input(const JvpArgs& a, Stream s) {
  std::vector<Array> t;
  for (const Array& x : a.primals) t.push_back(zeros_like(x, s));
  for (size_t i = 0; i < a.argnums.size(); ++i) t[a.argnums[i]] = a.tangents[i];
  return t;
}

// (B, J...) batched indices reshaped to (B, 1 x axis, J, 1 x rest) and broadcast to
// (B, shape[:axis], J, shape[axis+1:]) of a batched operand `x`: turns a per-example take into
// a take_along_axis.
Array along_indices(const Array& idx, const Array& x, int axis, Stream s) {
  const int64_t b = idx.shape(0), j = idx.size() / std::max<int64_t>(b, 1);
  Shape shape(x.ndim(), 1), full = x.shape();
  shape[0] = b;
  shape[axis] = j;
  full[axis] = j;
  return broadcast_to(reshape(idx, shape, s), full, s);
}

// The inputs' shapes, for the errors of output_shapes below: shapeless compile replays these
// primitives on new input shapes (core/shape_polymorphic.h), so they check there what their op
// functions checked.
std::string shapes_of(std::span<const Array> in) {
  std::string out;
  for (const Array& a : in) out += (out.empty() ? "" : ", ") + shape_str(a.shape());
  return out;
}

void check_shapes(bool ok, const char* primitive, std::span<const Array> in) {
  if (!ok) throw ShapeError::of(primitive, "inputs of inconsistent shapes", "{}", shapes_of(in));
}

// Equal except along `axis` (and of one rank).
bool equal_but(const Shape& a, const Shape& b, int axis) {
  if (a.size() != b.size()) return false;
  for (size_t d = 0; d < a.size(); ++d)
    if (static_cast<int>(d) != axis && a[d] != b[d]) return false;
  return true;
}

// k index arrays of one shape.
bool same_index_shapes(std::span<const Array> indices) {
  for (const Array& i : indices)
    if (i.shape() != indices[0].shape()) return false;
  return true;
}

// ---------------------------------------------------------------- primitives

class Take final : public PrimitiveWithParams<Take> {
 public:
  Take(Stream s, int axis) : PrimitiveWithParams(s), axis_(axis) {}
  const char* name() const override { return "Take"; }
  auto params() const { return std::tie(axis_); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    return {shape(in[0].shape(), in[1].shape(), axis_)};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const Array a = dense_copy(in[0]);
    const Block b = block(a.shape(), axis_);
    const auto rows = load_indices("take", in[1], in[1].shape(), b.n, axis_);
    out[0].allocate();
    visit_bits(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      take_rows(a.strided_data<T>(), out[0].strided_data<T>(), b, rows.data(), in[1].size());
    });
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    check_host_indices("take", in[1], in[0].shape()[axis_], axis_);
    gpu::take(in[0], in[1], axis_, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array &x = a.primals[0], &idx = a.primals[1], &g = a.cotangents[0];
    std::vector<Array> out;
    for (int arg : a.argnums)
      out.push_back(arg == 0 ? make_scatter(zeros(x.shape(), g.dtype(), stream()), idx, g, axis_, stream())
                             : zeros_like(idx, stream()));
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    return {make_take(tangents_by_input(a, stream())[0], a.primals[1], axis_, stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const Array &x = a.inputs[0], &idx = a.inputs[1];
    if (a.axes[1] < 0)
      return {{make_take(batch_front(x, a.axes[0], 1, stream()), idx, axis_ + 1, stream())}, {0}};
    if (a.axes[0] < 0) return {{make_take(x, idx, axis_, stream())}, {axis_ + a.axes[1]}};
    const Array xb = batch_front(x, a.axes[0], 1, stream()), ib = batch_front(idx, a.axes[1], 1, stream());
    const Array flat = make_take_along(xb, along_indices(ib, xb, axis_ + 1, stream()), axis_ + 1, stream());
    Shape shape = xb.shape();
    shape.erase(shape.begin() + axis_ + 1);
    shape.insert(shape.begin() + axis_ + 1, ib.shape().begin() + 1, ib.shape().end());
    return {{reshape(flat, shape, stream())}, {0}};
  }
  static Shape shape(const Shape& a, const Shape& idx, int axis) {
    Shape out(a.begin(), a.begin() + axis);
    out.insert(out.end(), idx.begin(), idx.end());
    out.insert(out.end(), a.begin() + axis + 1, a.end());
    return out;
  }

 private:
  int axis_;
};

// Inputs a, indices, updates (updates of Take's output shape and a's dtype).
class ScatterAdd final : public PrimitiveWithParams<ScatterAdd> {
 public:
  ScatterAdd(Stream s, int axis) : PrimitiveWithParams(s), axis_(axis) {}
  const char* name() const override { return "ScatterAdd"; }
  auto params() const { return std::tie(axis_); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    check_shapes(in[2].shape() == Take::shape(in[0].shape(), in[1].shape(), axis_), name(), in);
    return {in[0].shape()};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const Block b = block(in[0].shape(), axis_);
    const auto rows = load_indices("scatter_add", in[1], in[1].shape(), b.n, axis_);
    const Array upd = dense_copy(in[2]);
    init_from(out[0], in[0]);
    visit_dtype<kNumericTypes>(out[0].dtype(), "scatter_add", [&](auto tag) {
      using T = typename decltype(tag)::type;
      scatter_rows(out[0].strided_data<T>(), upd.strided_data<T>(), b, rows.data(), in[1].size(), true);
    });
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    check_host_indices("scatter_add", in[1], in[0].shape()[axis_], axis_);
    gpu::scatter_add(in[0], in[1], in[2], axis_, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    std::vector<Array> out;
    for (int arg : a.argnums) {
      if (arg == 0)
        out.push_back(a.cotangents[0]);
      else if (arg == 1)
        out.push_back(zeros_like(a.primals[1], stream()));
      else
        out.push_back(make_take(a.cotangents[0], a.primals[1], axis_, stream()));
    }
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const auto t = tangents_by_input(a, stream());
    return {make_scatter(t[0], a.primals[1], t[2], axis_, stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const int64_t n = batch_size(a.inputs, a.axes);
    const Array x = batch_front(a.inputs[0], a.axes[0], n, stream());
    const Array u = batch_front(a.inputs[2], a.axes[2], n, stream());
    if (a.axes[1] < 0) return {{make_scatter(x, a.inputs[1], u, axis_ + 1, stream())}, {0}};
    const Array ib = batch_front(a.inputs[1], a.axes[1], n, stream());
    const Array idx = along_indices(ib, x, axis_ + 1, stream());
    return {{make_scatter_along(x, idx, reshape(u, idx.shape(), stream()), axis_ + 1, true, stream())}, {0}};
  }

 private:
  int axis_;
};

// Inputs a (shape A) and indices (shape U, equal to A except along the axis).
class TakeAlongAxis final : public PrimitiveWithParams<TakeAlongAxis> {
 public:
  TakeAlongAxis(Stream s, int axis) : PrimitiveWithParams(s), axis_(axis) {}
  const char* name() const override { return "TakeAlongAxis"; }
  auto params() const { return std::tie(axis_); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    check_shapes(equal_but(in[0].shape(), in[1].shape(), axis_), name(), in);
    return {in[1].shape()};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const Array a = dense_copy(in[0]);
    const Block b = block(a.shape(), axis_);
    const auto idx = load_indices("take_along_axis", in[1], in[1].shape(), b.n, axis_);
    out[0].allocate();
    visit_bits(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      take_along(a.strided_data<T>(), out[0].strided_data<T>(), b, idx.data(), in[1].shape()[axis_]);
    });
  }
  // Indices held on the host are checked as on the CPU; the kernel reads 0 for bad ones computed
  // on the device, which cannot be seen before the submit (core/vulkan/runtime/index_facade.cpp).
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    if (in[1].node().buffer->on_host())
      load_indices("take_along_axis", in[1], in[1].shape(), in[0].shape()[axis_], axis_);
    gpu::take_along_axis(in[0], in[1], axis_, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array &x = a.primals[0], &idx = a.primals[1], &g = a.cotangents[0];
    std::vector<Array> out;
    for (int arg : a.argnums)
      out.push_back(
          arg == 0 ? make_scatter_along(zeros(x.shape(), g.dtype(), stream()), idx, g, axis_, true, stream())
                   : zeros_like(idx, stream()));
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    return {make_take_along(tangents_by_input(a, stream())[0], a.primals[1], axis_, stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const int64_t n = batch_size(a.inputs, a.axes);
    return {{make_take_along(batch_front(a.inputs[0], a.axes[0], n, stream()),
                             batch_front(a.inputs[1], a.axes[1], n, stream()), axis_ + 1, stream())},
            {0}};
  }

 private:
  int axis_;
};

// Inputs a (shape A), indices and values (both shape U, equal to A except along the axis).
class ScatterAlongAxis final : public PrimitiveWithParams<ScatterAlongAxis> {
 public:
  ScatterAlongAxis(Stream s, int axis, bool add) : PrimitiveWithParams(s), axis_(axis), add_(add) {}
  const char* name() const override { return add_ ? "ScatterAddAlongAxis" : "PutAlongAxis"; }
  auto params() const { return std::tie(axis_, add_); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    check_shapes(in[1].shape() == in[2].shape() && equal_but(in[0].shape(), in[1].shape(), axis_), name(),
                 in);
    return {in[0].shape()};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const char* op = add_ ? "scatter_add" : "put_along_axis";
    const Block b = block(in[0].shape(), axis_);
    const auto idx = load_indices(op, in[1], in[1].shape(), b.n, axis_);
    const Array vals = dense_copy(in[2]);
    init_from(out[0], in[0]);
    visit_values(out[0].dtype(), add_, op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      scatter_along(out[0].strided_data<T>(), vals.strided_data<T>(), b, idx.data(), in[1].shape()[axis_],
                    add_);
    });
  }
  // As TakeAlongAxis::eval_gpu; the kernels drop updates at bad indices computed on the device.
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    check_host_indices(add_ ? "scatter_add" : "put_along_axis", in[1], in[0].shape()[axis_], axis_);
    if (add_)
      gpu::scatter_add_along_axis(in[0], in[1], in[2], axis_, out[0]);
    else
      gpu::put_along_axis(in[0], in[1], in[2], axis_, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array &idx = a.primals[1], &g = a.cotangents[0];
    std::vector<Array> out;
    for (int arg : a.argnums) {
      if (arg == 0 && add_)
        out.push_back(g);
      else if (arg == 0)
        out.push_back(
            make_scatter_along(g, idx, zeros(idx.shape(), g.dtype(), stream()), axis_, false, stream()));
      else if (arg == 1)
        out.push_back(zeros_like(idx, stream()));
      else
        out.push_back(make_take_along(g, idx, axis_, stream()));
    }
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const auto t = tangents_by_input(a, stream());
    return {make_scatter_along(t[0], a.primals[1], t[2], axis_, add_, stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const int64_t n = batch_size(a.inputs, a.axes);
    std::vector<Array> x;
    for (int i = 0; i < 3; ++i) x.push_back(batch_front(a.inputs[i], a.axes[i], n, stream()));
    return {{make_scatter_along(x[0], x[1], x[2], axis_ + 1, add_, stream())}, {0}};
  }

 private:
  int axis_;
  bool add_;
};

// Inputs a and k index arrays of one shape B; the output is B + a.shape[k:].
class Gather final : public PrimitiveWithParams<Gather> {
 public:
  using PrimitiveWithParams::PrimitiveWithParams;
  const char* name() const override { return "Gather"; }
  auto params() const { return std::tuple<>(); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    check_shapes(same_index_shapes(in.subspan(1)), name(), in);
    return {shape(in)};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const Array a = dense_copy(in[0]);
    const auto indices = in.subspan(1);
    const auto rows = load_rows("gather", a.shape(), indices);
    out[0].allocate();
    visit_bits(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      take_rows(a.strided_data<T>(), out[0].strided_data<T>(), rest_block(a.shape(), indices.size()),
                rows.data(), indices[0].size());
    });
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    const auto indices = in.subspan(1);
    for (size_t k = 0; k < indices.size(); ++k)
      check_host_indices("gather", indices[k], in[0].shape()[k], static_cast<int>(k));
    gpu::gather(in[0], indices, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const std::vector<Array> indices(a.primals.begin() + 1, a.primals.end());
    const Array& g = a.cotangents[0];
    std::vector<Array> out;
    for (int arg : a.argnums)
      out.push_back(
          arg == 0 ? make_scatter_nd(zeros(a.primals[0].shape(), g.dtype(), stream()), g, indices, stream())
                   : zeros_like(a.primals[arg], stream()));
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    return {make_gather(tangents_by_input(a, stream())[0],
                        std::vector<Array>(a.primals.begin() + 1, a.primals.end()), stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const int64_t n = batch_size(a.inputs, a.axes);
    const bool batched = a.axes[0] >= 0;
    const Array x = batched ? batch_front(a.inputs[0], a.axes[0], n, stream()) : a.inputs[0];
    return {{make_gather(x, batched_indices(a.inputs.subspan(1), a.axes.subspan(1), n, batched, stream()),
                         stream())},
            {0}};
  }

  static Shape shape(std::span<const Array> in) {
    Shape out = in[1].shape();
    out.insert(out.end(), in[0].shape().begin() + static_cast<int64_t>(in.size()) - 1, in[0].shape().end());
    return out;
  }
  // a viewed as (1, prod(shape[:k]), prod(shape[k:])).
  static Block rest_block(const Shape& shape, size_t k) {
    Block b{1, 1, 1};
    for (size_t i = 0; i < shape.size(); ++i) (i < k ? b.n : b.q) *= shape[i];
    return b;
  }
  // Index arrays with the batch axis in front; with `arange`, a leading index 0..n-1 picks each
  // example's own slice of a batched operand.
  static std::vector<Array> batched_indices(std::span<const Array> idx, std::span<const int> axes, int64_t n,
                                            bool arange_first, Stream s) {
    std::vector<Array> out;
    for (size_t i = 0; i < idx.size(); ++i) out.push_back(batch_front(idx[i], axes[i], n, s));
    if (arange_first) {
      Shape ar(out[0].ndim(), 1);
      ar[0] = n;
      const Array r = reshape(arange(0, static_cast<double>(n), 1, int64, s), ar, s);
      out.insert(out.begin(), broadcast_to(r, out[0].shape(), s));
    }
    return out;
  }
};

// Inputs a, updates (B + a.shape[k:]) and k index arrays of shape B.
class ScatterAddND final : public PrimitiveWithParams<ScatterAddND> {
 public:
  using PrimitiveWithParams::PrimitiveWithParams;
  const char* name() const override { return "ScatterAddND"; }
  auto params() const { return std::tuple<>(); }
  uint32_t traits() const override { return static_cast<uint32_t>(shape_polymorphic_trait); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    const auto indices = in.subspan(2);
    Shape updates = indices.empty() ? Shape{} : indices[0].shape();
    updates.insert(updates.end(), in[0].shape().begin() + static_cast<int64_t>(indices.size()),
                   in[0].shape().end());
    check_shapes(same_index_shapes(indices) && in[1].shape() == updates, name(), in);
    return {in[0].shape()};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    const auto indices = in.subspan(2);
    const auto rows = load_rows("gather", in[0].shape(), indices);
    const Array upd = dense_copy(in[1]);
    init_from(out[0], in[0]);
    visit_dtype<kNumericTypes>(out[0].dtype(), "scatter_add", [&](auto tag) {
      using T = typename decltype(tag)::type;
      scatter_rows(out[0].strided_data<T>(), upd.strided_data<T>(),
                   Gather::rest_block(in[0].shape(), indices.size()), rows.data(), indices[0].size(), true);
    });
  }
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    const auto indices = in.subspan(2);
    for (size_t k = 0; k < indices.size(); ++k)
      check_host_indices("gather", indices[k], in[0].shape()[k], static_cast<int>(k));
    gpu::scatter_add_nd(in[0], in[1], indices, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const std::vector<Array> indices(a.primals.begin() + 2, a.primals.end());
    std::vector<Array> out;
    for (int arg : a.argnums) {
      if (arg == 0)
        out.push_back(a.cotangents[0]);
      else if (arg == 1)
        out.push_back(make_gather(a.cotangents[0], indices, stream()));
      else
        out.push_back(zeros_like(a.primals[arg], stream()));
    }
    return out;
  }
  std::vector<Array> jvp(const JvpArgs& a) const override {
    const auto t = tangents_by_input(a, stream());
    return {
        make_scatter_nd(t[0], t[1], std::vector<Array>(a.primals.begin() + 2, a.primals.end()), stream())};
  }
  VmapResult vmap(const VmapArgs& a) const override {
    const int64_t n = batch_size(a.inputs, a.axes);
    const Array x = batch_front(a.inputs[0], a.axes[0], n, stream());
    const Array u = batch_front(a.inputs[1], a.axes[1], n, stream());
    return {{make_scatter_nd(
                x, u, Gather::batched_indices(a.inputs.subspan(2), a.axes.subspan(2), n, true, stream()),
                stream())},
            {0}};
  }
};

Array make_take(const Array& a, const Array& idx, int axis, StreamOrDevice s) {
  return Array::make(Take::shape(a.shape(), idx.shape(), axis), a.dtype(),
                     std::make_shared<Take>(to_stream(s), axis), {a, idx});
}
Array make_take_along(const Array& a, const Array& idx, int axis, StreamOrDevice s) {
  return Array::make(idx.shape(), a.dtype(), std::make_shared<TakeAlongAxis>(to_stream(s), axis), {a, idx});
}
Array make_scatter(const Array& a, const Array& idx, const Array& upd, int axis, StreamOrDevice s) {
  return Array::make(a.shape(), a.dtype(), std::make_shared<ScatterAdd>(to_stream(s), axis), {a, idx, upd});
}
Array make_scatter_along(const Array& a, const Array& idx, const Array& vals, int axis, bool add,
                         StreamOrDevice s) {
  return Array::make(a.shape(), a.dtype(), std::make_shared<ScatterAlongAxis>(to_stream(s), axis, add),
                     {a, idx, vals});
}
}  // namespace

Array make_gather(const Array& a, std::vector<Array> indices, StreamOrDevice s) {
  indices.insert(indices.begin(), a);
  Shape shape = Gather::shape(indices);
  return Array::make(std::move(shape), a.dtype(), std::make_shared<Gather>(to_stream(s)), std::move(indices));
}
Array make_scatter_nd(const Array& a, const Array& upd, std::vector<Array> indices, StreamOrDevice s) {
  indices.insert(indices.begin(), {a, upd});
  return Array::make(a.shape(), a.dtype(), std::make_shared<ScatterAddND>(to_stream(s)), std::move(indices));
}

namespace {

// Shape U of along-axis indices: a's shape with the axis sized like the indices'. Index dims other
// than the axis must be 1 or match a's (`a_broadcasts`: a's size-1 dims may grow too).
Shape along_shape(const char* op, const Array& a, const Array& idx, int axis, bool a_broadcasts) {
  if (idx.ndim() != a.ndim())
    throw ShapeError::of(op, "indices must have the array's number of dimensions", "indices {} for array {}",
                         shape_str(idx.shape()), shape_str(a.shape()));
  Shape u = a.shape();
  for (int d = 0; d < a.ndim(); ++d) {
    const int64_t ad = a.shape()[d], id = idx.shape()[d];
    if (d == axis)
      u[d] = id;
    else if (id == ad || id == 1)
      u[d] = ad;
    else if (a_broadcasts && ad == 1)
      u[d] = id;
    else
      throw ShapeError::of(op, "indices do not broadcast against the array off the axis",
                           "indices {} for array {} along axis {}", shape_str(idx.shape()),
                           shape_str(a.shape()), axis);
  }
  return u;
}

}  // namespace
}  // namespace detail

Array take(const Array& a, const Array& indices, int axis, StreamOrDevice s) {
  detail::check_array("take", a);
  detail::check_array("take", indices);
  detail::check_index_dtype("take", indices);
  const int ax = normalize_axis("take", axis, a.ndim());
  if (a.ndim() - 1 + indices.ndim() > kMaxDims)
    throw ShapeError::of("take", "too many dimensions", "indices {} into {}", shape_str(indices.shape()),
                         shape_str(a.shape()));
  detail::check_known("take", indices, a.shape()[ax], ax);
  return detail::make_take(a, indices, ax, s);
}

Array take(const Array& a, const Array& indices, StreamOrDevice s) {
  detail::check_array("take", a);
  return take(reshape(a, {-1}, s), indices, 0, s);
}

Array take_along_axis(const Array& a, const Array& indices, int axis, StreamOrDevice s) {
  detail::check_array("take_along_axis", a);
  detail::check_array("take_along_axis", indices);
  detail::check_index_dtype("take_along_axis", indices);
  const int ax = normalize_axis("take_along_axis", axis, a.ndim());
  const Shape u = detail::along_shape("take_along_axis", a, indices, ax, true);
  Shape a_shape = u;
  a_shape[ax] = a.shape()[ax];
  detail::check_known("take_along_axis", indices, a.shape()[ax], ax);
  return detail::make_take_along(broadcast_to(a, a_shape, s), broadcast_to(indices, u, s), ax, s);
}

Array put_along_axis(const Array& a, const Array& indices, const Array& values, int axis, StreamOrDevice s) {
  detail::check_array("put_along_axis", a);
  detail::check_array("put_along_axis", indices);
  detail::check_array("put_along_axis", values);
  detail::check_index_dtype("put_along_axis", indices);
  const int ax = normalize_axis("put_along_axis", axis, a.ndim());
  const Shape u = detail::along_shape("put_along_axis", a, indices, ax, false);
  if (broadcast_shapes("put_along_axis", values.shape(), u) != u)
    throw ShapeError::of("put_along_axis", "values do not broadcast to the indices' shape",
                         "values {} for indices {}", shape_str(values.shape()), shape_str(u));
  detail::check_known("put_along_axis", indices, a.shape()[ax], ax);
  const Array v = broadcast_to(astype(values, a.dtype(), s), u, s);
  return detail::make_scatter_along(a, broadcast_to(indices, u, s), v, ax, false, s);
}

Array scatter_add(const Array& a, const Array& indices, const Array& updates, int axis, StreamOrDevice s) {
  detail::check_array("scatter_add", a);
  detail::check_array("scatter_add", indices);
  detail::check_array("scatter_add", updates);
  detail::check_index_dtype("scatter_add", indices);
  if (!kNumericTypes.has(a.dtype()))
    throw DtypeError::of("scatter_add", "dtype not supported", "{}", dtype_name(a.dtype()));
  const int ax = normalize_axis("scatter_add", axis, a.ndim());
  const Shape u = detail::Take::shape(a.shape(), indices.shape(), ax);
  if (broadcast_shapes("scatter_add", updates.shape(), u) != u)
    throw ShapeError::of("scatter_add",
                         "updates must have shape a.shape[:axis] + indices.shape + a.shape[axis+1:]",
                         "updates {} for array {}, indices {}, axis {}", shape_str(updates.shape()),
                         shape_str(a.shape()), shape_str(indices.shape()), ax);
  detail::check_known("scatter_add", indices, a.shape()[ax], ax);
  return detail::make_scatter(a, indices, broadcast_to(astype(updates, a.dtype(), s), u, s), ax, s);
}

Array gather(const Array& a, const std::vector<Array>& indices, StreamOrDevice s) {
  detail::check_array("gather", a);
  if (indices.empty()) return a;
  if (static_cast<int>(indices.size()) > a.ndim())
    throw ShapeError::of("gather", "more index arrays than dimensions", "{} index arrays for shape {}",
                         indices.size(), shape_str(a.shape()));
  std::vector<Shape> shapes;
  for (const Array& i : indices) {
    detail::check_array("gather", i);
    detail::check_index_dtype("gather", i);
    shapes.push_back(i.shape());
  }
  const Shape b = broadcast_shapes("gather", shapes);
  if (b.size() + a.ndim() - indices.size() > static_cast<size_t>(kMaxDims))
    throw ShapeError::of("gather", "too many dimensions", "indices {} into {}", shape_str(b),
                         shape_str(a.shape()));
  std::vector<Array> idx;
  for (size_t k = 0; k < indices.size(); ++k) {
    detail::check_known("gather", indices[k], a.shape()[k], static_cast<int>(k));
    idx.push_back(broadcast_to(indices[k], b, s));
  }
  return detail::make_gather(a, std::move(idx), s);
}

}  // namespace kiln
