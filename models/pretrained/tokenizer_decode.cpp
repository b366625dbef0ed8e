// tokenizer.json's decoders (the tokenizers library's decoders/: ByteLevel, Metaspace, Replace,
// ByteFallback, Fuse, Strip, WordPiece, BPEDecoder, Sequence) and post-processors for one sequence
// (TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence).
#include "tokenizer_json_impl.h"

namespace kiln::models::tok {
namespace {

// ---------------------------------------------------------------- decoders

class ByteLevelDecoder : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t mark = bytes.size();
      bool mapped = true;
      for (size_t i = 0; i < t.size() && mapped;) {
        size_t n;
        const int b = unicode_to_byte(utf8_decode(t, i, &n));
        mapped = b >= 0;
        if (mapped) bytes.push_back(static_cast<char>(b));
        i += n;
      }
      if (!mapped) {  // a token with other characters stands for its own bytes
        bytes.resize(mark);
        bytes.append(t);
      }
    }
    tokens = {utf8_lossy(bytes)};
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  explicit MetaspaceDecoder(MetaspaceOptions options) : options_(options) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      const bool drop = k == 0 && options_.prepend != MetaspaceOptions::Prepend::never;
      std::string out;
      for_each_char(tokens[k], [&](char32_t c, std::string_view bytes) {
        if (c != options_.replacement)
          out.append(bytes);
        else if (!drop)
          out.push_back(' ');
      });
      tokens[k] = std::move(out);
    }
  }

 private:
  MetaspaceOptions options_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = replace_matches(pattern_, t, content_);
  }

 private:
  Regex pattern_;
  std::string content_;
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Runs of <0xNN> tokens become their bytes as text, or one U+FFFD per byte when not UTF-8.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t count = 0;
    const auto flush = [&] {
      if (count == 0) return;
      if (utf8_valid(bytes))
        out.push_back(bytes);
      else
        for (size_t i = 0; i < count; ++i) out.emplace_back("\xEF\xBF\xBD");
      bytes.clear();
      count = 0;
    };
    for (std::string& t : tokens) {
      const int hi = t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' ? hex_digit(t[3]) : -1;
      const int lo = hi >= 0 ? hex_digit(t[4]) : -1;
      if (lo >= 0) {
        bytes.push_back(static_cast<char>(hi * 16 + lo));
        ++count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all.append(t);
    tokens = {std::move(all)};
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, int64_t start, int64_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<std::pair<size_t, char32_t>> chars;  // byte offset, character
      for_each_char(t, [&](char32_t c, std::string_view bytes) {
        chars.emplace_back(static_cast<size_t>(bytes.data() - t.data()), c);
      });
      size_t begin = 0, end = chars.size();
      while (begin < end && static_cast<int64_t>(begin) < start_ && chars[begin].second == content_) ++begin;
      while (end > begin && static_cast<int64_t>(chars.size() - end) < stop_ &&
             chars[end - 1].second == content_)
        --end;
      const size_t from = begin < chars.size() ? chars[begin].first : t.size();
      const size_t to = end < chars.size() ? chars[end].first : t.size();
      t = t.substr(from, to - from);
    }
  }

 private:
  char32_t content_;
  int64_t start_, stop_;
};

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t i = 0;
  for (size_t hit; (hit = s.find(from, i)) != std::string::npos; i = hit + from.size())
    out.append(s, i, hit - i).append(to);
  s = out.append(s, i, std::string::npos);
}

}  // namespace

void clean_up_tokenization(std::string& text, bool do_not) {
  static constexpr std::pair<std::string_view, std::string_view> kCleanup[] = {
      {" .", "."},   {" ?", "?"},           {" !", "!"},   {" ,", ","},     {" ' ", "'"},   {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kCleanup)
    if (do_not || from != " do not") replace_all(text, from, to);
}

namespace {

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0)
          t.erase(0, prefix_.size());
        else
          t = " " + t;
      }
      if (cleanup_) clean_up_tokenization(t, /*do_not=*/true);
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class BpeDecoder : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i)
      replace_all(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
  }

 private:
  std::string suffix_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

// ---------------------------------------------------------------- post-processors

// A template for one sequence: special tokens' ids around the sequence ($A).
class Template : public PostProcessor {
 public:
  struct Item {
    bool sequence;
    std::vector<int32_t> ids;  // of a special token
  };
  explicit Template(std::vector<Item> items) : items_(std::move(items)) {}
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    std::vector<int32_t> out;
    for (const Item& item : items_) {
      const auto& part = item.sequence ? ids : item.ids;
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  }

