#include "kiln/models/pretrained/llama.h"

#include <cmath>
#include <numbers>

#include "common_impl.h"
#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/linalg.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/unary.h"
#include "kiln/nn/activations.h"
#include "kiln/nn/checkpoint.h"

namespace kiln::models {

namespace {

using detail::ends_with;
using detail::starts_with;

constexpr const char* kName = "LlamaForCausalLM";

RopeScaling read_rope_scaling(const HfConfig& hf) {
  RopeScaling r;
  if (!hf.has("rope_scaling")) return r;
  const HfConfig s = hf.get_object("rope_scaling");
  // transformers has called the field "type" and later "rope_type".
  const std::string type = s.has("rope_type") ? s.get_string("rope_type") : s.get_string("type", "default");
  if (type == "default") return r;
  r.factor = s.get_double("factor");
  if (type == "linear") {
    r.type = RopeScaling::Type::linear;
  } else if (type == "llama3") {
    r.type = RopeScaling::Type::llama3;
    r.low_freq_factor = s.get_double("low_freq_factor");
    r.high_freq_factor = s.get_double("high_freq_factor");
    r.original_max_position_embeddings = s.get_int("original_max_position_embeddings");
  } else {
    throw NotImplemented::of(kName, "this rope_scaling type is not supported",
                             "{}: '{}' (kiln reads default, linear and llama3)", s.source(), type);
  }
  return r;
}

const LlamaConfig& checked(const LlamaConfig& c) {
  if (c.vocab_size < 1 || c.hidden_size < 1 || c.intermediate_size < 1 || c.num_hidden_layers < 1 ||
      c.num_attention_heads < 1 || c.num_key_value_heads < 1 || c.max_position_embeddings < 1 ||
      c.head_dim < 0)
    throw ValueError::of(
        kName, "sizes must be >= 1",
        "vocab_size {}, hidden_size {}, intermediate_size {}, layers {}, heads {}, kv heads {}, "
        "max_position_embeddings {}, head_dim {}",
        c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads,
        c.num_key_value_heads, c.max_position_embeddings, c.head_dim);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    throw ValueError::of(kName, "num_key_value_heads must divide num_attention_heads",
                         "{} heads, {} kv heads", c.num_attention_heads, c.num_key_value_heads);
  if (c.head_dim == 0 && c.hidden_size % c.num_attention_heads != 0)
    throw ValueError::of(kName, "num_attention_heads must divide hidden_size (or head_dim be given)",
                         "hidden_size {}, heads {}", c.hidden_size, c.num_attention_heads);
  if (c.resolved_head_dim() % 2 != 0)
    throw ValueError::of(kName, "rotary positions need an even head_dim", "got {}", c.resolved_head_dim());
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta) || !(c.rope_scaling.factor > 0) ||
      !(c.rms_norm_eps > 0))
    throw ValueError::of(kName, "rope_theta, the rope scaling factor and rms_norm_eps must be > 0",
                         "rope_theta {}, factor {}, rms_norm_eps {}", c.rope_theta, c.rope_scaling.factor,
                         c.rms_norm_eps);
  if (c.rope_scaling.type == RopeScaling::Type::llama3 &&
      !(c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor))
    throw ValueError::of(kName, "llama3 rope scaling needs high_freq_factor > low_freq_factor", "{} and {}",
                         c.rope_scaling.high_freq_factor, c.rope_scaling.low_freq_factor);
  if (c.sliding_window && *c.sliding_window < 1)
    throw ValueError::of(kName, "sliding_window must be >= 1", "got {}", *c.sliding_window);
  if (!(c.attention_dropout >= 0 && c.attention_dropout < 1))
    throw ValueError::of(kName, "attention_dropout must be in [0, 1)", "got {}", c.attention_dropout);
  return c;
}

