#include "kiln/nn/layers/attention.h"

#include <cmath>
#include <limits>

#include "kiln/core/error.h"
#include "kiln/core/ops/attention.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/random.h"
#include "kiln/nn/init.h"
#include "kiln/nn/layers/dropout.h"

namespace kiln::nn {

namespace {

constexpr const char* kName = "MultiHeadAttention";

// Checks the constructor's arguments before any member is built; returns embed_dim.
int64_t checked_embed_dim(int64_t embed_dim, int64_t num_heads, const MultiHeadAttentionOptions& o) {
  if (embed_dim < 1 || num_heads < 1 || embed_dim % num_heads != 0)
    throw ValueError::of(kName, "embed_dim and num_heads must be >= 1 and num_heads must divide embed_dim",
                         "embed_dim {}, num_heads {}", embed_dim, num_heads);
  if ((o.kdim && *o.kdim < 1) || (o.vdim && *o.vdim < 1))
    throw ValueError::of(kName, "kdim and vdim must be >= 1", "kdim {}, vdim {}", o.kdim.value_or(embed_dim),
                         o.vdim.value_or(embed_dim));
  if (!(o.dropout >= 0 && o.dropout < 1))
    throw ValueError::of(kName, "dropout must be in [0, 1)", "got {}", o.dropout);
  return embed_dim;
}

Array rows(const Array& a, int64_t start, int64_t stop) { return slice(a, {Slice{start, stop}}); }

// (B, L, H * D) -> (B, H, L, D).
Array split_heads(const Array& x, int64_t heads) {
  const Shape& s = x.shape();
  return transpose(reshape(x, {s[0], s[1], heads, s[2] / heads}), {0, 2, 1, 3});
}

void check_float_input(const char* what, const Array& x) {
  if (!x.valid()) throw ValueError::of(kName, "input is an empty Array", "{}", what);
  if (!is_floating(x.dtype()))
    throw DtypeError::of(kName, "inputs must be floating point", "{} is {}", what, dtype_name(x.dtype()));
}

// Throws unless mask (bool or float) broadcasts to scores of shape s (B, H, Lq, Lk).
void check_mask(const Array& mask, const Shape& s, const char* what) {
  bool ok = mask.ndim() <= 4;
  for (int i = 1; ok && i <= mask.ndim(); ++i) {
    const int64_t m = mask.shape()[mask.ndim() - i], t = s[4 - i];
    ok = m == 1 || m == t;
  }
  if (!ok)
    throw ShapeError::of(kName, "mask does not broadcast to (B, H, Lq, Lk)", "{} {} for scores {}", what,
                         shape_str(mask.shape()), shape_str(s));
  if (mask.dtype() != bool_ && !is_floating(mask.dtype()))
    throw DtypeError::of(kName, "masks must be bool or floating point", "{} is {}", what,
                         dtype_name(mask.dtype()));
}

// The mask as scores' addend: -inf where a bool mask is true, a float mask cast to `t`.
Array additive(const Array& mask, Dtype t) {
  if (mask.dtype() == bool_) return where(mask, -std::numeric_limits<double>::infinity(), zeros({}, t));
  return astype(mask, t);
}

// Applies a bool (true = masked) or additive float mask to scores (B, H, Lq, Lk).
Array apply_mask(const Array& scores, const Array& mask, const char* what) {
  check_mask(mask, scores.shape(), what);
  return scores + additive(mask, scores.dtype());
}

}  // namespace

int64_t KVCache::length(size_t layer) const {
  if (layer >= layers.size() || !layers[layer].keys.valid()) return 0;
  return layers[layer].keys.shape()[2];
}

MultiHeadAttention::MultiHeadAttention(int64_t embed_dim, int64_t num_heads, MultiHeadAttentionOptions o)
    : out_proj(this, "out_proj", checked_embed_dim(embed_dim, num_heads, o), embed_dim,
               LinearOptions{.bias = o.bias, .dtype = o.dtype, .key = random::key(0)}),
      embed_(embed_dim),
      heads_(num_heads),
      kdim_(o.kdim.value_or(embed_dim)),
      vdim_(o.vdim.value_or(embed_dim)),
      dropout_(o.dropout) {
  // One key for the whole module: out_proj was built with a placeholder key and its (lazy, never
  // computed) weight is replaced here, since members are built before this body can split a key.
  const auto keys = random::split_keys(o.key.valid() ? o.key : random::next_key(), 4);
  const double bound = 1.0 / std::sqrt(static_cast<double>(embed_dim));
  out_proj->weight = init::uniform({embed_, embed_}, -bound, bound, o.dtype, keys[3]);
  if (kdim_ == embed_ && vdim_ == embed_) {
    in_proj_weight.set(init::xavier_uniform({3 * embed_, embed_}, 1.0, o.dtype, keys[0]));
  } else {
    q_proj_weight.set(init::xavier_uniform({embed_, embed_}, 1.0, o.dtype, keys[0]));
    k_proj_weight.set(init::xavier_uniform({embed_, kdim_}, 1.0, o.dtype, keys[1]));
    v_proj_weight.set(init::xavier_uniform({embed_, vdim_}, 1.0, o.dtype, keys[2]));
  }
  if (o.bias) {
    in_proj_bias.set(zeros({3 * embed_}, o.dtype));
    out_proj->bias = zeros({embed_}, o.dtype);
  }
}

void MultiHeadAttention::check_inputs(const Array& query, const Array& key, const Array& value) const {
  check_float_input("query", query);
  check_float_input("key", key);
  check_float_input("value", value);
  const int nd = query.ndim();
  if ((nd != 2 && nd != 3) || key.ndim() != nd || value.ndim() != nd)
    throw ShapeError::of(kName, "query, key and value must all be (B, L, features) or all (L, features)",
                         "got query {}, key {}, value {}", shape_str(query.shape()), shape_str(key.shape()),
                         shape_str(value.shape()));
  if (query.shape().back() != embed_ || key.shape().back() != kdim_ || value.shape().back() != vdim_)
    throw ShapeError::of(kName, "feature dimensions must be (embed_dim, kdim, vdim)",
                         "expected ({}, {}, {}), got query {}, key {}, value {}", embed_, kdim_, vdim_,
                         shape_str(query.shape()), shape_str(key.shape()), shape_str(value.shape()));
  const bool same_len = key.shape()[nd - 2] == value.shape()[nd - 2];
  const bool same_batch =
      nd == 2 || (query.shape()[0] == key.shape()[0] && key.shape()[0] == value.shape()[0]);
  if (!same_len || !same_batch)
    throw ShapeError::of(kName, "key and value must have the same length, and all inputs the same batch",
                         "got query {}, key {}, value {}", shape_str(query.shape()), shape_str(key.shape()),
                         shape_str(value.shape()));
}

MultiHeadAttention::Heads MultiHeadAttention::project(const Array& query, const Array& key,
                                                      const Array& value) const {
  const Array& b = in_proj_bias.value();
  const int64_t e = embed_;
  auto bias_rows = [&](int64_t i) { return b.valid() ? rows(b, i * e, (i + 1) * e) : Array(); };
  Array q, k, v;
  if (in_proj_weight.has_value()) {
    const Array& w = in_proj_weight.value();
    if (query.id() == key.id() && key.id() == value.id()) {
      // Self-attention: one GEMM for all three projections.
      const auto qkv = split(linear(query, w, b), 3, -1);
      q = qkv[0], k = qkv[1], v = qkv[2];
    } else {
      q = linear(query, rows(w, 0, e), bias_rows(0));
      k = linear(key, rows(w, e, 2 * e), bias_rows(1));
      v = linear(value, rows(w, 2 * e, 3 * e), bias_rows(2));
    }
  } else {
    q = linear(query, q_proj_weight.value(), bias_rows(0));
    k = linear(key, k_proj_weight.value(), bias_rows(1));
    v = linear(value, v_proj_weight.value(), bias_rows(2));
  }
  return {split_heads(q, heads_), split_heads(k, heads_), split_heads(v, heads_)};
}

AttentionOutput MultiHeadAttention::attend(const Heads& h, const AttentionArgs& args, bool unbatched) const {
  const int64_t batch = h.q.shape()[0], lq = h.q.shape()[2], lk = h.k.shape()[2];
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim()));
  const bool dropping = is_training() && dropout_ > 0;
  if (!dropping && !args.need_weights) {
    // No attention dropout and no weights wanted: one fused node (core/ops/attention.h), whose
    // weights never reach memory. Masks become one additive float mask.
    const Shape scores{batch, h.q.shape()[1], lq, lk};
    Array mask;
    if (args.mask.valid()) {
      check_mask(args.mask, scores, "mask");
      mask = args.mask;
    }
    if (args.key_padding_mask.valid()) {
      const Array& kpm = args.key_padding_mask;
      const Shape expected = unbatched ? Shape{lk} : Shape{batch, lk};
      if (kpm.shape() != expected)
        throw ShapeError::of(kName, "key_padding_mask must be (B, Lk)", "expected {}, got {}",
                             shape_str(expected), shape_str(kpm.shape()));
      const Array padding = reshape(kpm, {batch, 1, 1, lk});
      check_mask(padding, scores, "key_padding_mask");
      mask = mask.valid() ? additive(mask, h.q.dtype()) + additive(padding, h.q.dtype()) : padding;
    }
    Array out = scaled_dot_product_attention(h.q, h.k, h.v, scale, args.causal, mask);
    out = out_proj(reshape(transpose(out, {0, 2, 1, 3}), {batch, lq, embed_}));
    if (unbatched) out = squeeze(out, Axes{0});
    return {out, Array()};
  }
  Array scores = matmul(h.q * scale, swapaxes(h.k, -1, -2));  // (B, H, Lq, Lk)
  if (args.mask.valid()) scores = apply_mask(scores, args.mask, "mask");
  if (args.causal) {
    const Array qpos =
        reshape(arange(0, static_cast<double>(lq), 1, int32), {lq, 1}) + static_cast<int>(lk - lq);
    const Array kpos = reshape(arange(0, static_cast<double>(lk), 1, int32), {1, lk});
    scores = where(kpos > qpos, -std::numeric_limits<double>::infinity(), scores);
  }
  if (args.key_padding_mask.valid()) {
    const Array& kpm = args.key_padding_mask;
    const Shape expected = unbatched ? Shape{lk} : Shape{batch, lk};
    if (kpm.shape() != expected)
      throw ShapeError::of(kName, "key_padding_mask must be (B, Lk)", "expected {}, got {}",
                           shape_str(expected), shape_str(kpm.shape()));
    scores = apply_mask(scores, reshape(kpm, {batch, 1, 1, lk}), "key_padding_mask");
  }
  Array weights = softmax(scores, -1);
  if (is_training() && dropout_ > 0) weights = dropout(weights, dropout_, args.dropout_key);
  Array out = transpose(matmul(weights, h.v), {0, 2, 1, 3});  // (B, Lq, H, D)
  out = out_proj(reshape(out, {batch, lq, embed_}));
  if (args.need_weights && args.average_attn_weights) weights = mean(weights, 1);
  if (unbatched) {
    out = squeeze(out, Axes{0});
    weights = squeeze(weights, Axes{0});
  }
  return {out, args.need_weights ? weights : Array()};
}

