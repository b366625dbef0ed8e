// Shared pieces of kiln::linalg (see linalg_decomp_impl.h): validation, promotion and the matrix
// helpers the rules are written with.
#include <climits>

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/linalg_decomp_impl.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/vulkan/gpu_host.h"

namespace kiln::detail::la {

void check_matrix(const char* op, const Array& a, bool square) {
  if (!a.valid()) throw ValueError::of(op, "an operand is an empty (default-constructed) array");
  if (a.ndim() < 2)
    throw ShapeError::of(op, "needs a matrix or a batch of matrices (at least 2 dimensions)", "got shape {}",
                         shape_str(a.shape()));
  const int64_t m = a.shape(-2), n = a.shape(-1);
  if (square && m != n)
    throw ShapeError::of(op, "needs square matrices", "got shape {}", shape_str(a.shape()));
  if (m > INT_MAX || n > INT_MAX)
    throw ShapeError::of(op, "matrix dimensions exceed LAPACK's 32-bit range", "got shape {}",
                         shape_str(a.shape()));
}

Dtype compute_dtype(Dtype t) { return t == float64 ? float64 : float32; }

Array to_compute(const Array& a, Stream s) { return astype(a, compute_dtype(a.dtype()), s); }

Array to_result(const Array& out, Dtype input, Stream s) {
  return input == float16 || input == bfloat16 ? astype(out, input, s) : out;
}

std::pair<Array, Array> broadcast_batch(const char* op, const Array& a, const Array& b, Stream s) {
  const Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  if (ab == bb) return {a, b};
  Shape batch;
  try {
    batch = broadcast_shapes(op, ab, bb);
  } catch (const ShapeError&) {
    throw ShapeError::of(op, "batch dimensions do not broadcast", "{} and {}", shape_str(a.shape()),
                         shape_str(b.shape()));
  }
  auto expand = [&](const Array& x) {
    Shape shape = batch;
    shape.push_back(x.shape(-2));
    shape.push_back(x.shape(-1));
    return x.shape() == shape ? x : broadcast_to(x, shape, s);
  };
  return {expand(a), expand(b)};
}

Array mT(const Array& x, Stream s) { return swapaxes(x, -1, -2, s); }

namespace {
// (j - i <= k) over the last two dims of x: the elements on or below diagonal k.
Array lower_mask(const Array& x, int k, Stream s) {
  const int64_t m = x.shape(-2), n = x.shape(-1);
  const Array rows = reshape(arange(0, static_cast<double>(m), 1, int32, s), {m, 1}, s);
  const Array cols = reshape(arange(0, static_cast<double>(n), 1, int32, s), {1, n}, s);
  return less_equal(subtract(cols, rows, s), k, s);
}
}  // namespace

Array tril(const Array& x, int k, Stream s) { return where(lower_mask(x, k, s), x, 0.0, s); }
Array triu(const Array& x, int k, Stream s) {
  return where(lower_mask(x, k - 1, s), 0.0, x, s);  // above diagonal k - 1
}

Array diagonal(const Array& x, Stream s) {
  const int64_t m = x.shape(-2), n = x.shape(-1), k = std::min(m, n);
  Shape flat(x.shape().begin(), x.shape().end() - 2);
  flat.push_back(m * n);
  const Array f = reshape(x, flat, s);
  std::vector<Slice> slices(flat.size() - 1);
  slices.push_back(Slice{0, std::min(k * (n + 1), m * n), n + 1});
  return slice(f, slices, s);
}

Array diag_embed(const Array& v, Stream s) {
  const int64_t k = v.shape(-1);
  return multiply(expand_dims(v, -1, s), eye(k, k, 0, v.dtype(), s), s);
}

Array sym(const Array& x, Stream s) { return multiply(add(x, mT(x, s), s), 0.5, s); }

Array safe_reciprocal(const Array& x, const Array& keep, Stream s) {
  return where(keep, divide(1.0, where(keep, x, 1.0, s), s), 0.0, s);
}

Array inverse_gaps(const Array& d, Stream s) {
  const Array gaps = subtract(expand_dims(d, -2, s), expand_dims(d, -1, s), s);  // [i, j] = d_j - d_i
  return safe_reciprocal(gaps, not_equal(gaps, 0.0, s), s);
}

Array batch_first(const Array& x, int axis, Stream s) { return axis < 0 ? x : moveaxis(x, axis, 0, s); }

std::pair<Array, Array> batch_first(const VmapArgs& args, Stream s) {
  int rank[2];
  for (int i = 0; i < 2; ++i) rank[i] = args.inputs[i].ndim() - (args.axes[i] >= 0 ? 1 : 0);
  const int r = std::max(rank[0], rank[1]);
  Array in[2];
  for (int i = 0; i < 2; ++i) {
    in[i] = batch_first(args.inputs[i], args.axes[i], s);
    if (args.axes[i] >= 0 && rank[i] < r) {
      Shape shape = in[i].shape();
      shape.insert(shape.begin() + 1, r - rank[i], 1);
      in[i] = reshape(in[i], shape, s);
    }
  }
  return {in[0], in[1]};
}

void HostPrimitive::eval_gpu(std::span<const Array> inputs, std::span<Array> outputs) const {
  gpu::eval_on_host(*this, inputs, outputs);
}

}  // namespace kiln::detail::la
