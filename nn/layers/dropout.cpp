#include "kiln/nn/layers/dropout.h"

#include "kiln/core/error.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/random.h"

namespace kiln::nn {

namespace {
void check_p(const char* op, double p) {
  if (!(p >= 0 && p < 1)) throw ValueError::of(op, "p must be in [0, 1)", "got {}", p);
}
}  // namespace

Array dropout(const Array& x, double p, const Array& key) {
  check_p("dropout", p);
  if (!x.valid()) throw ValueError::of("dropout", "input is an empty Array");
  if (!is_floating(x.dtype()))
    throw DtypeError::of("dropout", "input must be floating point", "got {}", dtype_name(x.dtype()));
  if (p == 0) return x;
  const Array keep = random::bernoulli(x.shape(), key.valid() ? key : random::next_key(), 1.0 - p);
  return where(keep, x * (1.0 / (1.0 - p)), 0.0);
}

Dropout::Dropout(double p) : p_(p) { check_p("Dropout", p); }

Array Dropout::operator()(const Array& x) const { return (*this)(x, Array()); }

Array Dropout::operator()(const Array& x, const Array& key) const {
  if (!is_training() || p_ == 0) return x;
  return dropout(x, p_, key);
}

}  // namespace kiln::nn
