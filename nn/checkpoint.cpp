#include "kiln/nn/checkpoint.h"

#include "kiln/core/custom_transforms.h"
#include "kiln/core/error.h"
#include "kiln/core/random.h"
#include "kiln/nn/swap_in.h"

namespace kiln::nn {
namespace {

// A seed for fn's own key sequence, from the default sequence's state at the call (splitmix64's
// finalizer: equal states give equal seeds, neighbouring states unrelated ones).
uint64_t seed_of(const random::DefaultKeyState& s) {
  uint64_t z = s.seed ^ (s.count + 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Puts the default key sequence at `state` for a scope.
class KeysFrom {
 public:
  explicit KeysFrom(random::DefaultKeyState state) : saved_(random::default_key_state()) {
    random::set_default_key_state(state);
  }
  ~KeysFrom() { random::set_default_key_state(saved_); }
  KeysFrom(const KeysFrom&) = delete;
  KeysFrom& operator=(const KeysFrom&) = delete;

 private:
  random::DefaultKeyState saved_;
};

}  // namespace

std::vector<Array> checkpoint(Module& module, const ArrayFn& fn, const std::vector<Array>& inputs) {
  if (!fn) throw ValueError::of("nn::checkpoint", "the function is empty");
  auto slots = detail::ModuleAccess::slots(module, /*trainable_only=*/true);
  std::vector<Array> all = inputs;
  for (const auto& [key, info] : slots) all.push_back(info->value());
  (void)random::next_key();  // the call's one draw from the default sequence
  const random::DefaultKeyState keys{seed_of(random::default_key_state()), 0};
  const size_t n = inputs.size();
  ArrayFn body = [slots = std::move(slots), fn, n, keys](const std::vector<Array>& in) {
    const std::vector<Array> params(in.begin() + static_cast<std::ptrdiff_t>(n), in.end());
    const detail::SwapIn swap(slots, params);
    const KeysFrom same_draws(keys);
    return fn({in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n)});
  };
  return kiln::checkpoint(std::move(body))(all);
}

Array checkpoint(Module& module, const std::function<Array(const Array&)>& fn, const Array& x) {
  if (!fn) throw ValueError::of("nn::checkpoint", "the function is empty");
  return checkpoint(module, [fn](const std::vector<Array>& in) { return std::vector<Array>{fn(in[0])}; },
                    {x})[0];
}

}  // namespace kiln::nn