// transformers' rotary frequencies: base^(-2i / dim), then the scaling of rope_scaling.
std::vector<float> rotary_frequencies(const LlamaConfig& c) {
  const int64_t dim = c.resolved_head_dim();
  const RopeScaling& r = c.rope_scaling;
  std::vector<float> out;
  for (int64_t i = 0; i < dim; i += 2) {
    double f = 1.0 / std::pow(c.rope_theta, static_cast<double>(i) / static_cast<double>(dim));
    if (r.type == RopeScaling::Type::linear) {
      f /= r.factor;
    } else if (r.type == RopeScaling::Type::llama3) {
      // Llama 3.1: long wavelengths divided by factor, short ones kept, a smooth blend between.
      const double old_len = static_cast<double>(r.original_max_position_embeddings);
      const double low_wavelen = old_len / r.low_freq_factor, high_wavelen = old_len / r.high_freq_factor;
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f /= r.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        f = (1 - smooth) * f / r.factor + smooth * f;
      }
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

nn::LinearOptions linear_options(bool bias, Dtype dtype) { return {.bias = bias, .dtype = dtype}; }

Array rotate_half(const Array& x) {
  const auto halves = split(x, 2, -1);
  return concatenate({-halves[1], halves[0]}, -1);
}

}  // namespace

LlamaConfig LlamaConfig::from_hf(const HfConfig& hf, Dtype dtype, const LoadOptions& /*options*/) {
  LlamaConfig c;
  c.hf = hf;
  c.dtype = dtype;
  c.model_type = hf.get_string("model_type", "llama");
  if (c.model_type != "llama" && c.model_type != "mistral" && c.model_type != "qwen2")
    throw NotImplemented::of(kName, "this model_type is not a Llama-family model",
                             "{}: '{}' (kiln reads llama, mistral and qwen2)", hf.source(), c.model_type);
  c.vocab_size = hf.get_int("vocab_size");
  c.hidden_size = hf.get_int("hidden_size");
  c.intermediate_size = hf.get_int("intermediate_size");
  c.num_hidden_layers = hf.get_int("num_hidden_layers");
  c.num_attention_heads = hf.get_int("num_attention_heads");
  c.num_key_value_heads = hf.get_int("num_key_value_heads", c.num_attention_heads);
  c.head_dim = hf.get_int("head_dim", 0);
  c.max_position_embeddings = hf.get_int("max_position_embeddings");
  c.rms_norm_eps = hf.get_double("rms_norm_eps", 1e-6);
  c.rope_theta = hf.get_double("rope_theta", 10000.0);
  c.rope_scaling = read_rope_scaling(hf);
  c.tie_word_embeddings = hf.get_bool("tie_word_embeddings", false);
  c.attention_dropout = hf.get_double("attention_dropout", 0.0);
  const std::string act = hf.get_string("hidden_act", "silu");
  if (act != "silu")
    throw NotImplemented::of(kName, "this hidden_act is not supported", "{}: '{}' (kiln's SwiGLU uses silu)",
                             hf.source(), act);
  if (c.model_type == "qwen2") {
    c.qkv_bias = true;
    if (hf.get_bool("use_sliding_window", false))
      throw NotImplemented::of(kName, "Qwen2's sliding window is not supported",
                               "{}: use_sliding_window is true", hf.source());
  } else {
    c.attention_bias = hf.get_bool("attention_bias", false);
    c.mlp_bias = hf.get_bool("mlp_bias", false);
  }
  if (c.model_type == "mistral" && hf.has("sliding_window")) c.sliding_window = hf.get_int("sliding_window");
  return c;
}

LlamaAttention::LlamaAttention(const LlamaConfig& c)
    : q_proj(this, "q_proj", c.hidden_size, c.num_attention_heads * c.resolved_head_dim(),
             linear_options(c.attention_bias || c.qkv_bias, c.dtype)),
      k_proj(this, "k_proj", c.hidden_size, c.num_key_value_heads * c.resolved_head_dim(),
             linear_options(c.attention_bias || c.qkv_bias, c.dtype)),
      v_proj(this, "v_proj", c.hidden_size, c.num_key_value_heads * c.resolved_head_dim(),
             linear_options(c.attention_bias || c.qkv_bias, c.dtype)),
      o_proj(this, "o_proj", c.num_attention_heads * c.resolved_head_dim(), c.hidden_size,
             linear_options(c.attention_bias, c.dtype)) {}

LlamaMlp::LlamaMlp(const LlamaConfig& c)
    : gate_proj(this, "gate_proj", c.hidden_size, c.intermediate_size, linear_options(c.mlp_bias, c.dtype)),
      up_proj(this, "up_proj", c.hidden_size, c.intermediate_size, linear_options(c.mlp_bias, c.dtype)),
      down_proj(this, "down_proj", c.intermediate_size, c.hidden_size, linear_options(c.mlp_bias, c.dtype)) {}

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c)
    : self_attn(this, "self_attn", c),
      mlp(this, "mlp", c),
      input_layernorm(this, "input_layernorm", c.hidden_size,
                      nn::RMSNormOptions{.eps = c.rms_norm_eps, .dtype = c.dtype}),
      post_attention_layernorm(this, "post_attention_layernorm", c.hidden_size,
                               nn::RMSNormOptions{.eps = c.rms_norm_eps, .dtype = c.dtype}) {}

