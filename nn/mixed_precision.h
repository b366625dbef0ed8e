#pragma once
// Mixed precision as a policy, PyTorch's autocast per module or per scope:
//
//   model.set_mixed_precision(nn::MixedPrecision{.compute = kiln::bfloat16});  // the whole tree
//   { nn::MixedPrecisionScope amp({.compute = kiln::float16}); loss = nn::cross_entropy(model(x), y); }
//
// Under a policy, Linear, Conv1d/2d, Bilinear and a tied head (Embedding::as_linear) cast their
// input and float32 parameters to the 16-bit dtype and compute there (the products go to tensor
// cores on a GPU with cooperative matrices); the attention op runs on the 16-bit projections.
// Parameters stay float32: they are the master weights, and the casts' vjps bring every gradient
// back to float32. Everything else keeps float32 where precision matters: norms compute in their
// weights' dtype (float32) whatever the input, the losses take 16-bit inputs up to float32, and
// an Embedding's lookup stays in its table's dtype, so the residual stream of a transformer stays
// float32 as under autocast. A 16-bit float16 loss needs loss scaling: optim::GradScaler.
#include <optional>

#include "kiln/core/dtype.h"

namespace kiln {
class Array;
}

namespace kiln::nn {

class Module;

/// The dtype the layers under the policy compute in: float16 or bfloat16.
struct MixedPrecision {
  Dtype compute = bfloat16;
};

/// Puts `policy` in force on this thread until destroyed, for every module that has none of its
/// own (Module::set_mixed_precision wins over a scope). Scopes nest; an empty policy lifts the
/// outer one for the inner scope. Throws ValueError for a compute dtype other than float16 or
/// bfloat16. Not movable: it restores the outer scope when it ends.
class MixedPrecisionScope {
 public:
  explicit MixedPrecisionScope(std::optional<MixedPrecision> policy);
  ~MixedPrecisionScope();
  MixedPrecisionScope(const MixedPrecisionScope&) = delete;
  MixedPrecisionScope& operator=(const MixedPrecisionScope&) = delete;

 private:
  std::optional<MixedPrecision> outer_;
};

namespace detail {
/// Throws ValueError (naming `op`) unless policy.compute is float16 or bfloat16.
void check_policy(const char* op, const MixedPrecision& policy);
/// The 16-bit dtype `module` computes in now: its own policy, else this thread's scope; empty
/// when neither is in force.
std::optional<Dtype> compute_dtype(const Module& module);
/// `x` in `compute` when it is a float of another dtype (a float32 input or master weight), else
/// `x` itself (integers, empty arrays, no policy).
Array to_compute(const Array& x, std::optional<Dtype> compute);
/// `x` in float32 when it is a 16-bit float, else `x` itself: where a policy's 16-bit values
/// enter a float32 computation (norms, losses).
Array to_float32(const Array& x);
}  // namespace detail

}  // namespace kiln::nn
