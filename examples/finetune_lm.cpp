// Fine-tunes a pretrained causal LM from a Hugging Face folder (config.json, model.safetensors,
// tokenizer.json or tokenizer.model) on a text or JSONL file with LoRA, and saves the adapter in
// PEFT's layout: `PeftModel.from_pretrained(base, "<out>/adapter")` loads it unchanged.
//
// - Data: a .txt file is one document; a .jsonl file has one JSON object per line whose "text" field
//   is a document. Documents are tokenized (BOS as the tokenizer adds it, EOS after each when the
//   tokenizer has one), concatenated, and cut into windows of --context + 1 tokens; the last
//   --val-fraction of the windows (at least one) is held out.
// - Adapters on --targets (q_proj,v_proj by default: Llama, Mistral, Qwen2; c_attn for GPT-2) with
//   --rank, --alpha and --lora-dropout; every other weight is frozen. --adapter DIR starts from a
//   saved PEFT adapter instead (its own rank and targets).
// - AdamW with a linear warm-up and a cosine decay to lr / 10, gradients clipped to --clip, a
//   progress bar with the step loss, the validation loss every --eval-every steps and at the end.
// - Checkpoints (adapters, AdamW state, step, data position) to <out>/ckpt-<step>.ckpt every
//   --ckpt-every steps and at the end (the last two kept); --resume continues from the newest.
// - At the end: <out>/adapter (adapter_config.json, adapter_model.safetensors) and <out>/metrics.csv;
//   with --merge also <out>/merged, a plain model folder with the adapters folded in (and the
//   tokenizer files copied).
// - --quantize 4 (or 8) is QLoRA: the base's layers are quantized (nn::quantize, the head left in
//   float) and the adapters train over them; --merge then folds the adapter into the float base.
// - --init-model DIR writes a small random Llama with a byte-level tokenizer there and exits, for
//   trying the example (and its tests) without a download.
//
//   build/release/examples/finetune_lm --init-model /tmp/tiny
//   build/release/examples/finetune_lm --model /tmp/tiny --data notes.txt --out run --steps 50
//   build/release/examples/finetune_lm --model TinyLlama --data chat.jsonl --out run --merge
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <kiln/kiln.h>
#include <kiln/models/pretrained/llama.h>
#include <kiln/models/pretrained/peft.h>
#include <kiln/models/pretrained/pretrained.h>
#include <kiln/models/pretrained/tokenizer.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

using kiln::Array;
namespace io = kiln::io;
namespace nn = kiln::nn;
namespace optim = kiln::optim;
namespace models = kiln::models;
constexpr const char* kProgram = "finetune_lm";

struct Settings {
  std::string model, data, out = "finetune_lm_run", adapter, init_model;
  std::string targets = "q_proj,v_proj";
  int64_t rank = 8;
  double alpha = 16, lora_dropout = 0.05;
  int64_t context = 128, batch_size = 4, steps = 100, warmup = 10;
  double lr = 2e-4, weight_decay = 0.0, clip = 1.0, val_fraction = 0.1;
  int64_t eval_every = 50, ckpt_every = 50;
  uint64_t seed = 0;
  bool resume = false, merge = false, gradient_checkpointing = true;
  int quantize = 0, group_size = 64;  // QLoRA: the base's weights in this many bits (0: float)
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The documents of a .txt (one) or .jsonl (one per line, its "text") file.
std::vector<std::string> read_documents(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw kiln::RuntimeError::of(kProgram, "cannot open the data", "{}", path.string());
  std::vector<std::string> docs;
  if (path.extension() != ".jsonl") {
    docs.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return docs;
  }
  int64_t line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw kiln::FormatError::of(kProgram, "a JSONL line is not JSON", "{}:{}: {}", path.string(),
                                  line_number, e.what());
    }
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      throw kiln::FormatError::of(kProgram, "a JSONL line has no \"text\" string", "{}:{}", path.string(),
                                  line_number);
    docs.push_back(j["text"].get<std::string>());
  }
  return docs;
}

// Linear warm-up from lr / warmup to lr, then a cosine decay to lr / 10 at the last step.
optim::LearningRate schedule(const Settings& s) {
  const int64_t warmup = std::min(s.warmup, s.steps - 1);
  const optim::Schedule decay = optim::cosine_decay(s.lr, std::max<int64_t>(1, s.steps - warmup), s.lr / 10);
  if (warmup < 1) return decay;
  return optim::join_schedules(
      {optim::linear_schedule(s.lr / static_cast<double>(warmup), s.lr, warmup), decay}, {warmup});
}

