#pragma once
// Shared CPU reduction kernels. Every reduction is run on the pattern [outer, reduced, inner] of a
// dense buffer: inner == 1 reduces rows, inner > 1 accumulates whole inner rows (column sums, the
// bias-gradient case). Inputs that do not fit the pattern are copied into it first.
#include <cstdint>
#include <ostream>
#include <type_traits>

#include "kiln/core/array.h"

namespace kiln::detail {

/// mean is a float sum divided by the count in the accumulator (so float16 means cannot overflow).
enum class ReduceKind : uint8_t { sum, prod, max, min, all, any, mean };
std::ostream& operator<<(std::ostream& os, ReduceKind k);

/// Result dtype of a reduction: sum/prod of bool/int8/int16 -> int32 and of uint8/uint16 -> uint32; all/any
/// -> bool; otherwise the input dtype.
Dtype reduce_out_dtype(ReduceKind kind, Dtype in);

/// The C++ type of sum/prod results for input type T (the type of reduce_out_dtype(sum, T)).
template <class T>
using sum_result_t = std::conditional_t<
    std::is_floating_point_v<T> || std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t> ||
        (!std::is_same_v<T, bool> && sizeof(T) >= 4),
    T, std::conditional_t<std::is_unsigned_v<T> && !std::is_same_v<T, bool>, uint32_t, int32_t>>;

/// How an input reaches the [outer, reduced, inner] pattern: directly from its own buffer (a
/// permuted dense array whose reduced axes are one block and whose kept axes keep their order), or
/// through a dense copy whose axes are ordered by `perm` (kept axes, then reduced axes).
struct ReducePlan {
  bool direct = true;
  int64_t outer = 1, reduced = 1, inner = 1;
  Axes perm;  // used when !direct
};
/// `axes` must be normalized and sorted.
ReducePlan plan_reduce(const Shape& shape, const Strides& strides, const Axes& axes);

/// Copies `a` (any strides) into dense `dst` with its axes in the order `perm` (a transpose).
void copy_permuted(const Array& a, const Axes& perm, void* dst);

/// out[o, i] = reduce over r of in[o, r, i]; `in` is dense of dtype in_t and `out` dense of
/// reduce_out_dtype(kind, in_t). Float16/bfloat16/float32 accumulate in float, float sums pairwise.
void reduce_dense(ReduceKind kind, const void* in, Dtype in_t, void* out, int64_t outer, int64_t reduced,
                  int64_t inner);

/// out[o, i] = index (int32) of the first max (or min) over r of in[o, r, i]; a NaN counts as the
/// extreme (NumPy's rule). reduced must be > 0.
void arg_reduce_dense(bool is_max, const void* in, Dtype in_t, int32_t* out, int64_t outer, int64_t reduced,
                      int64_t inner);

/// Reduces an evaluated array over sorted, normalized `axes` into the row-contiguous buffer of
/// `out` (already allocated), following plan_reduce.
void reduce_array(ReduceKind kind, const Array& in, const Axes& axes, Array& out);

}  // namespace kiln::detail
