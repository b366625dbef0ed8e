#include "kiln/models/pretrained/gpt2.h"

#include <string>

#include "common_impl.h"
#include "kiln/core/error.h"
#include "kiln/core/ops/shape.h"

namespace kiln::models {

namespace {

using detail::ends_with;
using detail::starts_with;

constexpr const char* kName = "Gpt2LMHeadModel";

// GPT-2's Conv1D layers: weights (in, out).
bool is_conv1d_weight(std::string_view key) {
  return ends_with(key, ".attn.c_attn.weight") || ends_with(key, ".attn.c_proj.weight") ||
         ends_with(key, ".mlp.c_fc.weight") || ends_with(key, ".mlp.c_proj.weight");
}

}  // namespace

Gpt2Config Gpt2Config::from_hf(const HfConfig& hf, Dtype dtype, const LoadOptions& /*options*/) {
  Gpt2Config c;
  c.hf = hf;
  GptConfig& g = c.gpt;
  g.vocab_size = hf.get_int("vocab_size");
  g.context = hf.get_int("n_positions");
  g.d_model = hf.get_int("n_embd");
  g.layers = hf.get_int("n_layer");
  g.heads = hf.get_int("n_head");
  if (hf.has("n_inner")) g.d_ff = hf.get_int("n_inner");
  g.layer_norm_eps = hf.get_double("layer_norm_epsilon", 1e-5);
  g.tie_embeddings = hf.get_bool("tie_word_embeddings", true);
  g.positions = GptPositions::learned;
  g.bias = true;
  g.dtype = dtype;
  const std::string act = hf.get_string("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh")
    g.activation = GptActivation::gelu_tanh;
  else if (act == "gelu")
    g.activation = GptActivation::gelu;
  else
    throw NotImplemented::of(kName, "this activation_function is not supported",
                             "{}: '{}' (kiln reads gelu_new, gelu_pytorch_tanh and gelu)", hf.source(), act);
  const double resid = hf.get_double("resid_pdrop", 0.1), embd = hf.get_double("embd_pdrop", 0.1),
               attn = hf.get_double("attn_pdrop", 0.1);
  if (resid != embd || resid != attn)
    throw NotImplemented::of(kName, "kiln's GPT-2 has one dropout rate",
                             "{}: resid_pdrop {}, embd_pdrop {}, attn_pdrop {} differ", hf.source(), resid,
                             embd, attn);
  g.dropout = resid;
  if (!hf.get_bool("scale_attn_weights", true) || hf.get_bool("scale_attn_by_inverse_layer_idx", false) ||
      hf.get_bool("reorder_and_upcast_attn", false))
    throw NotImplemented::of(kName, "this attention variant is not supported",
                             "{}: kiln's GPT-2 scales scores by 1/sqrt(head_dim) only (scale_attn_weights "
                             "true, scale_attn_by_inverse_layer_idx and reorder_and_upcast_attn false)",
                             hf.source());
  return c;
}

Gpt2Config Gpt2Config::from_gpt(const GptConfig& g) {
  if (g.positions != GptPositions::learned || !g.bias)
    throw ValueError::of(kName, "GPT-2 has learned positions and biases",
                         "the GptConfig has {} positions and bias {}",
                         g.positions == GptPositions::rope ? "rotary" : "learned", g.bias);
  Gpt2Config c;
  c.gpt = g;
  c.hf.set("architectures", std::vector<std::string>{"GPT2LMHeadModel"});
  c.hf.set("model_type", "gpt2");
  return c;
}

Gpt2LMHeadModel::Gpt2LMHeadModel(Gpt2Config config)
    : transformer(this, "transformer", config.gpt), config_(std::move(config)) {}

std::unique_ptr<Gpt2LMHeadModel> Gpt2LMHeadModel::from_pretrained(const std::filesystem::path& dir,
                                                                  const LoadOptions& options) {
  return detail::load_pretrained<Gpt2LMHeadModel>(dir, options);
}

HfConfig Gpt2LMHeadModel::hf_config() const {
  HfConfig hf = config_.hf;
  const GptConfig& g = config_.gpt;
  hf.set("vocab_size", g.vocab_size);
  hf.set("n_positions", g.context);
  hf.set("n_embd", g.d_model);
  hf.set("n_layer", g.layers);
  hf.set("n_head", g.heads);
  if (g.d_ff)
    hf.set("n_inner", *g.d_ff);
  else
    hf.erase("n_inner");
  hf.set("layer_norm_epsilon", g.layer_norm_eps);
  hf.set("tie_word_embeddings", g.tie_embeddings);
  hf.set("activation_function", g.activation == GptActivation::gelu_tanh ? "gelu_new" : "gelu");
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) hf.set(key, g.dropout);
  return hf;
}

nn::ParamTree Gpt2LMHeadModel::from_checkpoint(const nn::ParamTree& tensors, LoadReport& report) const {
  nn::ParamTree out;
  for (const auto& [file_key, value] : tensors) {
    std::string key = file_key;
    if (ends_with(key, ".attn.bias") || ends_with(key, ".attn.masked_bias")) {
      report.ignored.push_back(key);  // the causal mask as a buffer
      continue;
    }
    if (key == "lm_head.weight") {
      if (config_.gpt.tie_embeddings) {
        report.ignored.push_back(key);  // a copy of the tied wte.weight
        continue;
      }
      key = "transformer.lm_head.weight";
    } else if (!starts_with(key, "transformer.")) {
      key = "transformer." + key;  // saved from GPT2Model (the Hub's gpt2 files)
    }
    out.set(key, is_conv1d_weight(key) && value.ndim() == 2 ? transpose(value) : value);
  }
  return out;
}

nn::ParamTree Gpt2LMHeadModel::to_checkpoint() const {
  nn::ParamTree out;
  for (const auto& [key, value] : parameters()) {
    if (key == "transformer.lm_head.weight")
      out.set("lm_head.weight", value);
    else
      out.set(key, is_conv1d_weight(key) ? transpose(value) : value);
  }
  return out;
}

}  // namespace kiln::models