LlamaModel::LlamaModel(const LlamaConfig& c)
    : embed_tokens(this, "embed_tokens", c.vocab_size, c.hidden_size, nn::EmbeddingOptions{.dtype = c.dtype}),
      norm(this, "norm", c.hidden_size, nn::RMSNormOptions{.eps = c.rms_norm_eps, .dtype = c.dtype}) {
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers.emplace_back(c);
}

LlamaForCausalLM::LlamaForCausalLM(LlamaConfig c)
    : model(this, "model", checked(c)),
      lm_head(this, "lm_head", c.hidden_size, c.vocab_size, linear_options(false, c.dtype)),
      config_(std::move(c)) {
  if (config_.tie_word_embeddings) lm_head->weight.reset(Array());
  const std::vector<float> f = rotary_frequencies(config_);
  inv_freq_ = Array(f, {1, static_cast<int64_t>(f.size())});
  inv_freq_.eval();  // read by every call (and thread) from now on
}

std::unique_ptr<LlamaForCausalLM> LlamaForCausalLM::from_pretrained(const std::filesystem::path& dir,
                                                                    const LoadOptions& options) {
  return detail::load_pretrained<LlamaForCausalLM>(dir, options);
}

HfConfig LlamaForCausalLM::hf_config() const {
  HfConfig hf = config_.hf;
  const LlamaConfig& c = config_;
  if (hf.get_strings("architectures").empty())
    hf.set("architectures", std::vector<std::string>{c.model_type == "mistral" ? "MistralForCausalLM"
                                                     : c.model_type == "qwen2" ? "Qwen2ForCausalLM"
                                                                               : "LlamaForCausalLM"});
  hf.set("vocab_size", c.vocab_size);
  hf.set("hidden_size", c.hidden_size);
  hf.set("intermediate_size", c.intermediate_size);
  hf.set("num_hidden_layers", c.num_hidden_layers);
  hf.set("num_attention_heads", c.num_attention_heads);
  hf.set("num_key_value_heads", c.num_key_value_heads);
  hf.set("head_dim", c.resolved_head_dim());
  hf.set("max_position_embeddings", c.max_position_embeddings);
  hf.set("rms_norm_eps", c.rms_norm_eps);
  hf.set("rope_theta", c.rope_theta);
  hf.set("tie_word_embeddings", c.tie_word_embeddings);
  hf.set("hidden_act", "silu");
  if (c.model_type == "llama") {
    hf.set("attention_bias", c.attention_bias);
    hf.set("mlp_bias", c.mlp_bias);
  }
  if (c.sliding_window) hf.set("sliding_window", *c.sliding_window);
  const RopeScaling& r = c.rope_scaling;
  if (r.type == RopeScaling::Type::none) {
    hf.erase("rope_scaling");
  } else {
    HfConfig s;
    s.set("rope_type", r.type == RopeScaling::Type::linear ? "linear" : "llama3");
    s.set("factor", r.factor);
    if (r.type == RopeScaling::Type::llama3) {
      s.set("low_freq_factor", r.low_freq_factor);
      s.set("high_freq_factor", r.high_freq_factor);
      s.set("original_max_position_embeddings", r.original_max_position_embeddings);
    }
    hf.set("rope_scaling", s);
  }
  return hf;
}

