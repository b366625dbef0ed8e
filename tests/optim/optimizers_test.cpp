// Every optimizer against a float64 reference written here from the published update rules (plain
// loops over std::vector<double>, independent of kiln): five steps on random parameters of several
// shapes, in float64 (tight) and float32 (the state must keep the parameter's dtype). The
// parameter "layer.bias" has no gradient at the third step, so its per-parameter step count falls
// behind the others' (PyTorch's semantics for a parameter whose .grad is None). Every state slot
// is compared too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>

#include "kiln/optim/optim.h"
#include "support/op_test.h"

namespace kiln::optim {
namespace {

using Vec = std::vector<double>;

// One parameter of the reference: its values, shape, step count (already incremented for the
// step being taken) and state slots by PyTorch's names.
struct Ref {
  Vec p;
  Shape shape;
  int64_t t = 0;
  std::map<std::string, Vec> s;
  Vec& slot(const std::string& name, double init = 0.0) {
    auto it = s.find(name);
    if (it == s.end()) it = s.emplace(name, Vec(p.size(), init)).first;
    return it->second;
  }
};
using RefStep = std::function<void(Ref& r, Vec g, double lr)>;

double sgn(double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }

RefStep sgd_ref(double momentum, double dampening, double wd, bool nesterov, bool maximize) {
  return [=](Ref& r, Vec g, double lr) {
    for (size_t i = 0; i < g.size(); ++i) {
      if (maximize) g[i] = -g[i];
      g[i] += wd * r.p[i];
    }
    if (momentum != 0) {
      Vec& b = r.slot("momentum_buffer");
      for (size_t i = 0; i < g.size(); ++i) {
        b[i] = r.t == 1 ? g[i] : momentum * b[i] + (1 - dampening) * g[i];
        g[i] = nesterov ? g[i] + momentum * b[i] : b[i];
      }
    }
    for (size_t i = 0; i < g.size(); ++i) r.p[i] -= lr * g[i];
  };
}

// Adam (Kingma & Ba, with PyTorch's placement of eps), AdamW when decoupled.
RefStep adam_ref(double b1, double b2, double eps, double wd, bool amsgrad, bool decoupled, bool maximize) {
  return [=](Ref& r, Vec g, double lr) {
    Vec& m = r.slot("exp_avg");
    Vec& v = r.slot("exp_avg_sq");
    Vec* vmax = amsgrad ? &r.slot("max_exp_avg_sq") : nullptr;
    const double bc1 = 1 - std::pow(b1, r.t), bc2 = 1 - std::pow(b2, r.t);
    for (size_t i = 0; i < g.size(); ++i) {
      if (maximize) g[i] = -g[i];
      if (decoupled)
        r.p[i] *= 1 - lr * wd;
      else
        g[i] += wd * r.p[i];
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      double vhat = v[i];
      if (vmax) vhat = (*vmax)[i] = std::max((*vmax)[i], v[i]);
      r.p[i] -= lr * (m[i] / bc1) / (std::sqrt(vhat / bc2) + eps);
    }
  };
}

RefStep adamax_ref(double b1, double b2, double eps, double wd) {
  return [=](Ref& r, Vec g, double lr) {
    Vec& m = r.slot("exp_avg");
    Vec& u = r.slot("exp_inf");
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] += wd * r.p[i];
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      u[i] = std::max(b2 * u[i], std::abs(g[i]) + eps);
      r.p[i] -= lr / (1 - std::pow(b1, r.t)) * m[i] / u[i];
    }
  };
}

RefStep adagrad_ref(double lr_decay, double wd, double init, double eps) {
  return [=](Ref& r, Vec g, double lr) {
    Vec& s = r.slot("sum", init);
    const double clr = lr / (1 + (r.t - 1) * lr_decay);
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] += wd * r.p[i];
      s[i] += g[i] * g[i];
      r.p[i] -= clr * g[i] / (std::sqrt(s[i]) + eps);
    }
  };
}

