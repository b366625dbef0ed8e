// compile: trace on placeholders, simplify (common subexpressions, duplicate scalar constants),
// fuse elementwise chains, cache by input signature, and replay.
#include "kiln/core/compile.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/transforms/capture.h"
#include "kiln/core/transforms/compiled_graph.h"
#include "kiln/core/transforms/trace.h"
#include "kiln/core/vulkan/gpu.h"

namespace kiln {
namespace detail {
namespace {

// A traced input: it has a shape and dtype but no values, so a function that reads its inputs'
// values while being compiled fails clearly instead of baking one call's values into the graph.
class CompileInput final : public PrimitiveWithParams<CompileInput> {
 public:
  using PrimitiveWithParams::PrimitiveWithParams;
  const char* name() const override { return "CompileInput"; }
  auto params() const { return std::tuple<>(); }
  void eval_cpu(std::span<const Array>, std::span<Array>) const override { throw read_while_tracing(); }
  void eval_gpu(std::span<const Array>, std::span<Array>) const override { throw read_while_tracing(); }

 private:
  static ValueError read_while_tracing() {
    return ValueError::of("compile",
                          "a compiled function read the values of its inputs while being traced (item, data, "
                          "eval, printing); compile functions whose graph does not depend on input values");
  }
};

struct Signature {
  std::vector<Shape> shapes;  // ranks only (sizes zeroed) when shapeless
  std::vector<Dtype> dtypes;
  bool operator==(const Signature&) const = default;
};

Signature signature_of(const std::vector<Array>& inputs, bool shapeless) {
  Signature s;
  for (const Array& a : inputs) {
    if (!a.valid()) throw ValueError::of("compile", "an input is an empty (default-constructed) array");
    s.shapes.push_back(shapeless ? Shape(a.ndim(), 0) : a.shape());
    s.dtypes.push_back(a.dtype());
  }
  return s;
}

bool same_scalar_constant(const Array& a, const Array& b) {
  if (a.ndim() != 0 || b.ndim() != 0 || a.dtype() != b.dtype() || !a.is_available() || !b.is_available())
    return false;
  return std::memcmp(a.raw_data(), b.raw_data(), a.itemsize()) == 0;
}

// Traces fn and builds its simplified graph.
CompiledGraph trace(const ArrayFn& fn, const std::vector<Array>& inputs) {
  TraceScope scope;
  std::vector<Array> placeholders;
  std::unordered_map<const ArrayNode*, Ref> ref_of;
  std::unordered_set<const ArrayNode*> stop;
  CompiledGraph g;
  for (size_t i = 0; i < inputs.size(); ++i) {
    placeholders.push_back(
        Array::make(inputs[i].shape(), inputs[i].dtype(), std::make_shared<CompileInput>(to_stream({})), {}));
    ref_of.emplace(&placeholders.back().node(), Ref{Ref::Kind::input, static_cast<int>(i)});
    stop.insert(&placeholders.back().node());
    g.input_dtypes.push_back(inputs[i].dtype());
  }
  const std::vector<Array> outputs = fn(placeholders);

  const std::vector<TapeEntry> tape = build_tape(outputs, stop);
  std::unordered_set<const ArrayNode*> depends(stop.begin(), stop.end());
  for (const TapeEntry& e : tape)
    for (const Array& in : e.inputs)
      if (depends.count(&in.node())) {
        depends.insert(&e.array.node());
        break;
      }
  // A value that does not depend on the inputs is a constant of the graph (captured weights,
  // scalars); equal scalar constants share one slot.
  auto constant_ref = [&](const Array& a) {
    if (auto it = ref_of.find(&a.node()); it != ref_of.end()) return it->second;
    for (size_t c = 0; c < g.constants.size(); ++c)
      if (same_scalar_constant(g.constants[c], a)) return Ref{Ref::Kind::constant, static_cast<int>(c)};
    g.constants.push_back(a);
    const Ref r{Ref::Kind::constant, static_cast<int>(g.constants.size() - 1)};
    ref_of.emplace(&a.node(), r);
    return r;
  };
  auto ref = [&](const Array& a) {
    return depends.count(&a.node()) ? ref_of.at(&a.node()) : constant_ref(a);
  };

  for (const TapeEntry& e : tape) {
    if (!depends.count(&e.array.node()) || ref_of.count(&e.array.node())) continue;
    Step s{e.primitive, {}, {}, {}};
    for (const Array& in : e.inputs) s.inputs.push_back(ref(in));
    const std::vector<Array> outs = e.array.node().group ? e.array.outputs() : std::vector<Array>{e.array};
    for (const Array& o : outs) {
      s.shapes.push_back(o.shape());
      s.dtypes.push_back(o.dtype());
    }
    // Common subexpression: an equivalent primitive on the same inputs already computed this.
    int same = -1;
    if (!e.primitive->has(Trait::side_effect))
      for (size_t k = 0; k < g.steps.size() && same < 0; ++k) {
        const Step& t = g.steps[k];
        if (t.inputs == s.inputs && t.shapes == s.shapes && t.dtypes == s.dtypes &&
            (t.primitive == s.primitive || t.primitive->is_equivalent(*s.primitive)))
          same = static_cast<int>(k);
      }
    const int index = same >= 0 ? same : static_cast<int>(g.steps.size());
    for (size_t j = 0; j < outs.size(); ++j)
      ref_of.emplace(&outs[j].node(), Ref{Ref::Kind::step, index, static_cast<int>(j)});
    if (same < 0) g.steps.push_back(std::move(s));
  }
  for (const Array& o : outputs) g.outputs.push_back(ref(o));
  return g;
}

// Structural equality of two traced graphs (for checking that a shapeless graph serves new shapes).
bool same_structure(const CompiledGraph& a, const CompiledGraph& b) {
  if (a.steps.size() != b.steps.size() || a.outputs != b.outputs || a.constants.size() != b.constants.size())
    return false;
  for (size_t k = 0; k < a.steps.size(); ++k) {
    const Step &s = a.steps[k], &t = b.steps[k];
    if (s.inputs != t.inputs || s.dtypes != t.dtypes || !s.primitive->is_equivalent(*t.primitive))
      return false;
  }
  for (size_t c = 0; c < a.constants.size(); ++c)
    if (a.constants[c].id() != b.constants[c].id() && !same_scalar_constant(a.constants[c], b.constants[c]))
      return false;
  return true;
}

}  // namespace

std::vector<Array> replay(const CompiledGraph& g, const std::vector<Array>& inputs, bool shapeless) {
  std::vector<std::vector<Array>> values(g.steps.size());
  auto resolve = [&](const Ref& r) -> const Array& {
    switch (r.kind) {
      case Ref::Kind::input:
        return inputs[r.index];
      case Ref::Kind::constant:
        return g.constants[r.index];
      case Ref::Kind::step:
        break;
    }
    return values[r.index][r.output];
  };
  for (size_t k = 0; k < g.steps.size(); ++k) {
    const Step& s = g.steps[k];
    std::vector<Array> args;
    args.reserve(s.inputs.size());
    for (const Ref& r : s.inputs) args.push_back(resolve(r));
    std::vector<Shape> shapes = shapeless ? s.primitive->output_shapes(args) : s.shapes;
    values[k] = Array::make_many(std::move(shapes), s.dtypes, s.primitive, std::move(args));
  }
  std::vector<Array> out;
  for (const Ref& r : g.outputs) out.push_back(resolve(r));
  return out;
}

// An entry's GPU capture (capture.h): made on the second call with one input signature, when every
// step runs on the GPU; shared by the threads that call it.
struct CaptureCell {
  std::mutex mu;  // held while capturing
  int64_t calls = 0;
  bool failed = false;  // the graph could not be captured: replay it step by step
  std::shared_ptr<const CapturedGraph> graph;
};

// Read on every call (a getenv is cheap next to a call), so a test can compare both paths.
bool capture_enabled() {
  const char* v = std::getenv("KILN_COMPILE_CAPTURE");
  return !(v && std::string_view(v) == "0");
}

struct CompileState {
  struct Entry {
    Signature signature;
    CompiledGraph traced;  // before fusion: what new shapes are compared against
    std::shared_ptr<const CompiledGraph> fused;
    std::vector<std::vector<Shape>> verified;  // shapeless: input shapes known to give this graph
    std::shared_ptr<CaptureCell> capture = std::make_shared<CaptureCell>();
  };
  static constexpr size_t kMaxEntries = 32;