nn::ParamTree LlamaForCausalLM::from_checkpoint(const nn::ParamTree& tensors, LoadReport& report) const {
  // A checkpoint of the bare decoder (LlamaModel) has no "model." prefix.
  bool bare = true;
  for (const auto& [key, value] : tensors)
    if (starts_with(key, "model.") || key == "lm_head.weight") bare = false;
  nn::ParamTree out;
  for (const auto& [file_key, value] : tensors) {
    if (ends_with(file_key, ".rotary_emb.inv_freq")) {
      report.ignored.push_back(file_key);  // a buffer older checkpoints carry
      continue;
    }
    if (file_key == "lm_head.weight" && config_.tie_word_embeddings) {
      report.ignored.push_back(file_key);  // a copy of the tied embedding
      continue;
    }
    out.set(bare ? "model." + file_key : file_key, value);
  }
  return out;
}

Array LlamaForCausalLM::forward(const Array& tokens) const { return run(tokens, nullptr, Array()); }
Array LlamaForCausalLM::forward(const Array& tokens, GptCache& cache) const {
  return run(tokens, &cache, Array());
}
Array LlamaForCausalLM::forward(const Array& tokens, GptCache& cache, const Array& attention_mask) const {
  return run(tokens, &cache, attention_mask);
}

namespace {

// What a decoder layer reads besides its weights, held by value: a checkpointed layer runs again
// after forward has returned.
struct LayerContext {
  Array cos, sin;  // of position * frequency, (T, D) or (B, 1, T, D)
  Array hidden;    // keys hidden from queries (padding, Mistral's window), or empty
  int64_t heads, kv_heads, max_positions;
  double scale, dropout;
};

// x plus the layer's attention and SwiGLU branches; writes the layer's keys and values into cache.
Array decoder_layer(const LlamaDecoderLayer& layer, size_t i, const Array& x, const LayerContext& c,
                    GptCache* cache) {
  auto rotary = [&](const Array& a) { return a * c.cos + rotate_half(a) * c.sin; };
  const LlamaAttention& a = *layer.self_attn;
  const Array h = layer.input_layernorm(x);
  const Array q = rotary(detail::split_heads(a.q_proj(h), c.heads));
  Array k = rotary(detail::split_heads(a.k_proj(h), c.kv_heads));
  Array v = detail::split_heads(a.v_proj(h), c.kv_heads);
  if (cache) {  // the cache holds the kv heads once, not repeated
    const nn::KVCache::Entry seen = cache->append(i, k, v, c.max_positions);
    k = seen.keys;
    v = seen.values;
  }
  if (c.kv_heads != c.heads) {
    const int rep = static_cast<int>(c.heads / c.kv_heads);
    k = repeat(k, rep, 1);
    v = repeat(v, rep, 1);
  }
  const Array attn = detail::attend(q, k, v, c.scale, /*causal=*/true, c.hidden, c.dropout);
  const Array y = x + a.o_proj(detail::merge_heads(attn));
  const LlamaMlp& m = *layer.mlp;
  const Array g = layer.post_attention_layernorm(y);
  return y + m.down_proj(nn::silu(m.gate_proj(g)) * m.up_proj(g));
}

}  // namespace

