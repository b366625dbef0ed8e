// The Vulkan runtime: loader, device choice, memory, recorder (hazards, errors, threads) and the
// pipeline cache (digests, disk). Runs on lavapipe in CI (KILN_VULKAN_ALLOW_CPU=1, set by ctest).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/elementwise.h"
#include "kiln/core/vulkan/runtime/kernels.h"
#include "kiln/core/vulkan/runtime/pipeline_cache.h"
#include "kiln/core/vulkan/runtime/profile.h"
#include "kiln/core/vulkan/runtime/recorder.h"
#include "kiln/core/vulkan/runtime/shader_table.h"
#include "vulkan_fixture.h"

namespace kiln::detail::vk {
namespace {

using testing::random_floats;
using testing::VulkanTest;

// Options like the environment's, with a folder of this test's own for the pipeline cache.
ContextOptions private_options(const std::string& cache_name = "") {
  ContextOptions o = ContextOptions::from_env();
  o.cache_dir = cache_name.empty() ? "" : (std::filesystem::temp_directory_path() / cache_name).string();
  return o;
}

// Records y = x (copy_u32) over n floats.
void record_copy_floats(Recorder& r, const BufferPtr& x, const BufferPtr& y, int64_t n) {
  record_copy(r, GpuView::contiguous(x, float32, {n}), GpuView::contiguous(y, float32, {n}));
}

TEST(VulkanLoader, MissingLoaderIsAReasonNotACrash) {
  ContextOptions o;
  o.loader = "libkiln-no-such-vulkan.so.1";
  const Availability a = probe(o);
  EXPECT_FALSE(a.available);
  EXPECT_NE(a.reason.find("libkiln-no-such-vulkan.so.1"), std::string::npos) << a.reason;
  try {
    Context::create(o);
    FAIL() << "a context without a loader";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("[vulkan] cannot load the Vulkan loader"), std::string::npos)
        << e.what();
  }
}

TEST(VulkanQueueFamily, ComputeOnlyByDefaultUniversalWhenAsked) {
  auto family = [](VkQueueFlags flags) {
    VkQueueFamilyProperties p{};
    p.queueFlags = flags;
    p.queueCount = 1;
    return p;
  };
  constexpr VkQueueFlags kG = VK_QUEUE_GRAPHICS_BIT, kC = VK_QUEUE_COMPUTE_BIT, kT = VK_QUEUE_TRANSFER_BIT;
  // NVIDIA's order: universal, transfer, compute-only, then video and optical flow (transfer).
  const std::vector<VkQueueFamilyProperties> nvidia = {family(kG | kC | kT), family(kT), family(kC | kT),
                                                       family(kT),           family(kT), family(kT)};
  EXPECT_EQ(pick_queue_family(nvidia, false), 2);
  EXPECT_EQ(pick_queue_family(nvidia, true), 0);
  // Two compute-only families: the first (before 9e4f06d the last was taken).
  const std::vector<VkQueueFamilyProperties> two = {family(kG | kC), family(kC), family(kC | kT)};
  EXPECT_EQ(pick_queue_family(two, false), 1);
  // The preferred kind after another that computes.
  const std::vector<VkQueueFamilyProperties> universal_first = {family(kT), family(kG | kC), family(kC)};
  EXPECT_EQ(pick_queue_family(universal_first, false), 2);
  EXPECT_EQ(pick_queue_family(universal_first, true), 1);
  // Only one kind: taken whatever was asked (lavapipe has one universal family).
  const std::vector<VkQueueFamilyProperties> lavapipe = {family(kG | kC | kT)};
  EXPECT_EQ(pick_queue_family(lavapipe, false), 0);
  const std::vector<VkQueueFamilyProperties> compute_only = {family(kT), family(kC)};
  EXPECT_EQ(pick_queue_family(compute_only, true), 1);
  // None computes.
  const std::vector<VkQueueFamilyProperties> none = {family(kG), family(kT)};
  EXPECT_EQ(pick_queue_family(none, false), -1);
  EXPECT_EQ(pick_queue_family({}, true), -1);
}

TEST_F(VulkanTest, EitherQueueFamilyRunsKernels) {
  for (const bool universal : {false, true}) {
    ContextOptions o = private_options();
    o.universal_queue = universal;
    auto ctx = Context::create(o);
    const std::vector<float> x = random_floats(1000, -1, 1, 41);
    BufferPtr a = ctx->allocator().allocate(x.size() * 4), b = ctx->allocator().allocate(x.size() * 4);
    upload(*ctx, a, x.data(), x.size() * 4);
    Recorder r(*ctx);
    record_copy_floats(r, a, b, static_cast<int64_t>(x.size()));
    r.submit_and_wait();
    std::vector<float> y(x.size());
    readback(*ctx, b, y.data(), y.size() * 4);
    EXPECT_EQ(y, x) << "universal " << universal;
  }
}

TEST_F(VulkanTest, CpuDeviceOnlyWhenAllowed) {
  ContextOptions o = private_options();
  o.allow_cpu = false;
  o.device_index = -1;
  const Availability strict = probe(o);
  o.allow_cpu = true;
  const Availability lax = probe(o);
  ASSERT_TRUE(lax.available) << lax.reason;
  if (strict.available) {
    EXPECT_FALSE(strict.is_cpu) << strict.device_name;  // a real GPU is preferred
  } else {
    EXPECT_TRUE(lax.is_cpu);
    EXPECT_NE(strict.reason.find("KILN_VULKAN_ALLOW_CPU=1"), std::string::npos) << strict.reason;
    o.allow_cpu = false;
    EXPECT_THROW(Context::create(o), DeviceError);
  }
}

TEST_F(VulkanTest, ExplicitDeviceIndexIsChecked) {
  ContextOptions o = private_options();
  o.device_index = 999;
  try {
    Context::create(o);
    FAIL() << "device 999 exists";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("no such Vulkan device"), std::string::npos) << e.what();
  }
}

