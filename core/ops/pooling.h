#pragma once
// Pooling in PyTorch's layout: input (N, C, spatial...), output (N, C, spatial_out...).
// max_pool2d is a primitive (pooling.cpp); max_pool1d/3d, avg_pool1d/2d/3d and
// adaptive_avg_pool1d/2d/3d are compositions (pooling_more.cpp).
#include <array>
#include <cstdint>
#include <optional>

#include "kiln/core/array.h"

namespace kiln {

/// The maximum of each (dilated) kernel window, as torch.nn.functional.max_pool2d (without
/// return_indices). H_out defaults to floor((H + 2 p - d (k - 1) - 1) / s) + 1 (likewise W_out);
/// an explicit output_size entry (e.g. PyTorch's ceil_mode size; -1 keeps the default) is
/// accepted when every window starts inside the padded input. Padded positions never win: a
/// window without any input element is -inf. The maximum of a window is its first maximum in
/// row-major window order, and the gradient goes there; a NaN is the maximum (the last NaN of the
/// window, as PyTorch's CPU kernel). float16/bfloat16/float32/float64; differentiable to any order
/// (vjp, jvp) and batchable (vmap).
/// Throws ShapeError for an input that is not 4-d or an output size < 1, ValueError for a
/// kernel, stride or dilation < 1, padding < 0, padding above half the dilated kernel
/// ((k - 1) d + 1) / 2, or an output_size entry whose last window starts past the padded input,
/// and DtypeError for a non-floating input.
Array max_pool2d(const Array& x, std::array<int, 2> kernel, std::array<int, 2> stride,
                 std::array<int, 2> padding = {0, 0}, std::array<int, 2> dilation = {1, 1},
                 std::array<int64_t, 2> output_size = {-1, -1}, StreamOrDevice s = {});

// The ops below take (N, C, spatial...) or unbatched (C, spatial...) floating-point input, as
// torch.nn.functional's. Output sizes are PyTorch's: floor((L + 2 p - d (k - 1) - 1) / s) + 1,
// rounded up instead with ceil_mode, where a last window that would start in the right padding is
// dropped. stride defaults to the kernel size. They throw ShapeError for another rank, an empty
// non-batch dimension or an output size < 1, ValueError for a kernel, stride or dilation < 1,
// padding < 0 or above half the (dilated) kernel ((k - 1) d + 1) / 2, and DtypeError for a
// non-floating input (messages name the op). Each is differentiable to any order (vjp, jvp) and
// batchable (vmap), on both devices.

/// torch.nn.functional.max_pool1d (without return_indices): max_pool2d over a unit height, with
/// its rules (first maximum, last NaN, -inf padding that never wins).
Array max_pool1d(const Array& x, int kernel, std::optional<int> stride = std::nullopt, int padding = 0,
                 int dilation = 1, bool ceil_mode = false, StreamOrDevice s = {});
/// torch.nn.functional.max_pool3d: max_pool2d over (H, W), then over D (exact: the maximum of a
/// box is the maximum of its slices' maxima), so its gradient goes to the first maximum in
/// row-major (d, h, w) window order and a NaN is the maximum (the last NaN), as PyTorch's CPU kernel.
Array max_pool3d(const Array& x, std::array<int, 3> kernel,
                 std::optional<std::array<int, 3>> stride = std::nullopt,
                 std::array<int, 3> padding = {0, 0, 0}, std::array<int, 3> dilation = {1, 1, 1},
                 bool ceil_mode = false, StreamOrDevice s = {});

/// torch.nn.functional.avg_pool1d/2d/3d: the mean of each window of the zero-padded input. The
/// divisor is divisor_override if given; else, with count_include_pad, the window's extent clipped
/// to the padded input (not to ceil_mode's extra area); else the count of real elements. Window
/// sums are strided slices added per axis (a box is separable), in float32 for float16/bfloat16.
/// Also throws ValueError for divisor_override < 1.
Array avg_pool1d(const Array& x, int kernel, std::optional<int> stride = std::nullopt, int padding = 0,
                 bool ceil_mode = false, bool count_include_pad = true,
                 std::optional<int> divisor_override = std::nullopt, StreamOrDevice s = {});
Array avg_pool2d(const Array& x, std::array<int, 2> kernel,
                 std::optional<std::array<int, 2>> stride = std::nullopt, std::array<int, 2> padding = {0, 0},
                 bool ceil_mode = false, bool count_include_pad = true,
                 std::optional<int> divisor_override = std::nullopt, StreamOrDevice s = {});
Array avg_pool3d(const Array& x, std::array<int, 3> kernel,
                 std::optional<std::array<int, 3>> stride = std::nullopt,
                 std::array<int, 3> padding = {0, 0, 0}, bool ceil_mode = false,
                 bool count_include_pad = true, std::optional<int> divisor_override = std::nullopt,
                 StreamOrDevice s = {});

/// torch.nn.functional.adaptive_avg_pool1d/2d/3d: output element i of a spatial axis of size
/// L -> O averages input [floor(i L / O), ceil((i + 1) L / O)) (windows overlap when O does not
/// divide L; O may exceed L). Throws ValueError for an output size < 1 and as the ops above.
Array adaptive_avg_pool1d(const Array& x, int64_t output_size, StreamOrDevice s = {});
Array adaptive_avg_pool2d(const Array& x, std::array<int64_t, 2> output_size, StreamOrDevice s = {});
Array adaptive_avg_pool3d(const Array& x, std::array<int64_t, 3> output_size, StreamOrDevice s = {});

}  // namespace kiln
