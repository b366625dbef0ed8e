#include "kiln/core/vulkan/runtime/glsl_compiler.h"

#include <glslang/Include/glslang_c_interface.h>
#include <glslang/Public/resource_limits_c.h>
#include <glslang/build_info.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/shader_table.h"

namespace kiln::detail::vk {
namespace {

constexpr uint32_t kSpirvMagic = 0x07230203;
// Bump when the compile options or the file layout change: old files and keys are then ignored.
constexpr uint32_t kFormatVersion = 1;
constexpr char kFileMagic[8] = {'K', 'I', 'L', 'N', 'S', 'P', 'V', '\0'};

// The header of <cache_dir>/spirv/<digest>.spv; the SPIR-V words follow it.
struct SpvFileHeader {
  char magic[8];
  uint32_t version;
  uint32_t words;
  uint64_t checksum;  // XXH3-64 of the words
  char digest[32];    // the file's name, so a renamed or copied file is not trusted
};
static_assert(sizeof(SpvFileHeader) == 56);

// glslang's process-wide tables; its start-up is not safe to run concurrently.
void init_glslang() {
  static std::once_flag once;
  std::call_once(once, [] { glslang_initialize_process(); });
}

// The text of an embedded shaders/common/ file by its path, or nullptr.
const EmbeddedGlsl* find_embedded(std::string_view path) {
  for (const EmbeddedGlsl& g : embedded_glsl())
    if (g.path == path) return &g;
  return nullptr;
}

// `source` with each `#include "<file>"` replaced by the embedded file's text (found beside the
// including file first, then from shaders/), recursively. glslang's C interface, used so that
// kiln's sanitizer builds never touch glslang's RTTI-less classes, takes no include callbacks in
// version 12; the files' include guards keep repeated includes harmless.
std::string expand_includes(std::string_view source, std::string_view dir, std::string_view name, int depth) {
  if (depth > 16) throw ValueError::of("glsl", "includes nest too deeply", "{}", name);
  std::string out;
  size_t pos = 0;
  while (pos < source.size()) {
    size_t end = source.find('\n', pos);
    if (end == std::string_view::npos) end = source.size();
    const std::string_view line = source.substr(pos, end - pos);
    pos = end + 1;
    const size_t hash = line.find_first_not_of(" \t");
    const size_t quote = line.find('"');
    if (hash == std::string_view::npos || line[hash] != '#' ||
        line.find("include", hash) == std::string_view::npos || quote == std::string_view::npos) {
      out.append(line).push_back('\n');
      continue;
    }
    const size_t close = line.find('"', quote + 1);
    const std::string_view file =
        line.substr(quote + 1, close == std::string_view::npos ? 0 : close - quote - 1);
    const EmbeddedGlsl* g = find_embedded(std::string(dir) + std::string(file));
    if (!g) g = find_embedded(file);
    if (!g)
      throw ValueError::of("glsl", "no such include among kiln's shaders/common files", "{} in {}", file,
                           name);
    const size_t slash = g->path.rfind('/');
    out += expand_includes(g->text, g->path.substr(0, slash == std::string_view::npos ? 0 : slash + 1), name,
                           depth + 1);
    out.push_back('\n');
  }
  return out;
}

// XXH3-64 of every embedded shaders/common/ file, computed once: included text is part of a key.
uint64_t embedded_glsl_digest() {
  static const uint64_t digest = [] {
    XXH3_state_t state;
    XXH3_64bits_reset(&state);
    for (const EmbeddedGlsl& g : embedded_glsl()) {
      XXH3_64bits_update(&state, g.path.data(), g.path.size());
      XXH3_64bits_update(&state, g.text.data(), g.text.size());
    }
    return XXH3_64bits_digest(&state);
  }();
  return digest;
}

// "  12 | code" for the lines of `source` within `context` lines of `line` (1-based), ">" marking it.
std::string numbered_lines(const std::string& source, int line, int context) {
  std::string out;
  std::istringstream in(source);
  std::string text;
  for (int n = 1; std::getline(in, text); ++n) {
    if (n < line - context) continue;
    if (n > line + context) break;
    out += fmt::format("{}{:5} | {}\n", n == line ? '>' : ' ', n, text);
  }
  return out;
}

// glslang's log, each error followed by the source lines around it (glslang names the source "0").
std::string explain(const std::string& source, const std::string& log) {
  std::string out;
  std::istringstream in(log);
  std::string line;
  const std::string prefix = "ERROR: 0:";
  int shown = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    out += line + "\n";
    if (line.rfind(prefix, 0) != 0 || shown >= 5) continue;  // past 5 errors the log says enough
    int n = 0;
    const char* begin = line.data() + prefix.size();
    if (std::from_chars(begin, line.data() + line.size(), n).ec == std::errc() && n > 0) {
      out += numbered_lines(source, n, 3);
      ++shown;
    }
  }
  return out;
}

std::vector<uint32_t> compile_with_glslang(std::string_view name, const std::string& text) {
  init_glslang();
  const std::string source = expand_includes(text, "", name, 0);
  glslang_input_t input{};
  input.language = GLSLANG_SOURCE_GLSL;
  input.stage = GLSLANG_STAGE_COMPUTE;
  input.client = GLSLANG_CLIENT_VULKAN;
  input.client_version = GLSLANG_TARGET_VULKAN_1_2;
  input.target_language = GLSLANG_TARGET_SPV;
  input.target_language_version = GLSLANG_TARGET_SPV_1_5;
  input.code = source.c_str();
  input.default_version = 450;
  input.default_profile = GLSLANG_NO_PROFILE;
  input.messages = static_cast<glslang_messages_t>(GLSLANG_MSG_SPV_RULES_BIT | GLSLANG_MSG_VULKAN_RULES_BIT);
  input.resource = glslang_default_resource();
  // Owners of the C interface's objects.
  const std::unique_ptr<glslang_shader_t, void (*)(glslang_shader_t*)> shader(glslang_shader_create(&input),
                                                                              glslang_shader_delete);
  // Version 12 parses what glslang_shader_preprocess left (its file includer finds nothing left to include).
  if (!glslang_shader_preprocess(shader.get(), &input) || !glslang_shader_parse(shader.get(), &input))
    throw ValueError::of("glsl", "the shader does not compile", "{}:\n{}", name,
                         explain(source, glslang_shader_get_info_log(shader.get())));
  const std::unique_ptr<glslang_program_t, void (*)(glslang_program_t*)> program(glslang_program_create(),
                                                                                 glslang_program_delete);
  glslang_program_add_shader(program.get(), shader.get());
  if (!glslang_program_link(program.get(), input.messages))
    throw ValueError::of("glsl", "the shader does not link", "{}:\n{}", name,
                         explain(source, glslang_program_get_info_log(program.get())));
  glslang_spv_options_t options{};
  options.disable_optimizer = true;  // the driver optimises; glslang's pass would only cost time
  glslang_program_SPIRV_generate_with_options(program.get(), GLSLANG_STAGE_COMPUTE, &options);
  std::vector<uint32_t> spirv(glslang_program_SPIRV_get_size(program.get()));
  if (!spirv.empty()) glslang_program_SPIRV_get(program.get(), spirv.data());
  if (spirv.empty() || spirv[0] != kSpirvMagic) {
    const char* log = glslang_program_SPIRV_get_messages(program.get());
    throw ValueError::of("glsl", "SPIR-V generation failed", "{}: {}", name, log ? log : "");
  }
  return spirv;
}

std::filesystem::path cache_file(const std::filesystem::path& dir, const std::string& digest) {
  return dir / "spirv" / (digest + ".spv");
}

// The words of a cache file when it is whole and names `digest`; empty otherwise.
std::vector<uint32_t> read_cache_file(const std::filesystem::path& path, const std::string& digest) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  SpvFileHeader h{};
  if (!in.read(reinterpret_cast<char*>(&h), sizeof h)) return {};
  if (std::memcmp(h.magic, kFileMagic, sizeof kFileMagic) != 0 || h.version != kFormatVersion ||
      h.words < 5 || h.words > (64u << 20) || digest.size() != sizeof h.digest ||
      std::memcmp(h.digest, digest.data(), sizeof h.digest) != 0)
    return {};
  std::vector<uint32_t> words(h.words);
  if (!in.read(reinterpret_cast<char*>(words.data()), static_cast<std::streamsize>(words.size() * 4)))
    return {};
  if (in.peek() != std::ifstream::traits_type::eof()) return {};  // trailing bytes: not our file
  if (words[0] != kSpirvMagic || XXH3_64bits(words.data(), words.size() * 4) != h.checksum) return {};
  return words;
}

