#include "kiln/models/pretrained/bert.h"

#include <cmath>

#include "common_impl.h"
#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/unary.h"
#include "kiln/nn/activations.h"
#include "kiln/nn/layers/dropout.h"

namespace kiln::models {

namespace {

using detail::ends_with;
using detail::starts_with;

constexpr const char* kName = "BertModel";

const BertConfig& checked(const BertConfig& c) {
  if (c.vocab_size < 1 || c.hidden_size < 1 || c.num_hidden_layers < 1 || c.num_attention_heads < 1 ||
      c.intermediate_size < 1 || c.max_position_embeddings < 1 || c.type_vocab_size < 1 || c.num_labels < 1)
    throw ValueError::of(kName, "sizes must be >= 1",
                         "vocab_size {}, hidden_size {}, layers {}, heads {}, intermediate_size {}, "
                         "max_position_embeddings {}, type_vocab_size {}, num_labels {}",
                         c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
                         c.intermediate_size, c.max_position_embeddings, c.type_vocab_size, c.num_labels);
  if (c.hidden_size % c.num_attention_heads != 0)
    throw ValueError::of(kName, "num_attention_heads must divide hidden_size", "hidden_size {}, heads {}",
                         c.hidden_size, c.num_attention_heads);
  for (double p : {c.hidden_dropout_prob, c.attention_probs_dropout_prob, c.classifier_dropout.value_or(0.0)})
    if (!(p >= 0 && p < 1)) throw ValueError::of(kName, "dropout must be in [0, 1)", "got {}", p);
  if (!(c.layer_norm_eps > 0))
    throw ValueError::of(kName, "layer_norm_eps must be > 0", "got {}", c.layer_norm_eps);
  return c;
}

nn::LayerNormOptions norm_options(const BertConfig& c) { return {.eps = c.layer_norm_eps, .dtype = c.dtype}; }
nn::LinearOptions linear_options(Dtype dtype) { return {.bias = true, .dtype = dtype}; }

Array activation(BertActivation a, const Array& x) {
  switch (a) {
    case BertActivation::gelu_tanh:
      return nn::gelu_tanh(x);
    case BertActivation::relu:
      return nn::relu(x);
    case BertActivation::gelu:
      break;
  }
  return nn::gelu(x);
}

// The checkpoint's keys placed under `prefix` ("" for BertModel, "bert." for a head model):
// pretraining heads and buffers left out, TensorFlow-era LayerNorm names (gamma, beta) renamed.
nn::ParamTree bert_keys(const nn::ParamTree& tensors, LoadReport& report, std::string_view prefix,
                        bool keep_classifier) {
  nn::ParamTree out;
  for (const auto& [file_key, value] : tensors) {
    std::string key = file_key;
    if (starts_with(key, "bert.")) key = key.substr(5);
    if (starts_with(key, "cls.") || ends_with(key, "embeddings.position_ids") ||
        (!keep_classifier && starts_with(key, "classifier."))) {
      report.ignored.push_back(file_key);
      continue;
    }
    if (ends_with(key, "LayerNorm.gamma")) key.replace(key.size() - 5, 5, "weight");
    if (ends_with(key, "LayerNorm.beta")) key.replace(key.size() - 4, 4, "bias");
    out.set(starts_with(key, "classifier.") ? key : std::string(prefix) + key, value);
  }
  return out;
}

HfConfig write_config(const BertConfig& c, const char* architecture) {
  HfConfig hf = c.hf;
  if (hf.get_strings("architectures").empty())
    hf.set("architectures", std::vector<std::string>{architecture});
  hf.set("vocab_size", c.vocab_size);
  hf.set("hidden_size", c.hidden_size);
  hf.set("num_hidden_layers", c.num_hidden_layers);
  hf.set("num_attention_heads", c.num_attention_heads);
  hf.set("intermediate_size", c.intermediate_size);
  hf.set("hidden_act", c.hidden_act == BertActivation::gelu        ? "gelu"
                       : c.hidden_act == BertActivation::gelu_tanh ? "gelu_new"
                                                                   : "relu");
  hf.set("hidden_dropout_prob", c.hidden_dropout_prob);
  hf.set("attention_probs_dropout_prob", c.attention_probs_dropout_prob);
  hf.set("max_position_embeddings", c.max_position_embeddings);
  hf.set("type_vocab_size", c.type_vocab_size);
  hf.set("layer_norm_eps", c.layer_norm_eps);
  hf.set("position_embedding_type", "absolute");
  return hf;
}

}  // namespace

BertConfig BertConfig::from_hf(const HfConfig& hf, Dtype dtype, const LoadOptions& options) {
  BertConfig c;
  c.hf = hf;
  c.dtype = dtype;
  c.vocab_size = hf.get_int("vocab_size");
  c.hidden_size = hf.get_int("hidden_size");
  c.num_hidden_layers = hf.get_int("num_hidden_layers");
  c.num_attention_heads = hf.get_int("num_attention_heads");
  c.intermediate_size = hf.get_int("intermediate_size");
  const std::string act = hf.get_string("hidden_act", "gelu");
  if (act == "gelu")
    c.hidden_act = BertActivation::gelu;
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh")
    c.hidden_act = BertActivation::gelu_tanh;
  else if (act == "relu")
    c.hidden_act = BertActivation::relu;
  else
    throw NotImplemented::of(kName, "this hidden_act is not supported",
                             "{}: '{}' (kiln reads gelu, gelu_new, gelu_pytorch_tanh and relu)", hf.source(),
                             act);
  const std::string positions = hf.get_string("position_embedding_type", "absolute");
  if (positions != "absolute")
    throw NotImplemented::of(kName, "this position_embedding_type is not supported",
                             "{}: '{}' (kiln reads absolute)", hf.source(), positions);
  if (hf.get_bool("is_decoder", false) || hf.get_bool("add_cross_attention", false))
    throw NotImplemented::of(kName, "BERT as a decoder is not supported",
                             "{}: is_decoder or add_cross_attention", hf.source());
  c.hidden_dropout_prob = hf.get_double("hidden_dropout_prob", 0.1);
  c.attention_probs_dropout_prob = hf.get_double("attention_probs_dropout_prob", 0.1);
  if (hf.has("classifier_dropout")) c.classifier_dropout = hf.get_double("classifier_dropout");
  c.max_position_embeddings = hf.get_int("max_position_embeddings", 512);
  c.type_vocab_size = hf.get_int("type_vocab_size", 2);
  c.layer_norm_eps = hf.get_double("layer_norm_eps", 1e-12);
  const int64_t labels = hf.has("num_labels") ? hf.get_int("num_labels") : hf.get_size("id2label");
  c.num_labels = options.num_labels.value_or(labels > 0 ? labels : 2);
  return c;
}

BertEmbeddings::BertEmbeddings(const BertConfig& c)
    : word_embeddings(this, "word_embeddings", c.vocab_size, c.hidden_size,
                      nn::EmbeddingOptions{.dtype = c.dtype}),
      position_embeddings(this, "position_embeddings", c.max_position_embeddings, c.hidden_size,
                          nn::EmbeddingOptions{.dtype = c.dtype}),
      token_type_embeddings(this, "token_type_embeddings", c.type_vocab_size, c.hidden_size,
                            nn::EmbeddingOptions{.dtype = c.dtype}),
      LayerNorm(this, "LayerNorm", c.hidden_size, norm_options(c)) {}

BertSelfAttention::BertSelfAttention(const BertConfig& c)
    : query(this, "query", c.hidden_size, c.hidden_size, linear_options(c.dtype)),
      key(this, "key", c.hidden_size, c.hidden_size, linear_options(c.dtype)),
      value(this, "value", c.hidden_size, c.hidden_size, linear_options(c.dtype)) {}

BertResidualOutput::BertResidualOutput(int64_t in, const BertConfig& c)
    : dense(this, "dense", in, c.hidden_size, linear_options(c.dtype)),
      LayerNorm(this, "LayerNorm", c.hidden_size, norm_options(c)) {}

BertAttention::BertAttention(const BertConfig& c)
    : self(this, "self", c), output(this, "output", c.hidden_size, c) {}

BertDense::BertDense(int64_t in, int64_t out, Dtype dtype)
    : dense(this, "dense", in, out, linear_options(dtype)) {}

BertLayer::BertLayer(const BertConfig& c)
    : attention(this, "attention", c),
      intermediate(this, "intermediate", c.hidden_size, c.intermediate_size, c.dtype),
      output(this, "output", c.intermediate_size, c) {}

BertEncoder::BertEncoder(const BertConfig& c) {
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layer.emplace_back(c);
}

BertModel::BertModel(BertConfig c)
    : embeddings(this, "embeddings", checked(c)),
      encoder(this, "encoder", c),
      pooler(this, "pooler", c.hidden_size, c.hidden_size, c.dtype),
      config_(std::move(c)) {}

std::unique_ptr<BertModel> BertModel::from_pretrained(const std::filesystem::path& dir,
                                                      const LoadOptions& options) {
  return detail::load_pretrained<BertModel>(dir, options);
}

HfConfig BertModel::hf_config() const { return write_config(config_, "BertModel"); }

nn::ParamTree BertModel::from_checkpoint(const nn::ParamTree& tensors, LoadReport& report) const {
  return bert_keys(tensors, report, "", /*keep_classifier=*/false);
}

BertOutput BertModel::forward(const Array& ids, const Array& attention_mask,
                              const Array& token_type_ids) const {
  const BertConfig& c = config_;
  if (!ids.valid()) throw ValueError::of(kName, "input_ids are an empty Array");
  if (!is_integral(ids.dtype()))
    throw DtypeError::of(kName, "input_ids must be integers", "got {}", dtype_name(ids.dtype()));
  if (ids.ndim() != 2 || ids.shape(0) < 1 || ids.shape(1) < 1)
    throw ShapeError::of(kName, "input_ids must be (B, T) with B, T >= 1", "got {}", shape_str(ids.shape()));
  const int64_t b = ids.shape(0), t = ids.shape(1);
  if (t > c.max_position_embeddings)
    throw ShapeError::of(kName, "sequence longer than max_position_embeddings", "{} > {}", t,
                         c.max_position_embeddings);
  for (const Array* a : {&attention_mask, &token_type_ids})
    if (a->valid() && a->shape() != ids.shape())
      throw ShapeError::of(kName, "attention_mask and token_type_ids must have input_ids' shape",
                           "input_ids {}, got {}", shape_str(ids.shape()), shape_str(a->shape()));
  const bool training = is_training();
  const double p_hidden = training ? c.hidden_dropout_prob : 0.0;
  const double p_attn = training ? c.attention_probs_dropout_prob : 0.0;
  auto drop = [](const Array& x, double p) { return p > 0 ? nn::dropout(x, p) : x; };

  const BertEmbeddings& e = *embeddings;
  // Every table through its layer, which may be quantized.
  Array x = e.word_embeddings(ids) + e.position_embeddings(arange(0.0, static_cast<double>(t), 1.0, int32));
  x = x + e.token_type_embeddings(token_type_ids.valid() ? token_type_ids : zeros({1}, int32));
  x = drop(e.LayerNorm(x), p_hidden);
  // Keys to ignore: (B, 1, 1, T), broadcast over heads and queries.
  const Array hidden = attention_mask.valid() ? reshape(attention_mask == 0, {b, 1, 1, t}) : Array();
  const int64_t heads = c.num_attention_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.hidden_size / heads));
  for (size_t i = 0; i < encoder->layer.size(); ++i) {
    const BertLayer& layer = encoder->layer[i];
    const BertSelfAttention& s = *layer.attention->self;
    const Array ctx =
        detail::attend(detail::split_heads(s.query(x), heads), detail::split_heads(s.key(x), heads),
                       detail::split_heads(s.value(x), heads), scale, /*causal=*/false, hidden, p_attn);
    const BertResidualOutput& ao = *layer.attention->output;
    const Array a = ao.LayerNorm(drop(ao.dense(detail::merge_heads(ctx)), p_hidden) + x);
    const Array inner = activation(c.hidden_act, layer.intermediate->dense(a));
    x = layer.output->LayerNorm(drop(layer.output->dense(inner), p_hidden) + a);
  }
  const Array first = reshape(slice(x, {Slice{}, Slice{0, 1}}), {b, c.hidden_size});
  return {x, tanh(pooler->dense(first))};
}

