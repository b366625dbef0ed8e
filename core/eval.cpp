// eval: iterative topological order, then each node computed once, even when several threads
// evaluate overlapping graphs (a node is claimed with one atomic before it runs).
//
// GPU nodes record their kernels into this thread's recorder (the gpu facade) and stay claimed
// ("running") until it is submitted and has completed: only then are they published, so another
// thread never reads an array whose work has not been submitted. The recorder is submitted once at
// the end of eval, and earlier only where the host needs GPU results: before a CPU primitive reads
// a GPU-only buffer, and before this thread waits for a node another thread is computing (which
// might in turn wait for one of ours).
//
// async_eval's scheduler runs eval_nowait, which submits without waiting: its nodes become
// "submitted" and the submission joins a process-wide queue of work in flight. Later GPU work may
// read a submitted node at once (each submit waits on the timeline for the one before, so the
// queue runs them in order); the host waits for `available`. Whoever waits completes the oldest
// work in flight (waits for it, publishes its nodes), so no thread is needed for it.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/core/array.h"
#include "kiln/core/primitive.h"
#include "kiln/core/vulkan/gpu.h"
#include "kiln/core/vulkan/gpu_async.h"
#include "kiln/core/vulkan/gpu_capture.h"
#include "kiln/core/vulkan/gpu_host.h"

namespace kiln {
namespace detail {
namespace {

thread_local int tls_trace_depth = 0;

bool is_done(const ArrayNode& n) { return n.state.load(std::memory_order_acquire) == NodeState::available; }
// On the GPU queue: GPU work may read it now; the host waits for is_done.
bool is_submitted(ArrayNode& n) {
  return n.claim_word().load(std::memory_order_acquire) == NodeState::submitted;
}

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
  // The outputs of one multi-output primitive share one input list: scanned once, not once per
  // output (a captured GPT step has about 160 outputs of about 170 inputs each). Held, so that its
  // address cannot be reused by another list while the walk runs.
  NodeInputs scanned;
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.expanded) {
      tape.push_back(std::move(f.node));
      stack.pop_back();
      continue;
    }
    if (is_done(*f.node) || is_submitted(*f.node) || !seen.insert(f.node.get())) {
      stack.pop_back();
      continue;
    }
    f.expanded = true;
    std::shared_ptr<ArrayNode> node = f.node;  // `f` may move when the stack grows
    std::lock_guard lock(node->lock);
    const std::vector<Array>& inputs = node->inputs;
    if (node->group) {  // only a multi-output primitive's outputs share their list
      if (!inputs.empty() && &inputs == &scanned.get()) continue;
      scanned = node->inputs;
    }
    for (size_t i = inputs.size(); i-- > 0;) {
      const Array& in = inputs[i];
      if (!is_done(in.node()) && !is_submitted(in.node()) && !seen.contains(&in.node()))
        stack.push_back({in.node_ptr(), false});
    }
  }
  return tape;
}

