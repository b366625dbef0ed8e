// train() is non-const: a MaterializedModule stays in evaluation mode.
// expect: discards qualifiers|no match for
#include <kiln/nn/layers/linear.h>
#include <kiln/nn/materialized_module.h>

int main() {
  kiln::nn::MaterializedModule<kiln::nn::Linear> frozen(std::make_unique<kiln::nn::Linear>(2, 2));
#ifdef KILN_MISUSE
  frozen.module().train(true);
#endif
  return frozen->is_training() ? 1 : 0;
}
