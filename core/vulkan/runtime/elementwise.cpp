#include "kiln/core/vulkan/runtime/elementwise.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <string_view>
#include <unordered_map>

#include "kiln/core/error.h"
#include "kiln/core/vulkan/runtime/context.h"
#include "kiln/core/vulkan/runtime/glsl_compiler.h"
#include "kiln/core/vulkan/runtime/views.h"

namespace kiln::detail::vk {
namespace {

constexpr const char* kOp = "gpu elementwise";
constexpr uint32_t kPushWords = Context::kPushConstantBytes / 4;

// How a kernel finds input i's element for output element j.
enum class Walk : uint8_t {
  linear,   // offset + j: the input is laid out as the output
  scalar,   // offset: every stride is 0
  strided,  // offset + sum of coordinate * stride over the merged shape
};

// What one compiled variant of a kernel depends on besides the kernel itself.
struct Variant {
  int rank = 0;  // merged rank, when an input is strided (else 0)
  std::vector<Walk> walks;
  bool meta_in_buffer = false;  // the index words do not fit the push constants
  // 32-bit output and linear inputs, their offsets multiples of 4 elements, no strided input:
  // each invocation loads and stores whole 16-byte vectors (generate_vec4).
  bool vec4 = false;
  // At most one vector (or element) per invocation, a small dispatch: no loop over the grid, so
  // no grid size to read (shaders/common/grid.glsl says what reading it costs).
  bool single = false;
  // Buffers reached through device addresses in the push constants (before the index words)
  // instead of bindings.
  bool addressed = false;
  ElementwiseFeatures features;
  bool operator==(const Variant&) const = default;
};

// Layout of the index words (push constants or a buffer): n, out offset, the inputs' offsets,
// then (when an input is strided) the merged shape and each strided input's strides.
struct Meta {
  std::vector<uint32_t> words;
  uint32_t shape_at = 0;
};

bool packed(Dtype t, const ElementwiseFeatures& f) {
  return (size_of(t) == 1 && !f.storage8) || (size_of(t) == 2 && !f.storage16);
}

// Elements one invocation writes: whole 32-bit words when the output dtype is packed.
uint32_t per_invocation(Dtype out, const ElementwiseFeatures& f) {
  return packed(out, f) ? 4u / static_cast<uint32_t>(size_of(out)) : 1u;
}

const char* storage_type(Dtype t, const ElementwiseFeatures& f) {
  if (packed(t, f)) return "uint";
  switch (t) {
    case Dtype::bool_:
    case Dtype::uint8:
      return "uint8_t";
    case Dtype::int8:
      return "int8_t";
    case Dtype::int16:
      return "int16_t";
    case Dtype::uint16:
    case Dtype::float16:
    case Dtype::bfloat16:
      return "uint16_t";
    case Dtype::int32:
      return "int";
    case Dtype::uint32:
      return "uint";
    case Dtype::int64:
      return "int64_t";
    case Dtype::uint64:
      return "uint64_t";
    case Dtype::float32:
      return "float";
    case Dtype::float64:
      return "double";
  }
  return "uint";
}

// GLSL of the raw bits or value of element `i` of buffer `buf` (before decoding).
std::string raw_load(Dtype t, const ElementwiseFeatures& f, const std::string& buf) {
  if (!packed(t, f)) return buf + "[i]";
  if (size_of(t) == 1) {
    if (t == Dtype::int8) return fmt::format("bitfieldExtract(int({}[i >> 2]), int(i & 3u) * 8, 8)", buf);
    return fmt::format("bitfieldExtract({}[i >> 2], int(i & 3u) * 8, 8)", buf);
  }
  if (t == Dtype::int16) return fmt::format("bitfieldExtract(int({}[i >> 1]), int(i & 1u) * 16, 16)", buf);
  return fmt::format("bitfieldExtract({}[i >> 1], int(i & 1u) * 16, 16)", buf);
}

// A function `<value type> <name>(uint i)` reading element i of `buf` as a value of its dtype.
std::string load_function(Dtype t, const ElementwiseFeatures& f, const std::string& name,
                          const std::string& buf) {
  const std::string raw = raw_load(t, f, buf);
  std::string body;
  switch (t) {
    case Dtype::bool_:
      body = fmt::format("uint({}) != 0u", raw);
      break;
    case Dtype::uint8:
      body = fmt::format("uint({})", raw);
      break;
    case Dtype::int8:
    case Dtype::int16:
      body = fmt::format("int({})", raw);
      break;
    case Dtype::uint16:
      body = fmt::format("uint({})", raw);
      break;
    case Dtype::float16:
      body = fmt::format("kiln_half_to_float(uint({}))", raw);
      break;
    case Dtype::bfloat16:
      body = fmt::format("kiln_bfloat_to_float(uint({}))", raw);
      break;
    default:
      body = raw;
  }
  return fmt::format("{} {}(uint i) {{ return {}; }}\n", glsl_value_type(t), name, body);
}

// GLSL storing value `v` (of t's value type): into out0[index] natively, or as the bits a packed
// word holds.
std::string stored_bits(Dtype t, const std::string& v) {
  switch (t) {
    case Dtype::bool_:
      return fmt::format("({} ? 1u : 0u)", v);
    case Dtype::int8:
    case Dtype::int16:
      return fmt::format("uint({})", v);
    case Dtype::float16:
      return fmt::format("kiln_float_to_half({})", v);
    case Dtype::bfloat16:
      return fmt::format("kiln_float_to_bfloat({})", v);
    default:
      return v;
  }
}
std::string native_store(Dtype t, const std::string& v) {
  switch (t) {
    case Dtype::bool_:
      return fmt::format("uint8_t({} ? 1u : 0u)", v);
    case Dtype::uint8:
      return fmt::format("uint8_t({})", v);
    case Dtype::int8:
      return fmt::format("int8_t({})", v);
    case Dtype::int16:
      return fmt::format("int16_t({})", v);
    case Dtype::uint16:
      return fmt::format("uint16_t({})", v);
    case Dtype::float16:
      return fmt::format("uint16_t(kiln_float_to_half({}))", v);
    case Dtype::bfloat16:
      return fmt::format("uint16_t(kiln_float_to_bfloat({}))", v);
    default:
      return v;
  }
}

// The 4-vector of a 32-bit dtype's value type (what the vector variant loads and stores).
const char* vector_type(Dtype t) {
  switch (t) {
    case Dtype::float32:
      return "vec4";
    case Dtype::int32:
      return "ivec4";
    default:
      return "uvec4";
  }
}

std::string to(Dtype t) { return fmt::format("kiln_to_{}", dtype_name(t)); }

// The shader's head: extensions, the common GLSL, the input bindings (vectors where
// `vector_input` says so) and the output's, the index words.
std::string preamble(const ElementwiseKernel& k, const Variant& v, uint32_t meta_words,
                     const std::vector<bool>& vector_input, bool vector_out) {
  const ElementwiseFeatures& f = v.features;
  const size_t n_in = k.inputs.size();
  std::vector<Dtype> all(k.inputs);
  all.push_back(k.out);
  bool native8 = false, native16 = false;
  for (Dtype t : all) {
    native8 |= size_of(t) == 1 && f.storage8;
    native16 |= size_of(t) == 2 && f.storage16;
  }
  std::string s = "#version 450\n#extension GL_GOOGLE_include_directive : require\n";
  if (native8) s += "#extension GL_EXT_shader_8bit_storage : require\n";
  if (native16) s += "#extension GL_EXT_shader_16bit_storage : require\n";
  if (f.int64)
    s += "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n#define KILN_HAS_INT64\n";
  if (f.float64) s += "#define KILN_HAS_FLOAT64\n";
  if (v.addressed)
    s += "#extension GL_EXT_buffer_reference : require\n#extension GL_EXT_buffer_reference_uvec2 : require\n";
  s += "#include \"common/indexing.glsl\"\n#include \"common/dtype_convert.glsl\"\n"
       "#include \"common/elementwise_ops.glsl\"\n\n";
  const uint32_t per = per_invocation(k.out, f);
  if (v.addressed) {
    // Each buffer is a reference type; in<i> and out0 name its array through the address in the
    // push constants, so the code below reads the same in both forms.
    auto reference = [&](const std::string& name, const char* access, bool vector, Dtype t, size_t slot) {
      const std::string type = vector ? vector_type(t) : storage_type(t, f);
      const size_t align = vector ? 16 : (packed(t, f) ? 4 : static_cast<size_t>(size_of(t)));
      return fmt::format(
          "layout(buffer_reference, std430, buffer_reference_align = {0}) {1}buffer {2}Ref {{ {3} d[]; }};\n"
          "#define {2} {2}Ref(p.address[{4}]).d\n",
          align, access, name, type, slot);
    };
    for (size_t i = 0; i < n_in; ++i)
      s += reference(fmt::format("in{}", i), "readonly ", vector_input[i], k.inputs[i], i);
    s += reference("out0", per > 1 ? "" : "writeonly ", vector_out, k.out, n_in);
    s += fmt::format(
        "layout(push_constant) uniform Push {{ uvec2 address[{}]; uint meta[{}]; }} p;\n"
        "#define KILN_META(i) p.meta[i]\n",
        n_in + 1, meta_words);
    return s + "\n" + k.helpers + "\n";
  }
  for (size_t i = 0; i < n_in; ++i)
    s += fmt::format("layout(std430, set = 0, binding = {0}) readonly buffer In{0} {{ {1} in{0}[]; }};\n", i,
                     vector_input[i] ? vector_type(k.inputs[i]) : storage_type(k.inputs[i], f));
  s += fmt::format("layout(std430, set = 0, binding = {}) {}buffer Out {{ {} out0[]; }};\n", n_in,
                   per > 1 ? "" : "writeonly ", vector_out ? vector_type(k.out) : storage_type(k.out, f));
  if (v.meta_in_buffer) {
    s += fmt::format("layout(std430, set = 0, binding = {}) readonly buffer Meta {{ uint meta[]; }};\n",
                     n_in + 1);
    s += "#define KILN_META(i) meta[i]\n";
  } else {
    s += fmt::format(
        "layout(push_constant) uniform Push {{ uint meta[{}]; }} p;\n#define KILN_META(i) p.meta[i]\n",
        meta_words);
  }
  s += "\n" + k.helpers + "\n";
  return s;
}

// `<out value type> kiln_compute(<input value types> v0, ...)`: the conversions to the compute
// type, the chain and the result of one element.
std::string compute_function(const ElementwiseKernel& k) {
  std::string params = "uint j";  // the output element's index, which expressions may read
  for (size_t i = 0; i < k.inputs.size(); ++i)
    params += fmt::format(", {} v{}", glsl_value_type(k.inputs[i]), i);
  std::string s = fmt::format("\n{} kiln_compute({}) {{\n", glsl_value_type(k.out), params);
  for (size_t i = 0; i < k.inputs.size(); ++i)
    s += fmt::format("  const {} x{} = {}(v{});\n", glsl_value_type(k.compute), i, to(k.compute), i);
  for (size_t i = 0; i < k.steps.size(); ++i)
    s += fmt::format("  const {} t{} = {}({});\n", glsl_value_type(k.steps[i].dtype), i, to(k.steps[i].dtype),
                     k.steps[i].expr);
  s += fmt::format("  return {}({});\n}}\n", to(k.out), k.expr);
  return s;
}

// Vectors one invocation moves per pass of its loop in a large dispatch (all loads issued before
// the stores, as the vec4 copy of ../shared/vkbench does, which reaches 97% of CUDA's copy).
constexpr uint32_t kVectorsPerInvocation = 4;

// The vector variant: each invocation loads kVectorsPerInvocation vectors of every linear input
// (16 bytes each, offsets one grid apart so that a subgroup's loads are contiguous) per pass of a
// loop over the grid, or one vector and no loop in the `single` variant; computes their 4
// elements, stores whole vectors; the n % 4 last elements go to the first invocations. Scalar
// inputs are loaded once.
std::string generate_vec4(const ElementwiseKernel& k, const Variant& v, uint32_t meta_words) {
  const size_t n_in = k.inputs.size();
  std::vector<bool> vector_input(n_in);
  for (size_t i = 0; i < n_in; ++i) vector_input[i] = v.walks[i] == Walk::linear;
  std::string s = preamble(k, v, meta_words, vector_input, true);
  for (size_t i = 0; i < n_in; ++i)
    if (!vector_input[i])
      s += load_function(k.inputs[i], v.features, fmt::format("kiln_load{}", i), fmt::format("in{}", i));
  s += compute_function(k);
  const std::string kU = fmt::format("{}u", kVectorsPerInvocation);
  s += "\nvoid main() {\n  const uint n = KILN_META(0), vectors = n >> 2u, out_at = KILN_META(1) >> 2u;\n";
  if (!v.single) s += "  const uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.y * kWorkgroupSize;\n";
  s += "  const uint first = kiln_global_id();\n";
  // kiln_compute's arguments: `vector(i)` for a linear input, s<i> for a scalar one.
  auto args = [&](const std::string& j, auto vector) {
    std::string a = j;
    for (size_t i = 0; i < n_in; ++i) a += ", " + (vector_input[i] ? vector(i) : fmt::format("s{}", i));
    return a;
  };
  for (size_t i = 0; i < n_in; ++i) {
    if (vector_input[i])
      s += fmt::format("  const uint at{0} = KILN_META({1}) >> 2u;\n", i, 2 + i);
    else
      s += fmt::format("  const {1} s{0} = kiln_load{0}(KILN_META({2}));\n", i, glsl_value_type(k.inputs[i]),
                       2 + i);
  }
  // Unrolled into named values rather than arrays indexed by a loop counter (an array indexed at
  // run time may live in local memory). q0 is always in range; the others are checked.
  const uint32_t unroll = v.single ? 1 : kVectorsPerInvocation;
  if (v.single) {
    s += "  if (first < vectors) {\n    const uint q0 = first;\n";
  } else {
    s += fmt::format("  for (uint g = first; g < vectors; g += {} * stride) {{\n", kU);
    for (uint32_t u = 0; u < unroll; ++u) s += fmt::format("    const uint q{0} = g + {0}u * stride;\n", u);
  }
  for (uint32_t u = 0; u < unroll; ++u)
    for (size_t i = 0; i < n_in; ++i)
      if (vector_input[i]) {
        const std::string type = vector_type(k.inputs[i]);
        s += u == 0 ? fmt::format("    const {0} a{1}_0 = in{1}[at{1} + q0];\n", type, i)
                    : fmt::format("    const {0} a{1}_{2} = q{2} < vectors ? in{1}[at{1} + q{2}] : {0}(0);\n",
                                  type, i, u);
      }
  for (uint32_t u = 0; u < unroll; ++u) {
    s += u == 0 ? "    {\n" : fmt::format("    if (q{} < vectors) {{\n", u);
    s += fmt::format("      {} r;\n", vector_type(k.out));
    for (uint32_t c = 0; c < 4; ++c)
      s += fmt::format("      r.{} = kiln_compute({});\n", "xyzw"[c],
                       args(fmt::format("q{} * 4u + {}u", u, c),
                            [&](size_t i) { return fmt::format("a{}_{}.{}", i, u, "xyzw"[c]); }));
    s += fmt::format("      out0[out_at + q{}] = r;\n    }}\n", u);
  }
  s += "  }\n";
  s += fmt::format(
      "  if (first < (n & 3u)) out0[out_at + vectors][first] = kiln_compute({});\n}}\n",
      args("vectors * 4u + first", [](size_t i) { return fmt::format("in{0}[at{0} + vectors][first]", i); }));
  return s;
}

// The whole compute shader of one variant.
std::string generate(const ElementwiseKernel& k, const Variant& v, uint32_t meta_words) {
  if (v.vec4) return generate_vec4(k, v, meta_words);
  const ElementwiseFeatures& f = v.features;
  const size_t n_in = k.inputs.size();
  std::string s = preamble(k, v, meta_words, std::vector<bool>(n_in, false), false);
  const uint32_t per = per_invocation(k.out, f);

  for (size_t i = 0; i < n_in; ++i)
    s += load_function(k.inputs[i], f, fmt::format("kiln_load{}", i), fmt::format("in{}", i));

  s += compute_function(k);
  // One element: the inputs' positions, their values, the result.
  s += fmt::format("\n{} kiln_element(uint j) {{\n", glsl_value_type(k.out));
  const uint32_t shape_at = 2 + static_cast<uint32_t>(n_in);
  std::vector<std::string> position(n_in);
  uint32_t strides_at = shape_at + static_cast<uint32_t>(v.rank);
  for (size_t i = 0; i < n_in; ++i) {
    const std::string offset = fmt::format("int(KILN_META({}))", 2 + i);
    if (v.walks[i] == Walk::linear) position[i] = fmt::format("{} + int(j)", offset);
    if (v.walks[i] == Walk::scalar) position[i] = offset;
    if (v.walks[i] != Walk::strided) continue;
    s += fmt::format("  int pos{} = {};\n", i, offset);
    position[i] = fmt::format("pos{}", i);
  }
  if (v.rank > 0) {
    s += "  uint rest = j;\n";
    for (int d = v.rank - 1; d >= 0; --d) {
      s += fmt::format(
          "  {{\n    const uint size = KILN_META({});\n    const int c = int(rest % size);\n"
          "    rest /= size;\n",
          shape_at + d);
      uint32_t at = strides_at;
      for (size_t i = 0; i < n_in; ++i) {
        if (v.walks[i] != Walk::strided) continue;
        s += fmt::format("    pos{} += c * int(KILN_META({}));\n", i, at + d);
        at += static_cast<uint32_t>(v.rank);
      }
      s += "  }\n";
    }
  }
  std::string args = "j";
  for (size_t i = 0; i < n_in; ++i) args += fmt::format(", kiln_load{}(uint({}))", i, position[i]);
  s += fmt::format("  return kiln_compute({});\n}}\n\n", args);

  // One invocation's work, then main(): in a large dispatch it strides over the grid, each
  // invocation handling several elements (the host dispatches fewer groups); in a small one (the
  // `single` variant) each invocation handles one, without a loop.
  s += "bool kiln_invocation(uint g) {\n  const uint n = KILN_META(0);\n  const uint base = KILN_META(1);\n";
  if (per == 1) {
    s += "  if (g >= n) return false;\n";
    s += fmt::format("  out0[base + g] = {};\n  return true;\n}}\n", native_store(k.out, "kiln_element(g)"));
  } else {
    // Packed output: this invocation owns word w; elements of it outside [base, base + n) keep
    // their bytes.
    const uint32_t bits = 32 / per;
    s += fmt::format(
        "  const uint w = base / {0}u + g;\n"
        "  const int first = int(w * {0}u) - int(base);\n"
        "  if (first >= int(n)) return false;\n"
        "  uint word = 0u;\n"
        "  if (first < 0 || first + {0} > int(n)) word = out0[w];\n"
        "  for (int e = 0; e < {0}; ++e) {{\n"
        "    const int j = first + e;\n"
        "    if (j < 0 || j >= int(n)) continue;\n"
        "    word = bitfieldInsert(word, {1}, e * {2}, {2});\n"
        "  }}\n"
        "  out0[w] = word;\n  return true;\n}}\n",
        per, stored_bits(k.out, "kiln_element(uint(j))"), bits);
  }
  if (v.single)
    s += "\nvoid main() { kiln_invocation(kiln_global_id()); }\n";
  else
    s += "\nvoid main() {\n"
         "  const uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.y * kWorkgroupSize;\n"
         "  for (uint g = kiln_global_id(); kiln_invocation(g); g += stride) {}\n}\n";
  return s;
}

void check_dtype(Dtype t, const ElementwiseFeatures& f, const DeviceCaps& caps) {
  if ((t == Dtype::int64 || t == Dtype::uint64) && !f.int64)
    throw NotImplemented::of(kOp, "64-bit integers need the device feature shaderInt64", "{}: {} lacks it",
                             dtype_name(t), caps.name);
  if (t == Dtype::float64 && !f.float64)
    throw NotImplemented::of(kOp, "float64 needs the device feature shaderFloat64", "{} lacks it", caps.name);
}

// A hash of everything a compiled kernel depends on, built without allocating: looking a kernel
// up is on the path of every elementwise dispatch.
uint64_t mix(uint64_t h, uint64_t x) { return (h ^ (x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2))); }
uint64_t text_hash(std::string_view s) { return std::hash<std::string_view>{}(s); }

uint64_t kernel_hash(const ElementwiseKernel& k, const Variant& v, uint32_t meta_words) {
  uint64_t h = k.inputs.size();
  for (Dtype t : k.inputs) h = mix(h, static_cast<uint64_t>(t));
  h = mix(h, static_cast<uint64_t>(k.compute) | static_cast<uint64_t>(k.out) << 8 |
                 static_cast<uint64_t>(v.rank) << 16 | static_cast<uint64_t>(meta_words) << 32);
  for (Walk w : v.walks) h = mix(h, static_cast<uint64_t>(w));
  const ElementwiseFeatures& f = v.features;
  h = mix(h, uint64_t{f.storage8} | uint64_t{f.storage16} << 1 | uint64_t{f.int64} << 2 |
                 uint64_t{f.float64} << 3 | uint64_t{v.meta_in_buffer} << 4 | uint64_t{v.vec4} << 5 |
                 uint64_t{f.addresses} << 6 | uint64_t{v.addressed} << 7 | uint64_t{v.single} << 8);
  h = mix(h, text_hash(k.expr));
  h = mix(h, text_hash(k.helpers));
  for (const ElementwiseStep& st : k.steps)
    h = mix(mix(h, static_cast<uint64_t>(st.dtype)), text_hash(st.expr));
  return h;
}

// Kernels by that hash (entries compared in full: equal hashes of different kernels are kept
// apart); the ShaderCode belongs to glsl_compiler() and lives forever.
struct CachedKernel {
  ElementwiseKernel kernel;
  Variant variant;
  uint32_t meta_words;
  const ShaderCode* code;
};
struct KernelCache {
  std::shared_mutex mutex;  // guards map
  std::unordered_multimap<uint64_t, CachedKernel> map;
};
KernelCache& kernel_cache() {
  static KernelCache* cache = new KernelCache();  // never destroyed, as glsl_compiler()
  return *cache;
}

const ShaderCode* find_kernel(KernelCache& cache, uint64_t hash, const ElementwiseKernel& k, const Variant& v,
                              uint32_t meta_words) {
  auto [it, end] = cache.map.equal_range(hash);
  for (; it != end; ++it)
    if (it->second.meta_words == meta_words && it->second.variant == v && it->second.kernel == k)
      return it->second.code;
  return nullptr;
}

const ShaderCode& kernel_shader(Context& ctx, const ElementwiseKernel& k, const Variant& v,
                                uint32_t meta_words) {
  KernelCache& cache = kernel_cache();
  const uint64_t hash = kernel_hash(k, v, meta_words);
  {
    std::shared_lock lock(cache.mutex);
    if (const ShaderCode* code = find_kernel(cache, hash, k, v, meta_words)) return *code;
  }
  const ShaderCode& code = compile_glsl("elementwise", generate(k, v, meta_words), ctx.options().cache_dir);
  std::unique_lock lock(cache.mutex);
  if (!find_kernel(cache, hash, k, v, meta_words))
    cache.map.emplace(hash, CachedKernel{k, v, meta_words, &code});
  return code;
}

// Merges adjacent dims as collapse() (views.h) does, in place: no allocation once the vectors
// have grown.
void collapse_in_place(Shape& shape, std::span<Strides> strides) {
  size_t r = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = r > 0;
    for (size_t v = 0; v < strides.size() && merge; ++v)
      merge = strides[v][r - 1] == strides[v][d] * shape[d];
    if (merge) {
      shape[r - 1] *= shape[d];
      for (Strides& s : strides) s[r - 1] = s[d];
    } else {
      shape[r] = shape[d];
      for (Strides& s : strides) s[r] = s[d];
      ++r;
    }
  }
  shape.resize(r);
  for (Strides& s : strides) s.resize(r);
}