BertForSequenceClassification::BertForSequenceClassification(BertConfig c)
    : bert(this, "bert", c),
      classifier(this, "classifier", c.hidden_size, c.num_labels, linear_options(c.dtype)) {}

std::unique_ptr<BertForSequenceClassification> BertForSequenceClassification::from_pretrained(
    const std::filesystem::path& dir, const LoadOptions& options) {
  return detail::load_pretrained<BertForSequenceClassification>(dir, options);
}

HfConfig BertForSequenceClassification::hf_config() const {
  HfConfig hf = write_config(config(), "BertForSequenceClassification");
  hf.set("architectures", std::vector<std::string>{"BertForSequenceClassification"});
  hf.set("num_labels", config().num_labels);
  // transformers sizes the head from id2label, which must then agree with num_labels.
  if (hf.get_size("id2label") != config().num_labels) {
    HfConfig id2label, label2id;
    for (int64_t i = 0; i < config().num_labels; ++i) {
      id2label.set(std::to_string(i), "LABEL_" + std::to_string(i));
      label2id.set("LABEL_" + std::to_string(i), i);
    }
    hf.set("id2label", id2label);
    hf.set("label2id", label2id);
  }
  return hf;
}

nn::ParamTree BertForSequenceClassification::from_checkpoint(const nn::ParamTree& tensors,
                                                             LoadReport& report) const {
  return bert_keys(tensors, report, "bert.", /*keep_classifier=*/true);
}

Array BertForSequenceClassification::forward(const Array& ids, const Array& attention_mask,
                                             const Array& token_type_ids) const {
  const BertConfig& c = config();
  const double p = is_training() ? c.classifier_dropout.value_or(c.hidden_dropout_prob) : 0.0;
  const Array pooled = bert->forward(ids, attention_mask, token_type_ids).pooler_output;
  return classifier(p > 0 ? nn::dropout(pooled, p) : pooled);
}

}  // namespace kiln::models
