// The run-time GLSL compiler: SPIR-V that runs, error messages with the source lines, the memory
// and disk caches (including a corrupt file), and compiles from several threads at once.
#include "kiln/core/vulkan/runtime/glsl_compiler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <bit>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/recorder.h"
#include "vulkan_fixture.h"

namespace kiln::detail::vk {
namespace {

namespace fs = std::filesystem;

// A fresh folder for one test, removed with everything in it afterwards. (tests/vulkan binaries do
// not link tests/support, whose TempDir does the same.)
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() / ("kiln_glsl_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// y[i] = x[i] * scale + bias, with bias a literal so that sources differ.
std::string scale_shader(float bias) {
  return "#version 450\n"
         "#extension GL_GOOGLE_include_directive : require\n"
         "#include \"common/indexing.glsl\"\n"
         "layout(std430, binding = 0) readonly buffer In { float x[]; };\n"
         "layout(std430, binding = 1) writeonly buffer Out { float y[]; };\n"
         "layout(push_constant) uniform Push { uint n; float scale; } p;\n"
         "void main() {\n"
         "  const uint i = kiln_global_id();\n"
         "  if (i >= p.n) return;\n"
         "  y[i] = x[i] * p.scale + " +
         std::to_string(bias) + ";\n}\n";
}

bool is_spirv(const ShaderCode& c) { return c.spirv.size() > 5 && c.spirv[0] == 0x07230203u; }

TEST(GlslCompiler, CompilesAndCachesInMemory) {
  GlslCompiler compiler;
  const std::string source = scale_shader(0.5f);
  const ShaderCode& a = compiler.compile("scale", source, {});
  EXPECT_TRUE(is_spirv(a));
  EXPECT_EQ(a.name, "scale");
  EXPECT_EQ(a.digest, ShaderCode::of("x", a.spirv).digest);
  const ShaderCode& b = compiler.compile("scale", source, {});
  EXPECT_EQ(&a, &b);
  const GlslCounters c = compiler.counters();
  EXPECT_EQ(c.compiles, 1u);
  EXPECT_EQ(c.memory_hits, 1u);
  EXPECT_EQ(c.disk_hits, 0u);
  // Another source is another shader.
  const ShaderCode& other = compiler.compile("scale", scale_shader(1.5f), {});
  EXPECT_NE(&a, &other);
  EXPECT_NE(a.digest, other.digest);
  EXPECT_EQ(compiler.counters().compiles, 2u);
  EXPECT_NE(glsl_digest(source), glsl_digest(scale_shader(1.5f)));
  EXPECT_EQ(glsl_digest(source).size(), 32u);
}

TEST(GlslCompiler, ErrorsQuoteTheLogAndTheSourceLines) {
  GlslCompiler compiler;
  std::string source = scale_shader(0.5f);
  const size_t at = source.find("y[i] = x[i]");
  source.replace(at, 4, "y[i] = undefined_thing +");
  try {
    compiler.compile("broken_kernel", source, {});
    FAIL() << "a bad shader compiled";
  } catch (const ValueError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[glsl]"), std::string::npos) << what;
    EXPECT_NE(what.find("broken_kernel"), std::string::npos) << what;
    EXPECT_NE(what.find("undefined_thing"), std::string::npos) << what;
    EXPECT_NE(what.find("undeclared identifier"), std::string::npos) << what;
    // The line is marked and numbered, with its neighbours (numbers count the included text too).
    const size_t marked = what.find(" |   y[i] = undefined_thing +");
    ASSERT_NE(marked, std::string::npos) << what;
    EXPECT_EQ(what[what.rfind('\n', marked) + 1], '>') << what;
    EXPECT_NE(what.find(" |   if (i >= p.n) return;"), std::string::npos) << what;
  }
  EXPECT_EQ(compiler.counters().compiles, 0u);
  // A missing include is an error too, not a crash.
  EXPECT_THROW(compiler.compile("missing",
                                "#version 450\n#extension GL_GOOGLE_include_directive : require\n"
                                "#include \"common/nothing.glsl\"\nvoid main() {}\n",
                                {}),
               ValueError);
}

TEST(GlslCompiler, DiskCacheServesASecondCompiler) {
  ScratchDir dir;
  const std::string source = scale_shader(2.5f);
  std::vector<uint32_t> words;
  {
    GlslCompiler first;
    const ShaderCode& c = first.compile("scale", source, dir.path);
    words.assign(c.spirv.begin(), c.spirv.end());
    EXPECT_EQ(first.counters().compiles, 1u);
  }
  const fs::path file = dir.path / "spirv" / (glsl_digest(source) + ".spv");
  ASSERT_TRUE(fs::exists(file));
  // Only the file itself is left: the temporary it was written through was renamed.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path / "spirv"), fs::directory_iterator()), 1);
  GlslCompiler second;
  const ShaderCode& c = second.compile("scale", source, dir.path);
  EXPECT_EQ(std::vector<uint32_t>(c.spirv.begin(), c.spirv.end()), words);
  EXPECT_EQ(second.counters().disk_hits, 1u);
  EXPECT_EQ(second.counters().compiles, 0u);
}

TEST(GlslCompiler, CorruptOrShortDiskFilesAreIgnoredAndRewritten) {
  ScratchDir dir;
  const std::string source = scale_shader(3.5f);
  { GlslCompiler().compile("scale", source, dir.path); }
  const fs::path file = dir.path / "spirv" / (glsl_digest(source) + ".spv");
  const auto size = fs::file_size(file);
  auto damage = [&](auto edit) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    edit(f);
  };
  // A flipped byte in the SPIR-V, then a truncated file, then garbage: each is compiled again.
  const std::vector<std::function<void()>> corruptions = {
      [&] {
        damage([&](std::fstream& f) {
          f.seekp(static_cast<std::streamoff>(size) - 9);
          f.put('\x5a');
        });
      },
      [&] { fs::resize_file(file, size / 2); },
      [&] { std::ofstream(file, std::ios::binary | std::ios::trunc) << "not a spirv file"; }};
  for (const auto& corrupt : corruptions) {
    corrupt();
    GlslCompiler compiler;
    const ShaderCode& c = compiler.compile("scale", source, dir.path);
    EXPECT_TRUE(is_spirv(c));
    EXPECT_EQ(compiler.counters().compiles, 1u);
    EXPECT_EQ(compiler.counters().disk_hits, 0u);
    EXPECT_EQ(fs::file_size(file), size);  // rewritten whole
    GlslCompiler again;
    again.compile("scale", source, dir.path);
    EXPECT_EQ(again.counters().disk_hits, 1u);
  }
}

TEST(GlslCompiler, ThreadsCompileDistinctAndIdenticalSources) {
  ScratchDir dir;
  GlslCompiler compiler;
  constexpr int kThreads = 8;
  std::vector<const ShaderCode*> distinct(kThreads), same(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        distinct[t] = &compiler.compile("distinct", scale_shader(10.0f + static_cast<float>(t)), dir.path);
        same[t] = &compiler.compile("same", scale_shader(-1.0f), dir.path);
      } catch (...) {
        failures.fetch_add(1);
      }
    });
  for (auto& th : threads) th.join();
  ASSERT_EQ(failures.load(), 0);
  EXPECT_EQ(std::set<const ShaderCode*>(distinct.begin(), distinct.end()).size(), size_t{kThreads});
  EXPECT_EQ(std::set<const ShaderCode*>(same.begin(), same.end()).size(), 1u);
  for (const ShaderCode* c : distinct) EXPECT_TRUE(is_spirv(*c));
  const GlslCounters c = compiler.counters();
  // Threads that missed on the shared source at once each compiled it; the others hit memory.
  EXPECT_GE(c.compiles, size_t{kThreads} + 1);
  EXPECT_EQ(c.compiles + c.memory_hits + c.disk_hits, size_t{2 * kThreads});
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path / "spirv"), fs::directory_iterator()),
            kThreads + 1);
}

