// Trains an MLP or LeNet-5 on Fashion-MNIST (the Debian package dataset-fashion-mnist) with Adam,
// showing a progress bar, and prints the test accuracy after every epoch.
//
//   build/release/examples/train_fashion_mnist --model cnn --epochs 2
#include <fmt/format.h>
#include <kiln/kiln.h>
#include <kiln/models/lenet.h>
#include <kiln/models/mlp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <memory>

namespace {

using kiln::Array;

// Accuracy of `model` over the whole split, in batches of 1000 (evaluation mode, no gradients).
template <class Model>
double accuracy(const Model& model, const kiln::io::Mnist& split) {
  kiln::io::DataLoader loader({split.images, split.labels},
                              {.batch_size = 1000, .transform = kiln::io::to_float(0)});
  int64_t correct = 0;
  for (const auto& batch : loader.epoch(0)) {
    const Array predicted = kiln::argmax(model(batch[0]), -1);
    correct +=
        kiln::sum(kiln::astype(kiln::equal(predicted, kiln::astype(batch[1], kiln::int32)), kiln::int32))
            .template item<int32_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(split.size());
}

template <class Model>
int train(Model& model, const kiln::io::Mnist& train_set, const kiln::io::Mnist& test_set, int epochs,
          int64_t batch_size, double lr, uint64_t seed) {
  kiln::optim::Adam opt({.lr = lr});
  kiln::io::DataLoader loader({train_set.images, train_set.labels}, {.batch_size = batch_size,
                                                                     .shuffle = true,
                                                                     .seed = seed,
                                                                     .drop_last = true,
                                                                     .transform = kiln::io::to_float(0)});
  auto step = kiln::nn::value_and_grad(model, [&](const Array& images, const Array& labels) {
    return kiln::nn::cross_entropy(model(images), kiln::astype(labels, kiln::int32));
  });
  kiln::io::ProgressBar progress(loader.batches_per_epoch(), {.epochs = epochs});
  double test_accuracy = 0;
  for (int e = 0; e < epochs; ++e) {
    model.train(true);
    progress.start_epoch(e + 1);
    for (const auto& batch : loader.epoch(e)) {
      auto [loss, grads] = step(batch[0], batch[1]);
      opt.update(model, grads);
      const auto params = model.parameters();
      kiln::nn::eval({&params, &opt.state()});
      progress.step(batch.size(), loss.template item<float>());
    }
    progress.finish();
    model.train(false);
    test_accuracy = accuracy(model, test_set);
    fmt::print("epoch {}: test accuracy {:.2f}%\n", e + 1, 100 * test_accuracy);
  }
  fmt::print("final test accuracy: {:.2f}%\n", 100 * test_accuracy);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train an MLP or LeNet-5 on Fashion-MNIST"};
  std::string model_name = "cnn", data_dir;
  int epochs = 2;
  int64_t batch_size = 128;
  double lr = 1e-3;
  uint64_t seed = 0;
  int64_t limit = 0;
  app.add_option("--model", model_name, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}));
  app.add_option("--epochs", epochs, "passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size, "examples per step")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "Adam's learning rate")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "initialization and shuffling seed");
  app.add_option("--limit", limit, "use only the first N training and test images (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--data", data_dir, "folder of the IDX files (default: the Debian package's)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (data_dir.empty()) data_dir = kiln::io::fashion_mnist_dir();
    auto train_set = kiln::io::load_mnist(data_dir, kiln::io::Split::train);
    auto test_set = kiln::io::load_mnist(data_dir, kiln::io::Split::test);
    for (auto* split : {&train_set, &test_set})
      if (limit > 0 && limit < split->size()) {
        split->images = kiln::slice(split->images, {kiln::Slice{0, limit}});
        split->labels = kiln::slice(split->labels, {kiln::Slice{0, limit}});
      }
    fmt::print("Fashion-MNIST from {}: {} training, {} test images; model {}\n", data_dir, train_set.size(),
               test_set.size(), model_name);
    kiln::random::seed(seed);
    if (model_name == "mlp") {
      kiln::models::Mlp model({.in_features = 784, .hidden = {512, 512}, .out_features = 10});
      return train(model, train_set, test_set, epochs, batch_size, lr, seed);
    }
    kiln::models::LeNet model;
    return train(model, train_set, test_set, epochs, batch_size, lr, seed);
  } catch (const kiln::Error& e) {
    fmt::print(stderr, "train_fashion_mnist: {}\n", dynamic_cast<const std::exception&>(e).what());
    return 1;
  }
}
