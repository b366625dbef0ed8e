// Fine-tunes a pretrained Fashion-MNIST classifier (the small CNN, LeNet-5 or an MLP, as
// train_fashion_mnist trains them) on a new task, three ways, and reports the new task's test
// accuracy before and after:
//
//   tasks  subset  footwear only: Sandal, Sneaker and Ankle boot, with a new 3-way head (a fresh
//                  Linear in place of the last one); "before" also shows the pretrained 10-way
//                  head restricted to those three classes
//          shift   all ten classes under a shifted distribution: --shift invert (every pixel x
//                  becomes 1 - x: light garments on a dark ground) or rotate (each image turned 90
//                  degrees counter-clockwise); the pretrained head is kept, and the accuracy on
//                  the original images is shown too (what fine-tuning forgot)
//   modes  freeze  Module::freeze the backbone; only the head trains
//          lora    every Linear becomes an nn::LoRALinear (rank --rank) whose A and B alone train
//                  (a new head trains in full: a low-rank update of random weights means nothing);
//                  the convolutions are frozen; at the end the adapters are merged into the weights
//          full    every parameter trains
//
// It prints the trainable and total parameter counts and writes the fine-tuned weights (a plain
// model of the same architecture and the task's class count; LoRA merged) to --out. The pretrained
// weights are an HDF5 file as train_fashion_mnist writes to <out>/weights.h5; the architecture
// follows from its keys (--model names it explicitly). --init-weights PATH instead writes a
// freshly initialized (seeded, untrained) --model there and exits, for tests and demos without a
// trained model.
//
//   build/release/examples/train_fashion_mnist --model cnn --epochs 3 --out cnn_run
//   build/release/examples/finetune --weights cnn_run/weights.h5 --task subset --mode lora
//   build/release/examples/finetune --weights cnn_run/weights.h5 --task shift --shift rotate --mode full
//   build/release/examples/finetune --init-weights /tmp/untrained.h5 --model mlp
#include <fmt/format.h>
#include <kiln/kiln.h>
#include <kiln/models/lenet.h>
#include <kiln/models/mlp.h>
#include <kiln/models/small_cnn.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using kiln::Array;
namespace io = kiln::io;
namespace nn = kiln::nn;
namespace models = kiln::models;
constexpr const char* kProgram = "finetune";

// Fashion-MNIST's pixel mean and standard deviation (in [0, 1] units), as train_fashion_mnist
// normalizes: the pretrained weights expect these inputs.
constexpr double kPixelMean = 0.2860, kPixelStd = 0.3530;
// The footwear classes of the subset task, in the order of the new head's outputs.
const std::vector<int32_t> kFootwear = {5, 7, 9};  // Sandal, Sneaker, Ankle boot

struct Settings {
  std::string weights;
  std::string init_weights;
  std::string model = "auto";
  std::string task = "subset";
  std::string shift = "invert";
  std::string mode = "lora";
  int64_t rank = 4;
  double alpha = 8;
  int epochs = 2;
  int64_t batch_size = 64;
  double lr = 2e-3;
  int64_t limit = 0;
  uint64_t seed = 0;
  std::string out = "finetuned.h5";
  std::string data;
};

// ---- Models ----

// LeNet-5 (models::LeNet's layers and keys) with nn::LoRALinear in place of fc1, fc2 and fc3, so
// LeNet weights load into it and the adapters add fc*.lora_a and fc*.lora_b.
class LoRALeNet : public nn::Module {
 public:
  LoRALeNet(const models::LeNetConfig& c, const nn::LoRAOptions& lora)
      : conv1(this, "conv1", c.in_channels, 6, 5, nn::Conv2dOptions{.padding = 2}),
        conv2(this, "conv2", 6, 16, 5),
        fc1(this, "fc1", 16 * 5 * 5, 120, lora),
        fc2(this, "fc2", 120, 84, lora),
        fc3(this, "fc3", 84, c.num_classes, lora) {}
  /// x: (N, 28, 28) or (N, C, 28, 28) -> logits (N, classes), as models::LeNet.
  Array operator()(const Array& x) const {
    Array h = x.ndim() == 3 ? kiln::expand_dims(x, 1) : x;
    h = pool_(nn::relu(conv1(h)));
    h = pool_(nn::relu(conv2(h)));
    h = kiln::reshape(h, {h.shape()[0], 16 * 5 * 5});
    return fc3(nn::relu(fc2(nn::relu(fc1(h)))));
  }

