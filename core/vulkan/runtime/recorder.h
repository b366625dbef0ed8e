#pragma once
// Records the dispatches of one evaluation into one command buffer and submits them once
// (STYLE.md R10). A barrier goes in only where a dispatch touches a buffer that an earlier
// dispatch since the last barrier wrote (read after write, write after write) or that it writes
// while an earlier one read it (write after read). The submit signals the context's timeline
// semaphore; submit_and_wait() blocks on it and turns any device error into a DeviceError on the
// calling thread.
//
// One Recorder is used by one thread at a time; any number of recorders may record and submit at
// once (the queue is guarded by the context).
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kiln/core/vulkan/gpu_async.h"
#include "kiln/core/vulkan/runtime/memory.h"

namespace kiln::detail::vk {

class Context;
struct Frame;
struct Pipeline;
struct ShaderCode;

enum class Access : uint8_t { read = 1, write = 2, read_write = 3 };

/// A storage buffer bound to a dispatch, at binding = its position in the list.
struct Binding {
  BufferPtr buffer;
  Access access;
};

/// Workgroup counts of a dispatch.
struct Groups {
  uint32_t x = 1, y = 1, z = 1;
  /// `n` groups along one dimension, split over x and y when n exceeds the device's x limit: then
  /// kGridWidth wide, which shaders/common/grid.glsl's kiln_group_id() assumes: kernels find their
  /// group without reading gl_NumWorkGroups, which costs NVIDIA's driver about 0.28 us a dispatch.
  /// At most kGridWidth * maxComputeWorkGroupCount[1] groups (about 2^31 on any device).
  static Groups linear(uint64_t n, const Context& ctx);
  // A power of two within the 65535 groups Vulkan guarantees on x. grid.glsl repeats it; the test
  // SplitGridsNumberTheirGroupsInOrder fails when the two differ.
  static constexpr uint32_t kGridWidth = 32768;
};

/// Work recorded once into a secondary command buffer (Recorder::Mode::capture) and executed any
/// number of times, from any thread, by Recorder::execute: the body of a compiled step replayed
/// without recording it again (the Vulkan analogue of a CUDA graph). It owns the buffers the
/// recording bound; every recorder that executes it keeps it alive until that work completes.
class CapturedCommands {
 public:
  CapturedCommands(Context& ctx, std::unique_ptr<Frame> frame, std::vector<BufferPtr> buffers,
                   size_t commands);
  ~CapturedCommands();
  CapturedCommands(const CapturedCommands&) = delete;
  CapturedCommands& operator=(const CapturedCommands&) = delete;
  /// Dispatches and copies recorded.
  size_t commands() const { return commands_; }
  /// Pipeline barriers recorded between them.
  size_t barriers() const { return barriers_; }

 private:
  friend class Recorder;
  Context& ctx_;
  std::unique_ptr<Frame> frame_;  // null when nothing was recorded
  std::vector<BufferPtr> buffers_;
  size_t commands_;
  size_t barriers_ = 0;
  // Captured while profiling (profile.h): the program writes a timestamp pair around each of its
  // dispatches into its own pool, and a timed recording that executes it reads them back once its
  // submit completes. Threads replaying one program at once share the pool, so their figures may
  // mix: a profile is taken from one thread.
  VkQueryPool timestamps_ = VK_NULL_HANDLE;
  std::vector<std::string> timed_shaders_;
};

/// Work handed to the queue by Recorder::submit and not yet known to be complete (the facade's
/// gpu::PendingWork). It holds the command buffer and every buffer and program the work uses until
/// then; the destructor waits for it (a device error there is dropped: wait() is where it is
/// reported).
class Submission final : public gpu::PendingWork {
 public:
  Submission(Context& ctx, uint64_t value, std::vector<std::unique_ptr<Frame>> frames,
             std::vector<BufferPtr> buffers, std::vector<std::shared_ptr<const CapturedCommands>> executed);
  ~Submission() override;
  Submission(const Submission&) = delete;
  Submission& operator=(const Submission&) = delete;
  /// Whether the work has completed (never blocks). Throws DeviceError if the device was lost.
  bool done() override;
  /// Blocks until the work has completed, then lets go of what it used. Throws DeviceError.
  void wait() override;

