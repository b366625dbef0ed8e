#version 450
// Copy and cast: dst[dst view] = CONVERT(src[src view]). Contiguous views index linearly; strided
// ones (kStrided, up to KILN_MAX_RANK dims, any strides including 0 and negative) walk a shared
// shape with separate source and destination strides. One invocation per element.
// Variants (built by cmake/shaders.cmake, one SPIR-V each):
// kiln-variant: copy_u32 -DSRC_T=uint -DDST_T=uint
// kiln-variant: copy_u16 -DSRC_T=uint16_t -DDST_T=uint16_t -DKILN_16BIT
// kiln-variant: cast_f32_f16 -DSRC_T=float -DDST_T=float16_t -DKILN_16BIT
// kiln-variant: cast_f16_f32 -DSRC_T=float16_t -DDST_T=float -DKILN_16BIT
// kiln-variant: cast_f32_i32 -DSRC_T=float -DDST_T=int
// kiln-variant: cast_i32_f32 -DSRC_T=int -DDST_T=float
// kiln-variant: cast_f16_i32 -DSRC_T=float16_t -DDST_T=int -DKILN_16BIT -DKILN_VIA_FLOAT
// kiln-variant: cast_i32_f16 -DSRC_T=int -DDST_T=float16_t -DKILN_16BIT -DKILN_VIA_FLOAT
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "../common/indexing.glsl"

layout(constant_id = 1) const bool kStrided = false;

layout(std430, set = 0, binding = 0) readonly buffer Src { SRC_T src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Dst { DST_T dst[]; };

layout(push_constant) uniform Push {
  uint n;
  uint rank;
  uint src_offset;
  uint dst_offset;
  uint shape[KILN_MAX_RANK];
  int src_strides[KILN_MAX_RANK];
  int dst_strides[KILN_MAX_RANK];
} p;

void main() {
  const uint i = kiln_global_id();
  if (i >= p.n) return;
  int s = int(p.src_offset + i);
  int d = int(p.dst_offset + i);
  if (kStrided) {
    s = int(p.src_offset);
    d = int(p.dst_offset);
    uint rest = i;
    for (int k = int(p.rank) - 1; k >= 0; --k) {
      const uint idx = rest % p.shape[k];
      rest /= p.shape[k];
      s += int(idx) * p.src_strides[k];
      d += int(idx) * p.dst_strides[k];
    }
  }
#ifdef KILN_VIA_FLOAT
  dst[d] = DST_T(float(src[s]));
#else
  dst[d] = DST_T(src[s]);
#endif
}
