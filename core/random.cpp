// Random numbers: threefry-2x32 keys and counter-based primitives (core/ops/random_primitives.h);
// distributions are those primitives plus ordinary ops, as in JAX.
#include "kiln/core/random.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <mutex>
#include <numbers>

#include "kiln/core/cpu/dispatch.h"
#include "kiln/core/cpu/parallel.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/index.h"
#include "kiln/core/ops/random_primitives.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/unary.h"
#include "kiln/core/transforms/internal_key_draws.h"
#include "kiln/core/vulkan/gpu.h"

namespace kiln {
namespace detail {
namespace {

uint64_t bits64(Threefry2x32 key, uint64_t index) { return threefry_bits64(key, index); }

// The largest T strictly below `high` (high itself when rounding to T lands below it).
template <class T>
T largest_below(double high) {
  const T h = static_cast<T>(high);
  if (static_cast<double>(h) < high) return h;
  if constexpr (std::is_floating_point_v<T>) {
    return std::nextafter(h, -std::numeric_limits<T>::infinity());
  } else {  // float16 / bfloat16: step the bit pattern one unit toward -inf
    uint16_t b = h.bits;
    if ((b & 0x7fffu) == 0)
      b = 0x8001u;  // +-0 -> the smallest negative subnormal
    else if (b & 0x8000u)
      ++b;
    else
      --b;
    return T::from_bits(b);
  }
}

}  // namespace

template <class D>
void RandomOp<D>::eval_cpu(std::span<const Array> in, std::span<Array> out) const {
  Array& o = out[0];
  o.allocate();
  std::vector<uint32_t> keys(static_cast<size_t>(in[0].size()));
  gather_row_major(in[0], keys.data(), uint32);
  const int64_t n_keys = in[0].size() / 2, per = shape_size(self().sample_shape());
  if (n_keys == 0 || per == 0) return;
  char* base = static_cast<char*>(o.raw_data());
  const int64_t item = o.itemsize();
  auto key_at = [&](int64_t k) { return Threefry2x32{keys[2 * k], keys[2 * k + 1]}; };
  if constexpr (requires { D::kSequential; }) {
    parallel_for(n_keys, 1, [&](int64_t kb, int64_t ke) {
      for (int64_t k = kb; k < ke; ++k) self().fill(key_at(k), base + k * per * item, 0, per);
    });
  } else {
    // ~100 cycles per element: 4096 elements make a task worth scheduling.
    parallel_for(n_keys * per, 4096, [&](int64_t b, int64_t e) {
      for (int64_t k = b / per; k * per < e; ++k) {
        const int64_t lo = std::max(b, k * per) - k * per, hi = std::min(e, (k + 1) * per) - k * per;
        self().fill(key_at(k), base + k * per * item, lo, hi);
      }
    });
  }
}

template <class D>
void RandomOp<D>::eval_gpu(std::span<const Array> in, std::span<Array> out) const {
  if constexpr (requires { self().glsl(); })
    gpu::keyed_elementwise(self().glsl(), self().glsl_compute(), in[0], shape_size(self().sample_shape()),
                           out[0]);
  else
    throw NotImplemented::of(self().name(), "no GPU kernel");  // RandomPermutation overrides eval_gpu
}

template <class D>
std::vector<Array> RandomOp<D>::vjp(const VjpArgs& a) const {
  std::vector<Array> out;
  for (int arg : a.argnums) out.push_back(zeros_like(a.primals[arg], this->stream()));
  return out;
}

template <class D>
std::vector<Array> RandomOp<D>::jvp(const JvpArgs& a) const {
  return {zeros(out_shape(a.primals[0].shape()), self().out_dtype(), this->stream())};
}

template <class D>
VmapResult RandomOp<D>::vmap(const VmapArgs& a) const {
  if (a.axes[0] < 0) return {{apply(a.inputs[0])}, {-1}};
  // A batch of keys: one sample per key, the batch leading the output.
  return {{apply(moveaxis(a.inputs[0], a.axes[0], 0, this->stream()))}, {0}};
}

void RandomBits::fill(Threefry2x32 key, void* out, int64_t begin, int64_t end) const {
  uint32_t* o = static_cast<uint32_t*>(out);
  for (int64_t i = begin; i < end; ++i) {
    const Threefry2x32 r = threefry_block(key, static_cast<uint64_t>(i));
    o[i] = r[0] ^ r[1];
  }
}

std::string RandomBits::glsl() const { return "kiln_random_bits32(key, i)"; }

void RandomKeys::fill(Threefry2x32 key, void* out, int64_t begin, int64_t end) const {
  uint32_t* o = static_cast<uint32_t*>(out);
  for (int64_t row = begin / 2; 2 * row < end; ++row) {
    const Threefry2x32 r = threefry_block(key, static_cast<uint64_t>(row));
    if (2 * row >= begin) o[2 * row] = r[0];
    if (2 * row + 1 < end) o[2 * row + 1] = r[1];
  }
}

std::string RandomKeys::glsl() const { return "kiln_threefry_block(key, i >> 1)[i & 1u]"; }

void RandomUniform::fill(Threefry2x32 key, void* out, int64_t begin, int64_t end) const {
  visit_dtype<kFloatTypes>(dtype_, "uniform", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    T* o = static_cast<T*>(out);
    const C lo = static_cast<C>(static_cast<T>(low_)), top = static_cast<C>(largest_below<T>(high_));
    const C span = static_cast<C>(high_) - static_cast<C>(low_);
    for (int64_t i = begin; i < end; ++i) {
      C u;
      if constexpr (std::is_same_v<C, double>) {
        // 52 random mantissa bits: ((bits >> 12) | bits(1.0)) as double, minus 1.
        u = static_cast<double>(bits64(key, static_cast<uint64_t>(i)) >> 12) * 0x1p-52;
      } else {
        const Threefry2x32 r = threefry_block(key, static_cast<uint64_t>(i));
        u = static_cast<float>((r[0] ^ r[1]) >> 9) * 0x1p-23f;  // the float32 mantissa trick
      }
      // Rounding can carry low + span * u up to high; clamp in C to values T represents exactly,
      // so the final rounding to T stays inside [low, high).
      o[i] = static_cast<T>(std::max(std::min(u * span + lo, top), lo));
    }
  });
}

// The constants as exact bit patterns (GLSL has no hexadecimal float literals).
std::string RandomUniform::glsl() const {
  return visit_dtype<kFloatTypes>(dtype_, "uniform", [&](auto tag) -> std::string {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const C lo = static_cast<C>(static_cast<T>(low_)), top = static_cast<C>(largest_below<T>(high_));
    const C span = static_cast<C>(high_) - static_cast<C>(low_);
    if constexpr (std::is_same_v<C, double>) {
      auto literal = [](double v) {
        const uint64_t b = std::bit_cast<uint64_t>(v);
        return fmt::format("packDouble2x32(uvec2({}u, {}u))", static_cast<uint32_t>(b), b >> 32);
      };
      return fmt::format("kiln_uniform_double(key, i, {}, {}, {})", literal(lo), literal(span), literal(top));
    } else {
      auto literal = [](float v) { return fmt::format("uintBitsToFloat({}u)", std::bit_cast<uint32_t>(v)); };
      return fmt::format("kiln_uniform_float(key, i, {}, {}, {})", literal(lo), literal(span), literal(top));
    }
  });
}

void RandomInt::fill(Threefry2x32 key, void* out, int64_t begin, int64_t end) const {
  visit_dtype<kIntTypes>(dtype_, "randint", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out);
    const uint64_t low = static_cast<uint64_t>(low_), range = static_cast<uint64_t>(high_) - low;
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t offset = multiply_high(bits64(key, static_cast<uint64_t>(i)), range);
      o[i] = static_cast<T>(static_cast<int64_t>(low + offset));
    }
  });
}

