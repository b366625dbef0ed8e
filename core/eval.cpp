// eval: iterative topological order, then each node computed once, even when several threads
// evaluate overlapping graphs (a node is claimed with one atomic before it runs).
//
// GPU nodes record their kernels into this thread's recorder (the gpu facade) and stay claimed
// ("running") until it is submitted and has completed: only then are they published, so another
// thread never reads an array whose work has not been submitted. The recorder is submitted once at
// the end of eval, and earlier only where the host needs GPU results: before a CPU primitive reads
// a GPU-only buffer, and before this thread waits for a node another thread is computing (which
// might in turn wait for one of ours).
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "kiln/core/array.h"
#include "kiln/core/primitive.h"
#include "kiln/core/vulkan/gpu.h"
#include "kiln/core/vulkan/gpu_capture.h"

namespace kiln {
namespace detail {
namespace {

thread_local int tls_trace_depth = 0;

bool is_done(const ArrayNode& n) { return n.state.load(std::memory_order_acquire) == NodeState::available; }

// Nodes already met by build_tape: open addressing over pointers (a node per entry, as
// std::unordered_set allocates, costs more than the rest of the walk for a long chain).
class NodeSet {
 public:
  // Adds p; returns false when it was there already.
  bool insert(const ArrayNode* p) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    const ArrayNode*& slot = slots_[index(p)];
    if (slot == p) return false;
    slot = p;
    ++count_;
    return true;
  }
  bool contains(const ArrayNode* p) const { return !slots_.empty() && slots_[index(p)] == p; }

 private:
  // The slot holding p, or the free slot where it would go.
  size_t index(const ArrayNode* p) const {
    const size_t mask = slots_.size() - 1;
    size_t i = (reinterpret_cast<uintptr_t>(p) >> 4) * 0x9e3779b97f4a7c15ull >> 32 & mask;
    while (slots_[i] != nullptr && slots_[i] != p) i = (i + 1) & mask;
    return i;
  }
  void grow() {
    std::vector<const ArrayNode*> old(std::max<size_t>(64, slots_.size() * 2), nullptr);
    old.swap(slots_);
    for (const ArrayNode* p : old)
      if (p) slots_[index(p)] = p;
  }
  std::vector<const ArrayNode*> slots_;  // a power of two in size, at most half used
  size_t count_ = 0;
};

// Post-order DFS with an explicit stack. A node is expanded once; since the graph is acyclic, a
// node met again after expansion is already in the tape.
std::vector<std::shared_ptr<ArrayNode>> build_tape(std::span<const Array> outputs) {
  std::vector<std::shared_ptr<ArrayNode>> tape;
  NodeSet seen;
  struct Frame {
    std::shared_ptr<ArrayNode> node;
    bool expanded;
  };
  std::vector<Frame> stack;
  for (const Array& a : outputs)
    if (a.valid() && !is_done(a.node())) stack.push_back({a.node_ptr(), false});
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.expanded) {
      tape.push_back(std::move(f.node));
      stack.pop_back();
      continue;
    }
    if (is_done(*f.node) || !seen.insert(f.node.get())) {
      stack.pop_back();
      continue;
    }
    f.expanded = true;
    std::shared_ptr<ArrayNode> node = f.node;  // `f` may move when the stack grows
    std::lock_guard lock(node->lock);
    for (size_t i = node->inputs.size(); i-- > 0;) {
      const Array& in = node->inputs[i];
      if (!is_done(in.node()) && !seen.contains(&in.node())) stack.push_back({in.node_ptr(), false});
    }
  }
  return tape;
}

// GPU nodes recorded by this thread and not yet published, with whether to keep their graph.
struct Deferred {
  std::shared_ptr<ArrayNode> node;
  bool keep;
};
thread_local std::vector<Deferred> tls_deferred;

void release_claims(std::vector<Deferred>& deferred) noexcept {
  for (Deferred& d : deferred) {
    std::atomic<NodeState>& word = d.node->claim_word();
    word.store(NodeState::unevaluated, std::memory_order_release);
    word.notify_all();
  }
  deferred.clear();
}

void publish(ArrayNode& n, bool keep_graph);

void publish_outputs(const std::shared_ptr<ArrayNode>& node, bool keep) {
  if (!node->group) return publish(*node, keep);  // a single output: no list of outputs to build
  for (Array& o : Array(node).outputs()) publish(o.node(), keep);
  if (const std::shared_ptr<SiblingGroup>& group = node->group) {
    group->state.store(NodeState::available, std::memory_order_release);
    group->state.notify_all();
  }
}

// Submits this thread's GPU work, waits for it and publishes the nodes it computed. On a device
// error the nodes go back to unevaluated (a later eval retries them) and the error propagates.
void flush_gpu() {
  if (tls_deferred.empty() && !gpu::has_pending()) return;
  std::vector<Deferred> deferred;
  deferred.swap(tls_deferred);
  try {
    gpu::submit_pending();
  } catch (...) {
    release_claims(deferred);
    throw;
  }
  for (Deferred& d : deferred) publish_outputs(d.node, d.keep);
}

