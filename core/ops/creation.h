#pragma once
// Creation ops: arrays filled with constants, ranges and identity matrices.
#include "kiln/core/operand.h"

namespace kiln {

/// An array of `shape` filled with `value` (a scalar or a 0-d array), in `dtype`.
Array full(const Shape& shape, const Operand& value, Dtype dtype, StreamOrDevice s = {});
/// As above with the value's own dtype (scalars: float32/int32/bool).
Array full(const Shape& shape, const Operand& value, StreamOrDevice s = {});
Array zeros(const Shape& shape, Dtype dtype = float32, StreamOrDevice s = {});
Array ones(const Shape& shape, Dtype dtype = float32, StreamOrDevice s = {});
Array zeros_like(const Array& a, StreamOrDevice s = {});
Array ones_like(const Array& a, StreamOrDevice s = {});
Array full_like(const Array& a, const Operand& value, StreamOrDevice s = {});
/// Values start, start+step, ... below stop. Throws ValueError if step is 0.
Array arange(double start, double stop, double step = 1.0, Dtype dtype = float32, StreamOrDevice s = {});
/// 0, 1, ..., stop-1 as int32.
Array arange(int64_t stop, StreamOrDevice s = {});
/// `num` evenly spaced values from start to stop inclusive.
Array linspace(double start, double stop, int64_t num, Dtype dtype = float32, StreamOrDevice s = {});
/// NumPy's linspace with `endpoint`: when false, `num` values from start in steps of
/// (stop - start) / num, stop excluded. Throws ValueError if num < 0, DtypeError for bool.
Array linspace(double start, double stop, int64_t num, bool endpoint, Dtype dtype = float32,
               StreamOrDevice s = {});
/// n x m matrix with ones on diagonal k (m defaults to n).
Array eye(int64_t n, int64_t m = -1, int k = 0, Dtype dtype = float32, StreamOrDevice s = {});
Array identity(int64_t n, Dtype dtype = float32, StreamOrDevice s = {});

}  // namespace kiln
