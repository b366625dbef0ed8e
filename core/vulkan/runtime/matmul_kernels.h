#pragma once
// Recording the GEMM kernels (shaders/linalg/): the tile and split-K plan from the problem's shape
// and the device's size, the cooperative-matrix path for float16, and the options tests and
// benchmarks use to force a choice. Included by kernels.h; never submits.
#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/core/vulkan/runtime/kernels.h"

namespace kiln::detail::vk {

/// c = a @ b: a [.., M, K], b [.., K, N], c [.., M, N] with equal batch dims, none, one or two (a
/// or b may have batch stride 0; two batch dims let attention's [batch, heads] views, which do not
/// merge into one, be read in place); a and b any non-negative strides, c's rows contiguous (column
/// stride 1) and its batch dims merging into one. With an
/// addend d (c's shape, any non-negative strides: 0 broadcasts a bias), c = alpha * a @ b + beta * d
/// in the same pass (Linear's bias, AddMM). Dtypes (all four views share one): float32; float64
/// (shaderFloat64); float16 and bfloat16 (16-bit storage), accumulated in float32 and rounded once
/// after the epilogue, as the CPU does. float16 runs on cooperative matrices (tensor cores) when
/// the context has them (Context::has_coopmat_f16()) and each operand has a dimension of stride 1
/// whose length, like its other strides and its offset, is a multiple of 8; otherwise, and for
/// bfloat16 (float16 tiles would lose its range), on float32 tiles. When the output has too few
/// tiles to fill the device and K is long, the float32 tiles split K: each workgroup sums a slice
/// into a float32 scratch buffer and a second dispatch adds the slices and applies the epilogue.
/// Throws ShapeError, ValueError, NotImplemented (other dtypes, a missing device feature, more tiles
/// than one dispatch takes).
void record_matmul(Recorder& r, const GpuView& a, const GpuView& b, const GpuView& c,
                   const GpuView* d = nullptr, double alpha = 1.0, double beta = 0.0);

/// How float32, bfloat16 and non-tensor-core float16 GEMMs are tiled, process-wide (for tests and
/// benchmarks). `tile` names a variant of shaders/linalg/matmul_f32.comp: "128", "128k16",
/// "128x64", "64x128", "64", "64w", "32"; `splits` > 0 forces that many K slices (1: no split-K).
/// Left empty / 0, they come from KILN_VULKAN_MATMUL_TILE and KILN_VULKAN_MATMUL_SPLITK when set,
/// else kiln picks from the shape and compute_units(). An unknown tile or a bad split count throws
/// ValueError from record_matmul. float64 has one tile and never splits.
struct MatmulOptions {
  std::string tile;
  int splits = 0;
};
/// Replaces the options and returns the previous ones (not meant for use while other threads
/// record GEMMs).
MatmulOptions set_matmul_options(MatmulOptions options);

/// Workgroups the device runs at once, roughly: the tile plan aims at filling them. Vulkan does
/// not report it: KILN_VULKAN_COMPUTE_UNITS when set, the host's threads on a CPU device
/// (lavapipe), else 132 (an H100/H200's multiprocessors; larger GPUs are few).
uint32_t compute_units(const Context& ctx);

/// Which kernel family a float16 GEMM takes.
enum class HalfGemmPath : uint8_t {
  automatic,  ///< cooperative matrices where the context has them and the layout allows, else plain
  plain,      ///< float32 tiles (matmul_h16_*), on any device with 16-bit storage
  emulated,   ///< the cooperative-matrix kernel with its matrix operations in plain code (slow; any
              ///< device): checks that kernel's tiling and layouts where tensor cores are missing
};

/// How float16 GEMMs are recorded, process-wide (for tests and benchmarks). `tile` names a variant
/// of shaders/linalg/matmul_f16_coopmat.comp (kCoopmatTiles in matmul_kernels.cpp: "128x128",
/// "128x128_w64x32", "128x256", "128x256_k32", "64x64", ...) and `shape` a fragment shape; left
/// empty, they come from KILN_VULKAN_COOPMAT_TILE and KILN_VULKAN_COOPMAT_SHAPE (e.g. "16x8x16") when
/// those are set, else kiln picks (a tile by the problem's size, the first shape of its preference
/// that the device lists and the tile takes). A tile or shape that does not exist or fit throws
/// ValueError from record_matmul.
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
/// dispatched nothing); a split-K product names its first pass with "+splitk<n>" appended, e.g.
/// "matmul_f32_t64+splitk8". Tests check with it which path ran.
std::string_view last_matmul_kernel();
/// The number of products (the batch) of the last GEMM recorded on this thread.
int64_t last_matmul_batch();
/// Whether the last GEMM recorded on this thread ran without bounds checks (every tile inside the
/// matrices: the kernels' kAligned specialization).
bool last_matmul_aligned();

}  // namespace kiln::detail::vk
