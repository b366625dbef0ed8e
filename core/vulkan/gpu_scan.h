#pragma once
// The scan call of the gpu facade (gpu.h's conventions: no Vulkan types, every eval_gpu compiles
// in every build). core/vulkan/runtime/scan_facade.cpp implements it; without Vulkan,
// runtime/disabled_scan.cpp throws DeviceError.
#include <cstdint>

#include "kiln/core/array.h"

namespace kiln::gpu {

enum class ScanKind : uint8_t { sum, prod, max, min, logaddexp };

/// out = the cumulative sum, product, maximum, minimum or logaddexp of x along `axis` (inclusive:
/// out[k] takes x[k] in; else the identity comes first; reverse: from the end), as cumsum, cumprod,
/// cummax, cummin and logcumsumexp on the CPU: out has x's shape and the CPU's dtype (sums and
/// products: int32 for bool, int8 and int16, uint32 for uint8 and uint16, else x's, integers wrap; the
/// others: x's, logaddexp of floats only). x may be any view. Throws NotImplemented for int64/float64 on a
/// device without them.
void scan(ScanKind kind, const Array& x, int axis, bool reverse, bool inclusive, Array& out);

}  // namespace kiln::gpu