 private:
  std::vector<Item> items_;
};

class Identity : public PostProcessor {
 public:
  std::vector<int32_t> process(std::vector<int32_t> ids) const override { return ids; }
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    for (const auto& p : parts_) ids = p->process(std::move(ids));
    return ids;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

std::unique_ptr<PostProcessor> parse_template(const Json& json, const JsonContext& context) {
  constexpr std::string_view where = "post_processor TemplateProcessing";
  const Json& specials = context.field(json, "special_tokens", where);
  if (!specials.is_object()) context.malformed(where, "special_tokens is not an object");
  std::vector<Template::Item> items;
  for (const Json& piece : context.array(json, "single", where)) {
    if (!piece.is_object() || piece.size() != 1 ||
        !(piece.contains("Sequence") || piece.contains("SpecialToken")))
      context.malformed(where, "a piece of single is " + piece.dump());
    const bool sequence = piece.contains("Sequence");
    const std::string name = context.string(piece.begin().value(), "id", where);
    if (sequence) {
      if (name != "A") context.malformed(where, "the single template names sequence " + name + ", not A");
      items.push_back({true, {}});
      continue;
    }
    if (!specials.contains(name))
      context.malformed(where, "special token '" + name + "' is not in special_tokens");
    Template::Item item{false, {}};
    for (const Json& id : context.array(specials[name], "ids", where))
      item.ids.push_back(context.id(id, where, "an id of '" + name + "'"));
    items.push_back(std::move(item));
  }
  return std::make_unique<Template>(std::move(items));
}

// RobertaProcessing and BertProcessing for one sequence: cls $A sep.
std::unique_ptr<PostProcessor> parse_cls_sep(const Json& json, const JsonContext& context,
                                             const std::string& type) {
  const std::string where = "post_processor " + type;
  std::vector<Template::Item> items;
  for (const char* key : {"cls", "sep"}) {
    const Json& pair = context.field(json, key, where);
    if (!pair.is_array() || pair.size() != 2)
      context.malformed(where, std::string(key) + " is not [token, id]: " + pair.dump());
    items.push_back({false, {context.id(pair[1], where, "the id of " + std::string(key))}});
    if (items.size() == 1) items.push_back({true, {}});
  }
  return std::make_unique<Template>(std::move(items));
}

}  // namespace

std::unique_ptr<Decoder> parse_decoder(const Json& json, const JsonContext& context) {
  if (json.is_null()) return nullptr;
  constexpr std::string_view where = "decoder";
  const std::string type = context.type(json, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace")
    return std::make_unique<MetaspaceDecoder>(parse_metaspace(json, context, "decoder Metaspace"));
  if (type == "Replace")
    return std::make_unique<ReplaceDecoder>(context.pattern(json, "pattern", "decoder Replace"),
                                            context.string(json, "content", "decoder Replace"));
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip")
    return std::make_unique<StripDecoder>(context.character(json, "content", "decoder Strip"),
                                          context.integer(json, "start", "decoder Strip"),
                                          context.integer(json, "stop", "decoder Strip"));
  if (type == "WordPiece")
    return std::make_unique<WordPieceDecoder>(context.string(json, "prefix", "decoder WordPiece", "##"),
                                              context.boolean(json, "cleanup", "decoder WordPiece", true));
  if (type == "BPEDecoder")
    return std::make_unique<BpeDecoder>(context.string(json, "suffix", "decoder BPEDecoder", "</w>"));
  if (type == "Sequence")
    return std::make_unique<SequenceDecoder>(
        parse_parts(json, "decoders", "decoder Sequence", context, parse_decoder));
  context.unsupported(where, type);
}

std::unique_ptr<PostProcessor> parse_post_processor(const Json& json, const JsonContext& context) {
  if (json.is_null()) return nullptr;
  const std::string type = context.type(json, "post_processor");
  if (type == "TemplateProcessing") return parse_template(json, context);
  if (type == "ByteLevel") return std::make_unique<Identity>();
  if (type == "RobertaProcessing" || type == "BertProcessing") return parse_cls_sep(json, context, type);
  if (type == "Sequence")
    return std::make_unique<SequenceProcessor>(
        parse_parts(json, "processors", "post_processor Sequence", context, parse_post_processor));
  context.unsupported("post_processor", type);
}

}  // namespace kiln::models::tok
