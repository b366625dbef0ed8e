// Optimizers against literal numbers from PyTorch (torch.optim of Debian's python3-torch 1.13, float32,
// single-tensor path). Lion and Adafactor are not in torch 1.13: the script runs lion-pytorch's
// update_fn and PyTorch 2.5's _single_tensor_adafactor copied verbatim. The inputs follow closed
// formulas; the parameter "b" has no gradient at the third step (PyTorch skips it: its per-parameter
// step count stays behind, which changes the bias corrections after).
//
// Produced by `/usr/bin/python3 golden.py`, each line the final [w (2, 3) flattened, b (3)]:
//   import math, torch
//   torch.set_printoptions(precision=10)
//   def inputs():
//       w = torch.tensor([0.5 * math.sin(1.3 * i + 0.7) for i in range(6)], dtype=torch.float32).reshape(2,
//       3) b = torch.tensor([0.3 * math.cos(0.8 * i + 0.2) for i in range(3)], dtype=torch.float32) return
//       [w.requires_grad_(), b.requires_grad_()]
//   def grad(t, n, o):
//       return torch.tensor([math.sin(0.9 * (i + o) + 1.7 * t + 0.3) * (1 + 0.25 * t) for i in range(n)],
//       dtype=torch.float32)
//   def run(make, step=None):
//       w, b = inputs()
//       opt = make([w, b])
//       for t in range(4):
//           w.grad = grad(t, 6, 0).reshape(2, 3)
//           b.grad = None if t == 2 else grad(t, 3, 10)   # b has no gradient at the third step
//           if step: step(opt, [w, b])
//           else: opt.step()
//       print(", ".join(repr(float(x)) for x in torch.cat([w.detach().flatten(), b.detach()])))
//   O = torch.optim
//   run(lambda p: O.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01))
//   run(lambda p: O.SGD(p, lr=0.05, momentum=0.8, dampening=0.3, maximize=True))
//   run(lambda p: O.Adam(p, lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, amsgrad=True))
//   run(lambda p: O.AdamW(p, lr=0.02, weight_decay=0.05))
//   run(lambda p: O.Adamax(p, lr=0.01, weight_decay=0.02))
//   run(lambda p: O.Adagrad(p, lr=0.1, lr_decay=0.05, weight_decay=0.01, initial_accumulator_value=0.2))
//   run(lambda p: O.RMSprop(p, lr=0.01, alpha=0.9, momentum=0.5, centered=True, weight_decay=0.01))
//   # Lion: lucidrains/lion-pytorch update_fn, verbatim.
//   def lion_step(state, ps, lr=0.01, wd=0.1, beta1=0.9, beta2=0.99):
//       for p in ps:
//           if p.grad is None: continue
//           exp_avg = state.setdefault(id(p), torch.zeros_like(p))
//           with torch.no_grad():
//               p.data.mul_(1 - lr * wd)
//               update = exp_avg.clone().mul_(beta1).add(p.grad, alpha=1 - beta1).sign_()
//               p.add_(update, alpha=-lr)
//               exp_avg.mul_(beta2).add_(p.grad, alpha=1 - beta2)
//   run(lambda p: {}, lion_step)
//   # Adafactor: torch 2.5's _single_tensor_adafactor (torch/optim/_adafactor.py), verbatim, on torch 1.13.
//   def adafactor_step(state, ps, lr=1e-2, beta2_decay=-0.8, eps1=None, eps2=1e-3, d=1.0, weight_decay=0.05):
//       for param in ps:
//           grad = param.grad
//           if grad is None: continue
//           st = state.setdefault(id(param), {})
//           if not st:
//               st["step"] = torch.tensor(0.0)
//               if grad.dim() > 1:
//                   rs = list(grad.shape); rs[-1] = 1; st["row_var"] = grad.new_zeros(rs)
//                   cs = list(grad.shape); cs[-2] = 1; st["col_var"] = grad.new_zeros(cs)
//               else:
//                   st["variance"] = torch.zeros_like(grad)
//           with torch.no_grad():
//               e1 = torch.finfo(param.dtype).eps if eps1 is None else eps1
//               st["step"] += 1
//               step_float = st["step"].item()
//               one_minus_beta2_t = step_float ** beta2_decay
//               rho_t = min(lr, 1 / (step_float ** 0.5))
//               alpha = max(eps2, param.norm(2).item() / (param.numel() ** 0.5)) * rho_t
//               if weight_decay != 0:
//                   param.mul_(1 - lr * weight_decay)
//               if grad.dim() > 1:
//                   row_var, col_var = st["row_var"], st["col_var"]
//                   row_mean = torch.linalg.vector_norm(grad, dim=-1,
//                   keepdim=True).square_().div_(grad.size(-1)) row_var.lerp_(row_mean, one_minus_beta2_t)
//                   col_mean = torch.linalg.vector_norm(grad, dim=-2,
//                   keepdim=True).square_().div_(grad.size(-2)) col_var.lerp_(col_mean, one_minus_beta2_t)
//                   var_estimate = row_var @ col_var
//                   var_estimate.div_(row_var.mean(dim=-2, keepdim=True).clamp_(min=e1))
//               else:
//                   variance = st["variance"]
//                   variance.lerp_(grad * grad, one_minus_beta2_t)
//                   var_estimate = variance.clone()
//               update = var_estimate.clamp_(min=e1 * e1).rsqrt_()
//               update.mul_(grad)
//               denom = max(1.0, update.norm(2).item() / ((update.numel() ** 0.5) * d))
//               param.add_(update, alpha=-alpha / denom)
//   run(lambda p: {}, adafactor_step)
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "kiln/optim/optim.h"
#include "support/op_test.h"

