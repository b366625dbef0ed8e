#include "support/reference.h"

namespace kiln::test {

void for_each_index(const Shape& shape, const std::function<void(const Idx&)>& f) {
  if (shape_size(shape) == 0) return;
  Idx i(shape.size(), 0);
  for (;;) {
    f(i);
    int d = static_cast<int>(shape.size()) - 1;
    for (; d >= 0; --d) {
      if (++i[d] < shape[d]) break;
      i[d] = 0;
    }
    if (d < 0) return;
  }
}

int64_t flat(const Shape& shape, const Idx& i) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + i[d];
  return f;
}

}  // namespace kiln::test
