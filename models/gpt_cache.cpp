// models::GptCache: per-layer key/value storage written in place, one step at a time.
#include <algorithm>

#include "kiln/core/error.h"
#include "kiln/core/ops/creation.h"
#include "kiln/core/ops/shape.h"
#include "kiln/models/gpt.h"

namespace kiln::models {
namespace {

constexpr const char* kName = "GptCache::append";

// Positions 0..n of the storage's third axis.
Array first_positions(const Array& storage, int64_t n) {
  return slice(storage, {Slice{}, Slice{}, Slice{0, n}});
}

}  // namespace

int64_t GptCache::capacity() const {
  return storage_.empty() || !storage_[0].keys.valid() ? 0 : storage_[0].keys.shape(2);
}

std::vector<nn::KVCache::Entry> GptCache::layers() const {
  std::vector<nn::KVCache::Entry> out;
  out.reserve(storage_.size());
  for (const auto& s : storage_) {
    if (!s.keys.valid() || length_ == 0) {
      out.push_back({});
      continue;
    }
    out.push_back({first_positions(s.keys, length_), first_positions(s.values, length_)});
  }
  return out;
}

std::vector<Array> GptCache::storage() const {
  std::vector<Array> out;
  for (const auto& s : storage_)
    if (s.keys.valid()) {
      out.push_back(s.keys);
      out.push_back(s.values);
    }
  return out;
}

nn::KVCache::Entry GptCache::append(size_t layer, const Array& keys, const Array& values, int64_t limit) {
  if (!keys.valid() || !values.valid()) throw ValueError::of(kName, "keys or values are an empty Array");
  if (keys.ndim() != 4 || keys.shape() != values.shape())
    throw ShapeError::of(kName, "keys and values must be (B, H, t, D) of one shape", "keys {}, values {}",
                         shape_str(keys.shape()), shape_str(values.shape()));
  if (layer >= storage_.size()) storage_.resize(layer + 1);
  nn::KVCache::Entry& s = storage_[layer];
  const int64_t t = keys.shape(2), len = length_ + t;
  if (s.keys.valid()) {
    const Shape& held = s.keys.shape();
    if (held[0] != keys.shape(0) || held[1] != keys.shape(1) || held[3] != keys.shape(3))
      throw ShapeError::of(kName, "keys differ in batch, heads or head_dim from the cached ones",
                           "layer {} holds {}, got {}", layer, shape_str(held), shape_str(keys.shape()));
  }
  const int64_t capacity = s.keys.valid() ? s.keys.shape(2) : 0;
  if (len > capacity) {
    // Doubling keeps the copies of a long decode linear in its length.
    int64_t grown = std::max({len, 2 * capacity, kMinCapacity});
    if (limit > 0) grown = std::min(grown, std::max(limit, len));
    auto regrow = [&](const Array& old, const Array& fresh) {
      Shape shape = fresh.shape();
      shape[2] = grown;
      Array storage = zeros(shape, old.valid() ? old.dtype() : fresh.dtype());
      if (old.valid() && length_ > 0)
        storage = slice_update(storage, first_positions(old, length_), {Slice{}, Slice{}, Slice{0, length_}});
      return storage;
    };
    s = {regrow(s.keys, keys), regrow(s.values, values)};
  }
  // The old handles are replaced, so at evaluation the update is the storage's only reader and
  // writes into its buffer.
  const std::vector<Slice> at{Slice{}, Slice{}, Slice{length_, len}};
  s.keys = slice_update(s.keys, keys, at);
  s.values = slice_update(s.values, values, at);
  return {first_positions(s.keys, len), first_positions(s.values, len)};
}

void GptCache::commit(int64_t t, int64_t batch) {
  length_ += t;
  batch_ = batch;
}

}  // namespace kiln::models
