#pragma once
// A BERT encoder as transformers' BertModel and BertForSequenceClassification: word, position and
// token-type embeddings with a LayerNorm, post-norm encoder layers (self-attention, GELU MLP),
// and a tanh pooler over the first token. Keys are the checkpoint's (`embeddings.word_embeddings.weight`,
// `encoder.layer.N.attention.self.query.weight`, `pooler.dense.weight`; `bert.` in front and
// `classifier.*` for the classifier). A pretraining checkpoint (`bert.*`, `cls.*`) loads into
// either class: the prefix is matched and the other heads are left out; a classifier (and a
// pooler) the checkpoint lacks starts fresh, as transformers does, and load_report() names it.
//
//   auto clf = models::BertForSequenceClassification::from_pretrained("bert-base", {.num_labels = 2});
//   Array logits = clf->forward(input_ids, attention_mask);          // (B, T) -> (B, 2)
#include "kiln/models/pretrained/pretrained.h"
#include "kiln/nn/layers/embedding.h"
#include "kiln/nn/layers/linear.h"
#include "kiln/nn/layers/norm.h"

namespace kiln::models {

enum class BertActivation { gelu, gelu_tanh, relu };

struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  BertActivation hidden_act = BertActivation::gelu;
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  std::optional<double> classifier_dropout = std::nullopt;  // hidden_dropout_prob when unset
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  int64_t num_labels = 2;
  Dtype dtype = float32;
  HfConfig hf = {};  // the config.json read, kept for saving

  /// Throws NotImplemented for a hidden_act other than gelu, gelu_new, gelu_pytorch_tanh and relu,
  /// a position_embedding_type other than absolute, or is_decoder; FormatError for missing or
  /// mistyped fields. num_labels: options.num_labels, else the config's (or its id2label's size).
  static BertConfig from_hf(const HfConfig& config, Dtype dtype = float32, const LoadOptions& options = {});
};

/// The encoder's outputs.
struct BertOutput {
  Array last_hidden_state;  // (B, T, hidden)
  Array pooler_output;      // (B, hidden): tanh(dense(first token))
};

class BertEmbeddings : public nn::Module {
 public:
  explicit BertEmbeddings(const BertConfig& c);
  nn::ModuleInfo<nn::Embedding> word_embeddings, position_embeddings, token_type_embeddings;
  nn::ModuleInfo<nn::LayerNorm> LayerNorm;  // NOLINT: the checkpoint's key
};

class BertSelfAttention : public nn::Module {
 public:
  explicit BertSelfAttention(const BertConfig& c);
  nn::ModuleInfo<nn::Linear> query, key, value;
};

/// A dense layer, then dropout and LayerNorm around the residual (`attention.output`, `output`).
class BertResidualOutput : public nn::Module {
 public:
  BertResidualOutput(int64_t in, const BertConfig& c);
  nn::ModuleInfo<nn::Linear> dense;
  nn::ModuleInfo<nn::LayerNorm> LayerNorm;  // NOLINT: the checkpoint's key
};

class BertAttention : public nn::Module {
 public:
  explicit BertAttention(const BertConfig& c);
  nn::ModuleInfo<BertSelfAttention> self;
  nn::ModuleInfo<BertResidualOutput> output;
};

class BertDense : public nn::Module {
 public:
  BertDense(int64_t in, int64_t out, Dtype dtype);
  nn::ModuleInfo<nn::Linear> dense;
};

class BertLayer : public nn::Module {
 public:
  explicit BertLayer(const BertConfig& c);
  nn::ModuleInfo<BertAttention> attention;
  nn::ModuleInfo<BertDense> intermediate;
  nn::ModuleInfo<BertResidualOutput> output;
};

class BertEncoder : public nn::Module {
 public:
  explicit BertEncoder(const BertConfig& c);
  nn::ModuleList<BertLayer> layer{this, "layer"};
};

class BertModel : public PretrainedModel {
 public:
  using Config = BertConfig;
  /// Throws ValueError for sizes < 1, heads not dividing hidden_size or dropouts outside [0, 1).
  explicit BertModel(BertConfig config);
  static std::unique_ptr<BertModel> from_pretrained(const std::filesystem::path& dir,
                                                    const LoadOptions& options = {});

  /// input_ids (B, T) integers; attention_mask (B, T), nonzero (or true) for tokens to attend, all
  /// when empty; token_type_ids (B, T), zeros when empty. Dropout applies in training mode. Throws
  /// DtypeError for non-integer ids, ShapeError for mismatched shapes or T past
  /// max_position_embeddings.
  BertOutput forward(const Array& input_ids, const Array& attention_mask = Array(),
                     const Array& token_type_ids = Array()) const;
  BertOutput operator()(const Array& input_ids, const Array& attention_mask = Array(),
                        const Array& token_type_ids = Array()) const {
    return forward(input_ids, attention_mask, token_type_ids);
  }

  std::string model_type() const override { return "bert"; }
  HfConfig hf_config() const override;
  nn::ParamTree from_checkpoint(const nn::ParamTree& tensors, LoadReport& report) const override;
  nn::ParamTree to_checkpoint() const override { return parameters(); }
  std::vector<std::string> optional_keys() const override { return {"pooler."}; }
  const BertConfig& config() const { return config_; }

  nn::ModuleInfo<BertEmbeddings> embeddings;
  nn::ModuleInfo<BertEncoder> encoder;
  nn::ModuleInfo<BertDense> pooler;

 private:
  BertConfig config_;
};

class BertForSequenceClassification : public PretrainedModel {
 public:
  using Config = BertConfig;
  explicit BertForSequenceClassification(BertConfig config);
  static std::unique_ptr<BertForSequenceClassification> from_pretrained(const std::filesystem::path& dir,
                                                                        const LoadOptions& options = {});

  /// Logits (B, num_labels) from the pooled first token (dropout first, in training mode).
  Array forward(const Array& input_ids, const Array& attention_mask = Array(),
                const Array& token_type_ids = Array()) const;
  Array operator()(const Array& input_ids, const Array& attention_mask = Array(),
                   const Array& token_type_ids = Array()) const {
    return forward(input_ids, attention_mask, token_type_ids);
  }

  std::string model_type() const override { return "bert"; }
  HfConfig hf_config() const override;
  nn::ParamTree from_checkpoint(const nn::ParamTree& tensors, LoadReport& report) const override;
  nn::ParamTree to_checkpoint() const override { return parameters(); }
  std::vector<std::string> optional_keys() const override { return {"bert.pooler.", "classifier."}; }
  const BertConfig& config() const { return bert->config(); }

  nn::ModuleInfo<BertModel> bert;
  nn::ModuleInfo<nn::Linear> classifier;
};

}  // namespace kiln::models
