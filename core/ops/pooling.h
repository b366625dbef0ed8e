#pragma once
// Max pooling in PyTorch's layout: input (N, C, H, W), output (N, C, H_out, W_out).
#include <array>
#include <cstdint>

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

}  // namespace kiln
