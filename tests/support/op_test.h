#pragma once
// Shared test harness: random inputs from fixed seeds, comparisons against float64 references,
// and finite-difference checks of vjp in float64 (Flashlight's jacobianTestImpl, made generic).
#include <kiln/kiln.h>

#include <functional>
#include <vector>

namespace kiln::test {

using Fn = std::function<Array(const std::vector<Array>&)>;

/// Uniform values on [lo, hi) from a fixed seed (std::mt19937_64; independent of kiln's random).
std::vector<double> random_values(int64_t n, uint64_t seed, double lo = -1.0, double hi = 1.0);
/// An evaluated array of random values converted to `dtype`.
Array random_array(const Shape& shape, Dtype dtype, uint64_t seed, double lo = -1.0, double hi = 1.0);
/// Values of `a` as doubles in row-major order.
std::vector<double> values(const Array& a);
/// max |a - b| over the elements (shapes must be equal: a failure otherwise).
double max_abs_diff(const Array& a, const Array& b);

/// Default tolerances for comparing a result of `dtype` against a float64 reference.
struct Tolerance {
  double rtol, atol;
};
Tolerance tolerance(Dtype dtype);

/// EXPECT that actual (any dtype/layout) matches expected within |a - e| <= atol + rtol * |e|;
/// NaNs must match NaNs and infinities must match exactly.
void expect_close(const Array& actual, const std::vector<double>& expected, double rtol, double atol);
void expect_close(const Array& actual, const std::vector<double>& expected);  // tolerance(actual.dtype())
void expect_close(const Array& actual, const Array& expected, double rtol, double atol);

/// Checks fn's vjp against central finite differences in float64. The inputs are converted to
/// float64 (integer inputs are left alone and not checked); the scalar checked is
/// sum(fn(x) * u) for a random cotangent u. At most `max_elements` entries per input are probed.
void check_vjp(const Fn& fn, const std::vector<Array>& inputs, double eps = 1e-6, double tol = 1e-6,
               int max_elements = 48);
/// Checks fn's jvp in float64 for a random tangent of every float input at once: against central
/// finite differences (fn(x + eps t) - fn(x - eps t)) / 2 eps, and against the vjp-derived
/// directional derivative <u, J t> = <J^T u, t> for a random cotangent u. Integer inputs get no
/// tangent (their tangent is zero). The output tangent must have the output's shape.
void check_jvp(const Fn& fn, const std::vector<Array>& inputs, double eps = 1e-6, double tol = 1e-6);
/// Checks fn's batching rule against a loop: for each input position in turn (the others shared,
/// unbatched), and then every input at once, a batch of `batch` random examples shaped like the
/// input (same dtype; values in [lo, hi)) is stacked along axis 0 and along its last axis, vmap'ed
/// with that in_axes entry, and compared elementwise with fn applied to each example, at the
/// dtype's tolerance. Integer inputs are batched with values drawn from the given example's
/// values (indices stay valid).
void check_vmap(const Fn& fn, const std::vector<Array>& inputs, double lo = -1.0, double hi = 1.0,
                int batch = 3);
/// Checks the vjp of fn's gradient (grad of grad) by finite differences of the first-order gradient.
void check_second_order(const Fn& fn, const std::vector<Array>& inputs, double eps = 1e-5, double tol = 1e-5,
                        int max_elements = 24);

}  // namespace kiln::test
