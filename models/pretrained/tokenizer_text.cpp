// UTF-8 helpers, the PCRE2 regex wrapper with the tokenizers library's find_matches, the split
// behaviors, and GPT-2's byte-to-unicode map.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <stdexcept>

#include "kiln/core/error.h"
#include "tokenizer_impl.h"

namespace kiln::models::tok {

// ---------------------------------------------------------------- UTF-8

char32_t utf8_decode(std::string_view s, size_t i, size_t* length) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char lead = byte(0);
  *length = utf8_length(lead);
  switch (*length) {
    case 1:
      return lead;
    case 2:
      return (char32_t(lead & 0x1F) << 6) | (byte(1) & 0x3F);
    case 3:
      return (char32_t(lead & 0x0F) << 12) | (char32_t(byte(1) & 0x3F) << 6) | (byte(2) & 0x3F);
    default:
      return (char32_t(lead & 0x07) << 18) | (char32_t(byte(1) & 0x3F) << 12) |
             (char32_t(byte(2) & 0x3F) << 6) | (byte(3) & 0x3F);
  }
}

void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

namespace {

// How many bytes of s[i..] form the longest prefix of a well-formed UTF-8 sequence (Unicode's
// table 3-7), and whether that prefix is a whole character.
size_t utf8_prefix(std::string_view s, size_t i, bool* complete) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char lead = at(0);
  *complete = false;
  if (lead < 0x80) {
    *complete = true;
    return 1;
  }
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return 1;  // not a lead byte: one byte is replaced
  }
  size_t n = 1;
  for (; n < need && i + n < s.size(); ++n) {
    const unsigned char b = at(n);
    const bool ok = n == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
  }
  *complete = n == need;
  return n;
}

}  // namespace

