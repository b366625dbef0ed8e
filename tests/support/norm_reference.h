#pragma once
// The float64 reference of the fused normalizations (core/ops/fused_norm.h), shared by their CPU
// test (tests/core/fused_norm_test.cpp) and their GPU test (tests/vulkan/gpu_norm_test.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/cpu/norm.h"

namespace kiln::test {

using detail::RowNorm;

inline constexpr RowNorm kRowNorms[] = {RowNorm::softmax, RowNorm::log_softmax, RowNorm::layer_norm,
                                        RowNorm::rms_norm};

std::string row_norm_name(RowNorm k);
/// layer_norm or rms_norm (the kinds that take a weight), as opposed to softmax and log_softmax.
bool is_norm(RowNorm k);

/// k over consecutive rows of n elements of x, in float64: w and b are the weight and bias (empty
/// when absent; softmax ignores both, rms_norm the bias).
std::vector<double> row_norm_reference(RowNorm k, const std::vector<double>& x, int64_t n,
                                       const std::vector<double>& w, const std::vector<double>& b,
                                       double eps);

}  // namespace kiln::test
