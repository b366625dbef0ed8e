#pragma once
// The parts of models::Tokenizer (not installed): the backend interface the public class drives,
// UTF-8 helpers, the PCRE2 regex wrapper, and the tokenizer.json pipeline's components (normalizers,
// pre-tokenizers, the BPE model, post-processors, decoders), each as the `tokenizers` library
// (Rust) defines it. Everything here is immutable once built, so const calls are thread-safe.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kiln/models/pretrained/tokenizer.h"

namespace kiln::models {

inline constexpr const char* kTokenizerOp = "Tokenizer";

/// What the public Tokenizer runs: one per file format.
struct Tokenizer::Backend {
  virtual ~Backend() = default;
  /// The ids of valid UTF-8 text, without the post-processor's special tokens.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  /// The post-processor: `ids` with the special tokens around them.
  virtual std::vector<int32_t> add_special_tokens(std::vector<int32_t> ids) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(int32_t id) const = 0;
  /// tokenizer_config.json's add_bos_token / add_eos_token: each one given replaces what the
  /// post-processor does at that end (a missing bos or eos id with its flag true is an error
  /// the caller reports).
  virtual void set_bos_eos(std::optional<bool> add_bos, std::optional<int32_t> bos,
                           std::optional<bool> add_eos, std::optional<int32_t> eos) = 0;
  /// The backend's own special tokens (a SentencePiece model's); tokenizer_config.json overrides.
  virtual std::optional<int32_t> default_bos() const { return std::nullopt; }
  virtual std::optional<int32_t> default_eos() const { return std::nullopt; }
  virtual std::optional<int32_t> default_pad() const { return std::nullopt; }
};

/// A tokenizer.json's text (`source` names it in errors).
std::unique_ptr<Tokenizer::Backend> json_backend(std::string_view text, const std::string& source);
/// A SentencePiece model's bytes (`source` names the file in errors).
std::unique_ptr<Tokenizer::Backend> sentencepiece_backend(std::string_view bytes, const std::string& source);

namespace tok {

// ---------------------------------------------------------------- UTF-8

/// The code point at s[i] (valid UTF-8 assumed) and its length in bytes.
char32_t utf8_decode(std::string_view s, size_t i, size_t* length);
/// The byte length of the UTF-8 character starting with `lead`.
inline size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}
void utf8_append(std::string& out, char32_t c);
/// Calls f(c, bytes) for each character of valid UTF-8 `text`: its code point and its bytes.
template <class F>
void for_each_char(std::string_view text, F f) {
  for (size_t i = 0, n; i < text.size(); i += n) {
    const char32_t c = utf8_decode(text, i, &n);
    f(c, text.substr(i, n));
  }
}
bool utf8_valid(std::string_view s);
/// Bytes as text, each maximal invalid subsequence replaced by U+FFFD (Rust's from_utf8_lossy).
std::string utf8_lossy(std::string_view bytes);
/// Unicode White_Space (Rust's char::is_whitespace).
bool is_white_space(char32_t c);
/// General categories N*, P* (or ASCII punctuation), M* (utf8proc's tables).
bool is_numeric(char32_t c);
bool is_punctuation(char32_t c);
bool is_mark(char32_t c);

// ---------------------------------------------------------------- regex

/// A piece of a text: its byte range and whether a pattern matched it.
struct Span {
  size_t begin, end;
  bool match;
};

/// A PCRE2 pattern in UTF mode with Unicode classes, compiled once and matched from many threads.
/// Oniguruma's (the tokenizers library's) \s also matches U+0085: patterns are rewritten for it.
class Regex {
 public:
  /// Throws std::invalid_argument with PCRE2's message for a pattern it rejects.
  explicit Regex(const std::string& pattern);
  static Regex literal(std::string_view text);
  /// The text cut into spans that alternate between unmatched and matched pieces (the
  /// tokenizers library's find_matches): one unmatched span for an empty text.
  std::vector<Span> find_matches(std::string_view text) const;

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
};

/// The spaces before punctuation and contractions taken out (" ." -> ".", " 's" -> "'s"): the
/// WordPiece decoder's cleanup (with " do not" -> " don't") and transformers'
/// clean_up_tokenization_spaces (without).
void clean_up_tokenization(std::string& text, bool do_not);
/// `text` with each match of `pattern` replaced by `content`.
std::string replace_matches(const Regex& pattern, std::string_view text, std::string_view content);

// ---------------------------------------------------------------- the pipeline

/// A piece of the text on its way to the model. `at_start`: it begins the input (Metaspace's
/// prepend_scheme "first").
struct Piece {
  std::string text;
  bool at_start;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /// Splits each piece further (and may rewrite it); empty pieces are dropped by the caller.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

/// A post-processor for one sequence: the ids with special tokens around them.
class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual std::vector<int32_t> process(std::vector<int32_t> ids) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  /// The tokenizers library's decode_chain: tokens in, tokens out (joined by the caller).
  virtual void decode(std::vector<std::string>& tokens) const = 0;
};

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };
/// Spans from find_matches grouped by `behavior` into the byte ranges to keep.
std::vector<std::pair<size_t, size_t>> split_ranges(const std::vector<Span>& spans, SplitBehavior behavior);

/// GPT-2's map of the 256 bytes to printable characters (ByteLevel), as UTF-8 strings, and back.
const std::vector<std::string>& byte_to_unicode();
/// The byte a byte-level character stands for, or -1.
int unicode_to_byte(char32_t c);

/// The model of a tokenizer.json: a piece (pre-tokenized, normalized) to ids.
class Model {
 public:
  virtual ~Model() = default;
  virtual void tokenize(std::string_view piece, std::vector<int32_t>& ids) const = 0;
  virtual const std::unordered_map<std::string, int32_t>& vocab() const = 0;
};

struct BpeOptions {
  std::string source;  // the file, for errors
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix, end_of_word_suffix;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
};

/// BPE over `vocab` with `merges` ranked by their order. Throws std::invalid_argument naming a
/// merge whose parts or result are not in the vocabulary.
std::unique_ptr<Model> bpe_model(std::unordered_map<std::string, int32_t> vocab,
                                 const std::vector<std::pair<std::string, std::string>>& merges,
                                 BpeOptions options);

/// WordLevel: a piece is one token, or `unk_token` (FormatError naming `source` when the vocabulary
/// lacks it and a piece needs it).
std::unique_ptr<Model> word_level_model(std::unordered_map<std::string, int32_t> vocab, std::string unk_token,
                                        std::string source);

struct WordPieceOptions {
  std::string source;  // the file, for errors
  std::string unk_token = "[UNK]", continuing_subword_prefix = "##";
  int64_t max_input_chars_per_word = 100;
};
/// WordPiece (BERT): the longest vocabulary entry from the left, then "##"-prefixed ones; a word
/// that cannot be covered, or is longer than max_input_chars_per_word characters, is unk_token.
std::unique_ptr<Model> word_piece_model(std::unordered_map<std::string, int32_t> vocab,
                                        WordPieceOptions options);

}  // namespace tok
}  // namespace kiln::models
