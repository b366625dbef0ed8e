#pragma once
// Reading tokenizer.json's components (not installed): typed field access whose errors name the
// file and the component, and one parse function per component family, each beside the code of
// that family (tokenizer_normalize.cpp, tokenizer_pretokenize.cpp, tokenizer_decode.cpp).
#include <nlohmann/json.hpp>

#include "tokenizer_impl.h"

namespace kiln::models::tok {

using Json = nlohmann::json;

/// The file being read: every error names it.
class JsonContext {
 public:
  explicit JsonContext(std::string source) : source_(std::move(source)) {}
  const std::string& source() const { return source_; }

  /// Held while a Sequence's components are parsed: nesting deeper than 32 levels is malformed
  /// (the parse recurses).
  class Nested {
   public:
    Nested(const JsonContext& context, std::string_view where) : context_(context) {
      if (++context_.depth_ > 32) context_.malformed(where, "Sequences nested deeper than 32 levels");
    }
    ~Nested() { --context_.depth_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;

   private:
    const JsonContext& context_;
  };

  /// FormatError: "<file>: <where>: <details>".
  [[noreturn]] void malformed(std::string_view where, std::string_view details) const;
  /// NotImplemented for a component type kiln lacks, naming the file, the component and the type.
  [[noreturn]] void unsupported(std::string_view component, std::string_view type) const;

  /// `json["type"]` of a component object (`where` is e.g. "pre_tokenizer").
  std::string type(const Json& json, std::string_view where) const;
  /// The field `key` of the object; without a fallback it must be there (and not null).
  const Json& field(const Json& json, const char* key, std::string_view where) const;
  std::string string(const Json& json, const char* key, std::string_view where) const;
  std::string string(const Json& json, const char* key, std::string_view where,
                     std::string_view fallback) const;
  bool boolean(const Json& json, const char* key, std::string_view where, bool fallback) const;
  int64_t integer(const Json& json, const char* key, std::string_view where) const;
  int64_t integer(const Json& json, const char* key, std::string_view where, int64_t fallback) const;
  /// An array field (`where` names it in errors).
  const Json& array(const Json& json, const char* key, std::string_view where) const;
  /// A token id (an integer in [0, 2^31)); `what` names it in errors ("the id of 'a'").
  int32_t id(const Json& value, std::string_view where, std::string_view what) const;
  /// A one-character string field (Metaspace's replacement, Strip's content).
  char32_t character(const Json& json, const char* key, std::string_view where) const;
  /// A Split or Replace pattern: {"String": text} or {"Regex": pattern}.
  Regex pattern(const Json& json, const char* key, std::string_view where) const;
  SplitBehavior behavior(const Json& json, const char* key, std::string_view where) const;

 private:
  std::string source_;
  mutable int depth_ = 0;  // of Nested; one context parses one file on one thread
};

/// Each returns null for a JSON null.
std::unique_ptr<Normalizer> parse_normalizer(const Json& json, const JsonContext& context);
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const Json& json, const JsonContext& context);
std::unique_ptr<Decoder> parse_decoder(const Json& json, const JsonContext& context);
std::unique_ptr<PostProcessor> parse_post_processor(const Json& json, const JsonContext& context);

/// A Sequence's components: each element of json[key] parsed by `parse`, nulls left out.
template <class T>
std::vector<std::unique_ptr<T>> parse_parts(const Json& json, const char* key, std::string_view where,
                                            const JsonContext& context,
                                            std::unique_ptr<T> (*parse)(const Json&, const JsonContext&)) {
  const JsonContext::Nested nested(context, where);
  std::vector<std::unique_ptr<T>> parts;
  for (const Json& part : context.array(json, key, where))
    if (auto p = parse(part, context)) parts.push_back(std::move(p));
  return parts;
}

/// Metaspace's fields, shared by the pre-tokenizer and the decoder.
struct MetaspaceOptions {
  enum class Prepend { always, first, never };
  char32_t replacement = U'\u2581';
  Prepend prepend = Prepend::always;
  bool split = true;
};
MetaspaceOptions parse_metaspace(const Json& json, const JsonContext& context, std::string_view where);

/// Appends to `out` the pieces of `piece` that `ranges` (byte ranges of piece.text) keep; only the
/// one at byte 0 keeps at_start. Empty pieces are dropped.
void append_ranges(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& ranges,
                   std::vector<Piece>& out);
/// The spans of `text` where each character `is_match` holds is a match of its own (the tokenizers
/// library's find_matches for a character predicate).
template <class Predicate>
std::vector<Span> char_matches(std::string_view text, Predicate is_match) {
  if (text.empty()) return {{0, 0, false}};
  std::vector<Span> spans;
  size_t last = 0;
  for (size_t i = 0; i < text.size();) {
    size_t n;
    const char32_t c = utf8_decode(text, i, &n);
    if (is_match(c)) {
      if (last < i) spans.push_back({last, i, false});
      spans.push_back({i, i + n, true});
      last = i + n;
    }
    i += n;
  }
  if (last < text.size()) spans.push_back({last, text.size(), false});
  return spans;
}

}  // namespace kiln::models::tok
