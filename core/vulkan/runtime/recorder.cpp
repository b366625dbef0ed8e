#include "kiln/core/vulkan/runtime/recorder.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/profile.h"

namespace kiln::detail::vk {
namespace {
constexpr uint32_t kSetsPerPool = 256;

bool has(uint8_t bits, Access a) { return bits & static_cast<uint8_t>(a); }

constexpr VkPipelineStageFlags kCompute = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
constexpr VkPipelineStageFlags kTransfer = VK_PIPELINE_STAGE_TRANSFER_BIT;
constexpr VkPipelineStageFlags kAllStages = kCompute | kTransfer;

// The accesses of `stages` that a barrier orders: only those the stages can perform (the validation
// layers reject a shader access on a transfer-only stage).
VkAccessFlags writes_of(VkPipelineStageFlags stages) {
  return (stages & kCompute ? VK_ACCESS_SHADER_WRITE_BIT : 0) |
         (stages & kTransfer ? VK_ACCESS_TRANSFER_WRITE_BIT : 0);
}
VkAccessFlags accesses_of(VkPipelineStageFlags stages) {
  return (stages & kCompute ? VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT : 0) |
         (stages & kTransfer ? VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT : 0);
}
}  // namespace

Groups Groups::linear(uint64_t n, const Context& ctx) {
  const uint64_t max_x = ctx.caps().max_workgroup_count[0];
  if (n <= max_x) return {static_cast<uint32_t>(std::max<uint64_t>(n, 1)), 1, 1};
  const uint64_t y = (n + kGridWidth - 1) / kGridWidth;
  if (y > ctx.caps().max_workgroup_count[1])
    throw ValueError::of("vulkan", "too many workgroups for one dispatch", "{}", n);
  // x * y >= n; the shaders skip the excess groups.
  return {kGridWidth, static_cast<uint32_t>(y), 1};
}

CapturedCommands::CapturedCommands(Context& ctx, std::unique_ptr<Frame> frame, std::vector<BufferPtr> buffers,
                                   size_t commands)
    : ctx_(ctx), frame_(std::move(frame)), buffers_(std::move(buffers)), commands_(commands) {}

CapturedCommands::~CapturedCommands() {
  ctx_.destroy_frame(std::move(frame_));
  if (timestamps_) ctx_.api().vkDestroyQueryPool(ctx_.device(), timestamps_, nullptr);
}

Recorder::Recorder(Context& ctx, Mode mode) : ctx_(ctx), mode_(mode), chunk_size_(ctx.submit_chunk()) {}

Recorder::~Recorder() {
  reset();
  if (timestamps_) ctx_.api().vkDestroyQueryPool(ctx_.device(), timestamps_, nullptr);
}

void Recorder::reset() {
  if (!submitted_frames_.empty()) {
    // Chunks of an abandoned or failed recording may still run: wait before reusing their frames
    // (a lost device runs nothing more).
    try {
      ctx_.wait(submitted_value_);
    } catch (...) {
    }
    for (auto& f : submitted_frames_) ctx_.release_frame(std::move(f));
    submitted_frames_.clear();
  }
  submitted_value_ = 0;
  chunk_start_ = 0;
  chunk_size_ = ctx_.submit_chunk();
  if (frame_) {
    // An ended or abandoned command buffer is reset with its pool; nothing of it was submitted
    // (or it completed: submit_and_wait waits even when it throws). An abandoned capture is
    // destroyed: its secondary command buffer is not reused.
    if (mode_ == Mode::capture)
      ctx_.destroy_frame(std::move(frame_));
    else
      ctx_.release_frame(std::move(frame_));
  }
  executed_.clear();
  recording_ = false;
  pending_ = 0;
  clear_touched();
  keep_alive_.clear();
  dense_copies_.clear();
  timed_shaders_.clear();
  timed_programs_.clear();
  timing_ = false;
}

const BufferPtr* Recorder::find_dense_copy(std::string_view key) const {
  for (const auto& [k, dense] : dense_copies_)
    if (k == key) return &dense;
  return nullptr;
}

void Recorder::remember_dense_copy(std::string key, BufferPtr dense) {
  dense_copies_.emplace_back(std::move(key), std::move(dense));
}

void Recorder::forget_dense_copies(uint64_t id) {
  const std::string prefix = std::to_string(id) + ' ';
  std::erase_if(dense_copies_, [&](const auto& entry) { return entry.first.starts_with(prefix); });
}

size_t Recorder::references(const BufferPtr& buffer) const {
  return static_cast<size_t>(std::ranges::count(keep_alive_, buffer));
}

VkQueryPool Recorder::timestamp_pool() {
  if (!timestamps_) {
    VkQueryPoolCreateInfo info{};
    info.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
    info.queryType = VK_QUERY_TYPE_TIMESTAMP;
    info.queryCount = 2 * kMaxTimedDispatches;
    check(ctx_.api().vkCreateQueryPool(ctx_.device(), &info, nullptr, &timestamps_), "vkCreateQueryPool");
  }
  return timestamps_;
}

void Recorder::begin_if_needed() {
  if (recording_) return;
  ctx_.check_usable();
  const bool capture = mode_ == Mode::capture;
  if (!frame_) frame_ = capture ? ctx_.create_secondary_frame() : ctx_.acquire_frame();
  VkCommandBufferBeginInfo begin{};
  begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  // A captured program may be pending in several primaries at once (threads replaying one step).
  begin.flags =
      capture ? VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT : VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  VkCommandBufferInheritanceInfo inheritance{};
  inheritance.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_INHERITANCE_INFO;
  if (capture) begin.pInheritanceInfo = &inheritance;
  check(ctx_.api().vkBeginCommandBuffer(frame_->cmd, &begin), "vkBeginCommandBuffer");
  recording_ = true;
  segment_stages_ = 0;
  visible_stages_ = kAllStages;
  bound_pipeline_ = VK_NULL_HANDLE;

  // A captured program resets its own pool each time it runs (finish_capture hands the pool over).
  timing_ = profiling() && ctx_.caps().timestamp_period > 0;
  if (timing_) ctx_.api().vkCmdResetQueryPool(frame_->cmd, timestamp_pool(), 0, 2 * kMaxTimedDispatches);
}

void Recorder::collect_timings() {
  const double period = ctx_.caps().timestamp_period * 1e-9;
  auto add = [&](VkQueryPool pool, std::span<const std::string> shaders, std::string_view prefix) {
    if (shaders.empty()) return;
    std::vector<uint64_t> ticks(2 * shaders.size());
    check(ctx_.api().vkGetQueryPoolResults(ctx_.device(), pool, 0, static_cast<uint32_t>(ticks.size()),
                                           ticks.size() * sizeof(uint64_t), ticks.data(), sizeof(uint64_t),
                                           VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
          "vkGetQueryPoolResults");
    for (size_t i = 0; i < shaders.size(); ++i)
      profile_add(prefix.empty() ? shaders[i] : fmt::format("{}{}", prefix, shaders[i]),
                  static_cast<double>(ticks[2 * i + 1] - ticks[2 * i]) * period);
  };
  add(timestamps_, timed_shaders_, "");
  // A replayed program's dispatches, apart from the eager ones.
  for (const auto& program : timed_programs_)
    add(program->timestamps_, program->timed_shaders_, kCapturedPrefix);
}

Recorder::Touched* Recorder::find_touched(uint64_t id) {
  const size_t mask = since_barrier_.size() - 1;
  for (size_t i = (id * 0x9e3779b97f4a7c15ull) >> 32 & mask;; i = (i + 1) & mask) {
    Touched& t = since_barrier_[i];
    if (t.generation != generation_ || t.id == id) return &t;  // a free slot or this buffer's
  }
}

void Recorder::clear_touched() {
  touched_ = 0;
  if (++generation_ == 0) {  // wrapped: forget every slot, then start again at 1
    std::ranges::fill(since_barrier_, Touched{});
    generation_ = 1;
  }
}

bool Recorder::conflicts(uint64_t id, Access access) {
  const Touched* t = find_touched(id);
  if (t->generation != generation_) return false;
  // Read after write and write after write need the earlier write visible; write after read needs
  // the earlier read finished. Read after read needs nothing.
  return has(t->bits, Access::write) || has(static_cast<uint8_t>(access), Access::write);
}

void Recorder::note(const BufferPtr& b, Access access) {
  if (2 * (touched_ + 1) > since_barrier_.size()) {  // keep at most half the slots used
    std::vector<Touched> old(since_barrier_.size() * 2);
    old.swap(since_barrier_);
    for (const Touched& t : old)
      if (t.generation == generation_) *find_touched(t.id) = t;
  }
  Touched* t = find_touched(b->id());
  if (t->generation != generation_) {
    *t = {b->id(), generation_, 0};
    ++touched_;
  }
  t->bits |= static_cast<uint8_t>(access);
  keep_alive_.push_back(b);
}

void Recorder::barrier(VkPipelineStageFlags dst) {
  // One global memory barrier covers every buffer: drivers implement buffer barriers as global
  // ones anyway, and it costs one command however many buffers conflict. Its source is the stages
  // that wrote since the last barrier, plus those that barrier made writes visible to: a write made
  // visible to compute only reaches a later copy through this chain.
  const VkPipelineStageFlags src = segment_stages_ | visible_stages_;
  VkMemoryBarrier mb{};
  mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  mb.srcAccessMask = writes_of(src);
  mb.dstAccessMask = accesses_of(dst);
  ctx_.api().vkCmdPipelineBarrier(frame_->cmd, src, dst, 0, 1, &mb, 0, nullptr, 0, nullptr);
  clear_touched();
  segment_stages_ = 0;
  visible_stages_ = dst;
  ++barriers_;
}

void Recorder::order(bool conflict, VkPipelineStageFlags stage) {
  if (conflict || !(visible_stages_ & stage)) barrier(stage);
  segment_stages_ |= stage;
}

void Recorder::submit_chunk_if_due() {
  if (mode_ != Mode::submit || timing_ || chunk_size_ == 0 || pending_ - chunk_start_ < chunk_size_) return;
  check(ctx_.api().vkEndCommandBuffer(frame_->cmd), "vkEndCommandBuffer");
  recording_ = false;
  // The frame is this recording's until it completes, submitted or not (reset() waits for it).
  submitted_frames_.push_back(std::move(frame_));
  try {
    submitted_value_ = ctx_.submit(submitted_frames_.back()->cmd);
  } catch (...) {
    reset();  // the whole recording is dropped, as when submit() fails
    throw;
  }
  ++early_submits_;
  chunk_start_ = pending_;
  chunk_size_ = std::max(chunk_size_, std::min(2 * chunk_size_, kMaxChunk));
  // The next command buffer waits on the timeline for this one: everything is complete and
  // visible to it, as after a barrier.
  clear_touched();
}

const Pipeline& Recorder::pipeline(const ShaderCode& shader, std::span<const uint32_t> spec,
                                   uint32_t bindings) {
  RecentPipeline* slot = nullptr;
  if (spec.size() <= RecentPipeline{}.spec.size()) {
    uint64_t h = shader.digest ^ bindings;
    for (uint32_t s : spec) h = h * 0x100000001b3ull ^ s;
    slot = &recent_pipelines_[(h * 0x9e3779b97f4a7c15ull >> 58) % recent_pipelines_.size()];
    if (slot->pipeline && slot->bindings == bindings && slot->digest == shader.digest &&
        slot->spec_size == spec.size() && std::equal(spec.begin(), spec.end(), slot->spec.begin()))
      return *slot->pipeline;
  }
  const Pipeline& p = ctx_.pipelines().get({&shader, spec, bindings});
  if (slot) {
    *slot = {shader.digest, bindings, static_cast<uint32_t>(spec.size()), {}, &p};
    std::ranges::copy(spec, slot->spec.begin());
  }
  return p;
}

VkDescriptorSet Recorder::descriptor_set(uint32_t n, std::span<VkWriteDescriptorSet> writes) {
  const VulkanApi& api = ctx_.api();
  // A descriptor set from the frame's pools, growing them when full.
  VkDescriptorSet set = VK_NULL_HANDLE;
  const VkDescriptorSetLayout layout = ctx_.set_layout(n);
  while (true) {
    if (frame_->current_pool == frame_->descriptor_pools.size()) {
      VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * Context::kMaxBindings};
      VkDescriptorPoolCreateInfo info{};
      info.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
      info.maxSets = kSetsPerPool;
      info.poolSizeCount = 1;
      info.pPoolSizes = &size;
      VkDescriptorPool pool = VK_NULL_HANDLE;
      check(api.vkCreateDescriptorPool(ctx_.device(), &info, nullptr, &pool), "vkCreateDescriptorPool");
      frame_->descriptor_pools.push_back(pool);
    }
    VkDescriptorSetAllocateInfo alloc{};
    alloc.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
    alloc.descriptorPool = frame_->descriptor_pools[frame_->current_pool];
    alloc.descriptorSetCount = 1;
    alloc.pSetLayouts = &layout;
    const VkResult r = api.vkAllocateDescriptorSets(ctx_.device(), &alloc, &set);
    if (r == VK_SUCCESS) break;
    if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL)
      check(r, "vkAllocateDescriptorSets");
    ++frame_->current_pool;
  }
  for (uint32_t i = 0; i < n; ++i) writes[i].dstSet = set;
  api.vkUpdateDescriptorSets(ctx_.device(), n, writes.data(), 0, nullptr);
  return set;
}

