// models::Tokenizer on small tokenizer.json files laid out as GPT-2's, Llama 3's, Llama 2's and
// BERT's (tests/models/tokenizer_fixtures.h), with every expected id list worked out by hand from the
// merges; round trips through full byte-level vocabularies; batches with padding and truncation;
// tokenizer_config.json; every unsupported component and malformed file a named error; encoding from
// several threads; and SentencePiece models trained by Python's sentencepiece
// (tests/models/sentencepiece_models.py), whose ids kiln must reproduce.
#include "kiln/models/pretrained/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "models/tokenizer_fixtures.h"
#include "support/error_of.h"
#include "support/python_runner.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

using models::PaddingOptions;
using models::Tokenizer;
using test::error_of;
using test::TempDir;
using Ids = std::vector<int32_t>;

std::filesystem::path write(const TempDir& dir, const std::string& name, std::string_view text) {
  std::ofstream(dir.file(name), std::ios::binary) << text;
  return dir.file(name);
}

Tokenizer load(const TempDir& dir, std::string_view json) {
  return Tokenizer::from_file(write(dir, "tokenizer.json", json));
}

std::string replaced(std::string text, std::string_view from, std::string_view to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

// ---------------------------------------------------------------- GPT-2's layout

TEST(TokenizerGpt2, EncodesByMergeRank) {
  TempDir dir("tokenizer");
  const Tokenizer tok = load(dir, test::kGpt2Json);
  // GPT-2's regex cuts "Hello world!" into "Hello", " world", "!"; the byte map writes the space as
  // Ġ. "Hello": H e l l o -> (H e, rank 0) He l l o -> (l l, 1) He ll o -> (He ll, 2) Hell o ->
  // (Hell o, 3) Hello = 22. "Ġworld": Ġ w o r l d -> (Ġ w, 4) Ġw o r l d -> (o r, 5) Ġw or l d ->
  // (Ġw or, 6) Ġwor l d -> (l d, 7) Ġwor ld -> (Ġwor ld, 8) Ġworld = 27. "!" = 18.
  EXPECT_EQ(tok.encode("Hello world!"), (Ids{22, 27, 18}));
  // A leading space stays with the word: Ġ H e l l o. "Ġ H" (rank 14) would merge first but
  // "H e" (rank 0) takes the H: Ġ He l l o -> ... -> Ġ Hello = [4, 22].
  EXPECT_EQ(tok.encode(" Hello"), (Ids{4, 22}));
  // Contractions and digits: "I", "'m" (the regex's 'm), " 42" (` ?\p{N}+`). "' m" (9) -> 28;
  // Ġ 4 2 -> (4 2, 10) Ġ 42 = [4, 29] (no merge joins Ġ and 42).
  EXPECT_EQ(tok.encode("I'm 42"), (Ids{8, 28, 4, 29}));
  // é is C3 A9 in UTF-8, which the byte map writes as Ã © (both bytes map to themselves):
  // c a f Ã © -> (Ã ©, 11) c a f Ã© -> (c a, 12) ca f Ã© -> (ca f, 13) caf Ã© = [32, 30].
  EXPECT_EQ(tok.encode("café"), (Ids{32, 30}));
  // Two spaces: `\s+(?!\S)` takes the first alone (the second is followed by "w"), then " world".
  EXPECT_EQ(tok.encode("Hello  world"), (Ids{22, 4, 27}));
  // A character outside the vocabulary with no unk token and no byte fallback is dropped (as the
  // tokenizers library does): " z" is Ġ z -> [4].
  EXPECT_EQ(tok.encode("Hello z"), (Ids{22, 4}));
  // ByteLevel's post-processor adds nothing.
  EXPECT_EQ(tok.encode("Hello world!", false), tok.encode("Hello world!"));
  EXPECT_EQ(tok.encode(""), Ids{});
}

TEST(TokenizerGpt2, AddedSpecialTokenIsOneIdAndDecodes) {
  TempDir dir("tokenizer");
  const Tokenizer tok = load(dir, test::kGpt2Json);
  // <|endoftext|> is cut out before the regex: "Hello", <|endoftext|>, " world".
  const Ids ids = tok.encode("Hello<|endoftext|> world");
  EXPECT_EQ(ids, (Ids{22, 34, 27}));
  EXPECT_EQ(tok.decode(ids), "Hello<|endoftext|> world");
  EXPECT_EQ(tok.decode(ids, /*skip_special_tokens=*/true), "Hello world");
  EXPECT_EQ(tok.decode({22, 27, 18, 4, 29, 32, 30}), "Hello world! 42café");
  EXPECT_EQ(tok.decode({22, 9999, 27}), "Hello world");  // no such id: left out
  EXPECT_EQ(tok.token_to_id("<|endoftext|>"), 34);
  EXPECT_EQ(tok.token_to_id("Ġworld"), 27);
  EXPECT_EQ(tok.token_to_id("world"), std::nullopt);
  EXPECT_EQ(tok.id_to_token(27), "Ġworld");
  EXPECT_EQ(tok.id_to_token(34), "<|endoftext|>");
  EXPECT_NE(error_of<KeyError>([&] { tok.id_to_token(35); }).find("35"), std::string::npos);
  EXPECT_EQ(tok.vocab_size(), 35);
  // Without tokenizer_config.json a tokenizer.json names no bos, eos or pad token.
  EXPECT_EQ(tok.bos_id(), std::nullopt);
  EXPECT_EQ(tok.eos_id(), std::nullopt);
  EXPECT_EQ(tok.pad_id(), std::nullopt);
  EXPECT_NE(error_of<ValueError>([&] { tok.encode("\xC3"); }).find("UTF-8"), std::string::npos);
}

// ---------------------------------------------------------------- Llama 3's layout

TEST(TokenizerLlama3, SplitRegexIgnoreMergesAndTemplate) {
  TempDir dir("tokenizer");
  const Tokenizer tok = load(dir, test::kLlama3Json);
  // The Split regex cuts "I'M hello hel 12345" into "I", "'M" (case-insensitive 'm), " hello",
  // " hel", " " (`\s+` before a digit), "123", "45" (`\p{N}{1,3}`); ByteLevel writes spaces as Ġ.
  // ignore_merges: "'M" (22), "Ġhello" (23) and "123" (20) are in the vocabulary and are one token
  // each, though no merges lead to Ġhello. "Ġhel" is not: Ġ h e l -> (Ġ h, 0) Ġh e l -> (Ġh e, 1)
  // Ġhe l = [15, 2]. "I" = 13, "Ġ" = 5, "45" = 21. The template puts <|begin_of_text|> (24) first.
  const std::string text = "I'M hello hel 12345";
  EXPECT_EQ(tok.encode(text), (Ids{24, 13, 22, 23, 15, 2, 5, 20, 21}));
  EXPECT_EQ(tok.encode(text, /*add_special_tokens=*/false), (Ids{13, 22, 23, 15, 2, 5, 20, 21}));
  // "hello" without its space is not in the vocabulary: h e l l o -> (h e, 2) he l l o = [16, 2, 2, 3].
  EXPECT_EQ(tok.encode("hello", false), (Ids{16, 2, 2, 3}));
  EXPECT_EQ(tok.decode(tok.encode(text)), "<|begin_of_text|>" + text);
  EXPECT_EQ(tok.decode(tok.encode(text), true), text);
  EXPECT_EQ(tok.encode("<|begin_of_text|>hello<|end_of_text|>", false), (Ids{24, 16, 2, 2, 3, 25}));

  // Without ignore_merges Ġhello comes from the merges: Ġ h e l l o -> Ġh -> Ġhe l l o.
  const Tokenizer merged =
      load(dir, replaced(test::kLlama3Json, R"("ignore_merges": true)", R"("ignore_merges": false)"));
  EXPECT_EQ(merged.encode(" hello", false), (Ids{15, 2, 2, 3}));
}

// ---------------------------------------------------------------- Llama 2's layout

TEST(TokenizerLlama2, ByteFallbackAndItsDecoder) {
  TempDir dir("tokenizer");
  const Tokenizer tok = load(dir, test::llama2_json());
  // Normalized "hi é" is "▁hi▁é" (Prepend, then Replace); no pre-tokenizer, so one piece:
  // ▁ h i ▁ é -> (▁ h, 0) ▁h i ▁ é -> (▁h i, 1) ▁hi ▁ é. é is not in the vocabulary: byte fallback
  // gives its UTF-8 bytes <0xC3> <0xA9>, ids 3 + 0xC3 = 198 and 3 + 0xA9 = 172. <s> (1) first.
  const Ids ids = tok.encode("hi é");
  EXPECT_EQ(ids, (Ids{1, 263, 259, 198, 172}));
  // Replace ▁ -> " ", ByteFallback joins <0xC3><0xA9> into é, Fuse, Strip drops the leading space.
  EXPECT_EQ(tok.decode(ids, true), "hi é");
  EXPECT_EQ(tok.decode(ids), "<s> hi é");  // Strip looks at the fused text, which starts with <s>
  EXPECT_EQ(tok.decode({263, 198}, true), "hi\xEF\xBF\xBD");  // a lone lead byte is U+FFFD
  for (const std::string text : {"hi", " hi  there", "emoji 🙂 and 漢字", "a\tb\nc"})
    EXPECT_EQ(tok.decode(tok.encode(text), true), text) << text;
}

TEST(TokenizerLlama2, UnknownCharactersFuse) {
  TempDir dir("tokenizer");
  // Without byte fallback é is <unk> (0); fuse_unk joins the two into one.
  const Tokenizer fused = load(dir, test::llama2_json("null", /*byte_fallback=*/false, /*fuse_unk=*/true));
  EXPECT_EQ(fused.encode("hi éé", false), (Ids{263, 259, 0}));
  const Tokenizer apart = load(dir, test::llama2_json("null", false, /*fuse_unk=*/false));
  EXPECT_EQ(apart.encode("hi éé", false), (Ids{263, 259, 0, 0}));
}

TEST(TokenizerLlama2, MetaspacePrependsOnlyAtTheStart) {
  TempDir dir("tokenizer");
  // Newer Llama files: no normalizer, Metaspace (prepend_scheme "first") and its decoder.
  const Tokenizer tok =
      load(dir, test::llama2_json(R"({"type": "Metaspace", "replacement": "▁",
      "prepend_scheme": "first", "split": false})",
                                  true, true, "null", R"({"type": "Metaspace", "replacement": "▁",
      "prepend_scheme": "first", "split": false})"));
  // "hi hi" -> "▁hi▁hi" -> ▁hi ▁hi (each by the two merges).
  EXPECT_EQ(tok.encode("hi hi", false), (Ids{263, 263}));
  // After </s> (2) the text does not start the input: no ▁, so h i (no merge joins them).
  EXPECT_EQ(tok.encode("</s>hi", false), (Ids{2, 260, 261}));
  // The decoder drops the first token's ▁ and writes the others as spaces.
  EXPECT_EQ(tok.decode({263, 263}), "hi hi");
}

