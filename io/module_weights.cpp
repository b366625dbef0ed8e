// Module::save_weights and Module::load_weights: the module tree's side of io/hdf5_weights.h and
// io/safetensors.h, chosen by the file's extension.
#include <fmt/format.h>

#include "kiln/core/error.h"
#include "kiln/io/hdf5_weights.h"
#include "kiln/io/safetensors.h"
#include "kiln/nn/module.h"

namespace kiln::nn {
namespace {

// The problems update() would refuse, found first so the error can name the file (update's own
// message cannot). update() then checks again and applies all or nothing.
UpdateReport problems(const ParamTree& model, const ParamTree& file, Verify verify) {
  UpdateReport r;
  for (const auto& [key, have] : model) {
    if (!file.contains(key)) {
      if (has(verify, Verify::missing)) r.missing.push_back(key);
      continue;
    }
    const Array& got = file.at(key);
    if (has(verify, Verify::shapes) && got.shape() != have.shape())
      r.wrong_shape.push_back(
          fmt::format("{}: model {}, file {}", key, shape_str(have.shape()), shape_str(got.shape())));
    if (has(verify, Verify::dtypes) && got.dtype() != have.dtype())
      r.wrong_dtype.push_back(
          fmt::format("{}: model {}, file {}", key, dtype_name(have.dtype()), dtype_name(got.dtype())));
  }
  if (has(verify, Verify::unknown))
    for (const auto& [key, value] : file)
      if (!model.contains(key)) r.unexpected.push_back(key);
  return r;
}

// .safetensors, or a sharded checkpoint's model.safetensors.index.json; anything else is HDF5.
bool is_safetensors(const std::filesystem::path& path) {
  return path.extension() == ".safetensors" || path.extension() == ".json";
}

}  // namespace

void Module::save_weights(const std::filesystem::path& path) const {
  if (path.extension() == ".json")
    throw ValueError::of("save_weights",
                         "a sharded checkpoint needs a shard size: use io::save_safetensors_sharded", "{}",
                         path.string());
  if (is_safetensors(path))
    io::save_safetensors(path, parameters());
  else
    io::save_weights(path, parameters());
}

void Module::load_weights(const std::filesystem::path& path, Verify verify) {
  const ParamTree file = is_safetensors(path) ? io::load_safetensors(path) : io::load_weights(path);
  const UpdateReport r = problems(parameters(), file, verify);
  const std::string p = path.string();
  if (!r.missing.empty() || !r.unexpected.empty())
    throw KeyError::of("load_weights", "file does not match the model, nothing was changed", "{}: {}", p,
                       r.summary());
  if (!r.wrong_shape.empty())
    throw ShapeError::of("load_weights", "file does not match the model, nothing was changed", "{}: {}", p,
                         r.summary());
  if (!r.wrong_dtype.empty())
    throw DtypeError::of("load_weights", "file does not match the model, nothing was changed", "{}: {}", p,
                         r.summary());
  update(file, verify);
}

}  // namespace kiln::nn
