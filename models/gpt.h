#pragma once
// A decoder-only transformer language model (GPT-2 style, as nanoGPT): token embedding plus learned
// position embedding (or rotary positions inside attention), pre-norm blocks of causal
// self-attention and a GELU MLP, a final LayerNorm and a linear head to vocabulary logits.
//
// Keys are nanoGPT's without its "transformer." prefix, so a nanoGPT state dict loads after
// stripping it: wte.weight, wpe.weight (learned positions only), h.<i>.ln_1.{weight, bias},
// h.<i>.attn.c_attn.{weight, bias} (q, k, v stacked: (3 d_model, d_model)), h.<i>.attn.c_proj.*,
// h.<i>.ln_2.*, h.<i>.mlp.c_fc.*, h.<i>.mlp.c_proj.*, ln_f.*, lm_head.weight (absent when the
// embeddings are tied; the head has no bias). Biases (linear layers and LayerNorms) only with
// config.bias.
//
//   models::Gpt gpt({.vocab_size = 65, .context = 128, .d_model = 256, .heads = 4, .layers = 4});
//   Array logits = gpt(tokens);                                  // (B, T) int -> (B, T, vocab)
//   Array text = gpt.generate(prompt, 100, {.temperature = 0.8, .top_k = 10, .key = random::key(1)});
#include <optional>
#include <vector>

#include "kiln/nn/layers/attention.h"
#include "kiln/nn/layers/embedding.h"
#include "kiln/nn/layers/linear.h"
#include "kiln/nn/layers/norm.h"
#include "kiln/nn/layers/rope.h"
#include "kiln/nn/module.h"

namespace kiln::models {

/// The MLP's nonlinearity.
enum class GptActivation {
  gelu,      // exact GELU (nanoGPT)
  gelu_tanh  // the tanh approximation (OpenAI's GPT-2: "gelu_new" in its config)
};

enum class GptPositions {
  learned,  // a learned (context, d_model) table added to the token embeddings (GPT-2)
  rope      // rotary embedding of queries and keys in every attention layer (RoFormer, LLaMA)
};

struct GptConfig {
  int64_t vocab_size = 256;
  int64_t context = 128;  // the longest sequence (cached positions included)
  int64_t d_model = 256;
  int64_t heads = 4;                           // must divide d_model; with RoPE, d_model / heads must be even
  int64_t layers = 4;                          // transformer blocks
  std::optional<int64_t> d_ff = std::nullopt;  // MLP hidden width; 4 * d_model when unset
  double dropout = 0.0;  // embeddings, attention weights and both residual branches; training only
  GptPositions positions = GptPositions::learned;
  GptActivation activation = GptActivation::gelu;
  double rope_base = 10000.0;
  bool bias = true;             // biases of the linear layers and LayerNorms
  bool tie_embeddings = false;  // the head reuses wte.weight (GPT-2); no lm_head.weight then
  double layer_norm_eps = 1e-5;
  Dtype dtype = float32;
  Array key = Array();  // initialization key; random::next_key() when empty
};

/// Causal self-attention's parameters: c_attn projects to q, k, v at once, c_proj back.
class GptAttention : public nn::Module {
 public:
  GptAttention(int64_t d_model, bool bias, Dtype dtype);
  nn::ModuleInfo<nn::Linear> c_attn;  // d_model -> 3 d_model
  nn::ModuleInfo<nn::Linear> c_proj;  // d_model -> d_model
};

/// The feed-forward block's parameters: c_fc, GELU, c_proj.
class GptMlp : public nn::Module {
 public:
  GptMlp(int64_t d_model, int64_t d_ff, bool bias, Dtype dtype);
  nn::ModuleInfo<nn::Linear> c_fc;    // d_model -> d_ff
  nn::ModuleInfo<nn::Linear> c_proj;  // d_ff -> d_model
};

/// One pre-norm block's parameters: x + attn(ln_1(x)), then x + mlp(ln_2(x)). Gpt runs it.
class GptBlock : public nn::Module {
 public:
  explicit GptBlock(const GptConfig& config);
  nn::ModuleInfo<nn::LayerNorm> ln_1;
  nn::ModuleInfo<GptAttention> attn;
  nn::ModuleInfo<nn::LayerNorm> ln_2;
  nn::ModuleInfo<GptMlp> mlp;
};

/// The keys and values of the positions a Gpt has seen, one entry per layer, for incremental
/// decoding. This is per-request mutable state: one cache per sequence batch, never shared by
/// concurrent calls (hold it in a kiln::Exclusive<GptCache> when serving from several threads;
/// the model itself is const and may be shared). Copying copies Array handles, not data.
///
/// Each layer's keys and values live in storage of `capacity()` positions that a step writes in
/// place (slice_update, which donates the buffer on the CPU and the GPU when nothing else holds
/// it): a decode step costs the same at position 10 and at position 1000. The storage starts at
/// the first step's length (at least kMinCapacity) and doubles when full, up to the model's
/// position limit, so n steps copy O(n) positions in all. Evaluate storage() with each step's
/// output (models::generate does); a storage array that an unevaluated graph still reads is
/// copied instead, which is correct but no longer in place.
class GptCache {
 public:
  /// The smallest storage, in positions.
  static constexpr int64_t kMinCapacity = 64;

