#include "kiln/core/dtype_info.h"

#include <cmath>
#include <limits>

#include "kiln/core/error.h"

namespace kiln {

FloatInfo finfo(Dtype dtype) {
  // {bits, mantissa bits, max exponent, min normal exponent, decimal precision}
  struct Layout {
    int bits, mantissa, max_exp, min_exp, precision;
  };
  Layout l;
  switch (dtype) {
    case float16:
      l = {16, 10, 15, -14, 3};
      break;
    case bfloat16:
      l = {16, 7, 127, -126, 2};
      break;
    case float32:
      l = {32, 23, 127, -126, 6};
      break;
    case float64:
      l = {64, 52, 1023, -1022, 15};
      break;
    default:
      throw DtypeError::of("finfo", "not a float dtype", "{} (iinfo takes integers)", dtype_name(dtype));
  }
  const double max = (2.0 - std::ldexp(1.0, -l.mantissa)) * std::ldexp(1.0, l.max_exp);
  return {dtype,
          l.bits,
          l.mantissa,
          std::ldexp(1.0, -l.mantissa),
          max,
          -max,
          std::ldexp(1.0, l.min_exp),
          std::ldexp(1.0, l.min_exp - l.mantissa),
          std::pow(10.0, -l.precision)};
}

IntInfo iinfo(Dtype dtype) {
  switch (dtype) {
    case bool_:
      return {dtype, 8, 0, 1};
    case uint8:
      return {dtype, 8, 0, std::numeric_limits<uint8_t>::max()};
    case int8:
      return {dtype, 8, std::numeric_limits<int8_t>::min(), std::numeric_limits<int8_t>::max()};
    case int16:
      return {dtype, 16, std::numeric_limits<int16_t>::min(), std::numeric_limits<int16_t>::max()};
    case uint16:
      return {dtype, 16, 0, std::numeric_limits<uint16_t>::max()};
    case int32:
      return {dtype, 32, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case int64:
      return {dtype, 64, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
    case uint32:
      return {dtype, 32, 0, std::numeric_limits<uint32_t>::max()};
    case uint64:
      return {dtype, 64, 0, std::numeric_limits<uint64_t>::max()};
    default:
      throw DtypeError::of("iinfo", "not an integer dtype", "{} (finfo takes floats)", dtype_name(dtype));
  }
}

}  // namespace kiln
