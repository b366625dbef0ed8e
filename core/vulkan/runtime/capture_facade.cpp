// Captured programs (core/vulkan/gpu_capture.h) on the Vulkan runtime: while capturing, this
// thread's recorder is a capture-mode one, whose secondary command buffer becomes the program.
#include <algorithm>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/gpu_capture.h"
#include "kiln/core/vulkan/runtime/array_views.h"

namespace kiln::gpu {
namespace vk = kiln::detail::vk;

struct CapturedProgram {
  std::shared_ptr<const vk::CapturedCommands> commands;
};

namespace {
// The recorder set aside while this thread captures (null when it had none yet).
thread_local std::unique_ptr<vk::Recorder> tls_saved_recorder;
thread_local bool tls_capturing = false;
}  // namespace

void begin_capture() {
  if (tls_capturing) throw ValueError::of("gpu capture", "this thread is capturing already");
  if (vk::tls_thread_recorder && vk::tls_thread_recorder->pending() > 0)
    throw ValueError::of("gpu capture",
                         "this thread has recorded work not yet submitted (capture inside an eval)");
  auto capture = std::make_unique<vk::Recorder>(vk::context(), vk::Recorder::Mode::capture);
  tls_saved_recorder = std::move(vk::tls_thread_recorder);
  vk::tls_thread_recorder = std::move(capture);
  tls_capturing = true;
}

std::shared_ptr<const CapturedProgram> end_capture() {
  if (!tls_capturing) throw ValueError::of("gpu capture", "end_capture without begin_capture");
  struct Restore {
    ~Restore() {
      vk::tls_thread_recorder = std::move(tls_saved_recorder);
      tls_capturing = false;
    }
  } restore;
  // discard_pending() (an error while capturing) may have replaced the capture recorder.
  if (!vk::tls_thread_recorder || vk::tls_thread_recorder->mode() != vk::Recorder::Mode::capture)
    throw ValueError::of("gpu capture", "the capture was discarded by an error");
  return std::make_shared<const CapturedProgram>(CapturedProgram{vk::tls_thread_recorder->finish_capture()});
}

void abort_capture() noexcept {
  if (!tls_capturing) return;
  vk::tls_thread_recorder = std::move(tls_saved_recorder);
  tls_capturing = false;
}

bool capturing() { return tls_capturing; }

size_t captured_commands(const CapturedProgram& program) { return program.commands->commands(); }
size_t captured_barriers(const CapturedProgram& program) { return program.commands->barriers(); }

namespace {
constexpr const char* kReplay = "gpu replay";
void check_replayable(const std::shared_ptr<const CapturedProgram>& program) {
  if (!program) throw ValueError::of(kReplay, "no captured program");
  if (tls_capturing) throw ValueError::of(kReplay, "a captured program cannot be replayed while capturing");
}
}  // namespace

void replay_and_wait(const std::shared_ptr<const CapturedProgram>& program) {
  check_replayable(program);
  // A recorder of its own: this thread's may hold an evaluation's work not yet submitted.
  vk::Recorder r(vk::context());
  r.execute(program->commands);
  r.submit_and_wait();
}

void run_captured(const std::shared_ptr<const CapturedProgram>& program, std::span<const Array> inputs,
                  std::span<const Array> slots_in, std::span<const Array> slots_out,
                  std::span<Array> outputs) {
  check_replayable(program);
  if (inputs.size() != slots_in.size() || outputs.size() != slots_out.size())
    throw ValueError::of(kReplay, "the number of inputs or outputs differs from the capture",
                         "{} inputs for {}, {} outputs for {}", inputs.size(), slots_in.size(),
                         outputs.size(), slots_out.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].shape() != slots_in[i].shape())
      throw ShapeError::of(kReplay, "an input's shape differs from the capture's", "input {}: {} vs {}", i,
                           shape_str(inputs[i].shape()), shape_str(slots_in[i].shape()));
    if (inputs[i].dtype() != slots_in[i].dtype())
      throw DtypeError::of(kReplay, "an input's dtype differs from the capture's", "input {}", i);
  }
  vk::Recorder& r = vk::thread_recorder();
  // Inputs in, the program, results out: the copies of each side in one dispatch. Row-contiguous
  // arrays (nearly all) become byte ranges directly: views with their shapes and strides would cost
  // a replay of a step with a few hundred arrays more host time than the copies take on the GPU.
  std::vector<vk::ByteCopy> copies;
  copies.reserve(std::max(inputs.size(), outputs.size()));
  auto copy_in = [&](const Array& from, const Array& to) {
    if (from.size() == 0) return;
    if (const auto c = vk::byte_copy(from, to))
      copies.push_back(*c);
    else
      vk::record_copy_any(r, vk::array_view(from), vk::array_view(to));
  };
  for (size_t i = 0; i < inputs.size(); ++i) copy_in(inputs[i], slots_in[i]);
  vk::record_byte_copies(r, copies);
  r.execute(program->commands);
  copies.clear();
  for (size_t j = 0; j < outputs.size(); ++j) {
    allocate(outputs[j]);
    copy_in(slots_out[j], outputs[j]);
  }
  vk::record_byte_copies(r, copies);
}

}  // namespace kiln::gpu
