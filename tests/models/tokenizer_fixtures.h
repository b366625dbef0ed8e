#pragma once
// Small tokenizer.json files for tokenizer_test.cpp, laid out as the tokenizers library writes
// GPT-2's, Llama 3's, Llama 2's and BERT's, with vocabularies and merges small enough to work the
// expected ids out by hand (the tests say how).
#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::test {

/// `s` as a JSON string literal.
inline std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) < 0x20)
      out.append(fmt::format("\\u{:04x}", c));
    else
      out.push_back(c);
  }
  return out + "\"";
}

inline std::string added_token_json(int id, std::string_view content, bool special = true) {
  return fmt::format(
      R"({{"id": {}, "content": {}, "single_word": false, "lstrip": false, "rstrip": false, "normalized": {}, )"
      R"("special": {}}})",
      id, json_quote(content), special ? "false" : "true", special ? "true" : "false");
}

// GPT-2's layout: ByteLevel pre-tokenizer with its regex, ByteLevel decoder and post-processor.
// The vocabulary holds the byte-level characters of the test texts and 15 merges; ids 0-18 are
// single characters, 19-33 the merges' results in merge order (but ĠH, 33, for the last merge).
inline constexpr const char* kGpt2Json = R"json({
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [
    {"id": 34, "content": "<|endoftext|>", "single_word": false, "lstrip": false, "rstrip": false,
     "normalized": false, "special": true}
  ],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "post_processor": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
  "model": {
    "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
    "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false,
    "vocab": {"H": 0, "e": 1, "l": 2, "o": 3, "Ġ": 4, "w": 5, "r": 6, "d": 7, "I": 8, "'": 9, "m": 10,
              "4": 11, "2": 12, "c": 13, "a": 14, "f": 15, "Ã": 16, "©": 17, "!": 18,
              "He": 19, "ll": 20, "Hell": 21, "Hello": 22, "Ġw": 23, "or": 24, "Ġwor": 25, "ld": 26,
              "Ġworld": 27, "'m": 28, "42": 29, "Ã©": 30, "ca": 31, "caf": 32, "ĠH": 33},
    "merges": ["H e", "l l", "He ll", "Hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "' m", "4 2",
               "Ã ©", "c a", "ca f", "Ġ H"]
  }
})json";

// Llama 3's layout: its Split regex, then ByteLevel without a regex; ignore_merges; a template
// that puts <|begin_of_text|> first. Merges are written as pairs (the newer format).
inline constexpr const char* kLlama3Json = R"json({
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [
    {"id": 24, "content": "<|begin_of_text|>", "single_word": false, "lstrip": false, "rstrip": false,
     "normalized": false, "special": true},
    {"id": 25, "content": "<|end_of_text|>", "single_word": false, "lstrip": false, "rstrip": false,
     "normalized": false, "special": true}
  ],
  "normalizer": null,
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
  "post_processor": {"type": "Sequence", "processors": [
    {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
    {"type": "TemplateProcessing",
     "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
     "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
              {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
     "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [24], "tokens": ["<|begin_of_text|>"]}}}]},
  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
  "model": {
    "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
    "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": true,
    "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "p": 4, "Ġ": 5, "1": 6, "2": 7, "3": 8, "4": 9, "5": 10,
              "'": 11, "M": 12, "I": 13, "Ġh": 14, "Ġhe": 15, "he": 16, "lp": 17, "Ġhelp": 18, "12": 19,
              "123": 20, "45": 21, "'M": 22, "Ġhello": 23},
    "merges": [["Ġ", "h"], ["Ġh", "e"], ["h", "e"], ["l", "p"], ["Ġhe", "lp"], ["1", "2"], ["12", "3"],
               ["4", "5"], ["'", "M"]]
  }
})json";

// Llama 2's tokenizer.json layout: "▁" prepended and spaces replaced by it, BPE with byte fallback
// (<0x00>..<0xFF> are ids 3..258) and fused unknowns, and the decoder that undoes it all.
// `pre_tokenizer`, `normalizer` and `byte_fallback` vary it (Metaspace's layout, no fallback).
inline std::string llama2_json(std::string_view pre_tokenizer = "null", bool byte_fallback = true,
                               bool fuse_unk = true,
                               std::string_view normalizer = R"({"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "▁"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})",
                               std::string_view decoder = R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
      {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})") {
  std::string vocab = R"("<unk>": 0, "<s>": 1, "</s>": 2)";
  for (int b = 0; b < 256; ++b) vocab += fmt::format(R"(, "<0x{:02X}>": {})", b, 3 + b);
  vocab += R"(, "▁": 259, "h": 260, "i": 261, "▁h": 262, "▁hi": 263)";
  return fmt::format(R"({{
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [{}, {}, {}],
  "normalizer": {}, "pre_tokenizer": {},
  "post_processor": {{"type": "TemplateProcessing",
    "single": [{{"SpecialToken": {{"id": "<s>", "type_id": 0}}}}, {{"Sequence": {{"id": "A", "type_id": 0}}}}],
    "pair": [],
    "special_tokens": {{"<s>": {{"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}}}},
  "decoder": {},
  "model": {{"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
    "end_of_word_suffix": null, "fuse_unk": {}, "byte_fallback": {}, "vocab": {{{}}}, "merges": ["▁ h", "▁h i"]}}
}})",
                     added_token_json(0, "<unk>"), added_token_json(1, "<s>"), added_token_json(2, "</s>"),
                     normalizer, pre_tokenizer, decoder, fuse_unk ? "true" : "false",
                     byte_fallback ? "true" : "false", vocab);
}

// NFKC then Lowercase, WhitespaceSplit, a plain (not byte-level) BPE and no decoder.
inline constexpr const char* kNormalizerJson = R"json({
  "version": "1.0", "added_tokens": [],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]},
  "pre_tokenizer": {"type": "WhitespaceSplit"},
  "post_processor": null, "decoder": null,
  "model": {"type": "BPE", "vocab": {"c": 0, "a": 1, "f": 2, "é": 3, "ca": 4, "caf": 5, "café": 6, "h": 7,
                                     "i": 8, "hi": 9},
            "merges": ["c a", "ca f", "caf é", "h i"]}
})json";

