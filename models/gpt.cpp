#include "kiln/models/gpt.h"

#include <cmath>
#include <limits>
#include <string>

#include "kiln/core/error.h"
#include "kiln/core/ops/attention.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/index.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/sort.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/random.h"
#include "kiln/nn/activations.h"
#include "kiln/nn/checkpoint.h"
#include "kiln/nn/init.h"
#include "kiln/nn/layers/dropout.h"
#include "pretrained/common_impl.h"

namespace kiln::models {

namespace {

constexpr const char* kName = "Gpt";
constexpr double kInf = std::numeric_limits<double>::infinity();

const GptConfig& checked(const GptConfig& c) {
  if (c.vocab_size < 1 || c.context < 1 || c.d_model < 1 || c.heads < 1 || c.layers < 1 ||
      (c.d_ff && *c.d_ff < 1))
    throw ValueError::of(kName, "sizes must be >= 1",
                         "vocab_size {}, context {}, d_model {}, heads {}, layers {}, d_ff {}", c.vocab_size,
                         c.context, c.d_model, c.heads, c.layers, c.d_ff.value_or(4 * c.d_model));
  if (c.d_model % c.heads != 0)
    throw ValueError::of(kName, "heads must divide d_model", "d_model {}, heads {}", c.d_model, c.heads);
  if (c.positions == GptPositions::rope && (c.d_model / c.heads) % 2 != 0)
    throw ValueError::of(kName, "RoPE needs an even head size (d_model / heads)", "d_model {}, heads {}",
                         c.d_model, c.heads);
  if (!(c.dropout >= 0 && c.dropout < 1))
    throw ValueError::of(kName, "dropout must be in [0, 1)", "got {}", c.dropout);
  if (!(c.rope_base > 0) || !std::isfinite(c.rope_base))
    throw ValueError::of(kName, "rope_base must be finite and > 0", "got {}", c.rope_base);
  if (!(c.layer_norm_eps > 0))
    throw ValueError::of(kName, "layer_norm_eps must be > 0", "got {}", c.layer_norm_eps);
  return c;
}

// Every weight is replaced by the model's own initialization (from config.key), so the layers are
// built with a fixed placeholder key instead of drawing from the process-wide sequence.
nn::LinearOptions linear_options(bool bias, Dtype dtype) {
  return {.bias = bias, .dtype = dtype, .key = random::key(0)};
}

nn::LayerNormOptions norm_options(const GptConfig& c) {
  return {.eps = c.layer_norm_eps, .bias = c.bias, .dtype = c.dtype};
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

GptAttention::GptAttention(int64_t d_model, bool bias, Dtype dtype)
    : c_attn(this, "c_attn", d_model, 3 * d_model, linear_options(bias, dtype)),
      c_proj(this, "c_proj", d_model, d_model, linear_options(bias, dtype)) {}

GptMlp::GptMlp(int64_t d_model, int64_t d_ff, bool bias, Dtype dtype)
    : c_fc(this, "c_fc", d_model, d_ff, linear_options(bias, dtype)),
      c_proj(this, "c_proj", d_ff, d_model, linear_options(bias, dtype)) {}

GptBlock::GptBlock(const GptConfig& c)
    : ln_1(this, "ln_1", c.d_model, norm_options(c)),
      attn(this, "attn", c.d_model, c.bias, c.dtype),
      ln_2(this, "ln_2", c.d_model, norm_options(c)),
      mlp(this, "mlp", c.d_model, c.d_ff.value_or(4 * c.d_model), c.bias, c.dtype) {}

// ---- sampling

namespace {

// The options' own checks (the key's dtype and shape are checked where it is used).
void check_sampling(const char* op, const SamplingOptions& o, int64_t vocab) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw ValueError::of(op, "temperature must be finite and >= 0 (0: greedy)", "got {}", o.temperature);
  if (o.top_k < 0 || o.top_k > vocab)
    throw ValueError::of(op, "top_k must be in [0, vocab] (0: no limit)", "got {} for vocab {}", o.top_k,
                         vocab);
  if (o.temperature > 0 && !o.key.valid())
    throw ValueError::of(
        op, "sampling needs a key",
        "temperature {}: pass .key = random::key(seed), or .temperature = 0 for greedy decoding",
        o.temperature);
}

}  // namespace

Array sample_tokens(const Array& logits, const SamplingOptions& o) {
  constexpr const char* op = "sample_tokens";
  if (!logits.valid()) throw ValueError::of(op, "logits are an empty Array");
  if (!is_floating(logits.dtype()))
    throw DtypeError::of(op, "logits must be floating point", "got {}", dtype_name(logits.dtype()));
  if (logits.ndim() == 0 || logits.shape(-1) < 1)
    throw ShapeError::of(op, "logits must be (..., vocab) with vocab >= 1", "got {}",
                         shape_str(logits.shape()));
  const int64_t vocab = logits.shape(-1);
  check_sampling(op, o, vocab);
  if (o.temperature == 0) return astype(argmax(logits, -1), int32);
  Array l = logits;
  if (o.top_k > 0 && o.top_k < vocab) {
    // Everything below the k-th largest logit becomes -inf: Gumbel-max then never picks it.
    const Array kth = min(topk(l, static_cast<int>(o.top_k), -1), -1, /*keepdims=*/true);
    l = where(l < kth, -kInf, l);
  }
  return random::categorical(l / o.temperature, o.key, -1);
}

// ---- Gpt

Gpt::Gpt(GptConfig c)
    : wte(this, "wte", checked(c).vocab_size, c.d_model,
          nn::EmbeddingOptions{.dtype = c.dtype, .key = random::key(0)}),
      wpe(this, "wpe", c.context, c.d_model, nn::EmbeddingOptions{.dtype = c.dtype, .key = random::key(0)}),
      ln_f(this, "ln_f", c.d_model, norm_options(c)),
      lm_head(this, "lm_head", c.d_model, c.vocab_size, linear_options(false, c.dtype)),
      config_(std::move(c)) {
  for (int64_t i = 0; i < config_.layers; ++i) h.emplace_back(config_);
  // Unused slots are cleared, so they are not parameters (and not in state dicts or gradients).
  if (config_.positions == GptPositions::rope) {
    wpe->weight.reset(Array());
    rope_.emplace(head_dim(), nn::RoPEOptions{.base = config_.rope_base});
  }
  if (config_.tie_embeddings) lm_head->weight.reset(Array());

  std::vector<std::pair<std::string, nn::Linear*>> linears;
  for (auto& [key, m] : named_modules())
    if (auto* l = dynamic_cast<nn::Linear*>(m); l && l->weight.has_value()) linears.emplace_back(key, l);
  const auto keys = random::split_keys(config_.key.valid() ? config_.key : random::next_key(),
                                       static_cast<int>(linears.size()) + 2);
  const Dtype t = config_.dtype;
  wte->weight = nn::init::normal(wte->weight.value().shape(), 0.0, 0.02, t, keys[0]);
  if (wpe->weight.has_value())
    wpe->weight = nn::init::normal(wpe->weight.value().shape(), 0.0, 0.02, t, keys[1]);
  // GPT-2 scales the projections that write into the residual stream by 1/sqrt(2 layers): each
  // layer adds two of them, and this keeps the stream's variance from growing with depth.
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.layers));
  for (size_t i = 0; i < linears.size(); ++i) {
    nn::Linear& l = *linears[i].second;
    const double stddev = ends_with(linears[i].first, "c_proj") ? residual_std : 0.02;
    l.weight = nn::init::normal(l.weight.value().shape(), 0.0, stddev, t, keys[i + 2]);
    if (l.bias.has_value()) l.bias = zeros(l.bias.value().shape(), t);
  }

