#include "kiln/nn/layers/transformer.h"

#include <cmath>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/unary.h"
#include "kiln/core/random.h"

namespace kiln::nn {

namespace {

std::vector<Array> init_keys(const TransformerLayerOptions& o, int n) {
  return random::split_keys(o.key.valid() ? o.key : random::next_key(), n);
}

MultiHeadAttentionOptions attention_options(const TransformerLayerOptions& o, const Array& key) {
  return {.bias = o.bias, .dropout = o.dropout, .dtype = o.dtype, .key = key};
}

LayerNormOptions norm_options(const TransformerLayerOptions& o) {
  return {.eps = o.layer_norm_eps, .bias = o.bias, .dtype = o.dtype};
}

LinearOptions linear_options(const TransformerLayerOptions& o, const Array& key) {
  return {.bias = o.bias, .dtype = o.dtype, .key = key};
}

Array activate(const TransformerLayerOptions& o, const Array& x) {
  if (o.custom_activation) return o.custom_activation(x);
  if (o.activation == TransformerActivation::gelu) return x * (1.0 + erf(x * M_SQRT1_2)) * 0.5;
  return maximum(x, 0.0);
}

// Keys for the dropouts of one call: split from the caller's key, or empty (each dropout then
// draws from random::next_key()).
std::vector<Array> dropout_keys(const Array& key, int n) {
  return key.valid() ? random::split_keys(key, n) : std::vector<Array>(n);
}

// The decoder's constructor splits one key into these, in this order.
enum DecoderKey { kSelfAttn, kCrossAttn, kLinear1, kLinear2, kDecoderKeys };

}  // namespace

// ---- TransformerEncoderLayer

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions o)
    : TransformerEncoderLayer(d_model, nhead, o, init_keys(o, 3)) {}

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                                                 const TransformerLayerOptions& o,
                                                 const std::vector<Array>& keys)
    : self_attn(this, "self_attn", d_model, nhead, attention_options(o, keys[0])),
      linear1(this, "linear1", d_model, o.dim_feedforward, linear_options(o, keys[1])),
      dropout(this, "dropout", o.dropout),
      linear2(this, "linear2", o.dim_feedforward, d_model, linear_options(o, keys[2])),
      norm1(this, "norm1", d_model, norm_options(o)),
      norm2(this, "norm2", d_model, norm_options(o)),
      dropout1(this, "dropout1", o.dropout),
      dropout2(this, "dropout2", o.dropout),
      options_(o) {}

CachedLayerOutput TransformerEncoderLayer::run(const Array& src, const KVCache* cache, size_t layer,
                                               const EncoderLayerArgs& args) const {
  const auto keys = dropout_keys(args.dropout_key, 4);
  KVCache next;
  auto self_attention = [&](const Array& x) {
    const AttentionArgs a{.mask = args.src_mask,
                          .key_padding_mask = args.src_key_padding_mask,
                          .causal = args.is_causal,
                          .dropout_key = keys[0]};
    Array y;
    if (cache) {
      CachedAttentionOutput out = self_attn->forward(x, x, x, *cache, layer, a);
      y = out.output;
      next = std::move(out.cache);
    } else {
      y = self_attn(x, x, x, a);
    }
    return (*dropout1)(y, keys[2]);
  };
  auto feed_forward = [&](const Array& x) {
    return (*dropout2)(linear2((*dropout)(activate(options_, linear1(x)), keys[1])), keys[3]);
  };
  Array x = src;
  if (options_.norm_first) {
    x = x + self_attention(norm1(x));
    x = x + feed_forward(norm2(x));
  } else {
    x = norm1(x + self_attention(x));
    x = norm2(x + feed_forward(x));
  }
  return {x, std::move(next)};
}

Array TransformerEncoderLayer::operator()(const Array& src, const EncoderLayerArgs& args) const {
  return run(src, nullptr, 0, args).output;
}

CachedLayerOutput TransformerEncoderLayer::forward(const Array& src, const KVCache& cache, size_t layer,
                                                   const EncoderLayerArgs& args) const {
  return run(src, &cache, layer, args);
}

// ---- TransformerDecoderLayer

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions o)
    : TransformerDecoderLayer(d_model, nhead, o, init_keys(o, kDecoderKeys)) {}

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model, int64_t nhead,
                                                 const TransformerLayerOptions& o,
                                                 const std::vector<Array>& keys)
    : self_attn(this, "self_attn", d_model, nhead, attention_options(o, keys[kSelfAttn])),
      multihead_attn(this, "multihead_attn", d_model, nhead, attention_options(o, keys[kCrossAttn])),
      linear1(this, "linear1", d_model, o.dim_feedforward, linear_options(o, keys[kLinear1])),
      dropout(this, "dropout", o.dropout),
      linear2(this, "linear2", o.dim_feedforward, d_model, linear_options(o, keys[kLinear2])),
      norm1(this, "norm1", d_model, norm_options(o)),
      norm2(this, "norm2", d_model, norm_options(o)),
      norm3(this, "norm3", d_model, norm_options(o)),
      dropout1(this, "dropout1", o.dropout),
      dropout2(this, "dropout2", o.dropout),
      dropout3(this, "dropout3", o.dropout),
      options_(o) {}

CachedLayerOutput TransformerDecoderLayer::run(const Array& tgt, const Array& memory, const KVCache* cache,
                                               size_t layer, const DecoderLayerArgs& args) const {
  const auto keys = dropout_keys(args.dropout_key, 6);
  KVCache next;
  auto self_attention = [&](const Array& x) {
    const AttentionArgs a{.mask = args.tgt_mask,
                          .key_padding_mask = args.tgt_key_padding_mask,
                          .causal = args.tgt_is_causal,
                          .dropout_key = keys[0]};
    Array y;
    if (cache) {
      CachedAttentionOutput out = self_attn->forward(x, x, x, *cache, layer, a);
      y = out.output;
      next = std::move(out.cache);
    } else {
      y = self_attn(x, x, x, a);
    }
    return (*dropout1)(y, keys[3]);
  };
  auto cross_attention = [&](const Array& x) {
    const AttentionArgs a{.mask = args.memory_mask,
                          .key_padding_mask = args.memory_key_padding_mask,
                          .causal = args.memory_is_causal,
                          .dropout_key = keys[1]};
    return (*dropout2)(multihead_attn(x, memory, memory, a), keys[4]);
  };
  auto feed_forward = [&](const Array& x) {
    return (*dropout3)(linear2((*dropout)(activate(options_, linear1(x)), keys[2])), keys[5]);
  };
  Array x = tgt;
  if (options_.norm_first) {
    x = x + self_attention(norm1(x));
    x = x + cross_attention(norm2(x));
    x = x + feed_forward(norm3(x));
  } else {
    x = norm1(x + self_attention(x));
    x = norm2(x + cross_attention(x));
    x = norm3(x + feed_forward(x));
  }
  return {x, std::move(next)};
}

Array TransformerDecoderLayer::operator()(const Array& tgt, const Array& memory,
                                          const DecoderLayerArgs& args) const {
  return run(tgt, memory, nullptr, 0, args).output;
}

CachedLayerOutput TransformerDecoderLayer::forward(const Array& tgt, const Array& memory,
                                                   const KVCache& cache, size_t layer,
                                                   const DecoderLayerArgs& args) const {
  return run(tgt, memory, &cache, layer, args);
}

}  // namespace kiln::nn