 private:
  void release() noexcept;
  Context& ctx_;
  uint64_t value_;                              // the last chunk's: the timeline orders the chunks
  std::vector<std::unique_ptr<Frame>> frames_;  // empty once released
  std::vector<BufferPtr> buffers_;
  std::vector<std::shared_ptr<const CapturedCommands>> executed_;
};

class Recorder {
 public:
  /// submit: a primary command buffer, submitted by submit_and_wait. capture: a secondary one,
  /// ended by finish_capture and executed later (never submitted by itself).
  enum class Mode : uint8_t { submit, capture };
  explicit Recorder(Context& ctx, Mode mode = Mode::submit);
  /// Discards what was recorded and not submitted. Never throws.
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  /// Records one dispatch of `shader` specialised with `spec` (constant i has id i), `bindings`
  /// at bindings 0.., `push` bytes (at most Context::kPushConstantBytes) as push constants.
  /// Keeps the buffers alive until the work completes. `addressed`: buffers the shader reaches
  /// through device addresses instead of bindings (then `bindings` may be empty), ordered and kept alive
  /// alike. Throws DeviceError (pipeline creation) or ValueError (bindings, push bytes, or no buffer).
  void dispatch(const ShaderCode& shader, std::span<const uint32_t> spec, std::span<const Binding> bindings,
                std::span<const std::byte> push, Groups groups, std::span<const Binding> addressed = {});
  template <class Push>
  void dispatch(const ShaderCode& shader, std::initializer_list<uint32_t> spec,
                std::initializer_list<Binding> bindings, const Push& push, Groups groups) {
    static_assert(std::is_trivially_copyable_v<Push>);
    dispatch(shader, std::span<const uint32_t>(spec.begin(), spec.size()),
             std::span<const Binding>(bindings.begin(), bindings.size()),
             std::as_bytes(std::span<const Push>(&push, 1)), groups);
  }
  /// Records a copy of `bytes` from src at src_offset to dst at dst_offset, hazards tracked alike.
  void copy(const BufferPtr& src, size_t src_offset, const BufferPtr& dst, size_t dst_offset, size_t bytes);

  /// Records the execution of a captured program, with barriers before it (what was recorded
  /// earlier, and any earlier submit, is complete and visible to it) and after it (what is recorded
  /// later sees its writes). Keeps `commands` alive until the work completes. Submit mode only.
  void execute(const std::shared_ptr<const CapturedCommands>& commands);
  /// Capture mode: ends the recording and hands it over, with every buffer it bound; the recorder
  /// is empty afterwards. Throws DeviceError.
  std::shared_ptr<const CapturedCommands> finish_capture();
  Mode mode() const { return mode_; }

  /// Submits everything recorded (one vkQueueSubmit) and waits for it. After it the recorder is
  /// empty and may record again. Throws DeviceError (out of memory, device lost, failed submit);
  /// the recorded work is then dropped.
  void submit_and_wait();
  /// Submits everything recorded without waiting: the returned Submission completes it (null when
  /// nothing was recorded). A profiled recording (KILN_VULKAN_PROFILE=1) is waited for here, to
  /// read its timestamps. Throws as submit_and_wait does.
  std::unique_ptr<Submission> submit();

  Context& context() const { return ctx_; }
  /// Barriers recorded since construction (for tests of the hazard tracking).
  size_t barriers() const { return barriers_; }
  /// Dispatches and copies recorded since the last submit_and_wait/submit (chunks already handed
  /// to the queue included).
  size_t pending() const { return pending_; }
  /// Dense copies of strided views made in this recording, by a key naming the source view (its
  /// buffer's id, dtype, offset, shape and strides): an operand that several kernels read in one
  /// recording is copied once. Sound because a recording's buffers are not written after the
  /// kernel that made them (kernels write fresh outputs) and stay alive until it completes.
  /// Forgotten when the recording ends.
  const BufferPtr* find_dense_copy(std::string_view key) const;
  void remember_dense_copy(std::string key, BufferPtr dense);
  /// Forgets the dense copies of views of buffer `id` (their keys start with it): an op is about to
  /// write that buffer in place (a donated slice_update), so copies made earlier are stale.
  void forget_dense_copies(uint64_t id);
  /// How many references to `buffer` this recording holds (one per dispatch or copy that bound
  /// it): with the owner's own, they are all the references when no other work can touch it.
  size_t references(const BufferPtr& buffer) const;
  /// Chunks handed to the queue before the end of the recording (for tests).
  size_t early_submits() const { return early_submits_; }

