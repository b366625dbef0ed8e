// materialize() and concurrent use of the core: many threads building, evaluating and transforming
// graphs at once, each result compared bit for bit with the same computation on one thread. Also
// run under ThreadSanitizer in CI (`make tsan-threads`), so iteration counts stay small.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <cstring>
#include <exception>
#include <future>
#include <latch>
#include <thread>

#include "kiln/core/primitive.h"
#include "support/op_test.h"

namespace kiln {
namespace {

constexpr int kThreads = 8;

using Bytes = std::vector<unsigned char>;

// The exact bytes of an array's values in row-major order.
Bytes bytes_of(const Array& a) {
  const Array c = contiguous(a);
  c.eval();
  const auto* p = static_cast<const unsigned char*>(c.raw_data());
  return Bytes(p, p + c.nbytes());
}
std::vector<Bytes> bytes_of(const std::vector<Array>& v) {
  std::vector<Bytes> out;
  for (const Array& a : v) out.push_back(bytes_of(a));
  return out;
}

// Runs fn(t) on n threads released together; rethrows the first exception a thread threw.
template <class F>
void run_threads(int n, F&& fn) {
  std::latch start(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      try {
        fn(t);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  for (auto& th : threads) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Two outputs from one claim (x * s and x + s) that counts its evaluations, to check that a node
// shared by racing threads is computed exactly once.
class CountingPair final : public PrimitiveWithParams<CountingPair> {
 public:
  CountingPair(std::atomic<int>* count, float s)
      : PrimitiveWithParams(default_stream(Device::cpu)), count_(count), s_(s) {}
  const char* name() const override { return "CountingPair"; }
  auto params() const { return std::tie(count_, s_); }
  std::vector<Shape> output_shapes(std::span<const Array> in) const override {
    return {in[0].shape(), in[0].shape()};
  }
  void eval_cpu(std::span<const Array> in, std::span<Array> out) const override {
    count_->fetch_add(1);
    std::vector<float> x(in[0].size());
    detail::gather_row_major(in[0], x.data(), float32);
    out[0].allocate();
    out[1].allocate();
    float* a = out[0].strided_data<float>();
    float* b = out[1].strided_data<float>();
    for (size_t i = 0; i < x.size(); ++i) {
      a[i] = x[i] * s_;
      b[i] = x[i] + s_;
    }
  }

 private:
  std::atomic<int>* count_;
  float s_;
};

std::vector<Array> counting_pair(const Array& x, std::atomic<int>* count, float s) {
  return Array::make_many({x.shape(), x.shape()}, {float32, float32},
                          std::make_shared<CountingPair>(count, s), {astype(x, float32)});
}

// ---------------------------------------------------------------- materialize

TEST(Materialize, EvaluatesDetachesAndSharesTheBuffer) {
  const Array x = exp(test::random_array({3, 4}, float32, 1));
  const MaterializedArray m = materialize(x);
  EXPECT_TRUE(x.is_available());
  EXPECT_TRUE(m.array().is_available());
  EXPECT_FALSE(m.array().has_primitive());
  EXPECT_TRUE(m.array().inputs().empty());
  EXPECT_EQ(m.array().raw_data(), x.raw_data());  // no copy of the values
  EXPECT_EQ(m.shape(), x.shape());
  EXPECT_EQ(m.dtype(), float32);
  EXPECT_EQ(bytes_of(m), bytes_of(x));
  const MaterializedArray copy = m;  // copies share the node
  EXPECT_EQ(copy.id(), m.id());
}

TEST(Materialize, KeepsTheLayoutOfAView) {
  const Array base = test::random_array({4, 6}, float64, 2);
  const Array t = transpose(base);
  const MaterializedArray m = materialize(t);
  EXPECT_EQ(m.strides(), t.strides());
  EXPECT_EQ(m.to_vector<double>(), t.to_vector<double>());
  EXPECT_EQ(m.array().raw_data(), base.raw_data());
}

TEST(Materialize, UsableWhereverAnArrayIs) {
  const MaterializedArray a = materialize(Array({1.0f, 2.0f, 3.0f}));
  const MaterializedArray b = materialize(Array({4.0f, 5.0f, 6.0f}));
  EXPECT_EQ((a + b).to_vector<float>(), (std::vector<float>{5, 7, 9}));  // Operand
  EXPECT_EQ((a * 2).to_vector<float>(), (std::vector<float>{2, 4, 6}));  // with a weak scalar
  EXPECT_EQ(maximum(a, 2.5f).to_vector<float>(), (std::vector<float>{2.5f, 2.5f, 3}));
  EXPECT_EQ(sum(a).item<float>(), 6.0f);  // const Array&
  EXPECT_EQ(matmul(reshape(a, {1, 3}), reshape(b, {3, 1})).item<float>(), 32.0f);
  const Array as_array = a;  // a plain handle on the same node
  EXPECT_EQ(as_array.id(), a.id());
  const std::vector<Array> list{a, b};
  eval(list);
  eval(a, b);
  EXPECT_EQ(grad([](const Array& x) { return sum(x * x); })(a).to_vector<float>(),
            (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(materialize(Array(2.5f)).item<float>(), 2.5f);
  EXPECT_EQ(a.data<float>()[2], 3.0f);
}

TEST(Materialize, ItsBufferIsNeverDonated) {
  // Control: an evaluated temporary that only the consumer holds gives its buffer to exp's output.
  {
    Array t = test::random_array({256}, float32, 3) * 2.0f;
    t.eval();
    const void* p = t.raw_data();
    const Array y = exp(t);
    t = Array();  // the graph holds the only reference now
    y.eval();
    ASSERT_EQ(y.raw_data(), p) << "donation no longer happens here; this test lost its control";
  }
  // The same through a materialized handle: the handle's reference blocks donation.
  Array t = test::random_array({256}, float32, 3) * 2.0f;
  const MaterializedArray m = materialize(t);
  const Bytes before = bytes_of(m);
  const Array y = exp(m);
  y.eval();
  EXPECT_NE(y.raw_data(), m.array().raw_data());
  // Nor through the original node: it still shares its buffer with the materialized leaf.
  const Array z = exp(t);
  t = Array();
  z.eval();
  EXPECT_NE(z.raw_data(), m.array().raw_data());
  EXPECT_EQ(bytes_of(m), before);
}

TEST(Materialize, AnEvaluatedNodeCannotBeRepointed) {
  const MaterializedArray m = materialize(test::random_array({8}, float32, 4));
  const Bytes before = bytes_of(m);
  Array alias = m;  // Array's storage setters are for primitives; an evaluated node refuses them
  EXPECT_THROW(alias.allocate(), RuntimeError);
  EXPECT_THROW(alias.set_view(test::random_array({8}, float32, 5), {1}, 0), RuntimeError);
  EXPECT_THROW(alias.donate_from(test::random_array({8}, float32, 6)), RuntimeError);
  EXPECT_EQ(bytes_of(m), before);
}

TEST(Materialize, ManyAtOnce) {
  const Array x = test::random_array({5}, float32, 7);
  const std::vector<MaterializedArray> ms = materialize({exp(x), x * 3.0f, sum(x)});
  ASSERT_EQ(ms.size(), 3u);
  EXPECT_EQ(bytes_of(ms[0]), bytes_of(exp(x)));
  EXPECT_EQ(bytes_of(ms[1]), bytes_of(x * 3.0f));
  EXPECT_EQ(bytes_of(ms[2]), bytes_of(sum(x)));
}

TEST(Materialize, Errors) {
  EXPECT_THROW(materialize(Array()), ValueError);
  // An index error surfaces at evaluation (the indices are not computed yet when take is called),
  // here, on the calling thread.
  const Array bad = take(Array({1.0f, 2.0f}), Array({0, 7}) + 0, 0);
  EXPECT_THROW(materialize(bad), ValueError);
  // A traced value cannot be frozen inside its transform (vmap would replay only one example).
  auto f = [](const Array& x) { return sum(materialize(x * 2.0f)); };
  EXPECT_THROW(grad(f)(Array({1.0f, 2.0f})), ValueError);
  EXPECT_THROW(vmap(f)(Array({1.0f, 2.0f})), ValueError);
  // Constants inside a transform, and traced values once it has returned, are fine.
  const Array w({3.0f, 4.0f});
  auto g = [&](const Array& x) { return sum(x * materialize(w * 2.0f)); };
  EXPECT_EQ(grad(g)(Array({1.0f, 1.0f})).to_vector<float>(), (std::vector<float>{6, 8}));
  const auto [outs, grads] = vjp([](const std::vector<Array>& x) { return std::vector<Array>{x[0] * 3.0f}; },
                                 {Array({1.0f})}, {Array({1.0f})});
  const MaterializedArray m = materialize(outs[0]);
  EXPECT_FALSE(m.array().has_primitive());
  EXPECT_EQ(m.item<float>(), 3.0f);
}

// ---------------------------------------------------------------- concurrent evaluation

struct Weights {
  MaterializedArray w1, b1, w2;
};

Weights make_weights() {
  const auto k = random::split_keys(random::key(1), 3);
  auto ms = materialize({random::normal({32, 64}, k[0]) * 0.2f, random::normal({64}, k[1]),
                         random::normal({64, 10}, k[2]) * 0.2f});
  return {ms[0], ms[1], ms[2]};
}

// An MLP forward pass plus an elementwise pass big enough for the CPU pool to split (at most one
// caller holds the pool at a time; the others run their loops serially, with the same result).
Array per_thread_work(const Weights& w, const MaterializedArray& big, int t, int i) {
  const Array x = random::normal({8, 32}, random::key(1000 * t + i));
  const Array h = tanh(matmul(x, w.w1) + w.b1);
  const Array logits = log_softmax(matmul(h, w.w2), -1);
  return sum(logits, 1) + mean(exp(big * (0.01f * static_cast<float>(i + 1))));
}

TEST(Threads, GraphsReadingSharedMaterializedArrays) {
  const Weights w = make_weights();
  const MaterializedArray big = materialize(random::uniform({1 << 17}, random::key(2)));
  const Bytes w1_bytes = bytes_of(w.w1), big_bytes = bytes_of(big);
  constexpr int kIters = 6;
  std::vector<std::vector<Bytes>> want(kThreads, std::vector<Bytes>(kIters)), got = want;
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kIters; ++i) want[t][i] = bytes_of(per_thread_work(w, big, t, i));
  run_threads(kThreads, [&](int t) {
    for (int i = 0; i < kIters; ++i) got[t][i] = bytes_of(per_thread_work(w, big, t, i));
  });
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(got[t], want[t]) << "thread " << t;
  EXPECT_EQ(bytes_of(w.w1), w1_bytes);
  EXPECT_EQ(bytes_of(big), big_bytes);
}

// Thread t's graph on top of a shared (unevaluated) pair of outputs.
Array consumer(const std::vector<Array>& shared, int t) {
  return shared[t % 2] * static_cast<float>(t + 1) + sum(shared[(t + 1) % 2]);
}

TEST(Threads, OverlappingUnevaluatedGraphsComputeSharedNodesOnce) {
  constexpr int kIters = 30;
  const MaterializedArray x = materialize(test::random_array({64, 33}, float32, 8));
  std::atomic<int> count{0};
  std::vector<std::vector<Bytes>> want(kIters, std::vector<Bytes>(kThreads)), got = want;
  std::vector<std::vector<Array>> shared(kIters);
  for (int i = 0; i < kIters; ++i) {
    const float s = 0.5f + static_cast<float>(i);
    const std::vector<Array> reference = counting_pair(sin(x) + s, &count, s);
    for (int t = 0; t < kThreads; ++t) want[i][t] = bytes_of(consumer(reference, t));
    shared[i] = counting_pair(sin(x) + s, &count, s);  // built once, evaluated by every thread below
  }
  ASSERT_EQ(count.load(), kIters);
  count = 0;
  std::barrier sync(kThreads);
  run_threads(kThreads, [&](int t) {
    for (int i = 0; i < kIters; ++i) {
      sync.arrive_and_wait();  // all threads race for graph i together
      got[i][t] = bytes_of(consumer(shared[i], t));
    }
  });
  EXPECT_EQ(count.load(), kIters) << "a shared node was computed more than once";
  EXPECT_EQ(got, want);
  for (const auto& pair : shared) {
    EXPECT_TRUE(pair[0].is_available() && pair[1].is_available());
    EXPECT_FALSE(pair[0].has_primitive());  // detached after evaluation
  }
}

TEST(Threads, ManyThreadsEvaluateOneArray) {
  // The same handle evaluated by every thread at once: one computes, the others wait for it.
  for (int i = 0; i < 20; ++i) {
    std::atomic<int> count{0};
    const Array x = test::random_array({16, 16}, float32, 100 + i);
    const Array y = counting_pair(x, &count, 2.0f)[0];
    const Array out = exp(y) - y;
    const Bytes want = bytes_of(exp(x * 2.0f) - x * 2.0f);
    std::vector<Bytes> got(kThreads);
    run_threads(kThreads, [&](int t) {
      out.eval();
      got[t] = bytes_of(out);
    });
    EXPECT_EQ(count.load(), 1);
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(got[t], want) << "thread " << t << ", round " << i;
  }
}

TEST(Threads, BuiltOnOneThreadEvaluatedOnAnother) {
  for (int i = 0; i < 10; ++i) {
    const Array w = test::random_array({12, 7}, float32, 200 + i);
    const Bytes want = bytes_of(sum(tanh(w) * 3.0f, 0) + 1.0f);
    // A graph built on a producer thread, evaluated by a consumer thread...
    std::promise<Array> handoff;
    std::thread producer([&] { handoff.set_value(sum(tanh(w) * 3.0f, 0) + 1.0f); });
    Bytes consumed;
    std::thread consumer([&, fut = handoff.get_future()]() mutable { consumed = bytes_of(fut.get()); });
    producer.join();
    consumer.join();
    EXPECT_EQ(consumed, want);
    // ...and an array evaluated on one thread, read and used as an input on another.
    Array evaluated;
    std::thread([&] { evaluated = materialize(sum(tanh(w) * 3.0f, 0)); }).join();
    Bytes used;
    std::thread([&] { used = bytes_of(evaluated + 1.0f); }).join();
    EXPECT_EQ(used, want);
  }
}

TEST(Threads, AnEvalThatThrowsFailsOnlyOnItsThread) {
  const MaterializedArray table = materialize(test::random_array({10, 4}, float32, 9));
  // 10 is out of range. The indices are lazy, so take finds out only when it is evaluated (with
  // evaluated indices it would throw at once, when called).
  auto bad_index = [] { return Array({1, 3, 10}) + 0; };
  constexpr int kIters = 15;
  // A graph shared by all threads whose failing node sits above a good, shared intermediate.
  const Array intermediate = exp(table);
  const Array shared_bad = sum(take(intermediate, bad_index(), 0));
  std::vector<Bytes> want(kThreads);
  for (int t = 0; t < kThreads; ++t) want[t] = bytes_of(sum(take(table, Array({t % 10, 2}), 0) * 2.0f, 1));
  std::vector<int> thrown(kThreads, 0), evaluated_ok(kThreads, 0);
  run_threads(kThreads, [&](int t) {
    for (int i = 0; i < kIters; ++i) {
      if (t % 2 == 0) {  // failing evaluations: a private graph and the shared one
        for (const Array& bad : {sum(take(table, bad_index(), 0) * 2.0f), shared_bad}) {
          try {
            bad.eval();
          } catch (const ValueError& e) {
            thrown[t] += std::string(e.what()).find("out of range") != std::string::npos;
          }
        }
      } else {
        evaluated_ok[t] += bytes_of(sum(take(table, Array({t % 10, 2}), 0) * 2.0f, 1)) == want[t];
      }
    }
  });
  for (int t = 0; t < kThreads; ++t) {
    if (t % 2 == 0)
      EXPECT_EQ(thrown[t], 2 * kIters) << "thread " << t;
    else
      EXPECT_EQ(evaluated_ok[t], kIters) << "thread " << t;
  }
  // The failed node stays unevaluated and fails again; what was computed below it stays valid.
  EXPECT_FALSE(shared_bad.is_available());
  EXPECT_THROW(shared_bad.eval(), ValueError);
  EXPECT_EQ(bytes_of(intermediate), bytes_of(exp(table)));
}

TEST(Threads, DroppingHandlesToASharedLazyGraph) {
  // Threads build on a shared unevaluated graph, look at it and drop everything without evaluating;
  // whichever thread lets go last frees the chain (iteratively, stealing each node's inputs).
  for (int i = 0; i < 40; ++i) {
    const Array x = test::random_array({8}, float32, 300 + i);
    Array chain = x;
    for (int d = 0; d < 6; ++d) chain = sin(chain) + static_cast<float>(d);
    std::vector<Array> handles(kThreads, chain);
    chain = Array();
    std::atomic<int> seen{0};
    run_threads(kThreads, [&](int t) {
      Array mine = std::move(handles[t]);
      Array y = mine * static_cast<float>(t);
      for (Array a = y; a.has_primitive() && !a.inputs().empty(); a = a.inputs()[0]) seen.fetch_add(1);
      y = Array();
      mine = Array();
    });
    EXPECT_EQ(seen.load(), kThreads * 13);
  }
}

TEST(Threads, DroppingAnInnerNodeWhileTheOuterGraphIsFreed) {
  // Threads hold the inner node `b` of a lazy chain, read it and let go; thread 0 then drops the
  // only handle to the outer node, and frees `b` (and below) by stealing their inputs.
  for (int i = 0; i < 40; ++i) {
    const Array x = test::random_array({8}, float32, 500 + i);
    Array b = sin(x) + 1.0f;
    Array c = exp(b) * 2.0f;
    std::vector<Array> inner(kThreads, b);
    b = Array();
    std::atomic<int> dropped{0};
    run_threads(kThreads, [&](int t) {
      Array mine = std::move(inner[t]);
      if (t == 0) {
        mine = Array();
        while (dropped.load(std::memory_order_relaxed) < kThreads - 1) std::this_thread::yield();
        c = Array();  // no ordering with the others but the handles' own counts
        return;
      }
      EXPECT_EQ(mine.inputs().size(), 2u);
      mine = Array();
      dropped.fetch_add(1, std::memory_order_relaxed);
    });
  }
}

TEST(Threads, DonationAfterAnotherThreadReadTheInput) {
  // `s` is evaluated; a reader thread reads its values and lets go of it. The main thread's pending
  // sin(s) is then its only owner and takes its buffer to write into: the write must be ordered
  // after the reader's reads by the handles' counts alone.
  int donated = 0;
  for (int i = 0; i < 40; ++i) {
    Array s = exp(test::random_array({4096}, float32, 400 + i));
    s.eval();
    const std::vector<float> want_read = s.to_vector<float>();
    const Bytes want_y = bytes_of(sin(s));
    const Array y = sin(s);
    const void* storage = s.raw_data();
    std::vector<float> read;
    std::atomic<bool> dropped{false};
    std::thread reader([&, mine = s]() mutable {
      read = mine.to_vector<float>();
      mine = Array();
      dropped.store(true, std::memory_order_relaxed);  // orders nothing: TSan must not see a sync here
    });
    s = Array();
    while (!dropped.load(std::memory_order_relaxed)) std::this_thread::yield();
    const Bytes got_y = bytes_of(y);
    reader.join();
    EXPECT_EQ(read, want_read);
    EXPECT_EQ(got_y, want_y);
    donated += y.raw_data() == storage;
  }
  EXPECT_GT(donated, 0) << "no donation happened: the test no longer checks its ordering";
}

// ---------------------------------------------------------------- transforms

// Thread t's loss: a different function per thread (the power and the scale depend on t).
Array loss_t(const std::vector<Array>& p, int t) {
  const Array y = tanh(matmul(p[1], p[0]) * (0.5f + 0.1f * static_cast<float>(t)));
  return mean(power(y, static_cast<float>(1 + t % 3))) + sum(p[0] * p[0]) * 0.01f;
}

std::vector<Array> grad_work(int t, int i) {
  const auto k = random::split_keys(random::key(50 + 100 * t + i), 2);
  const Array w = random::normal({6, 5}, k[0], 0.0, 1.0, float64);
  const Array x = random::normal({4, 6}, k[1], 0.0, 1.0, float64);
  auto vg =
      value_and_grad([t](const std::vector<Array>& p) { return std::vector<Array>{loss_t(p, t)}; }, {0, 1});
  auto [values, grads] = vg({w, x});
  // Nested: the second derivative of a scalar function through grad(grad).
  const ScalarFn f = [t](const Array& a) { return sum(sin(a * static_cast<float>(t + 1))); };
  const ScalarFn g = [&](const Array& a) { return sum(grad(f)(a)); };
  return {values[0], grads[0], grads[1], grad(g)(x)};
}

TEST(Threads, GradOnDifferentFunctionsAtOnce) {
  constexpr int kIters = 4;
  std::vector<std::vector<std::vector<Bytes>>> want(kThreads, std::vector<std::vector<Bytes>>(kIters)),
      got = want;
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kIters; ++i) want[t][i] = bytes_of(grad_work(t, i));
  run_threads(kThreads, [&](int t) {
    for (int i = 0; i < kIters; ++i) got[t][i] = bytes_of(grad_work(t, i));
  });
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(got[t], want[t]) << "thread " << t;
}

std::vector<Array> vmap_jvp_work(const MaterializedArray& w, int t, int i) {
  const Array xs = random::normal({5, 6}, random::key(7 + 100 * t + i), 0.0, 1.0, float64);
  const float scale = 1.0f + 0.25f * static_cast<float>(t);
  // Per-example gradients of a per-thread loss with respect to the example.
  const ScalarFn loss = [&, scale](const Array& x) { return sum(tanh(matmul(w, x) * scale)); };
  const Array per_example = vmap(grad(loss))(xs);
  // Hessian-vector product: jvp of the gradient.
  const ArrayFn g = [&](const std::vector<Array>& a) { return std::vector<Array>{grad(loss)(a[0])}; };
  const Array v = random::normal({6}, random::key(9 + t), 0.0, 1.0, float64);
  const auto [outs, hvp] = jvp(g, {take(xs, Array(0), 0)}, {v});
  // vmap with an unbatched argument and a moved output axis.
  const Array moved =
      vmap([&](const std::vector<Array>& a) { return std::vector<Array>{a[0] * a[1] + scale}; }, {0, -1},
           {1})({xs, v})[0];
  return {per_example, outs[0], hvp[0], moved};
}

TEST(Threads, VmapAndJvpAtOnce) {
  constexpr int kIters = 3;
  const MaterializedArray w = materialize(random::normal({3, 6}, random::key(3), 0.0, 1.0, float64));
  std::vector<std::vector<std::vector<Bytes>>> want(kThreads, std::vector<std::vector<Bytes>>(kIters)),
      got = want;
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kIters; ++i) want[t][i] = bytes_of(vmap_jvp_work(w, t, i));
  run_threads(kThreads, [&](int t) {
    for (int i = 0; i < kIters; ++i) got[t][i] = bytes_of(vmap_jvp_work(w, t, i));
  });
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(got[t], want[t]) << "thread " << t;
}

// Compiled functions used from many threads at once: one shared between all threads (its cache is
// shared and guarded), and one compiled per thread; called directly, under grad and under vmap.
Array chain(const Array& x, float c) { return tanh(x * c + 0.5f) * x - exp(x * 0.25f) * c; }

std::vector<Array> compile_work(const CompiledFunction& shared, int t) {
  const float c = 1.0f + 0.5f * static_cast<float>(t);
  const CompiledFunction mine =
      compile([c](const std::vector<Array>& a) { return std::vector<Array>{chain(a[0], c)}; });
  const Array x = random::normal({16, 9}, random::key(60 + t));
  const Array y = random::normal({9}, random::key(70 + t));  // a second signature
  const ScalarFn loss = [&](const Array& a) { return sum(mine({a})[0]); };
  const ScalarFn per_row = [&](const Array& a) { return shared({a})[0]; };
  return {mine({x})[0], mine({y})[0], shared({x})[0], shared({y})[0], grad(loss)(x), vmap(per_row)(x)};
}

TEST(Threads, CompiledFunctionsAtOnce) {
  constexpr int kIters = 3;
  auto shared_fn = [](const std::vector<Array>& a) { return std::vector<Array>{chain(a[0], 3.0f)}; };
  std::vector<std::vector<Bytes>> want(kThreads);
  {
    const CompiledFunction shared = compile(shared_fn);
    for (int t = 0; t < kThreads; ++t) want[t] = bytes_of(compile_work(shared, t));
  }
  const CompiledFunction shared = compile(shared_fn);
  std::vector<int> mismatches(kThreads, 0);
  run_threads(kThreads, [&](int t) {
    for (int i = 0; i < kIters; ++i) mismatches[t] += bytes_of(compile_work(shared, t)) != want[t];
  });
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
  // Threads that miss the cache together may each trace (traces run outside its lock); once a
  // signature is cached, no thread traces it again.
  const int64_t traces = shared.trace_count();
  EXPECT_GE(traces, 2);
  run_threads(kThreads, [&](int t) { mismatches[t] += bytes_of(compile_work(shared, t)) != want[t]; });
  EXPECT_EQ(shared.trace_count(), traces);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

// ---------------------------------------------------------------- random, allocator

// Draw j of a thread's stream: which key it uses depends only on (t, j), never on timing.
Array draw(const Array& key, int j) {
  switch (j % 5) {
    case 0:
      return random::uniform({1 << 16}, key);  // big enough for the pool to split
    case 1:
      return random::normal({300}, key, 1.0, 2.0, float64);
    case 2:
      return random::randint({257}, key, -50, 50);
    case 3:
      return random::bernoulli({100}, key, 0.3);
    default:
      return random::permutation(64, key);
  }
}

TEST(Threads, RandomKeysGiveTheSameNumbersOnEveryThread) {
  constexpr int kDraws = 10;
  const std::vector<Array> thread_keys = random::split_keys(random::key(42), kThreads);
  std::vector<std::vector<Bytes>> want(kThreads, std::vector<Bytes>(kDraws)), got = want;
  for (int t = 0; t < kThreads; ++t) {
    const std::vector<Array> keys = random::split_keys(thread_keys[t], kDraws);
    for (int j = 0; j < kDraws; ++j) want[t][j] = bytes_of(draw(keys[j], j));
  }
  // Each thread draws in its own order (rotated by t), so scheduling differs from the reference.
  run_threads(kThreads, [&](int t) {
    const std::vector<Array> keys = random::split_keys(thread_keys[t], kDraws);
    for (int n = 0; n < kDraws; ++n) {
      const int j = (n + t) % kDraws;
      got[t][j] = bytes_of(draw(keys[j], j));
    }
  });
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(got[t], want[t]) << "thread " << t;
  // And the same key drawn on every thread at once gives one answer.
  std::vector<Bytes> same(kThreads);
  run_threads(kThreads, [&](int t) { same[t] = bytes_of(random::normal({1000}, random::key(5))); });
  for (int t = 1; t < kThreads; ++t) EXPECT_EQ(same[t], same[0]) << "thread " << t;
}

TEST(Threads, AllocatorStatsStayConsistent) {
  clear_cache();
  const size_t baseline = memory_stats().active_bytes;
  std::atomic<bool> done{false};
  std::atomic<int> inconsistent{0};
  // A watcher reads the statistics and empties the cache while the workers allocate and free.
  std::thread watcher([&] {
    while (!done.load()) {
      const MemoryStats s = memory_stats();
      if (s.active_bytes > s.peak_bytes) inconsistent.fetch_add(1);
      clear_cache();
      std::this_thread::yield();
    }
  });
  std::vector<double> sums(kThreads);
  run_threads(kThreads, [&](int t) {
    double acc = 0;
    for (int i = 0; i < 20; ++i) {
      // Sizes from 64 bytes to 256 KiB, shared between threads through the cache.
      const int64_t n = int64_t{16} << ((t + i) % 13);
      const Array a = full({n}, static_cast<float>(t), float32);
      acc += sum(a + 1.0f).item<float>() / static_cast<double>(n);
    }
    sums[t] = acc;
  });
  done = true;
  watcher.join();
  EXPECT_EQ(inconsistent.load(), 0);
  for (int t = 0; t < kThreads; ++t) EXPECT_DOUBLE_EQ(sums[t], 20.0 * (t + 1)) << "thread " << t;
  const MemoryStats after = memory_stats();
  EXPECT_EQ(after.active_bytes, baseline) << "every buffer the threads made was released";
  EXPECT_GE(after.peak_bytes, after.active_bytes);
}

}  // namespace
}  // namespace kiln
