#pragma once
// The Llama family as transformers' LlamaForCausalLM, which also serves Mistral and Qwen2 by their
// configs: pre-norm blocks of RMSNorm, grouped-query attention with rotary positions (the
// rotate-half layout these checkpoints assume: features i and i + head_dim/2 form a pair), and a
// SwiGLU MLP (down(silu(gate(x)) * up(x))); tied or separate embeddings. Keys are the checkpoint's
// (`model.embed_tokens.weight`, `model.layers.N.self_attn.q_proj.weight`, `model.norm.weight`,
// `lm_head.weight`).
//
// Per family: Llama may have biases on all four attention projections (`attention_bias`) and on
// the MLP (`mlp_bias`), and Llama 3's `rope_scaling` (rope_type llama3) or linear scaling; Mistral
// limits attention to `sliding_window` past positions; Qwen2 has q, k and v biases.
//
//   auto lm = models::LlamaForCausalLM::from_pretrained("TinyLlama-1.1B", {.dtype = bfloat16});
//   models::GptCache cache;
//   Array logits = lm->forward(prompt, cache);          // then one token at a time
#include <optional>
#include <vector>

#include "kiln/models/pretrained/pretrained.h"
#include "kiln/nn/layers/embedding.h"
#include "kiln/nn/layers/linear.h"
#include "kiln/nn/layers/norm.h"

namespace kiln::models {

/// How rotary frequencies are scaled for contexts past the pretraining length.
struct RopeScaling {
  enum class Type { none, linear, llama3 };
  Type type = Type::none;
  double factor = 1.0;  // linear: positions / factor; llama3: the low-frequency divisor
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct LlamaConfig {
  std::string model_type = "llama";  // "llama", "mistral" or "qwen2"
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;  // < num_attention_heads: grouped-query attention
  int64_t head_dim = 0;              // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling = {};
  bool attention_bias = false;  // biases on q, k, v and o (Llama)
  bool qkv_bias = false;        // biases on q, k and v only (Qwen2)
  bool mlp_bias = false;
  bool tie_word_embeddings = false;
  std::optional<int64_t> sliding_window =
      std::nullopt;  // a query sees this many positions (its own included)
  double attention_dropout = 0.0;
  Dtype dtype = float32;
  HfConfig hf = {};  // the config.json read, kept for saving

  /// Reads the fields above from a llama, mistral or qwen2 config.json. Throws NotImplemented for
  /// another model_type, a hidden_act other than silu, a rope_scaling type other than default,
  /// linear and llama3, or Qwen2's use_sliding_window; ValueError for inconsistent sizes;
  /// FormatError for missing or mistyped fields.
  static LlamaConfig from_hf(const HfConfig& config, Dtype dtype = float32, const LoadOptions& options = {});
  int64_t resolved_head_dim() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
};

class LlamaAttention : public nn::Module {
 public:
  explicit LlamaAttention(const LlamaConfig& c);
  nn::ModuleInfo<nn::Linear> q_proj, k_proj, v_proj, o_proj;
};

class LlamaMlp : public nn::Module {
 public:
  explicit LlamaMlp(const LlamaConfig& c);
  nn::ModuleInfo<nn::Linear> gate_proj, up_proj, down_proj;
};

class LlamaDecoderLayer : public nn::Module {
 public:
  explicit LlamaDecoderLayer(const LlamaConfig& c);
  nn::ModuleInfo<LlamaAttention> self_attn;
  nn::ModuleInfo<LlamaMlp> mlp;
  nn::ModuleInfo<nn::RMSNorm> input_layernorm, post_attention_layernorm;
};

/// The decoder stack (`model.` in the checkpoint): embeddings, layers, final norm.
class LlamaModel : public nn::Module {
 public:
  explicit LlamaModel(const LlamaConfig& c);
  nn::ModuleInfo<nn::Embedding> embed_tokens;
  nn::ModuleList<LlamaDecoderLayer> layers{this, "layers"};
  nn::ModuleInfo<nn::RMSNorm> norm;
};

class LlamaForCausalLM : public CausalLM {
 public:
  using Config = LlamaConfig;
  /// Throws ValueError for sizes < 1, num_key_value_heads not dividing num_attention_heads, an odd
  /// head_dim, rope_theta <= 0 or a scaling factor <= 0.
  explicit LlamaForCausalLM(LlamaConfig config);
  static std::unique_ptr<LlamaForCausalLM> from_pretrained(const std::filesystem::path& dir,
                                                           const LoadOptions& options = {});

  /// tokens (B, T) integers -> logits (B, T, vocab). Throws DtypeError for non-integer tokens,
  /// ShapeError for another rank or past max_position_embeddings (cached positions included).
  Array forward(const Array& tokens) const override;
  Array forward(const Array& tokens, GptCache& cache) const override;
  Array forward(const Array& tokens, GptCache& cache, const Array& attention_mask) const override;
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_positions() const override { return config_.max_position_embeddings; }

  std::string model_type() const override { return config_.model_type; }
  HfConfig hf_config() const override;
  nn::ParamTree from_checkpoint(const nn::ParamTree& tensors, LoadReport& report) const override;
  nn::ParamTree to_checkpoint() const override { return parameters(); }
  const LlamaConfig& config() const { return config_; }

  nn::ModuleInfo<LlamaModel> model;
  nn::ModuleInfo<nn::Linear> lm_head;  // holds no weight when tied

 private:
  Array run(const Array& tokens, GptCache* cache, const Array& attention_mask) const;

  LlamaConfig config_;
  Array inv_freq_;  // (1, head_dim / 2) float32 rotary frequencies, scaled; evaluated once, shared
};

}  // namespace kiln::models