// ---------------------------------------------------------------- BERT's layout

TEST(TokenizerBert, WordPieceWithBertNormalizer) {
  TempDir dir("tokenizer");
  const Tokenizer tok = load(dir, test::kBertJson);
  // BertNormalizer: "hello, world! unaffable  漢  字  cafe." (spaces around the ideographs, é
  // without its accent, lowercase); BertPreTokenizer splits at spaces and punctuation. WordPiece
  // takes the longest vocabulary entry: "unaffable" is un ##aff ##able (7 8 9); 字 is not in the
  // vocabulary: [UNK] (1). [CLS] (2) and [SEP] (3) around.
  const Ids ids = tok.encode("Hello, World! unaffable 漢字 Café.");
  EXPECT_EQ(ids, (Ids{2, 5, 11, 6, 10, 7, 8, 9, 12, 1, 13, 14, 3}));
  // The decoder joins ## pieces and cleans the spaces before punctuation.
  EXPECT_EQ(tok.decode(ids, true), "hello, world! unaffable 漢 cafe.");
  EXPECT_EQ(tok.decode(ids), "[CLS] hello, world! unaffable 漢 [UNK] cafe. [SEP]");
  // A word longer than max_input_chars_per_word is [UNK] whole.
  const Tokenizer short_words = load(dir, replaced(test::kBertJson, R"("max_input_chars_per_word": 100)",
                                                   R"("max_input_chars_per_word": 8)"));
  EXPECT_EQ(short_words.encode("unaffable hello", false), (Ids{1, 5}));
}

