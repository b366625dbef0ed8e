// Trains a small character-level GPT (models::Gpt) on any text file with AdamW, a linear warm-up
// and a cosine decay, showing a progress bar, the validation loss every --eval-every steps and,
// at the end (and every --sample-every steps), text sampled from the model. The last 10% of the
// text is held out for validation; tokens are the text's distinct bytes.
//
// Checkpoints (model, AdamW state, step, the data loader's position and the default random key
// sequence, which draws the dropout masks) go to <out>/ckpt-<step>.ckpt every --ckpt-every steps
// and at the end, the last two kept. --resume continues from the newest one and prints its step.
// The model's shape, the text and the data order then come from the checkpoint (a flag given with
// another value is an error), and so do the optimizer's settings unless flags change them. --steps
// is the step to stop at and the end of the cosine decay, so a run interrupted and resumed with the
// same --steps takes the same steps as one never interrupted. The default run (the GNU GPL, 35 kB)
// takes about two and a half minutes on two cores and ends near validation loss 1.9 (random
// guessing: 4.33), its samples full of English and licence words.
//
//   build/release/examples/train_char_gpt                                  # GPL-3, 800 steps
//   build/release/examples/train_char_gpt --text book.txt --steps 3000 --context 128 --out book_run
//   build/release/examples/train_char_gpt --out book_run --resume --steps 3000   # after an interruption
//   build/release/examples/train_char_gpt --out book_run --resume --steps 5000   # longer (new decay)
#include <fmt/format.h>
#include <kiln/kiln.h>
#include <kiln/models/gpt.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using kiln::Array;
namespace io = kiln::io;
namespace nn = kiln::nn;
namespace optim = kiln::optim;
namespace random = kiln::random;
constexpr const char* kProgram = "train_char_gpt";

struct Settings {
  std::string text = "/usr/share/common-licenses/GPL-3";
  std::string out = "char_gpt_run";
  int64_t layers = 3;
  int64_t d_model = 128;
  int64_t heads = 4;
  int64_t context = 64;
  int64_t batch_size = 32;
  int64_t steps = 800;
  double lr = 3e-3;
  int64_t warmup = 50;
  double weight_decay = 0.1;
  double dropout = 0.1;
  double clip = 1.0;
  double val_fraction = 0.1;
  uint64_t seed = 0;
  int64_t eval_every = 100;
  int64_t sample_every = 0;
  int64_t ckpt_every = 200;
  int64_t sample_length = 300;
  double temperature = 0.8;
  int64_t top_k = 10;
  std::string prompt = "The ";
  bool resume = false;
};

// Windows first, first + step, ..., first + (count - 1) step of a TextDataset: the training and
// the validation part of one text, which must share its vocabulary (so they cannot be two
// TextDatasets of two halves of the text, whose distinct bytes may differ).
class Windows : public io::BatchSource {
 public:
  Windows(std::shared_ptr<const io::TextDataset> text, int64_t first, int64_t count, int64_t step)
      : text_(std::move(text)), first_(first), count_(count), step_(step) {}
  int64_t size() const override { return count_; }
  std::vector<Array> get_batch(std::span<const int64_t> indices) const override {
    std::vector<int64_t> windows;
    windows.reserve(indices.size());
    for (const int64_t i : indices) {
      if (i < 0 || i >= count_)
        throw kiln::ValueError::of("Windows::get_batch", "index out of range", "{} of {}", i, count_);
      windows.push_back(first_ + i * step_);
    }
    return text_->get_batch(windows);
  }

 private:
  std::shared_ptr<const io::TextDataset> text_;
  int64_t first_, count_, step_;
};

// The vocabulary as hex, stored in checkpoints so a resumed run can tell it reads the same text.
std::string vocabulary_hex(const io::TextDataset& text) {
  std::string hex;
  for (const uint8_t byte : text.vocabulary()) hex += fmt::format("{:02x}", byte);
  return hex;
}