// Writes the file as a whole or not at all: a temporary file beside it, fsync, rename.
void write_cache_file(const std::filesystem::path& path, const std::string& digest,
                      const std::vector<uint32_t>& words) {
  static std::atomic<uint64_t> sequence{0};
  SpvFileHeader h{};
  std::memcpy(h.magic, kFileMagic, sizeof kFileMagic);
  h.version = kFormatVersion;
  h.words = static_cast<uint32_t>(words.size());
  h.checksum = XXH3_64bits(words.data(), words.size() * 4);
  std::memcpy(h.digest, digest.data(), std::min(digest.size(), sizeof h.digest));
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  const std::string tmp = fmt::format("{}.tmp-{}-{}", path.string(), ::getpid(),
                                      sequence.fetch_add(1, std::memory_order_relaxed));
  FILE* f = std::fopen(tmp.c_str(), "wbe");
  if (!f) return;
  bool ok =
      std::fwrite(&h, sizeof h, 1, f) == 1 && std::fwrite(words.data(), 4, words.size(), f) == words.size();
  ok = std::fflush(f) == 0 && ok && ::fsync(::fileno(f)) == 0;
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) std::remove(tmp.c_str());
}

}  // namespace

std::string glsl_digest(const std::string& source) {
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  const uint64_t fixed[] = {
      kFormatVersion, GLSLANG_TARGET_VULKAN_1_2, GLSLANG_TARGET_SPV_1_5,
      GLSLANG_VERSION_MAJOR * 1000000ull + GLSLANG_VERSION_MINOR * 1000ull + GLSLANG_VERSION_PATCH,
      embedded_glsl_digest()};
  XXH3_128bits_update(&state, fixed, sizeof fixed);
  XXH3_128bits_update(&state, source.data(), source.size());
  const XXH128_hash_t h = XXH3_128bits_digest(&state);
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

GlslCompiler::GlslCompiler() = default;
GlslCompiler::~GlslCompiler() = default;

GlslCounters GlslCompiler::counters() const {
  return {compiles_.load(), disk_hits_.load(), memory_hits_.load()};
}

const ShaderCode& GlslCompiler::compile(std::string_view name, const std::string& source,
                                        const std::filesystem::path& cache_dir) {
  const std::string digest = glsl_digest(source);
  {
    std::shared_lock lock(mutex_);
    auto it = entries_.find(digest);
    if (it != entries_.end()) {
      memory_hits_.fetch_add(1, std::memory_order_relaxed);
      return it->second->code;
    }
  }
  bool from_disk = false;
  std::vector<uint32_t> spirv;
  if (!cache_dir.empty()) {
    spirv = read_cache_file(cache_file(cache_dir, digest), digest);
    from_disk = !spirv.empty();
  }
  if (!from_disk) {
    spirv = compile_with_glslang(name, source);
    if (!cache_dir.empty()) write_cache_file(cache_file(cache_dir, digest), digest, spirv);
  }
  auto entry = std::make_unique<Entry>();
  entry->name = std::string(name);
  entry->spirv = std::move(spirv);
  entry->code = ShaderCode::of(entry->name, entry->spirv);
  (from_disk ? disk_hits_ : compiles_).fetch_add(1, std::memory_order_relaxed);
  std::unique_lock lock(mutex_);
  auto [it, inserted] = entries_.try_emplace(digest, std::move(entry));  // another thread's copy wins
  return it->second->code;
}

GlslCompiler& glsl_compiler() {
  static GlslCompiler* compiler = new GlslCompiler();  // never destroyed: pipelines may be made at exit
  return *compiler;
}

const ShaderCode& compile_glsl(std::string_view name, const std::string& source,
                               const std::filesystem::path& cache_dir) {
  return glsl_compiler().compile(name, source, cache_dir);
}

}  // namespace kiln::detail::vk
