#include "kiln/models/pretrained/peft.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "common_impl.h"
#include "kiln/core/error.h"
#include "kiln/core/ops/cast.h"
#include "kiln/io/safetensors.h"
#include "kiln/models/pretrained/bert.h"
#include "kiln/models/pretrained/hf_config.h"
#include "kiln/models/pretrained/pretrained.h"
#include "kiln/nn/module_names.h"

namespace kiln::models {

namespace {

constexpr const char* kSave = "save_peft_adapter";
constexpr const char* kLoad = "load_peft_adapter";
constexpr const char* kPrefix = "base_model.model.";

std::string peft_key(const std::string& module, const char* factor) {
  return kPrefix + (module.empty() ? "" : module + ".") + factor + ".weight";
}

// The task and layout PEFT gives a model of this class.
void defaults_for(const nn::Module& model, PeftLoRAConfig& c) {
  const auto* pretrained = dynamic_cast<const PretrainedModel*>(&model);
  if (c.task_type.empty()) {
    if (dynamic_cast<const CausalLM*>(&model))
      c.task_type = "CAUSAL_LM";
    else if (dynamic_cast<const BertForSequenceClassification*>(&model))
      c.task_type = "SEQ_CLS";
    else if (pretrained)
      c.task_type = "FEATURE_EXTRACTION";
  }
  if (pretrained && pretrained->model_type() == "gpt2") c.fan_in_fan_out = true;
}

}  // namespace

void save_peft_adapter(const nn::Module& model, const std::filesystem::path& dir,
                       const PeftLoRAConfig& config) {
  PeftLoRAConfig c = config;
  defaults_for(model, c);
  nn::ParamTree tensors;
  int64_t rank = 0;
  double scale = 0;
  std::vector<std::string> targets;  // the adapted modules' names, as PEFT's target_modules
  for (const auto& [key, m] : model.named_modules()) {
    const auto* l = dynamic_cast<const nn::Linear*>(m);
    if (!l || !l->has_lora()) continue;
    const std::string name = key.substr(key.rfind('.') + 1);
    if (std::find(targets.begin(), targets.end(), name) == targets.end()) targets.push_back(name);
    const int64_t r = l->lora_A->weight.value().shape(0);
    if (rank != 0 && (r != rank || l->lora_scale() != scale))
      throw ValueError::of(kSave, "PEFT's file holds one rank and alpha; the adapters differ",
                           "{}: rank {} and scale {}, others rank {} and scale {}", key, r, l->lora_scale(),
                           rank, scale);
    rank = r;
    scale = l->lora_scale();
    tensors.set(peft_key(key, "lora_A"), l->lora_A->weight.value());
    tensors.set(peft_key(key, "lora_B"), l->lora_B->weight.value());
  }
  if (tensors.empty())
    throw ValueError::of(kSave, "the model has no LoRA adapter", "add them with nn::add_lora");
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    throw RuntimeError::of(kSave, "cannot create the folder", "{}: {}", dir.string(), error.message());
  io::save_safetensors(dir / "adapter_model.safetensors", tensors, {{"format", "pt"}});

  HfConfig out;
  out.set("peft_type", "LORA");
  out.set("task_type", c.task_type);
  out.set("base_model_name_or_path", c.base_model_name_or_path);
  out.set("r", rank);
  // alpha from the adapters themselves: scale = alpha / r.
  out.set("lora_alpha", scale * static_cast<double>(rank));
  out.set("lora_dropout", c.lora.dropout);
  out.set("target_modules", targets);
  out.set("fan_in_fan_out", c.fan_in_fan_out);
  out.set("bias", "none");
  out.set("inference_mode", true);
  out.set("init_lora_weights", true);
  out.set("use_rslora", false);
  out.set("use_dora", false);
  out.write(dir / "adapter_config.json");
}

PeftLoRAConfig load_peft_adapter(nn::Module& model, const std::filesystem::path& dir) {
  const HfConfig hf = HfConfig::read(dir / "adapter_config.json");
  const std::string type = hf.get_string("peft_type");
  if (type != "LORA")
    throw NotImplemented::of(kLoad, "only LoRA adapters are supported", "{}: peft_type '{}'", hf.source(),
                             type);
  for (const char* flag : {"use_dora", "use_rslora"})
    if (hf.get_bool(flag, false))
      throw NotImplemented::of(kLoad, "this LoRA variant is not supported", "{}: {} is true", hf.source(),
                               flag);
  if (const std::string bias = hf.get_string("bias", "none"); bias != "none")
    throw NotImplemented::of(kLoad, "trained biases are not supported", "{}: bias '{}'", hf.source(), bias);
  for (const char* field : {"modules_to_save", "rank_pattern", "alpha_pattern", "layers_to_transform"})
    if (hf.has(field) && hf.get_size(field) > 0)
      throw NotImplemented::of(kLoad, "this PEFT option is not supported", "{}: {} is set", hf.source(),
                               field);
  if (hf.type_of("target_modules") == "string")
    throw NotImplemented::of(kLoad, "target_modules as a regular expression is not supported",
                             "{}: '{}'; list the module names", hf.source(), hf.get_string("target_modules"));

  PeftLoRAConfig c;
  c.lora.r = hf.get_int("r");
  c.lora.alpha = hf.get_double("lora_alpha");
  c.lora.dropout = hf.get_double("lora_dropout", 0.0);
  c.lora.target_modules = hf.get_strings("target_modules");
  c.base_model_name_or_path = hf.get_string("base_model_name_or_path", "");
  c.task_type = hf.get_string("task_type", "");
  c.fan_in_fan_out = hf.get_bool("fan_in_fan_out", false);
  if (c.lora.r < 1) throw FormatError::of(kLoad, "r must be >= 1", "{}: r {}", hf.source(), c.lora.r);

  // Check the file against the model before changing it.
  const nn::ParamTree saved = io::load_safetensors(dir / "adapter_model.safetensors");
  std::vector<std::string> missing;
  std::set<std::string> expected;
  for (const auto& [key, m] : model.named_modules()) {
    const auto* l = dynamic_cast<const nn::Linear*>(m);
    if (!l) continue;
    if (!nn::key_names_module(key, c.lora.target_modules)) continue;
    for (const auto& [factor, shape] : {std::pair{"lora_A", Shape{c.lora.r, l->in_features()}},
                                        std::pair{"lora_B", Shape{l->out_features(), c.lora.r}}}) {
      const std::string k = peft_key(key, factor);
      expected.insert(k);
      if (!saved.contains(k)) {
        missing.push_back(k);
      } else if (saved.at(k).shape() != shape) {
        throw ShapeError::of(kLoad, "an adapter factor has the wrong shape", "{}: {} expected {}, got {}",
                             dir.string(), k, shape_str(shape), shape_str(saved.at(k).shape()));
      }
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& [key, value] : saved)
    if (!expected.count(key)) unexpected.push_back(key);
  if (!missing.empty() || !unexpected.empty()) {
    auto join = [](const std::vector<std::string>& v) {
      std::string s;
      for (const auto& k : v) s += (s.empty() ? "" : ", ") + k;
      return s.empty() ? std::string("none") : s;
    };
    throw KeyError::of(kLoad, "the adapter does not fit the model", "{}: missing [{}]; naming no module [{}]",
                       dir.string(), join(missing), join(unexpected));
  }

  nn::add_lora(model, c.lora);
  for (auto& [key, m] : model.named_modules())
    if (auto* l = dynamic_cast<nn::Linear*>(m); l && l->has_lora()) {
      const Dtype t = l->compute_dtype();
      l->lora_A->weight.set(astype(saved.at(peft_key(key, "lora_A")), t));
      l->lora_B->weight.set(astype(saved.at(peft_key(key, "lora_B")), t));
    }
  return c;
}

}  // namespace kiln::models
