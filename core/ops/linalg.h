#pragma once
// Matrix products through OpenBLAS.
#include "kiln/core/array.h"

namespace kiln {

/// Matrix product with NumPy semantics: 1-d operands are promoted to matrices and back, batch
/// dimensions broadcast. float32/float64 use sgemm/dgemm; float16/bfloat16 compute in float32;
/// integer inputs compute in float32. Throws ShapeError if the inner dimensions differ.
Array matmul(const Array& a, const Array& b, StreamOrDevice s = {});
/// beta * c + alpha * (a @ b), with c broadcast to the product's shape.
Array addmm(const Array& c, const Array& a, const Array& b, double alpha = 1.0, double beta = 1.0,
            StreamOrDevice s = {});
/// x @ weight^T + bias, as torch.nn.functional.linear: x (..., in), weight (out, in), bias (out)
/// or empty; result (..., out). float32/float64 run as one GEMM with the bias as its addend, and the
/// weight gradient comes out row-major in weight's layout (not as a transposed view). Throws
/// ShapeError for mismatched shapes.
Array linear(const Array& x, const Array& weight, const Array& bias = Array(), StreamOrDevice s = {});

}  // namespace kiln
