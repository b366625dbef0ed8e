#pragma once
// Pretrained models as the Hugging Face Hub publishes them: a folder with config.json and
// model.safetensors (or shards listed by model.safetensors.index.json). Keys are the checkpoint's
// own ("model.layers.3.self_attn.q_proj.weight"), so a folder loads with every key checked and
// saves back to one that transformers loads.
//
//   auto lm = models::causal_lm_from_pretrained("TinyLlama");        // config.json picks the class
//   Array logits = lm->forward(tokens);                               // (B, T) -> (B, T, vocab)
//   auto bert = models::BertForSequenceClassification::from_pretrained("bert", {.num_labels = 3});
//   models::save_pretrained(*lm, "out");                              // config.json + weights
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/models/gpt.h"
#include "kiln/models/pretrained/hf_config.h"
#include "kiln/nn/module.h"

namespace kiln::models {

struct LoadOptions {
  /// The dtype of the floating-point weights (and of the computation); the checkpoint's when unset.
  std::optional<Dtype> dtype = std::nullopt;
  /// Labels of a classification head (BertForSequenceClassification); the config's when unset.
  std::optional<int64_t> num_labels = std::nullopt;
};

/// What loading a checkpoint did beyond assigning every parameter.
struct LoadReport {
  /// Parameters the checkpoint lacked that the model may start fresh (a classification head on a
  /// base model, as transformers does): they keep their initialization.
  std::vector<std::string> initialized;
  /// Checkpoint tensors left out: buffers (GPT-2's attn.bias masks, rotary inv_freq tables) and the
  /// heads of other tasks (BERT's cls.*).
  std::vector<std::string> ignored;
};

/// A model read from (and written to) a Hugging Face folder.
class PretrainedModel : public nn::Module {
 public:
  /// config.json's `model_type` ("gpt2", "llama", "mistral", "qwen2", "bert").
  virtual std::string model_type() const = 0;
  /// The config.json this model saves: the one it was read from (unknown fields kept), with the
  /// fields kiln uses written from the model.
  virtual HfConfig hf_config() const = 0;
  /// The checkpoint's tensors as this model's parameters (renamed, transposed where the layouts
  /// differ); `report` lists what was left out. Throws KeyError for a tensor the model cannot place.
  virtual nn::ParamTree from_checkpoint(const nn::ParamTree& tensors, LoadReport& report) const = 0;
  /// The parameters as the checkpoint family stores them (the inverse of from_checkpoint).
  virtual nn::ParamTree to_checkpoint() const = 0;
  /// Key prefixes of parameters a checkpoint may lack (left at their initialization).
  virtual std::vector<std::string> optional_keys() const { return {}; }

  /// What the last load_checkpoint (or from_pretrained) did.
  const LoadReport& load_report() const { return report_; }

  /// Assigns a checkpoint's tensors (as io::load_safetensors gives them): every parameter must be
  /// there (but optional_keys()) and every tensor must have a place, with its shape; floating-point
  /// tensors are converted to the model's dtype. Throws KeyError naming missing and unexpected keys,
  /// ShapeError naming the keys of wrong shapes; the model is unchanged then.
  void load_checkpoint(const nn::ParamTree& tensors);

  /// The dtype of the floating-point parameters.
  Dtype dtype() const;

 private:
  LoadReport report_;
};

/// A model that predicts the next token. forward(tokens, cache) is incremental decoding: the
/// tokens are the next positions after those in `cache`, whose keys and values grow; the result
/// equals the matching rows of forward() over the whole sequence.
class CausalLM : public PretrainedModel {
 public:
  /// tokens (B, T) integers -> logits (B, T, vocab_size()).
  virtual Array forward(const Array& tokens) const = 0;
  virtual Array forward(const Array& tokens, GptCache& cache) const = 0;
  /// The same for padded batches: attention_mask (B, cache.length() + T), nonzero for real tokens,
  /// covers the cached positions and the new ones (with left padding a prompt's pads come first).
  /// Positions count real tokens only, and padding is never attended, as transformers' generate
  /// does it: a row's logits equal those of its unpadded sequence. Throws ShapeError for a mask of
  /// another shape, DtypeError for a float mask.
  virtual Array forward(const Array& tokens, GptCache& cache, const Array& attention_mask) const = 0;
  Array operator()(const Array& tokens) const { return forward(tokens); }
  virtual int64_t vocab_size() const = 0;
  /// The longest sequence (cached positions included) the model accepts.
  virtual int64_t max_positions() const = 0;

