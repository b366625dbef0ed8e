#include <limits>

#include "common_impl.h"
#include "kiln/core/error.h"
#include "kiln/core/ops/attention.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/scan.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/nn/layers/dropout.h"

namespace kiln::models::detail {

Array attend(const Array& q, const Array& k, const Array& v, double scale, bool causal, const Array& mask,
             double dropout) {
  if (dropout == 0) return scaled_dot_product_attention(q, k, v, scale, causal, mask);
  const int64_t lq = q.shape(2), lk = k.shape(2);
  Array hidden = mask;
  if (causal) {
    const Array query_pos =
        reshape(arange(static_cast<double>(lk - lq), static_cast<double>(lk), 1, int32), {lq, 1});
    const Array key_pos = reshape(arange(0, static_cast<double>(lk), 1, int32), {1, lk});
    const Array future = key_pos > query_pos;
    hidden = hidden.valid() ? logical_or(hidden, future) : future;
  }
  Array scores = matmul(q * scale, swapaxes(k, -1, -2));
  if (hidden.valid()) scores = where(hidden, -std::numeric_limits<double>::infinity(), scores);
  return matmul(nn::dropout(softmax(scores, -1), dropout), v);
}

PaddedPositions padded_positions(const char* op, const Array& mask, int64_t batch, int64_t offset,
                                 int64_t t) {
  const int64_t len = offset + t;
  if (!mask.valid()) throw ValueError::of(op, "attention_mask is an empty Array");
  if (is_floating(mask.dtype()))
    throw DtypeError::of(op, "attention_mask must be integers or bool", "got {}", dtype_name(mask.dtype()));
  if (mask.shape() != Shape{batch, len})
    throw ShapeError::of(op, "attention_mask must cover the cached and the new positions",
                         "expected ({}, {}) for {} cached + {} new, got {}", batch, len, offset, t,
                         shape_str(mask.shape()));
  const Array real = astype(mask != 0, int32);
  const Array all = maximum(cumsum(real, 1) - 1, 0);
  const Array positions = slice(all, {Slice{}, Slice{offset, len}});
  const Array query_pos =
      reshape(arange(static_cast<double>(offset), static_cast<double>(len), 1, int32), {t, 1});
  const Array key_pos = reshape(arange(0, static_cast<double>(len), 1, int32), {1, len});
  const Array padding = reshape(real == 0, {batch, 1, 1, len});
  return {positions, logical_and(padding, reshape(key_pos != query_pos, {1, 1, t, len}))};
}

Array split_heads(const Array& x, int64_t heads) {
  const int64_t b = x.shape(0), t = x.shape(1);
  return transpose(reshape(x, {b, t, heads, x.shape(2) / heads}), {0, 2, 1, 3});
}

Array merge_heads(const Array& x) {
  const int64_t b = x.shape(0), h = x.shape(1), t = x.shape(2), d = x.shape(3);
  return reshape(transpose(x, {0, 2, 1, 3}), {b, t, h * d});
}

}  // namespace kiln::models::detail