bool row_major(const Shape& shape, const Strides& strides) {
  int64_t expect = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (strides[d] != expect) return false;
    expect *= shape[d];
  }
  return true;
}

// Vectors record_elementwise reuses from call to call on each thread.
struct Scratch {
  std::vector<Strides> strides;
  Shape shape;
  Variant variant;
  std::vector<uint32_t> meta;
  std::vector<uint32_t> push;  // addresses and index words, for the addressed form
};
thread_local Scratch tls_scratch;
thread_local bool tls_last_addressed = false;

// Invocations from which a dispatch has each invocation handle kElementsPerInvocation elements
// (or packed words): fewer, longer-lived invocations reach more of the memory bandwidth.
constexpr uint64_t kLoopFrom = uint64_t{1} << 20;
constexpr uint64_t kElementsPerInvocation = 4;

// Whether the vector variant can run: a 32-bit output, every input linear (32-bit, read as vectors)
// or scalar (any dtype, read once), and the output's and linear inputs' offsets multiples of 4
// elements (16 bytes; buffers themselves start 256-byte aligned, memory.h).
bool vector_eligible(const ElementwiseKernel& k, const Variant& v, std::span<const GpuView> inputs,
                     const GpuView& out) {
  auto word_sized = [](Dtype t) { return t == Dtype::float32 || t == Dtype::int32 || t == Dtype::uint32; };
  if (!word_sized(k.out) || out.offset % 4 != 0 || v.meta_in_buffer) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (v.walks[i] == Walk::strided) return false;
    if (v.walks[i] == Walk::linear && (!word_sized(k.inputs[i]) || inputs[i].offset % 4 != 0)) return false;
  }
  return true;
}

