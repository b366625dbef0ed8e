#pragma once
// The gpu facade (STYLE.md R9): what primitives' eval_gpu and the core's storage use of the GPU.
// It needs no Vulkan header, so every eval_gpu compiles in every build; core/vulkan/runtime/
// implements it (facade.cpp), or, in a build without Vulkan, disabled.cpp throws DeviceError from
// every recording call. Primitives never submit, wait or allocate descriptors: eval() owns the
// thread's recorder and submits it once (core/eval.cpp).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kiln/core/array.h"

namespace kiln::gpu {

// ---------------------------------------------------------------- availability

/// Whether a GPU can be used (creates the Vulkan context on first call; never throws).
bool available();
/// Why not, when available() is false.
std::string unavailable_reason();
/// Whether the device computes in `t` (int64 and float64 need shaderInt64 / shaderFloat64; the
/// other dtypes always). False when no GPU is available.
bool supports(Dtype t);

// ---------------------------------------------------------------- kernels (for eval_gpu)

/// Gives `out` fresh row-major device storage of its shape and dtype.
void allocate(Array& out);
/// out = x's values in row-major order, converted to out's dtype; out gets device storage.
/// x may be strided (any view); out.size() must equal x.size().
void copy(const Array& x, Array& out);
/// out = expr elementwise over out's shape, each input broadcast to it (NumPy rules). `expr` is
/// GLSL in which x0, x1, ... are the inputs converted to `compute` and the kiln_* functions of
/// shaders/common/elementwise_ops.glsl are defined (v0, v1, ... are the inputs as stored); the
/// result is converted to out's dtype. Throws NotImplemented when the device lacks a dtype
/// (int64, float64) and ValueError when the expression does not compile.
void elementwise(std::string_view expr, Dtype compute, std::span<const Array> inputs, Array& out);
/// One temporary of a fused chain: t<k> = kiln_to_<dtype>(expr).
struct ChainStep {
  Dtype dtype;
  std::string expr;
};
/// out = the last of `steps`, elementwise over out's shape with each input broadcast to it: one
/// kernel for a chain of compile's fused elementwise ops. Each step's GLSL reads the inputs as
/// stored (v0, v1, ...), the earlier temporaries (t0, ...) and what `helpers` defines. Throws
/// NotImplemented when there are more inputs than one kernel binds (11) or a dtype needs a device
/// feature it lacks.
void elementwise_chain(std::span<const ChainStep> steps, std::string_view helpers,
                       std::span<const Array> inputs, Array& out);
/// out = `body` for each element of the random primitives: GLSL over `key` (uvec2, the threefry key
/// of the element's sample) and `i` (uint, the element's index in its sample), with the functions
/// of shaders/common/random.glsl, in `compute`, converted to out's dtype. `keys` is (batch..., 2):
/// one key per `sample_size` consecutive elements of out, whose shape is batch + the sample's.
void keyed_elementwise(std::string_view body, Dtype compute, const Array& keys, int64_t sample_size,
                       Array& out);
/// out (batch..., n), int32 = per key of `keys` (batch..., 2), RandomPermutation's Fisher-Yates
/// shuffle of 0..n-1 (the CPU's permutation, bit for bit; one invocation per key).
void random_permutation(const Array& keys, int64_t n, Array& out);
/// out = alpha * a @ b + beta * addend with a [.., M, K], b [.., K, N]; batch dims and the addend
/// broadcast to out's shape (float32). The addend is read only when beta != 0.
void matmul(const Array& a, const Array& b, Array& out, const Array* addend = nullptr, double alpha = 1.0,
            double beta = 0.0);
/// out = x @ w^T + bias (Linear): x [.., in], w [units, in], bias [units] or null; float32.
void linear(const Array& x, const Array& w, const Array* bias, Array& out);

/// The constants of one Adam step, rounded to the parameters' dtype by the kernel.
struct AdamStepConstants {
  double w, one_minus_w, b2, one_minus_b2, eps;
  bool amsgrad, lerp_from_m;
  bool decay;  ///< a last 0-d input multiplies p first (AdamW)
};
/// FusedAdamStep (optim/fused_adam.cpp): in = p, g, m, v, [vmax,] step_size, bc2_sqrt[, decay] (0-d), all
/// float32 or all float64 of one shape; out = p1, m1, v1, [vmax1], fresh device storage.
void adam_step(std::span<const Array> in, std::span<Array> out, const AdamStepConstants& constants);

// Reductions and indexing (core/vulkan/runtime/reduce_facade.cpp, index_facade.cpp; without
// Vulkan, runtime/disabled_*.cpp).

/// out = the reduction `kind` (ReduceKind of core/cpu/reduce.h, as its integer value) of x over
/// `axes` (sorted, distinct, non-negative); out holds x's shape less those axes, or with them as
/// 1 (keepdims), and the CPU's result dtype (reduce_out_dtype).
void reduce(uint8_t kind, const Array& x, std::span<const int> axes, Array& out);
/// out = index of the largest (is_max) or smallest element of x along `axis`, first on ties,
/// a NaN counted as the extreme (the first NaN wins) as on the CPU; out is x's shape less `axis`
/// (or 1 there), int32 like ArgReduce's output.
void arg_reduce(bool is_max, const Array& x, int axis, Array& out);
/// out = x's elements at `indices` along `axis` (take_along_axis: indices has x's rank).
void take_along_axis(const Array& x, const Array& indices, int axis, Array& out);
/// out = x with `updates` added at `indices` along `axis` (the vjp of take_along_axis).
void scatter_add_along_axis(const Array& x, const Array& indices, const Array& updates, int axis, Array& out);

// ---------------------------------------------------------------- the eval loop and storage

/// True when this thread has recorded GPU work not yet submitted.
bool has_pending();
/// Submits this thread's recorded work and waits for it. Throws DeviceError (out of memory,
/// device lost, failed submit); the recorded work is then dropped.
void submit_pending();
/// Drops this thread's recorded, unsubmitted work (after an error in the eval that recorded it).
void discard_pending() noexcept;

/// A device copy of `bytes` host bytes (for Buffer::device()).
std::shared_ptr<detail::vk::DeviceBuffer> upload(const void* src, size_t bytes);
/// Copies `bytes` of a device buffer, from byte `offset` on, to host memory (for Buffer::ptr(),
/// and CompiledFunction::call_into's outputs).
void download(const detail::vk::DeviceBuffer& src, void* dst, size_t bytes, size_t offset = 0);

/// Device memory counters, zeros when no GPU context exists yet (never creates one). The last two
/// are cumulative: array bytes copied host to device and device to host since process start.
struct MemoryCounters {
  size_t active_bytes = 0, peak_bytes = 0, cache_bytes = 0, reserved_bytes = 0;
  size_t host_to_device_bytes = 0, device_to_host_bytes = 0;
};
MemoryCounters memory_counters() noexcept;
void reset_peak_memory() noexcept;
void clear_cache() noexcept;

}  // namespace kiln::gpu
