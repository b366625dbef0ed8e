// LoRA on pretrained models and PEFT's adapter layout: nn::add_lora by target module name, training
// that changes only the adapters, save_peft_adapter checked by tests/models/hf_reference.py
// against PEFT's layout and its merge (W + alpha/r B A, transposed for GPT-2's Conv1D), loading back
// onto a fresh base, merging into a plain model, and every adapter kiln cannot honour a named error.
#include "kiln/models/pretrained/peft.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "kiln/models/pretrained/hf_config.h"
#include "kiln/models/pretrained/pretrained.h"
#include "support/error_of.h"
#include "support/op_test.h"
#include "support/python_runner.h"

namespace kiln {
namespace {

using models::HfConfig;
using test::max_abs_diff;

class Peft : public test::PythonFilesTest<Peft> {
 public:
  static constexpr test::PythonFiles kFiles{"torch, numpy", "tests/models/hf_reference.py", "peft"};

 protected:
  static std::filesystem::path folder(const std::string& variant) { return file(variant); }
  static Array input_ids(const std::string& variant) {
    return io::load_safetensors(folder(variant) / "reference.safetensors").at("input_ids");
  }

  // The variant's model with adapters on `targets`, trained a few steps so that B is not zero.
  static std::unique_ptr<models::CausalLM> adapted(const std::string& variant,
                                                   const std::vector<std::string>& targets) {
    auto lm = models::causal_lm_from_pretrained(folder(variant));
    const auto adapted =
        nn::add_lora(*lm, {.r = 4, .alpha = 8, .target_modules = targets, .key = random::key(3)});
    EXPECT_FALSE(adapted.empty());
    const Array ids = input_ids(variant);
    const int64_t t = ids.shape(1);
    const Array inputs = slice(ids, {Slice{}, Slice{0, t - 1}}),
                targets_ = slice(ids, {Slice{}, Slice{1, t}});
    auto step = nn::value_and_grad(*lm, [&] {
      return nn::cross_entropy(reshape(lm->forward(inputs), {-1, lm->vocab_size()}), reshape(targets_, {-1}));
    });
    optim::Adam opt({.lr = 5e-2});
    for (int i = 0; i < 3; ++i) {
      opt.update(*lm, step().second);
      const nn::ParamTree p = lm->parameters();
      nn::eval(p);
    }
    return lm;
  }
};

TEST_F(Peft, AddLoraFreezesAllButTheAdaptersAndTrainsThemAlone) {
  const auto base = models::causal_lm_from_pretrained(folder("llama"));
  const nn::ParamTree before = base->parameters();
  auto lm = adapted("llama", {"q_proj", "v_proj"});
  const nn::ParamTree trainable = lm->trainable_parameters();
  ASSERT_EQ(trainable.size(), 8u);  // 2 layers x (q_proj, v_proj) x (A, B)
  EXPECT_TRUE(trainable.contains("model.layers.1.self_attn.v_proj.lora_B.weight"));
  EXPECT_EQ(trainable.at("model.layers.0.self_attn.q_proj.lora_A.weight").shape(), (Shape{4, 32}));
  for (const auto& [key, value] : lm->parameters()) {
    if (before.contains(key))
      EXPECT_EQ(max_abs_diff(value, before.at(key)), 0.0) << key << " changed";
    else
      EXPECT_TRUE(trainable.contains(key)) << key;
  }
  // Trained, the adapter changes the logits.
  EXPECT_GT(max_abs_diff(lm->forward(input_ids("llama")), base->forward(input_ids("llama"))), 1e-3);
  // A target that names nothing is an error naming what there is.
  const std::string what =
      test::error_of<ValueError>([&] { nn::add_lora(*base, {.target_modules = {"c_attn"}}); });
  EXPECT_NE(what.find("targets [c_attn]"), std::string::npos) << what;
  EXPECT_NE(what.find("model.layers.0.self_attn.q_proj"), std::string::npos) << what;
}

TEST_F(Peft, SavedAdaptersFollowPeftsLayoutAndMerge) {
  for (const auto& [variant, targets] :
       {std::pair<std::string, std::vector<std::string>>{"llama3", {"q_proj", "v_proj"}},
        {"qwen2", {"q_proj", "k_proj", "o_proj", "down_proj"}},
        {"gpt2", {"c_attn", "c_fc"}}}) {
    SCOPED_TRACE(variant);
    auto lm = adapted(variant, targets);
    test::TempDir dir("peft_save");
    models::save_peft_adapter(*lm, dir / "adapter", {.lora = {.dropout = 0.05, .target_modules = targets}});
    const HfConfig config = HfConfig::read(dir / "adapter" / "adapter_config.json");
    EXPECT_EQ(config.get_int("r"), 4);
    EXPECT_EQ(config.get_double("lora_alpha"), 8.0);
    EXPECT_EQ(config.get_strings("target_modules"), targets);
    const Array ids = input_ids(variant);
    const Array logits = lm->forward(ids);
    io::save_safetensors(dir / "outputs.safetensors", {{"input_ids", ids}, {"logits", logits}});
    // The reference merges the adapter as PEFT does and must give kiln's logits.
    EXPECT_EQ(test::run_python({(test::repo_root() / "tests/models/hf_reference.py").string(), "--peft-check",
                                variant, folder(variant).string(), (dir / "adapter").string(),
                                (dir / "outputs.safetensors").string()},
                               dir / "check.log"),
              "");

    // Loaded onto a fresh base: the same logits, the same trainable keys.
    auto fresh = models::causal_lm_from_pretrained(folder(variant));
    const auto read = models::load_peft_adapter(*fresh, dir / "adapter");
    EXPECT_EQ(read.lora.r, 4);
    EXPECT_EQ(read.fan_in_fan_out, variant == "gpt2");
    EXPECT_EQ(fresh->trainable_parameters().keys(), lm->trainable_parameters().keys());
    EXPECT_EQ(max_abs_diff(fresh->forward(ids), logits), 0.0);

    // Merged: a plain model with the base's keys, the same logits, saved as a plain folder.
    const auto merged = nn::merge_lora(*fresh);
    EXPECT_EQ(merged.size(), lm->trainable_parameters().size() / 2);
    EXPECT_EQ(fresh->parameters().keys(),
              models::causal_lm_from_pretrained(folder(variant))->parameters().keys());
    EXPECT_LT(max_abs_diff(fresh->forward(ids), logits), 1e-5);
    models::save_pretrained(*fresh, dir / "merged");
    EXPECT_LT(max_abs_diff(models::causal_lm_from_pretrained(dir / "merged")->forward(ids), logits), 1e-5);
  }
}

TEST_F(Peft, AdaptersKilnCannotHonourAreNamedErrors) {
  auto lm = adapted("llama", {"q_proj", "v_proj"});
  test::TempDir dir("peft_bad");
  models::save_peft_adapter(*lm, dir.path());
  auto error_with = [&](const std::function<void(HfConfig&)>& edit) {
    HfConfig c = HfConfig::read(dir / "adapter_config.json");
    edit(c);
    test::TempDir bad("peft_bad_copy");
    c.write(bad / "adapter_config.json");
    std::filesystem::copy_file(dir / "adapter_model.safetensors", bad / "adapter_model.safetensors");
    auto fresh = models::causal_lm_from_pretrained(folder("llama"));
    const nn::ParamTree before = fresh->trainable_parameters();
    std::string what;
    try {
      models::load_peft_adapter(*fresh, bad.path());
      ADD_FAILURE() << "did not throw";
    } catch (const Error& e) {
      what = e.what();
    }
    EXPECT_EQ(fresh->trainable_parameters().keys(), before.keys()) << "the model changed";
    return what;
  };
  EXPECT_NE(error_with([](HfConfig& c) { c.set("peft_type", "IA3"); }).find("peft_type 'IA3'"),
            std::string::npos);
  EXPECT_NE(error_with([](HfConfig& c) { c.set("use_dora", true); }).find("use_dora"), std::string::npos);
  EXPECT_NE(error_with([](HfConfig& c) { c.set("bias", "all"); }).find("bias 'all'"), std::string::npos);
  EXPECT_NE(error_with([](HfConfig& c) {
              c.set("modules_to_save", std::vector<std::string>{"lm_head"});
            }).find("modules_to_save"),
            std::string::npos);
  EXPECT_NE(error_with([](HfConfig& c) { c.set("target_modules", ".*proj"); }).find("regular expression"),
            std::string::npos);
  // The file's tensors must match the targets: v_proj's factors name no targeted module here.
  EXPECT_NE(error_with([](HfConfig& c) {
              c.set("target_modules", std::vector<std::string>{"q_proj"});
            }).find("base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight"),
            std::string::npos);
  // ... and k_proj's are missing.
  EXPECT_NE(error_with([](HfConfig& c) {
              c.set("target_modules", std::vector<std::string>{"q_proj", "k_proj", "v_proj"});
            }).find("missing [base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight"),
            std::string::npos);
  EXPECT_NE(error_with([](HfConfig& c) { c.set("r", 2); }).find("wrong shape"), std::string::npos);
  // Nothing to save.
  auto plain = models::causal_lm_from_pretrained(folder("llama"));
  EXPECT_NE(test::error_of<ValueError>([&] {
              models::save_peft_adapter(*plain, dir / "none");
            }).find("no LoRA adapter"),
            std::string::npos);
}

TEST(LinearLoRA, AdapterMatchesTheLowRankFormulaAndMerges) {
  nn::Linear l(6, 5, {.key = random::key(1)});
  const Array x = test::random_array({3, 6}, float32, 2);
  const Array plain = l(x);
  EXPECT_TRUE(l.children().empty());  // the factors are listed only with an adapter
  l.add_lora({.r = 2, .alpha = 6, .key = random::key(4)});
  EXPECT_TRUE(l.has_lora());
  EXPECT_EQ(l.children().size(), 2u);
  EXPECT_EQ(l.lora_scale(), 3.0);
  EXPECT_EQ(max_abs_diff(l(x), plain), 0.0);  // B starts at zero
  l.lora_B->weight.set(test::random_array({5, 2}, float32, 5));
  const Array a = l.lora_A->weight.value(), b = l.lora_B->weight.value();
  const Array expected = plain + matmul(matmul(x, transpose(a)), transpose(b)) * 3.0;
  EXPECT_LT(max_abs_diff(l(x), expected), 1e-6);
  EXPECT_EQ(l.parameters().keys(),
            (std::vector<std::string>{"weight", "bias", "lora_A.weight", "lora_B.weight"}));
  l.merge_lora();
  EXPECT_FALSE(l.has_lora());
  EXPECT_TRUE(l.children().empty());
  EXPECT_EQ(l.parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_LT(max_abs_diff(l(x), expected), 1e-5);
  EXPECT_THROW(l.add_lora({.r = 0}), ValueError);
  EXPECT_THROW(l.add_lora({.dropout = 1.0}), ValueError);
}

}  // namespace
}  // namespace kiln