// ---------------------------------------------------------------- normalizers and splits

TEST(TokenizerNormalizer, NfkcAndLowercase) {
  TempDir dir("tokenizer");
  const Tokenizer tok = load(dir, test::kNormalizerJson);
  // Fullwidth "Ｃａｆｅ" is "Cafe" under NFKC, which also composes e + U+0301 into é; Lowercase
  // gives "café hi"; WhitespaceSplit: "café" -> c a f é -> ca f é -> caf é -> café = 6, "hi" = 9.
  EXPECT_EQ(tok.encode("\xEF\xBC\xA3\xEF\xBD\x81\xEF\xBD\x86\xEF\xBD\x85\xCC\x81 HI"), (Ids{6, 9}));
  EXPECT_EQ(tok.encode("CAFÉ  hI"), (Ids{6, 9}));
  EXPECT_EQ(tok.decode({6, 9}), "café hi");  // no decoder: tokens joined by spaces
}

TEST(TokenizerSplit, EveryBehavior) {
  TempDir dir("tokenizer");
  // The pattern is the string "-", or, when `invert` is given, the regex [a-c] with that invert.
  const auto with = [&](std::string_view behavior, std::optional<bool> invert = std::nullopt) {
    return load(dir, fmt::format(R"({{"version": "1.0", "added_tokens": [], "normalizer": null,
      "pre_tokenizer": {{"type": "Split", "pattern": {{"{}": "{}"}}, "behavior": "{}", "invert": {}}},
      "post_processor": null, "decoder": null,
      "model": {{"type": "WordLevel", "unk_token": "[UNK]", "vocab": {{"[UNK]": 0, "a": 1, "b": 2, "c": 3,
        "-": 4, "a-": 5, "b-": 6, "-b": 7, "-c": 8, "--": 9}}}}}})",
                                 invert ? "Regex" : "String", invert ? "[a-c]" : "-", behavior,
                                 invert.value_or(false) ? "true" : "false"));
  };
  // "a-b--c": the pattern matches each "-".
  EXPECT_EQ(with("Removed").encode("a-b--c"), (Ids{1, 2, 3}));                // a b c
  EXPECT_EQ(with("Isolated").encode("a-b--c"), (Ids{1, 4, 2, 4, 4, 3}));      // a - b - - c
  EXPECT_EQ(with("MergedWithPrevious").encode("a-b--c"), (Ids{5, 6, 4, 3}));  // a- b- - c
  EXPECT_EQ(with("MergedWithNext").encode("a-b--c"), (Ids{1, 7, 4, 8}));      // a -b - -c
  EXPECT_EQ(with("Contiguous").encode("a-b--c"), (Ids{1, 4, 2, 9, 3}));       // a - b -- c
  // The pattern [a-c] matches the letters; inverted, the dashes are the matches.
  EXPECT_EQ(with("Removed", /*invert=*/false).encode("a-b--c"), (Ids{4, 9}));    // letters removed
  EXPECT_EQ(with("Removed", /*invert=*/true).encode("a-b--c"), (Ids{1, 2, 3}));  // dashes removed
  EXPECT_EQ(with("Removed").encode("a-x"), (Ids{1, 0}));                         // x is [UNK]
}

