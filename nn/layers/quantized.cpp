#include "kiln/nn/layers/quantized.h"

#include "kiln/core/error.h"
#include "kiln/nn/module_names.h"

namespace kiln::nn {

std::vector<std::string> quantize(Module& model, const QuantizeConfig& c) {
  if (c.bits != 2 && c.bits != 4 && c.bits != 8)
    throw ValueError::of("nn::quantize", "bits must be 2, 4 or 8", "got {}", c.bits);
  if (c.group_size != 32 && c.group_size != 64 && c.group_size != 128)
    throw ValueError::of("nn::quantize", "group_size must be 32, 64 or 128", "got {}", c.group_size);
  const QuantizeOptions o{c.bits, c.group_size};
  std::vector<std::string> done;
  for (auto& [key, m] : model.named_modules()) {
    if (key_names_module(key, c.skip)) continue;
    if (auto* l = dynamic_cast<Linear*>(m)) {
      if (l->is_quantized() || !l->weight.has_value() || l->in_features() % c.group_size != 0) continue;
      l->quantize(o);
      done.push_back(key);
    } else if (auto* e = dynamic_cast<Embedding*>(m)) {
      if (e->is_quantized() || e->embedding_dim() % c.group_size != 0) continue;
      e->quantize(o);
      done.push_back(key);
    }
  }
  return done;
}

QuantizedLinear::QuantizedLinear(int64_t in_features, int64_t out_features, QuantizeOptions q,
                                 LinearOptions options)
    : Linear(in_features, out_features, std::move(options)) {
  quantize(q);
}

QuantizedEmbedding::QuantizedEmbedding(int64_t num_embeddings, int64_t embedding_dim, QuantizeOptions q,
                                       EmbeddingOptions options)
    : Embedding(num_embeddings, embedding_dim, std::move(options)) {
  quantize(q);
}

}  // namespace kiln::nn
