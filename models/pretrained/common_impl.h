#pragma once
// Internal to models/pretrained: what every architecture there shares (attention, key matching).
#include <string_view>

#include "kiln/core/array.h"

namespace kiln::models::detail {

inline bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}
inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

/// softmax(scale * q k^T, masked) v for q (B, H, Lq, D), k and v (B, H, Lk, D): with `causal`,
/// query i sees keys j <= i + Lk - Lq (the queries are the last Lq positions); `mask` (empty:
/// none) is bool, true where a key is hidden, broadcast to (B, H, Lq, Lk). One fused node
/// (scaled_dot_product_attention) unless `dropout` > 0 drops attention weights (training).
Array attend(const Array& q, const Array& k, const Array& v, double scale, bool causal, const Array& mask,
             double dropout);

/// Positions and hidden keys from an attention mask, as transformers' generate derives them.
struct PaddedPositions {
  Array positions;  // (B, T) int32: real tokens before each new one (0 for padding)
  Array hidden;     // (B, 1, T, Lk) bool: keys that are padding, but for a query's own position
};
/// `mask` (B, Lk) covers the Lk = offset + T positions so far, nonzero for real tokens (left
/// padding puts a prompt's pads first). A padding query keeps its own key: seeing none, it would
/// give NaN, and NaN values poison later layers even where they are masked out. Throws ShapeError
/// for another shape, DtypeError for a float mask. `op` names the caller in errors.
PaddedPositions padded_positions(const char* op, const Array& mask, int64_t batch, int64_t offset, int64_t t);

/// (B, T, H * D) -> (B, H, T, D).
Array split_heads(const Array& x, int64_t heads);
/// (B, H, T, D) -> (B, T, H * D).
Array merge_heads(const Array& x);

}  // namespace kiln::models::detail