// ---------------------------------------------------------------- round trips

const std::vector<std::string> kVariedTexts = {
    "Hello, world!",
    "  leading and trailing spaces  ",
    "tabs\tand\nnew lines\r\n\n",
    "emoji 🙂👍🏽 and CJK 漢字かな한국어",
    "Ünïcödé façade — “quotes” …",
    "numbers 1234567890 and 3.14159",
    "I'm sure they'll say we've done it",
    "",
    "<|endoftext|> between <|endoftext|>",
    "\x01\x7f control bytes",
    std::string("a\0b", 3),
};

TEST(TokenizerRoundTrip, ByteLevelDecodesEveryText) {
  TempDir dir("tokenizer");
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "n"}};
  const Tokenizer gpt2 = load(dir, test::full_byte_level_json(merges));
  const Tokenizer llama3 =
      load(dir, test::full_byte_level_json(merges, R"({"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]})"));
  for (const Tokenizer* tok : {&gpt2, &llama3})
    for (const std::string& text : kVariedTexts) {
      EXPECT_EQ(tok->decode(tok->encode(text)), text) << text;
      EXPECT_EQ(tok->decode(tok->encode(text), true).find("<|endoftext|>"), std::string::npos);
    }
  // " the" merges to one token (Ġ t, Ġt he); 🙂 is its four bytes.
  EXPECT_EQ(gpt2.encode(" the"), (Ids{258}));
  EXPECT_EQ(gpt2.encode("🙂"), (Ids{0xF0, 0x9F, 0x99, 0x82}));
}

