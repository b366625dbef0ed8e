#pragma once
// Random primitives: counter-based generation with threefry-2x32 (internal header; tests use it for
// the known-answer vectors and the batching rule).
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>

#include "kiln/core/dtype_info.h"
#include "kiln/core/primitive.h"

namespace kiln::detail {

using Threefry2x32 = std::array<uint32_t, 2>;

/// Threefry-2x32 with 20 rounds (Salmon et al., SC'11), the hash behind JAX's threefry2x32 and
/// Random123's threefry2x32_20.
constexpr Threefry2x32 threefry2x32(Threefry2x32 key, Threefry2x32 counter) {
  constexpr int kRotations[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  const uint32_t ks[3] = {key[0], key[1], key[0] ^ key[1] ^ 0x1BD11BDAu};
  uint32_t x0 = counter[0] + ks[0], x1 = counter[1] + ks[1];
  for (int i = 0; i < 5; ++i) {
    for (int r : kRotations[i % 2]) {
      x0 += x1;
      x1 = std::rotl(x1, r);
      x1 ^= x0;
    }
    x0 += ks[(i + 1) % 3];
    x1 += ks[(i + 2) % 3] + static_cast<uint32_t>(i + 1);
  }
  return {x0, x1};
}

/// The threefry block of element `index` of a stream: the counter is the 64-bit index split into
/// (high, low) words, as JAX's partitionable threefry does (jax_threefry_partitionable).
constexpr Threefry2x32 threefry_block(Threefry2x32 key, uint64_t index) {
  return threefry2x32(key, {static_cast<uint32_t>(index >> 32), static_cast<uint32_t>(index)});
}

/// The 64-bit draw of element `index`: both threefry words, high word first (JAX's 64-bit
/// random_bits).
inline uint64_t threefry_bits64(Threefry2x32 key, uint64_t index) {
  const Threefry2x32 r = threefry_block(key, index);
  return (static_cast<uint64_t>(r[0]) << 32) | r[1];
}

/// floor(bits * range / 2^64): an integer in [0, range) with bias below range / 2^64 (Lemire).
inline uint64_t multiply_high(uint64_t bits, uint64_t range) {
  __extension__ using U128 = unsigned __int128;
  return static_cast<uint64_t>((static_cast<U128>(bits) * range) >> 64);
}

/// Base of the random primitives. Input 0 holds keys of shape (batch..., 2); every key yields one
/// sample of D::sample_shape(), so the output shape is batch + sample shape. Public ops pass one
/// key; the batch dimensions come from vmap. D provides the params, `sample_shape()`,
/// `out_dtype()`, and `fill(key, out, begin, end)` writing elements [begin, end) of one sample,
/// each a function of (key, element index) only, so any split of the work gives the same bits.
/// D may set kSequential when a sample must be filled in one call (a shuffle).
template <class D>
class RandomOp : public PrimitiveWithParams<D> {
 public:
  using PrimitiveWithParams<D>::PrimitiveWithParams;

  uint32_t traits() const override { return static_cast<uint32_t>(Trait::random); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    return {out_shape(in[0].shape())};
  }
  Shape out_shape(const Shape& key_shape) const {
    Shape s(key_shape.begin(), key_shape.end() - 1);
    const Shape sample = self().sample_shape();
    s.insert(s.end(), sample.begin(), sample.end());
    return s;
  }
  /// This primitive (same parameters) applied to `keys` of shape (batch..., 2).
  Array apply(const Array& keys) const {
    auto p = std::apply([&](const auto&... v) { return std::make_shared<D>(this->stream(), v...); },
                        self().params());
    return Array::make(out_shape(keys.shape()), self().out_dtype(), std::move(p), {keys});
  }

  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override;
  /// A generated kernel of D's `glsl()`: GLSL over `key` (uvec2) and `i` (uint, the element's index
  /// in its sample) computing one element in `glsl_compute()` (shaders/common/random.glsl).
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override;

  std::vector<Array> vjp(const VjpArgs& a) const override;
  std::vector<Array> jvp(const JvpArgs& a) const override;
  VmapResult vmap(const VmapArgs& a) const override;

 private:
  const D& self() const { return static_cast<const D&>(*this); }
};

/// Raw uint32 bits: element i is x0 ^ x1 of threefry(key, i) (JAX's 32-bit random_bits).
class RandomBits final : public RandomOp<RandomBits> {
 public:
  RandomBits(Stream s, Shape shape) : RandomOp(s), shape_(std::move(shape)) {}
  const char* name() const override { return "RandomBits"; }
  auto params() const { return std::tie(shape_); }
  const Shape& sample_shape() const { return shape_; }
  Dtype out_dtype() const { return uint32; }
  void fill(Threefry2x32 key, void* out, int64_t begin, int64_t end) const;
  std::string glsl() const;
  Dtype glsl_compute() const { return uint32; }

 private:
  const Shape shape_;
};

/// `num` keys, shape (num, 2): row i is both words of threefry(key, i) (JAX's fold-like split).
class RandomKeys final : public RandomOp<RandomKeys> {
 public:
  RandomKeys(Stream s, int64_t num) : RandomOp(s), num_(num) {}
  const char* name() const override { return "RandomKeys"; }
  auto params() const { return std::tie(num_); }
  Shape sample_shape() const { return {num_, 2}; }
  Dtype out_dtype() const { return uint32; }
  void fill(Threefry2x32 key, void* out, int64_t begin, int64_t end) const;
  std::string glsl() const;
  Dtype glsl_compute() const { return uint32; }

 private:
  const int64_t num_;
};

/// Floats uniform on [low, high) in `dtype`: the mantissa trick on 32 bits (64 for float64), then
/// low + (high - low) * u, clamped to [low, the largest dtype value below high].
class RandomUniform final : public RandomOp<RandomUniform> {
 public:
  RandomUniform(Stream s, Shape shape, Dtype dtype, double low, double high)
      : RandomOp(s), shape_(std::move(shape)), dtype_(dtype), low_(low), high_(high) {}
  const char* name() const override { return "RandomUniform"; }
  auto params() const { return std::tie(shape_, dtype_, low_, high_); }
  const Shape& sample_shape() const { return shape_; }
  Dtype out_dtype() const { return dtype_; }
  void fill(Threefry2x32 key, void* out, int64_t begin, int64_t end) const;
  std::string glsl() const;
  Dtype glsl_compute() const { return dtype_ == float64 ? float64 : float32; }

 private:
  const Shape shape_;
  const Dtype dtype_;
  const double low_, high_;
};

/// Integers uniform on [low, high) in an integer `dtype`, from 64 bits per element by
/// multiply-high (Lemire): the bias is below (high - low) / 2^64.
class RandomInt final : public RandomOp<RandomInt> {
 public:
  RandomInt(Stream s, Shape shape, Dtype dtype, int64_t low, int64_t high)
      : RandomOp(s), shape_(std::move(shape)), dtype_(dtype), low_(low), high_(high) {}
  const char* name() const override { return "RandomInt"; }
  auto params() const { return std::tie(shape_, dtype_, low_, high_); }
  const Shape& sample_shape() const { return shape_; }
  Dtype out_dtype() const { return dtype_; }
  void fill(Threefry2x32 key, void* out, int64_t begin, int64_t end) const;
  std::string glsl() const;
  Dtype glsl_compute() const { return size_of(dtype_) == 8 ? dtype_ : uint32; }

 private:
  const Shape shape_;
  const Dtype dtype_;
  const int64_t low_, high_;
};

/// A permutation of 0..n-1 (int32) by a Fisher-Yates shuffle whose i-th swap index comes from
/// threefry(key, i) by multiply-high: exact, O(n), no sort.
class RandomPermutation final : public RandomOp<RandomPermutation> {
 public:
  static constexpr bool kSequential = true;
  RandomPermutation(Stream s, int64_t n) : RandomOp(s), n_(n) {}
  const char* name() const override { return "RandomPermutation"; }
  auto params() const { return std::tie(n_); }
  Shape sample_shape() const { return {n_}; }
  Dtype out_dtype() const { return int32; }
  void fill(Threefry2x32 key, void* out, int64_t begin, int64_t end) const;
  /// The shuffle is sequential: one invocation per key (shaders/random/permutation.comp).
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override;

 private:
  const int64_t n_;
};

/// The argument checks of the public random ops (core/random.cpp, core/random_more.cpp).
inline void check_key(const char* op, const Array& key) {
  if (!key.valid()) throw ValueError::of(op, "the key is an empty (default-constructed) array");
  if (key.dtype() != uint32)
    throw DtypeError::of(op, "a key must be uint32 of shape (2,), as random::key makes it", "got {}",
                         dtype_name(key.dtype()));
  if (key.shape() != Shape{2})
    throw ShapeError::of(op, "a key must be uint32 of shape (2,), as random::key makes it", "got shape {}",
                         shape_str(key.shape()));
}

/// The range randint draws from for integer dtype t, as int64 (uint64's is cut at int64's maximum).
inline std::pair<int64_t, int64_t> int_limits(Dtype t) {
  const IntInfo info = iinfo(t);
  return {info.min, static_cast<int64_t>(std::min<uint64_t>(info.max, std::numeric_limits<int64_t>::max()))};
}

inline void check_shape(const char* op, const Shape& shape) {
  if (shape.size() > static_cast<size_t>(kMaxDims))
    throw ShapeError::of(op, "too many dimensions", "shape {} has more than {}", shape_str(shape), kMaxDims);
  for (int64_t d : shape)
    if (d < 0) throw ShapeError::of(op, "negative dimension", "shape {}", shape_str(shape));
}

inline void check_float_dtype(const char* op, Dtype dtype) {
  if (!is_floating(dtype)) throw DtypeError::of(op, "dtype must be floating", "got {}", dtype_name(dtype));
}

}  // namespace kiln::detail