TEST_F(VulkanTest, CapsAreRecorded) {
  const DeviceCaps& c = ctx().caps();
  EXPECT_FALSE(c.name.empty());
  EXPECT_GT(c.subgroup_size, 0u);
  EXPECT_TRUE(std::has_single_bit(c.subgroup_size)) << c.subgroup_size;
  EXPECT_GE(c.max_workgroup_invocations, 128u);
  EXPECT_GE(c.max_push_constants, Context::kPushConstantBytes);
  EXPECT_TRUE(c.timeline_semaphore);
  EXPECT_GT(c.max_storage_buffer_range, 0u);
  EXPECT_GT(c.device_local_heap_size, 0u);
  if (c.is_cpu()) {
    EXPECT_TRUE(c.unified_memory) << "lavapipe's memory is the host's";
    // Lavapipe offers VK_KHR_push_descriptor; the pool_descriptors. pass turns it off.
    EXPECT_EQ(c.push_descriptor, !ctx().options().disable_push_descriptors);
  }
}

TEST_F(VulkanTest, ExistingContextIsTheCreatedOne) {
  EXPECT_EQ(existing_context(), &ctx());  // SetUp created it
}

TEST_F(VulkanTest, ContextIsCreatedOnceAcrossThreads) {
  std::vector<Context*> seen(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) threads.emplace_back([&, i] { seen[i] = &context(); });
  for (auto& t : threads) t.join();
  for (Context* c : seen) EXPECT_EQ(c, &ctx());
}

TEST_F(VulkanTest, UploadAndReadbackRoundTrip) {
  const auto values = random_floats(1000, -5, 5, 1);
  BufferPtr b = upload_vector(values);
  EXPECT_EQ(read_vector<float>(b, values.size()), values);
  // A sub-range at an offset.
  const std::vector<float> patch = random_floats(10, 7, 9, 2);
  upload(ctx(), b, patch.data(), patch.size() * 4, 100 * 4);
  std::vector<float> back(10);
  readback(ctx(), b, back.data(), back.size() * 4, 100 * 4);
  EXPECT_EQ(back, patch);
  EXPECT_THROW(upload(ctx(), b, patch.data(), 8, b->capacity() - 4), ValueError);
}

TEST_F(VulkanTest, StagingPathRoundTrip) {
  ContextOptions o = private_options();
  o.force_staging = true;
  auto staged = Context::create(o);
  EXPECT_FALSE(staged->caps().unified_memory);
  EXPECT_FALSE(staged->allocator().mapped());
  {
    const auto values = random_floats(5000, -1, 1, 3);
    BufferPtr x = staged->allocator().allocate(values.size() * 4);
    BufferPtr y = staged->allocator().allocate(values.size() * 4);
    EXPECT_EQ(x->mapped(), nullptr);
    upload(*staged, x, values.data(), values.size() * 4);
    Recorder r(*staged);
    record_copy_floats(r, x, y, static_cast<int64_t>(values.size()));
    r.submit_and_wait();
    std::vector<float> back(values.size());
    readback(*staged, y, back.data(), back.size() * 4);
    EXPECT_EQ(back, values);
    EXPECT_GT(staged->staging_allocator().counters().cache_bytes, 0u);  // staging blocks are reused
  }
}