namespace {
Array batched(const Array& x, bool unbatched) { return unbatched ? expand_dims(x, 0) : x; }
}  // namespace

Array MultiHeadAttention::operator()(const Array& query, const Array& key, const Array& value,
                                     const AttentionArgs& args) const {
  AttentionArgs no_weights = args;
  no_weights.need_weights = false;
  return forward(query, key, value, no_weights).output;
}

AttentionOutput MultiHeadAttention::forward(const Array& query, const Array& key, const Array& value,
                                            const AttentionArgs& args) const {
  check_inputs(query, key, value);
  const bool unbatched = query.ndim() == 2;
  const bool self = query.id() == key.id() && key.id() == value.id();
  const Array q = batched(query, unbatched);
  const Heads h = self ? project(q, q, q) : project(q, batched(key, unbatched), batched(value, unbatched));
  return attend(h, args, unbatched);
}

CachedAttentionOutput MultiHeadAttention::forward(const Array& query, const Array& key, const Array& value,
                                                  const KVCache& cache, size_t layer,
                                                  const AttentionArgs& args) const {
  check_inputs(query, key, value);
  const bool unbatched = query.ndim() == 2;
  const bool self = query.id() == key.id() && key.id() == value.id();
  const Array q = batched(query, unbatched);
  Heads h = self ? project(q, q, q) : project(q, batched(key, unbatched), batched(value, unbatched));
  KVCache next = cache;
  if (next.layers.size() <= layer) next.layers.resize(layer + 1);
  KVCache::Entry& entry = next.layers[layer];
  if (entry.keys.valid()) {
    const Shape& c = entry.keys.shape();
    const Shape& n = h.k.shape();
    const bool ok = c.size() == 4 && c[0] == n[0] && c[1] == n[1] && c[3] == n[3] && entry.values.valid() &&
                    entry.values.shape() == c;
    if (!ok)
      throw ShapeError::of(kName, "cached keys/values do not match this call",
                           "layer {}: cache keys {}, new keys {} (B, H, L, head_dim)", layer, shape_str(c),
                           shape_str(n));
    h.k = concatenate({entry.keys, h.k}, 2);
    h.v = concatenate({entry.values, h.v}, 2);
  }
  entry.keys = h.k;
  entry.values = h.v;
  AttentionOutput out = attend(h, args, unbatched);
  return {out.output, out.weights, std::move(next)};
}

}  // namespace kiln::nn