// low + multiply_high(bits64, range) in 64-bit words; the low word converts to the narrower types
// as the CPU's cast of the int64 does (modulo 2^bits).
std::string RandomInt::glsl() const {
  const uint64_t low = static_cast<uint64_t>(low_), range = static_cast<uint64_t>(high_) - low;
  const std::string sum = fmt::format(
      "kiln_add64(uvec2({}u, {}u), kiln_multiply_high64(kiln_random_bits64(key, i), uvec2({}u, {}u)))",
      low >> 32, static_cast<uint32_t>(low), range >> 32, static_cast<uint32_t>(range));
  if (dtype_ == int64 || dtype_ == uint64)
    return fmt::format("{}(packUint2x32(({}).yx))", dtype_ == int64 ? "int64_t" : "uint64_t", sum);
  return fmt::format("({}).y", sum);
}

void RandomPermutation::eval_gpu(std::span<const Array> in, std::span<Array> out) const {
  gpu::random_permutation(in[0], n_, out[0]);
}

void RandomPermutation::fill(Threefry2x32 key, void* out, int64_t begin, int64_t end) const {
  int32_t* o = static_cast<int32_t*>(out);
  for (int64_t i = begin; i < end; ++i) o[i] = static_cast<int32_t>(i);
  for (int64_t i = end - 1; i > begin; --i) {
    const int64_t j = begin + static_cast<int64_t>(multiply_high(bits64(key, static_cast<uint64_t>(i)),
                                                                 static_cast<uint64_t>(i - begin + 1)));
    std::swap(o[i], o[j]);
  }
}

