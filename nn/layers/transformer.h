#pragma once
// Transformer layers, as torch.nn.TransformerEncoderLayer / TransformerDecoderLayer with
// batch_first=True: inputs are (batch, seq, d_model). Parameter names are PyTorch's (self_attn.*,
// multihead_attn.*, linear1, linear2, norm1, norm2, norm3), so PyTorch state dicts load as-is.
#include <functional>
#include <vector>

#include "kiln/nn/layers/attention.h"
#include "kiln/nn/layers/dropout.h"
#include "kiln/nn/layers/linear.h"
#include "kiln/nn/layers/norm.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

enum class TransformerActivation { relu, gelu };  // gelu is the exact (erf) one, PyTorch's "gelu"

struct TransformerLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;  // after attention, inside and after the feed-forward block, and on attention weights
  TransformerActivation activation = TransformerActivation::relu;
  /// Overrides `activation` when set (PyTorch accepts a callable too).
  std::function<Array(const Array&)> custom_activation = nullptr;
  double layer_norm_eps = 1e-5;
  bool norm_first = false;  // pre-norm: x + f(norm(x)); post-norm (default): norm(x + f(x))
  bool bias = true;         // biases of the linear layers, attention and layer norms
  Dtype dtype = float32;
  Array key = Array();  // initialization key; random::next_key() when empty
};

/// The optional inputs of an encoder layer call (see AttentionArgs for mask semantics).
struct EncoderLayerArgs {
  Array src_mask = Array();              // broadcastable to (B, H, L, L); bool true = masked
  Array src_key_padding_mask = Array();  // (B, L)
  bool is_causal = false;                // adds a causal mask (PyTorch needs src_mask for this)
  Array dropout_key = Array();           // split for every dropout of the call; next_key() when empty
};

struct CachedLayerOutput {
  Array output;
  KVCache cache;
};

/// Self-attention and a feed-forward block, each with a residual connection and LayerNorm.
class TransformerEncoderLayer : public Module {
 public:
  /// Throws what MultiHeadAttention, Linear, LayerNorm and Dropout throw for bad sizes or rates.
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options = {});

  /// src (B, L, d_model) or (L, d_model) -> same shape.
  Array operator()(const Array& src, const EncoderLayerArgs& args = {}) const;
  /// Incremental decoding (a causal decoder-only stack built from encoder layers, GPT-style): src
  /// holds the new positions, whose self-attention keys and values extend cache.layers[layer].
  /// Use args.is_causal to feed a prefix of more than one position.
  CachedLayerOutput forward(const Array& src, const KVCache& cache, size_t layer = 0,
                            const EncoderLayerArgs& args = {}) const;

  ModuleInfo<MultiHeadAttention> self_attn;
  ModuleInfo<Linear> linear1;
  ModuleInfo<Dropout> dropout;
  ModuleInfo<Linear> linear2;
  ModuleInfo<LayerNorm> norm1;
  ModuleInfo<LayerNorm> norm2;
  ModuleInfo<Dropout> dropout1;
  ModuleInfo<Dropout> dropout2;

 private:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, const TransformerLayerOptions& options,
                          const std::vector<Array>& keys);
  CachedLayerOutput run(const Array& src, const KVCache* cache, size_t layer,
                        const EncoderLayerArgs& args) const;
  TransformerLayerOptions options_;
};

/// The optional inputs of a decoder layer call (see AttentionArgs for mask semantics).
struct DecoderLayerArgs {
  Array tgt_mask = Array();                 // self-attention, broadcastable to (B, H, Lt, Lt)
  Array memory_mask = Array();              // cross-attention, broadcastable to (B, H, Lt, Lm)
  Array tgt_key_padding_mask = Array();     // (B, Lt)
  Array memory_key_padding_mask = Array();  // (B, Lm)
  bool tgt_is_causal = false;               // adds a causal mask to the self-attention
  bool memory_is_causal = false;            // adds a causal mask to the cross-attention
  Array dropout_key = Array();
};

/// Self-attention, cross-attention over `memory`, and a feed-forward block, each with a residual
/// connection and LayerNorm.
class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options = {});

  /// tgt (B, Lt, d_model), memory (B, Lm, d_model) -> (B, Lt, d_model); unbatched 2-d inputs too.
  Array operator()(const Array& tgt, const Array& memory, const DecoderLayerArgs& args = {}) const;
  /// Incremental decoding: tgt holds the new positions, whose self-attention keys and values
  /// extend cache.layers[layer]; the cross-attention reads all of `memory` each call.
  CachedLayerOutput forward(const Array& tgt, const Array& memory, const KVCache& cache, size_t layer = 0,
                            const DecoderLayerArgs& args = {}) const;

  ModuleInfo<MultiHeadAttention> self_attn;
  ModuleInfo<MultiHeadAttention> multihead_attn;
  ModuleInfo<Linear> linear1;
  ModuleInfo<Dropout> dropout;
  ModuleInfo<Linear> linear2;
  ModuleInfo<LayerNorm> norm1;
  ModuleInfo<LayerNorm> norm2;
  ModuleInfo<LayerNorm> norm3;
  ModuleInfo<Dropout> dropout1;
  ModuleInfo<Dropout> dropout2;
  ModuleInfo<Dropout> dropout3;

 private:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, const TransformerLayerOptions& options,
                          const std::vector<Array>& keys);
  CachedLayerOutput run(const Array& tgt, const Array& memory, const KVCache* cache, size_t layer,
                        const DecoderLayerArgs& args) const;
  TransformerLayerOptions options_;
};

}  // namespace kiln::nn
