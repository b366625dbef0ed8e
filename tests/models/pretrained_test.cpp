// models::from_pretrained against reference implementations in PyTorch (tests/models/hf_reference.py,
// written from transformers' modeling code): GPT-2, Llama (also Llama 3's rope scaling with GQA,
// Mistral's sliding window, Qwen2's biases and tied embeddings) and BERT, on small random
// configurations the script saves as Hub folders. Logits to 1e-4 in float32, the KV-cached decode
// against the full forward, 16-bit weights, folders saved by kiln checked by the reference, and
// every unsupported or broken folder a named error.
#include "kiln/models/pretrained/pretrained.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kiln/kiln.h"
#include "kiln/models/pretrained/bert.h"
#include "kiln/models/pretrained/gpt2.h"
#include "kiln/models/pretrained/llama.h"
#include "support/error_of.h"
#include "support/op_test.h"
#include "support/python_runner.h"

namespace kiln {
namespace {

using models::HfConfig;
using models::LoadOptions;
using test::max_abs_diff;

const std::vector<std::string> kCausalVariants = {"gpt2",   "gpt2_untied", "llama",
                                                  "llama3", "mistral",     "qwen2"};

double max_abs(const Array& a) {
  double m = 0;
  for (double v : test::values(a)) m = std::max(m, std::abs(v));
  return m;
}

void copy_folder(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::filesystem::create_directories(to);
  for (const auto& e : std::filesystem::directory_iterator(from))
    std::filesystem::copy_file(e.path(), to / e.path().filename(),
                               std::filesystem::copy_options::overwrite_existing);
}

class Pretrained : public test::PythonFilesTest<Pretrained> {
 public:
  static constexpr test::PythonFiles kFiles{"torch, numpy", "tests/models/hf_reference.py", "pretrained"};

