#include "kiln/nn/losses.h"

#include <cmath>
#include <vector>

#include "kiln/core/ops/binary.h"
#include "kiln/core/ops/cast.h"
#include "kiln/core/ops/index.h"
#include "kiln/core/ops/reduce.h"
#include "kiln/core/ops/shape.h"
#include "kiln/core/ops/ternary.h"
#include "kiln/core/ops/unary.h"
#include "kiln/nn/activations.h"
#include "kiln/nn/mixed_precision.h"

namespace kiln::nn {

namespace {

Array reduce(const Array& loss, Reduction reduction, const char* op) {
  switch (reduction) {
    case Reduction::none:
      return loss;
    case Reduction::mean:
      return mean(loss);
    case Reduction::sum:
      return sum(loss);
    case Reduction::batchmean:
      return loss.ndim() == 0 ? loss : sum(loss) / static_cast<double>(loss.shape(0));
  }
  throw ValueError::of(op, "unknown reduction", "{}", static_cast<int>(reduction));
}

void check_valid(const char* op, const Array& a, const char* name) {
  if (!a.valid()) throw ValueError::of(op, "empty array handle", "{} is an empty Array", name);
}

void check_float(const char* op, const Array& a, const char* name) {
  check_valid(op, a, name);
  if (!is_floating(a.dtype()))
    throw DtypeError::of(op, "expected a floating dtype", "{} has dtype {}", name, dtype_name(a.dtype()));
}

void check_same_shape(const char* op, const Array& a, const char* a_name, const Array& b,
                      const char* b_name) {
  check_valid(op, a, a_name);
  check_valid(op, b, b_name);
  if (a.shape() != b.shape())
    throw ShapeError::of(op, "shapes differ", "{} {} vs {} {}", a_name, shape_str(a.shape()), b_name,
                         shape_str(b.shape()));
}

// An optional per-element factor (weights, pos_weight) must broadcast to the loss without growing it.
void check_broadcasts_to(const char* op, const Array& factor, const char* name, const Shape& shape) {
  if (!factor.valid()) return;
  if (broadcast_shapes(op, factor.shape(), shape) != shape)
    throw ShapeError::of(op, "does not broadcast to the loss's shape", "{} {} vs {}", name,
                         shape_str(factor.shape()), shape_str(shape));
}

Shape without_axis(Shape shape, int axis) {
  shape.erase(shape.begin() + axis);
  return shape;
}

// Per-class weights reshaped to broadcast along `axis` of an ndim-dimensional array.
Array class_weights_along(const Array& weights, int axis, int ndim, Dtype dtype) {
  Shape shape(ndim, 1);
  shape[axis] = weights.shape(0);
  return reshape(astype(weights, dtype), shape);
}

void check_class_weights(const char* op, const Array& weights, int64_t n_classes) {
  if (!weights.valid()) return;
  if (weights.shape() != Shape{n_classes})
    throw ShapeError::of(op, "weights must have one entry per class", "weights {} for {} classes",
                         shape_str(weights.shape()), n_classes);
}

// Integer class-index targets of the input's shape without the class axis. Their range is checked
// here when they are already evaluated, so a bad label is reported at the call. A negative index
// must be refused too: take_along_axis would count it from the end.
void check_index_targets(const char* op, const Array& targets, const Shape& index_shape, int64_t n_classes,
                         std::optional<int64_t> ignore_index) {
  if (!is_integral(targets.dtype()))
    throw DtypeError::of(op, "class-index targets must have an integer dtype", "got {}",
                         dtype_name(targets.dtype()));
  if (targets.shape() != index_shape)
    throw ShapeError::of(op, "targets do not match the input", "expected class indices of shape {}, got {}",
                         shape_str(index_shape), shape_str(targets.shape()));
  if (!targets.is_available()) return;
  const std::vector<int64_t> labels = targets.to_vector<int64_t>();
  for (size_t i = 0; i < labels.size(); ++i) {
    if (ignore_index && labels[i] == *ignore_index) continue;
    if (labels[i] < 0 || labels[i] >= n_classes)
      throw ValueError::of(op, "class index out of range", "target {} at flat position {} is not in [0, {})",
                           labels[i], i, n_classes);
  }
}

// Negative log-likelihood of class-index targets, with PyTorch's weights, ignore_index and label
// smoothing (aten/src/ATen/native/LossNLL.cpp, cross_entropy_loss_label_smoothing): the smoothing
// term -sum_c(w_c * log_probs_c) is reduced with the same denominator as the main term.
Array index_target_loss(const char* op, const Array& log_probs, const Array& targets, int axis,
                        const Array& weights, std::optional<int64_t> ignore_index, double label_smoothing,
                        Reduction reduction) {
  const Dtype dtype = log_probs.dtype();
  std::optional<Array> kept;  // false where the target is ignore_index
  Array classes = targets;
  if (ignore_index) {
    kept = targets != *ignore_index;
    classes = where(*kept, targets, 0);  // class 0 always exists, so ignored entries gather safely
  }
  Array nll = -squeeze(take_along_axis(log_probs, expand_dims(classes, axis), axis), Axes{axis});
  std::optional<Array> target_weight;  // what Reduction::mean divides by; absent: the count
  if (weights.valid()) {
    target_weight = take(astype(weights, dtype), classes, 0);
    nll = nll * *target_weight;
  }
  if (kept) {
    // where, not a product with 0: an ignored entry's log-probability may be -inf.
    nll = where(*kept, nll, 0.0);
    target_weight = target_weight ? where(*kept, *target_weight, 0.0) : astype(*kept, dtype);
  }
  auto reduce_over_targets = [&](const Array& loss) {
    if (reduction == Reduction::mean && target_weight) return sum(loss) / sum(*target_weight);
    return reduce(loss, reduction, op);
  };
  if (label_smoothing == 0) return reduce_over_targets(nll);
  const Array weighted_log_probs =
      weights.valid() ? log_probs * class_weights_along(weights, axis, log_probs.ndim(), dtype) : log_probs;
  Array smooth = -sum(weighted_log_probs, axis);
  if (kept) smooth = where(*kept, smooth, 0.0);
  const double n_classes = static_cast<double>(log_probs.shape(axis));
  return (1.0 - label_smoothing) * reduce_over_targets(nll) +
         (label_smoothing / n_classes) * reduce_over_targets(smooth);
}

// log(p) clamped below at -100 as PyTorch's binary_cross_entropy does. log sees 1 where p == 0, so
// the masked-out log(0) = -inf does not turn the zero cotangent into 0 * inf = NaN.
Array clamped_log(const Array& p) {
  const Array is_zero = p == 0.0;
  return where(is_zero, -100.0, maximum(log(where(is_zero, 1.0, p)), -100.0));
}

}  // namespace

Array cross_entropy(const Array& logits_in, const Array& targets_in, const CrossEntropyOptions& options) {
  // 16-bit inputs (a mixed-precision model's logits) are taken up: the loss accumulates in float32.
  const Array logits = detail::to_float32(logits_in);
  const Array targets = detail::to_float32(targets_in);
  constexpr const char* kOp = "cross_entropy";
  check_float(kOp, logits, "logits");
  check_valid(kOp, targets, "targets");
  const int axis = normalize_axis(kOp, options.axis, logits.ndim());
  const int64_t n_classes = logits.shape(axis);
  const double smoothing = options.label_smoothing;
  if (!(smoothing >= 0 && smoothing <= 1))
    throw ValueError::of(kOp, "label_smoothing must be in [0, 1]", "got {}", smoothing);
  check_class_weights(kOp, options.weights, n_classes);
  const Shape index_shape = without_axis(logits.shape(), axis);

  if (is_floating(targets.dtype()) && targets.shape() == logits.shape()) {
    // Probability targets (PyTorch's cross_entropy_loss_prob_target).
    if (options.ignore_index)
      throw ValueError::of(kOp, "ignore_index applies only to class-index targets",
                           "targets {} are probabilities", shape_str(targets.shape()));
    const Array log_probs = log_softmax(logits, axis);
    const Array target = smoothing > 0 ? targets * (1.0 - smoothing) + smoothing / n_classes : targets;
    Array per_class = log_probs * target;
    if (options.weights.valid())
      per_class = per_class * class_weights_along(options.weights, axis, logits.ndim(), logits.dtype());
    return reduce(-sum(per_class, axis), options.reduction, kOp);
  }
  if (is_floating(targets.dtype()) && targets.shape() == index_shape)
    throw DtypeError::of(kOp, "class-index targets must have an integer dtype",
                         "targets {} have dtype {}; probability targets need logits' shape {}",
                         shape_str(targets.shape()), dtype_name(targets.dtype()), shape_str(logits.shape()));
  if (is_integral(targets.dtype()) && targets.shape() == logits.shape())
    throw DtypeError::of(kOp, "probability targets must have a floating dtype", "targets {} have dtype {}",
                         shape_str(targets.shape()), dtype_name(targets.dtype()));
  if (targets.shape() != index_shape && targets.shape() != logits.shape())
    throw ShapeError::of(
        kOp, "targets do not match logits",
        "logits {} (class axis {}) need class indices {} or probabilities {}, got targets {}",
        shape_str(logits.shape()), axis, shape_str(index_shape), shape_str(logits.shape()),
        shape_str(targets.shape()));
  check_index_targets(kOp, targets, index_shape, n_classes, options.ignore_index);
  return index_target_loss(kOp, log_softmax(logits, axis), targets, axis, options.weights,
                           options.ignore_index, smoothing, options.reduction);
}

Array nll_loss(const Array& log_probs_in, const Array& targets, const NllLossOptions& options) {
  // 16-bit inputs (a mixed-precision model's logits) are taken up: the loss accumulates in float32.
  const Array log_probs = detail::to_float32(log_probs_in);
  constexpr const char* kOp = "nll_loss";
  check_float(kOp, log_probs, "log_probs");
  check_valid(kOp, targets, "targets");
  const int axis = normalize_axis(kOp, options.axis, log_probs.ndim());
  const int64_t n_classes = log_probs.shape(axis);
  check_class_weights(kOp, options.weights, n_classes);
  check_index_targets(kOp, targets, without_axis(log_probs.shape(), axis), n_classes, options.ignore_index);
  return index_target_loss(kOp, log_probs, targets, axis, options.weights, options.ignore_index, 0.0,
                           options.reduction);
}

Array binary_cross_entropy(const Array& probs_in, const Array& targets_in,
                           const BinaryCrossEntropyOptions& options) {
  // 16-bit inputs (a mixed-precision model's logits) are taken up: the loss accumulates in float32.
  const Array probs = detail::to_float32(probs_in);
  const Array targets = detail::to_float32(targets_in);
  constexpr const char* kOp = "binary_cross_entropy";
  check_same_shape(kOp, probs, "probs", targets, "targets");
  check_float(kOp, probs, "probs");
  check_broadcasts_to(kOp, options.weights, "weights", probs.shape());
  Array loss = -(targets * clamped_log(probs) + (1.0 - targets) * clamped_log(1.0 - probs));
  if (options.weights.valid()) loss = loss * options.weights;
  return reduce(loss, options.reduction, kOp);
}

Array binary_cross_entropy_with_logits(const Array& logits_in, const Array& targets_in,
                                       const BinaryCrossEntropyWithLogitsOptions& options) {
  // 16-bit inputs (a mixed-precision model's logits) are taken up: the loss accumulates in float32.
  const Array logits = detail::to_float32(logits_in);
  const Array targets = detail::to_float32(targets_in);
  constexpr const char* kOp = "binary_cross_entropy_with_logits";
  check_same_shape(kOp, logits, "logits", targets, "targets");
  check_float(kOp, logits, "logits");
  check_broadcasts_to(kOp, options.weights, "weights", logits.shape());
  check_broadcasts_to(kOp, options.pos_weight, "pos_weight", logits.shape());
  // (1 - t) * x - (1 + (pos_weight - 1) * t) * log_sigmoid(x): for pos_weight = 1 this is
  // -(t * log_sigmoid(x) + (1 - t) * log_sigmoid(-x)), since log_sigmoid(-x) = log_sigmoid(x) - x.
  // log_sigmoid never overflows, so neither does the loss.
  const Array positive_scale =
      options.pos_weight.valid() ? 1.0 + (options.pos_weight - 1.0) * targets : Array();
  const Array log_sig = log_sigmoid(logits);
  Array loss = (1.0 - targets) * logits - (positive_scale.valid() ? positive_scale * log_sig : log_sig);
  if (options.weights.valid()) loss = loss * options.weights;
  return reduce(loss, options.reduction, kOp);
}

Array mse_loss(const Array& input_in, const Array& target_in, Reduction reduction) {
  // 16-bit inputs (a mixed-precision model's logits) are taken up: the loss accumulates in float32.
  const Array input = detail::to_float32(input_in);
  const Array target = detail::to_float32(target_in);
  check_same_shape("mse_loss", input, "input", target, "target");
  return reduce(square(input - target), reduction, "mse_loss");
}

Array l1_loss(const Array& input_in, const Array& target_in, Reduction reduction) {
  // 16-bit inputs (a mixed-precision model's logits) are taken up: the loss accumulates in float32.
  const Array input = detail::to_float32(input_in);
  const Array target = detail::to_float32(target_in);
  check_same_shape("l1_loss", input, "input", target, "target");
  return reduce(abs(input - target), reduction, "l1_loss");
}

Array smooth_l1_loss(const Array& input_in, const Array& target_in, const SmoothL1LossOptions& options) {
  // 16-bit inputs (a mixed-precision model's logits) are taken up: the loss accumulates in float32.
  const Array input = detail::to_float32(input_in);
  const Array target = detail::to_float32(target_in);
  constexpr const char* kOp = "smooth_l1_loss";
  check_same_shape(kOp, input, "input", target, "target");
  const double beta = options.beta;
  if (!(beta >= 0)) throw ValueError::of(kOp, "beta must be >= 0", "got {}", beta);
  const Array diff = input - target;
  const Array abs_diff = abs(diff);
  if (beta == 0) return reduce(abs_diff, options.reduction, kOp);  // PyTorch's special case: l1
  return reduce(where(abs_diff < beta, (0.5 / beta) * square(diff), abs_diff - 0.5 * beta), options.reduction,
                kOp);
}

Array huber_loss(const Array& input_in, const Array& target_in, const HuberLossOptions& options) {
  // 16-bit inputs (a mixed-precision model's logits) are taken up: the loss accumulates in float32.
  const Array input = detail::to_float32(input_in);
  const Array target = detail::to_float32(target_in);
  constexpr const char* kOp = "huber_loss";
  check_same_shape(kOp, input, "input", target, "target");
  const double delta = options.delta;
  if (!(delta > 0)) throw ValueError::of(kOp, "delta must be > 0", "got {}", delta);
  const Array diff = input - target;
  const Array abs_diff = abs(diff);
  return reduce(where(abs_diff < delta, 0.5 * square(diff), delta * (abs_diff - 0.5 * delta)),
                options.reduction, kOp);
}

Array kl_div(const Array& input_in, const Array& target_in, const KlDivOptions& options) {
  // 16-bit inputs (a mixed-precision model's logits) are taken up: the loss accumulates in float32.
  const Array input = detail::to_float32(input_in);
  const Array target = detail::to_float32(target_in);
  constexpr const char* kOp = "kl_div";
  check_same_shape(kOp, input, "input", target, "target");
  Array loss;
  if (options.log_target) {
    loss = exp(target) * (target - input);
  } else {
    // xlogy(t, t) - t * input, with xlogy(0, 0) = 0. log sees 1 where t == 0 so that the masked
    // log(0) does not make the gradient with respect to the target NaN.
    const Array is_zero = target == 0.0;
    const Array target_log_target = where(is_zero, 0.0, target * log(where(is_zero, 1.0, target)));
    loss = target_log_target - target * input;
  }
  return reduce(loss, options.reduction, kOp);
}

Array cosine_similarity(const Array& x1, const Array& x2, int axis, double eps) {
  constexpr const char* kOp = "cosine_similarity";
  check_valid(kOp, x1, "x1");
  check_valid(kOp, x2, "x2");
  const Shape shape = broadcast_shapes(kOp, x1.shape(), x2.shape());
  const int ax = normalize_axis(kOp, axis, static_cast<int>(shape.size()));
  const Array a = broadcast_to(x1, shape), b = broadcast_to(x2, shape);
  // max(|x|, eps) as sqrt(max(|x|^2, eps^2)): the same value, and sqrt never sees 0, so a zero
  // vector gets a finite gradient.
  const double eps_squared = eps * eps;
  const Array norm_a = sqrt(maximum(sum(square(a), ax, true), eps_squared));
  const Array norm_b = sqrt(maximum(sum(square(b), ax, true), eps_squared));
  return sum((a / norm_a) * (b / norm_b), ax);
}

Array cosine_embedding_loss(const Array& x1, const Array& x2, const Array& y,
                            const CosineEmbeddingLossOptions& options) {
  constexpr const char* kOp = "cosine_embedding_loss";
  check_same_shape(kOp, x1, "x1", x2, "x2");
  check_valid(kOp, y, "y");
  if (x1.ndim() != 1 && x1.ndim() != 2)
    throw ShapeError::of(kOp, "inputs must be (N, D) or (D,)", "got {}", shape_str(x1.shape()));
  const Shape y_shape = without_axis(x1.shape(), x1.ndim() - 1);
  if (y.shape() != y_shape)
    throw ShapeError::of(kOp, "y does not match the inputs", "inputs {} need y {}, got {}",
                         shape_str(x1.shape()), shape_str(y_shape), shape_str(y.shape()));
  // PyTorch's formula (aten/src/ATen/native/Loss.cpp): squared norms offset by 1e-12.
  constexpr double kEpsilon = 1e-12;
  const Array dot = sum(x1 * x2, -1);
  const Array cos = dot / sqrt((sum(square(x1), -1) + kEpsilon) * (sum(square(x2), -1) + kEpsilon));
  const Array loss = where(y == 1, 1.0 - cos, 0.0) + where(y == -1, maximum(cos - options.margin, 0.0), 0.0);
  return reduce(loss, options.reduction, kOp);
}

Array margin_ranking_loss(const Array& x1, const Array& x2, const Array& y,
                          const MarginRankingLossOptions& options) {
  constexpr const char* kOp = "margin_ranking_loss";
  check_same_shape(kOp, x1, "x1", x2, "x2");
  check_same_shape(kOp, x1, "x1", y, "y");
  return reduce(maximum(-y * (x1 - x2) + options.margin, 0.0), options.reduction, kOp);
}

Array pairwise_distance(const Array& x1, const Array& x2, double p, double eps) {
  constexpr const char* kOp = "pairwise_distance";
  check_valid(kOp, x1, "x1");
  check_valid(kOp, x2, "x2");
  if (!(p > 0)) throw ValueError::of(kOp, "p must be > 0", "got {}", p);
  const Shape shape = broadcast_shapes(kOp, x1.shape(), x2.shape());
  if (shape.empty())
    throw ShapeError::of(kOp, "inputs need at least one dimension", "x1 {}, x2 {}", shape_str(x1.shape()),
                         shape_str(x2.shape()));
  const Array diff = x1 - x2 + eps;
  if (p == 2) return sqrt(sum(square(diff), -1));
  if (p == 1) return sum(abs(diff), -1);
  if (std::isinf(p)) return max(abs(diff), -1);
  return power(sum(power(abs(diff), p), -1), 1.0 / p);
}

Array triplet_margin_loss(const Array& anchor, const Array& positive, const Array& negative,
                          const TripletMarginLossOptions& options) {
  constexpr const char* kOp = "triplet_margin_loss";
  check_same_shape(kOp, anchor, "anchor", positive, "positive");
  check_same_shape(kOp, anchor, "anchor", negative, "negative");
  if (anchor.ndim() == 0)
    throw ShapeError::of(kOp, "inputs need at least one dimension", "anchor {}", shape_str(anchor.shape()));
  if (!(options.p > 0)) throw ValueError::of(kOp, "p must be > 0", "got {}", options.p);
  const Array distance_positive = pairwise_distance(anchor, positive, options.p, options.eps);
  Array distance_negative = pairwise_distance(anchor, negative, options.p, options.eps);
  if (options.swap)
    distance_negative =
        minimum(distance_negative, pairwise_distance(positive, negative, options.p, options.eps));
  return reduce(maximum(options.margin + distance_positive - distance_negative, 0.0), options.reduction, kOp);
}

}  // namespace kiln::nn