RefStep rmsprop_ref(double alpha, double eps, double wd, double momentum, bool centered) {
  return [=](Ref& r, Vec g, double lr) {
    Vec& v = r.slot("square_avg");
    Vec* a = centered ? &r.slot("grad_avg") : nullptr;
    Vec* b = momentum > 0 ? &r.slot("momentum_buffer") : nullptr;
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] += wd * r.p[i];
      v[i] = alpha * v[i] + (1 - alpha) * g[i] * g[i];
      double d = v[i];
      if (a) {
        (*a)[i] = alpha * (*a)[i] + (1 - alpha) * g[i];
        d -= (*a)[i] * (*a)[i];
      }
      d = std::sqrt(d) + eps;
      if (b) {
        (*b)[i] = momentum * (*b)[i] + g[i] / d;
        r.p[i] -= lr * (*b)[i];
      } else {
        r.p[i] -= lr * g[i] / d;
      }
    }
  };
}

// Lion (Chen et al. 2023, Algorithm 2).
RefStep lion_ref(double b1, double b2, double wd) {
  return [=](Ref& r, Vec g, double lr) {
    Vec& m = r.slot("exp_avg");
    for (size_t i = 0; i < g.size(); ++i) {
      r.p[i] = r.p[i] * (1 - lr * wd) - lr * sgn(b1 * m[i] + (1 - b1) * g[i]);
      m[i] = b2 * m[i] + (1 - b2) * g[i];
    }
  };
}

// Adafactor as PyTorch 2.5 documents it (factored over the last two axes of each ndim >= 2 slice).
RefStep adafactor_ref(double beta2_decay, double eps1, double eps2, double d, double wd) {
  return [=](Ref& r, Vec g, double lr) {
    const double w = std::pow(static_cast<double>(r.t), beta2_decay);
    const double rho = std::min(lr, 1 / std::sqrt(static_cast<double>(r.t)));
    const size_t n = g.size();
    double ss = 0;
    for (double x : r.p) ss += x * x;
    const double alpha = std::max(eps2, std::sqrt(ss / n)) * rho;
    Vec var(n);
    if (r.shape.size() >= 2) {
      const size_t R = r.shape[r.shape.size() - 2], C = r.shape.back(), B = n / (R * C);
      Vec& row = r.slot("row_var");
      Vec& col = r.slot("col_var");
      row.resize(B * R);
      col.resize(B * C);
      for (size_t b = 0; b < B; ++b) {
        auto G = [&](size_t i, size_t j) { return g[(b * R + i) * C + j]; };
        double row_mean_sum = 0;
        for (size_t i = 0; i < R; ++i) {
          double s = 0;
          for (size_t j = 0; j < C; ++j) s += G(i, j) * G(i, j);
          row[b * R + i] += w * (s / C - row[b * R + i]);
          row_mean_sum += row[b * R + i];
        }
        for (size_t j = 0; j < C; ++j) {
          double s = 0;
          for (size_t i = 0; i < R; ++i) s += G(i, j) * G(i, j);
          col[b * C + j] += w * (s / R - col[b * C + j]);
        }
        const double denom = std::max(row_mean_sum / R, eps1);
        for (size_t i = 0; i < R; ++i)
          for (size_t j = 0; j < C; ++j) var[(b * R + i) * C + j] = row[b * R + i] * col[b * C + j] / denom;
      }
    } else {
      Vec& v = r.slot("variance");
      for (size_t i = 0; i < n; ++i) var[i] = v[i] += w * (g[i] * g[i] - v[i]);
    }
    Vec u(n);
    double us = 0;
    for (size_t i = 0; i < n; ++i) {
      u[i] = g[i] / std::sqrt(std::max(var[i], eps1 * eps1));
      us += u[i] * u[i];
    }
    const double scale = alpha / std::max(1.0, std::sqrt(us / n) / d);
    for (size_t i = 0; i < n; ++i) r.p[i] = r.p[i] * (1 - lr * wd) - scale * u[i];
  };
}