  /// Gradient checkpointing (transformers' gradient_checkpointing_enable): in training mode,
  /// forward(tokens) keeps only each decoder layer's input and output in the graph and runs the
  /// layer again in the backward pass (nn::checkpoint): a second forward in exchange for the
  /// activation memory of all layers but one. Gradients are the same; dropout draws repeat.
  virtual void set_gradient_checkpointing(bool on) { gradient_checkpointing_ = on; }
  bool gradient_checkpointing() const { return gradient_checkpointing_; }

 private:
  bool gradient_checkpointing_ = false;
};

/// The folder's config.json and weights (model.safetensors, or the shards of
/// model.safetensors.index.json), mapped, not yet assigned.
struct PretrainedFiles {
  HfConfig config;
  nn::ParamTree tensors;
  Dtype dtype = float32;  // of the first floating-point tensor (float32 when none)
};
/// Throws RuntimeError naming the folder when it has no config.json or no safetensors weights
/// (a pytorch_model.bin alone is named: convert it first), and what HfConfig::read and
/// io::load_safetensors throw for malformed files.
PretrainedFiles read_pretrained(const std::filesystem::path& dir);

/// Builds the class config.json names (`architectures`, else `model_type`) and loads the weights,
/// in evaluation mode (no dropout; call train() to fine-tune), as transformers does:
/// GPT2LMHeadModel (gpt2), LlamaForCausalLM (llama, mistral, qwen2), BertModel or
/// BertForSequenceClassification (bert). Throws NotImplemented naming the model_type or
/// architecture kiln lacks, or an option of the config it cannot honour (an activation, a rope
/// type), and what read_pretrained and load_checkpoint throw.
std::unique_ptr<PretrainedModel> from_pretrained(const std::filesystem::path& dir,
                                                 const LoadOptions& options = {});
/// from_pretrained for a causal LM; throws ValueError naming the class when the folder holds another
/// kind of model.
std::unique_ptr<CausalLM> causal_lm_from_pretrained(const std::filesystem::path& dir,
                                                    const LoadOptions& options = {});

/// Writes config.json and model.safetensors (or, past max_shard_bytes, shards and
/// model.safetensors.index.json) to `dir` (created if missing), in the checkpoint's layout, with
/// the `format: pt` metadata transformers expects. A model quantized by nn::quantize is written as
/// MLX writes one (its "quantization" entry in config.json). Throws what io::save_safetensors
/// throws, and NotImplemented for a quantized GPT-2 or layers quantized with different options.
void save_pretrained(const PretrainedModel& model, const std::filesystem::path& dir,
                     int64_t max_shard_bytes = int64_t{5} << 30);

namespace detail {
/// A folder quantized as MLX writes it (config.json's "quantization": {"group_size", "bits"}):
/// quantizes each Linear and Embedding of `model` whose "<key>.scales" the files hold, so that the
/// packed weights load. No-op without that entry. Throws FormatError naming config.json for bits
/// or a group size kiln lacks, or when the weights hold no scales; NotImplemented for GPT-2, whose
/// Conv1D weights are stored transposed.
void quantize_as_checkpoint(PretrainedModel& model, const PretrainedFiles& files);

/// The common part of every class's from_pretrained: builds M from its config read with
/// `M::Config::from_hf(config, dtype, options)` and loads the weights.
template <class M>
std::unique_ptr<M> load_pretrained(const std::filesystem::path& dir, const LoadOptions& options) {
  PretrainedFiles files = read_pretrained(dir);
  auto model =
      std::make_unique<M>(M::Config::from_hf(files.config, options.dtype.value_or(files.dtype), options));
  quantize_as_checkpoint(*model, files);
  model->load_checkpoint(files.tensors);
  model->eval_mode();  // as transformers' from_pretrained: train() before fine-tuning
  return model;
}
}  // namespace detail

}  // namespace kiln::models