// What a checkpoint records of its run: the settings by flag name (see OnResume) and what tells
// the text apart (its size and vocabulary).
std::map<std::string, std::string> run_metadata(const Settings& s, const io::TextDataset& text) {
  return {{"text", s.text},
          {"text_bytes", fmt::format("{}", text.tokens().size())},
          {"vocabulary", vocabulary_hex(text)},
          {"layers", fmt::format("{}", s.layers)},
          {"d-model", fmt::format("{}", s.d_model)},
          {"heads", fmt::format("{}", s.heads)},
          {"context", fmt::format("{}", s.context)},
          {"batch-size", fmt::format("{}", s.batch_size)},
          {"dropout", fmt::format("{}", s.dropout)},
          {"val-fraction", fmt::format("{}", s.val_fraction)},
          {"lr", fmt::format("{}", s.lr)},
          {"warmup", fmt::format("{}", s.warmup)},
          {"weight-decay", fmt::format("{}", s.weight_decay)},
          {"clip", fmt::format("{}", s.clip)},
          {"seed", fmt::format("{}", s.seed)}};
}

// Whether a resumed run may change an option the checkpoint recorded.
enum class OnResume {
  fixed,     // the model's shape, the text and the data order: a different value is an error
  override,  // the optimizer's settings: a value given on the command line wins
};

// Takes option `flag` from a checkpoint's metadata unless the command line gives it; see OnResume.
template <class T>
void adopt(const CLI::App& app, const std::map<std::string, std::string>& metadata, const std::string& flag,
           T& value, const std::filesystem::path& checkpoint, OnResume rule = OnResume::fixed) {
  const auto it = metadata.find(flag);
  if (it == metadata.end())
    throw kiln::FormatError::of(kProgram, "checkpoint lacks a setting", "{} has no metadata \"{}\"",
                                checkpoint.string(), flag);
  if (it->second == fmt::format("{}", value)) return;
  if (app.count("--" + flag) > 0) {
    if (rule == OnResume::fixed)
      throw kiln::ValueError::of(kProgram, "--resume with a different setting",
                                 "--{} {} given, but {} was trained with --{} {}", flag, value,
                                 checkpoint.string(), flag, it->second);
    fmt::print("note: --{} {} replaces the checkpoint's {}\n", flag, value, it->second);
    return;
  }
  if constexpr (std::is_same_v<T, std::string>) {
    value = it->second;
  } else {
    std::istringstream in(it->second);
    if (!(in >> value))
      throw kiln::FormatError::of(kProgram, "bad checkpoint metadata", "{}: \"{}\" = \"{}\"",
                                  checkpoint.string(), flag, it->second);
  }
}

// Linear warm-up from lr / warmup to lr, then a cosine decay to lr / 10 at the last step.
optim::LearningRate schedule(const Settings& s) {
  const int64_t warmup = std::min(s.warmup, s.steps - 1);
  const optim::Schedule decay = optim::cosine_decay(s.lr, std::max<int64_t>(1, s.steps - warmup), s.lr / 10);
  if (warmup < 1) return decay;
  return optim::join_schedules(
      {optim::linear_schedule(s.lr / static_cast<double>(warmup), s.lr, warmup), decay}, {warmup});
}

// Mean cross-entropy per token over every validation window (evaluation mode: no dropout).
double validation_loss(kiln::models::Gpt& model, io::DataLoader& val) {
  model.train(false);
  const int64_t vocab = model.config().vocab_size;
  double sum = 0;
  int64_t tokens = 0;
  for (const auto& batch : val.epoch(0)) {
    const Array loss = nn::cross_entropy(kiln::reshape(model(batch[0]), {-1, vocab}),
                                         kiln::reshape(batch[1], {-1}), {.reduction = nn::Reduction::sum});
    sum += loss.item<float>();
    tokens += batch[1].size();
  }
  model.train(true);
  return sum / static_cast<double>(tokens);
}

