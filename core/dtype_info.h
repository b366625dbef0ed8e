#pragma once
// Limits of the dtypes, as NumPy's finfo and iinfo (and MLX's mx.finfo / mx.iinfo).
#include <cstdint>

#include "kiln/core/dtype.h"

namespace kiln {

/// The machine limits of a float dtype.
struct FloatInfo {
  Dtype dtype;
  int bits;                   ///< storage bits
  int mantissa_bits;          ///< explicit fraction bits (NumPy's nmant): 52, 23, 10, 7
  double eps;                 ///< 2^-mantissa_bits: the gap between 1 and the next value
  double max;                 ///< the largest finite value
  double min;                 ///< the lowest finite value (-max)
  double smallest_normal;     ///< the smallest positive normal value (NumPy's tiny)
  double smallest_subnormal;  ///< the smallest positive value
  double resolution;          ///< 10^-precision, precision the decimal digits the dtype holds
};
/// finfo(float16) etc. Throws DtypeError for a dtype that is not a float.
FloatInfo finfo(Dtype dtype);

/// The range of an integer or bool dtype: min <= every value <= max.
struct IntInfo {
  Dtype dtype;
  int bits;
  int64_t min;
  uint64_t max;  ///< unsigned, so that every dtype's maximum fits
};
/// iinfo(int8) etc. (bool: 0 and 1). Throws DtypeError for a float dtype.
IntInfo iinfo(Dtype dtype);

}  // namespace kiln