TEST_F(VulkanTest, AllocatorCachesAndCounts) {
  auto own = Context::create(private_options());
  DeviceAllocator& alloc = own->allocator();
  const size_t align = std::max<size_t>(256, own->caps().min_storage_offset_alignment);
  VkBuffer first_buffer;
  VkDeviceSize first_offset;
  {
    BufferPtr a = alloc.allocate(1000);
    BufferPtr b = alloc.allocate(3000);
    EXPECT_EQ(a->capacity(), 1024u);
    EXPECT_EQ(b->capacity(), 4096u);
    EXPECT_EQ(a->offset() % align, 0u);
    EXPECT_EQ(b->offset() % align, 0u);
    EXPECT_NE(a->id(), b->id());
    EXPECT_EQ(alloc.counters().active_bytes, 1024u + 4096u);
    first_buffer = a->buffer();
    first_offset = a->offset();
  }
  MemoryCounters c = alloc.counters();
  EXPECT_EQ(c.active_bytes, 0u);
  EXPECT_EQ(c.peak_bytes, 1024u + 4096u);
  EXPECT_EQ(c.cache_bytes, 1024u + 4096u);
  const size_t allocations = c.allocations;
  {
    BufferPtr again = alloc.allocate(900);  // same size class: the cached block comes back
    EXPECT_EQ(again->buffer(), first_buffer);
    EXPECT_EQ(again->offset(), first_offset);
    BufferPtr big = alloc.allocate(DeviceAllocator::kMaxPooledBytes + 1);  // a buffer of its own
    EXPECT_EQ(big->offset(), 0u);
    EXPECT_GE(big->capacity(), DeviceAllocator::kMaxPooledBytes + 1);
  }
  EXPECT_EQ(alloc.counters().allocations, allocations + 1);  // only the big buffer was new
  {
    BufferPtr big = alloc.allocate(DeviceAllocator::kMaxPooledBytes + 100);  // the cached big one
    EXPECT_EQ(alloc.counters().allocations, allocations + 1);
  }
  alloc.reset_peak();
  EXPECT_EQ(alloc.counters().peak_bytes, 0u);
  alloc.clear_cache();
  c = alloc.counters();
  EXPECT_EQ(c.cache_bytes, 0u);
  EXPECT_EQ(c.reserved_bytes, 0u);
}

TEST_F(VulkanTest, CacheLimitBoundsBigBuffersOnly) {
  // A loop over one big array frees and asks for the same big buffer every step; cached blocks of
  // the chunks must not push it out of a cache whose limit it fits.
  auto own = Context::create(private_options());
  DeviceAllocator& alloc = own->allocator();
  const size_t big = DeviceAllocator::kMaxPooledBytes * 2 + 12345;
  size_t capacity = 0;
  {
    BufferPtr b = alloc.allocate(big);
    capacity = b->capacity();
  }
  alloc.set_cache_limit(capacity);
  { BufferPtr small = alloc.allocate(4096); }  // now a free block of a chunk is cached too
  const size_t allocations = alloc.counters().allocations;
  for (int step = 0; step < 3; ++step) {
    BufferPtr b = alloc.allocate(big);
    EXPECT_EQ(alloc.counters().allocations, allocations) << "step " << step;
  }
  EXPECT_EQ(alloc.counters().cache_bytes, capacity + 4096);
  // Over the limit, the least recently released goes: the one just released is the one a loop
  // asks for next, even when it is the largest.
  {
    BufferPtr last = alloc.allocate(big);                                       // released last
    BufferPtr first = alloc.allocate(DeviceAllocator::kMaxPooledBytes + 4096);  // released first
  }
  const size_t before = alloc.counters().allocations;
  { BufferPtr again = alloc.allocate(big); }
  EXPECT_EQ(alloc.counters().allocations, before);
  alloc.set_cache_limit(0);  // frees the big buffers; free blocks of chunks stay
  EXPECT_EQ(alloc.counters().cache_bytes, 4096u);
}

TEST_F(VulkanTest, BadAllocationsAreErrors) {
  EXPECT_THROW(ctx().allocator().allocate(0), ValueError);
  const size_t too_big = size_t{ctx().caps().max_storage_buffer_range} + 1;
  try {
    ctx().allocator().allocate(too_big);
    FAIL() << "allocated past maxStorageBufferRange";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("too large"), std::string::npos) << e.what();
  }
}

