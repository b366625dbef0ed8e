// Tiling shared by the radix-sort kernels (radix_histogram.comp, radix_scatter.comp): workgroup t
// handles keys [t * tile, (t + 1) * tile), tile = kWorkgroupSize * items (a push constant the host
// picks), in `items` rounds of kWorkgroupSize keys, one per invocation. Digits are 8 bits: 256 bins.
#ifndef KILN_RADIX_COMMON_GLSL
#define KILN_RADIX_COMMON_GLSL

#include "../common/grid.glsl"

#define KILN_RADIX_BINS 256
// The largest workgroup the kernels' shared arrays hold (kWorkgroup in views.h).
#define KILN_RADIX_MAX_WORKGROUP 256

#endif
