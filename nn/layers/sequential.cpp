#include "kiln/nn/layers/sequential.h"

#include "kiln/core/error.h"

namespace kiln::nn {

Lambda::Lambda(Fn fn) : fn_(std::move(fn)) {
  if (!fn_) throw ValueError::of("Lambda", "the function is empty");
}

Array Sequential::operator()(const Array& x) const {
  Array y = x;
  for (const auto& e : entries_) y = e->call(y);
  return y;
}

const Sequential::Entry& Sequential::entry(size_t i) const {
  if (i >= entries_.size())
    throw KeyError::of("Sequential", "index out of range", "index {} of {} elements", i, entries_.size());
  return *entries_[i];
}

void Sequential::throw_wrong_type(size_t i) const {
  throw ValueError::of("Sequential", "element is not of the requested type", "element {}", i);
}

}  // namespace kiln::nn
