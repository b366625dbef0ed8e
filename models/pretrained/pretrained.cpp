#include "kiln/models/pretrained/pretrained.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "common_impl.h"
#include "kiln/core/error.h"
#include "kiln/core/ops/cast.h"
#include "kiln/io/safetensors.h"
#include "kiln/models/pretrained/bert.h"
#include "kiln/models/pretrained/gpt2.h"
#include "kiln/models/pretrained/llama.h"
#include "kiln/nn/layers/quantized.h"

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

namespace {

// The options every quantized Linear and Embedding of `model` shares, or none when none is
// quantized. Throws NotImplemented for a GPT-2 (its Conv1D weights are written transposed) or for
// layers quantized differently (config.json has one entry).
std::optional<nn::QuantizeOptions> quantization_of(const PretrainedModel& model) {
  std::optional<nn::QuantizeOptions> found;
  for (const auto& [key, m] : model.named_modules()) {
    std::optional<nn::QuantizeOptions> q;
    if (const auto* l = dynamic_cast<const nn::Linear*>(m)) q = l->quantization();
    if (const auto* e = dynamic_cast<const nn::Embedding*>(m)) q = e->quantization();
    if (!q) continue;
    if (model.model_type() == "gpt2")
      throw NotImplemented::of(
          "save_pretrained", "a quantized GPT-2 cannot be written in its checkpoint layout",
          "{}: GPT-2 stores Conv1D weights (in, out), and packed words cannot be transposed", key);
    if (found && !(*found == *q))
      throw NotImplemented::of("save_pretrained", "layers quantized with different options",
                               "{}: {} bits in groups of {}, others {} in groups of {}", key, q->bits,
                               q->group_size, found->bits, found->group_size);
    found = q;
  }
  return found;
}

}  // namespace

namespace detail {

void quantize_as_checkpoint(PretrainedModel& model, const PretrainedFiles& files) {
  if (!files.config.has("quantization")) return;
  const std::string& source = files.config.source();
  const HfConfig q = files.config.get_object("quantization");
  const int64_t bits = q.get_int("bits"), group_size = q.get_int("group_size", 64);
  if (bits != 2 && bits != 4 && bits != 8)
    throw FormatError::of(kLoad, "quantization bits must be 2, 4 or 8", "{}: {}", source, bits);
  if (group_size != 32 && group_size != 64 && group_size != 128)
    throw FormatError::of(kLoad, "quantization group_size must be 32, 64 or 128", "{}: {}", source,
                          group_size);
  if (model.model_type() == "gpt2")
    throw NotImplemented::of(
        kLoad, "quantized GPT-2 folders are not supported",
        "{}: GPT-2 stores Conv1D weights (in, out), and packed words cannot be transposed", source);
  // A layer is quantized where its scales are stored (under its key, or without "model." for a
  // bare decoder's checkpoint), as MLX decides on load.
  std::vector<std::string> skip;
  size_t found = 0;
  for (const auto& [key, m] : model.named_modules()) {
    if (!dynamic_cast<nn::Linear*>(m) && !dynamic_cast<nn::Embedding*>(m)) continue;
    const bool stored = files.tensors.contains(key + ".scales") ||
                        (starts_with(key, "model.") && files.tensors.contains(key.substr(6) + ".scales"));
    if (stored)
      ++found;
    else
      skip.push_back(key);
  }
  if (found == 0)
    throw FormatError::of(kLoad, "config.json names a quantization but the weights hold no scales", "{}",
                          source);
  nn::quantize(model,
               {.bits = static_cast<int>(bits), .group_size = static_cast<int>(group_size), .skip = skip});
}

}  // namespace detail

void save_pretrained(const PretrainedModel& model, const std::filesystem::path& dir,
                     int64_t max_shard_bytes) {
  constexpr const char* op = "save_pretrained";
  if (max_shard_bytes <= 0)
    throw ValueError::of(op, "max_shard_bytes must be > 0", "got {}", max_shard_bytes);
  const std::optional<nn::QuantizeOptions> quantization = quantization_of(model);
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
  if (quantization) {  // MLX's entry
    HfConfig q;
    q.set("group_size", quantization->group_size);
    q.set("bits", quantization->bits);
    config.set("quantization", q);
  } else {
    config.erase("quantization");
  }
  config.write(dir / "config.json");
}

}  // namespace kiln::models