TEST_F(VulkanTest, BarriersOnlyOnHazards) {
  const int64_t n = 4096;
  const auto values = random_floats(n, -3, 3, 4);
  BufferPtr x = upload_vector(values);
  BufferPtr y = ctx().allocator().allocate(n * 4), z = ctx().allocator().allocate(n * 4);
  BufferPtr w = ctx().allocator().allocate(n * 4);
  Recorder r(ctx());
  record_copy_floats(r, x, y, n);  // y = x
  record_copy_floats(r, x, z, n);  // reads x again: no hazard
  EXPECT_EQ(r.barriers(), 0u);
  record_copy_floats(r, y, w, n);  // reads y written above: read after write
  EXPECT_EQ(r.barriers(), 1u);
  record_copy_floats(r, z, x, n);  // x was only read, and before the barrier: none
  EXPECT_EQ(r.barriers(), 1u);
  record_copy_floats(r, w, z, n);  // reads w (written since the barrier) and writes z: barrier
  EXPECT_EQ(r.barriers(), 2u);
  record_copy_floats(r, y, w, n);  // writes w, read by the previous dispatch: write after read
  EXPECT_EQ(r.barriers(), 3u);
  EXPECT_EQ(r.pending(), 6u);
  r.submit_and_wait();
  EXPECT_EQ(r.pending(), 0u);
  for (const BufferPtr& b : {x, y, z, w}) EXPECT_EQ(read_vector<float>(b, n), values);
}

// y = x + 1 over n floats (a generated elementwise kernel).
void record_add_one(Recorder& r, const BufferPtr& x, const BufferPtr& y, int64_t n) {
  const ElementwiseKernel add_one{
      .inputs = {float32}, .compute = float32, .out = float32, .expr = "x0 + 1.0"};
  const GpuView in = GpuView::contiguous(x, float32, {n});
  record_elementwise(r, add_one, std::span<const GpuView>(&in, 1), GpuView::contiguous(y, float32, {n}));
}

TEST_F(VulkanTest, BarriersNameOnlyTheStagesInvolved) {
  // A copy reading what a dispatch wrote two barriers earlier: no hazard is left in the table, but
  // the barriers since made that write visible to compute only, so the copy gets one of its own.
  const int64_t n = 1024;
  const auto values = random_floats(n, -3, 3, 11);
  BufferPtr x = upload_vector(values);
  BufferPtr y = ctx().allocator().allocate(n * 4), z = ctx().allocator().allocate(n * 4);
  BufferPtr w = ctx().allocator().allocate(n * 4), v = ctx().allocator().allocate(n * 4);
  Recorder r(ctx());
  record_add_one(r, x, y, n);  // y = x + 1
  record_add_one(r, y, z, n);  // barrier (compute -> compute)
  record_add_one(r, z, w, n);  // barrier
  EXPECT_EQ(r.barriers(), 2u);
  r.copy(y, 0, v, 0, n * 4);  // y is not in the hazard table, but not yet visible to transfers
  EXPECT_EQ(r.barriers(), 3u);
  r.copy(x, 0, y, 0, n * 4);  // write after read of y by the copy above: barrier
  EXPECT_EQ(r.barriers(), 4u);
  r.submit_and_wait();
  std::vector<float> plus1(values), plus3(values);
  for (float& f : plus1) f += 1.0f;
  for (float& f : plus3) f = f + 1.0f + 1.0f + 1.0f;
  EXPECT_EQ(read_vector<float>(v, n), plus1);
  EXPECT_EQ(read_vector<float>(w, n), plus3);
  EXPECT_EQ(read_vector<float>(y, n), values);
}

// A private context whose recordings go to the queue in chunks of 16, 32, then 64 commands (a GPU's
// default; lavapipe's is one submit per recording).
class ChunkedSubmitTest : public VulkanTest {
 protected:
  void SetUp() override {
    VulkanTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ContextOptions o = private_options();
    o.submit_chunk = 16;
    own_ = Context::create(o);
  }
  BufferPtr upload_floats(const std::vector<float>& values) {
    BufferPtr b = own_->allocator().allocate(values.size() * 4);
    upload(*own_, b, values.data(), values.size() * 4);
    return b;
  }
  std::vector<float> read_floats(const BufferPtr& b, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    readback(*own_, b, out.data(), out.size() * 4);
    return out;
  }
  std::unique_ptr<Context> own_;
};

