// Quantized model folders as MLX writes them: save_pretrained of an nn::quantize'd Llama writes
// config.json's "quantization" entry and the packed weights, from_pretrained quantizes the layers
// whose scales are stored before loading, and the logits come back bit for bit; errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "kiln/kiln.h"
#include "kiln/models/pretrained/gpt2.h"
#include "kiln/models/pretrained/hf_config.h"
#include "kiln/models/pretrained/llama.h"
#include "kiln/models/pretrained/pretrained.h"
#include "support/op_test.h"

namespace kiln::models {
namespace {

LlamaForCausalLM tiny_llama() {
  random::seed(3);
  return LlamaForCausalLM({.vocab_size = 96,
                           .hidden_size = 64,
                           .intermediate_size = 128,
                           .num_hidden_layers = 2,
                           .num_attention_heads = 4,
                           .num_key_value_heads = 2,
                           .max_position_embeddings = 64});
}

std::filesystem::path folder(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_quantized_pretrained_" + name);
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(QuantizedPretrained, AQuantizedLlamaFolderLoadsBitForBit) {
  for (bool skip_head : {false, true}) {
    SCOPED_TRACE(skip_head ? "lm_head in float" : "every layer");
    LlamaForCausalLM lm = tiny_llama();
    lm.eval_mode();
    const auto done = nn::quantize(
        lm, {.bits = 4,
             .group_size = 32,
             .skip = skip_head ? std::vector<std::string>{"lm_head"} : std::vector<std::string>{}});
    EXPECT_EQ(done.size(), 2u * 7 + 1 + (skip_head ? 0 : 1));
    const Array tokens = random::randint({2, 7}, random::key(4), 0, 96);
    const std::vector<double> want = test::values(lm(tokens));
    const auto dir = folder(skip_head ? "skip" : "all");
    save_pretrained(lm, dir);
    const HfConfig config = HfConfig::read(dir / "config.json");
    ASSERT_TRUE(config.has("quantization"));
    EXPECT_EQ(config.get_object("quantization").get_int("bits"), 4);
    EXPECT_EQ(config.get_object("quantization").get_int("group_size"), 32);
    const auto loaded = causal_lm_from_pretrained(dir);
    EXPECT_EQ(test::values(loaded->forward(tokens)), want);
    EXPECT_EQ(dynamic_cast<const LlamaForCausalLM&>(*loaded).lm_head->is_quantized(), !skip_head);
    std::filesystem::remove_all(dir);
  }
}

TEST(QuantizedPretrained, BadQuantizationEntriesAreNamed) {
  LlamaForCausalLM lm = tiny_llama();
  const auto dir = folder("bad");
  save_pretrained(lm, dir);  // a float folder: no entry
  EXPECT_FALSE(HfConfig::read(dir / "config.json").has("quantization"));
  auto with_entry = [&](int bits, int group_size) {
    HfConfig config = HfConfig::read(dir / "config.json");
    HfConfig q;
    q.set("bits", bits);
    q.set("group_size", group_size);
    config.set("quantization", q);
    config.write(dir / "config.json");
  };
  with_entry(4, 64);  // but the weights are float: no scales
  EXPECT_THROW(causal_lm_from_pretrained(dir), FormatError);
  with_entry(3, 64);
  EXPECT_THROW(causal_lm_from_pretrained(dir), FormatError);
  with_entry(4, 48);
  EXPECT_THROW(causal_lm_from_pretrained(dir), FormatError);
  std::filesystem::remove_all(dir);
  // GPT-2's Conv1D weights are stored transposed: a quantized one cannot be written.
  Gpt2Config c;
  c.gpt.vocab_size = 64;
  c.gpt.context = 32;
  c.gpt.d_model = 64;
  c.gpt.heads = 2;
  c.gpt.layers = 1;
  Gpt2LMHeadModel gpt2(c);
  nn::quantize(gpt2, {.bits = 8, .group_size = 32});
  EXPECT_THROW(save_pretrained(gpt2, folder("gpt2")), NotImplemented);
}

}  // namespace
}  // namespace kiln::models
