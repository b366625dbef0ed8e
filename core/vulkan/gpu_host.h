#pragma once
// The host fallback of an eval_gpu (part of the gpu facade, STYLE.md R9): a primitive without a
// Vulkan kernel (the LAPACK decompositions of core/ops/linalg_decomp.h) computes on the CPU inside
// a GPU evaluation. Implemented in core/eval.cpp, which owns the thread's recording.
#include <span>

#include "kiln/core/array.h"

namespace kiln {
class Primitive;
}

namespace kiln::gpu {

/// Runs `p.eval_cpu(inputs, outputs)` from an eval_gpu, as eval runs a CPU primitive: inputs that
/// GPU work still computes are waited for (this thread's recording is submitted first when one of
/// them has no host copy), and the kernel's host reads download them once (memory_stats()'s
/// device_to_host_bytes). The outputs keep their host storage and are uploaded once, on their first
/// GPU use (host_to_device_bytes), so a chain of such primitives moves nothing between them. Throws
/// NotImplemented while this thread captures a GPU program (compile then replays the steps one by
/// one), and whatever the kernel throws.
void eval_on_host(const Primitive& p, std::span<const Array> inputs, std::span<Array> outputs);

}  // namespace kiln::gpu
