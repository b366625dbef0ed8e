#pragma once
// Keras weight files, mapped onto kiln (PyTorch-style) module keys and layouts.
//
// Both layouts are read:
//  - legacy `.h5` (tf.keras' model.save_weights / model.save, Keras 3's legacy_h5_format): the
//    root attribute `layer_names` (split into `layer_names0`, `layer_names1`, ... when long) lists
//    the layers; each layer's group has `weight_names` (split alike), each a dataset path inside
//    that group ("dense_1/kernel:0" in tf.keras, "sequential/dense/kernel" in Keras 3). Everything
//    may sit under a `model_weights` group (model.save's full-model files).
//  - Keras 3 `.weights.h5`: `layers/<name>/vars/<i>`, layers nested as `layers/<a>/layers/<b>/vars`.
//    Variables are numbered, not named; names come from the layer's kind (see below).
//
// Keys: "<module prefix>.<weight>". The module prefix is map[layer] when the map names the layer,
// else the layer name ("a/b" for nested Keras 3 layers becomes "a.b"). The weight is the weight
// name without its ":0" suffix and without the path up to the layer's own name ("dense_1/kernel:0"
// in layer dense_1 -> "kernel"; in layer "model", "dense/kernel:0" -> "dense.kernel").
// Keras 3 variables are named by the layer's kind (its name without a "_<n>" suffix):
// dense, conv1d/2d/3d(_transpose) -> kernel, bias; depthwise_conv1d/2d -> depthwise_kernel, bias;
// batch_normalization -> gamma, beta, moving_mean, moving_variance (or the last two alone);
// layer_normalization -> gamma, beta; embedding -> embeddings; other kinds -> "0", "1", ....
//
// Layout adapters (KerasOptions::adapt_layouts), by weight name:
//   kernel (rank 2, Dense)      [in, out]        -> weight [out, in]
//   kernel (rank 3, Conv1D)     [W, I, O]        -> weight [O, I, W]
//   kernel (rank 4, Conv2D)     [H, W, I, O]     -> weight [O, I, H, W]
//   kernel (rank 5, Conv3D)     [D, H, W, I, O]  -> weight [O, I, D, H, W]
//   depthwise_kernel (or kernel of a depthwise_conv layer) [H, W, C, M] -> weight [C*M, 1, H, W]
//   gamma -> weight, beta -> bias, moving_mean -> running_mean, moving_variance -> running_var,
//   embeddings -> weight, bias -> bias; anything else keeps its name and layout.
// The same transpose maps Conv2DTranspose's [H, W, O, I] onto ConvTranspose2d's [I, O, H, W].
// What the adapters cannot fix: Keras' BatchNormalization epsilon defaults to 1e-3 (kiln's and
// PyTorch's to 1e-5: pass .eps = 1e-3); a Dense after Flatten sees NHWC order, kiln's NCHW; TF's
// "same" padding with stride > 1 pads more at the bottom/right than PyTorch's symmetric padding.
//
//   auto tree = kiln::io::load_keras_weights("model.h5", {{"dense", "fc1"}, {"dense_1", "fc2"}});
//   model.update(tree);
#include <filesystem>
#include <map>
#include <string>

#include "kiln/nn/param_tree.h"

namespace kiln::io {

/// Keras layer name, as the file spells it ("dense_1", nested Keras 3 layers "block/dense"), to
/// the module key prefix it loads into ("fc2", "encoder.layers.0"; "" for the root module).
using KerasNameMap = std::map<std::string, std::string>;

struct KerasOptions {
  /// Rename weights and transpose kernels to kiln's (PyTorch's) layouts, as listed above. When
  /// false, keys keep the file's weight names (Keras 3: variable indices) and arrays their layout.
  bool adapt_layouts = true;
  /// Add num_batches_tracked = 0 (int64 scalar) beside every BatchNormalization's running_mean:
  /// Keras does not count batches but kiln's BatchNorm (like PyTorch's) has the slot.
  bool num_batches_tracked = true;
};

/// Reads a Keras weights file (either layout) into a tree of evaluated arrays keyed as above, in
/// the file's layer order. Throws RuntimeError naming the path when the file is missing; FormatError
/// when it is not HDF5, is truncated, is not a Keras weights file, lists a layer or weight that is
/// not there, or holds a Keras 3 layer whose variables cannot be named (a BatchNormalization with
/// three); KeyError when `map` names a layer the file lacks or two weights map to one key (both
/// named); DtypeError for a dataset type with no kiln dtype.
nn::ParamTree load_keras_weights(const std::filesystem::path& path, const KerasNameMap& map = {},
                                 const KerasOptions& options = {});

}  // namespace kiln::io
