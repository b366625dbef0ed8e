#pragma once
// Embedding: a lookup table of num_embeddings vectors, as torch.nn.Embedding (weight (num, dim)).
// quantize() stores the table as MLX's QuantizedEmbedding does (weight, scales, biases).
#include <optional>

#include "kiln/nn/layers/quantize_options.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

struct EmbeddingOptions {
  /// A row that reads as zeros at initialization and receives no gradient (PyTorch's
  /// padding_idx); negative values count from the end.
  std::optional<int64_t> padding_idx = std::nullopt;
  Dtype dtype = float32;
  Array key = Array();  // initialization key; random::next_key() when empty
};

class Embedding : public Module {
 public:
  /// Weight normal(0, 1) with the padding_idx row zeroed, as PyTorch. Throws ValueError for a size
  /// < 1 or a padding_idx outside [-num_embeddings, num_embeddings).
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options = {});
  /// Integer indices of any shape S -> (S..., embedding_dim): rows of weight, whose gradient
  /// accumulates per index. An index outside [0, num_embeddings) throws ValueError: from this call
  /// when the indices are already evaluated, otherwise from the eval that computes them (as take;
  /// negative indices never wrap, as in PyTorch). Throws DtypeError for non-integer indices.
  Array operator()(const Array& indices) const;

  int64_t num_embeddings() const { return num_; }
  int64_t embedding_dim() const { return dim_; }
  /// The padding row, normalized to [0, num_embeddings).
  std::optional<int64_t> padding_idx() const { return padding_idx_; }

  /// x (..., embedding_dim) @ weight^T -> (..., num_embeddings): an output layer tied to this table
  /// (GPT-2's and Llama's tied heads), quantized or not.
  Array as_linear(const Array& x) const;

  /// Quantizes the table in place along embedding_dim and freezes it (weight, scales, biases).
  /// Lookups dequantize the rows they read. Throws ValueError when already quantized, for bits or a
  /// group size quantize rejects, or when embedding_dim is not a multiple of the group size.
  void quantize(const QuantizeOptions& options = {});
  const std::optional<QuantizeOptions>& quantization() const { return quantization_; }
  bool is_quantized() const { return quantization_.has_value(); }

  ParameterInfo weight{this, "weight"};  // (num_embeddings, embedding_dim); uint32 words when quantized
  ParameterInfo scales{this, "scales"};  // (num_embeddings, embedding_dim / group_size) when quantized
  ParameterInfo biases{this, "biases"};  // likewise

 private:
  int64_t num_, dim_;
  std::optional<int64_t> padding_idx_;
  std::optional<QuantizeOptions> quantization_;
};

}  // namespace kiln::nn
