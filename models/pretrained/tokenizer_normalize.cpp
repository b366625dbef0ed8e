// tokenizer.json's normalizers, as the tokenizers library's normalizers/: Unicode normal forms
// (utf8proc), Lowercase, Replace, Prepend, Strip, StripAccents, ByteLevel, BertNormalizer and
// Sequence.
#include <utf8proc.h>

#include <cstdlib>

#include "kiln/core/error.h"
#include "tokenizer_json_impl.h"

namespace kiln::models::tok {
namespace {

class UnicodeForm : public Normalizer {
 public:
  explicit UnicodeForm(int options) : options_(options) {}
  void normalize(std::string& text) const override {
    if (text.empty()) return;
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                            static_cast<utf8proc_ssize_t>(text.size()), &out,
                                            static_cast<utf8proc_option_t>(options_));
    if (n < 0) throw RuntimeError::of(kTokenizerOp, "Unicode normalization failed", "{}", utf8proc_errmsg(n));
    text.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
  }

 private:
  int options_;
};

// Per character, with Unicode's full mapping (Rust's char::to_lowercase): U+0130 is the only
// character whose full lowercase differs from the simple one utf8proc gives.
class Lowercase : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    for_each_char(text, [&](char32_t c, std::string_view) {
      if (c == 0x130)
        out.append("i\xCC\x87");
      else
        utf8_append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    });
    text = std::move(out);
  }
};

class Replace : public Normalizer {
 public:
  Replace(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override { text = replace_matches(pattern_, text, content_); }

 private:
  Regex pattern_;
  std::string content_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    while (left_ && begin < end) {
      size_t n;
      if (!is_white_space(utf8_decode(text, begin, &n))) break;
      begin += n;
    }
    while (right_ && end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      size_t n;
      if (!is_white_space(utf8_decode(text, start, &n))) break;
      end = start;
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class StripAccents : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    for_each_char(text, [&](char32_t c, std::string_view bytes) {
      if (!is_mark(c)) out.append(bytes);
    });
    text = std::move(out);
  }
};

// Each byte as its GPT-2 character (the ByteLevel pre-tokenizer's mapping, without its split).
class ByteLevelNormalizer : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size() * 2);
    for (unsigned char b : text) out.append(byte_to_unicode()[b]);
    text = std::move(out);
  }
};

bool is_chinese(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// BERT's: control characters dropped and white space made ' ', spaces around CJK ideographs,
// accents stripped (NFD without nonspacing marks), lowercase.
class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese, bool strip_accents, bool lowercase)
      : clean_text_(clean_text), chinese_(chinese), strip_accents_(strip_accents), lowercase_(lowercase) {}
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    for_each_char(text, [&](char32_t c, std::string_view bytes) {
      if (clean_text_) {
        const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));  // C*: Cc Cf Cs Co Cn
        const bool control = c != '\t' && c != '\n' && c != '\r' &&
                             (category >= UTF8PROC_CATEGORY_CC || category == UTF8PROC_CATEGORY_CN);
        if (c == 0 || c == 0xFFFD || control) return;
        if (is_white_space(c)) {
          out.push_back(' ');
          return;
        }
      }
      const bool spaced = chinese_ && is_chinese(c);
      if (spaced) out.push_back(' ');
      out.append(bytes);
      if (spaced) out.push_back(' ');
    });
    if (strip_accents_) {
      decompose_.normalize(out);
      std::string kept;
      for_each_char(out, [&](char32_t c, std::string_view bytes) {
        if (utf8proc_category(static_cast<utf8proc_int32_t>(c)) != UTF8PROC_CATEGORY_MN) kept.append(bytes);
      });
      out = std::move(kept);
    }
    if (lowercase_) Lowercase().normalize(out);
    text = std::move(out);
  }

 private:
  bool clean_text_, chinese_, strip_accents_, lowercase_;
  UnicodeForm decompose_{UTF8PROC_STABLE | UTF8PROC_DECOMPOSE};
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& p : parts_) p->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

std::unique_ptr<Normalizer> parse_normalizer(const Json& json, const JsonContext& context) {
  if (json.is_null()) return nullptr;
  constexpr std::string_view where = "normalizer";
  const std::string type = context.type(json, where);
  if (type == "NFC") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (type == "NFD") return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  if (type == "NFKC")
    return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  if (type == "NFKD")
    return std::make_unique<UnicodeForm>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Replace")
    return std::make_unique<Replace>(context.pattern(json, "pattern", "normalizer Replace"),
                                     context.string(json, "content", "normalizer Replace"));
  if (type == "Prepend")
    return std::make_unique<Prepend>(context.string(json, "prepend", "normalizer Prepend"));
  if (type == "Strip")
    return std::make_unique<Strip>(context.boolean(json, "strip_left", "normalizer Strip", true),
                                   context.boolean(json, "strip_right", "normalizer Strip", true));
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "BertNormalizer") {
    constexpr std::string_view w = "normalizer BertNormalizer";
    const bool lowercase = context.boolean(json, "lowercase", w, true);
    return std::make_unique<BertNormalizer>(context.boolean(json, "clean_text", w, true),
                                            context.boolean(json, "handle_chinese_chars", w, true),
                                            context.boolean(json, "strip_accents", w, lowercase), lowercase);
  }
  if (type == "Sequence")
    return std::make_unique<SequenceNormalizer>(
        parse_parts(json, "normalizers", "normalizer Sequence", context, parse_normalizer));
  context.unsupported(where, type);
}

}  // namespace kiln::models::tok
