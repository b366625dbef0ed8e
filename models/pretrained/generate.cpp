#include "kiln/models/pretrained/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kiln/core/error.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/random.h"

namespace kiln::models {

namespace {

constexpr const char* kName = "generate";

void check(const CausalLM& model, const std::vector<std::vector<int32_t>>& prompts,
           const GenerateOptions& o) {
  if (prompts.empty()) throw ValueError::of(kName, "no prompts");
  size_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) throw ValueError::of(kName, "a prompt is empty", "prompt {}", i);
    for (int32_t t : prompts[i])
      if (t < 0 || t >= model.vocab_size())
        throw ValueError::of(kName, "a prompt token is outside the vocabulary",
                             "prompt {}: token {}, vocab {}", i, t, model.vocab_size());
    longest = std::max(longest, prompts[i].size());
  }
  if (o.max_new_tokens < 0)
    throw ValueError::of(kName, "max_new_tokens must be >= 0", "got {}", o.max_new_tokens);
  const auto total = static_cast<int64_t>(longest) + o.max_new_tokens;
  if (total > model.max_positions())
    throw ValueError::of(kName, "the prompt and the new tokens pass the model's position limit",
                         "{} prompt positions (the longest) + {} new tokens > max_positions {}", longest,
                         o.max_new_tokens, model.max_positions());
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw ValueError::of(kName, "temperature must be finite and >= 0 (0: greedy)", "got {}", o.temperature);
  if (o.top_k < 0) throw ValueError::of(kName, "top_k must be >= 0 (0: no limit)", "got {}", o.top_k);
  if (!(o.top_p > 0 && o.top_p <= 1))
    throw ValueError::of(kName, "top_p must be in (0, 1]", "got {}", o.top_p);
  if (!(o.repetition_penalty > 0) || !std::isfinite(o.repetition_penalty))
    throw ValueError::of(kName, "repetition_penalty must be finite and > 0 (1: none)", "got {}",
                         o.repetition_penalty);
  if (o.temperature > 0 && !o.key.valid())
    throw ValueError::of(
        kName, "sampling needs a key",
        "temperature {}: pass .key = random::key(seed), or .temperature = 0 for greedy decoding",
        o.temperature);
}

// One row's next token from its logits, as the options say; u in [0, 1) drives the draw.
int32_t pick(std::vector<double>& l, const std::vector<bool>& seen, const GenerateOptions& o, double u) {
  const auto vocab = static_cast<int64_t>(l.size());
  if (o.repetition_penalty != 1)
    for (int64_t v = 0; v < vocab; ++v)
      if (seen[v]) l[v] = l[v] > 0 ? l[v] / o.repetition_penalty : l[v] * o.repetition_penalty;
  if (o.temperature == 0) return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  // Most likely first; ties keep the lower id first, so the choice does not depend on the sort.
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  const int64_t k = o.top_k > 0 ? std::min(o.top_k, vocab) : vocab;
  std::vector<double> p(k);
  const double top = l[order[0]] / o.temperature;
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += p[i] = std::exp(l[order[i]] / o.temperature - top);
  int64_t keep = k;
  if (o.top_p < 1) {
    double cumulative = 0;
    for (int64_t i = 0; i < k; ++i) {
      cumulative += p[i] / sum;
      if (cumulative >= o.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (int64_t i = 0; i < keep; ++i) kept += p[i];
  double target = u * kept;
  for (int64_t i = 0; i < keep; ++i) {
    target -= p[i];
    if (target < 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace

GenerateResult generate(const CausalLM& model, const std::vector<std::vector<int32_t>>& prompts,
                        const GenerateOptions& o) {
  check(model, prompts, o);
  const auto b = static_cast<int64_t>(prompts.size());
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, static_cast<int64_t>(p.size()));
  const int64_t vocab = model.vocab_size();

  // Left-padded prompts and their mask.
  std::vector<int32_t> ids(b * longest, o.pad_id), mask(b * longest, 0);
  std::vector<std::vector<bool>> seen(b, std::vector<bool>(vocab, false));
  for (int64_t r = 0; r < b; ++r) {
    const auto& p = prompts[r];
    const int64_t pad = longest - static_cast<int64_t>(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      ids[r * longest + pad + i] = p[i];
      mask[r * longest + pad + i] = 1;
      seen[r][p[i]] = true;
    }
  }
  GenerateResult result{std::vector<std::vector<int32_t>>(b), std::vector<bool>(b, false)};
  if (o.max_new_tokens == 0) return result;
  std::vector<Array> keys;
  if (o.temperature > 0) keys = random::split_keys(o.key, static_cast<int>(o.max_new_tokens));

  GptCache cache;
  Array input(ids, {b, longest});
  Array attention(mask, {b, longest});
  std::vector<bool> done(b, false);
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    const Array logits = model.forward(input, cache, attention);
    const int64_t t = logits.shape(1);
    const Array last = astype(reshape(slice(logits, {Slice{}, Slice{t - 1, t}}), {b, vocab}), float32);
    std::vector<Array> ready = cache.storage();
    ready.push_back(last);
    eval(ready);  // one evaluation per token: the graph and the cache's stay flat
    const std::vector<float> host = last.to_vector<float>();
    std::vector<float> draws;
    if (!keys.empty()) draws = random::uniform({b}, keys[step], 0.0, 1.0, float32).to_vector<float>();
    std::vector<int32_t> next(b, -1), feed(b, o.pad_id);
    for (int64_t r = 0; r < b; ++r) {
      if (done[r]) continue;
      std::vector<double> row(host.begin() + r * vocab, host.begin() + (r + 1) * vocab);
      next[r] = pick(row, seen[r], o, draws.empty() ? 0.0 : draws[r]);
      feed[r] = next[r];
      seen[r][next[r]] = true;
      result.tokens[r].push_back(next[r]);
      if (std::find(o.stop_tokens.begin(), o.stop_tokens.end(), next[r]) != o.stop_tokens.end()) {
        done[r] = true;
        result.stopped[r] = true;
      }
    }
    const bool go_on = !o.on_token || o.on_token(step, next);
    if (!go_on || std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    input = Array(feed, {b, 1});
    attention = concatenate({attention, ones({b, 1}, int32)}, 1);
  }
  return result;
}

}  // namespace kiln::models
