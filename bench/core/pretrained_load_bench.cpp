// Issue 31's load benchmark: a GPT-2-small folder (124M parameters, 498 MB of float32 safetensors,
// written once by kiln into $TMPDIR/kiln_gpt2_small) loaded with models::from_pretrained, every
// weight then read once (a sum per tensor, so each mapped page is touched), against the peer: read()
// of the same file into one buffer. Warm page cache for both (the file was just written or read).
// Counters: GB_per_s of file bytes, rss_MB (resident memory added by the step, from
// /proc/self/statm: the mapping's pages count as resident once touched). Target: load <= 1.2x read.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <kiln/kiln.h>
#include <kiln/models/pretrained/gpt2.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

namespace {

using kiln::Array;
namespace models = kiln::models;

const std::filesystem::path& folder() {
  static const std::filesystem::path dir = [] {
    const auto d = std::filesystem::temp_directory_path() / "kiln_gpt2_small";
    if (!std::filesystem::exists(d / "model.safetensors")) {
      models::Gpt2LMHeadModel gpt2(models::Gpt2Config::from_gpt({.vocab_size = 50257,
                                                                 .context = 1024,
                                                                 .d_model = 768,
                                                                 .heads = 12,
                                                                 .layers = 12,
                                                                 .tie_embeddings = true,
                                                                 .key = kiln::random::key(0)}));
      models::save_pretrained(gpt2, d);
    }
    return d;
  }();
  return dir;
}

double resident_mb() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1e6;
}

double file_bytes() {
  return static_cast<double>(std::filesystem::file_size(folder() / "model.safetensors"));
}

void BM_ReadFile(benchmark::State& st) {
  const auto path = folder() / "model.safetensors";
  const auto size = static_cast<size_t>(file_bytes());
  double rss = 0;
  for (auto _ : st) {
    const double before = resident_mb();
    // Uninitialized, as a loader's buffer: read() faults each page in once.
    const std::unique_ptr<char[]> buffer(new char[size]);
    const int fd = ::open(path.c_str(), O_RDONLY);
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::read(fd, buffer.get() + done, size - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    benchmark::DoNotOptimize(buffer.get());
    rss = resident_mb() - before;
  }
  st.counters["GB_per_s"] =
      benchmark::Counter(file_bytes() / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["rss_MB"] = rss;
}
BENCHMARK(BM_ReadFile)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

void BM_FromPretrained(benchmark::State& st) {
  double rss = 0;
  for (auto _ : st) {
    const double before = resident_mb();
    const auto lm = models::causal_lm_from_pretrained(folder());
    std::vector<Array> sums;
    for (const auto& [key, value] : lm->parameters()) sums.push_back(kiln::sum(value));
    kiln::eval(sums);
    rss = resident_mb() - before;
  }
  st.counters["GB_per_s"] =
      benchmark::Counter(file_bytes() / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["rss_MB"] = rss;
}
BENCHMARK(BM_FromPretrained)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