bool utf8_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    bool complete;
    const size_t n = utf8_prefix(s, i, &complete);
    if (!complete) return false;
    i += n;
  }
  return true;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    bool complete;
    const size_t n = utf8_prefix(bytes, i, &complete);
    if (complete)
      out.append(bytes.substr(i, n));
    else
      out.append("\xEF\xBF\xBD");  // U+FFFD
    i += n;
  }
  return out;
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_numeric(char32_t c) {
  const auto k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool is_punctuation(char32_t c) {
  if (c < 0x80)
    return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') ||
           (c >= '{' && c <= '~');
  const auto k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

bool is_mark(char32_t c) {
  const auto k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

// ---------------------------------------------------------------- regex

namespace {

// Oniguruma's \s is Unicode's White_Space and its \w letters, marks, decimal digits and connector
// punctuation; PCRE2's (UCP) differ (\s also takes U+180E, \w all numbers but no marks).
constexpr std::string_view kSpaceClass =
    "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{"
    "3000}";
constexpr std::string_view kWordClass = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";

std::string oniguruma_classes(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 'Q') {  // \Q...\E is copied as it is
        const size_t end = pattern.find("\\E", i);
        const size_t stop = end == std::string::npos ? pattern.size() : end + 2;
        out.append(pattern, i - 1, stop - (i - 1));
        i = stop - 1;
        continue;
      }
      const std::string_view cls = e == 's' || e == 'S'   ? kSpaceClass
                                   : e == 'w' || e == 'W' ? kWordClass
                                                          : "";
      if (cls.empty() || (in_class && (e == 'S' || e == 'W'))) {
        out.push_back('\\');
        out.push_back(e);
      } else if (in_class) {
        out.append(cls);
      } else {
        out.append(e == 's' || e == 'w' ? "[" : "[^").append(cls).append("]");
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {  // [:alpha:]
      const size_t end = pattern.find(":]", i + 2);
      if (end != std::string::npos) {
        out.append(pattern, i, end + 2 - i);
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern) {
  const std::string translated = oniguruma_classes(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto code = std::make_shared<Code>();
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (!code->code) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error, message.data(), message.size());
    throw std::invalid_argument("pattern '" + pattern +
                                "': " + reinterpret_cast<const char*>(message.data()) + " at offset " +
                                std::to_string(offset));
  }
  pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE);  // without JIT support it is interpreted
  code_ = std::move(code);
}

Regex Regex::literal(std::string_view text) {
  std::string pattern = "\\Q";
  for (size_t i = 0; i < text.size(); ++i) {
    if (text.substr(i, 2) == "\\E") {  // \E cannot sit inside \Q...\E
      pattern.append("\\E\\\\E\\Q");
      ++i;
    } else {
      pattern.push_back(text[i]);
    }
  }
  return Regex(pattern.append("\\E"));
}

std::vector<Span> Regex::find_matches(std::string_view text) const {
  if (text.empty()) return {{0, 0, false}};
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(code_->code, nullptr), &pcre2_match_data_free);
  if (!data) throw std::bad_alloc();
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::vector<Span> spans;
  size_t previous = 0, from = 0;
  while (from <= text.size()) {
    int rc = pcre2_match(code_->code, subject, text.size(), from, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the JIT's stack is small: interpret instead
      rc = pcre2_match(code_->code, subject, text.size(), from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data.get(),
                       nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(rc, message.data(), message.size());
      throw RuntimeError::of(kTokenizerOp, "a regex match failed", "{} (a text of {} bytes)",
                             reinterpret_cast<const char*>(message.data()), text.size());
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const size_t begin = ovector[0], end = ovector[1];
    if (previous != begin) spans.push_back({previous, begin, false});
    spans.push_back({begin, end, true});
    previous = end;
    // After an empty match the search goes on one character later (Oniguruma's iterator).
    from = end > begin         ? end
           : end < text.size() ? end + utf8_length(static_cast<unsigned char>(text[end]))
                               : end + 1;
  }
  if (previous != text.size()) spans.push_back({previous, text.size(), false});
  return spans;
}

std::string replace_matches(const Regex& pattern, std::string_view text, std::string_view content) {
  std::string out;
  for (const Span& s : pattern.find_matches(text))
    out.append(s.match ? content : text.substr(s.begin, s.end - s.begin));
  return out;
}

// ---------------------------------------------------------------- split behaviors

std::vector<std::pair<size_t, size_t>> split_ranges(const std::vector<Span>& spans, SplitBehavior behavior) {
  std::vector<std::pair<size_t, size_t>> out;
  switch (behavior) {
    case SplitBehavior::removed:
      for (const Span& s : spans)
        if (!s.match) out.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::isolated:
      for (const Span& s : spans) out.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::contiguous:
    case SplitBehavior::merged_with_previous:
    case SplitBehavior::merged_with_next: {
      // A span joins the previous range (the next one for merged_with_next, walked backwards):
      // contiguous when it is of the same kind, else a match right after a non-match.
      const bool backwards = behavior == SplitBehavior::merged_with_next;
      bool previous_match = false;
      for (size_t k = 0; k < spans.size(); ++k) {
        const Span& s = spans[backwards ? spans.size() - 1 - k : k];
        const bool join =
            behavior == SplitBehavior::contiguous ? s.match == previous_match : s.match && !previous_match;
        if (join && !out.empty())
          (backwards ? out.back().first : out.back().second) = backwards ? s.begin : s.end;
        else
          out.emplace_back(s.begin, s.end);
        previous_match = s.match;
      }
      if (backwards) std::reverse(out.begin(), out.end());
      break;
    }
  }
  return out;
}

// ---------------------------------------------------------------- GPT-2's byte map

const std::vector<std::string>& byte_to_unicode() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      utf8_append(t[b], printable ? static_cast<char32_t>(b) : next++);
    }
    return t;
  }();
  return table;
}

int unicode_to_byte(char32_t c) {
  static const std::array<int16_t, 324> table = [] {
    std::array<int16_t, 324> t;
    t.fill(-1);
    const auto& forward = byte_to_unicode();
    for (int b = 0; b < 256; ++b) {
      size_t n;
      t[utf8_decode(forward[b], 0, &n)] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return c < table.size() ? table[c] : -1;
}

}  // namespace kiln::models::tok