  const auto n = static_cast<double>(config_.context);
  future_ = reshape(arange(0, n, 1, int32), {1, config_.context}) >
            reshape(arange(0, n, 1, int32), {config_.context, 1});
  future_.eval();  // shared read-only by every call (and thread) from now on
}

void Gpt::check_tokens(const Array& tokens, int64_t offset) const {
  if (!tokens.valid()) throw ValueError::of(kName, "tokens are an empty Array");
  if (!is_integral(tokens.dtype()))
    throw DtypeError::of(kName, "tokens must be integers", "got {}", dtype_name(tokens.dtype()));
  if (tokens.ndim() != 2 || tokens.shape(0) < 1 || tokens.shape(1) < 1)
    throw ShapeError::of(kName, "tokens must be (B, T) with B, T >= 1", "got {}", shape_str(tokens.shape()));
  if (offset + tokens.shape(1) > config_.context)
    throw ShapeError::of(kName, "sequence longer than the context",
                         "{} cached + {} new positions > context {}", offset, tokens.shape(1),
                         config_.context);
}

Array Gpt::attention(const GptAttention& attn, const Array& x, int64_t offset, GptCache* cache, size_t layer,
                     bool training, const Array& hidden_keys) const {
  const int64_t b = x.shape(0), t = x.shape(1), heads = config_.heads, d = head_dim();
  const double p = training ? config_.dropout : 0.0;
  // One GEMM for q, k and v, then (B, T, H * D) -> (B, H, T, D) views.
  const auto qkv = split(attn.c_attn(x), 3, -1);
  auto split_heads = [&](const Array& a) { return transpose(reshape(a, {b, t, heads, d}), {0, 2, 1, 3}); };
  Array q = split_heads(qkv[0]), k = split_heads(qkv[1]), v = split_heads(qkv[2]);
  if (rope_) {
    q = (*rope_)(q, offset);
    k = (*rope_)(k, offset);
  }
  if (cache) {
    const nn::KVCache::Entry seen = cache->append(layer, k, v, config_.context);
    k = seen.keys;
    v = seen.values;
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  if (p == 0) {
    // One fused node (core/ops/attention.h): query i (absolute position offset + i) sees keys
    // 0..offset + i, which is its causal rule with Lk = offset + t keys.
    const Array out = scaled_dot_product_attention(q, k, v, scale, /*causal=*/true, hidden_keys);
    return attn.c_proj(reshape(transpose(out, {0, 2, 1, 3}), {b, t, config_.d_model}));
  }
  const int64_t len = k.shape(2);
  // The scale goes on q, the smaller operand: (B, H, T, D) against the (B, H, T, L) scores.
  Array scores = matmul(q * scale, swapaxes(k, -1, -2));
  // Query i (absolute position offset + i) sees keys 0..offset + i; one new query sees them all.
  if (t > 1) scores = where(slice(future_, {Slice{offset, offset + t}, Slice{0, len}}), -kInf, scores);
  if (hidden_keys.valid()) scores = where(hidden_keys, -kInf, scores);
  Array weights = softmax(scores, -1);
  if (p > 0) weights = nn::dropout(weights, p);
  Array out = attn.c_proj(reshape(transpose(matmul(weights, v), {0, 2, 1, 3}), {b, t, config_.d_model}));
  return p > 0 ? nn::dropout(out, p) : out;
}

Array Gpt::hidden(const Array& tokens, GptCache* cache, bool training, const Array& attention_mask) const {
  const int64_t offset = cache ? cache->length() : 0;
  check_tokens(tokens, offset);
  const int64_t b = tokens.shape(0), t = tokens.shape(1);
  if (cache && !cache->empty() && cache->batch() != b)
    throw ShapeError::of(kName, "batch differs from the cache's", "cache batch {}, tokens {}", cache->batch(),
                         shape_str(tokens.shape()));
  const double p = training ? config_.dropout : 0.0;
  models::detail::PaddedPositions padded;
  if (attention_mask.valid()) {
    if (rope_)
      throw NotImplemented::of(kName, "padded batches with rotary positions are not supported",
                               "RoPE takes one offset for every row");
    padded = models::detail::padded_positions(kName, attention_mask, b, offset, t);
  }

  Array x = wte(tokens);
  if (wpe->weight.has_value())  // through the layer, which may be quantized
    x = x + wpe(padded.positions.valid()
                    ? padded.positions
                    : arange(static_cast<double>(offset), static_cast<double>(offset + t), 1.0, int32));
  if (p > 0) x = nn::dropout(x, p);
  const bool recompute = gradient_checkpointing_ && training && !cache;
  for (size_t i = 0; i < h.size(); ++i) {
    if (!recompute) {
      x = block(i, x, offset, cache, training, padded.hidden);
      continue;
    }
    // The function outlives this call (the backward pass runs it): it holds values, not references.
    // nn::checkpoint swaps traced values into the block's slots while it runs and puts them back.
    auto& module = const_cast<GptBlock&>(h[i]);
    x = nn::checkpoint(
        module,
        [this, i, offset, training, hidden = padded.hidden](const Array& in) {
          return block(i, in, offset, nullptr, training, hidden);
        },
        x);
  }
  x = ln_f(x);
  if (cache) cache->commit(t, b);
  return x;
}

Array Gpt::block(size_t i, const Array& x, int64_t offset, GptCache* cache, bool training,
                 const Array& hidden_keys) const {
  const GptBlock& b = h[i];
  const double p = training ? config_.dropout : 0.0;
  const Array y = x + attention(*b.attn, b.ln_1(x), offset, cache, i, training, hidden_keys);
  const Array hidden_ff = b.mlp->c_fc(b.ln_2(y));
  const Array m = b.mlp->c_proj(config_.activation == GptActivation::gelu_tanh ? nn::gelu_tanh(hidden_ff)
                                                                               : nn::gelu(hidden_ff));
  return y + (p > 0 ? nn::dropout(m, p) : m);
}

Array Gpt::logits(const Array& hidden) const {
  return config_.tie_embeddings ? wte->as_linear(hidden) : lm_head(hidden);
}

Array Gpt::forward(const Array& tokens) const { return logits(hidden(tokens, nullptr, is_training())); }

Array Gpt::forward(const Array& tokens, GptCache& cache) const {
  return logits(hidden(tokens, &cache, is_training()));
}

Array Gpt::forward(const Array& tokens, GptCache& cache, const Array& attention_mask) const {
  return logits(hidden(tokens, &cache, is_training(), attention_mask));
}

Array Gpt::generate(const Array& prompt, int64_t max_new_tokens, const SamplingOptions& options) const {
  if (!prompt.valid()) throw ValueError::of(kName, "the prompt is an empty Array");
  const bool unbatched = prompt.ndim() == 1;
  const Array tokens = unbatched ? expand_dims(prompt, 0) : prompt;
  check_tokens(tokens, 0);
  if (max_new_tokens < 0)
    throw ValueError::of(kName, "max_new_tokens must be >= 0", "got {}", max_new_tokens);
  const int64_t b = tokens.shape(0), t0 = tokens.shape(1);
  if (t0 + max_new_tokens > config_.context)
    throw ValueError::of(kName, "prompt and new tokens exceed the context",
                         "{} prompt + {} new tokens > context {}", t0, max_new_tokens, config_.context);
  // The options (and the key's dtype and shape, by split_keys) are checked before any work, also
  // when max_new_tokens is 0.
  check_sampling(kName, options, config_.vocab_size);
  std::vector<Array> keys;
  if (options.temperature > 0) keys = random::split_keys(options.key, static_cast<int>(max_new_tokens));
  std::vector<Array> pieces{astype(tokens, int32)};
  GptCache cache;
  Array input = tokens;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const Array x = hidden(input, &cache, /*training=*/false);
    // Only the last position's logits are needed: the head runs on one row per sequence.
    const Array last =
        logits(reshape(slice(x, {Slice{}, Slice{x.shape(1) - 1, x.shape(1)}}), {b, config_.d_model}));
    SamplingOptions step = options;
    if (!keys.empty()) step.key = keys[i];
    input = reshape(sample_tokens(last, step), {b, 1});
    pieces.push_back(input);
    // One evaluation per token keeps the graph (and the cache's) from growing with the sequence.
    std::vector<Array> ready = cache.storage();
    ready.push_back(input);
    eval(ready);
  }
  const Array out = concatenate(pieces, 1);
  return unbatched ? reshape(out, {t0 + max_new_tokens}) : out;
}

}  // namespace kiln::models
