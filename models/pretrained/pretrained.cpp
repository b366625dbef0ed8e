#include "kiln/models/pretrained/pretrained.h"

#include <algorithm>

#include "common_impl.h"
#include "kiln/core/error.h"
#include "kiln/core/ops/cast.h"
#include "kiln/io/safetensors.h"
#include "kiln/models/pretrained/bert.h"
#include "kiln/models/pretrained/gpt2.h"
#include "kiln/models/pretrained/llama.h"

namespace kiln::models {

namespace {

using detail::ends_with;
using detail::starts_with;

constexpr const char* kLoad = "from_pretrained";

HfConfig read_folder_config(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir))
    throw RuntimeError::of(kLoad, "not a model folder", "{} is not a directory", dir.string());
  return HfConfig::read(dir / "config.json");
}

}  // namespace

Dtype PretrainedModel::dtype() const {
  for (const auto& [key, value] : parameters())
    if (is_floating(value.dtype())) return value.dtype();
  return float32;
}

void PretrainedModel::load_checkpoint(const nn::ParamTree& tensors) {
  LoadReport report;
  const nn::ParamTree placed = from_checkpoint(tensors, report);
  const Dtype t = dtype();
  nn::ParamTree tree;
  for (const auto& [key, value] : placed)
    tree.set(key, is_floating(value.dtype()) && value.dtype() != t ? astype(value, t) : value);
  const std::vector<std::string> optional = optional_keys();
  for (const auto& item : parameters()) {
    const std::string& key = item.first;  // named: clang's C++20 does not capture structured bindings
    if (tree.contains(key)) continue;
    if (std::any_of(optional.begin(), optional.end(),
                    [&](const std::string& p) { return starts_with(key, p); })) {
      tree.set(key, item.second);
      report.initialized.push_back(key);
    }
  }
  update(tree, nn::Verify::all);  // names every missing, unexpected or misshapen key; all or nothing
  report_ = std::move(report);
}

PretrainedFiles read_pretrained(const std::filesystem::path& dir) {
  PretrainedFiles files;
  files.config = read_folder_config(dir);
  const auto single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(single))
    files.tensors = io::load_safetensors(single);
  else if (std::filesystem::exists(index))
    files.tensors = io::load_safetensors(index);
  else if (std::filesystem::exists(dir / "pytorch_model.bin"))
    throw RuntimeError::of(kLoad, "the folder holds only PyTorch pickles",
                           "{}: pytorch_model.bin; kiln reads safetensors (model.safetensors or "
                           "model.safetensors.index.json): convert it with safetensors' save_file",
                           dir.string());
  else
    throw RuntimeError::of(kLoad, "the folder has no weights",
                           "{}: neither model.safetensors nor model.safetensors.index.json", dir.string());
  for (const auto& [key, value] : files.tensors)
    if (is_floating(value.dtype())) {
      files.dtype = value.dtype();
      break;
    }
  return files;
}

std::unique_ptr<PretrainedModel> from_pretrained(const std::filesystem::path& dir,
                                                 const LoadOptions& options) {
  const HfConfig config = read_folder_config(dir);
  const std::string type = config.get_string("model_type");
  const std::vector<std::string> architectures = config.get_strings("architectures");
  const std::string architecture = architectures.empty() ? "" : architectures.front();
  if (type == "gpt2") return Gpt2LMHeadModel::from_pretrained(dir, options);
  if (type == "llama" || type == "mistral" || type == "qwen2")
    return LlamaForCausalLM::from_pretrained(dir, options);
  if (type == "bert") {
    if (architecture == "BertForSequenceClassification")
      return BertForSequenceClassification::from_pretrained(dir, options);
    return BertModel::from_pretrained(dir, options);
  }
  throw NotImplemented::of(kLoad, "this model_type is not supported",
                           "{}: model_type '{}' (kiln reads gpt2, llama, mistral, qwen2 and bert)",
                           config.source(), type);
}

std::unique_ptr<CausalLM> causal_lm_from_pretrained(const std::filesystem::path& dir,
                                                    const LoadOptions& options) {
  std::unique_ptr<PretrainedModel> model = from_pretrained(dir, options);
  if (auto* lm = dynamic_cast<CausalLM*>(model.get())) {
    model.release();
    return std::unique_ptr<CausalLM>(lm);
  }
  throw ValueError::of(kLoad, "the folder holds a model that is not a causal LM", "{}: model_type '{}'",
                       dir.string(), model->model_type());
}

void save_pretrained(const PretrainedModel& model, const std::filesystem::path& dir,
                     int64_t max_shard_bytes) {
  constexpr const char* op = "save_pretrained";
  if (max_shard_bytes <= 0)
    throw ValueError::of(op, "max_shard_bytes must be > 0", "got {}", max_shard_bytes);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw RuntimeError::of(op, "cannot create the folder", "{}: {}", dir.string(), error.message());
  const nn::ParamTree tree = model.to_checkpoint();
  int64_t bytes = 0;
  for (const auto& [key, value] : tree) bytes += value.nbytes();
  // The weights first, the config last: a folder with a config has its weights.
  if (bytes > max_shard_bytes) {
    std::filesystem::remove(dir / "model.safetensors", error);
    io::save_safetensors_sharded(dir / "model.safetensors.index.json", tree, max_shard_bytes,
                                 {{"format", "pt"}});
  } else {
    io::save_safetensors(dir / "model.safetensors", tree, {{"format", "pt"}});
    std::filesystem::remove(dir / "model.safetensors.index.json", error);
  }
  HfConfig config = model.hf_config();
  config.set("model_type", model.model_type());
  config.set("torch_dtype", std::string(dtype_name(model.dtype())));
  config.write(dir / "config.json");
}

}  // namespace kiln::models