  nn::ModuleInfo<nn::Conv2d> conv1;
  nn::ModuleInfo<nn::Conv2d> conv2;
  nn::ModuleInfo<nn::LoRALinear> fc1;
  nn::ModuleInfo<nn::LoRALinear> fc2;
  nn::ModuleInfo<nn::LoRALinear> fc3;

 private:
  nn::MaxPool2d pool_{2};
};

// models::SmallCnn (its layers and keys) with nn::LoRALinear in place of fc1 and fc2.
class LoRASmallCnn : public nn::Module {
 public:
  LoRASmallCnn(const models::SmallCnnConfig& c, const nn::LoRAOptions& lora)
      : conv1(this, "conv1", c.in_channels, c.conv1_channels, 3, nn::Conv2dOptions{.padding = 1}),
        conv2(this, "conv2", c.conv1_channels, c.conv2_channels, 3, nn::Conv2dOptions{.padding = 1}),
        fc1(this, "fc1", c.conv2_channels * (c.image_size / 4) * (c.image_size / 4), c.hidden, lora),
        fc2(this, "fc2", c.hidden, c.num_classes, lora) {}
  /// x: (N, 28, 28) or (N, C, 28, 28) -> logits (N, classes), as models::SmallCnn.
  Array operator()(const Array& x) const {
    Array h = x.ndim() == 3 ? kiln::expand_dims(x, 1) : x;
    h = pool_(nn::relu(conv1(h)));
    h = pool_(nn::relu(conv2(h)));
    h = kiln::reshape(h, {h.shape()[0], fc1->in_features()});
    return fc2(nn::relu(fc1(h)));
  }

  nn::ModuleInfo<nn::Conv2d> conv1;
  nn::ModuleInfo<nn::Conv2d> conv2;
  nn::ModuleInfo<nn::LoRALinear> fc1;
  nn::ModuleInfo<nn::LoRALinear> fc2;

 private:
  nn::MaxPool2d pool_{2};
};

// models::Mlp (ReLU, its keys layers.<i>.*) with nn::LoRALinear layers.
class LoRAMlp : public nn::Module {
 public:
  LoRAMlp(const models::MlpConfig& c, const nn::LoRAOptions& lora) {
    std::vector<int64_t> sizes{c.in_features};
    sizes.insert(sizes.end(), c.hidden.begin(), c.hidden.end());
    sizes.push_back(c.out_features);
    for (size_t i = 0; i + 1 < sizes.size(); ++i) layers.emplace_back(sizes[i], sizes[i + 1], lora);
  }
  /// x: (N, 28, 28) or (N, 784) -> logits (N, classes).
  Array operator()(const Array& x) const {
    Array h = x.ndim() > 2 ? kiln::reshape(x, {x.shape()[0], -1}) : x;
    for (size_t i = 0; i < layers.size(); ++i) {
      h = layers[i](h);
      if (i + 1 < layers.size()) h = nn::relu(h);
    }
    return h;
  }

  nn::ModuleList<nn::LoRALinear> layers{this, "layers"};
};

// What a weights file says about the model it came from: the architecture's sizes, read from the
// shapes of its parameters, and the key prefix of its classifier head.
struct Architecture {
  std::string name;  // "cnn", "lenet" or "mlp"
  models::SmallCnnConfig cnn;
  models::LeNetConfig lenet;
  models::MlpConfig mlp;
  std::string head;  // "fc2", "fc3" or "layers.<last>"
  int64_t classes() const {
    return name == "cnn" ? cnn.num_classes : name == "lenet" ? lenet.num_classes : mlp.out_features;
  }
};

