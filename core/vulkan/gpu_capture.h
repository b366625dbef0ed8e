#pragma once
// Captured GPU programs for compile (core/transforms/capture.cpp): an evaluation's kernels
// recorded once into a command buffer of their own and replayed by later calls, which only copy
// their inputs in and the results out (the Vulkan analogue of a CUDA graph). Without Vulkan,
// runtime/disabled_capture.cpp throws DeviceError from every call.
#include <memory>
#include <span>

#include "kiln/core/array.h"

namespace kiln::gpu {

/// A recording made between begin_capture and end_capture, with every buffer it bound. Opaque.
struct CapturedProgram;

/// This thread's GPU recording goes into a new captured program until end_capture or
/// abort_capture. Throws ValueError when this thread has recorded work not yet submitted (capture
/// starts outside an evaluation) or is capturing already, DeviceError without a GPU.
void begin_capture();
/// Ends the capture begun on this thread and returns what it recorded. Throws DeviceError.
std::shared_ptr<const CapturedProgram> end_capture();
/// Drops the capture begun on this thread, if any. Never throws.
void abort_capture() noexcept;
/// Whether this thread is capturing.
bool capturing();
/// How many dispatches and copies a program replays.
size_t captured_commands(const CapturedProgram& program);
/// How many pipeline barriers separate them.
size_t captured_barriers(const CapturedProgram& program);

/// Submits one replay of `program` alone (nothing copied in or out: it reads and writes the buffers
/// it was recorded with) and waits for it: the cost of the recorded work itself, for benchmarks and
/// tests. Throws ValueError while this thread captures, DeviceError as an evaluation does.
void replay_and_wait(const std::shared_ptr<const CapturedProgram>& program);

/// Records a replay of `program` into this thread's recording: each of `inputs` copied into the
/// program's `slots_in` (the arrays its recording read, same shapes and dtypes, row-major), the
/// program, then each of `slots_out` (the arrays it wrote) copied into fresh storage for
/// `outputs`. The replay runs when the evaluation that records it is submitted. Throws ShapeError
/// or DtypeError when inputs and slots differ.
void run_captured(const std::shared_ptr<const CapturedProgram>& program, std::span<const Array> inputs,
                  std::span<const Array> slots_in, std::span<const Array> slots_out,
                  std::span<Array> outputs);

}  // namespace kiln::gpu

namespace kiln::detail {
/// Evaluates `outputs`, whose whole unevaluated graph runs on the GPU, into a captured program
/// instead of submitting it (core/eval.cpp). The outputs are then "available" with the storage
/// the program writes, whose contents are undefined until a replay. Throws NotImplemented when a
/// node runs on the CPU or the graph needs a host read, ValueError inside an evaluation.
std::shared_ptr<const gpu::CapturedProgram> capture_eval(std::span<const Array> outputs);
}  // namespace kiln::detail
