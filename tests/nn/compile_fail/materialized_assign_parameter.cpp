// A parameter slot reached through a MaterializedModule is const: assigning to it does not compile.
// expect: discards qualifiers|no match for
#include <kiln/core/ops/creation.h>
#include <kiln/nn/layers/linear.h>
#include <kiln/nn/materialized_module.h>

int main() {
  kiln::nn::MaterializedModule<kiln::nn::Linear> frozen(std::make_unique<kiln::nn::Linear>(2, 2));
#ifdef KILN_MISUSE
  frozen->weight = kiln::zeros({2, 2});
#endif
  return frozen->weight.value().size() == 4 ? 0 : 1;
}
