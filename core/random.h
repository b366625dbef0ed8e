#pragma once
// Counter-based random numbers (threefry-2x32, as JAX): the same key gives the same numbers on
// any thread, any run and any device. Keys are uint32 arrays of shape (2,).
#include <optional>

#include "kiln/core/array.h"

namespace kiln::random {

// Every function below throws DtypeError/ShapeError (both ValueError) when `key` is not a uint32
// array of shape (2,), and ShapeError for a negative dimension in `shape`. Element i of a sample
// depends only on (key, i): bits, split and float32/float64 uniform follow JAX's partitionable
// threefry layout (jax_threefry_partitionable, the default since JAX 0.5).

/// A key from a seed: [seed >> 32, seed & 0xffffffff], as jax.random.PRNGKey.
Array key(uint64_t seed);
/// The next key of the process-wide default sequence, for code that is not handed a key (a
/// layer's default initialization). seed(s) restarts the sequence; keys follow the order of the
/// calls, so on several threads that order is the scheduler's: pass explicit keys where
/// reproducibility across threads matters. Thread-safe.
Array next_key();
/// Restarts the default key sequence from `s` (the sequence starts from seed 0 at load).
void seed(uint64_t s);

/// Where the default key sequence stands: the seed of the last seed() call (0 before any) and the
/// number of next_key() calls since. Store it in a checkpoint; set_default_key_state(state) makes
/// next_key() continue with exactly the keys that would have come.
struct DefaultKeyState {
  uint64_t seed = 0;
  uint64_t count = 0;
  bool operator==(const DefaultKeyState&) const = default;
};
/// The default key sequence's state now. Thread-safe.
DefaultKeyState default_key_state();
/// Continues the default key sequence from `state` (seed(s) is set_default_key_state({s, 0})).
/// Thread-safe.
void set_default_key_state(DefaultKeyState state);

/// `num` independent keys, shape (num, 2) (JAX's split). Throws ValueError if num < 0.
Array split(const Array& key, int num = 2, StreamOrDevice s = {});
/// The rows of split(key, num) as separate (2,) keys: `auto ks = split_keys(k); uniform(.., ks[0])`.
std::vector<Array> split_keys(const Array& key, int num = 2, StreamOrDevice s = {});
/// Raw uint32 bits of the given shape.
Array bits(const Shape& shape, const Array& key, StreamOrDevice s = {});
/// Uniform on [low, high) in a float dtype (results never round up to `high`). Throws ValueError
/// unless low < high and both are finite in `dtype`, DtypeError for a non-float dtype.
Array uniform(const Shape& shape, const Array& key, double low = 0.0, double high = 1.0,
              Dtype dtype = float32, StreamOrDevice s = {});
/// Normal with the given mean and standard deviation: sqrt(2) * erfinv(u), u uniform on (-1, 1),
/// as JAX. float16/bfloat16 are computed in float32. Throws ValueError for stddev < 0 or a
/// non-finite parameter, DtypeError for a non-float dtype.
Array normal(const Shape& shape, const Array& key, double mean = 0.0, double stddev = 1.0,
             Dtype dtype = float32, StreamOrDevice s = {});
/// bool, true with probability p (uniform float32 < p). Throws ValueError unless 0 <= p <= 1.
Array bernoulli(const Shape& shape, const Array& key, double p = 0.5, StreamOrDevice s = {});
/// Integers uniform on [low, high) in an integer dtype (64 random bits per element, multiply-high:
/// bias below (high - low) / 2^64). Throws ValueError unless low < high and the range fits the dtype.
Array randint(const Shape& shape, const Array& key, int64_t low, int64_t high, Dtype dtype = int32,
              StreamOrDevice s = {});
/// Samples class indices (int32) from unnormalized log-probabilities along `axis` (Gumbel-max:
/// argmax(logits + gumbel noise)); the result drops `axis`. Throws ShapeError for 0-d logits, a
/// bad axis or an empty axis.
Array categorical(const Array& logits, const Array& key, int axis = -1, StreamOrDevice s = {});
/// A random permutation of 0..n-1 (int32), by a Fisher-Yates shuffle. Throws ValueError unless
/// 0 <= n < 2^31.
Array permutation(int64_t n, const Array& key, StreamOrDevice s = {});
/// `x` shuffled along axis 0. Throws ShapeError for a 0-d x.
Array permutation(const Array& x, const Array& key, StreamOrDevice s = {});

}  // namespace kiln::random
