#pragma once
// Every kiln dtype, in Dtype order, for tests that loop over them all.
#include <iterator>

#include "kiln/core/dtype.h"

namespace kiln::test {

inline constexpr Dtype kAllDtypes[] = {bool_,  uint8,  int8,    int16,    uint16,  int32,  int64,
                                       uint32, uint64, float16, bfloat16, float32, float64};
static_assert(std::size(kAllDtypes) == kNumDtypes);

}  // namespace kiln::test