  ArrayFn fn;
  bool shapeless;
  std::mutex mu;             // guards entries; traces run outside it
  std::list<Entry> entries;  // most recently used first
  std::atomic<int64_t> traces{0}, compiles{0}, captures{0};

  // The captured program for these inputs: made now on the second call (when possible), else
  // null. Not while tracing (a transform of the compiled function needs its steps).
  std::shared_ptr<const CapturedGraph> captured(CaptureCell& cell, const CompiledGraph& graph,
                                                const std::vector<Array>& inputs,
                                                const std::vector<Shape>& shapes) {
    if (in_trace() || !capture_enabled()) return nullptr;
    std::unique_lock lock(cell.mu, std::try_to_lock);
    if (!lock.owns_lock()) return nullptr;  // another thread is capturing: replay step by step meanwhile
    if (cell.graph) return cell.graph->input_shapes == shapes ? cell.graph : nullptr;
    if (cell.failed || ++cell.calls < 2) return nullptr;
    if (!capturable(graph)) {
      cell.failed = true;
      if (std::getenv("KILN_DEBUG_CAPTURE"))
        for (const Step& s : graph.steps)
          std::fprintf(stderr, "capture: step %s on %s\n", s.primitive->name(),
                       s.primitive->device().type == Device::Type::gpu ? "gpu" : "cpu");
      return nullptr;
    }
    try {
      cell.graph = capture_graph(graph, inputs);
      ++captures;
    } catch (const Error& e) {
      cell.failed = true;  // e.g. a step that reads GPU values on the host
      if (std::getenv("KILN_DEBUG_CAPTURE")) std::fprintf(stderr, "capture failed: %s\n", e.what());
    }
    return cell.graph;
  }

