// Fits y = X w + b on synthetic data with plain gradient descent, printing the loss as it falls.
// `make demo` runs it.
#include <kiln/kiln.h>

#include <CLI/CLI.hpp>
#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"kiln demo: linear regression fitted with grad"};
  int steps = 200;
  float lr = 0.1f;
  int64_t n = 512, features = 8;
  app.add_option("--steps", steps, "gradient steps")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "learning rate")->check(CLI::PositiveNumber);
  app.add_option("--samples", n, "number of samples")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  using namespace kiln;
  const Array keys = random::split(random::key(42), 4);
  auto key = [&](int i) { return take(keys, Array(i), 0); };
  const Array x = random::normal({n, features}, key(0));
  const Array true_w = random::normal({features, 1}, key(1));
  const Array y = matmul(x, true_w) + 0.5f + 0.01f * random::normal({n, 1}, key(2));

  auto loss_fn = [&](const std::vector<Array>& p) {
    const Array pred = matmul(x, p[0]) + p[1];
    return std::vector<Array>{mean(square(pred - y))};
  };
  auto step = value_and_grad(loss_fn, {0, 1});
  std::vector<Array> params = {zeros({features, 1}), zeros({1})};
  float loss = 0;
  for (int i = 0; i <= steps; ++i) {
    auto [values, grads] = step(params);
    for (size_t k = 0; k < params.size(); ++k) params[k] = params[k] - lr * grads[k];
    eval(params);
    loss = values[0].item<float>();
    if (i % (steps / 10 > 0 ? steps / 10 : 1) == 0) std::printf("step %4d  loss %.6f\n", i, loss);
  }
  const float w_err = max(abs(params[0] - true_w)).item<float>();
  std::printf("final loss %.6f, max |w - w_true| = %.4f, bias %.4f (true 0.5)\n", loss, w_err,
              params[1].item<float>());
  return loss < 1e-3f ? 0 : 1;
}