using testing::VulkanTest;
class GlslCompilerOnDevice : public VulkanTest {};

TEST_F(GlslCompilerOnDevice, CompiledShaderRuns) {
  const ShaderCode& code = compile_glsl("scale", scale_shader(0.25f), {});
  const int n = 1000;
  const auto x = testing::random_floats(n, -4, 4, 5);
  BufferPtr in = upload_vector(x);
  BufferPtr out = ctx().allocator().allocate(n * sizeof(float));
  struct Push {
    uint32_t n;
    float scale;
  } push{static_cast<uint32_t>(n), 3.0f};
  Recorder r(ctx());
  r.dispatch(code, {64u}, {{in, Access::read}, {out, Access::write}}, push,
             Groups::linear((n + 63) / 64, ctx()));
  r.submit_and_wait();
  const auto y = read_vector<float>(out, n);
  for (int i = 0; i < n; ++i) ASSERT_FLOAT_EQ(y[i], x[i] * 3.0f + 0.25f) << i;
}

// Past the device's limit on x, Groups::linear splits a count of workgroups over x and y at a fixed
// width, which kiln_group_id() (shaders/common/grid.glsl) undoes without reading gl_NumWorkGroups:
// every group of a split grid finds its own index once, and the excess groups see indices past n.
TEST_F(GlslCompilerOnDevice, SplitGridsNumberTheirGroupsInOrder) {
  const uint64_t max_x = ctx().caps().max_workgroup_count[0];
  if (max_x > (uint64_t{1} << 20))
    GTEST_SKIP() << "the device's x limit " << max_x << " is too large to pass here";
  const ShaderCode& code = compile_glsl("group_ids", R"(#version 450
#extension GL_GOOGLE_include_directive : require
#include "common/indexing.glsl"
layout(std430, binding = 0) buffer Out { uint hits[]; };
layout(push_constant) uniform Push { uint n; } p;
void main() {
  const uint g = kiln_group_id();
  if (g < p.n && gl_LocalInvocationID.x == 0u) atomicAdd(hits[g], g + 1u);
}
)",
                                        {});
  const uint64_t n = 2 * max_x + 3;
  const Groups groups = Groups::linear(n, ctx());
  ASSERT_GT(groups.y, 1u);
  EXPECT_EQ(groups.x, Groups::kGridWidth);
  BufferPtr out = upload_vector(std::vector<uint32_t>(n, 0));
  Recorder r(ctx());
  r.dispatch(code, {32u}, {{out, Access::read_write}}, static_cast<uint32_t>(n), groups);
  r.submit_and_wait();
  const auto hits = read_vector<uint32_t>(out, n);
  for (uint64_t g = 0; g < n; ++g) ASSERT_EQ(hits[g], g + 1) << "group " << g;
}