TEST_F(ChunkedSubmitTest, LongRecordingsAreSubmittedInChunks) {
  // A dependent chain of 300 dispatches through a ring of three buffers: the device starts on the
  // first chunk while the rest is recorded; the result is the same.
  ASSERT_EQ(own_->submit_chunk(), 16u);
  const int64_t n = 2048;
  const auto values = random_floats(n, -3, 3, 12);
  std::array<BufferPtr, 3> ring{upload_floats(values), own_->allocator().allocate(n * 4),
                                own_->allocator().allocate(n * 4)};
  Recorder r(*own_);
  const int steps = 300;
  for (int i = 0; i < steps; ++i) record_add_one(r, ring[i % 3], ring[(i + 1) % 3], n);
  // Chunks went at 16, 48 (32 more), 112, 176 and 240 (64 more each).
  EXPECT_EQ(r.early_submits(), 5u);
  EXPECT_EQ(r.pending(), static_cast<size_t>(steps));
  r.submit_and_wait();
  EXPECT_EQ(r.pending(), 0u);
  std::vector<float> want(values);
  for (float& f : want)
    for (int i = 0; i < steps; ++i) f += 1.0f;
  EXPECT_EQ(read_floats(ring[steps % 3], n), want);
  // The next recording starts from the first chunk size again.
  for (int i = 0; i < 40; ++i) record_add_one(r, ring[i % 3], ring[(i + 1) % 3], n);
  EXPECT_EQ(r.early_submits(), 6u);
  r.submit_and_wait();
}

TEST_F(ChunkedSubmitTest, AnAbandonedChunkedRecordingWaitsForItsChunks) {
  const size_t active = own_->allocator().counters().active_bytes;
  {
    const int64_t n = 4096;
    std::array<BufferPtr, 2> ring{upload_floats(random_floats(n, -1, 1, 13)),
                                  own_->allocator().allocate(n * 4)};
    Recorder r(*own_);
    for (int i = 0; i < 100; ++i) record_add_one(r, ring[i % 2], ring[(i + 1) % 2], n);
    EXPECT_EQ(r.early_submits(), 2u);  // at 16 and 48
  }  // never submitted whole: the chunks already on the queue complete before their buffers go
  EXPECT_EQ(own_->allocator().counters().active_bytes, active);
}

TEST_F(ChunkedSubmitTest, AFailedChunkSubmitIsAnErrorAndTheRecorderRecovers) {
  const int64_t n = 256;
  std::array<BufferPtr, 2> ring{upload_floats(random_floats(n, -1, 1, 14)),
                                own_->allocator().allocate(n * 4)};
  Recorder r(*own_);
  for (size_t i = 0; i + 1 < 16; ++i) record_add_one(r, ring[i % 2], ring[(i + 1) % 2], n);
  own_->inject_submit_failure_for_testing(VK_ERROR_OUT_OF_DEVICE_MEMORY);
  try {
    record_add_one(r, ring[1], ring[0], n);  // the 16th command: its chunk's submit fails
    FAIL() << "the injected failure did not surface";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("VK_ERROR_OUT_OF_DEVICE_MEMORY"), std::string::npos) << e.what();
  }
  EXPECT_EQ(r.pending(), 0u);  // the whole recording was dropped
  r.submit_and_wait();         // nothing left to submit; nothing throws
  BufferPtr out = own_->allocator().allocate(n * 4);
  record_add_one(r, ring[0], out, n);
  r.submit_and_wait();
  const std::vector<float> in = read_floats(ring[0], n), got = read_floats(out, n);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(got[i], in[i] + 1.0f);
}

TEST_F(VulkanTest, LavapipeSubmitsEachRecordingOnce) {
  if (!ctx().caps().is_cpu() || ctx().options().submit_chunk >= 0) GTEST_SKIP() << "not lavapipe's default";
  EXPECT_EQ(ctx().submit_chunk(), 0u);
  const int64_t n = 256;
  std::array<BufferPtr, 2> ring{upload_vector(random_floats(n, -1, 1, 15)),
                                ctx().allocator().allocate(n * 4)};
  Recorder r(ctx());
  for (int i = 0; i < 200; ++i) record_add_one(r, ring[i % 2], ring[(i + 1) % 2], n);
  EXPECT_EQ(r.early_submits(), 0u);
  r.submit_and_wait();
}

// Three float buffers for the profiling tests (x random, y and z to copy into), with the profile
// cleared and timing on.
struct ProfiledCopies {
  static constexpr int64_t n = 1 << 16;
  BufferPtr x, y, z;
  explicit ProfiledCopies(uint64_t seed)
      : x(context().allocator().allocate(n * 4)),
        y(context().allocator().allocate(n * 4)),
        z(context().allocator().allocate(n * 4)) {
    const std::vector<float> values = random_floats(n, -1, 1, seed);
    upload(context(), x, values.data(), n * 4);
    profile_clear();
    set_profiling(true);
  }
};