// ---------------------------------------------------------------- batches

TEST(TokenizerBatch, PadsLeftOrRightWithMasks) {
  TempDir dir("tokenizer");
  const Tokenizer tok = load(dir, test::kGpt2Json);
  const std::vector<std::string> texts = {"Hello world", "I'm 42", "café"};  // 2, 4 and 2 ids
  const auto right = tok.encode_batch(texts, {.pad_id = 34});
  EXPECT_EQ(right.input_ids.shape(), (Shape{3, 4}));
  EXPECT_EQ(right.input_ids.dtype(), int32);
  EXPECT_EQ(right.input_ids.to_vector<int32_t>(), (Ids{22, 27, 34, 34, 8, 28, 4, 29, 32, 30, 34, 34}));
  EXPECT_EQ(right.attention_mask.to_vector<int32_t>(), (Ids{1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0}));
  const auto left = tok.encode_batch(texts, {.side = PaddingOptions::Side::left, .pad_id = 34});
  EXPECT_EQ(left.input_ids.to_vector<int32_t>(), (Ids{34, 34, 22, 27, 8, 28, 4, 29, 34, 34, 32, 30}));
  EXPECT_EQ(left.attention_mask.to_vector<int32_t>(), (Ids{0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1}));
  // A max_length pads further; truncation cuts the longer rows.
  const auto wide = tok.encode_batch({"café"}, {.max_length = 4, .pad_id = 0});
  EXPECT_EQ(wide.input_ids.to_vector<int32_t>(), (Ids{32, 30, 0, 0}));
  const auto cut = tok.encode_batch(texts, {.max_length = 3, .truncation = true, .pad_id = 34});
  EXPECT_EQ(cut.input_ids.to_vector<int32_t>(), (Ids{22, 27, 34, 8, 28, 4, 32, 30, 34}));
  EXPECT_EQ(tok.encode_batch({}, {.pad_id = 0}).input_ids.shape(), (Shape{0, 0}));

  const std::string no_pad = error_of<ValueError>([&] { tok.encode_batch(texts); });
  EXPECT_NE(no_pad.find("no pad token"), std::string::npos) << no_pad;
  const std::string too_long =
      error_of<ValueError>([&] { tok.encode_batch(texts, {.max_length = 3, .pad_id = 0}); });
  EXPECT_NE(too_long.find("text 1 has 4 tokens"), std::string::npos) << too_long;
  error_of<ValueError>([&] { tok.encode_batch(texts, {.truncation = true, .pad_id = 0}); });
}