// A dispatch with no bindings: the kernel reaches its buffers through device addresses in its push
// constants (the pipeline layout without a descriptor set), and the recorder still orders it
// after the dispatch that wrote its input. A dispatch that reaches no buffer at all is refused.
TEST_F(GlslCompilerOnDevice, DispatchWithoutBindingsReachesBuffersThroughAddresses) {
  if (!ctx().caps().buffer_device_address) GTEST_SKIP() << "the device has no buffer device addresses";
  const ShaderCode& code = compile_glsl("addressed_scale", R"(#version 450
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
layout(local_size_x_id = 0) in;
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float f[]; };
layout(push_constant) uniform Push { uvec2 src; uvec2 dst; uint n; float scale; } p;
void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i < p.n) Floats(p.dst).f[i] = Floats(p.src).f[i] * p.scale + 1.0;
}
)",
                                        {});
  const int n = 1000;
  const auto x = testing::random_floats(n, -4, 4, 6);
  BufferPtr a = upload_vector(x);
  BufferPtr b = ctx().allocator().allocate(n * sizeof(float)),
            c = ctx().allocator().allocate(n * sizeof(float));
  auto push = [&](const BufferPtr& from, const BufferPtr& to, float scale) {
    const uint64_t f = from->address(), t = to->address();
    return std::array<uint32_t, 6>{static_cast<uint32_t>(f), static_cast<uint32_t>(f >> 32),
                                   static_cast<uint32_t>(t), static_cast<uint32_t>(t >> 32),
                                   static_cast<uint32_t>(n), std::bit_cast<uint32_t>(scale)};
  };
  const uint32_t spec[] = {64u};
  Recorder r(ctx());
  for (auto [from, to, scale] : {std::tuple{a, b, 2.0f}, std::tuple{b, c, -0.5f}}) {
    const auto words = push(from, to, scale);
    const Binding reached[] = {{from, Access::read}, {to, Access::write}};
    r.dispatch(code, spec, {}, std::as_bytes(std::span<const uint32_t>(words)),
               Groups::linear((n + 63) / 64, ctx()), reached);
  }
  EXPECT_EQ(r.barriers(), 1u);  // the second dispatch reads what the first wrote
  r.submit_and_wait();
  const auto y = read_vector<float>(c, n);
  for (int i = 0; i < n; ++i) ASSERT_FLOAT_EQ(y[i], (x[i] * 2.0f + 1.0f) * -0.5f + 1.0f) << i;

  Recorder bad(ctx());
  const auto words = push(a, b, 1.0f);
  EXPECT_THROW(bad.dispatch(code, spec, {}, std::as_bytes(std::span<const uint32_t>(words)), Groups{1}),
               ValueError);
}

}  // namespace
}  // namespace kiln::detail::vk
