#include "kiln/nn/mixed_precision.h"

#include "kiln/core/array.h"
#include "kiln/core/error.h"
#include "kiln/core/ops/cast.h"
#include "kiln/nn/module.h"

namespace kiln::nn {
namespace {
// The innermost scope's policy on this thread: traces run on the calling thread, so a policy in
// force while a function is traced (compile, CompiledStep) is baked into its graph.
thread_local std::optional<MixedPrecision> t_scope;

bool is_16bit(Dtype t) { return t == float16 || t == bfloat16; }
}  // namespace

namespace detail {
void check_policy(const char* op, const MixedPrecision& policy) {
  if (!is_16bit(policy.compute))
    throw ValueError::of(op, "the compute dtype must be float16 or bfloat16", "got {}",
                         dtype_name(policy.compute));
}

std::optional<Dtype> compute_dtype(const Module& module) {
  if (const auto& own = module.mixed_precision()) return own->compute;
  if (t_scope) return t_scope->compute;
  return std::nullopt;
}

Array to_compute(const Array& x, std::optional<Dtype> compute) {
  if (!compute || !x.valid() || !is_floating(x.dtype()) || x.dtype() == *compute) return x;
  return astype(x, *compute);
}

Array to_float32(const Array& x) { return x.valid() && is_16bit(x.dtype()) ? astype(x, float32) : x; }
}  // namespace detail

MixedPrecisionScope::MixedPrecisionScope(std::optional<MixedPrecision> policy) {
  if (policy) detail::check_policy("MixedPrecisionScope", *policy);
  outer_ = t_scope;
  t_scope = policy;
}

MixedPrecisionScope::~MixedPrecisionScope() { t_scope = outer_; }

}  // namespace kiln::nn