void Recorder::dispatch(const ShaderCode& shader, std::span<const uint32_t> spec,
                        std::span<const Binding> bindings, std::span<const std::byte> push, Groups groups,
                        std::span<const Binding> addressed) {
  if (bindings.size() > Context::kMaxBindings)
    throw ValueError::of("vulkan dispatch", "at most 12 (Context::kMaxBindings) bindings allowed",
                         "{} given for {}", bindings.size(), shader.name);
  if (bindings.empty() && addressed.empty())
    throw ValueError::of("vulkan dispatch", "a dispatch reaches no buffer",
                         "no bindings and no addressed "
                         "buffers for {}",
                         shader.name);
  if (push.size() > Context::kPushConstantBytes || push.size() % 4 != 0)
    throw ValueError::of("vulkan dispatch", "push constants must be a multiple of 4 bytes, at most 128",
                         "{} bytes for {}", push.size(), shader.name);
  for (std::span<const Binding> list : {bindings, addressed})
    for (const Binding& b : list)
      if (!b.buffer)
        throw ValueError::of("vulkan dispatch", "a binding has no buffer", "shader {}", shader.name);
  const uint32_t n = static_cast<uint32_t>(bindings.size());
  const Pipeline& pipeline = this->pipeline(shader, spec, n);
  begin_if_needed();
  const VulkanApi& api = ctx_.api();

  std::array<VkDescriptorBufferInfo, Context::kMaxBindings> infos{};
  std::array<VkWriteDescriptorSet, Context::kMaxBindings> writes{};
  for (uint32_t i = 0; i < n; ++i) {
    const DeviceBuffer& b = *bindings[i].buffer;
    infos[i] = {b.buffer(), b.offset(), b.capacity()};
    writes[i] = {};
    writes[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    writes[i].dstBinding = i;
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  // Push descriptors go into the command buffer itself: no set to allocate, write and bind.
  const VkDescriptorSet set =
      ctx_.caps().push_descriptor || n == 0 ? VK_NULL_HANDLE : descriptor_set(n, writes);

  auto conflict = [&](const Binding& b) { return conflicts(b.buffer->id(), b.access); };
  order(std::ranges::any_of(bindings, conflict) || std::ranges::any_of(addressed, conflict), kCompute);
  for (std::span<const Binding> list : {bindings, addressed})
    for (const Binding& b : list) note(b.buffer, b.access);

  if (pipeline.pipeline != bound_pipeline_) {
    api.vkCmdBindPipeline(frame_->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.pipeline);
    bound_pipeline_ = pipeline.pipeline;
  }
  if (set)
    api.vkCmdBindDescriptorSets(frame_->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.layout, 0, 1, &set, 0,
                                nullptr);
  else if (n > 0)
    api.vkCmdPushDescriptorSetKHR(frame_->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.layout, 0, n,
                                  writes.data());
  if (!push.empty())
    api.vkCmdPushConstants(frame_->cmd, pipeline.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                           static_cast<uint32_t>(push.size()), push.data());
  // Timed: from when all earlier work completed to when this dispatch did (past the pool's size,
  // dispatches go untimed).
  const bool timed = timing_ && timed_shaders_.size() < kMaxTimedDispatches;
  const auto query = static_cast<uint32_t>(2 * timed_shaders_.size());
  if (timed)
    api.vkCmdWriteTimestamp(frame_->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timestamp_pool(), query);
  api.vkCmdDispatch(frame_->cmd, groups.x, groups.y, groups.z);
  if (timed) {
    api.vkCmdWriteTimestamp(frame_->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timestamp_pool(), query + 1);
    timed_shaders_.push_back(profiling_by_groups()
                                 ? fmt::format("{} [{}x{}x{}]", shader.name, groups.x, groups.y, groups.z)
                                 : std::string(shader.name));
  }
  ++pending_;
  submit_chunk_if_due();
}

void Recorder::copy(const BufferPtr& src, size_t src_offset, const BufferPtr& dst, size_t dst_offset,
                    size_t bytes) {
  if (!src || !dst) throw ValueError::of("vulkan copy", "no buffer");
  if (src_offset > src->capacity() || bytes > src->capacity() - src_offset || dst_offset > dst->capacity() ||
      bytes > dst->capacity() - dst_offset)
    throw ValueError::of("vulkan copy", "range outside a buffer", "{} bytes from {} of {} to {} of {}", bytes,
                         src_offset, src->capacity(), dst_offset, dst->capacity());
  if (bytes == 0) return;
  begin_if_needed();
  order(conflicts(src->id(), Access::read) || conflicts(dst->id(), Access::write), kTransfer);
  note(src, Access::read);
  note(dst, Access::write);
  const VkBufferCopy region{src->offset() + src_offset, dst->offset() + dst_offset, bytes};
  ctx_.api().vkCmdCopyBuffer(frame_->cmd, src->buffer(), dst->buffer(), 1, &region);
  ++pending_;
  submit_chunk_if_due();
}

void Recorder::execute(const std::shared_ptr<const CapturedCommands>& commands) {
  if (mode_ != Mode::submit)
    throw ValueError::of("vulkan execute", "a captured program cannot execute another");
  if (!commands) throw ValueError::of("vulkan execute", "no captured program");
  if (!commands->frame_) return;  // nothing was recorded
  begin_if_needed();
  // The program may start with either stage and assumes all earlier writes visible to both.
  segment_stages_ = kAllStages;
  barrier(kAllStages);
  const bool timed = timing_ && timed_shaders_.size() < kMaxTimedDispatches;
  const auto query = static_cast<uint32_t>(2 * timed_shaders_.size());
  if (timed)
    ctx_.api().vkCmdWriteTimestamp(frame_->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timestamp_pool(),
                                   query);
  ctx_.api().vkCmdExecuteCommands(frame_->cmd, 1, &commands->frame_->cmd);
  bound_pipeline_ = VK_NULL_HANDLE;  // the program's binds leave the state undefined
  if (timed) {
    ctx_.api().vkCmdWriteTimestamp(frame_->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timestamp_pool(),
                                   query + 1);
    // Its size in the row's name: a profile shows how many dependent steps (barriers) a compiled
    // step's GPU time spreads over, and programs of different sizes get rows of their own.
    timed_shaders_.push_back(fmt::format("captured program [{} commands, {} barriers]", commands->commands(),
                                         commands->barriers()));
    if (commands->timestamps_) timed_programs_.push_back(commands);
  }
  // What the program touched is unknown to the hazard table: the next command waits for all of it.
  segment_stages_ = kAllStages;
  barrier(kAllStages);
  executed_.push_back(commands);
  ++pending_;
  submit_chunk_if_due();
}

std::shared_ptr<const CapturedCommands> Recorder::finish_capture() {
  if (mode_ != Mode::capture) throw ValueError::of("vulkan capture", "the recorder is not capturing");
  struct ResetOnExit {
    Recorder& r;
    ~ResetOnExit() { r.reset(); }
  } reset_on_exit{*this};
  if (!recording_)
    return std::make_shared<const CapturedCommands>(ctx_, nullptr, std::vector<BufferPtr>{}, 0);
  recording_ = false;
  check(ctx_.api().vkEndCommandBuffer(frame_->cmd), "vkEndCommandBuffer");
  // The buffers once each (the keep-alive list holds one entry per binding).
  std::vector<BufferPtr> buffers = std::move(keep_alive_);
  std::ranges::sort(buffers, std::less{}, [](const BufferPtr& b) { return b.get(); });
  buffers.erase(std::unique(buffers.begin(), buffers.end()), buffers.end());
  auto program = std::make_shared<CapturedCommands>(ctx_, std::move(frame_), std::move(buffers), pending_);
  program->barriers_ = barriers_;
  if (timing_) {
    program->timestamps_ = std::exchange(timestamps_, VK_NULL_HANDLE);
    program->timed_shaders_ = std::move(timed_shaders_);
  }
  return program;
}

void Recorder::submit_and_wait() {
  if (std::unique_ptr<Submission> s = submit()) s->wait();
}

std::unique_ptr<Submission> Recorder::submit() {
  if (!recording_ && submitted_frames_.empty()) return nullptr;
  if (mode_ != Mode::submit)
    throw NotImplemented::of("vulkan capture",
                             "the captured work needs a submit before it ends (a host read)");
  // Whatever happens below, the recording is spent: reset() runs on every path, and releases the
  // frame when the submit failed (it then holds nothing the queue will run).
  struct ResetOnExit {
    Recorder& r;
    ~ResetOnExit() { r.reset(); }
  } reset_on_exit{*this};
  if (recording_) {
    recording_ = false;
    check(ctx_.api().vkEndCommandBuffer(frame_->cmd), "vkEndCommandBuffer");
    submitted_frames_.push_back(std::move(frame_));
    submitted_value_ = ctx_.submit(submitted_frames_.back()->cmd);
  }
  auto submitted = std::make_unique<Submission>(ctx_, submitted_value_, std::move(submitted_frames_),
                                                std::move(keep_alive_), std::move(executed_));
  submitted_frames_.clear();
  if (timing_) {
    submitted->wait();
    collect_timings();
  }
  // New pipelines reach the disk after the first evaluation that used them.
  ctx_.pipelines().save();
  return submitted;
}

Submission::Submission(Context& ctx, uint64_t value, std::vector<std::unique_ptr<Frame>> frames,
                       std::vector<BufferPtr> buffers,
                       std::vector<std::shared_ptr<const CapturedCommands>> executed)
    : ctx_(ctx),
      value_(value),
      frames_(std::move(frames)),
      buffers_(std::move(buffers)),
      executed_(std::move(executed)) {}

Submission::~Submission() {
  if (frames_.empty()) return;
  try {
    ctx_.wait(value_);
  } catch (...) {
    // Reported by wait(), when someone calls it; a lost device has stopped the work anyway.
  }
  release();
}

bool Submission::done() {
  if (frames_.empty()) return true;
  if (!ctx_.reached(value_)) return false;
  release();
  return true;
}

void Submission::wait() {
  if (frames_.empty()) return;
  // On a device error the work is dropped all the same: a lost device runs nothing more.
  struct ReleaseOnExit {
    Submission& s;
    ~ReleaseOnExit() { s.release(); }
  } release_on_exit{*this};
  ctx_.wait(value_);
}

void Submission::release() noexcept {
  if (frames_.empty()) return;
  for (auto& f : frames_) ctx_.release_frame(std::move(f));
  frames_.clear();
  buffers_.clear();
  executed_.clear();
}

}  // namespace kiln::detail::vk
