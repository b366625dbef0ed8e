// A MaterializedModule offers no way to change its parameters: update() is non-const.
// expect: discards qualifiers|no match for
#include <kiln/nn/layers/linear.h>
#include <kiln/nn/materialized_module.h>

int main() {
  kiln::nn::MaterializedModule<kiln::nn::Linear> frozen(std::make_unique<kiln::nn::Linear>(2, 2));
#ifdef KILN_MISUSE
  frozen->update(frozen.parameters());
#endif
  return frozen.parameters().size() == 2 ? 0 : 1;
}