// The model a weights file holds, from its keys: "mlp" (layers.0.*), "lenet" (conv1, ..., fc3) or
// "cnn" (conv1, conv2, fc1, fc2). Throws KeyError when it is none of them.
std::string model_of(const nn::ParamTree& w, const std::string& path) {
  if (w.contains("layers.0.weight")) return "mlp";
  if (w.contains("conv1.weight") && w.contains("fc3.weight")) return "lenet";
  if (w.contains("conv1.weight") && w.contains("fc2.weight")) return "cnn";
  throw kiln::KeyError::of(kProgram, "unknown model",
                           "{} holds no small CNN (conv1, conv2, fc1, fc2), LeNet-5 (..., fc3) or MLP "
                           "(layers.0, ...) weights; keys: {}",
                           path, fmt::join(w.keys(), ", "));
}

// The sizes of a `name` model from its weights. Throws KeyError when the file does not hold one.
Architecture architecture_of(const std::string& name, const nn::ParamTree& w, const std::string& path) {
  Architecture a;
  a.name = name;
  const auto require = [&](const std::string& key, int ndim) -> const Array& {
    if (!w.contains(key) || w.at(key).ndim() != ndim)
      throw kiln::KeyError::of(kProgram, "not the weights of this model",
                               "{} has no {}-d \"{}\", so it holds no {} (keys: {}); pass the --model it was "
                               "trained as",
                               path, ndim, key, name, fmt::join(w.keys(), ", "));
    return w.at(key);
  };
  if (name == "lenet") {
    a.lenet = {.in_channels = require("conv1.weight", 4).shape(1),
               .num_classes = require("fc3.weight", 2).shape(0)};
    a.head = "fc3";
    return a;
  }
  if (name == "cnn") {
    // LeNet-5 has the same first four layer names: its fc3 and 5x5 kernels tell it apart.
    if (w.contains("fc3.weight") || require("conv1.weight", 4).shape(2) != 3)
      throw kiln::KeyError::of(
          kProgram, "not the weights of this model",
          "{} has 5x5 convolutions or an fc3, so it holds LeNet-5, not the small cnn; pass "
          "--model lenet (or --model auto)",
          path);
    const Array& conv1 = require("conv1.weight", 4);
    a.cnn = {.in_channels = conv1.shape(1),
             .num_classes = require("fc2.weight", 2).shape(0),
             .conv1_channels = conv1.shape(0),
             .conv2_channels = require("conv2.weight", 4).shape(0),
             .hidden = require("fc1.weight", 2).shape(0)};
    // The images are 28x28, pooled twice to 7x7 before fc1.
    const int64_t fc1_in = w.at("fc1.weight").shape(1);
    if (fc1_in != a.cnn.conv2_channels * 7 * 7)
      throw kiln::ValueError::of(kProgram, "not a 28x28 image classifier",
                                 "{}: fc1 takes {} inputs, not {} (conv2's {} channels of 7x7)", path, fc1_in,
                                 a.cnn.conv2_channels * 7 * 7, a.cnn.conv2_channels);
    a.head = "fc2";
    return a;
  }
  a.mlp.hidden.clear();
  a.mlp.in_features = require("layers.0.weight", 2).shape(1);
  int64_t n = 1;
  while (w.contains(fmt::format("layers.{}.weight", n))) ++n;
  for (int64_t i = 0; i + 1 < n; ++i)
    a.mlp.hidden.push_back(w.at(fmt::format("layers.{}.weight", i)).shape(0));
  a.mlp.out_features = require(fmt::format("layers.{}.weight", n - 1), 2).shape(0);
  a.head = fmt::format("layers.{}", n - 1);
  return a;
}

