#pragma once
// Float64 matrix references for the kiln::linalg tests (tests/core/linalg_decomp_test.cpp): batches
// of row-major matrices, their products and transposes, and determinants computed here.
#include <kiln/kiln.h>

#include <cstdint>
#include <vector>

namespace kiln::test {

/// A row-major batch of `count` matrices of rows x cols.
struct Mats {
  std::vector<double> v;
  int64_t count, rows, cols;
  double at(int64_t b, int64_t i, int64_t j) const { return v[(b * rows + i) * cols + j]; }
};
/// The matrices of the last two dims of a (evaluated, as doubles).
Mats mats(const Array& a);
/// x @ y per matrix.
Mats product(const Mats& x, const Mats& y);
/// x^T per matrix.
Mats transposed(const Mats& x);
/// `count` n x n identities, flat.
std::vector<double> identities(int64_t count, int64_t n);
/// max |x - y| (EXPECTs equal sizes).
double max_diff(const std::vector<double>& x, const std::vector<double>& y);
/// Determinants by Gaussian elimination with partial pivoting.
std::vector<double> lu_dets(const Mats& a);
/// The determinant of a row-major 3 x 3 matrix by cofactor expansion.
double cofactor_det3(const std::vector<double>& m);

}  // namespace kiln::test