  /// Positions cached so far (0 for a new cache).
  int64_t length() const { return length_; }
  /// The batch size the cache was started with (0 while empty).
  int64_t batch() const { return batch_; }
  bool empty() const { return length_ == 0; }
  /// Positions the storage holds before it grows (0 while nothing was appended).
  int64_t capacity() const;
  /// Forgets every position (and the storage).
  void clear() { *this = GptCache(); }
  /// Keys and values of each layer, (B, kv heads, length, head_dim), RoPE already applied to the
  /// keys: views of the storage.
  std::vector<nn::KVCache::Entry> layers() const;
  /// The arrays holding the keys and values, two per layer, (B, kv heads, capacity, head_dim).
  std::vector<Array> storage() const;

  /// For the models that keep their keys and values here (models::Gpt, models::LlamaForCausalLM):
  /// writes layer `layer`'s `keys` and `values` (B, H, t, D) at positions length()..length()+t-1,
  /// growing its storage (to at most max(limit, length() + t) positions; limit 0: no limit) when
  /// full, and returns views of positions 0..length()+t-1. The new positions count once commit(t,
  /// B) is called after every layer's append: a forward that throws half-way leaves the cache as
  /// it was. Throws ShapeError when keys and values are not 4-d of one shape, or their batch,
  /// heads or head_dim differ from what the layer holds.
  nn::KVCache::Entry append(size_t layer, const Array& keys, const Array& values, int64_t limit);
  /// Counts the `t` positions each layer's append wrote; `batch` is the rows they hold.
  void commit(int64_t t, int64_t batch);

 private:
  std::vector<nn::KVCache::Entry> storage_;  // (B, H, capacity, D) per layer
  int64_t length_ = 0, batch_ = 0;
};

/// How generate picks each next token.
struct SamplingOptions {
  /// Logits are divided by it before sampling; 0 picks the most likely token (greedy, argmax:
  /// the first one on ties) and needs no key.
  double temperature = 1.0;
  /// Sample only among the top_k most likely tokens (ties with the k-th largest logit are kept);
  /// 0 keeps all of them.
  int64_t top_k = 0;
  /// Required when temperature > 0; generate splits it into one key per step, so equal keys give
  /// equal samples.
  Array key = Array();
};

/// Picks one token per row of `logits` (..., vocab) as `options` say; returns int32 (...).
/// Throws ValueError for a negative or non-finite temperature, top_k < 0 or > vocab, or a missing
/// key when temperature > 0; DtypeError for non-float logits; ShapeError for 0-d logits.
Array sample_tokens(const Array& logits, const SamplingOptions& options);

class Gpt : public nn::Module {
 public:
  /// GPT-2's initialization: linear and embedding weights normal(0, 0.02), the residual
  /// projections' (c_proj) normal(0, 0.02 / sqrt(2 layers)), biases 0, LayerNorms 1 and 0.
  /// Throws ValueError for a size < 1, heads not dividing d_model, an odd head size with RoPE,
  /// dropout outside [0, 1), rope_base <= 0 or layer_norm_eps <= 0.
  explicit Gpt(GptConfig config = {});