// A freshly initialized model of the architecture with `classes` outputs.
template <class Net>
std::unique_ptr<Net> make_net(const Architecture& a, int64_t classes, const nn::LoRAOptions& lora = {}) {
  if constexpr (std::is_same_v<Net, models::SmallCnn> || std::is_same_v<Net, LoRASmallCnn>) {
    models::SmallCnnConfig c = a.cnn;
    c.num_classes = classes;
    if constexpr (std::is_same_v<Net, models::SmallCnn>)
      return std::make_unique<Net>(c);
    else
      return std::make_unique<Net>(c, lora);
  } else if constexpr (std::is_same_v<Net, models::LeNet>) {
    return std::make_unique<Net>(
        models::LeNetConfig{.in_channels = a.lenet.in_channels, .num_classes = classes});
  } else if constexpr (std::is_same_v<Net, LoRALeNet>) {
    return std::make_unique<Net>(
        models::LeNetConfig{.in_channels = a.lenet.in_channels, .num_classes = classes}, lora);
  } else {
    models::MlpConfig c = a.mlp;
    c.out_features = classes;
    if constexpr (std::is_same_v<Net, models::Mlp>)
      return std::make_unique<Net>(c);
    else
      return std::make_unique<Net>(c, lora);
  }
}

// ---- Data ----

struct TaskData {
  io::Mnist train, test;
  int64_t classes = 10;
};

// The first `limit` samples (0: all).
io::Mnist first(io::Mnist split, int64_t limit) {
  if (limit > 0 && limit < split.size()) {
    split.images = kiln::slice(split.images, {kiln::Slice{0, limit}});
    split.labels = kiln::slice(split.labels, {kiln::Slice{0, limit}});
  }
  return split;
}

// The samples of `classes`, relabelled 0, 1, ... in that order.
io::Mnist select_classes(const io::Mnist& split, const std::vector<int32_t>& classes) {
  std::vector<int32_t> rows, labels;
  const std::vector<uint8_t> all = split.labels.to_vector<uint8_t>();
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t c = 0; c < classes.size(); ++c)
      if (all[i] == classes[c]) {
        rows.push_back(static_cast<int32_t>(i));
        labels.push_back(static_cast<int32_t>(c));
      }
  const auto n = static_cast<int64_t>(rows.size());
  return {.images = kiln::take(split.images, Array(rows, {n}), 0), .labels = Array(labels, {n})};
}

// uint8 images -> float32 in [0, 1], shifted as the task says, then normalized as in pretraining.
io::BatchTransform task_inputs(const std::string& shift) {
  return [shift](std::vector<Array> fields) {
    Array x = kiln::astype(fields[0], kiln::float32) * (1.0 / 255.0);
    if (shift == "invert") x = 1.0 - x;
    // Turned 90 degrees counter-clockwise: out[i][j] = in[j][27 - i], a transpose, rows reversed.
    if (shift == "rotate")
      x = kiln::slice(kiln::transpose(x, {0, 2, 1}),
                      {kiln::Slice{}, kiln::Slice{std::nullopt, std::nullopt, -1}});
    fields[0] = (x - kPixelMean) * (1.0 / kPixelStd);
    fields[1] = kiln::astype(fields[1], kiln::int32);
    return fields;
  };
}

