#pragma once
// Recording helpers for the built-in kernels: each validates its views, picks the shader variant
// and the specialisation, packs the push constants and records one dispatch. They are the layer
// the primitives' eval_gpu will call (through the gpu facade, STYLE.md R9); they never submit.
#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/core/dtype.h"
#include "kiln/core/shape.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/recorder.h"

namespace kiln::detail::vk {

/// Rank the strided kernels take after adjacent dimensions are merged (shaders' KILN_MAX_RANK).
inline constexpr int kMaxStridedRank = 8;

/// A strided view of a device buffer, as an evaluated Array is: shape, strides and offset in
/// elements of `dtype`. Every element a view reaches must lie inside its buffer (checked).
struct GpuView {
  BufferPtr buffer;
  Dtype dtype = float32;
  Shape shape;
  Strides strides;
  int64_t offset = 0;
  /// A row-major contiguous view of a whole buffer.
  static GpuView contiguous(BufferPtr buffer, Dtype dtype, Shape shape, int64_t offset = 0);
};

/// dst = src converted to dst's dtype, elementwise over their common shape; either view may be
/// strided. Types: same-type copies of 2- and 4-byte dtypes, and casts among float32, float16
/// and int32 (float to int truncates). Throws ShapeError, NotImplemented (other dtypes, float16
/// without 16-bit storage, more than kMaxStridedRank dims that do not merge).
void record_copy(Recorder& r, const GpuView& src, const GpuView& dst);

/// out[..] = sum of x[.., :] over x's last axis (float32). x's last axis must have stride 1 and its
/// other dims must merge into one; out is contiguous with x's shape less the last axis.
void record_sum_last_axis(Recorder& r, const GpuView& x, const GpuView& out);

/// c = a @ b: a [.., M, K], b [.., K, N], c [.., M, N] with equal batch dims (a or b may have batch
/// stride 0); a and b any non-negative strides, c's rows contiguous (column stride 1). With an
/// addend d (c's shape, any non-negative strides: 0 broadcasts a bias), c = alpha * a @ b + beta * d
/// in the same pass (Linear's bias, AddMM). Dtypes (all four views share one): float32; float64
/// (shaderFloat64); float16 and bfloat16 (16-bit storage), accumulated in float32 and rounded once
/// after the epilogue, as the CPU does. float16 runs on cooperative matrices (tensor cores) when
/// the context has them (Context::has_coopmat_f16()) and each operand has a dimension of stride 1
/// whose length, like its other strides and its offset, is a multiple of 8; otherwise, and for
/// bfloat16 (float16 tiles would lose its range), on float32 tiles. Throws ShapeError, ValueError,
/// NotImplemented (other dtypes, a missing device feature, more tiles than one dispatch takes).
void record_matmul(Recorder& r, const GpuView& a, const GpuView& b, const GpuView& c,
                   const GpuView* d = nullptr, float alpha = 1.0f, float beta = 0.0f);

/// Which kernel family a float16 GEMM takes.
enum class HalfGemmPath : uint8_t {
  automatic,  ///< cooperative matrices where the context has them and the layout allows, else plain
  plain,      ///< float32 tiles (matmul_h16_*), on any device with 16-bit storage
  emulated,   ///< the cooperative-matrix kernel with its matrix operations in plain code (slow; any
              ///< device): checks that kernel's tiling and layouts where tensor cores are missing
};

/// How float16 GEMMs are recorded, process-wide (for tests and benchmarks). `tile` names a variant
/// of shaders/linalg/matmul_f16_coopmat.comp ("128x128", "128x128_w64x32", "128x256",
/// "128x256_k32", "64x64") and `shape` a fragment shape; left empty, they come from
/// KILN_VULKAN_COOPMAT_TILE and KILN_VULKAN_COOPMAT_SHAPE (e.g. "16x8x16") when those are set, else
/// kiln picks (a tile by the problem's size, the first shape of 16x8x16, 16x16x16, 16x8x8 that the
/// device lists and the tile takes). A tile or shape that does not exist or fit throws ValueError
/// from record_matmul.
struct HalfGemmOptions {
  HalfGemmPath path = HalfGemmPath::automatic;
  std::string tile;
  CoopmatShape shape;
};
/// Replaces the options and returns the previous ones. Not meant for use while other threads
/// record GEMMs (they see either the old or the new options).
HalfGemmOptions set_half_gemm_options(HalfGemmOptions options);

/// The shader variant the last record_matmul call on this thread dispatched, e.g.
/// "matmul_f16_coopmat_128x128" or "matmul_h16_t64" ("" before the first; unchanged by a call that
/// dispatched nothing). Tests check with it which path ran.
std::string_view last_matmul_kernel();

}  // namespace kiln::detail::vk
