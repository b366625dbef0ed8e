#pragma once
// Helpers of the distributed tests. Every rank can build every rank's input (fixed seeds by rank),
// so each checks the collective's result against a float64 reference computed locally.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kiln/core/distributed/distributed.h"
#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/random.h"

namespace kiln::test {

/// Rank `rank`'s input of this shape and dtype: uniform in [-8, 8) ([0, 16) for unsigned dtypes),
/// from a seed of (rank, salt); never all zeros.
inline Array rank_input(int rank, const Shape& shape, Dtype dtype, uint64_t salt = 0) {
  const Array key = random::key(1000 + 97 * salt + static_cast<uint64_t>(rank));
  const bool unsigned_ = dtype == uint8 || dtype == uint32;
  return astype(random::uniform(shape, key, unsigned_ ? 0.0 : -8.0, unsigned_ ? 16.0 : 8.0, float64), dtype);
}

inline std::vector<double> values(const Array& a) { return a.to_vector<double>(); }

/// Tolerance of one result in `dtype` (absolute, for values of magnitude ~10 to ~100).
inline double tolerance(Dtype dtype) {
  switch (dtype) {
    case Dtype::float16:
      return 0.25;
    case Dtype::bfloat16:
      return 1.0;
    case Dtype::float32:
      return 1e-4;
    case Dtype::float64:
      return 1e-10;
    default:
      return 0;
  }
}

inline void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

}  // namespace kiln::test