  std::vector<Shape> shapes_of(const std::vector<Array>& inputs) {
    std::vector<Shape> s;
    for (const Array& a : inputs) s.push_back(a.shape());
    return s;
  }

  std::vector<Array> call(const std::vector<Array>& inputs) {
    const Signature sig = signature_of(inputs, shapeless);
    // The inputs' shapes: the signature's own unless it keeps ranks only (a step with a few
    // hundred inputs copied them twice a call).
    const std::vector<Shape> shapeless_shapes = shapeless ? shapes_of(inputs) : std::vector<Shape>{};
    const std::vector<Shape>& shapes = shapeless ? shapeless_shapes : sig.shapes;
    std::shared_ptr<const CompiledGraph> graph;
    std::shared_ptr<CaptureCell> capture;
    std::optional<CompiledGraph> to_verify;  // shapeless, new shapes: the traced graph to compare with
    {
      std::lock_guard lock(mu);
      for (auto it = entries.begin(); it != entries.end(); ++it) {
        if (it->signature != sig) continue;
        entries.splice(entries.begin(), entries, it);
        graph = it->fused;
        capture = it->capture;
        if (shapeless && std::find(it->verified.begin(), it->verified.end(), shapes) == it->verified.end())
          to_verify = it->traced;
        break;
      }
    }
    if (to_verify) {
      // New shapes for a shapeless graph: trace once more (outside the lock) and compare.
      ++traces;
      if (!same_structure(*to_verify, trace(fn, inputs)))
        throw ShapeError::of("compile",
                             "a shapeless compiled function builds a different graph for new shapes",
                             "its graph depends on input shapes (reshape targets, sizes read from shape()); "
                             "compile it with shapeless = false");
      std::lock_guard lock(mu);
      for (auto& e : entries)
        if (e.signature == sig) e.verified.push_back(shapes);
    }
    if (!graph) {
      ++traces;
      CompiledGraph traced = trace(fn, inputs);
      graph = std::make_shared<const CompiledGraph>(fuse_elementwise(traced));
      ++compiles;
      Entry e{sig, std::move(traced), graph, {shapes}};
      capture = e.capture;
      std::lock_guard lock(mu);
      entries.push_front(std::move(e));
      if (entries.size() > kMaxEntries) entries.pop_back();
    }
    if (auto c = captured(*capture, *graph, inputs, shapes)) return replay_captured(c, *graph, inputs);
    return replay(*graph, inputs, shapeless);
  }
};

// Writes the values of the evaluated array `a` into `out` (checked to hold a.nbytes() bytes of its
// dtype). Host values are copied from where they are; device values are downloaded into `out`
// directly: reading them through the array would first make a host copy of its buffer.
void copy_out(Array a, const OutputSpan& out) {
  if (a.size() == 0) return;
  if (a.node().buffer->on_host()) {
    copy_strided(a.raw_data(), a.dtype(), a.strides(), out.data(), a.dtype(), row_major_strides(a.shape()),
                 a.shape());
    return;
  }
  if (!a.row_contiguous()) {  // a strided view: made dense on the device first
    a = contiguous(a, Device::gpu);
    eval({a});
  }
  const size_t item = static_cast<size_t>(size_of(a.dtype()));
  gpu::download(*a.node().buffer->device(), out.data(), static_cast<size_t>(a.size()) * item,
                static_cast<size_t>(a.node().offset) * item);
}

}  // namespace detail

std::vector<Array> CompiledFunction::operator()(const std::vector<Array>& inputs) const {
  return state_->call(inputs);
}

void CompiledFunction::call_into(const std::vector<Array>& inputs,
                                 std::span<const OutputSpan> outputs) const {
  constexpr const char* op = "call_into";
  const std::vector<Array> results = state_->call(inputs);
  // Shapes and dtypes are known before evaluation: a mismatch writes nothing.
  if (outputs.size() != results.size())
    throw ValueError::of(op, "one output span per output needed", "{} spans for {} outputs", outputs.size(),
                         results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    const Array& r = results[i];
    if (outputs[i].dtype() != r.dtype())
      throw DtypeError::of(op, "an output span's dtype differs from its output's",
                           "output {}: span {}, output {}", i, dtype_name(outputs[i].dtype()),
                           dtype_name(r.dtype()));
    if (outputs[i].bytes() != static_cast<size_t>(r.nbytes()))
      throw ValueError::of(op, "an output span's size differs from its output's",
                           "output {} of shape {} ({}) needs {} bytes, the span has {}", i,
                           shape_str(r.shape()), dtype_name(r.dtype()), r.nbytes(), outputs[i].bytes());
    if (outputs[i].data() == nullptr && r.size() > 0)
      throw ValueError::of(op, "an output span has no memory", "output {}", i);
  }
  eval(results);
  for (size_t i = 0; i < results.size(); ++i) detail::copy_out(results[i], outputs[i]);
}

int64_t CompiledFunction::trace_count() const { return state_->traces.load(); }
int64_t CompiledFunction::compile_count() const { return state_->compiles.load(); }
int64_t CompiledFunction::capture_count() const { return state_->captures.load(); }

CompiledFunction compile(ArrayFn fn, bool shapeless) {
  if (!fn) throw ValueError::of("compile", "the function is empty");
  auto state = std::make_shared<detail::CompileState>();
  state->fn = std::move(fn);
  state->shapeless = shapeless;
  return CompiledFunction(std::move(state));
}

}  // namespace kiln
