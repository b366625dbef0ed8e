#pragma once
// Normalization layers, as PyTorch's: BatchNorm (1d/2d/3d), LayerNorm, RMSNorm, GroupNorm. Parameter
// names and layouts are PyTorch's (weight, bias, running_mean, running_var, num_batches_tracked), so
// PyTorch state dicts load as-is. Channels are axis 1 (PyTorch's NC... layout, as kiln's convs).
// float16/bfloat16 inputs are normalized in float32 and the result cast back.
#include <optional>

#include "kiln/nn/module.h"

namespace kiln::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  /// Weight of the batch statistic in the running average: running = (1 - m) * running + m * batch.
  /// std::nullopt gives the cumulative average (PyTorch's momentum=None).
  std::optional<double> momentum = 0.1;
  bool affine = true;               // learnable weight (ones) and bias (zeros)
  bool track_running_stats = true;  // keep running_mean/var/num_batches_tracked
  Dtype dtype = float32;
};

/// What a training-mode BatchNorm step computes: the output and the running statistics after
/// this batch (empty when running statistics are not tracked). The module is not changed.
struct BatchNormOutput {
  Array y;
  Array running_mean;         // (C), the module's dtype, no gradient
  Array running_var;          // (C), unbiased batch variance folded in, as PyTorch
  Array num_batches_tracked;  // int64 scalar
};

/// Batch normalization over axis 1 of (N, C, ...) input, as torch.nn.BatchNorm{1,2,3}d.
///
/// Forward is const (MaterializedModule calls it from many threads), so it cannot update the
/// running statistics in place as PyTorch does. Instead:
///  - operator()(x) normalizes with the batch statistics when is_training() (or when running
///    statistics are not tracked) and with the running statistics otherwise; it never updates them.
///  - forward_train(x) normalizes with the batch statistics and also returns the updated running
///    statistics, leaving the module as it was; update_running_stats(out) assigns them.
///  - train_step(x) does both: PyTorch's training-mode forward, for a module you own.
/// running_mean, running_var and num_batches_tracked are frozen slots: saved and loaded with the
/// weights like PyTorch buffers, never in trainable_parameters() or gradients (unfreeze() with no
/// keys would unfreeze them too: name the keys you want instead).
class BatchNorm : public Module {
 public:
  /// Accepts input of any rank >= 2. Throws ValueError for num_features < 1, eps <= 0 or a
  /// momentum outside [0, 1].
  explicit BatchNorm(int64_t num_features, BatchNormOptions options = {});

  /// x: (N, C, ...) -> same shape. Throws ShapeError for a bad rank or channel count, DtypeError
  /// for non-float input, ValueError in training mode for one value per channel (as PyTorch).
  Array operator()(const Array& x) const;
  /// Normalizes with the batch statistics (whatever the mode) and returns the updated running
  /// statistics without assigning them. Same errors as operator() in training mode.
  BatchNormOutput forward_train(const Array& x) const;
  /// Assigns out's running statistics (no-op when they are not tracked). Throws what
  /// ParameterInfo::set throws for a shape or dtype that differs from the slots'.
  void update_running_stats(const BatchNormOutput& out);
  /// forward_train(x), then update_running_stats; returns y.
  Array train_step(const Array& x);

  int64_t num_features() const { return features_; }
  const BatchNormOptions& options() const { return options_; }

  ParameterInfo weight{this, "weight"};                            // (C) ones; absent unless affine
  ParameterInfo bias{this, "bias"};                                // (C) zeros; absent unless affine
  ParameterInfo running_mean{this, "running_mean"};                // (C) zeros, frozen
  ParameterInfo running_var{this, "running_var"};                  // (C) ones, frozen
  ParameterInfo num_batches_tracked{this, "num_batches_tracked"};  // int64 scalar 0, frozen

 protected:
  BatchNorm(int64_t num_features, BatchNormOptions options, int min_rank, int max_rank, const char* name);