// `length` bytes sampled after `prompt`. Gpt::generate decodes at most `context` positions, so
// longer samples are made in chunks, each starting from the last context / 2 tokens so far; each
// chunk gets its own key, split from `key`, so equal keys give equal text.
std::string sample_text(const kiln::models::Gpt& model, const io::TextDataset& text, const Settings& s,
                        Array key) {
  std::vector<int32_t> tokens = text.encode(s.prompt);
  if (tokens.empty()) tokens.push_back(text.tokens().data<int32_t>()[0]);
  const size_t prompt_length = tokens.size();
  const int64_t context = model.config().context;
  int64_t produced = 0;
  while (produced < s.sample_length) {
    const int64_t window =
        std::min<int64_t>(static_cast<int64_t>(tokens.size()), std::max<int64_t>(1, context / 2));
    const int64_t n = std::min(s.sample_length - produced, context - window);
    const auto keys = random::split_keys(key);
    key = keys[0];
    const Array prompt(std::vector<int32_t>(tokens.end() - window, tokens.end()), {window});
    const Array out = model.generate(
        prompt, n,
        {.temperature = s.temperature, .top_k = std::min(s.top_k, text.vocab_size()), .key = keys[1]});
    const std::vector<int32_t> all = out.to_vector<int32_t>();
    tokens.insert(tokens.end(), all.begin() + window, all.end());
    produced += n;
  }
  return text.decode(std::span<const int32_t>(tokens).subspan(0, prompt_length)) + "|" +
         text.decode(std::span<const int32_t>(tokens).subspan(prompt_length));
}

