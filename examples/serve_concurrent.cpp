// Serves a classifier from many threads at once: the weights (the small CNN, LeNet-5 or an MLP in an
// HDF5 file, as train_fashion_mnist writes them)
// are loaded into an nn::MaterializedModule, an immutable model any number of threads may call,
// and --requests requests are answered first by one thread, then by --threads threads taking
// requests from a shared queue. Request i classifies --batch random images drawn from its own
// key (split i of the --seed key), so its answer does not depend on which thread serves it or
// when: every output of the threaded run is checked, bit for bit, against the one-thread run, and
// the first few of that against requests computed directly on the main thread beforehand. It
// prints requests/s, images/s and latency percentiles (p50, p99) for both runs.
//
// Without --weights it initializes a --model from --seed, saves it to a temporary HDF5 file and
// loads that back (the file is removed at the end), so the program runs without a trained model.
//
//   build/release/examples/serve_concurrent                                  # untrained MLP
//   build/release/examples/serve_concurrent --weights cnn_run/weights.h5 --threads 8 --batch 16
#include <fmt/format.h>
#include <kiln/kiln.h>
#include <kiln/models/lenet.h>
#include <kiln/models/mlp.h>
#include <kiln/models/small_cnn.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using kiln::Array;
namespace io = kiln::io;
namespace nn = kiln::nn;
namespace models = kiln::models;
constexpr const char* kProgram = "serve_concurrent";

struct Settings {
  std::string weights;
  std::string model = "mlp";
  int64_t requests = 256;
  int threads = 8;
  int64_t batch = 32;
  int64_t check = 4;
  uint64_t seed = 0;
};

// What the workers of one run report, merged once per thread at its end.
struct RunStats {
  std::vector<double> latencies;  // seconds per request, in no particular order
  std::vector<int64_t> served;    // requests per thread
  std::exception_ptr error;       // the first exception a worker met
};

struct RunResult {
  double seconds = 0;
  std::vector<double> latencies;            // sorted
  std::vector<int64_t> served;              // requests per thread
  std::vector<std::vector<float>> outputs;  // the logits of request i, row-major
};

// The images of request `i`: uniform in [0, 1), drawn from its own key only.
Array request_images(const std::vector<Array>& keys, int64_t i, int64_t batch) {
  return kiln::random::uniform({batch, 28, 28}, keys[static_cast<size_t>(i)]);
}

template <class M>
std::vector<float> answer(const nn::MaterializedModule<M>& model, const std::vector<Array>& keys, int64_t i,
                          int64_t batch) {
  const Array logits = model(request_images(keys, i, batch));
  return logits.to_vector<float>();  // evaluates on this thread
}