  /// Each chunk after the first (Context::submit_chunk() commands) is twice the one before, up to
  /// kMaxChunk: small enough that the last chunk's device time, which nothing overlaps, stays short
  /// (measured on the H200: 16 then up to 64 beat 32 up to 512 by a quarter on a 1000-op chain).
  /// Small evaluations (most) are one submit.
  static constexpr size_t kMaxChunk = 64;

 private:
  void begin_if_needed();
  // A descriptor set from the frame's pools with `writes` (their dstSet filled in) written to it.
  VkDescriptorSet descriptor_set(uint32_t n, std::span<VkWriteDescriptorSet> writes);
  // Inserts a barrier if touching `b` with `access` conflicts with what was done since the last one.
  bool conflicts(uint64_t id, Access access);
  void note(const BufferPtr& b, Access access);
  // A barrier making every earlier write visible to `dst` (compute and/or transfer stage bits).
  void barrier(VkPipelineStageFlags dst);
  // Before a command of stage `stage`: a barrier when it conflicts, or when earlier writes are not yet
  // visible to its stage. Then notes the stage.
  void order(bool conflict, VkPipelineStageFlags stage);
  void clear_touched();
  // Hands the commands recorded so far to the queue (a chunk of a long recording) when enough have
  // accumulated; recording goes on in a new command buffer.
  void submit_chunk_if_due();
  void reset();

  Context& ctx_;
  Mode mode_;
  std::unique_ptr<Frame> frame_;
  bool recording_ = false;
  size_t pending_ = 0;
  size_t barriers_ = 0;
  // Stages of the commands since the last barrier, and the stages every earlier write is visible to
  // (all at the start of a command buffer: the timeline wait before it covers every stage).
  VkPipelineStageFlags segment_stages_ = 0, visible_stages_ = 0;
  VkPipeline bound_pipeline_ = VK_NULL_HANDLE;  // in the command buffer being recorded
  // Chunks of this recording already submitted (kept until the whole recording completes), the
  // timeline value of the last, and when the next is due.
  std::vector<std::unique_ptr<Frame>> submitted_frames_;
  uint64_t submitted_value_ = 0;
  size_t chunk_start_ = 0, chunk_size_ = 0, early_submits_ = 0;  // chunk_size_ 0: no early submits
  // Buffers touched since the last barrier (id -> Access bits): an open-addressing table whose
  // slots belong to the current generation only, so a barrier clears it by bumping `generation_`
  // (a barrier follows nearly every dispatch of a dependent chain).
  struct Touched {
    uint64_t id = 0;
    uint32_t generation = 0;
    uint8_t bits = 0;
  };
  Touched* find_touched(uint64_t id);
  std::vector<Touched> since_barrier_ = std::vector<Touched>(64);  // a power of two
  size_t touched_ = 0;                                             // slots of the current generation
  uint32_t generation_ = 1;                                        // 0 marks a slot never used
  std::vector<BufferPtr> keep_alive_;
  std::vector<std::pair<std::string, BufferPtr>> dense_copies_;
  std::vector<std::shared_ptr<const CapturedCommands>> executed_;  // alive until the submit completes
  // The pipelines this recorder dispatched lately, by (shader digest, spec, bindings): skips the
  // shared cache's hash and lock on the common path. Pipelines live as long as the context.
  struct RecentPipeline {
    uint64_t digest = 0;
    uint32_t bindings = 0;
    uint32_t spec_size = 0;
    std::array<uint32_t, 4> spec{};
    const Pipeline* pipeline = nullptr;  // null: an empty slot
  };
  const Pipeline& pipeline(const ShaderCode& shader, std::span<const uint32_t> spec, uint32_t bindings);
  std::array<RecentPipeline, 64> recent_pipelines_{};
  // KILN_VULKAN_PROFILE=1 (profile.h): a timestamp before and after each dispatch of this
  // recording, and the shader each pair belongs to.
  static constexpr uint32_t kMaxTimedDispatches = 4096;
  VkQueryPool timestamps_ = VK_NULL_HANDLE;
  bool timing_ = false;  // this recording is timed
  std::vector<std::string> timed_shaders_;
  std::vector<std::shared_ptr<const CapturedCommands>> timed_programs_;  // executed, with timestamps
  VkQueryPool timestamp_pool();
  void collect_timings();
};

}  // namespace kiln::detail::vk
