// Slots point at their owner, so modules are neither copied nor moved.
// expect: use of deleted function
#include <kiln/nn/layers/linear.h>

int main() {
  kiln::nn::Linear a(2, 2);
#ifdef KILN_MISUSE
  kiln::nn::Linear b = std::move(a);
#endif
  return a.parameters().size() == 2 ? 0 : 1;
}