// Answers every request with `threads` workers that take request numbers from one atomic counter.
// Each output slot is written by the one worker that took its request, so they need no lock;
// the statistics each worker gathers go to an Exclusive<RunStats> once, when it is done.
template <class M>
RunResult serve(const nn::MaterializedModule<M>& model, const std::vector<Array>& keys, int64_t batch,
                int threads) {
  const auto n = static_cast<int64_t>(keys.size());
  RunResult result;
  result.outputs.resize(keys.size());
  std::atomic<int64_t> next{0};
  kiln::Exclusive<RunStats> stats;
  const auto worker = [&] {
    std::vector<double> latencies;
    try {
      for (int64_t i = next++; i < n; i = next++) {
        const auto start = std::chrono::steady_clock::now();
        result.outputs[static_cast<size_t>(i)] = answer(model, keys, i, batch);
        latencies.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
    } catch (...) {
      next = n;  // the others stop after their current request
      stats.with([](RunStats& s) {
        if (!s.error) s.error = std::current_exception();
      });
    }
    stats.with([&](RunStats& s) {
      s.latencies.insert(s.latencies.end(), latencies.begin(), latencies.end());
      s.served.push_back(static_cast<int64_t>(latencies.size()));
    });
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::jthread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  pool.clear();  // joins
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats.with([&](RunStats& s) {
    if (s.error) std::rethrow_exception(s.error);
    result.latencies = std::move(s.latencies);
    result.served = std::move(s.served);
  });
  std::sort(result.latencies.begin(), result.latencies.end());
  return result;
}

// The p-quantile (nearest rank) of sorted values.
double percentile(const std::vector<double>& sorted, double p) {
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void report(const char* label, int threads, const RunResult& r, int64_t batch) {
  const auto n = static_cast<double>(r.outputs.size());
  fmt::print(
      "{:<10} {:>2} thread{}: {:8.1f} requests/s {:9.1f} images/s   latency p50 {:7.2f} ms, p99 {:7.2f} ms"
      "   (requests per thread: {})\n",
      label, threads, threads == 1 ? " " : "s", n / r.seconds, n * static_cast<double>(batch) / r.seconds,
      1e3 * percentile(r.latencies, 0.5), 1e3 * percentile(r.latencies, 0.99), fmt::join(r.served, " "));
}

template <class M>
int run(const Settings& s, std::unique_ptr<M> net) {
  const nn::MaterializedModule<M> model(std::move(net));
  fmt::print("{} parameters, materialized; {} requests of {} images\n", nn::num_elements(model.parameters()),
             s.requests, s.batch);
  const std::vector<Array> keys =
      kiln::random::split_keys(kiln::random::key(s.seed), static_cast<int>(s.requests));
  kiln::eval(keys);

  // The reference: the first requests answered directly, one after the other, on this thread.
  std::vector<std::vector<float>> direct;
  for (int64_t i = 0; i < std::min(s.check, s.requests); ++i)
    direct.push_back(answer(model, keys, i, s.batch));

  const RunResult serial = serve(model, keys, s.batch, 1);
  report("serial", 1, serial, s.batch);
  const RunResult threaded = serve(model, keys, s.batch, s.threads);
  report("concurrent", s.threads, threaded, s.batch);
  fmt::print("speed-up with {} threads: {:.2f}x ({} hardware threads)\n", s.threads,
             serial.seconds / threaded.seconds, std::thread::hardware_concurrency());

  int64_t mismatches = 0;
  for (size_t i = 0; i < direct.size(); ++i)
    if (!same_bits(direct[i], serial.outputs[i])) {
      fmt::print(stderr, "request {}: the one-thread run differs from the direct answer\n", i);
      ++mismatches;
    }
  for (size_t i = 0; i < serial.outputs.size(); ++i)
    if (!same_bits(serial.outputs[i], threaded.outputs[i])) {
      fmt::print(stderr, "request {}: the {}-thread run differs from the one-thread run\n", i, s.threads);
      ++mismatches;
    }
  if (mismatches > 0) {
    fmt::print(stderr, "{}: {} outputs differ\n", kProgram, mismatches);
    return 1;
  }
  fmt::print(
      "all {} outputs of the {}-thread run equal the one-thread run's bit for bit ({} checked against "
      "direct calls too)\n",
      s.requests, s.threads, direct.size());
  return 0;
}

// Removes a file when it goes out of scope (the temporary weights).
struct RemoveFile {
  std::filesystem::path path;
  ~RemoveFile() {
    std::error_code ignored;
    if (!path.empty()) std::filesystem::remove(path, ignored);
  }
};

int run(Settings s) {
  RemoveFile temporary;
  if (s.weights.empty()) {
    temporary.path =
        std::filesystem::temp_directory_path() / fmt::format("kiln_serve_concurrent_{}.h5", ::getpid());
    kiln::random::seed(s.seed);
    if (s.model == "cnn")
      models::SmallCnn().save_weights(temporary.path);
    else if (s.model == "lenet")
      models::LeNet().save_weights(temporary.path);
    else
      models::Mlp({.in_features = 784, .hidden = {512, 512}, .out_features = 10})
          .save_weights(temporary.path);
    s.weights = temporary.path.string();
    fmt::print("no --weights: initialized a {} from seed {}, saved it to {} and load it from there\n",
               s.model, s.seed, s.weights);
  } else if (!std::filesystem::exists(s.weights)) {
    throw kiln::RuntimeError::of(kProgram, "weights not found",
                                 "{} does not exist (train_fashion_mnist --out DIR writes "
                                 "DIR/weights.h5; without --weights an untrained model is served)",
                                 s.weights);
  }

  // The architecture follows from the file's keys and shapes.
  const nn::ParamTree weights = io::load_weights(s.weights);
  if (weights.contains("conv1.weight") && weights.contains("fc3.weight")) {
    auto net = std::make_unique<models::LeNet>(
        models::LeNetConfig{.in_channels = weights.at("conv1.weight").shape(1),
                            .num_classes = weights.at("fc3.weight").shape(0)});
    net->update(weights);
    fmt::print("LeNet-5 from {}\n", s.weights);
    return run(s, std::move(net));
  }
  if (weights.contains("conv1.weight") && weights.contains("fc2.weight")) {
    const Array& conv1 = weights.at("conv1.weight");
    const models::SmallCnnConfig c{.in_channels = conv1.shape(1),
                                   .num_classes = weights.at("fc2.weight").shape(0),
                                   .conv1_channels = conv1.shape(0),
                                   .conv2_channels = weights.at("conv2.weight").shape(0),
                                   .hidden = weights.at("fc1.weight").shape(0)};
    auto net = std::make_unique<models::SmallCnn>(c);
    net->update(weights);  // checks every shape, fc1's (the 28x28 images' 7x7 after pooling) too
    fmt::print("small CNN ({}, {} channels, fc {}) from {}\n", c.conv1_channels, c.conv2_channels, c.hidden,
               s.weights);
    return run(s, std::move(net));
  }
  if (weights.contains("layers.0.weight")) {
    models::MlpConfig c{.in_features = weights.at("layers.0.weight").shape(1), .hidden = {}};
    int64_t layers = 1;
    while (weights.contains(fmt::format("layers.{}.weight", layers))) ++layers;
    for (int64_t i = 0; i + 1 < layers; ++i)
      c.hidden.push_back(weights.at(fmt::format("layers.{}.weight", i)).shape(0));
    c.out_features = weights.at(fmt::format("layers.{}.weight", layers - 1)).shape(0);
    if (c.in_features != 28 * 28)
      throw kiln::ValueError::of(kProgram, "not a 28x28 image classifier", "{}: the MLP takes {} inputs",
                                 s.weights, c.in_features);
    auto net = std::make_unique<models::Mlp>(c);
    net->update(weights);
    fmt::print("MLP {}-{}-{} from {}\n", c.in_features, fmt::join(c.hidden, "-"), c.out_features, s.weights);
    return run(s, std::move(net));
  }
  throw kiln::KeyError::of(kProgram, "unknown model",
                           "{} holds no small CNN (conv1, conv2, fc1, fc2), LeNet-5 (..., fc3) or MLP "
                           "(layers.0, ...) weights; keys: {}",
                           s.weights, fmt::join(weights.keys(), ", "));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Serve a CNN, LeNet-5 or an MLP from many threads; check the outputs and measure throughput"};
  Settings s;
  app.add_option("--weights", s.weights,
                 "HDF5 weights of a small CNN, LeNet-5 or an MLP (default: a seeded untrained --model)");
  app.add_option("--model", s.model,
                 "the untrained model served without --weights: mlp (784-512-512-10), lenet or cnn")
      ->check(CLI::IsMember({"mlp", "lenet", "cnn"}))
      ->capture_default_str();
  app.add_option("--requests", s.requests, "requests per run")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--threads", s.threads, "threads of the concurrent run")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--batch", s.batch, "images per request")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--check", s.check, "requests also answered directly before the runs, as a reference")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--seed", s.seed, "seed of the requests' keys and of the untrained model")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    return run(s);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", kProgram, e.what());
    return 1;
  }
}
