#pragma once
// Weights in HDF5: one dataset per parameter, in groups following the dotted key
// ("layers.0.weight" -> /layers/0/weight), every kiln dtype kept bit for bit. Each dataset has a
// string attribute `dtype` naming its kiln dtype; bool is h5py's enum, float16 IEEE half and
// bfloat16 is stored as uint16 (its bits) with `dtype` = "bfloat16". The root group carries the
// integer attribute `kiln_format_version` (= kWeightsFormatVersion) and the metadata as string
// attributes. h5py reads these files as they are; scripts/torch_to_hdf5.py writes the same layout
// from a PyTorch state_dict.
//
//   kiln::io::save_weights("mlp.h5", model.parameters(), {{"model", "mlp-784-512-10"}});
//   model.update(kiln::io::load_weights("mlp.h5"));    // or model.load_weights("mlp.h5")
//
// libhdf5 is called under one process-wide mutex, so loads and saves on many threads are safe
// (they take turns inside libhdf5).
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "kiln/nn/param_tree.h"

namespace kiln::io {

/// The layout version written to `kiln_format_version`; files of another version are refused.
inline constexpr int64_t kWeightsFormatVersion = 1;

/// Writes `tree` to `path`: arrays are evaluated first and non-contiguous views written densely.
/// The file is written beside `path` under a temporary name, fsync'd and renamed over it, so a
/// failed save leaves an older file as it was. Throws KeyError for a key with an empty component
/// or a '/', or for two keys that collide as groups ("a" and "a.b", both named); ValueError for an
/// empty array, a metadata key that is empty or `kiln_format_version`, or a value holding '\0';
/// RuntimeError naming the path when the folder is missing or writing fails.
void save_weights(const std::filesystem::path& path, const nn::ParamTree& tree,
                  const std::map<std::string, std::string>& metadata = {});

/// Reads every dataset of a weights file (kiln's or scripts/torch_to_hdf5.py's) into a tree of
/// evaluated arrays, keys in the order they were saved (groups that do not track creation order,
/// such as h5py's root group, list in natural name order: "2" before "10"). Throws RuntimeError naming the
/// path when the file is missing or unreadable; FormatError when it is not HDF5, is truncated or corrupt,
/// lacks `kiln_format_version` (a Keras file: see keras_weights.h) or has another version;
/// DtypeError for a dataset type kiln has no dtype for (strings, compound types), naming the key.
/// Every size the file states is checked against the file before a buffer is allocated.
nn::ParamTree load_weights(const std::filesystem::path& path);

/// Reads only the datasets under `prefix` (a dotted group key such as "encoder.layers.0"), with
/// the prefix removed from their keys, as ParamTree::subtree gives them; nothing else is read.
/// Throws KeyError naming the file and the prefix when no such group exists, else as above.
nn::ParamTree load_weights(const std::filesystem::path& path, std::string_view prefix);

/// The metadata save_weights stored (the root's string attributes but `kiln_format_version`).
/// Throws as load_weights.
std::map<std::string, std::string> load_weights_metadata(const std::filesystem::path& path);

}  // namespace kiln::io