TEST_F(VulkanTest, ProfilingTimesEachDispatchByShader) {
  if (ctx().caps().timestamp_period == 0) GTEST_SKIP() << "the device writes no timestamps on compute queues";
  const ProfiledCopies b(9);
  const int64_t n = b.n;
  const BufferPtr &x = b.x, &y = b.y, &z = b.z;
  Recorder r(ctx());
  record_copy_floats(r, x, y, n);
  record_copy_floats(r, y, z, n);
  r.submit_and_wait();
  set_profiling(false);
  const std::string report = profile_report();
  EXPECT_NE(report.find("copy"), std::string::npos) << report;
  EXPECT_NE(report.find(" 2 "), std::string::npos) << report;  // two dispatches of one shader
  // KILN_VULKAN_PROFILE=groups (the profile_groups pass) keys them by their workgroup counts too.
  if (profiling_by_groups())
    EXPECT_NE(report.find("copy_u32 ["), std::string::npos) << report;
  else
    EXPECT_EQ(report.find("copy_u32 ["), std::string::npos) << report;
  EXPECT_EQ(read_vector<float>(z, n), read_vector<float>(x, n));
  // Untimed recordings add nothing.
  profile_clear();
  record_copy_floats(r, x, y, n);
  r.submit_and_wait();
  EXPECT_EQ(profile_report(), "");
}

TEST_F(VulkanTest, ProfilingTimesTheDispatchesOfACapturedProgram) {
  if (ctx().caps().timestamp_period == 0) GTEST_SKIP() << "the device writes no timestamps on compute queues";
  const ProfiledCopies b(10);
  const int64_t n = b.n;
  const BufferPtr &x = b.x, &y = b.y, &z = b.z;
  Recorder capture(ctx(), Recorder::Mode::capture);
  record_copy_floats(capture, x, y, n);
  record_copy_floats(capture, y, z, n);
  const auto program = capture.finish_capture();
  Recorder r(ctx());
  for (int i = 0; i < 3; ++i) {
    r.execute(program);
    r.submit_and_wait();
  }
  set_profiling(false);
  const std::string report = profile_report();
  auto row = [&](const std::string& name) {
    const size_t at = report.find("\n" + name + " ");
    return at == std::string::npos ? std::string()
                                   : report.substr(at + 1, report.find('\n', at + 1) - at - 1);
  };
  // Three replays of two dispatches each, timed inside the program, and the program as one row.
  const std::string inside = row(std::string(kCapturedPrefix) + "copy_u32");
  ASSERT_FALSE(inside.empty()) << report;
  EXPECT_NE(inside.find(" 6 "), std::string::npos) << inside;
  // The program's row names its size: two copies, the second reading what the first wrote.
  EXPECT_EQ(program->commands(), 2u);
  EXPECT_EQ(program->barriers(), 1u);
  const std::string whole = row("captured program [2 commands, 1 barriers]");
  ASSERT_FALSE(whole.empty()) << report;
  EXPECT_NE(whole.find(" 3 "), std::string::npos) << whole;
  EXPECT_EQ(read_vector<float>(z, n), read_vector<float>(x, n));
  // Replayed without profiling, the program adds nothing.
  profile_clear();
  r.execute(program);
  r.submit_and_wait();
  EXPECT_EQ(profile_report(), "");
}

TEST_F(VulkanTest, RecorderDiscardsUnsubmittedWork) {
  const size_t active = ctx().allocator().counters().active_bytes;
  {
    BufferPtr x = upload_vector(random_floats(64, 0, 1, 5));
    BufferPtr y = ctx().allocator().allocate(64 * 4);
    Recorder r(ctx());
    record_copy_floats(r, x, y, 64);
  }  // never submitted: the recorder lets the buffers go
  EXPECT_EQ(ctx().allocator().counters().active_bytes, active);
  Recorder empty(ctx());
  EXPECT_NO_THROW(empty.submit_and_wait());
}