uint32_t word(int64_t x) { return static_cast<uint32_t>(static_cast<int32_t>(x)); }

}  // namespace

bool last_elementwise_addressed() { return tls_last_addressed; }

std::string_view glsl_value_type(Dtype t) {
  switch (t) {
    case Dtype::bool_:
      return "bool";
    case Dtype::uint8:
    case Dtype::uint16:
    case Dtype::uint32:
      return "uint";
    case Dtype::int8:
    case Dtype::int16:
    case Dtype::int32:
      return "int";
    case Dtype::int64:
      return "int64_t";
    case Dtype::uint64:
      return "uint64_t";
    case Dtype::float16:
    case Dtype::bfloat16:
    case Dtype::float32:
      return "float";
    case Dtype::float64:
      return "double";
  }
  return "float";
}

ElementwiseFeatures ElementwiseFeatures::of(const DeviceCaps& caps) {
  return {caps.storage8, caps.storage16, caps.int64, caps.float64, caps.elementwise_addresses};
}

void record_elementwise(Recorder& r, const ElementwiseKernel& k, std::span<const GpuView> inputs,
                        const GpuView& out) {
  record_elementwise(r, k, inputs, out, ElementwiseFeatures::of(r.context().caps()));
}

void record_elementwise(Recorder& r, const ElementwiseKernel& k, std::span<const GpuView> inputs,
                        const GpuView& out, const ElementwiseFeatures& f) {
  Context& ctx = r.context();
  const DeviceCaps& caps = ctx.caps();
  if ((f.storage8 && !caps.storage8) || (f.storage16 && !caps.storage16) || (f.int64 && !caps.int64) ||
      (f.float64 && !caps.float64) || (f.addresses && !caps.buffer_device_address))
    throw ValueError::of(kOp, "features asked for that the device lacks", "{}", caps.name);
  if (inputs.size() != k.inputs.size())
    throw ValueError::of(kOp, "the kernel and the views differ in their number of inputs", "{} vs {}",
                         k.inputs.size(), inputs.size());
  if (k.expr.empty()) throw ValueError::of(kOp, "the kernel has no expression");
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_view(inputs[i], kOp);
    if (inputs[i].dtype != k.inputs[i])
      throw ValueError::of(kOp, "an input's dtype differs from the kernel's", "input {}: {} vs {}", i,
                           dtype_name(inputs[i].dtype), dtype_name(k.inputs[i]));
    if (inputs[i].shape.size() > out.shape.size())
      throw ShapeError::of(kOp, "an input has more dims than the output", "input {}: {} -> {}", i,
                           inputs[i].shape, out.shape);
    check_dtype(k.inputs[i], f, caps);
  }
  check_view(out, kOp);
  check_contiguous_out(out, out.shape, kOp);
  if (out.dtype != k.out)
    throw ValueError::of(kOp, "the output's dtype differs from the kernel's", "{} vs {}",
                         dtype_name(out.dtype), dtype_name(k.out));
  check_dtype(k.out, f, caps);
  check_dtype(k.compute, f, caps);
  for (const ElementwiseStep& st : k.steps) check_dtype(st.dtype, f, caps);

  // Every view's strides over out's shape: broadcast dims get stride 0.
  const size_t rank = out.shape.size(), n_in = inputs.size();
  Scratch& s = tls_scratch;
  s.strides.resize(n_in + 1);
  for (size_t i = 0; i < n_in; ++i) {
    const GpuView& in = inputs[i];
    Strides& st = s.strides[i];
    st.assign(rank, 0);
    const size_t lead = rank - in.shape.size();
    for (size_t d = 0; d < in.shape.size(); ++d) {
      if (in.shape[d] == out.shape[lead + d]) {
        st[lead + d] = in.strides[d];
      } else if (in.shape[d] != 1) {
        throw ShapeError::of(kOp, "an input does not broadcast to the output", "input {}: {} -> {}", i,
                             in.shape, out.shape);
      }
    }
  }
  s.strides[n_in].assign(out.strides.begin(), out.strides.end());
  const int64_t n = numel(out.shape);
  tls_last_addressed = false;
  if (n == 0) return;
  Shape& shape = s.shape;
  shape.assign(out.shape.begin(), out.shape.end());
  collapse_in_place(shape, s.strides);
  check_rank(shape, kOp);

  Variant& v = s.variant;
  v.rank = 0;
  v.meta_in_buffer = false;
  v.addressed = false;
  v.features = f;
  v.walks.clear();
  for (size_t i = 0; i < n_in; ++i) {
    if (row_major(shape, s.strides[i]))
      v.walks.push_back(Walk::linear);
    else if (std::ranges::all_of(s.strides[i], [](int64_t st) { return st == 0; }))
      v.walks.push_back(Walk::scalar);
    else
      v.walks.push_back(Walk::strided);
  }
  const size_t n_strided = std::ranges::count(v.walks, Walk::strided);
  if (n_strided > 0) v.rank = static_cast<int>(shape.size());

  std::vector<uint32_t>& meta = s.meta;
  meta.assign({static_cast<uint32_t>(n), static_cast<uint32_t>(out.offset)});
  for (const GpuView& in : inputs) meta.push_back(static_cast<uint32_t>(in.offset));
  if (n_strided > 0) {
    for (int64_t d : shape) meta.push_back(static_cast<uint32_t>(d));
    for (size_t i = 0; i < n_in; ++i)
      if (v.walks[i] == Walk::strided)
        for (int64_t st : s.strides[i]) meta.push_back(word(st));
  }
  v.meta_in_buffer = meta.size() > kPushWords;
  v.vec4 = vector_eligible(k, v, inputs, out);
  // The elements (vector variant: 16-byte vectors; packed outputs: 32-bit words) the invocations
  // cover; from kLoopFrom of them each invocation handles several in a loop over the grid.
  const uint32_t per = per_invocation(k.out, f);
  const uint64_t first_word = static_cast<uint64_t>(out.offset) / per;
  const uint64_t invocations = v.vec4 ? static_cast<uint64_t>(n) / 4
                                      : static_cast<uint64_t>(out.offset + n - 1) / per - first_word + 1;
  v.single = invocations < (v.vec4 ? kLoopFrom / 4 : kLoopFrom);
  // Addresses when they and the index words fit the push constants and every buffer has one.
  v.addressed = f.addresses && 2 * (n_in + 1) + meta.size() <= kPushWords && out.buffer->address() != 0 &&
                std::ranges::all_of(inputs, [](const GpuView& in) { return in.buffer->address() != 0; });
  v.features.addresses = v.addressed;  // one cache entry for a descriptor form, whatever was allowed
  const size_t bindings = n_in + 1 + (v.meta_in_buffer ? 1 : 0);
  if (bindings > Context::kMaxBindings)
    throw NotImplemented::of(kOp, "too many inputs for one kernel", "{} inputs need {} bindings, at most {}",
                             n_in, bindings, Context::kMaxBindings);
  const uint32_t meta_words = static_cast<uint32_t>(meta.size());
  const ShaderCode& shader = kernel_shader(ctx, k, v, meta_words);
  tls_last_addressed = v.addressed;

  std::array<Binding, Context::kMaxBindings> binds;
  for (size_t i = 0; i < n_in; ++i) binds[i] = {inputs[i].buffer, Access::read};
  binds[n_in] = {out.buffer, per > 1 ? Access::read_write : Access::write};
  std::span<const std::byte> push = std::as_bytes(std::span<const uint32_t>(meta));
  std::span<const Binding> bound(binds.data(), bindings), addressed;
  if (v.addressed) {
    // The push constants: each buffer's address (inputs, then the output), then the index words.
    std::vector<uint32_t>& words = s.push;
    words.clear();
    for (size_t i = 0; i <= n_in; ++i) {
      const uint64_t a = binds[i].buffer->address();
      words.insert(words.end(), {static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32)});
    }
    words.insert(words.end(), meta.begin(), meta.end());
    push = std::as_bytes(std::span<const uint32_t>(words));
    addressed = bound;
    bound = {};
  }
  if (v.meta_in_buffer) {
    const size_t bytes = meta.size() * sizeof(uint32_t);
    BufferPtr b = ctx.allocator().allocate(bytes);
    if (b->mapped()) {
      std::memcpy(b->mapped(), meta.data(), bytes);
    } else {
      BufferPtr staging = ctx.staging_allocator().allocate(bytes);
      std::memcpy(staging->mapped(), meta.data(), bytes);
      r.copy(staging, 0, b, 0, bytes);
    }
    binds[n_in + 1] = {std::move(b), Access::read};
    push = {};
  }
  const uint32_t wg = workgroup_size(ctx);
  const uint32_t spec[] = {wg};
  const uint64_t per_group = wg * (v.single ? 1 : v.vec4 ? kVectorsPerInvocation : kElementsPerInvocation);
  r.dispatch(shader, spec, bound, push,
             Groups::linear(std::max<uint64_t>((invocations + per_group - 1) / per_group, 1), ctx),
             addressed);
}

}  // namespace kiln::detail::vk
