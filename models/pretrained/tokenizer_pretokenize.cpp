// tokenizer.json's pre-tokenizers, as the tokenizers library's pre_tokenizers/: ByteLevel (GPT-2's
// regex and byte map), Split, Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation,
// BertPreTokenizer, CharDelimiterSplit and Sequence.
#include "tokenizer_json_impl.h"

namespace kiln::models::tok {

void append_ranges(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& ranges,
                   std::vector<Piece>& out) {
  for (const auto& [begin, end] : ranges)
    if (end > begin) out.push_back({piece.text.substr(begin, end - begin), piece.at_start && begin == 0});
}

namespace {

// Each piece cut where `spans_of(text)` says, grouped by `behavior`.
template <class Spans>
void split_pieces(std::vector<Piece>& pieces, SplitBehavior behavior, Spans spans_of) {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (const Piece& p : pieces) append_ranges(p, split_ranges(spans_of(p.text), behavior), out);
  pieces = std::move(out);
}

// The tokenizers library's GPT-2 pattern (pre_tokenizers/byte_level.rs).
const Regex& gpt2_pattern() {
  static const Regex re(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)");
  return re;
}

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_)
      for (Piece& p : pieces)
        if (!p.text.empty() && p.text[0] != ' ') p.text = " " + p.text;
    if (use_regex_)
      split_pieces(pieces, SplitBehavior::isolated,
                   [](const std::string& t) { return gpt2_pattern().find_matches(t); });
    const auto& table = byte_to_unicode();
    for (Piece& p : pieces) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (unsigned char b : p.text) mapped.append(table[b]);
      p.text = std::move(mapped);
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
};

class Split : public PreTokenizer {
 public:
  Split(Regex pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, behavior_, [this](const std::string& t) {
      std::vector<Span> spans = pattern_.find_matches(t);
      if (invert_)
        for (Span& s : spans) s.match = !s.match;
      return spans;
    });
  }

 private:
  Regex pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

// Cuts at single characters `is_match` picks, grouped by `behavior`.
template <class Predicate>
class CharSplit : public PreTokenizer {
 public:
  CharSplit(Predicate is_match, SplitBehavior behavior) : is_match_(is_match), behavior_(behavior) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, behavior_, [this](const std::string& t) { return char_matches(t, is_match_); });
  }

 private:
  Predicate is_match_;
  SplitBehavior behavior_;
};

template <class Predicate>
std::unique_ptr<PreTokenizer> char_split(Predicate is_match, SplitBehavior behavior) {
  return std::make_unique<CharSplit<Predicate>>(is_match, behavior);
}

class Metaspace : public PreTokenizer {
 public:
  explicit Metaspace(MetaspaceOptions options) : options_(options) {
    utf8_append(replacement_, options.replacement);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (Piece& p : pieces) {
      std::string replaced;
      for (char c : p.text) {
        if (c == ' ')
          replaced.append(replacement_);
        else
          replaced.push_back(c);
      }
      const bool prepend = options_.prepend == MetaspaceOptions::Prepend::always ||
                           (options_.prepend == MetaspaceOptions::Prepend::first && p.at_start);
      if (prepend && !replaced.empty() && replaced.compare(0, replacement_.size(), replacement_) != 0)
        replaced = replacement_ + replaced;
      p.text = std::move(replaced);
    }
    if (options_.split) {
      const char32_t r = options_.replacement;
      split_pieces(pieces, SplitBehavior::merged_with_next,
                   [r](const std::string& t) { return char_matches(t, [r](char32_t c) { return c == r; }); });
    }
  }

 private:
  MetaspaceOptions options_;
  std::string replacement_;
};

// Rust's regex \w+|[^\w\s]+ (the Whitespace pre-tokenizer), words and runs of other non-spaces.
class Whitespace : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    static const Regex re(
        R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]+|[^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}\s]+)");
    split_pieces(pieces, SplitBehavior::removed, [](const std::string& t) {
      std::vector<Span> spans = re.find_matches(t);
      for (Span& s : spans) s.match = !s.match;
      return spans;
    });
  }
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

}  // namespace

MetaspaceOptions parse_metaspace(const Json& json, const JsonContext& context, std::string_view where) {
  MetaspaceOptions m;
  m.replacement = context.character(json, "replacement", where);
  m.split = context.boolean(json, "split", where, true);
  const bool has_scheme = json.contains("prepend_scheme") && !json["prepend_scheme"].is_null();
  const std::string scheme = context.string(json, "prepend_scheme", where, "always");
  if (scheme == "always")
    m.prepend = MetaspaceOptions::Prepend::always;
  else if (scheme == "first")
    m.prepend = MetaspaceOptions::Prepend::first;
  else if (scheme == "never")
    m.prepend = MetaspaceOptions::Prepend::never;
  else
    context.malformed(where, "prepend_scheme '" + scheme + "' is not always, first or never");
  // Files before prepend_scheme say add_prefix_space.
  if (!context.boolean(json, "add_prefix_space", where, true)) {
    if (has_scheme && m.prepend != MetaspaceOptions::Prepend::never)
      context.malformed(where, "add_prefix_space false contradicts prepend_scheme '" + scheme + "'");
    m.prepend = MetaspaceOptions::Prepend::never;
  }
  return m;
}

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const Json& json, const JsonContext& context) {
  if (json.is_null()) return nullptr;
  constexpr std::string_view where = "pre_tokenizer";
  const std::string type = context.type(json, where);
  if (type == "ByteLevel")
    return std::make_unique<ByteLevel>(
        context.boolean(json, "add_prefix_space", "pre_tokenizer ByteLevel", true),
        context.boolean(json, "use_regex", "pre_tokenizer ByteLevel", true));
  if (type == "Split") {
    constexpr std::string_view w = "pre_tokenizer Split";
    return std::make_unique<Split>(context.pattern(json, "pattern", w), context.behavior(json, "behavior", w),
                                   context.boolean(json, "invert", w, false));
  }
  if (type == "Metaspace")
    return std::make_unique<Metaspace>(parse_metaspace(json, context, "pre_tokenizer Metaspace"));
  if (type == "Digits") {
    const bool individual = context.boolean(json, "individual_digits", "pre_tokenizer Digits", false);
    return char_split(is_numeric, individual ? SplitBehavior::isolated : SplitBehavior::contiguous);
  }
  if (type == "Whitespace") return std::make_unique<Whitespace>();
  if (type == "WhitespaceSplit") return char_split(is_white_space, SplitBehavior::removed);
  if (type == "Punctuation") {
    const bool has = json.contains("behavior") && !json["behavior"].is_null();
    return char_split(is_punctuation, has ? context.behavior(json, "behavior", "pre_tokenizer Punctuation")
                                          : SplitBehavior::isolated);
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    parts.push_back(char_split(is_white_space, SplitBehavior::removed));
    parts.push_back(char_split(is_punctuation, SplitBehavior::isolated));
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  if (type == "CharDelimiterSplit") {
    const char32_t d = context.character(json, "delimiter", "pre_tokenizer CharDelimiterSplit");
    return char_split([d](char32_t c) { return c == d; }, SplitBehavior::removed);
  }
  if (type == "Sequence")
    return std::make_unique<SequencePreTokenizer>(
        parse_parts(json, "pretokenizers", "pre_tokenizer Sequence", context, parse_pre_tokenizer));
  context.unsupported(where, type);
}

}  // namespace kiln::models::tok