struct Case {
  std::string name;
  std::function<std::unique_ptr<Optimizer>()> make;
  RefStep ref;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

template <class O, class Options>
std::function<std::unique_ptr<Optimizer>()> make(Options o) {
  return [o] { return std::make_unique<O>(o); };
}

const Case kCases[] = {
    {"SGD", make<SGD>(SGDOptions{.lr = 0.1}), sgd_ref(0, 0, 0, false, false)},
    {"SGD_momentum", make<SGD>(SGDOptions{.lr = 0.1, .momentum = 0.9}), sgd_ref(0.9, 0, 0, false, false)},
    {"SGD_dampening_weight_decay",
     make<SGD>(SGDOptions{.lr = 0.05, .momentum = 0.8, .dampening = 0.5, .weight_decay = 0.1}),
     sgd_ref(0.8, 0.5, 0.1, false, false)},
    {"SGD_nesterov_maximize",
     make<SGD>(
         SGDOptions{.lr = 0.05, .momentum = 0.7, .weight_decay = 0.01, .nesterov = true, .maximize = true}),
     sgd_ref(0.7, 0, 0.01, true, true)},
    {"Adam", make<Adam>(AdamOptions{.lr = 0.01}), adam_ref(0.9, 0.999, 1e-8, 0, false, false, false)},
    {"Adam_amsgrad_weight_decay",
     make<Adam>(
         AdamOptions{.lr = 0.02, .betas = {0.8, 0.9}, .eps = 1e-4, .weight_decay = 0.1, .amsgrad = true}),
     adam_ref(0.8, 0.9, 1e-4, 0.1, true, false, false)},
    {"Adam_maximize_cosine_schedule",
     make<Adam>(AdamOptions{.lr = cosine_decay(0.05, 3, 0.01), .maximize = true}),
     adam_ref(0.9, 0.999, 1e-8, 0, false, false, true)},
    {"AdamW", make<AdamW>(AdamWOptions{.lr = 0.01}), adam_ref(0.9, 0.999, 1e-8, 0.01, false, true, false)},
    {"AdamW_amsgrad",
     make<AdamW>(AdamWOptions{.lr = 0.02, .betas = {0.5, 0.7}, .weight_decay = 0.3, .amsgrad = true}),
     adam_ref(0.5, 0.7, 1e-8, 0.3, true, true, false)},
    {"Adamax", make<Adamax>(AdamaxOptions{.lr = 0.01}), adamax_ref(0.9, 0.999, 1e-8, 0)},
    {"Adamax_weight_decay",
     make<Adamax>(AdamaxOptions{.lr = 0.02, .betas = {0.7, 0.8}, .eps = 1e-3, .weight_decay = 0.2}),
     adamax_ref(0.7, 0.8, 1e-3, 0.2)},
    {"Adagrad", make<Adagrad>(AdagradOptions{.lr = 0.1}), adagrad_ref(0, 0, 0, 1e-10)},
    {"Adagrad_lr_decay_weight_decay_initial",
     make<Adagrad>(AdagradOptions{
         .lr = 0.2, .lr_decay = 0.1, .weight_decay = 0.05, .initial_accumulator_value = 0.3, .eps = 1e-3}),
     adagrad_ref(0.1, 0.05, 0.3, 1e-3)},
    {"RMSprop", make<RMSprop>(RMSpropOptions{.lr = 0.01}), rmsprop_ref(0.99, 1e-8, 0, 0, false)},
    {"RMSprop_centered", make<RMSprop>(RMSpropOptions{.lr = 0.01, .alpha = 0.9, .centered = true}),
     rmsprop_ref(0.9, 1e-8, 0, 0, true)},
    {"RMSprop_momentum_weight_decay",
     make<RMSprop>(
         RMSpropOptions{.lr = 0.01, .alpha = 0.8, .eps = 1e-3, .weight_decay = 0.1, .momentum = 0.9}),
     rmsprop_ref(0.8, 1e-3, 0.1, 0.9, false)},
    {"RMSprop_centered_momentum",
     make<RMSprop>(RMSpropOptions{.lr = 0.02, .alpha = 0.95, .momentum = 0.5, .centered = true}),
     rmsprop_ref(0.95, 1e-8, 0, 0.5, true)},
    {"Lion", make<Lion>(LionOptions{.lr = 0.01}), lion_ref(0.9, 0.99, 0)},
    {"Lion_weight_decay", make<Lion>(LionOptions{.lr = 0.02, .betas = {0.5, 0.8}, .weight_decay = 0.5}),
     lion_ref(0.5, 0.8, 0.5)},
    // eps1 is set, not left to the dtype's epsilon, so one reference serves float32 and float64; at
    // these gradients the default never binds anyway.
    {"Adafactor", make<Adafactor>(AdafactorOptions{.eps1 = 1e-30}), adafactor_ref(-0.8, 1e-30, 1e-3, 1, 0)},
    {"Adafactor_weight_decay_clipping",
     make<Adafactor>(
         AdafactorOptions{.lr = 0.3, .beta2_decay = -0.5, .eps1 = 1e-30, .d = 1.5, .weight_decay = 0.1}),
     adafactor_ref(-0.5, 1e-30, 1e-3, 1.5, 0.1)},
    {"Adafactor_eps_floors_bind",  // eps1 = 0.5 clamps the variance; eps2 = 2 exceeds RMS(p)
     make<Adafactor>(AdafactorOptions{.lr = exponential_decay(0.8, 0.5), .eps1 = 0.5, .eps2 = 2.0}),
     adafactor_ref(-0.8, 0.5, 2.0, 1, 0)},
};

struct Param {
  std::string key;
  Shape shape;
};
const std::vector<Param> kParams = {{"layer.weight", {3, 4}}, {"layer.bias", {4}}, {"conv.w", {2, 3, 2}}};

class Reference : public ::testing::TestWithParam<std::tuple<Case, Dtype>> {};

TEST_P(Reference, FiveStepsMatchFloat64Reference) {
  const auto& [c, dtype] = GetParam();
  const double tol = dtype == float64 ? 1e-10 : 3e-5;
  ParamTree params;
  std::map<std::string, Ref> refs;
  uint64_t seed = 1;
  for (const Param& p : kParams) {
    Vec v = test::random_values(shape_size(p.shape), seed++);
    params.set(p.key, Array(v, p.shape, dtype));
    refs[p.key] = Ref{.p = v, .shape = p.shape, .t = 0, .s = {}};
  }
  auto opt = c.make();
  for (int step = 0; step < 5; ++step) {
    ParamTree grads;
    std::map<std::string, Vec> g;
    for (const Param& p : kParams) {
      if (step == 2 && p.key == "layer.bias") continue;
      g[p.key] = test::random_values(shape_size(p.shape), 100 + seed++);
      grads.set(p.key, Array(g[p.key], p.shape, dtype));
    }
    const double lr = opt->learning_rate();
    params = opt->apply(params, grads);
    nn::eval({&params, &opt->state()});
    EXPECT_EQ(opt->state().at("step").item<int64_t>(), step + 1);
    for (auto& [key, grad] : g) {
      Ref& r = refs[key];
      ++r.t;
      c.ref(r, grad, lr);
    }
    for (auto& [key, r] : refs) {
      SCOPED_TRACE(key + " after step " + std::to_string(step + 1));
      EXPECT_EQ(params.at(key).dtype(), dtype);
      test::expect_close(params.at(key), r.p, tol, tol);
      EXPECT_EQ(opt->state().at(key + ".step").item<int64_t>(), r.t);
      for (auto& [slot, values] : r.s) {
        const Array& s = opt->state().at(key + "." + slot);
        EXPECT_EQ(s.dtype(), dtype) << slot;
        test::expect_close(s, values, tol, tol);
      }
    }
  }
  // The state holds exactly the reference's slots, the step counts and "step".
  size_t expected_entries = 1;
  for (auto& [key, r] : refs) expected_entries += 1 + r.s.size();
  EXPECT_EQ(opt->state().size(), expected_entries);
}

INSTANTIATE_TEST_SUITE_P(Optim, Reference,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Values(float64, float32)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" +
                                  std::string(dtype_name(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace kiln::optim
