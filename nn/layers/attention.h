#pragma once
// Multi-head attention, as torch.nn.MultiheadAttention with batch_first=True: inputs are
// (batch, seq, embed). Parameters have PyTorch's names and layouts (in_proj_weight (3E, E),
// in_proj_bias (3E), out_proj.weight (E, E), out_proj.bias (E); q/k/v_proj_weight when kdim or vdim
// differ from embed_dim), so PyTorch state dicts load as-is.
//
// Incremental decoding is functional: a KVCache value goes in and a new one comes out; the module
// stays const and may be shared by threads (a MaterializedModule), each holding its own caches
// (for instance in a kiln::Exclusive<KVCache>).
#include <optional>
#include <vector>

#include "kiln/nn/layers/linear.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

struct MultiHeadAttentionOptions {
  bool bias = true;                  // in_proj_bias and out_proj.bias
  double dropout = 0.0;              // on the attention weights, in training mode only
  std::optional<int64_t> kdim = {};  // key features; embed_dim when unset
  std::optional<int64_t> vdim = {};  // value features; embed_dim when unset
  Dtype dtype = float32;
  Array key = Array();  // initialization key; random::next_key() when empty
};

/// The optional inputs of one attention call. Masks follow nn.MultiheadAttention: a bool mask is
/// true where attention is NOT allowed (the position gets -inf), a float mask is added to the
/// scores. Positions masked in a whole row give NaN, as in PyTorch.
struct AttentionArgs {
  /// attn_mask, broadcastable to (B, H, Lq, Lk): (Lq, Lk) for all batches and heads, (B, H, Lq, Lk)
  /// per batch and head. Unlike PyTorch, a 3-d mask is (H, Lq, Lk), not (B * H, Lq, Lk).
  Array mask = Array();
  /// (B, Lk) (or (Lk) for unbatched input): bool true, or a float added, for keys to ignore.
  Array key_padding_mask = Array();
  /// Each query may attend only keys at or before its own position. With a KV cache (Lk > Lq) the
  /// queries are the last Lq positions: query i sees keys j <= i + Lk - Lq. Combines with `mask`.
  bool causal = false;
  bool need_weights = false;         // also return the attention weights (after dropout)
  bool average_attn_weights = true;  // weights averaged over heads (B, Lq, Lk), else (B, H, Lq, Lk)
  Array dropout_key = Array();       // key for attention dropout; random::next_key() when empty
};

struct AttentionOutput {
  Array output;   // (B, Lq, E)
  Array weights;  // empty unless need_weights
};

/// Projected keys and values of the positions seen so far, one entry per layer, each
/// (B, H, L, head_dim). A plain value: copying it copies Array handles, not data.
struct KVCache {
  struct Entry {
    Array keys, values;
  };
  std::vector<Entry> layers;
  /// Cached positions of `layer`: 0 for a layer not seen yet.
  int64_t length(size_t layer = 0) const;
};

struct CachedAttentionOutput {
  Array output;   // (B, Lq, E)
  Array weights;  // empty unless need_weights
  KVCache cache;  // the cache passed in with `layer`'s entry extended by this call's keys and values
};

class MultiHeadAttention : public Module {
 public:
  /// PyTorch's init: in_proj (or q/k/v_proj) weights xavier-uniform, out_proj.weight uniform on
  /// +-1/sqrt(E), biases zero. Throws ValueError unless embed_dim, num_heads, kdim, vdim >= 1,
  /// num_heads divides embed_dim and 0 <= dropout < 1.
  MultiHeadAttention(int64_t embed_dim, int64_t num_heads, MultiHeadAttentionOptions options = {});

  /// query (B, Lq, E), key (B, Lk, kdim), value (B, Lk, vdim) -> (B, Lq, E). Unbatched 2-d
  /// inputs (L, features) give (Lq, E). Throws ShapeError for mismatched shapes or masks,
  /// DtypeError for non-float inputs or a mask that is neither bool nor float.
  Array operator()(const Array& query, const Array& key, const Array& value,
                   const AttentionArgs& args = {}) const;
  /// The same, with the attention weights when args.need_weights.
  AttentionOutput forward(const Array& query, const Array& key, const Array& value,
                          const AttentionArgs& args = {}) const;
  /// Incremental decoding: the keys and values of this call are projected, appended to
  /// cache.layers[layer] (created when absent), and the queries attend all of them. With
  /// args.causal, feeding a sequence in pieces gives the outputs of one causal pass over all of it.
  /// key_padding_mask, if given, covers all Lk = cached + new positions. Throws ShapeError when
  /// the cached entry's batch, heads or head_dim differ.
  CachedAttentionOutput forward(const Array& query, const Array& key, const Array& value,
                                const KVCache& cache, size_t layer = 0, const AttentionArgs& args = {}) const;

  int64_t embed_dim() const { return embed_; }
  int64_t num_heads() const { return heads_; }
  int64_t head_dim() const { return embed_ / heads_; }
  int64_t kdim() const { return kdim_; }
  int64_t vdim() const { return vdim_; }

  ParameterInfo in_proj_weight{this, "in_proj_weight"};  // (3E, E); only when kdim = vdim = E
  ParameterInfo q_proj_weight{this, "q_proj_weight"};    // (E, E); only when kdim or vdim != E
  ParameterInfo k_proj_weight{this, "k_proj_weight"};    // (E, kdim)
  ParameterInfo v_proj_weight{this, "v_proj_weight"};    // (E, vdim)
  ParameterInfo in_proj_bias{this, "in_proj_bias"};      // (3E); absent without bias
  ModuleInfo<Linear> out_proj;                           // E -> E

 private:
  struct Heads {
    Array q, k, v;  // (B, H, L, D)
  };
  Heads project(const Array& query, const Array& key, const Array& value) const;
  AttentionOutput attend(const Heads& h, const AttentionArgs& args, bool unbatched) const;
  void check_inputs(const Array& query, const Array& key, const Array& value) const;

  int64_t embed_, heads_, kdim_, vdim_;
  double dropout_;
};

}  // namespace kiln::nn
