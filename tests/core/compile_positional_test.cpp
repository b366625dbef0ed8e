// CompiledFunction::call_into, the serving loop's positional fast path: each output's values land
// in the caller's span, bit for bit those of the normal call; once warm a call holds no more host
// memory than the last one; bad spans throw before anything is written; threads call one compiled
// function at once with their own spans. Runs on the CPU and again as gpu.* with the GPU default.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include "support/device.h"
#include "support/error_of.h"
#include "support/op_test.h"

namespace kiln {
namespace {

using test::random_array;
using test::values;

constexpr int64_t kBatch = 6, kIn = 16, kOut = 8;

// A small dense layer and views of its result: a strided one (transpose), one that starts inside
// its buffer (rows 2..), an int32 output, a scalar and an input passed through.
std::vector<Array> layer(const std::vector<Array>& in) {
  const Array y = tanh(matmul(in[0], in[1]) + in[2]);
  return {y, transpose(y), slice(y, {2, 0}, {kBatch, kOut}), argmax(y, 1), sum(y), in[2]};
}

struct Inputs {
  Array x, w, b;
  std::vector<Array> list() const { return {x, w, b}; }
};

Inputs inputs(uint64_t seed) {
  return {random_array({kBatch, kIn}, float32, seed, -2, 2), random_array({kIn, kOut}, float32, seed + 1),
          random_array({kOut}, float32, seed + 2)};
}

// Host memory for every output of `layer`, filled with a pattern no result has.
struct Spans {
  std::vector<float> y = std::vector<float>(kBatch * kOut, -7.0f);
  std::vector<float> yt = std::vector<float>(kOut * kBatch, -7.0f);
  std::vector<float> rows = std::vector<float>((kBatch - 2) * kOut, -7.0f);
  std::vector<int32_t> best = std::vector<int32_t>(kBatch, -7);
  float total = -7.0f;
  std::vector<float> bias = std::vector<float>(kOut, -7.0f);
  std::vector<OutputSpan> list() { return {y, yt, rows, best, std::span(&total, 1), bias}; }
};

template <class T>
void expect_same_bits(const Array& expected, const std::vector<T>& actual, const char* what) {
  const std::vector<T> e = expected.to_vector<T>();
  ASSERT_EQ(e.size(), actual.size()) << what;
  EXPECT_EQ(std::memcmp(e.data(), actual.data(), e.size() * sizeof(T)), 0) << what;
}

void expect_same_bits(const std::vector<Array>& expected, Spans& s) {
  expect_same_bits(expected[0], s.y, "y");
  expect_same_bits(expected[1], s.yt, "transpose(y)");
  expect_same_bits(expected[2], s.rows, "rows 2..");
  expect_same_bits(expected[3], s.best, "argmax");
  expect_same_bits(expected[4], std::vector<float>{s.total}, "sum");
  expect_same_bits(expected[5], s.bias, "the input passed through");
}

// tanh(x w + b) in float64 from the inputs' values: the reference the spans are checked against.
std::vector<double> reference(const Inputs& in) {
  const std::vector<double> x = values(in.x), w = values(in.w), b = values(in.b);
  std::vector<double> y(kBatch * kOut);
  for (int64_t i = 0; i < kBatch; ++i)
    for (int64_t j = 0; j < kOut; ++j) {
      double acc = b[j];
      for (int64_t k = 0; k < kIn; ++k) acc += x[i * kIn + k] * w[k * kOut + j];
      y[i * kOut + j] = std::tanh(acc);
    }
  return y;
}

TEST(CompilePositional, WritesEachOutputIntoItsSpanAsTheNormalCallComputesIt) {
  auto f = compile(layer);
  const Inputs in = inputs(1);
  const std::vector<double> ref = reference(in);
  // Call 1 traces, call 2 captures on the GPU, call 3 replays the capture.
  for (int call = 0; call < 3; ++call) {
    Spans s;
    f.call_into(in.list(), s.list());
    expect_same_bits(f(in.list()), s);
    for (size_t k = 0; k < ref.size(); ++k) {
      EXPECT_NEAR(s.y[k], ref[k], 1e-5) << "call " << call << ", element " << k;
      const int64_t i = static_cast<int64_t>(k) / kOut, j = static_cast<int64_t>(k) % kOut;
      EXPECT_EQ(s.yt[j * kBatch + i], s.y[k]);
      if (i >= 2) {
        EXPECT_EQ(s.rows[(i - 2) * kOut + j], s.y[k]);
      }
    }
    double total = 0;
    for (double v : ref) total += v;
    EXPECT_NEAR(s.total, total, 1e-4);
  }
  EXPECT_EQ(f.trace_count(), 1);
}

TEST(CompilePositional, TakesSpansOfEveryKindAndRawBytes) {
  auto f = compile([](const std::vector<Array>& in) {
    return std::vector<Array>{astype(in[0] * 3.0f, float16), in[0] > 0.25f, astype(in[0] * 100.0f, int32),
                              slice(in[0], {0}, {0})};
  });
  const Array x = random_array({5}, float32, 4);
  const std::vector<Array> expected = f({x});
  std::array<float16_t, 5> halves{};
  bool flags[5] = {};
  auto ints = std::make_unique<int32_t[]>(5);
  std::vector<float> none;
  f.call_into({x}, {halves, flags, OutputSpan(ints.get(), 5 * sizeof(int32_t), int32), none});
  const std::vector<float16_t> h = expected[0].to_vector<float16_t>();
  EXPECT_EQ(std::memcmp(h.data(), halves.data(), sizeof halves), 0);
  const std::vector<bool> e = expected[1].to_vector<bool>();
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(flags[i], e[i]) << i;
  expect_same_bits(expected[2], std::vector<int32_t>(ints.get(), ints.get() + 5), "int32 from raw bytes");
  EXPECT_EQ(expected[3].size(), 0);
  // A zero-size output takes only an empty span.
  std::vector<float> one(1);
  EXPECT_THROW(f.call_into({x}, {halves, flags, OutputSpan(ints.get(), 5 * sizeof(int32_t), int32), one}),
               ValueError);
}

TEST(CompilePositional, BadSpansThrowBeforeAnythingIsWritten) {
  auto f = compile(layer);
  const Inputs in = inputs(2);
  Spans s;
  std::vector<OutputSpan> spans = s.list();
  const auto untouched = [&] {
    for (float v : s.y) ASSERT_EQ(v, -7.0f);
    for (float v : s.bias) ASSERT_EQ(v, -7.0f);
    ASSERT_EQ(s.total, -7.0f);
  };
  // One span short, one too many.
  const std::span<const OutputSpan> all(spans);
  EXPECT_NE(test::error_of<ValueError>([&] { f.call_into(in.list(), all.first(5)); }).find("6 outputs"),
            std::string::npos);
  std::vector<OutputSpan> seven = spans;
  seven.push_back(s.bias);
  EXPECT_THROW(f.call_into(in.list(), seven), ValueError);
  untouched();
  // A float64 span for a float32 output; raw bytes that claim the wrong dtype.
  std::vector<double> wide(kBatch * kOut);
  spans[0] = wide;
  EXPECT_NE(test::error_of<DtypeError>([&] { f.call_into(in.list(), spans); }).find("output 0"),
            std::string::npos);
  spans[0] = OutputSpan(s.y.data(), s.y.size() * sizeof(float), int32);
  EXPECT_THROW(f.call_into(in.list(), spans), DtypeError);
  untouched();
  // Too few and too many bytes (the last output, so every earlier one passed its check).
  spans[0] = s.y;
  std::vector<float> short_bias(kOut - 1), long_bias(kOut + 1);
  spans[5] = short_bias;
  const std::string message = test::error_of<ValueError>([&] { f.call_into(in.list(), spans); });
  EXPECT_NE(message.find("output 5 of shape (8,)"), std::string::npos) << message;
  spans[5] = long_bias;
  EXPECT_THROW(f.call_into(in.list(), spans), ValueError);
  spans[5] = OutputSpan(nullptr, kOut * sizeof(float), float32);
  EXPECT_THROW(f.call_into(in.list(), spans), ValueError);
  untouched();
  // Every one of them is a kiln::Error, and so is a bad input.
  EXPECT_THROW(f.call_into(in.list(), all.first(1)), Error);
  EXPECT_THROW(f.call_into({in.x, in.w, Array()}, s.list()), ValueError);
  untouched();
  for (float v : short_bias) EXPECT_EQ(v, 0.0f);
}

TEST(CompilePositional, AWarmCallHoldsNoMoreHostMemoryThanTheLast) {
  // Large enough that a host copy of the output would show: 256 x 1024 float32, 1 MiB.
  auto f =
      compile([](const std::vector<Array>& in) { return std::vector<Array>{tanh(in[0] * 0.5f) + in[0]}; });
  const Array x = random_array({256, 1024}, float32, 3);
  eval(x);
  std::vector<float> out(256 * 1024);
  for (int i = 0; i < 3; ++i) f.call_into({x}, {out});  // trace, capture (GPU), replay
  const MemoryStats before = memory_stats();
  const test::DeviceMemory device_before = test::default_device_memory();
  reset_peak_memory();
  f.call_into({x}, {out});
  const MemoryStats first = memory_stats();
  const test::DeviceMemory device_first = test::default_device_memory();
  for (int i = 0; i < 20; ++i) f.call_into({x}, {out});
  const MemoryStats after = memory_stats();
  EXPECT_EQ(after.active_bytes, before.active_bytes);
  EXPECT_EQ(after.peak_bytes, first.peak_bytes);
  EXPECT_EQ(test::default_device_memory().active_bytes, device_before.active_bytes);
  EXPECT_EQ(test::default_device_memory().peak_bytes, device_first.peak_bytes);
  if (test::gpu_default()) {
    // The output goes from device memory into `out` directly: no host buffer of its size was made
    // (reading it through the array would have made one).
    EXPECT_LT(first.peak_bytes - before.active_bytes, out.size() * sizeof(float));
  }
  expect_same_bits(f({x})[0], out, "output");
  EXPECT_EQ(f.trace_count(), 1);
}

TEST(CompilePositional, ThreadsCallOneFunctionWithTheirOwnSpans) {
  auto f = compile(layer);
  constexpr int kThreads = 4, kCalls = 15;
  std::vector<Inputs> in;
  std::vector<std::vector<Array>> expected;
  std::vector<std::vector<float>> expected_y;
  std::vector<std::vector<int32_t>> expected_best;
  for (int t = 0; t < kThreads; ++t) {
    in.push_back(inputs(10 + 3 * static_cast<uint64_t>(t)));
    expected.push_back(f(in.back().list()));
    expected_y.push_back(expected.back()[0].to_vector<float>());
    expected_best.push_back(expected.back()[3].to_vector<int32_t>());
  }
  std::vector<Spans> spans(kThreads);
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c) {
        Spans s;
        f.call_into(in[t].list(), s.list());
        const std::vector<float>& y = expected_y[t];
        if (std::memcmp(y.data(), s.y.data(), y.size() * sizeof(float)) != 0 || expected_best[t] != s.best)
          ++mismatches[t];
        spans[t] = s;
      }
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(mismatches[t], 0) << "thread " << t;
    expect_same_bits(expected[t], spans[t]);
  }
  EXPECT_EQ(f.trace_count(), 1);
}

}  // namespace
}  // namespace kiln
