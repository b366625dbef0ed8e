#version 450
// dst[dst view] = src[src view], moving raw units of 1 to 16 bytes: the copies of concatenate, pad
// and slice_update into views of their output, dense copies of operands for the gather kernels,
// and record_copy's strided same-dtype copies whose rows are contiguous, for every dtype (copy.comp
// moves only 2- and 4-byte ones, one element per invocation). Both views may have any
// strides (0 and negative too) over one shape of up to KILN_MAX_RANK dims (a contiguous pair is a
// buffer copy instead). The host widens the unit when the innermost dim is contiguous and aligned.
// kiln-variant: move_units_u8 -DVAL_T=uint8_t -DKILN_8BIT
// kiln-variant: move_units_u16 -DVAL_T=uint16_t -DKILN_16BIT
// kiln-variant: move_units_u32 -DVAL_T=uint
// kiln-variant: move_units_u64 -DVAL_T=uvec2
// kiln-variant: move_units_u128 -DVAL_T=uvec4
#extension GL_GOOGLE_include_directive : require
#ifdef KILN_8BIT
#extension GL_EXT_shader_8bit_storage : require
#endif
#ifdef KILN_16BIT
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "../common/indexing.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Src { VAL_T src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Dst { VAL_T dst[]; };

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
  int s = int(p.src_offset), d = int(p.dst_offset);
  uint rest = i;
  for (int k = int(p.rank) - 1; k >= 0; --k) {
    const uint idx = rest % p.shape[k];
    rest /= p.shape[k];
    s += int(idx) * p.src_strides[k];
    d += int(idx) * p.dst_strides[k];
  }
  dst[d] = src[s];
}