 private:
  void check_input(const Array& x, bool batch_stats) const;
  Array normalize(const Array& x, const Array& mean, const Array& var) const;
  int64_t features_;
  BatchNormOptions options_;
  int min_rank_, max_rank_;
  const char* name_;
};

/// torch.nn.BatchNorm1d: input (N, C) or (N, C, L).
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions options = {})
      : BatchNorm(num_features, options, 2, 3, "BatchNorm1d") {}
};
/// torch.nn.BatchNorm2d: input (N, C, H, W).
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {})
      : BatchNorm(num_features, options, 4, 4, "BatchNorm2d") {}
};
/// torch.nn.BatchNorm3d: input (N, C, D, H, W).
class BatchNorm3d : public BatchNorm {
 public:
  explicit BatchNorm3d(int64_t num_features, BatchNormOptions options = {})
      : BatchNorm(num_features, options, 5, 5, "BatchNorm3d") {}
};

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;  // learnable weight (ones)
  bool bias = true;                // learnable bias (zeros), when elementwise_affine
  Dtype dtype = float32;
};

/// Normalizes over the trailing dimensions given by normalized_shape (biased variance), as
/// torch.nn.LayerNorm: y = (x - mean) / sqrt(var + eps) * weight + bias.
class LayerNorm : public Module {
 public:
  /// Throws ValueError for an empty normalized_shape, a dimension < 1 or eps <= 0.
  explicit LayerNorm(Shape normalized_shape, LayerNormOptions options = {});
  explicit LayerNorm(int64_t dim, LayerNormOptions options = {}) : LayerNorm(Shape{dim}, options) {}
  /// x: (..., *normalized_shape) -> same shape. Throws ShapeError if x's trailing dimensions differ,
  /// DtypeError for non-float input.
  Array operator()(const Array& x) const;

  const Shape& normalized_shape() const { return shape_; }

  ParameterInfo weight{this, "weight"};  // normalized_shape, ones
  ParameterInfo bias{this, "bias"};      // normalized_shape, zeros

 private:
  Shape shape_;
  double eps_;
};

struct RMSNormOptions {
  std::optional<double> eps = std::nullopt;  // nullopt: the input dtype's machine epsilon (PyTorch)
  bool elementwise_affine = true;            // learnable weight (ones)
  Dtype dtype = float32;
};

/// Root-mean-square normalization over the trailing dimensions, as torch.nn.RMSNorm:
/// y = x / sqrt(mean(x^2) + eps) * weight.
class RMSNorm : public Module {
 public:
  /// Throws ValueError for an empty normalized_shape, a dimension < 1 or eps <= 0.
  explicit RMSNorm(Shape normalized_shape, RMSNormOptions options = {});
  explicit RMSNorm(int64_t dim, RMSNormOptions options = {}) : RMSNorm(Shape{dim}, options) {}
  /// x: (..., *normalized_shape) -> same shape. Errors as LayerNorm.
  Array operator()(const Array& x) const;

  const Shape& normalized_shape() const { return shape_; }

  ParameterInfo weight{this, "weight"};  // normalized_shape, ones

 private:
  Shape shape_;
  std::optional<double> eps_;
};

struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;  // learnable per-channel weight (ones) and bias (zeros)
  Dtype dtype = float32;
};

/// Normalizes (N, C, ...) input over groups of C / num_groups channels (and all positions), then
/// applies a per-channel affine map, as torch.nn.GroupNorm.
class GroupNorm : public Module {
 public:
  /// Throws ValueError unless num_groups >= 1 divides num_channels >= 1 and eps > 0.
  GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions options = {});
  /// x: (N, C, ...) -> same shape. Throws ShapeError for rank < 2 or a channel count other than
  /// num_channels, DtypeError for non-float input.
  Array operator()(const Array& x) const;

  int64_t num_groups() const { return groups_; }
  int64_t num_channels() const { return channels_; }

  ParameterInfo weight{this, "weight"};  // (C) ones
  ParameterInfo bias{this, "bias"};      // (C) zeros

 private:
  int64_t groups_, channels_;
  double eps_;
};

}  // namespace kiln::nn