TEST_F(VulkanTest, SubmitFailureIsAnErrorOnTheCallingThread) {
  const auto values = random_floats(256, -1, 1, 6);
  BufferPtr x = upload_vector(values);
  BufferPtr y = ctx().allocator().allocate(256 * 4);
  Recorder r(ctx());
  record_copy_floats(r, x, y, 256);
  ctx().inject_submit_failure_for_testing(VK_ERROR_OUT_OF_DEVICE_MEMORY);
  try {
    r.submit_and_wait();
    FAIL() << "the injected failure did not surface";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("VK_ERROR_OUT_OF_DEVICE_MEMORY"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(ctx().lost());
  EXPECT_EQ(r.pending(), 0u);
  record_copy_floats(r, x, y, 256);  // the recorder and the context still work
  r.submit_and_wait();
  EXPECT_EQ(read_vector<float>(y, 256), values);
}

TEST_F(VulkanTest, DeviceLostPoisonsTheContext) {
  auto own = Context::create(private_options());
  {
    BufferPtr x = own->allocator().allocate(1024);
    BufferPtr y = own->allocator().allocate(1024);
    Recorder r(*own);
    record_copy_floats(r, x, y, 256);
    own->inject_submit_failure_for_testing(VK_ERROR_DEVICE_LOST);
    EXPECT_THROW(r.submit_and_wait(), DeviceError);
    EXPECT_TRUE(own->lost());
    EXPECT_THROW(record_copy_floats(r, x, y, 256), DeviceError);
  }
  try {
    own->allocator().allocate(64);
    FAIL() << "allocated on a lost device";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("lost"), std::string::npos) << e.what();
  }
}

TEST_F(VulkanTest, ThreadsRecordAndSubmitAtOnce) {
  // Several threads share one read-only input and each runs its own evaluations.
  const int64_t n = 2048;
  const auto shared_values = random_floats(n, -2, 2, 7);
  BufferPtr shared = upload_vector(shared_values);
  constexpr int kThreads = 4, kIterations = 12;
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int it = 0; it < kIterations; ++it) {
        const auto mine = random_floats(n, -2, 2, 100 + t * kIterations + it);
        BufferPtr x = ctx().allocator().allocate(n * 4);
        BufferPtr y = ctx().allocator().allocate(n * 4);
        upload(ctx(), x, mine.data(), n * 4);
        Recorder r(ctx());
        const GpuView vs = GpuView::contiguous(shared, float32, {n});
        const GpuView vx = GpuView::contiguous(x, float32, {n}), vy = GpuView::contiguous(y, float32, {n});
        const ElementwiseKernel mul{.inputs = {float32, float32}, .expr = "x0 * x1"};
        const ElementwiseKernel add{.inputs = {float32, float32}, .expr = "x0 + x1"};
        const GpuView mul_in[] = {vs, vx}, add_in[] = {vy, vs};
        record_elementwise(r, mul, mul_in, vy);
        record_elementwise(r, add, add_in, vy);  // in place, after a barrier
        r.submit_and_wait();
        std::vector<float> back(n);
        readback(ctx(), y, back.data(), n * 4);
        for (int64_t i = 0; i < n; ++i)
          if (back[i] != shared_values[i] * mine[i] + shared_values[i]) ++failures[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

TEST_F(VulkanTest, PipelinesAreCachedByDigest) {
  auto own = Context::create(private_options());
  PipelineCache& cache = own->pipelines();
  const ShaderCode& copy = builtin_shader("copy_u32");
  const uint32_t spec_a[] = {64, 0}, spec_b[] = {64, 1};
  const Pipeline& p1 = cache.get({&copy, spec_a, 2});
  const Pipeline& p2 = cache.get({&copy, spec_a, 2});
  EXPECT_EQ(&p1, &p2);
  EXPECT_EQ(cache.created(), 1u);
  const Pipeline& p3 = cache.get({&copy, spec_b, 2});
  EXPECT_NE(p3.pipeline, p1.pipeline);
  EXPECT_EQ(cache.created(), 2u);
  EXPECT_THROW(builtin_shader("no_such_shader"), NotImplemented);
}

TEST_F(VulkanTest, PipelineStatisticsOnlyWhenAsked) {
  const ShaderCode& copy = builtin_shader("copy_u32");
  const uint32_t spec[] = {64, 0};
  auto plain = Context::create(private_options());
  EXPECT_FALSE(plain->caps().pipeline_stats);
  EXPECT_TRUE(plain->pipelines().statistics(plain->pipelines().get({&copy, spec, 2})).empty());

  ContextOptions o = private_options();
  o.pipeline_stats = true;
  auto own = Context::create(o);
  if (!own->caps().pipeline_stats)
    GTEST_SKIP() << own->caps().name << " lacks pipeline executable statistics";
  ::testing::internal::CaptureStderr();
  const Pipeline& p = own->pipelines().get({&copy, spec, 2});
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(printed.find("kiln: pipeline copy_u32 spec [64 0]: "), std::string::npos) << printed;
  const auto stats = own->pipelines().statistics(p);
  ASSERT_FALSE(stats.empty());
  for (const PipelineStatistic& s : stats) {
    EXPECT_FALSE(s.name.empty());
    EXPECT_NE(printed.find(s.name), std::string::npos) << s.name;
  }
  // Some count of the compiled code (instructions, registers) is positive.
  EXPECT_TRUE(std::ranges::any_of(stats, [](const PipelineStatistic& s) { return s.value > 0; }));
}

TEST_F(VulkanTest, PipelineCreationIsThreadSafe) {
  auto own = Context::create(private_options());
  const ShaderCode& copy = builtin_shader("copy_u16");
  const uint32_t spec[] = {128, 1};
  std::vector<const Pipeline*> seen(6);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i)
    threads.emplace_back([&, i] { seen[i] = &own->pipelines().get({&copy, spec, 2}); });
  for (auto& t : threads) t.join();
  for (const Pipeline* p : seen) EXPECT_EQ(p, seen[0]);
  EXPECT_EQ(own->pipelines().created(), 1u);
}

TEST_F(VulkanTest, PipelineCacheOnDiskWarmsTheNextContext) {
  const std::string dir_name = "kiln_vulkan_cache_test_" + std::to_string(::getpid());
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / dir_name;
  std::filesystem::remove_all(dir);
  std::filesystem::path file;
  {
    auto first = Context::create(private_options(dir_name));
    EXPECT_EQ(first->pipelines().loaded_bytes(), 0u);
    file = first->pipelines().path();
    const ShaderCode& copy = builtin_shader("copy_u32");
    const uint32_t spec[] = {64, 1};
    first->pipelines().get({&copy, spec, 2});
    EXPECT_TRUE(first->pipelines().save());
    EXPECT_FALSE(first->pipelines().save());  // nothing new since
  }
  ASSERT_TRUE(std::filesystem::exists(file));
  EXPECT_GE(std::filesystem::file_size(file), sizeof(VkPipelineCacheHeaderVersionOne));
  for (const auto& e : std::filesystem::directory_iterator(dir))  // no temporary file is left
    EXPECT_EQ(e.path(), file);
  {
    auto second = Context::create(private_options(dir_name));
    EXPECT_EQ(second->pipelines().loaded_bytes(), std::filesystem::file_size(file));
  }
  {
    std::ofstream(file, std::ios::binary | std::ios::trunc)
        << "not a pipeline cache, but long enough to be read";
    auto third = Context::create(private_options(dir_name));
    EXPECT_EQ(third->pipelines().loaded_bytes(), 0u);  // rejected, and the context works
    const ShaderCode& copy = builtin_shader("copy_u32");
    const uint32_t spec[] = {64, 1};
    EXPECT_NE(third->pipelines().get({&copy, spec, 2}).pipeline, VK_NULL_HANDLE);
  }
  std::filesystem::remove_all(dir);
}

TEST(VulkanShaders, TableHoldsEveryVariantAndTheCommonGlsl) {
  std::set<std::string_view> names;
  for (const EmbeddedShader& s : embedded_shaders()) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    ASSERT_GT(s.spirv.size(), 5u) << s.name;
    EXPECT_EQ(s.spirv[0], 0x07230203u) << s.name;  // the SPIR-V magic number
  }
  for (const char* name : {"copy_u32", "copy_u16", "cast_f32_f16", "cast_i32_f32", "reduce_sum_rows",
                           "matmul_f32_t64", "matmul_f32_t128"})
    EXPECT_TRUE(names.count(name)) << name;
  bool found = false;
  for (const EmbeddedGlsl& g : embedded_glsl())
    if (g.path == "common/elementwise_ops.glsl")
      found = g.text.find("float kiln_tanh(float x)") != std::string::npos;
  EXPECT_TRUE(found);
}

TEST_F(VulkanTest, LinearGroupsSplitPastTheDeviceLimit) {
  const uint32_t max_x = ctx().caps().max_workgroup_count[0];
  const Groups small = Groups::linear(10, ctx());
  EXPECT_EQ(small.x, 10u);
  EXPECT_EQ(small.y, 1u);
  // Past max_x the grid is Groups::kGridWidth wide (what shaders/common/grid.glsl assumes), up to
  // the device's limit on y. NVIDIA's x limit (2^31 - 1) is already about that many groups.
  const uint32_t max_y = ctx().caps().max_workgroup_count[1];
  const uint64_t most = std::max(uint64_t{max_x}, uint64_t{Groups::kGridWidth} * max_y);
  const uint64_t n = std::min(uint64_t{max_x} * 3 + 7, most);
  const Groups big = Groups::linear(n, ctx());
  EXPECT_LE(big.x, max_x);
  EXPECT_GE(uint64_t{big.x} * big.y, n);
  if (n > max_x) {
    EXPECT_EQ(big.x, Groups::kGridWidth);
  }
  EXPECT_THROW(Groups::linear(most + 1, ctx()), ValueError);
}

}  // namespace
}  // namespace kiln::detail::vk
