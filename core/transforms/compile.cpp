// compile: trace on placeholders, simplify (common subexpressions, duplicate scalar constants),
// fuse elementwise chains, cache by input signature, and replay.
#include "kiln/core/compile.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "kiln/core/cpu/copy.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/random.h"
#include "kiln/core/shape_polymorphic.h"
#include "kiln/core/transforms/capture.h"
#include "kiln/core/transforms/compiled_graph.h"
#include "kiln/core/transforms/internal_key_draws.h"
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
  Stream stream;  // where ops given no device run (set_default_device, a StreamScope): traced in
  bool operator==(const Signature&) const = default;
};

Signature signature_of(const std::vector<Array>& inputs, bool shapeless) {
  Signature s;
  for (const Array& a : inputs) {
    if (!a.valid()) throw ValueError::of("compile", "an input is an empty (default-constructed) array");
    s.shapes.push_back(shapeless ? Shape(a.ndim(), 0) : a.shape());
    s.dtypes.push_back(a.dtype());
  }
  s.stream = to_stream({});
  return s;
}

bool same_scalar_constant(const Array& a, const Array& b) {
  if (a.ndim() != 0 || b.ndim() != 0 || a.dtype() != b.dtype() || !a.is_available() || !b.is_available())
    return false;
  return std::memcmp(a.raw_data(), b.raw_data(), a.itemsize()) == 0;
}

// Traces fn and builds its simplified graph. Each key fn draws from the default sequence
// (random::next_key()) is a placeholder too: an input after fn's own, which every call fills with
// a fresh key, so the numbers drawn from it change from call to call as they do without compile.
CompiledGraph trace(const ArrayFn& fn, const std::vector<Array>& inputs) {
  TraceScope scope;
  std::vector<Array> placeholders;
  std::unordered_map<const ArrayNode*, Ref> ref_of;
  std::unordered_set<const ArrayNode*> stop;
  CompiledGraph g;
  auto add_input = [&](const Shape& shape, Dtype dtype) {
    const Ref r{Ref::Kind::input, static_cast<int>(placeholders.size())};
    placeholders.push_back(Array::make(shape, dtype, std::make_shared<CompileInput>(to_stream({})), {}));
    ref_of.emplace(&placeholders.back().node(), r);
    stop.insert(&placeholders.back().node());
    g.input_dtypes.push_back(dtype);
    g.input_shapes.push_back(shape);
    return placeholders.back();
  };
  for (const Array& a : inputs) add_input(a.shape(), a.dtype());
  std::vector<Array> outputs;
  {
    const std::vector<Array> fn_inputs = placeholders;  // fn's own: the keys come after
    const KeyDrawScope keys([&] {
      ++g.keys;
      return add_input({2}, uint32);
    });
    outputs = fn(fn_inputs);
  }

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

}  // namespace