namespace kiln::optim {
namespace {

std::vector<double> grad_values(int t, int n, int offset) {
  std::vector<double> g(n);
  for (int i = 0; i < n; ++i) g[i] = std::sin(0.9 * (i + offset) + 1.7 * t + 0.3) * (1 + 0.25 * t);
  return g;
}

// Runs four steps on the script's inputs; returns [w, b] flattened.
std::vector<double> run(Optimizer& opt) {
  std::vector<double> w(6), b(3);
  for (int i = 0; i < 6; ++i) w[i] = 0.5 * std::sin(1.3 * i + 0.7);
  for (int i = 0; i < 3; ++i) b[i] = 0.3 * std::cos(0.8 * i + 0.2);
  ParamTree params{{"w", Array(w, {2, 3}, float32)}, {"b", Array(b, {3}, float32)}};
  for (int t = 0; t < 4; ++t) {
    ParamTree grads{{"w", Array(grad_values(t, 6, 0), {2, 3}, float32)}};
    if (t != 2) grads.set("b", Array(grad_values(t, 3, 10), {3}, float32));
    params = opt.apply(params, grads);
    nn::eval({&params, &opt.state()});
  }
  std::vector<double> out = test::values(params.at("w"));
  for (double v : test::values(params.at("b"))) out.push_back(v);
  return out;
}

struct GoldenCase {
  const char* name;
  std::function<std::unique_ptr<Optimizer>()> make;
  std::vector<double> torch;
};

void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.name; }

const GoldenCase kCases[] = {
    {"SGD_nesterov_weight_decay",
     [] {
       return std::make_unique<SGD>(
           SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
     },
     {0.28011319041252136, 0.3646305799484253, -0.1448902189731598, -0.4895780682563782, -0.1161470040678978,
      0.47597238421440125, 0.26619991660118103, 0.47795370221138, 0.35215097665786743}},
    {"SGD_dampening_maximize",
     [] {
       return std::make_unique<SGD>(
           SGDOptions{.lr = 0.05, .momentum = 0.8, .dampening = 0.3, .maximize = true});
     },
     {0.36539381742477417, 0.5248836874961853, -0.034840378910303116, -0.5123383402824402,
      -0.2502318024635315, 0.3336390554904938, 0.2896007299423218, 0.05232802778482437,
      -0.20020049810409546}},
    {"Adam_amsgrad_weight_decay",
     [] {
       return std::make_unique<Adam>(
           AdamOptions{.lr = 0.01, .betas = {0.8, 0.95}, .eps = 1e-6, .weight_decay = 0.1, .amsgrad = true});
     },
     {0.3045673370361328, 0.4395427107810974, -0.08464361727237701, -0.49803033471107483, -0.170720636844635,
      0.40571722388267517, 0.28816983103752136, 0.18400034308433533, -0.04754321277141571}},
    {"AdamW",
     [] { return std::make_unique<AdamW>(AdamWOptions{.lr = 0.02, .weight_decay = 0.05}); },
     {0.28446048498153687, 0.4215039014816284, -0.09258820861577988, -0.4983211159706116,
      -0.15103855729103088, 0.418284147977829, 0.28260770440101624, 0.2073686569929123,
      -0.02606474608182907}},
    {"Adamax_weight_decay",
     [] { return std::make_unique<Adamax>(AdamaxOptions{.lr = 0.01, .weight_decay = 0.02}); },
     {0.30599409341812134, 0.4399915337562561, -0.08618779480457306, -0.5011150240898132,
      -0.16917908191680908, 0.4078643321990967, 0.28730422258377075, 0.1843262016773224,
      -0.04983847588300705}},
    {"Adagrad_lr_decay_initial_accumulator",
     [] {
       return std::make_unique<Adagrad>(AdagradOptions{
           .lr = 0.1, .lr_decay = 0.05, .weight_decay = 0.01, .initial_accumulator_value = 0.2});
     },
     {0.2872789204120636, 0.4096885323524475, -0.10593949258327484, -0.5161792039871216, -0.13854844868183136,
      0.4286143481731415, 0.28439098596572876, 0.263422429561615, 0.052334025502204895}},
    {"RMSprop_centered_momentum",
     [] {
       return std::make_unique<RMSprop>(
           RMSpropOptions{.lr = 0.01, .alpha = 0.9, .weight_decay = 0.01, .momentum = 0.5, .centered = true});
     },
     {0.25231683254241943, 0.41295522451400757, -0.09135012328624725, -0.5352125763893127,
      -0.12844116985797882, 0.4174731373786926, 0.25893959403038025, 0.24165067076683044,
      -0.0016623266274109483}},
    {"Lion_weight_decay",
     [] { return std::make_unique<Lion>(LionOptions{.lr = 0.01, .weight_decay = 0.1}); },
     {0.3208622932434082, 0.43287286162376404, -0.07855784893035889, -0.5148411989212036,
      -0.18623168766498566, 0.39524900913238525, 0.28314879536628723, 0.1715749204158783,
      -0.05796635150909424}},
    {"Adafactor_weight_decay",
     [] { return std::make_unique<Adafactor>(AdafactorOptions{.weight_decay = 0.05}); },
     {0.31977397203445435, 0.45257705450057983, -0.07934566587209702, -0.4990604817867279,
      -0.18594907224178314, 0.39677292108535767, 0.2919154763221741, 0.1641785353422165,
      -0.06496233493089676}},
};

class TorchGolden : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(TorchGolden, FourStepsMatchPyTorch) {
  const GoldenCase& c = GetParam();
  auto opt = c.make();
  const std::vector<double> got = run(*opt);
  ASSERT_EQ(got.size(), c.torch.size());
  // float32 on both sides; only the order of a few roundings differs.
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], c.torch[i], 2e-6 + 2e-6 * std::abs(c.torch[i])) << i;
}

INSTANTIATE_TEST_SUITE_P(Optim, TorchGolden, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kiln::optim