template class RandomOp<RandomBits>;
template class RandomOp<RandomKeys>;
template class RandomOp<RandomUniform>;
template class RandomOp<RandomInt>;
template class RandomOp<RandomPermutation>;

}  // namespace detail

namespace random {
namespace {

using detail::check_float_dtype;
using detail::check_key;
using detail::check_shape;
using detail::int_limits;

template <class P, class... A>
Array build(const Array& key, StreamOrDevice s, A&&... params) {
  auto p = std::make_shared<P>(to_stream(s), std::forward<A>(params)...);
  Shape shape = p->out_shape(key.shape());
  const Dtype dtype = p->out_dtype();
  return Array::make(std::move(shape), dtype, std::move(p), {key});
}

// True when `v` rounds to a finite value of the float dtype `t`.
bool finite_in(double v, Dtype t) {
  return detail::visit_dtype<kFloatTypes>(t, "uniform", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return std::isfinite(static_cast<double>(static_cast<T>(v)));
  });
}

// The bounds an integer dtype can hold, as int64 (uint32's top fits too).

}  // namespace

Array key(uint64_t seed) {
  const std::vector<uint32_t> words{static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(seed)};
  return Array(words, {2});
}

namespace {
struct DefaultKeys {
  std::mutex mutex;
  uint64_t seed = 0, count = 0;
};
DefaultKeys& default_keys() {
  static DefaultKeys keys;
  return keys;
}
// splitmix64: distinct (seed, count) give well-mixed, distinct 64-bit key seeds.
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

Array next_key() {
  if (const detail::KeyDrawScope* scope = detail::KeyDrawScope::current()) return scope->draw();
  DefaultKeys& d = default_keys();
  std::lock_guard lock(d.mutex);
  return key(mix(mix(d.seed) ^ d.count++));
}

void seed(uint64_t s) {
  DefaultKeys& d = default_keys();
  std::lock_guard lock(d.mutex);
  d.seed = s;
  d.count = 0;
}

DefaultKeyState default_key_state() {
  DefaultKeys& d = default_keys();
  std::lock_guard lock(d.mutex);
  return {d.seed, d.count};
}

void set_default_key_state(DefaultKeyState state) {
  DefaultKeys& d = default_keys();
  std::lock_guard lock(d.mutex);
  d.seed = state.seed;
  d.count = state.count;
}

Array split(const Array& key, int num, StreamOrDevice s) {
  check_key("split", key);
  if (num < 0) throw ValueError::of("split", "num must be >= 0", "got {}", num);
  return build<detail::RandomKeys>(key, s, int64_t{num});
}

std::vector<Array> split_keys(const Array& key, int num, StreamOrDevice s) {
  const Array keys = split(key, num, s);
  std::vector<Array> out;
  for (int64_t i = 0; i < num; ++i) out.push_back(reshape(slice(keys, {i, 0}, {i + 1, 2}, {}, s), {2}, s));
  return out;
}

Array bits(const Shape& shape, const Array& key, StreamOrDevice s) {
  check_key("bits", key);
  check_shape("bits", shape);
  return build<detail::RandomBits>(key, s, shape);
}

Array uniform(const Shape& shape, const Array& key, double low, double high, Dtype dtype, StreamOrDevice s) {
  check_key("uniform", key);
  check_shape("uniform", shape);
  check_float_dtype("uniform", dtype);
  if (!finite_in(low, dtype) || !finite_in(high, dtype))
    throw ValueError::of("uniform", "bounds must be finite in the dtype", "low {}, high {} for {}", low, high,
                         dtype_name(dtype));
  if (!(low < high)) throw ValueError::of("uniform", "low must be below high", "low {}, high {}", low, high);
  return build<detail::RandomUniform>(key, s, shape, dtype, low, high);
}

Array normal(const Shape& shape, const Array& key, double mean, double stddev, Dtype dtype,
             StreamOrDevice s) {
  check_key("normal", key);
  check_shape("normal", shape);
  check_float_dtype("normal", dtype);
  if (!std::isfinite(mean) || !std::isfinite(stddev) || stddev < 0)
    throw ValueError::of("normal", "mean must be finite and stddev finite and >= 0", "mean {}, stddev {}",
                         mean, stddev);
  // As JAX: sqrt(2) * erfinv(u) with u uniform on (-1, 1). The 16-bit floats are computed in
  // float32 and rounded once at the end.
  const Dtype t = dtype == float64 ? float64 : float32;
  const double lo = t == float64 ? std::nextafter(-1.0, 0.0) : std::nextafter(-1.0f, 0.0f);
  Array z = multiply(erfinv(uniform(shape, key, lo, 1.0, t, s), s), std::numbers::sqrt2 * stddev, s);
  if (mean != 0.0) z = add(z, mean, s);
  return astype(z, dtype, s);
}

Array bernoulli(const Shape& shape, const Array& key, double p, StreamOrDevice s) {
  check_key("bernoulli", key);
  check_shape("bernoulli", shape);
  if (!(p >= 0.0 && p <= 1.0)) throw ValueError::of("bernoulli", "p must be in [0, 1]", "got {}", p);
  return less(uniform(shape, key, 0.0, 1.0, float32, s), p, s);
}

Array randint(const Shape& shape, const Array& key, int64_t low, int64_t high, Dtype dtype,
              StreamOrDevice s) {
  check_key("randint", key);
  check_shape("randint", shape);
  if (!is_integral(dtype))
    throw DtypeError::of("randint", "dtype must be an integer type", "got {}", dtype_name(dtype));
  if (low >= high) throw ValueError::of("randint", "low must be below high", "low {}, high {}", low, high);
  const auto [min, max] = int_limits(dtype);
  if (low < min || high - 1 > max)
    throw ValueError::of("randint", "range does not fit the dtype", "[{}, {}) for {}", low, high,
                         dtype_name(dtype));
  return build<detail::RandomInt>(key, s, shape, dtype, low, high);
}

Array categorical(const Array& logits, const Array& key, int axis, StreamOrDevice s) {
  check_key("categorical", key);
  if (!logits.valid()) throw ValueError::of("categorical", "logits are an empty (default-constructed) array");
  if (logits.ndim() == 0)
    throw ShapeError::of("categorical", "logits need at least one dimension", "shape ()");
  const int ax = normalize_axis("categorical", axis, logits.ndim());
  if (logits.shape(ax) == 0)
    throw ShapeError::of("categorical", "no categories along the axis", "logits {}, axis {}",
                         shape_str(logits.shape()), axis);
  // Gumbel-max: argmax(logits + g), g = -log(-log(u)), u uniform on [tiny, 1) so both logs are finite.
  const Dtype t = logits.dtype() == float64 ? float64 : float32;
  const double tiny = t == float64 ? std::numeric_limits<double>::min() : std::numeric_limits<float>::min();
  const Array u = uniform(logits.shape(), key, tiny, 1.0, t, s);
  const Array gumbel = negative(log(negative(log(u, s), s), s), s);
  return argmax(add(astype(logits, t, s), gumbel, s), ax, false, s);
}

Array permutation(int64_t n, const Array& key, StreamOrDevice s) {
  check_key("permutation", key);
  if (n < 0 || n > std::numeric_limits<int32_t>::max())
    throw ValueError::of("permutation", "n must be in [0, 2^31)", "got {}", n);
  return build<detail::RandomPermutation>(key, s, n);
}

Array permutation(const Array& x, const Array& key, StreamOrDevice s) {
  check_key("permutation", key);
  if (!x.valid()) throw ValueError::of("permutation", "the array is empty (default-constructed)");
  if (x.ndim() == 0) throw ShapeError::of("permutation", "x needs at least one dimension", "shape ()");
  return take(x, permutation(x.shape(0), key, s), 0, s);
}

}  // namespace random
}  // namespace kiln

namespace kiln::detail {
namespace {
thread_local KeyDrawScope* innermost_key_scope = nullptr;
}  // namespace

KeyDrawScope::KeyDrawScope(std::function<Array()> draw)
    : draw_(std::move(draw)), previous_(innermost_key_scope) {
  innermost_key_scope = this;
}
KeyDrawScope::~KeyDrawScope() { innermost_key_scope = previous_; }
KeyDrawScope* KeyDrawScope::current() { return innermost_key_scope; }

}  // namespace kiln::detail