namespace {

std::string shapes_str(std::span<const Shape> shapes) {
  std::string out;
  for (const Shape& s : shapes) out += (out.empty() ? "" : ", ") + shape_str(s);
  return out;
}

std::string shapes_str(std::span<const Array> arrays) {
  std::vector<Shape> shapes;
  for (const Array& a : arrays) shapes.push_back(a.shape());
  return shapes_str(shapes);
}

std::string describe(const Primitive& p) {
  std::ostringstream os;
  p.print(os);
  return os.str();
}

// What a shapeless replay knows about the call's input shapes against the traced ones.
struct ShapeChange {
  std::vector<int64_t> sizes;  // the traced sizes of the input dimensions that changed
  std::vector<char> moved;     // per step: it depends on an input whose shape changed
};

[[noreturn]] void refuse(const CompiledGraph& g, size_t k, std::span<const Array> args,
                         std::span<const Array> inputs, const std::string& why) {
  const size_t own = g.input_shapes.size() - static_cast<size_t>(g.keys);
  throw ShapeError::of(
      "compile", "a shapeless compiled function cannot serve these input shapes",
      "the function traced with inputs ({}) is called with ({}): its step {}, {}, gets inputs ({}) "
      "and {}; compile it with shapeless = false",
      shapes_str(std::span<const Shape>(g.input_shapes.data(), own)), shapes_str(inputs.first(own)), k,
      describe(*g.steps[k].primitive), shapes_str(args), why);
}

// The output shapes of step k of a shapeless graph for `args` (its inputs at this call). A
// shape-polymorphic primitive infers them. Any other primitive holds sizes of the traced shapes
// (a reshape or broadcast target, slice bounds, a sample's shape): it serves only inputs of its
// traced shapes, and not even those when it depends on an input whose shape changed and holds one
// of the sizes that changed (a broadcast back to x.shape() in a gradient: the size came from x).
std::vector<Shape> shapeless_step_shapes(const CompiledGraph& g, size_t k, std::span<const Array> args,
                                         std::span<const Array> inputs, ShapeChange& change) {
  const Step& s = g.steps[k];
  std::vector<Shape> traced;
  bool moved = false;
  for (const Ref& r : s.inputs) {
    switch (r.kind) {
      case Ref::Kind::input:
        traced.push_back(g.input_shapes[r.index]);
        moved = moved || inputs[r.index].shape() != g.input_shapes[r.index];
        break;
      case Ref::Kind::constant:
        traced.push_back(g.constants[r.index].shape());
        break;
      case Ref::Kind::step:
        traced.push_back(g.steps[r.index].shapes[r.output]);
        moved = moved || change.moved[r.index];
        break;
    }
  }
  change.moved[k] = moved;
  bool same = true;
  for (size_t i = 0; i < args.size() && same; ++i) same = args[i].shape() == traced[i];
  const bool polymorphic = is_shape_polymorphic(*s.primitive);
  if (same) {
    // A random sample depends only on its key, whose shape never changes: its sample shape may still
    // hold a size of the traced inputs (dropout's mask), so it is checked as if its input moved.
    if (!polymorphic && (moved || s.primitive->has(Trait::random)))
      for (const Shape& out : s.shapes)
        for (int64_t d : out)
          if (std::find(change.sizes.begin(), change.sizes.end(), d) != change.sizes.end())
            refuse(g, k, args, inputs,
                   fmt::format(
                       "depends on an input whose shape changed while it holds the size {} of the traced "
                       "shapes, which changed (a shape read from one value and applied to another)",
                       d));
    return s.shapes;
  }
  if (!polymorphic)
    refuse(g, k, args, inputs,
           fmt::format(
               "holds sizes of the traced shapes (a reshape or broadcast target, slice bounds), where it "
               "was traced with ({})",
               shapes_str(traced)));
  try {
    return s.primitive->output_shapes(args);
  } catch (const Error& e) {
    refuse(g, k, args, inputs, fmt::format("cannot take them: {}", e.what()));
  }
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
  // Shapeless with other shapes than traced: what changed. Traced shapes replay as traced.
  bool reshaped = false;
  ShapeChange change;
  if (shapeless)
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Shape &now = inputs[i].shape(), &then = g.input_shapes[i];
      for (size_t d = 0; d < now.size(); ++d)
        if (now[d] != then[d]) {
          reshaped = true;
          change.sizes.push_back(then[d]);
        }
    }
  if (reshaped) change.moved.assign(g.steps.size(), 0);
  for (size_t k = 0; k < g.steps.size(); ++k) {
    const Step& s = g.steps[k];
    std::vector<Array> args;
    args.reserve(s.inputs.size());
    for (const Ref& r : s.inputs) args.push_back(resolve(r));
    std::vector<Shape> shapes = reshaped ? shapeless_step_shapes(g, k, args, inputs, change) : s.shapes;
    values[k] = Array::make_many(std::move(shapes), s.dtypes, s.primitive, std::move(args));
  }
  std::vector<Array> out;
  for (const Ref& r : g.outputs) {
    // An output that does not depend on the inputs keeps its traced shape: refused when that shape
    // holds a size that changed (zeros(x.shape()), the gradient of sum(x)).
    if (reshaped && r.kind == Ref::Kind::constant)
      for (int64_t d : g.constants[r.index].shape())
        if (std::find(change.sizes.begin(), change.sizes.end(), d) != change.sizes.end()) {
          const size_t own = g.input_shapes.size() - static_cast<size_t>(g.keys);
          throw ShapeError::of("compile", "a shapeless compiled function cannot serve these input shapes",
                               "the function traced with inputs ({}) is called with ({}): its output {} does "
                               "not depend on the "
                               "inputs and has the traced shape {}, with the size {}, which changed; compile "
                               "it with shapeless = false",
                               shapes_str(std::span<const Shape>(g.input_shapes.data(), own)),
                               shapes_str(std::span<const Array>(inputs).first(own)), out.size(),
                               shape_str(g.constants[r.index].shape()), d);
        }
    out.push_back(resolve(r));
  }
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
    std::shared_ptr<const CompiledGraph> graph;  // simplified and fused
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
      cell.graph = capture_graph(graph, inputs, shapeless);
      ++captures;
    } catch (const ShapeError&) {
      throw;  // shapes a shapeless graph cannot serve: this call fails, a later one may capture
    } catch (const Error& e) {
      cell.failed = true;  // e.g. a step that reads GPU values on the host
      if (std::getenv("KILN_DEBUG_CAPTURE")) std::fprintf(stderr, "capture failed: %s\n", e.what());
    }
    return cell.graph;
  }

  static std::vector<Shape> shapes_of(const std::vector<Array>& inputs) {
    std::vector<Shape> s;
    s.reserve(inputs.size());
    for (const Array& a : inputs) s.push_back(a.shape());
    return s;
  }

  std::vector<Array> call(const std::vector<Array>& inputs) {
    const Signature sig = signature_of(inputs, shapeless);
    std::shared_ptr<const CompiledGraph> graph;
    std::shared_ptr<CaptureCell> capture;
    {
      std::lock_guard lock(mu);
      for (auto it = entries.begin(); it != entries.end(); ++it) {
        if (it->signature != sig) continue;
        entries.splice(entries.begin(), entries, it);
        graph = it->graph;
        capture = it->capture;
        break;
      }
    }
    if (!graph) {
      // Traced once per signature (outside the lock); a shapeless graph then serves every shape
      // of its dtypes and ranks by inferring shapes through it (replay), without tracing again.
      ++traces;
      graph = std::make_shared<const CompiledGraph>(fuse_elementwise(trace(fn, inputs)));
      ++compiles;
      Entry e{sig, graph};
      capture = e.capture;
      std::lock_guard lock(mu);
      entries.push_front(std::move(e));
      if (entries.size() > kMaxEntries) entries.pop_back();
    }
    // The keys the trace drew from the default sequence, drawn afresh for this call and in the
    // trace's order: the same keys the function would draw uncompiled.
    std::vector<Array> with_keys;
    if (graph->keys > 0) {
      with_keys.reserve(inputs.size() + static_cast<size_t>(graph->keys));
      with_keys = inputs;
      for (int k = 0; k < graph->keys; ++k) with_keys.push_back(random::next_key());
    }
    const std::vector<Array>& all = graph->keys > 0 ? with_keys : inputs;
    // The inputs' shapes: the signature's own unless it keeps ranks only or lacks the keys (a step
    // with a few hundred inputs copied them twice a call).
    const bool own_shapes = !shapeless && graph->keys == 0;
    const std::vector<Shape> other_shapes = own_shapes ? std::vector<Shape>{} : shapes_of(all);
    const std::vector<Shape>& shapes = own_shapes ? sig.shapes : other_shapes;
    if (auto c = captured(*capture, *graph, all, shapes)) return replay_captured(c, *graph, all);
    return replay(*graph, all, shapeless);
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