// Test accuracy of `net` on `split` under `shift` ("" for none). `columns`, when given, restricts
// the logits to those classes (the pretrained head scored on the subset task).
template <class Net>
double accuracy(const Net& net, const io::Mnist& split, const std::string& shift,
                const std::optional<std::vector<int32_t>>& columns = std::nullopt) {
  io::DataLoader loader({split.images, split.labels}, {.batch_size = 1000, .transform = task_inputs(shift)});
  int64_t correct = 0;
  for (const auto& batch : loader.epoch(0)) {
    Array logits = net(batch[0]);
    if (columns) logits = kiln::take(logits, Array(*columns, {static_cast<int64_t>(columns->size())}), 1);
    const Array hits = kiln::sum(kiln::astype(kiln::equal(kiln::argmax(logits, -1), batch[1]), kiln::int32));
    correct += hits.item<int32_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(split.size());
}

// ---- Fine-tuning ----

// Creates the folder a file is to be written to, when missing.
void create_parent_folder(const std::filesystem::path& file) {
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
}

template <class Net>
void train(Net& net, const TaskData& data, const std::string& shift, const Settings& s) {
  io::DataLoader loader(
      {data.train.images, data.train.labels},
      {.batch_size = s.batch_size, .shuffle = true, .seed = s.seed, .transform = task_inputs(shift)});
  kiln::optim::Adam opt({.lr = kiln::optim::cosine_decay(s.lr, loader.batches_per_epoch() * s.epochs)});
  auto step =
      nn::value_and_grad(net, [&](const Array& x, const Array& y) { return nn::cross_entropy(net(x), y); });
  net.train(true);
  io::ProgressBar progress(loader.batches_per_epoch(), {.epochs = s.epochs});
  for (int e = 0; e < s.epochs; ++e) {
    progress.start_epoch(e + 1);
    for (const auto& batch : loader.epoch(e)) {
      auto [loss, grads] = step(batch[0], batch[1]);
      opt.update(net, grads);
      const auto params = net.parameters();
      nn::eval({&params, &opt.state()});
      progress.step(batch.size(), loss.template item<float>());
    }
  }
  progress.finish();
  net.train(false);
}

// Loads the pretrained weights into a model built for the task. Only parameters the file cannot
// have may be missing: a new head (subset task) and LoRA adapters; anything else is a KeyError.
void load_pretrained(nn::Module& net, nn::ParamTree pretrained, const Architecture& a, bool new_head,
                     const std::string& path) {
  if (new_head) {
    pretrained.erase(a.head + ".weight");
    pretrained.erase(a.head + ".bias");
  }
  for (const auto& key : net.parameters().keys()) {
    const bool adapter = key.ends_with(".lora_a") || key.ends_with(".lora_b");
    const bool head = new_head && key.starts_with(a.head + ".");
    if (!adapter && !head && !pretrained.contains(key))
      throw kiln::KeyError::of(kProgram, "weights file lacks a parameter", "{} has no \"{}\"", path, key);
  }
  net.update(pretrained, nn::Verify::all & ~nn::Verify::missing);
}

// Which parameters train in each mode (see the header comment).
void choose_trainable(nn::Module& net, const std::string& mode, const Architecture& a, bool new_head) {
  if (mode == "full") return;
  if (mode == "freeze") {
    net.freeze();
    net.unfreeze({a.head});
    return;
  }
  // LoRALinear froze its own weight and bias; the convolutions are frozen here.
  if (a.name != "mlp") net.freeze({"conv1", "conv2"});
  if (new_head) {
    net.unfreeze({a.head + ".weight", a.head + ".bias"});
    net.freeze({a.head + ".lora_a", a.head + ".lora_b"});
  }
}

// The parameters without the LoRA adapters: what a plain model of the same architecture takes.
nn::ParamTree without_adapters(const nn::ParamTree& params) {
  nn::ParamTree plain;
  for (const auto& [key, value] : params)
    if (!key.ends_with(".lora_a") && !key.ends_with(".lora_b")) plain.set(key, value);
  return plain;
}

template <class Plain, class Adapted>
int finetune(const Settings& s, const Architecture& a, const nn::ParamTree& pretrained,
             const TaskData& data) {
  const bool subset = s.task == "subset";
  const std::string shift = subset ? "" : s.shift;
  const auto pct = [](double x) { return 100 * x; };
  // The pretrained model as it is, for the baselines.
  auto original = make_net<Plain>(a, a.classes());
  original->update(pretrained);
  original->train(false);
  if (subset)
    fmt::print("pretrained 10-way head restricted to {}, {}, {}: {:.2f}%\n", io::kFashionMnistClasses[5],
               io::kFashionMnistClasses[7], io::kFashionMnistClasses[9],
               pct(accuracy(*original, data.test, "", kFootwear)));
  else
    fmt::print("pretrained model on the original test images: {:.2f}%\n",
               pct(accuracy(*original, data.test, "")));

  std::unique_ptr<Plain> tuned;
  const auto finetune_net = [&](auto& net) {
    load_pretrained(net, pretrained, a, subset, s.weights);
    choose_trainable(net, s.mode, a, subset);
    net.train(false);
    const int64_t trainable = nn::num_elements(net.trainable_parameters());
    const int64_t total = nn::num_elements(net.parameters());
    fmt::print("mode {}: {} of {} parameters trainable ({:.2f}%)\n", s.mode, trainable, total,
               100.0 * static_cast<double>(trainable) / static_cast<double>(total));
    fmt::print("before fine-tuning{}: {:.2f}%\n", subset ? " (new head, untrained)" : "",
               pct(accuracy(net, data.test, shift)));
    train(net, data, shift, s);
  };
  if (s.mode == "lora") {
    auto net = make_net<Adapted>(a, data.classes, {.r = s.rank, .alpha = s.alpha});
    finetune_net(*net);
    fmt::print("after fine-tuning (adapters separate): {:.2f}%\n", pct(accuracy(*net, data.test, shift)));
    // Fold B A into each weight, then hand the weights to a plain model, which has no adapters.
    for (auto& [key, m] : net->named_modules())
      if (auto* lora = dynamic_cast<nn::LoRALinear*>(m)) lora->merge();
    tuned = make_net<Plain>(a, data.classes);
    tuned->update(without_adapters(net->parameters()));
    tuned->train(false);
  } else {
    tuned = make_net<Plain>(a, data.classes);
    finetune_net(*tuned);
  }
  fmt::print("after fine-tuning{}: {:.2f}%\n", s.mode == "lora" ? " (merged into a plain model)" : "",
             pct(accuracy(*tuned, data.test, shift)));
  if (!subset)
    fmt::print("fine-tuned model on the original test images: {:.2f}%\n",
               pct(accuracy(*tuned, data.test, "")));
  if (!s.out.empty()) {
    create_parent_folder(s.out);
    tuned->save_weights(s.out);
    fmt::print("fine-tuned weights: {}\n", s.out);
  }
  return 0;
}

// --init-weights: a seeded, untrained model written to s.init_weights.
int write_initial_weights(const Settings& s) {
  kiln::random::seed(s.seed);
  create_parent_folder(s.init_weights);
  const std::string model = s.model == "auto" ? "cnn" : s.model;
  if (model == "cnn") {
    models::SmallCnn net;
    net.save_weights(s.init_weights);
  } else if (model == "lenet") {
    models::LeNet net;
    net.save_weights(s.init_weights);
  } else {
    models::Mlp net({.in_features = 784, .hidden = {512, 512}, .out_features = 10});
    net.save_weights(s.init_weights);
  }
  fmt::print("wrote an untrained {} (seed {}) to {}\n", model, s.seed, s.init_weights);
  return 0;
}

int run(const Settings& s) {
  if (!s.init_weights.empty()) return write_initial_weights(s);
  if (s.weights.empty())
    throw kiln::ValueError::of(kProgram, "no pretrained weights",
                               "pass --weights PATH (or --init-weights PATH)");
  if (!std::filesystem::exists(s.weights))
    throw kiln::RuntimeError::of(
        kProgram, "pretrained weights not found",
        "{} does not exist; train a model first:\n  build/release/examples/train_fashion_mnist --model {} "
        "--epochs 3 --out DIR\nthen pass --weights DIR/weights.h5 (or write an untrained one with "
        "--init-weights PATH)",
        s.weights, s.model == "auto" ? "cnn" : s.model);
  const nn::ParamTree pretrained = io::load_weights(s.weights);
  const std::string model = s.model == "auto" ? model_of(pretrained, s.weights) : s.model;
  const Architecture a = architecture_of(model, pretrained, s.weights);
  if (a.classes() != 10)
    throw kiln::ValueError::of(kProgram, "not a Fashion-MNIST classifier", "{} has {} outputs, not 10",
                               s.weights, a.classes());

  const std::string dir = s.data.empty() ? io::fashion_mnist_dir() : s.data;
  TaskData data;
  if (s.task == "subset") {
    data.train = first(select_classes(io::load_mnist(dir, io::Split::train), kFootwear), s.limit);
    data.test = first(select_classes(io::load_mnist(dir, io::Split::test), kFootwear), s.limit);
    data.classes = static_cast<int64_t>(kFootwear.size());
  } else {
    data.train = first(io::load_mnist(dir, io::Split::train), s.limit);
    data.test = first(io::load_mnist(dir, io::Split::test), s.limit);
  }
  fmt::print("{} from {}: task {}{}, {} training and {} test images\n", model, s.weights, s.task,
             s.task == "shift" ? " (" + s.shift + ")" : std::string(" (footwear: 3 classes)"),
             data.train.size(), data.test.size());
  kiln::random::seed(s.seed);  // the new head's and the adapters' initialization
  if (model == "cnn") return finetune<models::SmallCnn, LoRASmallCnn>(s, a, pretrained, data);
  if (model == "lenet") return finetune<models::LeNet, LoRALeNet>(s, a, pretrained, data);
  return finetune<models::Mlp, LoRAMlp>(s, a, pretrained, data);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Fine-tune a pretrained Fashion-MNIST CNN, LeNet or MLP on a new task: freeze, LoRA or full"};
  Settings s;
  app.add_option("--weights", s.weights, "pretrained HDF5 weights (train_fashion_mnist's <out>/weights.h5)");
  app.add_option(
      "--init-weights", s.init_weights,
      "write a freshly initialized (seeded, untrained) --model to this file and exit: for tests and "
      "demos without a trained model");
  app.add_option("--model", s.model,
                 "the architecture of the weights: auto (from the file's keys), cnn (train_fashion_mnist's "
                 "small CNN), lenet (LeNet-5) or mlp (784-...-10, ReLU); --init-weights: auto means cnn")
      ->check(CLI::IsMember({"auto", "cnn", "lenet", "mlp"}))
      ->capture_default_str();
  app.add_option("--task", s.task, "subset (footwear, 3 classes, new head) or shift (all classes, --shift)")
      ->check(CLI::IsMember({"subset", "shift"}))
      ->capture_default_str();
  app.add_option("--shift", s.shift,
                 "the shift task's change: invert (x -> 1 - x) or rotate (90 degrees ccw)")
      ->check(CLI::IsMember({"invert", "rotate"}))
      ->capture_default_str();
  app.add_option("--mode", s.mode, "freeze (head only), lora (low-rank adapters) or full")
      ->check(CLI::IsMember({"freeze", "lora", "full"}))
      ->capture_default_str();
  app.add_option("--rank", s.rank, "LoRA rank")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--alpha", s.alpha, "LoRA alpha (the update is scaled by alpha / rank)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--epochs", s.epochs, "passes over the task's training set")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--batch-size", s.batch_size, "examples per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lr", s.lr, "Adam's initial learning rate (cosine decay to 0)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--limit", s.limit, "use only the first N training and test images of the task (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", s.seed, "seed of the new head, the adapters, the shuffling and --init-weights")
      ->capture_default_str();
  app.add_option("--out", s.out, "where to write the fine-tuned weights (\"\": nowhere)")
      ->capture_default_str();
  app.add_option("--data", s.data, "folder of the Fashion-MNIST IDX files (default: the Debian package's)");
  CLI11_PARSE(app, argc, argv);

  try {
    return run(s);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", kProgram, e.what());
    return 1;
  }
}