  /// tokens (B, T) of an integer dtype -> logits (B, T, vocab_size): position t sees tokens 0..t.
  /// Dropout applies in training mode (masks from random::next_key()). Throws DtypeError for
  /// non-integer tokens, ShapeError for another rank, T = 0 or T > context; a token outside
  /// [0, vocab_size) is a ValueError from this call when tokens are evaluated, else from eval.
  Array forward(const Array& tokens) const;
  Array operator()(const Array& tokens) const { return forward(tokens); }
  /// Incremental decoding: tokens (B, T) are the next T positions after those in `cache`; returns
  /// their logits (B, T, vocab_size), equal to the matching rows of forward() over the whole
  /// sequence, and appends their keys and values to `cache`. Throws as forward(), and ShapeError
  /// when cache.length() + T > context or B differs from the cache's batch; the cache is changed
  /// only when the call succeeds.
  Array forward(const Array& tokens, GptCache& cache) const;
  /// The same for padded batches: attention_mask (B, cache.length() + T), nonzero for real tokens
  /// (empty: none), covers the cached and the new positions; learned positions count real tokens
  /// only and padding is never attended (as transformers' generate), so a left-padded row's logits
  /// equal its unpadded sequence's. Throws ShapeError for a mask of another shape, DtypeError for a
  /// float mask, NotImplemented with rotary positions.
  Array forward(const Array& tokens, GptCache& cache, const Array& attention_mask) const;

  /// The prompt (B, T0) or (T0) followed by max_new_tokens sampled tokens: (B, T0 + max_new_tokens)
  /// or (T0 + max_new_tokens), int32. Decodes with a KV cache, evaluating once per token, and never
  /// applies dropout. Throws ValueError for max_new_tokens < 0 or T0 + max_new_tokens > context,
  /// what sample_tokens throws for bad options, and what forward throws for a bad prompt.
  Array generate(const Array& prompt, int64_t max_new_tokens, const SamplingOptions& options = {}) const;

  /// In training mode, forward(tokens) runs each block through nn::checkpoint: the backward pass
  /// recomputes a block instead of keeping its activations (CausalLM::set_gradient_checkpointing).
  void set_gradient_checkpointing(bool on) { gradient_checkpointing_ = on; }
  bool gradient_checkpointing() const { return gradient_checkpointing_; }

  const GptConfig& config() const { return config_; }
  int64_t head_dim() const { return config_.d_model / config_.heads; }
  int64_t d_ff() const { return config_.d_ff.value_or(4 * config_.d_model); }

  nn::ModuleInfo<nn::Embedding> wte;  // (vocab_size, d_model)
  nn::ModuleInfo<nn::Embedding> wpe;  // (context, d_model); holds no weight with RoPE
  nn::ModuleList<GptBlock> h{this, "h"};
  nn::ModuleInfo<nn::LayerNorm> ln_f;
  nn::ModuleInfo<nn::Linear> lm_head;  // d_model -> vocab_size, no bias; holds no weight when tied

 private:
  Array hidden(const Array& tokens, GptCache* cache, bool training,
               const Array& attention_mask = Array()) const;
  Array logits(const Array& hidden) const;
  Array attention(const GptAttention& attn, const Array& x, int64_t offset, GptCache* cache, size_t layer,
                  bool training, const Array& hidden_keys) const;
  // One block: x plus its attention and MLP branches.
  Array block(size_t i, const Array& x, int64_t offset, GptCache* cache, bool training,
              const Array& hidden_keys) const;
  void check_tokens(const Array& tokens, int64_t offset) const;

  GptConfig config_;
  std::optional<nn::RoPE> rope_;  // only with RoPE positions
  Array future_;                  // (context, context) bool, true where key position > query position
  bool gradient_checkpointing_ = false;
};

}  // namespace kiln::models