// The tape in order of depth (a node's depth is one more than its deepest input's in the tape),
// stable within a depth: still inputs before uses, and each depth's nodes, which do not depend on
// each other, recorded together. The recorder puts a barrier where a dispatch reads what the
// ones since the last barrier wrote, so this is one barrier per depth rather than one per
// dependent dispatch, and independent work (a layer's weight and input gradients, the optimizer's
// per-parameter updates) runs side by side on the GPU. For a recording that is replayed (capture):
// all its buffers live until it completes whatever the order, so the order costs no memory.
void order_by_depth(std::vector<std::shared_ptr<ArrayNode>>& tape) {
  std::unordered_map<const ArrayNode*, uint32_t> depth_of;
  depth_of.reserve(tape.size());
  std::vector<std::pair<uint32_t, size_t>> keys(tape.size());
  for (size_t i = 0; i < tape.size(); ++i) {
    uint32_t depth = 0;
    {
      std::lock_guard lock(tape[i]->lock);
      for (const Array& in : tape[i]->inputs)
        if (auto it = depth_of.find(&in.node()); it != depth_of.end())
          depth = std::max(depth, it->second + 1);
    }
    depth_of.emplace(tape[i].get(), depth);
    keys[i] = {depth, i};
  }
  std::ranges::sort(keys);
  std::vector<std::shared_ptr<ArrayNode>> ordered;
  ordered.reserve(tape.size());
  for (const auto& [depth, i] : keys) ordered.push_back(std::move(tape[i]));
  tape = std::move(ordered);
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

// Calls f on the error slot of a node's claim word (its group's for a multi-output primitive),
// under the lock that guards it.
template <class F>
auto with_error_slot(ArrayNode& n, F&& f) {
  if (n.group) {
    std::lock_guard lock(n.group->lock);
    return f(n.group->async_error);
  }
  std::lock_guard lock(n.lock);
  return f(n.async_error);
}

void publish(ArrayNode& n, bool keep_graph);

void publish_outputs(const std::shared_ptr<ArrayNode>& node, bool keep) {
  if (!node->group) return publish(*node, keep);  // a single output: no list of outputs to build
  const std::shared_ptr<SiblingGroup>& group = node->group;
  // The outputs still held somewhere (a dropped one has nothing to publish), gathered under the
  // group's lock and published outside it. The list is the thread's, reused: a replayed training
  // step has about 160 outputs, and a fresh list per step showed in its host time.
  thread_local std::vector<std::shared_ptr<ArrayNode>> scratch;
  std::vector<std::shared_ptr<ArrayNode>> live = std::move(scratch);
  live.clear();
  {
    std::lock_guard lock(group->lock);
    for (const std::weak_ptr<ArrayNode>& w : group->outputs)
      if (std::shared_ptr<ArrayNode> n = w.lock()) live.push_back(std::move(n));
    group->async_error = nullptr;
  }
  for (const std::shared_ptr<ArrayNode>& n : live) publish(*n, keep);
  group->state.store(NodeState::available, std::memory_order_release);
  group->state.notify_all();
  live.clear();
  scratch = std::move(live);
}

// GPU work submitted without a wait, oldest first, with the nodes it computes (each claim word
// `submitted` while its entry is queued or being completed). Pushing an entry and marking its
// nodes happen under the mutex, so a node seen `submitted` whose entry is gone from the queue is
// being completed by some thread, which publishes it.
struct InFlight {
  std::unique_ptr<gpu::PendingWork> work;
  std::vector<Deferred> nodes;
};
struct InFlightQueue {
  std::mutex mutex;
  std::deque<InFlight> entries;
  std::atomic<size_t> size{0};  // entries.size(), read without the lock to skip an empty queue
};
InFlightQueue& in_flight() {
  // Never destroyed, like the Vulkan context: work may still be queued at exit.
  static InFlightQueue* queue = new InFlightQueue;
  return *queue;
}

// Work in flight failed: its nodes go back to unevaluated and keep the error for the first eval
// that asks for them (running them again might not meet it: a failed submit, say).
void fail_nodes(std::vector<Deferred>& nodes, const std::exception_ptr& error) noexcept {
  for (Deferred& d : nodes) with_error_slot(*d.node, [&](std::exception_ptr& slot) { slot = error; });
  release_claims(nodes);
}

// Completes the oldest work in flight: waits for it (when `block`; otherwise only if it is done)
// and publishes its nodes. Returns whether there was such work.
bool complete_oldest(bool block) {
  InFlightQueue& q = in_flight();
  // Not for a blocking call: a waiter that saw a node `submitted` must take the lock, which the
  // submitter holds until the node's entry is queued (`size` may not show it yet).
  if (!block && q.size.load(std::memory_order_acquire) == 0) return false;
  InFlight entry;
  {
    std::lock_guard lock(q.mutex);
    if (q.entries.empty()) return false;
    if (!block) {
      bool done = true;  // an error is the waiter's to report: complete it below
      try {
        done = q.entries.front().work->done();
      } catch (...) {
      }
      if (!done) return false;
    }
    entry = std::move(q.entries.front());
    q.entries.pop_front();
    q.size.store(q.entries.size(), std::memory_order_release);
  }
  try {
    entry.work->wait();
  } catch (...) {
    fail_nodes(entry.nodes, std::current_exception());
    return true;
  }
  for (Deferred& d : entry.nodes) publish_outputs(d.node, d.keep);
  return true;
}

// Publishes what work in flight has finished, without blocking.
void complete_finished() {
  while (complete_oldest(false)) {
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
  complete_finished();  // every earlier submit has completed too
}

// flush_gpu without the wait: the nodes become `submitted` and their work joins the queue in
// flight. A failed submit is kept by the nodes for their waiter (nothing else would report it).
void flush_gpu_nowait() {
  if (tls_deferred.empty() && !gpu::has_pending()) return;
  std::vector<Deferred> deferred;
  deferred.swap(tls_deferred);
  std::unique_ptr<gpu::PendingWork> work;
  try {
    work = gpu::submit_pending_nowait();
  } catch (...) {
    fail_nodes(deferred, std::current_exception());
    throw;
  }
  if (!work) {
    for (Deferred& d : deferred) publish_outputs(d.node, d.keep);
    return;
  }
  InFlightQueue& q = in_flight();
  std::lock_guard lock(q.mutex);
  for (Deferred& d : deferred) {
    std::atomic<NodeState>& word = d.node->claim_word();
    word.store(NodeState::submitted, std::memory_order_release);
    word.notify_all();  // a waiter may complete the work, or record GPU work that reads it
  }
  q.entries.push_back({std::move(work), std::move(deferred)});
  q.size.store(q.entries.size(), std::memory_order_release);
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
    // Submitted: complete work in flight, oldest first, until it is published; when none is left
    // in the queue, another thread is completing it.
    if (s == NodeState::submitted && complete_oldest(true)) continue;
    word.wait(s, std::memory_order_acquire);
  }
}

// The error kept by a node whose work in flight failed, taken (reported once); null if none.
std::exception_ptr take_async_error(ArrayNode& n) {
  return with_error_slot(n, [](std::exception_ptr& slot) { return std::exchange(slot, nullptr); });
}

// A CPU primitive reads its inputs on the host: those submitted must complete first.
void wait_for_host(ArrayNode& n) {
  if (is_done(n) || !is_submitted(n)) return;
  wait_available(n.claim_word());
  if (is_done(n)) return;
  if (std::exception_ptr e = with_error_slot(n, [](std::exception_ptr& slot) { return slot; }))
    std::rethrow_exception(e);
  throw RuntimeError::of("eval", "an input's GPU work failed; evaluate it again");
}

void publish(ArrayNode& n, bool keep_graph) {
  NodeInputs inputs;
  std::shared_ptr<const Primitive> primitive;
  {
    std::lock_guard lock(n.lock);
    n.state.store(NodeState::available, std::memory_order_release);
    n.async_error = nullptr;
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
    const NodeState now = word.load(std::memory_order_acquire);
    if (now == NodeState::available || now == NodeState::submitted || is_done(*node)) return;
    NodeState expected = NodeState::unevaluated;
    if (!word.compare_exchange_strong(expected, NodeState::running, std::memory_order_acq_rel)) {
      if (expected == NodeState::submitted) return;  // GPU readers take it as is; CPU ones wait
      // A sibling of an output this thread recorded on the GPU: computed by the same kernel, and
      // published with it when the recording is submitted.
      if (node->group &&
          std::ranges::any_of(tls_deferred, [&](const Deferred& d) { return d.node->group == node->group; }))
        return;
      flush_gpu();           // the other thread may be waiting for nodes this one recorded
      wait_available(word);  // another thread is computing it
      if (is_done(*node)) return;
      // It failed there. Work submitted without a wait keeps its error for a waiter: this one.
      if (std::exception_ptr e = take_async_error(*node)) std::rethrow_exception(e);
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
        for (const Array& in : node->inputs) wait_for_host(in.node());
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
  order_by_depth(tape);
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

namespace detail {
namespace {

// An error kept by work in flight that failed, for one of `arrays`: thrown here, once.
void report_async_errors(std::span<const Array> arrays) {
  for (const Array& a : arrays)
    if (a.valid() && !is_done(a.node()))
      if (std::exception_ptr e = take_async_error(a.node())) std::rethrow_exception(e);
}

void run_tape(std::span<const Array> arrays, void (*flush)()) {
  auto tape = build_tape(arrays);
  try {
    for (auto& node : tape) {
      run_node(node);
      node.reset();  // consumers hold it now; once they have run, its buffer can be reused
    }
    flush();
  } catch (...) {
    abandon_gpu();
    throw;
  }
}

}  // namespace

size_t gpu_work_in_flight() { return in_flight().size.load(std::memory_order_acquire); }

void eval_nowait(std::span<const Array> arrays) { run_tape(arrays, flush_gpu_nowait); }

}  // namespace detail

namespace gpu {

void eval_on_host(const Primitive& p, std::span<const Array> inputs, std::span<Array> outputs) {
  // A replay would not run the host code: the program would hold the values of the capture.
  if (capturing())
    throw NotImplemented::of(p.name(), "computes on the host, which a captured GPU program cannot replay");
  // What run_node does before a CPU primitive.
  for (const Array& in : inputs) detail::wait_for_host(in.node());
  if (has_pending() || !detail::tls_deferred.empty())
    for (const Array& in : inputs)
      if (!in.node().buffer->on_host()) {
        detail::flush_gpu();
        break;
      }
  p.eval_cpu(inputs, outputs);
}

}  // namespace gpu

void eval(std::span<const Array> arrays) {
  detail::report_async_errors(arrays);
  for (;;) {
    detail::run_tape(arrays, detail::flush_gpu);
    // Arrays whose work was submitted without a wait: complete it. Should it fail, its nodes are
    // unevaluated again: report the error it kept, or compute them here.
    bool failed = false;
    for (const Array& a : arrays) {
      if (!a.valid() || detail::is_done(a.node())) continue;
      detail::wait_available(a.node().claim_word());
      failed = failed || !detail::is_done(a.node());
    }
    if (!failed) return;
    detail::report_async_errors(arrays);
  }
}

void eval(std::initializer_list<Array> arrays) {
  eval(std::span<const Array>(arrays.begin(), arrays.size()));
}

}  // namespace kiln
