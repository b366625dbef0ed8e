#pragma once
// LoRA adapters in PEFT's layout, so that `PeftModel.from_pretrained(base, dir)` loads what kiln
// trains and kiln loads what PEFT trains: a folder with adapter_config.json and
// adapter_model.safetensors, whose keys are `base_model.model.<module>.lora_A.weight` (r, in) and
// `...lora_B.weight` (out, r) for every adapted Linear.
//
//   auto lm = models::causal_lm_from_pretrained("TinyLlama");
//   nn::add_lora(*lm, {.r = 8, .alpha = 16, .target_modules = {"q_proj", "v_proj"}});
//   ...train lm->trainable_parameters()...
//   models::save_peft_adapter(*lm, "adapter", {.base_model_name_or_path = "TinyLlama"});
//   models::load_peft_adapter(*other, "adapter");              // onto a fresh base
#include <filesystem>
#include <string>

#include "kiln/nn/layers/lora.h"
#include "kiln/nn/module.h"

namespace kiln::models {

/// The adapter_config.json fields kiln reads and writes (rank, alpha, dropout and target modules
/// in `lora`; its key is not saved).
struct PeftLoRAConfig {
  nn::LoRAConfig lora = {};
  std::string base_model_name_or_path = "";
  /// PEFT's task: CAUSAL_LM, SEQ_CLS, FEATURE_EXTRACTION...; empty: from the model's class.
  std::string task_type = "";
  /// Base weights stored (in, out) (GPT-2's Conv1D); from the model's class when saving.
  bool fan_in_fan_out = false;
};

/// Writes `dir`/adapter_model.safetensors (every adapter of the model, in PEFT's key names) and
/// `dir`/adapter_config.json (peft_type LORA; r, lora_alpha and target_modules, the adapted
/// modules' names, from the adapters themselves; lora_dropout, the base model's name, task_type
/// and fan_in_fan_out from `config`, the last two from the model's class when unset). Throws ValueError when
/// the model has no adapter or its adapters differ in rank or scale; RuntimeError naming the path when
/// writing fails.
void save_peft_adapter(const nn::Module& model, const std::filesystem::path& dir,
                       const PeftLoRAConfig& config = {});

/// Reads `dir` (as PEFT's save_pretrained writes it), adds adapters to the Linear layers its
/// target_modules name (nn::add_lora: the rest of the model is frozen) and assigns the saved
/// factors, converted to each weight's dtype. Returns the config read. Everything is checked before
/// the model changes: FormatError for a malformed file, NotImplemented naming a PEFT option kiln
/// lacks (a peft_type other than LORA, use_dora, use_rslora, a bias other than "none",
/// modules_to_save, rank_pattern or alpha_pattern, layers_to_transform), KeyError naming adapter
/// tensors missing from the file or naming no module of the model, ShapeError for a factor of the
/// wrong shape.
PeftLoRAConfig load_peft_adapter(nn::Module& model, const std::filesystem::path& dir);

}  // namespace kiln::models
