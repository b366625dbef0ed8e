#pragma once
// Embedding: a lookup table of num_embeddings vectors, as torch.nn.Embedding (weight (num, dim)).
#include <optional>

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

  ParameterInfo weight{this, "weight"};  // (num_embeddings, embedding_dim)

 private:
  int64_t num_, dim_;
  std::optional<int64_t> padding_idx_;
};

}  // namespace kiln::nn
