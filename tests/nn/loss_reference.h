#pragma once
// Helpers shared by the loss tests: the float64 reduction reference and an error-message check.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kiln/nn/losses.h"

namespace kiln::test {

using Values = std::vector<double>;

inline constexpr nn::Reduction kReductions[] = {nn::Reduction::none, nn::Reduction::mean, nn::Reduction::sum,
                                                nn::Reduction::batchmean};

/// The reduction of per-element losses: mean divides by `denominator`, batchmean by `batch`.
inline Values ref_reduce(const Values& loss, nn::Reduction r, double denominator, double batch) {
  double total = 0;
  for (double v : loss) total += v;
  switch (r) {
    case nn::Reduction::none:
      return loss;
    case nn::Reduction::sum:
      return {total};
    case nn::Reduction::mean:
      return {total / denominator};
    case nn::Reduction::batchmean:
      return {total / batch};
  }
  return {};
}
inline Values ref_reduce(const Values& loss, nn::Reduction r) {
  const double n = static_cast<double>(loss.size());
  return ref_reduce(loss, r, n, n);
}

/// Runs f, which must throw E with `fragment` in its message; the test goes on either way.
template <class E>
void expect_error(const std::string& fragment, const std::function<void()>& f) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one containing \"" << fragment << "\"";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

}  // namespace kiln::test
