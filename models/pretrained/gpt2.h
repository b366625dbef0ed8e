#pragma once
// OpenAI's GPT-2 as transformers' GPT2LMHeadModel: a models::Gpt (learned positions, tanh GELU,
// tied embeddings) under `transformer.`, read from and written to the checkpoint's layout. GPT-2's
// Conv1D stores weights as (in, out), a Linear's transpose: they are transposed on load (a view)
// and back on save. The attention masks some checkpoints carry (`h.N.attn.bias`,
// `attn.masked_bias`) are buffers, left out; files saved without the `transformer.` prefix (the
// Hub's gpt2) load too.
//
//   auto gpt2 = models::Gpt2LMHeadModel::from_pretrained("gpt2");
//   Array logits = gpt2->forward(tokens);
#include "kiln/models/gpt.h"
#include "kiln/models/pretrained/pretrained.h"

namespace kiln::models {

struct Gpt2Config {
  GptConfig gpt;
  HfConfig hf;  // the config.json read, kept for saving
  /// Reads n_embd, n_layer, n_head, n_positions, vocab_size, n_inner, layer_norm_epsilon,
  /// activation_function (gelu_new, gelu_pytorch_tanh or gelu), the dropouts and
  /// tie_word_embeddings. Throws NotImplemented for another activation, different embedding,
  /// attention and residual dropouts, scale_attn_weights false, scale_attn_by_inverse_layer_idx or
  /// reorder_and_upcast_attn; FormatError for missing or mistyped fields.
  static Gpt2Config from_hf(const HfConfig& config, Dtype dtype = float32, const LoadOptions& options = {});
  /// The config.json of a Gpt config (for a model built in kiln).
  static Gpt2Config from_gpt(const GptConfig& gpt);
};

class Gpt2LMHeadModel : public CausalLM {
 public:
  using Config = Gpt2Config;
  explicit Gpt2LMHeadModel(Gpt2Config config);
  /// Reads `dir` (config.json, model.safetensors); see models::from_pretrained.
  static std::unique_ptr<Gpt2LMHeadModel> from_pretrained(const std::filesystem::path& dir,
                                                          const LoadOptions& options = {});

  Array forward(const Array& tokens) const override { return transformer->forward(tokens); }
  Array forward(const Array& tokens, GptCache& cache) const override {
    return transformer->forward(tokens, cache);
  }
  Array forward(const Array& tokens, GptCache& cache, const Array& attention_mask) const override {
    return transformer->forward(tokens, cache, attention_mask);
  }
  int64_t vocab_size() const override { return config_.gpt.vocab_size; }
  int64_t max_positions() const override { return config_.gpt.context; }
  void set_gradient_checkpointing(bool on) override {
    CausalLM::set_gradient_checkpointing(on);
    transformer->set_gradient_checkpointing(on);
  }

  std::string model_type() const override { return "gpt2"; }
  HfConfig hf_config() const override;
  nn::ParamTree from_checkpoint(const nn::ParamTree& tensors, LoadReport& report) const override;
  nn::ParamTree to_checkpoint() const override;
  const Gpt2Config& config() const { return config_; }

  nn::ModuleInfo<Gpt> transformer;

 private:
  Gpt2Config config_;
};

}  // namespace kiln::models