// Abandons this thread's recorded GPU work after an error in the eval that recorded it.
void abandon_gpu() noexcept {
  gpu::discard_pending();
  release_claims(tls_deferred);
}

void wait_available(std::atomic<NodeState>& word) {
  for (NodeState s = word.load(std::memory_order_acquire); s != NodeState::available;
       s = word.load(std::memory_order_acquire)) {
    if (s == NodeState::unevaluated) return;  // its evaluator failed; the caller retries
    word.wait(s, std::memory_order_acquire);
  }
}

void publish(ArrayNode& n, bool keep_graph) {
  std::vector<Array> inputs;
  std::shared_ptr<const Primitive> primitive;
  {
    std::lock_guard lock(n.lock);
    n.state.store(NodeState::available, std::memory_order_release);
    if (!keep_graph) {  // detach: the values are here, the graph that made them can go
      inputs.swap(n.inputs);
      primitive.swap(n.primitive);
    }
  }
  n.state.notify_all();
  // `inputs` and `primitive` are released here, outside the lock.
}

void run_node(const std::shared_ptr<ArrayNode>& node) {
  for (;;) {
    std::atomic<NodeState>& word = node->claim_word();
    if (word.load(std::memory_order_acquire) == NodeState::available || is_done(*node)) return;
    NodeState expected = NodeState::unevaluated;
    if (!word.compare_exchange_strong(expected, NodeState::running, std::memory_order_acq_rel)) {
      // A sibling of an output this thread recorded on the GPU: computed by the same kernel, and
      // published with it when the recording is submitted.
      if (node->group &&
          std::ranges::any_of(tls_deferred, [&](const Deferred& d) { return d.node->group == node->group; }))
        return;
      flush_gpu();           // the other thread may be waiting for nodes this one recorded
      wait_available(word);  // another thread is computing it
      if (is_done(*node)) return;
      continue;
    }
    Array self(node);
    std::vector<Array> outputs = self.outputs();
    // The claimer is the only writer of inputs/primitive (at detach), so it reads them unlocked;
    // passing the node's own input list keeps use counts exact for buffer donation.
    const std::shared_ptr<SiblingGroup> group = node->group;
    const Primitive* primitive = node->primitive.get();
    const bool on_gpu = primitive && primitive->device().type == Device::Type::gpu;
    try {
      if (!primitive) throw RuntimeError::of("eval", "array has no data and no primitive to compute it");
      if (on_gpu) {
        primitive->eval_gpu(node->inputs, outputs);
      } else {
        if (gpu::has_pending() || !tls_deferred.empty())
          for (const Array& in : node->inputs)
            if (!in.node().buffer->on_host()) {
              flush_gpu();  // the CPU reads what this thread's recorded kernels write
              break;
            }
        primitive->eval_cpu(node->inputs, outputs);
      }
    } catch (...) {
      word.store(NodeState::unevaluated, std::memory_order_release);
      word.notify_all();
      throw;
    }
    const bool keep = node->tracer && in_trace();
    if (on_gpu) {
      tls_deferred.push_back({node, keep});
      return;
    }
    for (Array& o : outputs) publish(o.node(), keep);
    if (group) {
      group->state.store(NodeState::available, std::memory_order_release);
      group->state.notify_all();
    }
    return;
  }
}

}  // namespace

std::shared_ptr<const gpu::CapturedProgram> capture_eval(std::span<const Array> outputs) {
  if (!tls_deferred.empty() || gpu::has_pending())
    throw ValueError::of("gpu capture", "a capture cannot start inside an evaluation");
  auto tape = build_tape(outputs);
  for (const auto& node : tape) {
    const Primitive* p = node->primitive.get();
    if (!p || p->device().type != Device::Type::gpu)
      throw NotImplemented::of("gpu capture", "a node of the graph does not run on the GPU", "{}",
                               p ? p->name() : "an array without a primitive");
  }
  gpu::begin_capture();
  try {
    for (auto& node : tape) {
      run_node(node);
      node.reset();
    }
  } catch (...) {
    gpu::discard_pending();  // drops the capture recorder
    release_claims(tls_deferred);
    gpu::abort_capture();
    throw;
  }
  std::shared_ptr<const gpu::CapturedProgram> program;
  try {
    program = gpu::end_capture();
  } catch (...) {
    release_claims(tls_deferred);
    throw;
  }
  std::vector<Deferred> deferred;
  deferred.swap(tls_deferred);
  for (Deferred& d : deferred) publish_outputs(d.node, false);
  return program;
}

bool in_trace() { return tls_trace_depth > 0; }
TraceScope::TraceScope() { ++tls_trace_depth; }
TraceScope::~TraceScope() { --tls_trace_depth; }

}  // namespace detail

void eval(std::span<const Array> arrays) {
  auto tape = detail::build_tape(arrays);
  try {
    for (auto& node : tape) {
      detail::run_node(node);
      node.reset();  // consumers hold it now; once they have run, its buffer can be reused
    }
    detail::flush_gpu();
  } catch (...) {
    detail::abandon_gpu();
    throw;
  }
}

void eval(std::initializer_list<Array> arrays) {
  eval(std::span<const Array>(arrays.begin(), arrays.size()));
}

}  // namespace kiln
