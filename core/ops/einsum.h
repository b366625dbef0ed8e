#pragma once
// Tensor contractions: einsum (NumPy's subscripts, contracted pairwise in a greedy order, each
// pair one batched matmul), tensordot, inner, outer and kron. All are compositions of existing
// primitives (transpose, reshape, slice, sum, matmul, multiply), so they run on both devices and
// have vjp, jvp and vmap from those.
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/array.h"

namespace kiln {

/// Einstein summation with NumPy's subscripts: "ij,jk->ik", implicit output without "->" (the
/// labels used once, sorted, after the "..." dims), "..." broadcasting, a label repeated in one
/// operand takes a diagonal, labels missing from the output are summed. Pairs of operands are
/// contracted in a greedy order (opt_einsum's: the pair whose result removes the most elements
/// first), each as transposes/reshapes and one batched matmul (a broadcast multiply, and a
/// sum, for outer, elementwise and dot products). Float operands keep their
/// (promoted) dtype, integer and bool operands compute in float32 (as matmul). Throws ValueError
/// for malformed subscripts or a wrong operand count, ShapeError for label sizes that disagree,
/// ellipsis dims that do not broadcast, or subscripts that do not match an operand's rank.
Array einsum(const std::string& subscripts, const std::vector<Array>& operands, StreamOrDevice s = {});

/// The contraction order einsum takes for operands of these shapes, as numpy.einsum_path lists
/// it: each pair indexes the current operand list, whose two entries are removed and whose result
/// is appended. Empty for one operand. Throws as einsum.
std::vector<std::pair<int, int>> einsum_path(const std::string& subscripts, const std::vector<Shape>& shapes);

/// Sums the products of a's last `axes` dims with b's first `axes` dims (numpy.tensordot with an
/// integer). Dtypes as einsum. Throws ValueError for axes < 0 or more than either rank, ShapeError
/// when the contracted sizes differ.
Array tensordot(const Array& a, const Array& b, int axes = 2, StreamOrDevice s = {});
/// tensordot over the listed axes pairs (negative axes count from the end). Throws ValueError for
/// lists of different lengths, out-of-range or repeated axes, ShapeError for sizes that differ.
Array tensordot(const Array& a, const Array& b, const std::vector<int>& axes_a,
                const std::vector<int>& axes_b, StreamOrDevice s = {});
/// numpy.inner: sums over the last axes, result a.shape[:-1] + b.shape[:-1]; a 0-d operand
/// multiplies. Dtypes as einsum. Throws ShapeError when the last dims differ.
Array inner(const Array& a, const Array& b, StreamOrDevice s = {});
/// numpy.outer: the (a.size, b.size) products of the flattened operands; dtypes promote as multiply.
Array outer(const Array& a, const Array& b, StreamOrDevice s = {});
/// numpy.kron: the Kronecker product; the operand of lower rank gets leading unit dims, result
/// dims are the products of the operands' dims. Dtypes promote as multiply.
Array kron(const Array& a, const Array& b, StreamOrDevice s = {});

}  // namespace kiln
