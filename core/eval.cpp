// eval: iterative topological order, then each node computed once, even when several threads
// evaluate overlapping graphs (a node is claimed with one atomic before it runs).
#include <mutex>
#include <unordered_set>

#include "kiln/core/array.h"
#include "kiln/core/primitive.h"

namespace kiln {
namespace detail {
namespace {

thread_local int tls_trace_depth = 0;

bool is_done(const ArrayNode& n) { return n.state.load(std::memory_order_acquire) == NodeState::available; }

// Post-order DFS with an explicit stack. A node is expanded once; since the graph is acyclic, a
// node met again after expansion is already in the tape.
std::vector<std::shared_ptr<ArrayNode>> build_tape(std::span<const Array> outputs) {
  std::vector<std::shared_ptr<ArrayNode>> tape;
  std::unordered_set<const ArrayNode*> seen;
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
    if (is_done(*f.node) || !seen.insert(f.node.get()).second) {
      stack.pop_back();
      continue;
    }
    f.expanded = true;
    std::shared_ptr<ArrayNode> node = f.node;  // `f` may move when the stack grows
    std::lock_guard lock(node->lock);
    for (size_t i = node->inputs.size(); i-- > 0;) {
      const Array& in = node->inputs[i];
      if (!is_done(in.node()) && !seen.count(&in.node())) stack.push_back({in.node_ptr(), false});
    }
  }
  return tape;
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
    try {
      if (!primitive) throw RuntimeError::of("eval", "array has no data and no primitive to compute it");
      if (primitive->device().type == Device::Type::cpu)
        primitive->eval_cpu(node->inputs, outputs);
      else
        primitive->eval_gpu(node->inputs, outputs);
    } catch (...) {
      word.store(NodeState::unevaluated, std::memory_order_release);
      word.notify_all();
      throw;
    }
    const bool keep = node->tracer && in_trace();
    for (Array& o : outputs) publish(o.node(), keep);
    if (group) {
      group->state.store(NodeState::available, std::memory_order_release);
      group->state.notify_all();
    }
    return;
  }
}

}  // namespace

bool in_trace() { return tls_trace_depth > 0; }
TraceScope::TraceScope() { ++tls_trace_depth; }
TraceScope::~TraceScope() { --tls_trace_depth; }

}  // namespace detail

void eval(std::span<const Array> arrays) {
  auto tape = detail::build_tape(arrays);
  for (auto& node : tape) {
    detail::run_node(node);
    node.reset();  // consumers hold it now; once they have run, its buffer can be reused
  }
}

void eval(std::initializer_list<Array> arrays) {
  eval(std::span<const Array>(arrays.begin(), arrays.size()));
}

}  // namespace kiln
