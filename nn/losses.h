#pragma once
// Loss functions with the semantics of torch.nn.functional. Each is a composition of core ops, so
// it is lazy and differentiable in every floating input. Shapes and dtypes are checked when the
// function is called and reported as "[loss_name] what: details" (ShapeError, DtypeError,
// ValueError). One difference from PyTorch: the class axis of cross_entropy and nll_loss is an
// option that defaults to the last axis (kiln's channels-last layout); for (N, C) input the two
// agree, and for PyTorch's (N, C, d1, ...) layout pass .axis = 1. Another, as under PyTorch's
// autocast: float16 and bfloat16 inputs of cross_entropy, nll_loss, the binary cross entropies,
// mse, l1, smooth_l1, huber and kl_div are taken up to float32 and the loss is float32 (a log
// probability near -10 has a resolution of 0.06 in bfloat16).
#include <cstdint>
#include <optional>

#include "kiln/core/array.h"

namespace kiln::nn {

/// How a loss combines its per-element values.
enum class Reduction {
  none,       ///< the unreduced losses, one per element (per example for cross_entropy)
  mean,       ///< their mean (cross_entropy and nll_loss: weighted by the targets' class weights)
  sum,        ///< their sum
  batchmean,  ///< their sum divided by the size of the first axis of the unreduced losses (1 when
              ///< they are 0-d): PyTorch's kl_div "batchmean", offered for every loss
};

/// Options of cross_entropy, in declaration order (designated initializers must follow it).
struct CrossEntropyOptions {
  int axis = -1;                             ///< the class axis of the logits
  double label_smoothing = 0;                ///< in [0, 1]
  std::optional<int64_t> ignore_index = {};  ///< a class-index target with this value adds 0
  Array weights = Array();                   ///< per-class weights, shape (C,); none when empty
  Reduction reduction = Reduction::mean;
};

/// torch.nn.functional.cross_entropy: log_softmax of `logits` along the class axis, then the
/// negative log-likelihood of `targets`, which are either
/// - class indices: an integer array of logits' shape without the class axis; an index equal to
///   ignore_index adds 0 and is left out of the mean. Reduction::mean divides by the total weight
///   of the targets that are not ignored (their count without weights); NaN if all are ignored.
/// - probabilities: a float array of logits' shape; mean divides by the number of examples
///   (size / C). ignore_index must not be set.
/// label_smoothing mixes each target with the uniform distribution as PyTorch does. Throws
/// DtypeError for non-float logits, float targets of the index shape or integer targets of the
/// logits' shape; ShapeError for targets of any other shape or weights not of shape (C,);
/// ValueError for label_smoothing outside [0, 1] or a class index out of [0, C) that is not
/// ignore_index (checked when targets are already evaluated; otherwise take_along_axis reports an
/// out-of-range index at eval).
Array cross_entropy(const Array& logits, const Array& targets, const CrossEntropyOptions& options = {});

/// Options of nll_loss, in declaration order.
struct NllLossOptions {
  int axis = -1;                             ///< the class axis of log_probs
  std::optional<int64_t> ignore_index = {};  ///< a target with this value adds 0
  Array weights = Array();                   ///< per-class weights, shape (C,); none when empty
  Reduction reduction = Reduction::mean;
};

/// torch.nn.functional.nll_loss: -weights[t] * log_probs[..., t, ...] for integer class-index
/// targets of log_probs' shape without the class axis; mean divides by the total weight of the
/// targets that are not ignored. Throws as cross_entropy does for index targets.
Array nll_loss(const Array& log_probs, const Array& targets, const NllLossOptions& options = {});

/// Options of binary_cross_entropy.
struct BinaryCrossEntropyOptions {
  Array weights = Array();  ///< multiplies each element's loss; broadcasts to probs' shape
  Reduction reduction = Reduction::mean;
};

/// torch.nn.functional.binary_cross_entropy: -w * (t * log(p) + (1 - t) * log(1 - p)) with each
/// log clamped to >= -100 as PyTorch does, so p = 0 or 1 gives a finite loss and gradient.
/// The gradient is that of this clamped formula, so it is 0 through a clamped log (p < e^-100 or
/// 1 - p < e^-100), where PyTorch's hand-written backward gives (p - t) / max(p * (1 - p), 1e-12).
/// probs and targets must have the same shape (ShapeError) and probs a float dtype (DtypeError).
Array binary_cross_entropy(const Array& probs, const Array& targets,
                           const BinaryCrossEntropyOptions& options = {});

/// Options of binary_cross_entropy_with_logits.
struct BinaryCrossEntropyWithLogitsOptions {
  Array weights = Array();     ///< multiplies each element's loss; broadcasts to logits' shape
  Array pos_weight = Array();  ///< weight of the positive term, broadcast against the last axis
  Reduction reduction = Reduction::mean;
};

/// torch.nn.functional.binary_cross_entropy_with_logits:
/// -w * (pos_weight * t * log_sigmoid(x) + (1 - t) * log_sigmoid(-x)), computed without overflow
/// for any finite logit (|x| = 1000 gives a finite loss and gradient). Throws as
/// binary_cross_entropy does, and ShapeError if weights or pos_weight do not broadcast.
Array binary_cross_entropy_with_logits(const Array& logits, const Array& targets,
                                       const BinaryCrossEntropyWithLogitsOptions& options = {});

/// Squared error (input - target)^2 (torch.nn.functional.mse_loss). Shapes must be equal
/// (ShapeError; PyTorch only warns and broadcasts).
Array mse_loss(const Array& input, const Array& target, Reduction reduction = Reduction::mean);
/// Absolute error |input - target| (torch.nn.functional.l1_loss). Shapes must be equal.
Array l1_loss(const Array& input, const Array& target, Reduction reduction = Reduction::mean);

/// Options of smooth_l1_loss.
struct SmoothL1LossOptions {
  double beta = 1.0;  ///< >= 0; 0 gives l1_loss
  Reduction reduction = Reduction::mean;
};
/// 0.5 * d^2 / beta where |d| < beta, else |d| - 0.5 * beta, for d = input - target
/// (torch.nn.functional.smooth_l1_loss). Throws ValueError for beta < 0, ShapeError for unequal shapes.
Array smooth_l1_loss(const Array& input, const Array& target, const SmoothL1LossOptions& options = {});

/// Options of huber_loss.
struct HuberLossOptions {
  double delta = 1.0;  ///< > 0
  Reduction reduction = Reduction::mean;
};
/// 0.5 * d^2 where |d| < delta, else delta * (|d| - 0.5 * delta) (torch.nn.functional.huber_loss;
/// equals delta * smooth_l1_loss with beta = delta). Throws ValueError unless delta > 0.
Array huber_loss(const Array& input, const Array& target, const HuberLossOptions& options = {});

/// Options of kl_div.
struct KlDivOptions {
  bool log_target = false;  ///< true: `target` holds log-probabilities
  Reduction reduction = Reduction::mean;
};
/// torch.nn.functional.kl_div: target * (log(target) - input) elementwise, with 0 where target is 0
/// (exp(target) * (target - input) when log_target). `input` holds log-probabilities. As in PyTorch,
/// Reduction::mean averages over every element; Reduction::batchmean (sum / first dimension) is
/// the one that gives the KL divergence per example. Shapes must be equal (ShapeError).
Array kl_div(const Array& input, const Array& target, const KlDivOptions& options = {});

/// Cosine of the angle between x1 and x2 along `axis`: sum(x1 * x2) / (max(|x1|, eps) *
/// max(|x2|, eps)) (torch.nn.functional.cosine_similarity). x1 and x2 broadcast; the result has
/// their broadcast shape without `axis`. Throws ShapeError if they do not broadcast or the axis is
/// out of range.
Array cosine_similarity(const Array& x1, const Array& x2, int axis = -1, double eps = 1e-8);

/// Options of cosine_embedding_loss.
struct CosineEmbeddingLossOptions {
  double margin = 0;
  Reduction reduction = Reduction::mean;
};
/// torch.nn.functional.cosine_embedding_loss: 1 - cos(x1, x2) where y == 1 and max(0, cos - margin)
/// where y == -1 (0 for any other y), with the cosine over the last axis computed as PyTorch does
/// (squared norms offset by 1e-12). x1 and x2: (N, D) or (D,), equal shapes; y: (N,) or ().
Array cosine_embedding_loss(const Array& x1, const Array& x2, const Array& y,
                            const CosineEmbeddingLossOptions& options = {});

/// Options of margin_ranking_loss.
struct MarginRankingLossOptions {
  double margin = 0;
  Reduction reduction = Reduction::mean;
};
/// max(0, -y * (x1 - x2) + margin) (torch.nn.functional.margin_ranking_loss); y holds 1 where x1
/// should rank higher and -1 where x2 should. x1, x2 and y must have equal shapes (ShapeError).
Array margin_ranking_loss(const Array& x1, const Array& x2, const Array& y,
                          const MarginRankingLossOptions& options = {});

/// p-norm of x1 - x2 + eps over the last axis (torch.nn.functional.pairwise_distance); p may be
/// infinity (the largest absolute difference). x1 and x2 broadcast. Throws ValueError unless p > 0,
/// ShapeError for 0-d input or shapes that do not broadcast.
Array pairwise_distance(const Array& x1, const Array& x2, double p = 2.0, double eps = 1e-6);

/// Options of triplet_margin_loss.
struct TripletMarginLossOptions {
  double margin = 1.0;
  double p = 2.0;  ///< the norm of the distances; > 0
  double eps = 1e-6;
  bool swap = false;  ///< use min(d(a, n), d(p, n)) as the negative distance (Balntas et al.)
  Reduction reduction = Reduction::mean;
};
/// max(0, margin + d(anchor, positive) - d(anchor, negative)) with d = pairwise_distance(., ., p,
/// eps) (torch.nn.functional.triplet_margin_loss). The three arrays must have equal shapes, (N, D)
/// or (D,) (ShapeError); ValueError unless p > 0.
Array triplet_margin_loss(const Array& anchor, const Array& positive, const Array& negative,
                          const TripletMarginLossOptions& options = {});

}  // namespace kiln::nn