TEST(TokenizerBatch, TruncationKeepsTheSpecialTokens) {
  TempDir dir("tokenizer");
  const Tokenizer tok = load(dir, test::kLlama3Json);
  // [24, 13, 22, 23, ...] cut to 3: the text keeps 2 ids and <|begin_of_text|> stays first.
  const auto cut =
      tok.encode_batch({"I'M hello hel 12345", "hello"}, {.max_length = 3, .truncation = true, .pad_id = 25});
  EXPECT_EQ(cut.input_ids.to_vector<int32_t>(), (Ids{24, 13, 22, 24, 16, 2}));
  error_of<ValueError>([&] { tok.encode_batch({"a"}, {.max_length = 0, .truncation = true, .pad_id = 0}); });
}

// ---------------------------------------------------------------- from_pretrained

TEST(TokenizerPretrained, ReadsTokenizerConfig) {
  TempDir dir("tokenizer");
  write(dir, "tokenizer.json", test::kLlama3Json);
  const Tokenizer plain = Tokenizer::from_pretrained(dir.path());  // no config: the file's template
  EXPECT_EQ(plain.encode("hello"), (Ids{24, 16, 2, 2, 3}));
  write(dir, "tokenizer_config.json", R"({"bos_token": "<|begin_of_text|>",
    "eos_token": {"content": "<|end_of_text|>", "__type": "AddedToken"}, "pad_token": null, "add_eos_token": true})");
  const Tokenizer tok = Tokenizer::from_pretrained(dir.path());
  EXPECT_EQ(tok.bos_id(), 24);
  EXPECT_EQ(tok.eos_id(), 25);
  EXPECT_EQ(tok.pad_id(), std::nullopt);
  // add_eos_token appends EOS; the BOS the template adds stays (add_bos_token is not given).
  EXPECT_EQ(tok.encode("hello"), (Ids{24, 16, 2, 2, 3, 25}));
  EXPECT_EQ(tok.encode("hello", false), (Ids{16, 2, 2, 3}));
  write(dir, "tokenizer_config.json", R"({"bos_token": "<|begin_of_text|>", "add_bos_token": false})");
  EXPECT_EQ(Tokenizer::from_pretrained(dir.path()).encode("hello"), (Ids{16, 2, 2, 3}));
  // clean_up_tokenization_spaces: transformers' decode makes " ' " an apostrophe (I Ġ ' Ġ I).
  EXPECT_EQ(tok.decode({13, 5, 11, 5, 13}), "I ' I");
  write(dir, "tokenizer_config.json", R"({"clean_up_tokenization_spaces": true})");
  EXPECT_EQ(Tokenizer::from_pretrained(dir.path()).decode({13, 5, 11, 5, 13}), "I'I");

  write(dir, "tokenizer_config.json", R"({"pad_token": "<pad>"})");
  const std::string missing = error_of<FormatError>([&] { Tokenizer::from_pretrained(dir.path()); });
  EXPECT_NE(missing.find("tokenizer_config.json"), std::string::npos) << missing;
  EXPECT_NE(missing.find("<pad>"), std::string::npos) << missing;
  write(dir, "tokenizer_config.json", R"({"add_eos_token": true})");
  error_of<FormatError>([&] { Tokenizer::from_pretrained(dir.path()); });
  write(dir, "tokenizer_config.json", R"({"add_eos_token": "yes"})");
  error_of<FormatError>([&] { Tokenizer::from_pretrained(dir.path()); });

  TempDir empty("tokenizer_empty");
  const std::string none = error_of<RuntimeError>([&] { Tokenizer::from_pretrained(empty.path()); });
  EXPECT_NE(none.find("neither tokenizer.json nor tokenizer.model"), std::string::npos) << none;
}

// ---------------------------------------------------------------- errors