 protected:
  static std::filesystem::path folder(const std::string& variant) { return file(variant); }
  static nn::ParamTree reference(const std::string& variant) {
    return io::load_safetensors(folder(variant) / "reference.safetensors");
  }
};

TEST_F(Pretrained, CausalLMLogitsMatchPyTorchInFloat32) {
  for (const std::string& v : kCausalVariants) {
    SCOPED_TRACE(v);
    const auto lm = models::causal_lm_from_pretrained(folder(v));
    EXPECT_EQ(lm->dtype(), float32);
    const nn::ParamTree ref = reference(v);
    const Array logits = lm->forward(ref.at("input_ids"));
    ASSERT_EQ(logits.shape(), ref.at("logits").shape());
    // Logits of order one (the script's weight scale), so 1e-4 is a tight bound.
    EXPECT_GT(max_abs(ref.at("logits")), 0.5);
    EXPECT_LT(max_abs_diff(logits, ref.at("logits")), 1e-4);
    EXPECT_EQ(lm->vocab_size(), logits.shape(-1));
  }
}

TEST_F(Pretrained, ConfigPicksTheClassAndBuffersAreLeftOut) {
  const auto gpt2 = models::from_pretrained(folder("gpt2"));
  ASSERT_NE(dynamic_cast<models::Gpt2LMHeadModel*>(gpt2.get()), nullptr);
  // The causal-mask buffers are reported, not loaded; the tied head has no weight of its own.
  EXPECT_EQ(gpt2->load_report().ignored,
            (std::vector<std::string>{"transformer.h.0.attn.bias", "transformer.h.1.attn.bias"}));
  EXPECT_FALSE(gpt2->parameters().contains("transformer.lm_head.weight"));
  for (const char* v : {"llama", "mistral", "qwen2"}) {
    const auto m = models::from_pretrained(folder(v));
    auto* llama = dynamic_cast<models::LlamaForCausalLM*>(m.get());
    ASSERT_NE(llama, nullptr) << v;
    EXPECT_EQ(llama->model_type(), v);
  }
  const auto qwen = models::LlamaForCausalLM::from_pretrained(folder("qwen2"));
  EXPECT_TRUE(qwen->parameters().contains("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_FALSE(qwen->parameters().contains("model.layers.0.self_attn.o_proj.bias"));
  EXPECT_FALSE(qwen->parameters().contains("lm_head.weight"));  // tied
  EXPECT_EQ(qwen->config().num_key_value_heads, 1);
  EXPECT_EQ(models::LlamaForCausalLM::from_pretrained(folder("mistral"))->config().sliding_window, 5);
  EXPECT_EQ(models::from_pretrained(folder("llama"))->load_report().ignored.size(), 2u);  // inv_freq
  EXPECT_NE(dynamic_cast<models::BertModel*>(models::from_pretrained(folder("bert")).get()), nullptr);
  EXPECT_NE(
      dynamic_cast<models::BertForSequenceClassification*>(models::from_pretrained(folder("bert_cls")).get()),
      nullptr);
  EXPECT_NE(test::error_of<ValueError>([&] {
              models::causal_lm_from_pretrained(folder("bert"));
            }).find("not a causal LM"),
            std::string::npos);
}

TEST_F(Pretrained, KVCachedDecodeMatchesTheFullForward) {
  for (const std::string& v : kCausalVariants) {
    SCOPED_TRACE(v);
    const auto lm = models::causal_lm_from_pretrained(folder(v));
    const Array ids = reference(v).at("input_ids");
    const int64_t t = ids.shape(1);
    const Array full = lm->forward(ids);
    // A prompt of 4, then one token at a time (Mistral's window of 5 is crossed on the way).
    models::GptCache cache;
    std::vector<Array> pieces{lm->forward(slice(ids, {Slice{}, Slice{0, 4}}), cache)};
    for (int64_t i = 4; i < t; ++i)
      pieces.push_back(lm->forward(slice(ids, {Slice{}, Slice{i, i + 1}}), cache));
    EXPECT_EQ(cache.length(), t);
    EXPECT_LT(max_abs_diff(concatenate(pieces, 1), full), 1e-5);
  }
}

TEST_F(Pretrained, PositionLimitIsAShapeError) {
  const auto lm = models::causal_lm_from_pretrained(folder("llama"));
  EXPECT_EQ(lm->max_positions(), 64);
  models::GptCache cache;
  lm->forward(zeros({1, 60}, int32), cache);
  const std::string what = test::error_of<ShapeError>([&] { lm->forward(zeros({1, 5}, int32), cache); });
  EXPECT_NE(what.find("60 cached + 5 new positions > 64"), std::string::npos) << what;
  EXPECT_EQ(cache.length(), 60);
}

TEST_F(Pretrained, BertMatchesPyTorchWithPaddingAndTokenTypes) {
  const nn::ParamTree ref = reference("bert");
  const auto bert = models::BertModel::from_pretrained(folder("bert"));
  bert->eval_mode();
  const auto out = bert->forward(ref.at("input_ids"), ref.at("attention_mask"), ref.at("token_type_ids"));
  EXPECT_LT(max_abs_diff(out.last_hidden_state, ref.at("last_hidden_state")), 1e-4);
  EXPECT_LT(max_abs_diff(out.pooler_output, ref.at("pooler_output")), 1e-4);

  const nn::ParamTree ref_cls = reference("bert_cls");
  const auto cls = models::BertForSequenceClassification::from_pretrained(folder("bert_cls"));
  cls->eval_mode();
  EXPECT_EQ(cls->config().num_labels, 3);  // from id2label
  const Array logits =
      cls->forward(ref_cls.at("input_ids"), ref_cls.at("attention_mask"), ref_cls.at("token_type_ids"));
  EXPECT_EQ(logits.shape(), (Shape{2, 3}));
  EXPECT_LT(max_abs_diff(logits, ref_cls.at("logits")), 1e-4);
}

TEST_F(Pretrained, ClassifierOnABaseCheckpointStartsFresh) {
  const auto cls = models::BertForSequenceClassification::from_pretrained(folder("bert"), {.num_labels = 4});
  EXPECT_EQ(cls->load_report().initialized,
            (std::vector<std::string>{"classifier.weight", "classifier.bias"}));
  EXPECT_EQ(cls->classifier->weight.value().shape(), (Shape{4, 32}));
  // The encoder is the checkpoint's.
  const auto bert = models::BertModel::from_pretrained(folder("bert"));
  const nn::ParamTree ref = reference("bert");
  cls->eval_mode();
  bert->eval_mode();
  EXPECT_EQ(max_abs_diff(cls->bert->forward(ref.at("input_ids")).pooler_output,
                         bert->forward(ref.at("input_ids")).pooler_output),
            0.0);
  // A classification checkpoint loaded as the bare encoder: its head is left out and named.
  const auto base = models::BertModel::from_pretrained(folder("bert_cls"));
  EXPECT_EQ(base->load_report().ignored, (std::vector<std::string>{"classifier.weight", "classifier.bias"}));
}

TEST_F(Pretrained, SixteenBitWeightsLoadAndRun) {
  for (const char* v : {"gpt2", "llama3"}) {
    for (const auto& [tag, dtype, rel] :
         {std::tuple{"_bf16", bfloat16, 6e-2}, std::tuple{"_f16", float16, 1e-2}}) {
      const std::string name = std::string(v) + tag;
      SCOPED_TRACE(name);
      const nn::ParamTree ref = reference(name);
      const auto lm = models::causal_lm_from_pretrained(folder(name));
      EXPECT_EQ(lm->dtype(), dtype);
      const Array logits = lm->forward(ref.at("input_ids"));
      EXPECT_EQ(logits.dtype(), dtype);
      EXPECT_LT(max_abs_diff(logits, ref.at("logits")), rel * max_abs(ref.at("logits")));
      // 16-bit weights widen exactly: computed in float32 they match the reference tightly.
      const auto wide = models::causal_lm_from_pretrained(folder(name), {.dtype = float32});
      EXPECT_LT(max_abs_diff(wide->forward(ref.at("input_ids")), ref.at("logits")), 1e-4);
    }
  }
  const nn::ParamTree ref = reference("bert_bf16");
  const auto bert = models::BertModel::from_pretrained(folder("bert_bf16"));
  bert->eval_mode();
  EXPECT_EQ(bert->dtype(), bfloat16);
  const auto out = bert->forward(ref.at("input_ids"), ref.at("attention_mask"), ref.at("token_type_ids"));
  EXPECT_LT(max_abs_diff(out.pooler_output, ref.at("pooler_output")), 6e-2);
  // float32 weights converted on load.
  const auto half = models::causal_lm_from_pretrained(folder("llama"), {.dtype = float16});
  EXPECT_EQ(half->dtype(), float16);
  EXPECT_LT(max_abs_diff(half->forward(reference("llama").at("input_ids")), reference("llama").at("logits")),
            1e-2 * max_abs(reference("llama").at("logits")));
}

TEST_F(Pretrained, SavedFoldersLoadInTheReferenceAndBack) {
  const std::vector<std::string> variants = {"gpt2",  "gpt2_untied", "llama3",  "mistral",
                                             "qwen2", "bert",        "bert_cls"};
  test::TempDir out("pretrained_save");
  for (const std::string& v : variants) {
    SCOPED_TRACE(v);
    const auto model = models::from_pretrained(folder(v));
    models::save_pretrained(*model, out / v);
    const auto again = models::from_pretrained(out / v);
    EXPECT_EQ(again->model_type(), model->model_type());
    const nn::ParamTree a = model->to_checkpoint(), b = again->to_checkpoint();
    ASSERT_EQ(a.keys(), b.keys());
    for (const auto& [key, value] : a) EXPECT_EQ(max_abs_diff(value, b.at(key)), 0.0) << key;
    // Sharded: the same tensors through model.safetensors.index.json.
    test::TempDir sharded("pretrained_shards");
    models::save_pretrained(*model, sharded.path(), 20000);
    EXPECT_TRUE(std::filesystem::exists(sharded.file("model.safetensors.index.json")));
    EXPECT_FALSE(std::filesystem::exists(sharded.file("model.safetensors")));
    const nn::ParamTree c = models::from_pretrained(sharded.path())->to_checkpoint();
    for (const auto& [key, value] : a) EXPECT_EQ(max_abs_diff(value, c.at(key)), 0.0) << key;
  }
  // The reference models load what kiln wrote, every key required, and give their outputs.
  std::vector<std::string> args = {(test::repo_root() / "tests/models/hf_reference.py").string(), "--check",
                                   out.path().string(), folder("").string()};
  args.insert(args.end(), variants.begin(), variants.end());
  EXPECT_EQ(test::run_python(args, out.file("check.log")), "");
}

TEST_F(Pretrained, Gpt2FilesWithoutTheTransformerPrefixLoad) {
  // The Hub's gpt2 weights were saved from GPT2Model: "h.0.attn.c_attn.weight", "wte.weight".
  test::TempDir dir("pretrained_bare");
  copy_folder(folder("gpt2"), dir.path());
  nn::ParamTree bare;
  for (const auto& [key, value] : io::load_safetensors(folder("gpt2") / "model.safetensors"))
    bare.set(key.substr(std::string("transformer.").size()), value);
  io::save_safetensors(dir.file("model.safetensors"), bare);
  const nn::ParamTree ref = reference("gpt2");
  EXPECT_LT(max_abs_diff(models::causal_lm_from_pretrained(dir.path())->forward(ref.at("input_ids")),
                         ref.at("logits")),
            1e-4);
}

// A copy of `variant`'s folder with its config edited by `edit`; from_pretrained's error of type E.
template <class E>
std::string error_with_config(const std::filesystem::path& from, const std::function<void(HfConfig&)>& edit) {
  test::TempDir dir("pretrained_bad");
  copy_folder(from, dir.path());
  HfConfig config = HfConfig::read(dir.file("config.json"));
  edit(config);
  config.write(dir.file("config.json"));
  return test::error_of<E>([&] { models::from_pretrained(dir.path()); });
}

TEST_F(Pretrained, UnsupportedConfigsAreNamedErrors) {
  auto has = [](const std::string& what, const char* part) { return what.find(part) != std::string::npos; };
  EXPECT_TRUE(
      has(error_with_config<NotImplemented>(folder("gpt2"), [](HfConfig& c) { c.set("model_type", "gptj"); }),
          "model_type 'gptj'"));
  EXPECT_TRUE(has(error_with_config<NotImplemented>(
                      folder("gpt2"), [](HfConfig& c) { c.set("activation_function", "swish"); }),
                  "'swish'"));
  EXPECT_TRUE(has(error_with_config<NotImplemented>(
                      folder("gpt2"), [](HfConfig& c) { c.set("scale_attn_by_inverse_layer_idx", true); }),
                  "scale_attn_by_inverse_layer_idx"));
  EXPECT_TRUE(has(error_with_config<NotImplemented>(folder("llama"),
                                                    [](HfConfig& c) {
                                                      HfConfig s;
                                                      s.set("rope_type", "yarn");
                                                      s.set("factor", 2.0);
                                                      c.set("rope_scaling", s);
                                                    }),
                  "'yarn'"));
  EXPECT_TRUE(has(
      error_with_config<NotImplemented>(folder("llama"), [](HfConfig& c) { c.set("hidden_act", "gelu"); }),
      "hidden_act"));
  EXPECT_TRUE(has(error_with_config<NotImplemented>(folder("qwen2"),
                                                    [](HfConfig& c) { c.set("use_sliding_window", true); }),
                  "use_sliding_window"));
  EXPECT_TRUE(has(error_with_config<NotImplemented>(
                      folder("bert"), [](HfConfig& c) { c.set("position_embedding_type", "relative_key"); }),
                  "relative_key"));
  EXPECT_TRUE(has(
      error_with_config<ValueError>(folder("llama"), [](HfConfig& c) { c.set("num_key_value_heads", 3); }),
      "num_key_value_heads must divide"));
  EXPECT_TRUE(
      has(error_with_config<FormatError>(folder("llama"), [](HfConfig& c) { c.erase("hidden_size"); }),
          "no 'hidden_size'"));
  EXPECT_TRUE(
      has(error_with_config<FormatError>(folder("llama"), [](HfConfig& c) { c.set("hidden_size", "big"); }),
          "'hidden_size' must be an integer"));
}

TEST_F(Pretrained, MissingUnexpectedAndMisshapenTensorsAreNamed) {
  const nn::ParamTree tensors = io::load_safetensors(folder("llama") / "model.safetensors");
  auto error_with = [&](const std::function<void(nn::ParamTree&)>& edit) {
    test::TempDir dir("pretrained_keys");
    copy_folder(folder("llama"), dir.path());
    nn::ParamTree t = tensors;
    edit(t);
    io::save_safetensors(dir.file("model.safetensors"), t);
    return test::error_of<KeyError>([&] { models::from_pretrained(dir.path()); });
  };
  std::string what = error_with([](nn::ParamTree& t) { t.erase("model.layers.1.mlp.up_proj.weight"); });
  EXPECT_NE(what.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << what;
  what = error_with([](nn::ParamTree& t) { t.set("model.layers.0.self_attn.extra.weight", ones({2})); });
  EXPECT_NE(what.find("model.layers.0.self_attn.extra.weight"), std::string::npos) << what;

  test::TempDir dir("pretrained_shape");
  copy_folder(folder("llama"), dir.path());
  nn::ParamTree t = tensors;
  t.set("model.norm.weight", ones({31}));
  io::save_safetensors(dir.file("model.safetensors"), t);
  what = test::error_of<ShapeError>([&] { models::from_pretrained(dir.path()); });
  EXPECT_NE(what.find("model.norm.weight"), std::string::npos) << what;
}

TEST_F(Pretrained, FoldersWithoutSafetensorsAreNamed) {
  test::TempDir dir("pretrained_bin");
  std::filesystem::copy_file(folder("gpt2") / "config.json", dir.file("config.json"));
  { std::ofstream(dir.file("pytorch_model.bin")) << "pickle"; }
  EXPECT_NE(
      test::error_of<RuntimeError>([&] { models::from_pretrained(dir.path()); }).find("pytorch_model.bin"),
      std::string::npos);
  std::filesystem::remove(dir.file("pytorch_model.bin"));
  EXPECT_NE(test::error_of<RuntimeError>([&] { models::from_pretrained(dir.path()); }).find("no weights"),
            std::string::npos);
  std::filesystem::remove(dir.file("config.json"));
  EXPECT_NE(test::error_of<RuntimeError>([&] { models::from_pretrained(dir.path()); }).find("config.json"),
            std::string::npos);
  EXPECT_NE(test::error_of<RuntimeError>([&] {
              models::from_pretrained(dir.file("nothing"));
            }).find("not a model folder"),
            std::string::npos);
}

TEST_F(Pretrained, LlamaTrainsWithEveryParameterGettingAGradient) {
  const auto lm = models::LlamaForCausalLM::from_pretrained(folder("llama3"));
  const Array ids = reference("llama3").at("input_ids");
  const Array inputs = slice(ids, {Slice{}, Slice{0, 10}}), targets = slice(ids, {Slice{}, Slice{1, 11}});
  auto step = nn::value_and_grad(*lm, [&] {
    return nn::cross_entropy(reshape(lm->forward(inputs), {-1, lm->vocab_size()}), reshape(targets, {-1}));
  });
  auto [loss, grads] = step();
  EXPECT_EQ(grads.keys(), lm->trainable_parameters().keys());
  for (const auto& [key, g] : grads) EXPECT_GT(max_abs(g), 0.0) << key;
  optim::Adam opt({.lr = 1e-2});
  for (int i = 0; i < 5; ++i) {
    opt.update(*lm, step().second);
    const nn::ParamTree params = lm->parameters();
    nn::eval(params);
  }
  EXPECT_LT(step().first.item<float>(), loss.item<float>());
}

TEST(HfConfig, GettersNameTheSourceAndKey) {
  const HfConfig c =
      HfConfig::parse(R"({"a": 3, "b": 2.5, "c": "x", "d": [1], "e": null, "f": 4.0})", "test.json");
  EXPECT_EQ(c.get_int("a"), 3);
  EXPECT_EQ(c.get_int("f"), 4);
  EXPECT_EQ(c.get_double("a"), 3.0);
  EXPECT_EQ(c.get_int("e", 7), 7);  // null reads as absent
  EXPECT_FALSE(c.has("e"));
  EXPECT_EQ(c.get_size("d"), 1);
  EXPECT_NE(test::error_of<FormatError>([&] { c.get_int("b"); }).find("test.json: 'b' must be an integer"),
            std::string::npos);
  EXPECT_NE(test::error_of<FormatError>([&] { c.get_string("z"); }).find("test.json: no 'z'"),
            std::string::npos);
  EXPECT_NE(test::error_of<FormatError>([&] { c.get_bool("c", false); }).find("true or false"),
            std::string::npos);
  EXPECT_NE(test::error_of<FormatError>([] { HfConfig::parse("[1, 2]"); }).find("not a JSON object"),
            std::string::npos);
  EXPECT_NE(test::error_of<FormatError>([] { HfConfig::parse("{\"a\": "); }).find("not valid JSON"),
            std::string::npos);
  HfConfig copy = c;
  copy.set("a", 5);
  EXPECT_EQ(c.get_int("a"), 3);  // copies are deep
  EXPECT_EQ(HfConfig::parse(copy.dump()).get_int("a"), 5);
}

}  // namespace
}  // namespace kiln
