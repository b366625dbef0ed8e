#pragma once
// Text generation for any models::CausalLM: batched prompts of different lengths (left-padded,
// with an attention mask, so each row decodes as it would alone), a KV cache, greedy decoding or
// sampling with temperature, top-k, top-p and a repetition penalty, stop tokens and a per-token
// callback for streaming.
//
//   auto lm = models::causal_lm_from_pretrained("TinyLlama");
//   auto out = models::generate(*lm, {{1, 450, 4996}, {1, 15043}},
//                               {.max_new_tokens = 64, .temperature = 0.7, .top_p = 0.9,
//                                .stop_tokens = {2}, .key = random::key(0)});
//   out.tokens[0];                                    // the first prompt's new tokens
#include <cstdint>
#include <functional>
#include <vector>

#include "kiln/models/pretrained/pretrained.h"

namespace kiln::models {

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  /// Logits are divided by it before sampling; 0 picks the most likely token (greedy: the first on
  /// ties) and needs no key.
  double temperature = 1.0;
  /// Sample among the top_k most likely tokens only (0: all).
  int64_t top_k = 0;
  /// Nucleus sampling: the most likely tokens whose probabilities first reach top_p (1: all).
  double top_p = 1.0;
  /// CTRL's penalty on tokens already in the row (prompt included): a positive logit is divided by
  /// it, a negative one multiplied (1: none).
  double repetition_penalty = 1.0;
  /// A row ends when it produces one of these (which is kept as its last token).
  std::vector<int32_t> stop_tokens = {};
  /// Fills shorter prompts on the left (never attended).
  int32_t pad_id = 0;
  /// Required when temperature > 0: one draw per step from it, so equal keys give equal outputs.
  Array key = Array();
  /// Called after every step with its index and each row's new token (-1 for rows that ended
  /// earlier); returning false ends generation after that step.
  std::function<bool(int64_t step, const std::vector<int32_t>& tokens)> on_token = nullptr;
};

struct GenerateResult {
  /// Each prompt's new tokens, its stop token included.
  std::vector<std::vector<int32_t>> tokens;
  /// Whether each row ended on a stop token (else max_new_tokens or the callback ended it).
  std::vector<bool> stopped;
};

/// Generates from every prompt at once (one forward pass of the batch per token, keys and values
/// cached). Throws ValueError for no prompts, an empty prompt, a token outside [0, vocab), an
/// option out of range (max_new_tokens < 0, temperature < 0, top_k < 0, top_p outside (0, 1],
/// repetition_penalty <= 0), a missing key when sampling, and a prompt that with max_new_tokens
/// would pass the model's position limit (max_positions()), naming both.
GenerateResult generate(const CausalLM& model, const std::vector<std::vector<int32_t>>& prompts,
                        const GenerateOptions& options = {});

}  // namespace kiln::models