// A tiny random Llama and a byte-level BPE tokenizer (the 256 bytes, no merges) in `dir`.
void init_model(const std::filesystem::path& dir) {
  kiln::random::seed(0);
  models::LlamaForCausalLM lm({.vocab_size = 258,
                               .hidden_size = 64,
                               .intermediate_size = 128,
                               .num_hidden_layers = 2,
                               .num_attention_heads = 4,
                               .num_key_value_heads = 2,
                               .max_position_embeddings = 512});
  models::save_pretrained(lm, dir);
  // GPT-2's byte-to-character map: printable bytes are themselves, the rest move past 255.
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const int code = printable ? b : next++;
    std::string utf8;
    if (code < 0x80) {
      utf8.push_back(static_cast<char>(code));
    } else {
      utf8.push_back(static_cast<char>(0xC0 | (code >> 6)));
      utf8.push_back(static_cast<char>(0x80 | (code & 0x3F)));
    }
    vocab[utf8] = b;
  }
  nlohmann::ordered_json tok = {
      {"version", "1.0"},
      {"added_tokens",
       {{{"id", 256},
         {"content", "<s>"},
         {"special", true},
         {"single_word", false},
         {"lstrip", false},
         {"rstrip", false},
         {"normalized", false}},
        {{"id", 257},
         {"content", "</s>"},
         {"special", true},
         {"single_word", false},
         {"lstrip", false},
         {"rstrip", false},
         {"normalized", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  std::ofstream(dir / "tokenizer.json") << tok.dump(1);
  std::ofstream(dir / "tokenizer_config.json")
      << nlohmann::json{{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"add_bos_token", true}}.dump(1);
  fmt::print("wrote a random Llama ({} parameters) and a byte-level tokenizer to {}\n",
             nn::num_elements(lm.parameters()), dir.string());
}

double validation_loss(models::CausalLM& lm, io::DataLoader& val) {
  lm.train(false);
  double sum = 0;
  int64_t tokens = 0;
  for (const auto& batch : val.epoch(0)) {
    const Array loss = nn::cross_entropy(kiln::reshape(lm.forward(batch[0]), {-1, lm.vocab_size()}),
                                         kiln::reshape(batch[1], {-1}), {.reduction = nn::Reduction::sum});
    sum += loss.item<float>();
    tokens += batch[1].size();
  }
  lm.train(true);
  return sum / static_cast<double>(tokens);
}

int run(const Settings& s) {
  const auto lm = models::causal_lm_from_pretrained(s.model, {.dtype = kiln::float32});
  const auto tokenizer = models::Tokenizer::from_pretrained(s.model);
  if (s.context + 1 > lm->max_positions())
    throw kiln::ValueError::of(kProgram, "--context is past the model's position limit", "{} + 1 > {}",
                               s.context, lm->max_positions());

  // Tokens of every document, then windows of context + 1 (inputs and their next tokens).
  std::vector<int32_t> tokens;
  for (const std::string& doc : read_documents(s.data)) {
    const auto ids = tokenizer.encode(doc);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    if (tokenizer.eos_id()) tokens.push_back(*tokenizer.eos_id());
  }
  const auto windows = static_cast<int64_t>(tokens.size() - 1) / s.context;
  const int64_t val_windows =
      std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(windows) * s.val_fraction));
  const int64_t train_windows = windows - val_windows;
  if (train_windows < 1)
    throw kiln::ValueError::of(kProgram, "the data is too short", "{}: {} tokens make {} windows of {}",
                               s.data, tokens.size(), windows, s.context + 1);
  auto window_arrays = [&](int64_t first, int64_t count) {
    std::vector<int32_t> x, y;
    for (int64_t w = first; w < first + count; ++w) {
      const auto begin = tokens.begin() + w * s.context;
      x.insert(x.end(), begin, begin + s.context);
      y.insert(y.end(), begin + 1, begin + s.context + 1);
    }
    return std::make_shared<io::ArrayDataset>(
        std::vector<Array>{Array(x, {count, s.context}), Array(y, {count, s.context})});
  };
  io::DataLoader loader(window_arrays(0, train_windows), {.batch_size = std::min(s.batch_size, train_windows),
                                                          .shuffle = true,
                                                          .seed = s.seed,
                                                          .drop_last = true});
  io::DataLoader val(window_arrays(train_windows, val_windows), {.batch_size = s.batch_size});

  models::PeftLoRAConfig peft{.lora = {.r = s.rank,
                                       .alpha = s.alpha,
                                       .dropout = s.lora_dropout,
                                       .target_modules = split_list(s.targets),
                                       .key = kiln::random::key(s.seed)},
                              .base_model_name_or_path = s.model};
  if (s.quantize) {  // QLoRA: the adapters train over the frozen quantized base (the head stays float)
    const auto layers =
        nn::quantize(*lm, {.bits = s.quantize, .group_size = s.group_size, .skip = {"lm_head"}});
    fmt::print("quantized {} layers to {} bits (groups of {})\n", layers.size(), s.quantize, s.group_size);
  }
  if (!s.adapter.empty()) {
    peft = models::load_peft_adapter(*lm, s.adapter);
    peft.base_model_name_or_path = s.model;
  } else {
    nn::add_lora(*lm, peft.lora);
  }
  kiln::random::seed(s.seed);  // the dropout masks' keys
  fmt::print("{}: {} tokens, {} training windows of {}, {} for validation\n", s.data, tokens.size(),
             train_windows, s.context, val_windows);
  fmt::print("{} ({}): {} parameters, {} trainable (LoRA r {} on {}), gradient checkpointing {}\n", s.model,
             lm->model_type(), nn::num_elements(lm->parameters()),
             nn::num_elements(lm->trainable_parameters()), peft.lora.r,
             fmt::join(peft.lora.target_modules, ","), s.gradient_checkpointing ? "on" : "off");

  optim::AdamW opt({.lr = schedule(s), .weight_decay = s.weight_decay});
  io::CheckpointManager checkpoints(s.out, {.keep_last = 2});
  const std::map<std::string, std::string> metadata = {{"model", s.model}, {"data", s.data}};
  if (s.resume) {
    const auto latest = checkpoints.latest();
    if (!latest)
      throw kiln::RuntimeError::of(kProgram, "nothing to resume",
                                   "no checkpoint in {}: run without --resume first", s.out);
    io::restore_checkpoint(io::load_checkpoint(*latest), *lm, opt, &loader);
    fmt::print("resumed from step {} ({})\n", opt.step(), latest->string());
  }
  io::MetricsLog metrics;

  auto loss_and_grads = nn::value_and_grad(*lm, [&](const Array& x, const Array& y) {
    return nn::cross_entropy(kiln::reshape(lm->forward(x), {-1, lm->vocab_size()}), kiln::reshape(y, {-1}));
  });
  lm->train(true);
  lm->set_gradient_checkpointing(s.gradient_checkpointing);
  const auto start = std::chrono::steady_clock::now();
  const int64_t first_step = opt.step();
  double last_val = NAN;
  while (opt.step() < s.steps) {
    int64_t stop = s.steps;
    for (const int64_t every : {s.eval_every, s.ckpt_every})
      if (every > 0) stop = std::min(stop, (opt.step() / every + 1) * every);
    io::ProgressBar progress(stop - opt.step());
    double sum = 0;
    const int64_t stretch = stop - opt.step();
    while (opt.step() < stop) {
      const io::Batch batch = loader.next();
      auto [loss, grads] = loss_and_grads(batch[0], batch[1]);
      const auto clipped = optim::clip_grad_norm(grads, s.clip);
      opt.update(*lm, clipped.grads);
      const auto params = lm->trainable_parameters();
      nn::eval({&params, &opt.state()});
      const double value = loss.item<float>();
      if (!std::isfinite(value))
        throw kiln::RuntimeError::of(kProgram, "training diverged", "loss {} at step {}: try a lower --lr",
                                     value, opt.step());
      sum += value;
      progress.step(batch.size(), value);
      metrics.log({{"step", static_cast<double>(opt.step())}, {"loss", value}, {"lr", opt.learning_rate()}});
    }
    progress.finish();
    const bool at_end = opt.step() == s.steps;
    if ((s.eval_every > 0 && opt.step() % s.eval_every == 0) || at_end) {
      last_val = validation_loss(*lm, val);
      metrics.log({{"step", static_cast<double>(opt.step())}, {"val_loss", last_val}});
      metrics.write_csv(std::filesystem::path(s.out) / "metrics.csv");
      fmt::print("step {}/{}: train loss {:.4f}, validation loss {:.4f}, lr {:.2e}\n", opt.step(), s.steps,
                 sum / static_cast<double>(stretch), last_val, opt.learning_rate());
    }
    if ((s.ckpt_every > 0 && opt.step() % s.ckpt_every == 0) || at_end)
      fmt::print("checkpoint: {}\n", checkpoints.save(*lm, opt, &loader, metadata).string());
    std::fflush(stdout);
  }
  if (std::isnan(last_val)) last_val = validation_loss(*lm, val);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto trained_tokens =
      static_cast<double>((opt.step() - first_step) * loader.options().batch_size * s.context);
  const auto adapter_dir = std::filesystem::path(s.out) / "adapter";
  models::save_peft_adapter(*lm, adapter_dir, peft);
  fmt::print("adapter: {} (PEFT's layout)\n", adapter_dir.string());
  if (s.merge) {
    // A quantized base is merged as QLoRA users do: the adapter onto the float model, read again.
    std::unique_ptr<models::CausalLM> float_base;
    models::CausalLM* base = lm.get();
    if (s.quantize) {
      float_base = models::causal_lm_from_pretrained(s.model, {.dtype = kiln::float32});
      models::load_peft_adapter(*float_base, adapter_dir);
      base = float_base.get();
    }
    nn::merge_lora(*base);
    const auto merged = std::filesystem::path(s.out) / "merged";
    models::save_pretrained(*base, merged);
    for (const char* f : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json"})
      if (std::filesystem::exists(std::filesystem::path(s.model) / f))
        std::filesystem::copy_file(std::filesystem::path(s.model) / f, merged / f,
                                   std::filesystem::copy_options::overwrite_existing);
    fmt::print("merged model: {}\n", merged.string());
  }
  fmt::print("final validation loss after {} steps: {:.4f}; {:.0f} tokens/s\n", opt.step(), last_val,
             seconds > 0 ? trained_tokens / seconds : 0.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Fine-tune a pretrained causal LM with LoRA and save the adapter in PEFT's layout"};
  Settings s;
  app.add_option("--model", s.model, "a Hugging Face model folder (config.json, safetensors, tokenizer)");
  app.add_option("--data", s.data, "a .txt file (one document) or .jsonl file (a \"text\" per line)");
  app.add_option("--out", s.out, "folder of checkpoints, metrics, the adapter")->capture_default_str();
  app.add_option("--adapter", s.adapter, "start from this PEFT adapter folder (its rank and targets)");
  app.add_option("--init-model", s.init_model, "write a tiny random Llama with a byte-level tokenizer there");
  app.add_option("--targets", s.targets, "comma-separated module names to adapt")->capture_default_str();
  app.add_option("--rank", s.rank, "LoRA rank")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--alpha", s.alpha, "LoRA alpha (scale alpha / rank)")->capture_default_str();
  app.add_option("--lora-dropout", s.lora_dropout, "dropout on the adapters' input")->capture_default_str();
  app.add_option("--context", s.context, "tokens per training window")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--batch-size", s.batch_size, "windows per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--steps", s.steps, "the step to stop at (also with --resume)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lr", s.lr, "AdamW's peak learning rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--warmup", s.warmup, "linear warm-up steps")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--weight-decay", s.weight_decay, "AdamW's decoupled weight decay")->capture_default_str();
  app.add_option("--clip", s.clip, "gradient norm clipping")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--val-fraction", s.val_fraction, "windows held out")->capture_default_str();
  app.add_option("--eval-every", s.eval_every, "validation every N steps (0: at the end)")
      ->capture_default_str();
  app.add_option("--ckpt-every", s.ckpt_every, "checkpoint every N steps (0: at the end)")
      ->capture_default_str();
  app.add_option("--seed", s.seed, "data order, adapter init, dropout")->capture_default_str();
  app.add_flag("--resume", s.resume, "continue from the newest checkpoint in --out");
  app.add_flag("--gradient-checkpointing,!--no-gradient-checkpointing", s.gradient_checkpointing,
               "recompute each decoder layer in the backward pass instead of keeping its activations")
      ->capture_default_str();
  app.add_option("--quantize", s.quantize, "QLoRA: quantize the base model to 8 or 4 bits (0: float)")
      ->check(CLI::IsMember({0, 2, 4, 8}))
      ->capture_default_str();
  app.add_option("--group-size", s.group_size, "values per quantization group (32, 64 or 128)")
      ->check(CLI::IsMember({32, 64, 128}))
      ->capture_default_str();
  app.add_flag("--merge", s.merge, "also save <out>/merged: the adapters folded into a plain model folder");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!s.init_model.empty()) {
      init_model(s.init_model);
      return 0;
    }
    if (s.model.empty() || s.data.empty())
      throw kiln::ValueError::of(kProgram, "--model and --data are required",
                                 "or --init-model DIR to make one");
    return run(s);
  } catch (const kiln::Error& e) {
    fmt::print(stderr, "{}: {}\n", kProgram, e.what());
    return 1;
  }
}