void print_sample(const kiln::models::Gpt& model, const io::TextDataset& text, const Settings& s,
                  int64_t step) {
  fmt::print("--- sample at step {} (temperature {}, top-k {}; '|' ends the prompt) ---\n{}\n---\n", step,
             s.temperature, s.top_k, sample_text(model, text, s, random::key(s.seed)));
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int run(const CLI::App& app, Settings s) {
  std::optional<io::Checkpoint> resumed;
  std::filesystem::path resumed_from;
  if (s.resume) {
    io::CheckpointManager previous(s.out, {.keep_last = 2});
    const auto latest = previous.latest();
    if (!latest)
      throw kiln::RuntimeError::of(kProgram, "nothing to resume",
                                   "no checkpoint in {}: run without --resume first", s.out);
    resumed_from = *latest;
    resumed = io::load_checkpoint(*latest);
    const auto& m = resumed->metadata;
    adopt(app, m, "text", s.text, *latest);
    adopt(app, m, "layers", s.layers, *latest);
    adopt(app, m, "d-model", s.d_model, *latest);
    adopt(app, m, "heads", s.heads, *latest);
    adopt(app, m, "context", s.context, *latest);
    adopt(app, m, "batch-size", s.batch_size, *latest);
    adopt(app, m, "dropout", s.dropout, *latest);
    adopt(app, m, "val-fraction", s.val_fraction, *latest);
    adopt(app, m, "seed", s.seed, *latest);
    for (const auto& [flag, value] :
         {std::pair{"lr", &s.lr}, {"weight-decay", &s.weight_decay}, {"clip", &s.clip}})
      adopt(app, m, flag, *value, *latest, OnResume::override);
    adopt(app, m, "warmup", s.warmup, *latest, OnResume::override);
  }
  if (!std::filesystem::is_regular_file(s.text))
    throw kiln::RuntimeError::of(kProgram, "no text to train on",
                                 "{} is not a file: pass --text PATH (any text file, e.g. a book from "
                                 "gutenberg.org; the default is Debian's GNU GPL, package base-files)",
                                 s.text);

  const auto text = std::make_shared<const io::TextDataset>(io::TextDataset::from_file(s.text, s.context));
  if (resumed) {
    const auto recorded = run_metadata(s, *text);
    const auto& m = resumed->metadata;
    if (m.find("text_bytes") == m.end() || m.at("text_bytes") != recorded.at("text_bytes") ||
        m.find("vocabulary") == m.end() || m.at("vocabulary") != recorded.at("vocabulary"))
      throw kiln::ValueError::of(kProgram, "--resume with another text",
                                 "{} has changed since {} was written", s.text, resumed_from.string());
  }
  // Windows starting before `split` lie wholly in the training part; validation windows start at
  // `split` and do not overlap (stride = context), so each held-out byte is scored once.
  const auto bytes = static_cast<int64_t>(text->tokens().size());
  const auto split = static_cast<int64_t>(static_cast<double>(bytes) * (1 - s.val_fraction));
  const int64_t train_windows = split - s.context;
  const int64_t val_windows = bytes - split > s.context ? (bytes - split - s.context - 1) / s.context + 1 : 0;
  if (train_windows < s.batch_size || val_windows < 1)
    throw kiln::ValueError::of(kProgram, "text too short",
                               "{} has {} bytes: {} training windows for batch size {}, "
                               "{} validation windows of {} bytes",
                               s.text, bytes, std::max<int64_t>(0, train_windows), s.batch_size, val_windows,
                               s.context + 1);
  io::DataLoader loader(std::make_shared<Windows>(text, 0, train_windows, 1),
                        {.batch_size = s.batch_size, .shuffle = true, .seed = s.seed, .drop_last = true});
  io::DataLoader val(std::make_shared<Windows>(text, split, val_windows, s.context),
                     {.batch_size = s.batch_size});

  const int64_t vocab = text->vocab_size();
  kiln::models::Gpt model({.vocab_size = vocab,
                           .context = s.context,
                           .d_model = s.d_model,
                           .heads = s.heads,
                           .layers = s.layers,
                           .dropout = s.dropout,
                           .key = random::key(s.seed)});
  random::seed(s.seed);  // the dropout masks' keys
  optim::AdamW opt({.lr = schedule(s), .betas = {0.9, 0.95}, .weight_decay = s.weight_decay});
  io::CheckpointManager checkpoints(s.out, {.keep_last = 2});
  fmt::print("{}: {} bytes, {} distinct; {} training windows of {}, {} for validation\n", s.text, bytes,
             vocab, train_windows, s.context, val_windows);
  fmt::print(
      "GPT: {} layers, d_model {}, {} heads, {} parameters; AdamW lr {} (warm-up {}, cosine), batch {}\n",
      s.layers, s.d_model, s.heads, nn::num_elements(model.parameters()), s.lr, s.warmup, s.batch_size);
  if (resumed) {
    io::restore_checkpoint(*resumed, model, opt, &loader);
    fmt::print("resumed from step {} ({})\n", opt.step(), resumed_from.string());
  }
  fmt::print("random guessing scores ln({}) = {:.4f}\n", vocab, std::log(static_cast<double>(vocab)));

  auto loss_and_grads = nn::value_and_grad(model, [&](const Array& x, const Array& y) {
    return nn::cross_entropy(kiln::reshape(model(x), {-1, vocab}), kiln::reshape(y, {-1}));
  });
  const auto start = std::chrono::steady_clock::now();
  const std::map<std::string, std::string> metadata = run_metadata(s, *text);
  const auto save = [&] {
    const auto path = checkpoints.save(model, opt, &loader, metadata);
    fmt::print("checkpoint: {}\n", path.string());
  };
  const auto due = [&](int64_t every) { return every > 0 && opt.step() % every == 0; };
  // Training runs in stretches that end where something is printed or saved, one progress bar
  // each, so nothing is written into a bar being redrawn and each bar's loss is its stretch's mean.
  double train_loss = NAN;
  std::optional<double> last_val;
  model.train(true);
  while (opt.step() < s.steps) {
    int64_t stop = s.steps;
    for (const int64_t every : {s.eval_every, s.sample_every, s.ckpt_every})
      if (every > 0) stop = std::min(stop, (opt.step() / every + 1) * every);
    io::ProgressBar progress(stop - opt.step());
    double sum = 0;
    const int64_t first = opt.step();
    // Overlapped: step n is scheduled (nn::async_eval) and step n + 1 is built while it runs; a
    // step's loss is read one step later.
    struct Done {
      Array loss;
      int64_t size, step;
    };
    std::optional<Done> pending;
    const auto account = [&](const Done& d) {
      const double value = d.loss.item<float>();
      if (!std::isfinite(value))
        throw kiln::RuntimeError::of(kProgram, "training diverged", "loss {} at step {}: try a lower --lr",
                                     value, d.step);
      sum += value;
      progress.step(d.size, value);
    };
    while (opt.step() < stop) {
      const io::Batch batch = loader.next();
      auto [loss, grads] = loss_and_grads(batch[0], batch[1]);
      opt.update(model, optim::clip_grad_norm(grads, s.clip).grads);
      const auto params = model.parameters();
      nn::async_eval({&params, &opt.state()}, {loss});
      if (pending) account(*pending);
      pending = Done{loss, batch.size(), opt.step()};
    }
    if (pending) account(*pending);
    progress.finish();
    train_loss = sum / static_cast<double>(stop - first);
    if (due(s.eval_every) || opt.step() == s.steps) {
      last_val = validation_loss(model, val);
      fmt::print("step {}/{}: train loss {:.4f}, validation loss {:.4f}, lr {:.2e}\n", opt.step(), s.steps,
                 train_loss, *last_val, opt.learning_rate());
    }
    if (due(s.sample_every)) print_sample(model, *text, s, opt.step());
    if (due(s.ckpt_every) || opt.step() == s.steps) save();
    std::fflush(stdout);
  }
  if (!last_val) last_val = validation_loss(model, val);
  print_sample(model, *text, s, opt.step());
  const std::string train = std::isnan(train_loss) ? std::string("none (no step left to train)")
                                                   : fmt::format("{:.4f} (last stretch)", train_loss);
  fmt::print("final loss after {} steps: train {}, validation {:.4f} (random: {:.4f}); {:.1f} s\n",
             opt.step(), train, *last_val, std::log(static_cast<double>(vocab)), seconds_since(start));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a character-level GPT on a text file, with checkpoints and resuming"};
  Settings s;
  app.add_option("--text", s.text, "the text to learn (any file; its bytes are the tokens)")
      ->capture_default_str();
  app.add_option("--out", s.out, "folder of the checkpoints (the last two are kept)")->capture_default_str();
  app.add_flag("--resume", s.resume, "continue from the newest checkpoint in --out");
  app.add_option("--layers", s.layers, "transformer blocks")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--d-model", s.d_model, "embedding width")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--heads", s.heads, "attention heads (must divide --d-model)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--context", s.context, "characters per training window and the longest the model sees")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--batch-size", s.batch_size, "windows per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--steps", s.steps, "the step to stop at (counted from the start, also with --resume)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lr", s.lr, "AdamW's peak learning rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--warmup", s.warmup, "steps of linear warm-up before the cosine decay to lr / 10")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--weight-decay", s.weight_decay, "AdamW's decoupled weight decay")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--dropout", s.dropout, "dropout in training (its masks' keys are part of a checkpoint)")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--clip", s.clip, "clip the gradients' global norm to this")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--val-fraction", s.val_fraction, "the end of the text held out for validation")
      ->check(CLI::Range(0.01, 0.5))
      ->capture_default_str();
  app.add_option("--seed", s.seed, "initialization, data order, dropout and sampling seed")
      ->capture_default_str();
  app.add_option("--eval-every", s.eval_every, "steps between validation losses (0: only at the end)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--sample-every", s.sample_every, "steps between samples (0: only at the end)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--ckpt-every", s.ckpt_every, "steps between checkpoints (0: only at the end)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--sample-length", s.sample_length, "characters to sample after the prompt")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--temperature", s.temperature, "sampling temperature (0: always the most likely character)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--top-k", s.top_k, "sample among the k most likely characters (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--prompt", s.prompt, "the text samples start from (its characters must occur in --text)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    return run(app, s);
  } catch (const std::exception& e) {  // kiln errors, and std::filesystem's for --out
    fmt::print(stderr, "{}: {}\n", kProgram, e.what());
    return 1;
  }
}
