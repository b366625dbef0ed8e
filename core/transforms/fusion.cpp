// Elementwise fusion for compile: a chain of elementwise steps becomes one FusedElementwise
// primitive that evaluates the chain block by block (a few thousand elements, in cache), so the
// chain reads its inputs and writes its output once. Primitives are asked for a BlockKernel; no
// op is named here.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/cpu/math.h"
#include "kiln/core/custom_transforms.h"
#include "kiln/core/ops/elementwise_impl.h"
#include "kiln/core/transforms.h"
#include "kiln/core/transforms/compiled_graph.h"

namespace kiln::detail {
namespace {

// ---------------------------------------------------------------- register tiles

// Runs of float32 members with a TileOp are evaluated tile by tile: a tile goes through the whole
// run in vector registers, and only results read later (by another member, or twice) are stored.
// Per-member block loops load and store every intermediate, and those L1 stores (~3 cycles per
// 16 floats) were most of a fused chain's time. A tile is 8 AVX-512 vectors, independent chains
// the core overlaps. Only with AVX-512: with 16 AVX2 registers the tile spills and runs slower
// than the block loops, which such machines keep.
constexpr int kTileVecs = 8;
constexpr int64_t kMaxTile = kTileVecs * 16;  // runs take blocks of whole kMaxTile tiles

/// Where a tile step's operand or result lives: element (start + i) of a global array, element i
/// of a block buffer, or (for a scalar) a splat of kMaxTile copies. `block` and `tile` are 0 or
/// 1: the address for the tile at element i of the block at `start` is p + block * start + tile * i.
struct TileRef {
  const float* p = nullptr;
  int64_t block = 0, tile = 0;
};

struct TileStep {
  TileOp op = TileOp::none;
  bool a_acc = false, b_acc = false;  // operand is the previous step's result
  TileRef a, b;
  float* store = nullptr;  // where the result goes (block * start + i); null: only the next step reads it
  int64_t store_block = 0;
};

// Named vector locals, not arrays: GCC keeps those in registers.
#define KILN_EACH_VEC(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
static_assert(kTileVecs == 8);

// f on every lane of a tile, through memory: exp and tanh are scalar code the loop vectorizes.
template <class V, class F>
[[gnu::always_inline]] inline void map_lanes(V& v0, V& v1, V& v2, V& v3, V& v4, V& v5, V& v6, V& v7, F f) {
  constexpr int64_t kLanes = sizeof(V) / sizeof(float);
  float lanes[kTileVecs * kLanes];
#define KILN_SPILL(j) std::memcpy(lanes + (j)*kLanes, &v##j, sizeof(V));
  KILN_EACH_VEC(KILN_SPILL)
#undef KILN_SPILL
  for (float& x : lanes) x = f(x);
#define KILN_FILL(j) std::memcpy(&v##j, lanes + (j)*kLanes, sizeof(V));
  KILN_EACH_VEC(KILN_FILL)
#undef KILN_FILL
}

template <class V>
[[gnu::always_inline]] inline void run_tiles_with(const TileStep* steps, int n_steps, int64_t start,
                                                  int64_t n) {
  constexpr int64_t kLanes = sizeof(V) / sizeof(float), kTile = kTileVecs * kLanes;
  for (int64_t i = 0; i < n; i += kTile) {
#define KILN_DECLARE(j) V acc##j = {}, a##j = {}, b##j = {};
    KILN_EACH_VEC(KILN_DECLARE)
#undef KILN_DECLARE
    for (int k = 0; k < n_steps; ++k) {
      const TileStep& s = steps[k];
      if (s.a_acc) {
#define KILN_COPY(j) a##j = acc##j;
        KILN_EACH_VEC(KILN_COPY)
#undef KILN_COPY
      } else {
        const float* p = s.a.p + s.a.block * start + s.a.tile * i;
#define KILN_LOAD(j) std::memcpy(&a##j, p + (j)*kLanes, sizeof(V));
        KILN_EACH_VEC(KILN_LOAD)
#undef KILN_LOAD
      }
      if (s.op <= TileOp::divide) {  // binary
        if (s.b_acc) {
#define KILN_COPY(j) b##j = acc##j;
          KILN_EACH_VEC(KILN_COPY)
#undef KILN_COPY
        } else {
          const float* p = s.b.p + s.b.block * start + s.b.tile * i;
#define KILN_LOAD(j) std::memcpy(&b##j, p + (j)*kLanes, sizeof(V));
          KILN_EACH_VEC(KILN_LOAD)
#undef KILN_LOAD
        }
      }
      switch (s.op) {
#define KILN_ADD(j) acc##j = a##j + b##j;
#define KILN_SUB(j) acc##j = a##j - b##j;
#define KILN_MUL(j) acc##j = a##j * b##j;
#define KILN_DIV(j) acc##j = a##j / b##j;
#define KILN_NEG(j) acc##j = -a##j;
#define KILN_MOVE(j) acc##j = a##j;
        case TileOp::add:
          KILN_EACH_VEC(KILN_ADD)
          break;
        case TileOp::subtract:
          KILN_EACH_VEC(KILN_SUB)
          break;
        case TileOp::multiply:
          KILN_EACH_VEC(KILN_MUL)
          break;
        case TileOp::divide:
          KILN_EACH_VEC(KILN_DIV)
          break;
        case TileOp::negative:
          KILN_EACH_VEC(KILN_NEG)
          break;
        case TileOp::exp:
          map_lanes(a0, a1, a2, a3, a4, a5, a6, a7, [](float x) { return exp_f32(x); });
          KILN_EACH_VEC(KILN_MOVE)
          break;
        case TileOp::tanh:
          map_lanes(a0, a1, a2, a3, a4, a5, a6, a7, [](float x) { return tanh_f32(x); });
          KILN_EACH_VEC(KILN_MOVE)
          break;
        case TileOp::none:
          break;
#undef KILN_ADD
#undef KILN_SUB
#undef KILN_MUL
#undef KILN_DIV
#undef KILN_NEG
#undef KILN_MOVE
      }
      if (s.store) {
        float* p = s.store + s.store_block * start + i;
#define KILN_STORE(j) std::memcpy(p + (j)*kLanes, &acc##j, sizeof(V));
        KILN_EACH_VEC(KILN_STORE)
#undef KILN_STORE
      }
    }
  }
}
#undef KILN_EACH_VEC

using Vec8 = float __attribute__((vector_size(32)));
using Vec16 = float __attribute__((vector_size(64)));

// elementwise_impl.h says why not under sanitizers or clang; there, and off x86, the tiles use
// GCC's generic 8-float vectors. run_tiles runs `steps` over the n elements (whole kMaxTile
// tiles) of the block at `start`; tiles_pay says whether that beats the per-member block loops.
#if defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
__attribute__((target("arch=x86-64-v4"))) void run_tiles(const TileStep* steps, int n_steps, int64_t start,
                                                         int64_t n) {
  run_tiles_with<Vec16>(steps, n_steps, start, n);
}
bool tiles_pay() {
  static const bool avx512 = __builtin_cpu_supports("x86-64-v4");
  return avx512;
}
#else
void run_tiles(const TileStep* steps, int n_steps, int64_t start, int64_t n) {
  run_tiles_with<Vec8>(steps, n_steps, start, n);
}
bool tiles_pay() { return true; }
#endif

// One member of a fused chain: its primitive and where its inputs come from (slots below n_ext
// are the fused primitive's inputs; slot n_ext + k is member k's result).
struct Member {
  std::shared_ptr<const Primitive> primitive;
  const BlockKernel* kernel;
  std::vector<int> slots;
  Dtype in_dtype, out_dtype;
  TileOp tile_op() const {
    return in_dtype == float32 && out_dtype == float32 ? kernel->tile_op() : TileOp::none;
  }
};

constexpr int64_t kBlock = 1024;
// Inputs one generated GPU kernel binds (with its output; 12 bindings, Context::kMaxBindings).
constexpr int kMaxGpuChainInputs = 11;

class FusedElementwise final : public Primitive {
 public:
  FusedElementwise(Stream s, std::vector<Member> members, int n_ext)
      : Primitive(s), members_(std::move(members)), n_ext_(n_ext) {
    // Block buffers by liveness: a member's result buffer returns to the pool after its last
    // reader, so a chain cycles through a few L1-resident buffers instead of one per member (with
    // one each, stores spilled to L2 and dominated the fused loop). A result never shares a buffer
    // with its own inputs, so every block loop runs on disjoint arrays.
    const int n = static_cast<int>(members_.size());
    std::vector<int> last_use(n, -1);
    for (int m = 0; m < n; ++m)
      for (int slot : members_[m].slots)
        if (slot >= n_ext_) last_use[slot - n_ext_] = m;
    std::vector<int> free;
    buffer_of_.assign(n, -1);
    for (int m = 0; m + 1 < n; ++m) {  // the last member writes the output itself
      if (free.empty()) {
        buffer_of_[m] = n_buffers_++;
      } else {
        buffer_of_[m] = free.back();
        free.pop_back();
      }
      for (int slot : members_[m].slots)
        if (slot >= n_ext_ && last_use[slot - n_ext_] == m) free.push_back(buffer_of_[slot - n_ext_]);
    }
    // Tile runs: maximal runs of members with a TileOp. A member's result stays in registers when
    // its one use is by the next member of its run; every other result is stored to its buffer.
    std::vector<int> uses(n, 0);
    for (const Member& mem : members_)
      for (int slot : mem.slots)
        if (slot >= n_ext_) ++uses[slot - n_ext_];
    run_at_.assign(n, -1);
    in_registers_.assign(n, false);
    for (int m = 0; m < n;) {
      int e = m;
      while (e < n && members_[e].tile_op() != TileOp::none) ++e;
      if (e == m) {
        ++m;
        continue;
      }
      run_at_[m] = static_cast<int>(runs_.size());
      runs_.push_back({m, e});
      for (int r = m; r + 1 < e; ++r) {
        const auto& next = members_[r + 1].slots;
        in_registers_[r] = uses[r] == 1 && std::find(next.begin(), next.end(), n_ext_ + r) != next.end();
      }
      m = e;
    }
  }
  const char* name() const override { return "FusedElementwise"; }
  uint32_t traits() const override { return static_cast<uint32_t>(Trait::elementwise); }
  void print(std::ostream& os) const override {
    os << "FusedElementwise(";
    for (size_t i = 0; i < members_.size(); ++i) {
      if (i) os << ", ";
      members_[i].primitive->print(os);
    }
    os << ")";
  }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    std::vector<Shape> shapes;
    for (const Array& a : in) shapes.push_back(a.shape());
    return {broadcast_shapes("compile", shapes)};
  }

  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    Array& o = out[0];
    o.allocate();
    const int64_t n = o.size();
    // Inputs as dense blocks: full-size dense ones are read in place, scalars are splatted per
    // block, anything else (broadcast or strided) is made dense once.
    std::vector<Array> dense;
    std::vector<const char*> base(n_ext_);
    std::vector<bool> scalar(n_ext_);
    for (int i = 0; i < n_ext_; ++i) {
      const Array& a = in[i];
      scalar[i] = a.size() == 1;
      if (scalar[i] || (a.row_contiguous() && a.size() == n)) {
        base[i] = static_cast<const char*>(a.raw_data());
      } else {
        Array d = Array::empty_available(o.shape(), a.dtype());
        copy_strided(a, d);
        base[i] = static_cast<const char*>(d.raw_data());
        dense.push_back(std::move(d));
      }
    }
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    parallel_for(blocks, 8, [&](int64_t b0, int64_t b1) {
      // Per task, one arena of block buffers (8 bytes per element covers every dtype), staggered
      // by 64 bytes so loads and stores at equal offsets of two buffers do not alias modulo 4 KiB.
      constexpr int64_t kStride = kBlock + 8;
      std::vector<uint64_t> arena(static_cast<size_t>(n_buffers_ * kStride));
      auto buffer = [&](int m) { return reinterpret_cast<float*>(arena.data() + buffer_of_[m] * kStride); };
      // The tile steps of each run; float32 scalars are splatted to a tile once per task.
      std::vector<float> splats(static_cast<size_t>(n_ext_ * kMaxTile));
      for (int i = 0; i < n_ext_; ++i)
        if (scalar[i] && in[i].dtype() == float32)
          std::fill_n(splats.begin() + i * kMaxTile, kMaxTile, *reinterpret_cast<const float*>(base[i]));
      std::vector<std::vector<TileStep>> run_steps;
      for (const auto& [first, end] : runs_) {
        std::vector<TileStep>& steps = run_steps.emplace_back();
        for (int m = first; m < end; ++m) {
          TileStep st;
          st.op = members_[m].tile_op();
          for (size_t k = 0; k < members_[m].slots.size(); ++k) {
            const int slot = members_[m].slots[k];
            bool& acc = k == 0 ? st.a_acc : st.b_acc;
            TileRef& ref = k == 0 ? st.a : st.b;
            if (slot >= n_ext_ && slot - n_ext_ == m - 1 && in_registers_[m - 1])
              acc = true;
            else if (slot >= n_ext_)
              ref = {buffer(slot - n_ext_), 0, 1};
            else if (scalar[slot])
              ref = {splats.data() + slot * kMaxTile, 0, 0};
            else
              ref = {reinterpret_cast<const float*>(base[slot]), 1, 1};
          }
          if (m + 1 == static_cast<int>(members_.size())) {
            st.store = static_cast<float*>(o.raw_data());
            st.store_block = 1;
          } else if (!in_registers_[m]) {
            st.store = buffer(m);
          }
          steps.push_back(st);
        }
      }
      const bool use_tiles = tiles_pay();
      std::vector<const void*> args;
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t start = b * kBlock, len = std::min(kBlock, n - start);
        const bool tiled = use_tiles && len % kMaxTile == 0;
        for (size_t m = 0; m < members_.size(); ++m) {
          if (tiled && run_at_[m] >= 0) {
            const auto& steps = run_steps[run_at_[m]];
            run_tiles(steps.data(), static_cast<int>(steps.size()), start, len);
            m += steps.size() - 1;
            continue;
          }
          const Member& mem = members_[m];
          args.clear();
          uint32_t scalars = 0;
          for (int slot : mem.slots) {
            if (slot >= n_ext_) {
              args.push_back(arena.data() + buffer_of_[slot - n_ext_] * kStride);
            } else if (scalar[slot]) {
              scalars |= 1u << args.size();
              args.push_back(base[slot]);
            } else {
              args.push_back(base[slot] + start * in[slot].itemsize());
            }
          }
          void* dst = m + 1 == members_.size() ? static_cast<char*>(o.raw_data()) + start * o.itemsize()
                                               : static_cast<void*>(arena.data() + buffer_of_[m] * kStride);
          mem.kernel->eval_block(args, scalars, mem.in_dtype, dst, len);
        }
      }
    });
  }

  // One generated kernel for the whole chain: each member's GLSL becomes a macro over its
  // operands, and its result a temporary in the member's dtype (as the CPU's block buffers hold
  // it). A chain with more inputs than one kernel binds, or a member without GLSL, runs member by
  // member through each primitive's own kernel.
  void eval_gpu(std::span<const Array> in, std::span<Array> out) const override {
    std::string helpers;
    std::vector<gpu::ChainStep> steps;
    bool fused = n_ext_ <= kMaxGpuChainInputs;
    for (size_t m = 0; m < members_.size() && fused; ++m) {
      const Member& mem = members_[m];
      const char* glsl = mem.kernel->glsl();
      fused = glsl != nullptr;
      if (!fused) break;
      std::string params, args;
      for (size_t k = 0; k < mem.slots.size(); ++k) {
        const int slot = mem.slots[k];
        const bool condition = mem.slots.size() == 3 && k == 0;  // a select's bool first operand
        params += fmt::format("{}x{}", k ? ", " : "", k);
        args += fmt::format("{}kiln_to_{}({}{})", k ? ", " : "",
                            condition ? "bool" : dtype_name(gpu_compute_dtype(mem.in_dtype)),
                            slot < n_ext_ ? "v" : "t", slot < n_ext_ ? slot : slot - n_ext_);
      }
      helpers += fmt::format("#define KILN_MEMBER{}({}) ({})\n", m, params, glsl);
      steps.push_back({mem.out_dtype, fmt::format("KILN_MEMBER{}({})", m, args)});
    }
    if (fused) return gpu::elementwise_chain(steps, helpers, in, out[0]);
    std::vector<Array> values(in.begin(), in.end());
    for (size_t m = 0; m < members_.size(); ++m) {
      const Member& mem = members_[m];
      std::vector<Array> args;
      for (int slot : mem.slots) args.push_back(values[static_cast<size_t>(slot)]);
      if (m + 1 == members_.size()) return mem.primitive->eval_gpu(args, out);
      Array r = Array::make(mem.primitive->output_shapes(args)[0], mem.out_dtype, mem.primitive, args);
      mem.primitive->eval_gpu(args, {&r, 1});
      values.push_back(std::move(r));
    }
  }

  std::vector<Array> vjp(const VjpArgs& a) const override { return vjp_of_function(unfused(), a); }
  std::vector<Array> jvp(const JvpArgs& a) const override { return jvp_of_function(unfused(), a); }
  VmapResult vmap(const VmapArgs& a) const override {
    std::vector<int> axes(a.axes.begin(), a.axes.end());
    return {kiln::vmap(unfused(), axes, {0})({a.inputs.begin(), a.inputs.end()}), {0}};
  }

 private:
  // The chain as ordinary primitives: what the rules transform.
  ArrayFn unfused() const {
    return [this](const std::vector<Array>& inputs) {
      std::vector<Array> values = inputs;
      for (const Member& m : members_) {
        std::vector<Array> args;
        for (int slot : m.slots) args.push_back(values[slot]);
        Shape shape = m.primitive->output_shapes(args)[0];
        values.push_back(Array::make(std::move(shape), m.out_dtype, m.primitive, std::move(args)));
      }
      return std::vector<Array>{values.back()};
    };
  }
  std::vector<Member> members_;
  int n_ext_;
  std::vector<int> buffer_of_;  // block buffer of each member's result
  int n_buffers_ = 0;
  std::vector<std::pair<int, int>> runs_;  // tile runs, [first, end) members
  std::vector<int> run_at_;                // the run starting at each member, or -1
  std::vector<bool> in_registers_;         // a result only the next tile step reads
};

