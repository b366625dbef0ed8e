// axpby_demo: the custom primitive in use, forward, under grad and under vmap.
#include <iostream>

#include "axpby.h"

int main() {
  using namespace kiln;
  const Array x({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3});
  const Array y({10.0f, 20.0f, 30.0f}, {3});

  // Broadcasting: y is added to every row of x. The node records its primitive until it is
  // evaluated (evaluation detaches the graph), so look at it first.
  const Array z = axpby_ext::axpby(x, y, 2.0, 0.5);
  std::cout << "primitive: ";
  z.primitive()->print(std::cout);  // Axpby(2, 0.5)
  std::cout << "\naxpby(x, y, 2, 0.5) =\n" << z << "\n";

  // The vjp rule sums the broadcast cotangent back to y's shape: d sum(z) / dy = 0.5 * 2 rows.
  auto loss = [](const std::vector<Array>& a) {
    return std::vector<Array>{sum(axpby_ext::axpby(a[0], a[1], 2.0, 0.5))};
  };
  const auto grads = grad(loss, {0, 1})({x, y});
  std::cout << "d/dx = " << grads[0] << "\nd/dy = " << grads[1] << "\n";

  // The batching rule: one call over a batch of x rows, y shared (in_axes -1).
  auto f = [](const std::vector<Array>& a) {
    return std::vector<Array>{axpby_ext::axpby(a[0], a[1], 1.0, -1.0)};
  };
  std::cout << "vmap = " << vmap(f, {0, -1})({x, y})[0] << "\n";
  return 0;
}
