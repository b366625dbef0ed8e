// Iteration over an array's first axis (Array::begin/end): each element a lazy view.
#include "kiln/core/array.h"
#include "kiln/core/ops/shape.h"

namespace kiln {

Array Array::Iterator::operator*() const {
  Shape start(a_->ndim(), 0), stop = a_->shape();
  start[0] = i_;
  stop[0] = i_ + 1;
  return squeeze(slice(*a_, start, stop), 0);
}

Array::Iterator Array::begin() const {
  check_valid("iterate");
  if (ndim() == 0) throw ValueError::of("iterate", "a 0-d array has no first axis to iterate over");
  return Iterator(this, 0);
}

Array::Iterator Array::end() const {
  check_valid("iterate");
  if (ndim() == 0) throw ValueError::of("iterate", "a 0-d array has no first axis to iterate over");
  return Iterator(this, shape(0));
}

}  // namespace kiln