const BlockKernel* block_kernel(const Step& s) {
  if (s.shapes.size() != 1 || !s.primitive->has(Trait::elementwise)) return nullptr;
  return dynamic_cast<const BlockKernel*>(s.primitive.get());
}

}  // namespace

CompiledGraph fuse_elementwise(const CompiledGraph& g) {
  const int n = static_cast<int>(g.steps.size());
  std::vector<std::vector<int>> consumers(n);
  std::vector<bool> is_output(n, false);
  for (int k = 0; k < n; ++k)
    for (const Ref& r : g.steps[k].inputs)
      if (r.kind == Ref::Kind::step) consumers[r.index].push_back(k);
  for (const Ref& r : g.outputs)
    if (r.kind == Ref::Kind::step) is_output[r.index] = true;

  // Steps in reverse order, so every consumer of a step is placed before the step: an elementwise
  // step joins its consumers' group when all of them are in that one group, it is not an output,
  // and it has the group's shape. A value used several times inside a chain (x in x*x*x + x) thus
  // stays in a block buffer instead of splitting the chain. Otherwise it roots a new group.
  std::vector<int> group_of(n, -1);
  std::vector<std::vector<int>> groups;
  std::vector<Shape> group_shape;
  std::vector<Device> group_device;  // a group runs where its root does: no member from elsewhere
  for (int k = n - 1; k >= 0; --k) {
    if (!block_kernel(g.steps[k])) continue;
    int joined = -1;
    if (!is_output[k] && !consumers[k].empty()) {
      joined = group_of[consumers[k][0]];
      for (int c : consumers[k])
        if (group_of[c] != joined) joined = -1;
      if (joined >= 0 && (group_shape[joined] != g.steps[k].shapes[0] ||
                          group_device[joined] != g.steps[k].primitive->device()))
        joined = -1;
    }
    if (joined < 0) {
      joined = static_cast<int>(groups.size());
      groups.emplace_back();
      group_shape.push_back(g.steps[k].shapes[0]);
      group_device.push_back(g.steps[k].primitive->device());
    }
    group_of[k] = joined;
    groups[joined].push_back(k);
  }
  // A group of one step stays as it is; members go in step order (the root last).
  for (auto& members : groups) {
    if (members.size() < 2) {
      for (int m : members) group_of[m] = -1;
      continue;
    }
    std::reverse(members.begin(), members.end());
  }

  // Rebuild: unfused steps are copied, each group becomes one step at its root's position.
  CompiledGraph out;
  out.input_dtypes = g.input_dtypes;
  out.input_shapes = g.input_shapes;
  out.keys = g.keys;
  out.constants = g.constants;
  std::vector<int> new_index(n, -1);
  auto remap = [&](Ref r) {
    if (r.kind == Ref::Kind::step) r.index = new_index[r.index];
    return r;
  };
  for (int k = 0; k < n; ++k) {
    const int gi = group_of[k];
    if (gi < 0) {
      Step s = g.steps[k];
      for (Ref& r : s.inputs) r = remap(r);
      new_index[k] = static_cast<int>(out.steps.size());
      out.steps.push_back(std::move(s));
      continue;
    }
    const auto& members = groups[gi];
    if (k != members.back()) continue;  // the root (last in step order) emits the group
    std::vector<Ref> ext;
    std::unordered_map<int, int> slot_of_member;
    std::vector<Member> program;
    for (int m : members) {
      const Step& s = g.steps[m];
      Member mem{s.primitive, block_kernel(s), {}, s.dtypes[0], s.dtypes[0]};
      for (const Ref& r : s.inputs) {
        if (r.kind == Ref::Kind::step && group_of[r.index] == gi) {
          mem.slots.push_back(-1 - slot_of_member.at(r.index));  // resolved below
          continue;
        }
        const Ref rr = remap(r);
        auto it = std::find(ext.begin(), ext.end(), rr);
        if (it == ext.end()) {
          ext.push_back(rr);
          it = ext.end() - 1;
        }
        mem.slots.push_back(static_cast<int>(it - ext.begin()));
      }
      // The dtype a kernel computes in: its input's, or for a select (bool condition first), the values'.
      const Ref& typed = s.inputs.size() == 3 ? s.inputs[1] : s.inputs[0];
      if (typed.kind == Ref::Kind::step)
        mem.in_dtype = g.steps[typed.index].dtypes[typed.output];
      else if (typed.kind == Ref::Kind::constant)
        mem.in_dtype = g.constants[typed.index].dtype();
      else
        mem.in_dtype = g.input_dtypes[typed.index];
      slot_of_member[m] = static_cast<int>(program.size());
      program.push_back(std::move(mem));
    }
    const int n_ext = static_cast<int>(ext.size());
    for (Member& mem : program)
      for (int& slot : mem.slots)
        if (slot < 0) slot = n_ext + (-1 - slot);
    const Step& root = g.steps[k];
    new_index[k] = static_cast<int>(out.steps.size());
    out.steps.push_back(
        {std::make_shared<FusedElementwise>(root.primitive->stream(), std::move(program), n_ext),
         std::move(ext), root.shapes, root.dtypes});
  }
  for (const Ref& r : g.outputs) out.outputs.push_back(remap(r));
  return out;
}

}  // namespace kiln::detail
