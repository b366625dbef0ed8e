#pragma once
// Quantized layers, and nn::quantize, which quantizes a model's Linear and Embedding layers in
// place (MLX's nn.quantize). Kiln's layers are fields of their parents, so a layer is not swapped
// for another class: Linear::quantize and Embedding::quantize change how it stores its weight. The
// keys stay the checkpoint's own with MLX's beside them (`...q_proj.weight` now the packed uint32
// words, `...q_proj.scales`, `...q_proj.biases`), so a quantized model saves and loads through
// Module::save_weights / load_weights like any other (a fresh model quantized the same way first).
#include <string>
#include <vector>

#include "kiln/nn/layers/embedding.h"
#include "kiln/nn/layers/linear.h"
#include "kiln/nn/layers/quantize_options.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

/// Which layers nn::quantize converts, and how.
struct QuantizeConfig {
  int bits = 4;         // 2, 4 or 8
  int group_size = 64;  // 32, 64 or 128
  /// Module keys left in float: a layer whose key is one of them or ends with "." and one of them
  /// ("lm_head" keeps the output layer in float).
  std::vector<std::string> skip = {};
};

/// Quantizes every Linear and Embedding of `model` in place (Linear::quantize, Embedding::quantize)
/// and returns their keys in model order. Left in float: the layers `skip` names, those already
/// quantized, those with an empty weight (a head tied to the embedding, which the embedding's
/// quantization then serves) and those whose input dimension is not a multiple of group_size.
/// Throws ValueError for bits or a group size quantize rejects, before changing anything.
std::vector<std::string> quantize(Module& model, const QuantizeConfig& config = {});

/// A Linear built quantized: Linear(in, out, options) with quantize(q) applied.
class QuantizedLinear : public Linear {
 public:
  QuantizedLinear(int64_t in_features, int64_t out_features, QuantizeOptions q = {},
                  LinearOptions options = {});
};

/// An Embedding built quantized: Embedding(num, dim, options) with quantize(q) applied.
class QuantizedEmbedding : public Embedding {
 public:
  QuantizedEmbedding(int64_t num_embeddings, int64_t embedding_dim, QuantizeOptions q = {},
                     EmbeddingOptions options = {});
};

}  // namespace kiln::nn
