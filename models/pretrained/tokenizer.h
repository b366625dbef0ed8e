#pragma once
// Tokenizers of pretrained Hugging Face models: a `tokenizer.json` (the `tokenizers` library's
// format: byte-level BPE as GPT-2, Llama 3 and Qwen2 use it, SentencePiece-style BPE with byte
// fallback as Llama 2's, BERT's WordPiece) or a SentencePiece `tokenizer.model` (Llama 2,
// TinyLlama, Mistral), read without Python. Ids equal those of the `tokenizers` library (and of
// sentencepiece for a .model).
//
//   auto tok = models::Tokenizer::from_pretrained("TinyLlama");          // + tokenizer_config.json
//   std::vector<int32_t> ids = tok.encode("Hello world");                  // BOS first, as transformers
//   std::string text = tok.decode(ids, /*skip_special_tokens=*/true);     // "Hello world"
//   BatchEncoding batch = tok.encode_batch({"a", "longer text"},
//                                          {.side = PaddingOptions::Side::left, .pad_id = tok.eos_id()});
//
// A component of tokenizer.json that kiln does not implement is a NotImplemented error naming the
// file and the component's type, never a different tokenization. docs/tokenizers.md lists what is
// supported. Every const method may be called from many threads at once.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/array.h"

namespace kiln::models {

/// A batch of encodings, padded to one length.
struct BatchEncoding {
  Array input_ids;       ///< (B, T) int32
  Array attention_mask;  ///< (B, T) int32: 1 for real tokens, 0 for padding
};

struct PaddingOptions {
  enum class Side { left, right };
  /// Where the padding goes: right for training and encoders, left for batched generation.
  Side side = Side::right;
  /// Pad every row to this length (else to the longest row). A longer row is a ValueError unless
  /// `truncation` is set.
  std::optional<int64_t> max_length = std::nullopt;
  /// Cut rows longer than max_length, keeping their start and the special tokens the tokenizer
  /// adds (as transformers' truncation=True does).
  bool truncation = false;
  /// The padding id; the tokenizer's pad token when unset (a ValueError when it has none: GPT-2
  /// and Llama have none, pass e.g. `.pad_id = tok.eos_id()`).
  std::optional<int32_t> pad_id = std::nullopt;
};

class Tokenizer {
 public:
  /// Reads a `tokenizer.json`, or a SentencePiece model (a file that is not JSON, e.g.
  /// `tokenizer.model`). Throws RuntimeError naming the path when it cannot be read, FormatError
  /// naming the file for a malformed one, NotImplemented naming the file and the type for a model,
  /// normalizer, pre-tokenizer, post-processor or decoder type kiln does not implement. Without a
  /// tokenizer_config.json, a tokenizer.json has no bos, eos or pad token (a SentencePiece model
  /// has its own bos and eos, and adds BOS).
  static Tokenizer from_file(const std::filesystem::path& path);
  /// `dir/tokenizer.json`, else `dir/tokenizer.model`, with `dir/tokenizer_config.json` when present:
  /// its bos_token, eos_token and pad_token name the special tokens, and add_bos_token /
  /// add_eos_token (where given) decide whether encode() adds them, as transformers' Llama
  /// tokenizers do, and clean_up_tokenization_spaces true makes decode() drop the spaces before
  /// punctuation and contractions (" ." -> ".", " 's" -> "'s") as transformers' decode does. Throws as
  /// from_file, RuntimeError when the folder has neither file, and FormatError naming tokenizer_config.json
  /// for a token it names that the vocabulary lacks.
  static Tokenizer from_pretrained(const std::filesystem::path& dir);

  /// The ids of `text` (UTF-8). add_special_tokens applies the post-processor (a BOS first, for
  /// Llama). Added tokens written in the text ("<|endoftext|>") are their ids. Throws ValueError
  /// for text that is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  /// The text of `ids`. skip_special_tokens leaves out special tokens (BOS, EOS, "<|endoftext|>").
  /// Ids without a token are left out (as the tokenizers library does); bytes that do not form
  /// UTF-8 become U+FFFD.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;
  /// encode() of each text, padded (and truncated) as `padding` says. Throws ValueError when padding
  /// has no pad id, for a row longer than max_length without truncation, or a max_length too
  /// small to hold the special tokens.
  BatchEncoding encode_batch(const std::vector<std::string>& texts, const PaddingOptions& padding = {},
                             bool add_special_tokens = true) const;

  /// The number of ids, added tokens included (transformers' len(tokenizer)).
  int64_t vocab_size() const;
  /// The id of a token as the vocabulary spells it ("Ġworld" in GPT-2's, "▁world" in Llama's), or of
  /// an added token ("<|endoftext|>").
  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// The token of an id. Throws KeyError for an id without a token.
  std::string id_to_token(int32_t id) const;
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  std::optional<int32_t> pad_id() const { return pad_id_; }

  struct Backend;

 private:
  explicit Tokenizer(std::unique_ptr<Backend> backend);
  std::shared_ptr<const Backend> backend_;
  std::optional<int32_t> bos_id_, eos_id_, pad_id_;
  bool clean_up_spaces_ = false;  // tokenizer_config.json's clean_up_tokenization_spaces
};

}  // namespace kiln::models