Array LlamaForCausalLM::run(const Array& tokens, GptCache* cache, const Array& attention_mask) const {
  const LlamaConfig& c = config_;
  if (!tokens.valid()) throw ValueError::of(kName, "tokens are an empty Array");
  if (!is_integral(tokens.dtype()))
    throw DtypeError::of(kName, "tokens must be integers", "got {}", dtype_name(tokens.dtype()));
  if (tokens.ndim() != 2 || tokens.shape(0) < 1 || tokens.shape(1) < 1)
    throw ShapeError::of(kName, "tokens must be (B, T) with B, T >= 1", "got {}", shape_str(tokens.shape()));
  const int64_t offset = cache ? cache->length() : 0, b = tokens.shape(0), t = tokens.shape(1);
  if (offset + t > c.max_position_embeddings)
    throw ShapeError::of(kName, "sequence longer than max_position_embeddings",
                         "{} cached + {} new positions > {}", offset, t, c.max_position_embeddings);
  if (cache && !cache->empty() && cache->batch() != b)
    throw ShapeError::of(kName, "batch differs from the cache's", "cache batch {}, tokens {}", cache->batch(),
                         shape_str(tokens.shape()));
  const int64_t heads = c.num_attention_heads, kv_heads = c.num_key_value_heads, d = c.resolved_head_dim();
  const int64_t len = offset + t;
  const double dropout = is_training() ? c.attention_dropout : 0.0;

  Array x = model->embed_tokens(tokens);
  const Dtype dt = x.dtype();
  // Padded batches: positions per row, padding keys hidden.
  detail::PaddedPositions padded;
  if (attention_mask.valid()) padded = detail::padded_positions(kName, attention_mask, b, offset, t);
  // cos and sin of position * frequency, each frequency twice (the rotate-half layout): (T, D), or
  // (B, 1, T, D) with per-row positions.
  const Array freqs =
      padded.positions.valid()
          ? reshape(astype(padded.positions, float32), {b, 1, t, 1}) * reshape(inv_freq_, {1, 1, 1, d / 2})
          : reshape(arange(static_cast<double>(offset), static_cast<double>(len), 1, float32), {t, 1}) *
                inv_freq_;
  const Array angles = concatenate({freqs, freqs}, -1);
  const Array cos_t = astype(cos(angles), dt), sin_t = astype(sin(angles), dt);
  // Mistral's window: query at position p sees keys in (p - window, p].
  Array hidden = padded.hidden;
  if (c.sliding_window && len > *c.sliding_window) {
    const Array query_pos =
        reshape(arange(static_cast<double>(offset), static_cast<double>(len), 1, int32), {t, 1});
    const Array key_pos = reshape(arange(0, static_cast<double>(len), 1, int32), {1, len});
    const Array window = (query_pos - key_pos) >= Array(static_cast<int32_t>(*c.sliding_window));
    hidden = hidden.valid() ? logical_or(hidden, window) : window;
  }

  const LayerContext context{cos_t,
                             sin_t,
                             hidden,
                             heads,
                             kv_heads,
                             c.max_position_embeddings,
                             1.0 / std::sqrt(static_cast<double>(d)),
                             dropout};
  const bool recompute = gradient_checkpointing() && is_training() && !cache;
  for (size_t i = 0; i < model->layers.size(); ++i) {
    const LlamaDecoderLayer& layer = model->layers[i];
    if (!recompute) {
      x = decoder_layer(layer, i, x, context, cache);
      continue;
    }
    // nn::checkpoint swaps traced values into the layer's slots while the layer runs (also in the
    // backward pass, after this call) and puts them back; the function holds values only.
    x = nn::checkpoint(
        const_cast<LlamaDecoderLayer&>(layer),
        [&layer, i, context](const Array& in) { return decoder_layer(layer, i, in, context, nullptr); }, x);
  }
  x = model->norm(x);
  if (cache) cache->commit(t, b);
  return c.tie_word_embeddings ? model->embed_tokens->as_linear(x) : lm_head(x);
}

}  // namespace kiln::models