// BERT's layout: BertNormalizer (lowercase, accents stripped, spaces around CJK ideographs),
// BertPreTokenizer, WordPiece with "##" continuations, [CLS] $A [SEP] and the WordPiece decoder.
inline constexpr const char* kBertJson = R"json({
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [
    {"id": 0, "content": "[PAD]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 1, "content": "[UNK]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 2, "content": "[CLS]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 3, "content": "[SEP]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 4, "content": "[MASK]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
  ],
  "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null,
                 "lowercase": true},
  "pre_tokenizer": {"type": "BertPreTokenizer"},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
               {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
    "pair": [],
    "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                       "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
  "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
  "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100,
            "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "hello": 5, "world": 6, "un": 7,
                      "##aff": 8, "##able": 9, "!": 10, ",": 11, "漢": 12, "cafe": 13, ".": 14, "the": 15}}
})json";

/// A byte-level tokenizer with every byte in its vocabulary (ids 0-255 in byte order), the merged
/// tokens after them in merge order, and <|endoftext|>: any text round-trips. `pre_tokenizer` is
/// GPT-2's ByteLevel unless given.
inline std::string full_byte_level_json(const std::vector<std::pair<std::string, std::string>>& merges,
                                        std::string_view pre_tokenizer = R"({"type": "ByteLevel",
    "add_prefix_space": false, "trim_offsets": true, "use_regex": true})") {
  static const auto byte_chars = [] {
    std::vector<std::string> t(256);
    char32_t next = 256;
    const auto append = [](std::string& s, char32_t c) {
      if (c < 0x80) {
        s.push_back(static_cast<char>(c));
      } else {  // all of them are below U+0800
        s.push_back(static_cast<char>(0xC0 | (c >> 6)));
        s.push_back(static_cast<char>(0x80 | (c & 0x3F)));
      }
    };
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      append(t[b], printable ? static_cast<char32_t>(b) : next++);
    }
    return t;
  }();
  std::string vocab, merge_list;
  for (int b = 0; b < 256; ++b) vocab += fmt::format("{}{}: {}", b ? ", " : "", json_quote(byte_chars[b]), b);
  int id = 256;
  for (const auto& [a, b] : merges) {
    vocab += fmt::format(", {}: {}", json_quote(a + b), id++);
    merge_list += fmt::format("{}{}", merge_list.empty() ? "" : ", ", json_quote(a + " " + b));
  }
  return fmt::format(R"({{"version": "1.0", "added_tokens": [{}], "normalizer": null, "pre_tokenizer": {},
  "post_processor": null,
  "decoder": {{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}},
  "model": {{"type": "BPE", "vocab": {{{}}}, "merges": [{}]}}}})",
                     added_token_json(id, "<|endoftext|>"), pre_tokenizer, vocab, merge_list);
}

}  // namespace kiln::test
