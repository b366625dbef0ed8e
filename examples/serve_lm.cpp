// Serves a pretrained causal LM (a Hugging Face folder: config.json, safetensors, tokenizer) from
// several threads at once through one nn::MaterializedModule: the weights are shared and
// immutable, and every request decodes with its own KV cache (models::generate). Requests cycle
// through a few prompts. It prints a reply per prompt, the tokens per second of all threads
// together, and whether every reply to one prompt agrees (greedy decoding is deterministic, so
// they must).
//
//   build/release/examples/finetune_lm --init-model /tmp/tiny        # a tiny random model to try
//   build/release/examples/serve_lm --model /tmp/tiny --threads 4 --requests 32
//   build/release/examples/serve_lm --model TinyLlama --prompt "The capital of France is"
#include <fmt/format.h>
#include <kiln/kiln.h>
#include <kiln/models/pretrained/generate.h>
#include <kiln/models/pretrained/pretrained.h>
#include <kiln/models/pretrained/tokenizer.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace models = kiln::models;
namespace nn = kiln::nn;
constexpr const char* kProgram = "serve_lm";

struct Settings {
  std::string model;
  std::vector<std::string> prompts = {"The quick brown fox", "Once upon a time", "kiln serves"};
  int threads = 4;
  int64_t requests = 12, new_tokens = 24;
};

int run(const Settings& s) {
  const auto tokenizer = models::Tokenizer::from_pretrained(s.model);
  const nn::MaterializedModule<models::CausalLM> server(models::causal_lm_from_pretrained(s.model));
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& p : s.prompts) prompts.push_back(tokenizer.encode(p));
  std::vector<int32_t> stops;
  if (tokenizer.eos_id()) stops.push_back(*tokenizer.eos_id());

  std::atomic<int64_t> next{0}, tokens{0};
  std::mutex replies_mutex;
  std::map<size_t, std::vector<std::vector<int32_t>>> replies;  // by prompt
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < s.threads; ++t)
    workers.emplace_back([&] {
      for (int64_t r = next++; r < s.requests; r = next++) {
        const size_t p = static_cast<size_t>(r) % prompts.size();
        const auto out =
            models::generate(server.module(), {prompts[p]},
                             {.max_new_tokens = s.new_tokens, .temperature = 0, .stop_tokens = stops});
        tokens += static_cast<int64_t>(out.tokens[0].size());
        const std::lock_guard lock(replies_mutex);
        replies[p].push_back(out.tokens[0]);
      }
    });
  for (auto& w : workers) w.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  bool agree = true;
  for (const auto& [p, rs] : replies) {
    fmt::print("prompt \"{}\": {} replies, e.g. \"{}\"\n", s.prompts[p], rs.size(),
               tokenizer.decode(rs.front(), /*skip_special_tokens=*/true));
    for (const auto& r : rs) agree = agree && r == rs.front();
  }
  fmt::print("{} requests on {} threads: {} tokens in {:.2f} s, {:.1f} tokens/s\n", s.requests, s.threads,
             tokens.load(), seconds, static_cast<double>(tokens.load()) / seconds);
  if (!agree) {
    fmt::print("replies to one prompt differ between requests\n");
    return 1;
  }
  fmt::print("every reply to a prompt agrees\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Serve a pretrained causal LM from several threads through one MaterializedModule"};
  Settings s;
  app.add_option("--model", s.model, "a Hugging Face model folder (config.json, safetensors, tokenizer)")
      ->required();
  app.add_option("--prompt", s.prompts, "prompts the requests cycle through (repeatable)");
  app.add_option("--threads", s.threads, "serving threads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--requests", s.requests, "requests in all")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--new-tokens", s.new_tokens, "tokens per reply (greedy)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(s);
  } catch (const kiln::Error& e) {
    fmt::print(stderr, "{}: {}\n", kProgram, e.what());
    return 1;
  }
}