TEST(TokenizerErrors, UnsupportedComponentsAreNamed) {
  TempDir dir("tokenizer");
  const std::string gpt2 = test::kGpt2Json;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {replaced(gpt2, R"("type": "BPE")", R"("type": "Unigram")"), "model type 'Unigram'"},
      {replaced(gpt2, R"("pre_tokenizer": {"type": "ByteLevel")",
                R"("pre_tokenizer": {"type": "UnicodeScripts")"),
       "pre_tokenizer type 'UnicodeScripts'"},
      {replaced(gpt2, R"("normalizer": null)",
                R"("normalizer": {"type": "Precompiled", "precompiled_charsmap": ""})"),
       "normalizer type 'Precompiled'"},
      {replaced(gpt2, R"("decoder": {"type": "ByteLevel")", R"("decoder": {"type": "CTC")"),
       "decoder type 'CTC'"},
      {replaced(gpt2, R"("post_processor": {"type": "ByteLevel")", R"("post_processor": {"type": "Mystery")"),
       "post_processor type 'Mystery'"},
      {replaced(gpt2, R"("dropout": null)", R"("dropout": 0.1)"), "dropout 0.1"},
  };
  for (const auto& [json, expected] : cases) {
    const auto path = write(dir, "tokenizer.json", json);
    const std::string message = error_of<NotImplemented>([&] { Tokenizer::from_file(path); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  }
}

TEST(TokenizerErrors, MalformedFilesNameTheFile) {
  TempDir dir("tokenizer");
  const std::string gpt2 = test::kGpt2Json;
  std::string nested = R"({"type": "Lowercase"})";
  for (int i = 0; i < 40; ++i) nested = R"({"type": "Sequence", "normalizers": [)" + nested + "]}";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"model\": ", "not valid JSON"},
      {"[1, 2]", "not an object"},
      {R"({"version": "1.0"})", "no 'model'"},
      {replaced(gpt2, R"("version": "1.0")", R"("version": "2.0")"), "version"},
      {replaced(gpt2, R"("Ġ H"])", R"("Ġ Q"])"), "'Q' is not in the vocabulary"},
      {replaced(gpt2, R"("Ġ H"])", R"("Ġ H x"])"), "not two tokens and a space"},
      {replaced(gpt2, R"("H": 0)", R"("H": "zero")"), "the id of 'H'"},
      {replaced(gpt2, R"("H": 0)", R"("H": 4294967296)"), "the id of 'H'"},
      {replaced(gpt2, R"("normalizer": null)", "\"normalizer\": " + nested), "nested deeper than 32 levels"},
      {replaced(test::kLlama3Json, R"("behavior": "Isolated")", R"("behavior": "Sideways")"), "'Sideways'"},
      {replaced(test::kLlama3Json, R"({"Regex": "(?i:)", R"({"Regex": "((?i:)"),
       "missing closing parenthesis"},
      {replaced(test::kLlama3Json, R"("ids": [24])", R"("ids": ["x"])"), "an id of '<|begin_of_text|>'"},
      {replaced(test::kLlama3Json,
                R"({"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence")",
                R"({"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence")"),
       "'<bos>' is not in special_tokens"},
      {test::llama2_json(R"({"type": "Metaspace", "replacement": "ab"})"), "not one character"},
      {replaced(test::kLlama3Json, R"("use_regex": false}]})", R"("use_regex": 1}]})"), "not a boolean"},
  };
  for (const auto& [json, expected] : cases) {
    const auto path = write(dir, "tokenizer.json", json);
    const std::string message = error_of<FormatError>([&] { Tokenizer::from_file(path); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  }
  // A file that is not JSON is read as a SentencePiece model.
  const auto garbage = write(dir, "tokenizer.model", "\x0a\x05garbage, not a model");
  const std::string message = error_of<FormatError>([&] { Tokenizer::from_file(garbage); });
  EXPECT_NE(message.find(garbage.string()), std::string::npos) << message;
  const std::string missing = error_of<RuntimeError>([&] { Tokenizer::from_file(dir.file("absent.json")); });
  EXPECT_NE(missing.find("absent.json"), std::string::npos) << missing;
}

// ---------------------------------------------------------------- threads

TEST(TokenizerThreads, ConcurrentEncodesAgree) {
  TempDir dir("tokenizer");
  const Tokenizer tok = load(dir, test::full_byte_level_json({{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}}));
  std::vector<Ids> expected;
  for (const std::string& text : kVariedTexts) expected.push_back(tok.encode(text));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 50; ++round)
        for (size_t i = 0; i < kVariedTexts.size(); ++i)
          if (tok.encode(kVariedTexts[i]) != expected[i] || tok.decode(expected[i]) != kVariedTexts[i])
            ++mismatches[t];
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, (std::vector<int>{0, 0, 0, 0}));
}

// ---------------------------------------------------------------- SentencePiece

// tests/models/sentencepiece_models.py trains a BPE model (with byte fallback) and a unigram
// model on a generated corpus, and writes the ids and decodings Python's sentencepiece gives.
class SentencePiece : public test::PythonFilesTest<SentencePiece> {
 public:
  static constexpr test::PythonFiles kFiles{"sentencepiece", "tests/models/sentencepiece_models.py",
                                            "sentencepiece"};
};

TEST_F(SentencePiece, IdsEqualSentencepieceOwn) {
  for (const std::string kind : {"bpe", "unigram"}) {
    const Tokenizer tok = Tokenizer::from_file(file(kind + ".model"));
    std::ifstream in(file(kind + ".json"));
    const auto expected = nlohmann::json::parse(in);
    ASSERT_TRUE(tok.bos_id() && tok.eos_id()) << kind;
    EXPECT_EQ(tok.vocab_size(), expected["vocab_size"].get<int64_t>()) << kind;
    const auto& sentences = expected["sentences"];
    ASSERT_GT(sentences.size(), 5u);
    for (size_t i = 0; i < sentences.size(); ++i) {
      const std::string text = sentences[i].get<std::string>();
      const Ids ids = expected["ids"][i].get<Ids>();
      EXPECT_EQ(tok.encode(text, false), ids) << kind << ": " << text;
      Ids with_bos = ids;
      with_bos.insert(with_bos.begin(), *tok.bos_id());
      EXPECT_EQ(tok.encode(text), with_bos) << kind << ": " << text;
      EXPECT_EQ(tok.decode(with_bos, true), expected["decoded"][i].get<std::string>())
          << kind << ": " << text;
    }
    // Text the model covers, in single spaces, comes back as it was.
    for (const std::string text : {"the quick brown fox", "a lazy dog jumps over 42 fences."})
      EXPECT_EQ(tok.decode(tok.encode(text), true), text) << kind;
    EXPECT_EQ(tok.decode({*tok.bos_id()}), "<s>");
    EXPECT_EQ(tok.id_to_token(*tok.bos_id()), "<s>");
    EXPECT_EQ(tok.token_to_id("<s>"), tok.bos_id());
    EXPECT_EQ(tok.token_to_id("no such piece"), std::nullopt);
  }
}

TEST_F(SentencePiece, TokenizerConfigAddsEos) {
  TempDir dir("tokenizer_sp");
  std::filesystem::copy_file(file("bpe.model"), dir.file("tokenizer.model"));
  write(dir, "tokenizer_config.json",
        R"({"add_bos_token": true, "add_eos_token": true, "pad_token": "</s>"})");
  const Tokenizer tok = Tokenizer::from_pretrained(dir.path());
  const Ids ids = tok.encode("the fox");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), *tok.bos_id());
  EXPECT_EQ(ids.back(), *tok.eos_id());
  EXPECT_EQ(tok.pad_id(), tok.eos_id());
  const auto batch = tok.encode_batch({"the fox", "the"});
  EXPECT_EQ(batch.input_ids.shape()[1], static_cast<int64_t>(ids.size()));
}

}  // namespace
}  // namespace kiln
