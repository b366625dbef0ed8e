// A tokenizer.json as the tokenizers library runs it: added tokens are cut out of the text first
// (those with normalized=false from the raw text, the others after normalization), each remaining
// piece is normalized, pre-tokenized and given to the model, and the post-processor adds the
// special tokens. Decoding maps ids to tokens and runs the decoder.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <unordered_set>

#include "kiln/core/error.h"
#include "tokenizer_json_impl.h"

namespace kiln::models::tok {

// ---------------------------------------------------------------- field access

void JsonContext::malformed(std::string_view where, std::string_view details) const {
  throw FormatError::of(kTokenizerOp, "malformed tokenizer.json", "{}: {}: {}", source_, where, details);
}

void JsonContext::unsupported(std::string_view component, std::string_view type) const {
  throw NotImplemented::of(kTokenizerOp, "unsupported tokenizer component",
                           "{}: {} type '{}' is not implemented", source_, component, type);
}

std::string JsonContext::type(const Json& json, std::string_view where) const {
  if (!json.is_object()) malformed(where, fmt::format("a JSON {}, not an object", json.type_name()));
  return string(json, "type", where);
}

const Json& JsonContext::field(const Json& json, const char* key, std::string_view where) const {
  if (!json.is_object()) malformed(where, fmt::format("a JSON {}, not an object", json.type_name()));
  const auto it = json.find(key);
  if (it == json.end() || it->is_null()) malformed(where, fmt::format("no '{}'", key));
  return *it;
}

std::string JsonContext::string(const Json& json, const char* key, std::string_view where) const {
  const Json& v = field(json, key, where);
  if (!v.is_string()) malformed(where, fmt::format("'{}' is {}, not a string", key, v.dump()));
  return v.get<std::string>();
}

std::string JsonContext::string(const Json& json, const char* key, std::string_view where,
                                std::string_view fallback) const {
  return json.is_object() && json.contains(key) && !json[key].is_null() ? string(json, key, where)
                                                                        : std::string(fallback);
}

bool JsonContext::boolean(const Json& json, const char* key, std::string_view where, bool fallback) const {
  if (!json.is_object() || !json.contains(key) || json[key].is_null()) return fallback;
  const Json& v = json[key];
  if (!v.is_boolean()) malformed(where, fmt::format("'{}' is {}, not a boolean", key, v.dump()));
  return v.get<bool>();
}

int64_t JsonContext::integer(const Json& json, const char* key, std::string_view where) const {
  const Json& v = field(json, key, where);
  if (!v.is_number_integer()) malformed(where, fmt::format("'{}' is {}, not an integer", key, v.dump()));
  return v.get<int64_t>();
}

int64_t JsonContext::integer(const Json& json, const char* key, std::string_view where,
                             int64_t fallback) const {
  return json.is_object() && json.contains(key) && !json[key].is_null() ? integer(json, key, where)
                                                                        : fallback;
}

const Json& JsonContext::array(const Json& json, const char* key, std::string_view where) const {
  const Json& v = field(json, key, where);
  if (!v.is_array()) malformed(where, fmt::format("'{}' is a JSON {}, not an array", key, v.type_name()));
  return v;
}

int32_t JsonContext::id(const Json& value, std::string_view where, std::string_view what) const {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > INT32_MAX)
    malformed(where, fmt::format("{} is {}, not an id", what, value.dump()));
  return value.get<int32_t>();
}

char32_t JsonContext::character(const Json& json, const char* key, std::string_view where) const {
  const std::string s = string(json, key, where);
  size_t n = 0;
  if (s.empty() || !utf8_valid(s) || (utf8_decode(s, 0, &n), n != s.size()))
    malformed(where, fmt::format("'{}' is \"{}\", not one character", key, s));
  return utf8_decode(s, 0, &n);
}

Regex JsonContext::pattern(const Json& json, const char* key, std::string_view where) const {
  const Json& p = field(json, key, where);
  const bool literal = p.is_object() && p.contains("String") && p["String"].is_string();
  if (!literal && !(p.is_object() && p.contains("Regex") && p["Regex"].is_string()))
    malformed(where, fmt::format("'{}' is {}, not {{\"String\": ...}} or {{\"Regex\": ...}}", key, p.dump()));
  try {
    return literal ? Regex::literal(p["String"].get<std::string>()) : Regex(p["Regex"].get<std::string>());
  } catch (const std::invalid_argument& e) {
    malformed(where, e.what());
  }
}

SplitBehavior JsonContext::behavior(const Json& json, const char* key, std::string_view where) const {
  static constexpr std::pair<std::string_view, SplitBehavior> kNames[] = {
      {"Removed", SplitBehavior::removed},
      {"Isolated", SplitBehavior::isolated},
      {"MergedWithPrevious", SplitBehavior::merged_with_previous},
      {"MergedWithNext", SplitBehavior::merged_with_next},
      {"Contiguous", SplitBehavior::contiguous}};
  const std::string name = string(json, key, where);
  for (const auto& [n, b] : kNames)
    if (name == n) return b;
  malformed(where,
            fmt::format("'{}' is '{}', not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                        "Contiguous",
                        key, name));
}

namespace {

// ---------------------------------------------------------------- models

std::unordered_map<std::string, int32_t> parse_vocab(const Json& model, const JsonContext& context,
                                                     std::string_view where) {
  const Json& vocab = context.field(model, "vocab", where);
  if (!vocab.is_object())
    context.malformed(where, fmt::format("vocab is a JSON {}, not an object", vocab.type_name()));
  std::unordered_map<std::string, int32_t> out;
  out.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items())
    out.emplace(token, context.id(id, where, fmt::format("the id of '{}'", token)));
  return out;
}

std::unique_ptr<Model> parse_bpe(const Json& model, const JsonContext& context) {
  constexpr std::string_view where = "model BPE";
  const Json& dropout = model.contains("dropout") ? model["dropout"] : Json();
  if (!dropout.is_null() && !(dropout.is_number() && dropout.get<double>() == 0.0))
    context.unsupported(where, fmt::format("with dropout {}", dropout.dump()));
  std::vector<std::pair<std::string, std::string>> merges;
  const Json& list = context.array(model, "merges", where);
  merges.reserve(list.size());
  for (const Json& m : list) {
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        context.malformed(where,
                          fmt::format("merge {} is \"{}\", not two tokens and a space", merges.size(), s));
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      context.malformed(
          where, fmt::format("merge {} is {}, not \"a b\" or [\"a\", \"b\"]", merges.size(), m.dump()));
    }
  }
  BpeOptions options;
  options.source = context.source();
  if (model.contains("unk_token") && !model["unk_token"].is_null())
    options.unk_token = context.string(model, "unk_token", where);
  options.continuing_subword_prefix = context.string(model, "continuing_subword_prefix", where, "");
  options.end_of_word_suffix = context.string(model, "end_of_word_suffix", where, "");
  options.fuse_unk = context.boolean(model, "fuse_unk", where, false);
  options.byte_fallback = context.boolean(model, "byte_fallback", where, false);
  options.ignore_merges = context.boolean(model, "ignore_merges", where, false);
  try {
    return bpe_model(parse_vocab(model, context, where), merges, std::move(options));
  } catch (const std::invalid_argument& e) {
    context.malformed(where, e.what());
  }
}

std::unique_ptr<Model> parse_model(const Json& json, const JsonContext& context) {
  // Files of old versions name no type; the tokenizers library then tries BPE first.
  const std::string type = json.is_object() && !json.contains("type") && json.contains("merges")
                               ? std::string("BPE")
                               : context.type(json, "model");
  if (type == "BPE") return parse_bpe(json, context);
  if (type == "WordLevel")
    return word_level_model(parse_vocab(json, context, "model WordLevel"),
                            context.string(json, "unk_token", "model WordLevel", "<unk>"), context.source());
  if (type == "WordPiece") {
    constexpr std::string_view where = "model WordPiece";
    WordPieceOptions options;
    options.source = context.source();
    options.unk_token = context.string(json, "unk_token", where, "[UNK]");
    options.continuing_subword_prefix = context.string(json, "continuing_subword_prefix", where, "##");
    options.max_input_chars_per_word = context.integer(json, "max_input_chars_per_word", where, 100);
    return word_piece_model(parse_vocab(json, context, where), std::move(options));
  }
  context.unsupported("model", type);
}

// ---------------------------------------------------------------- added tokens

struct AddedToken {
  std::string content, pattern;  // pattern: the content normalized when `normalized`
  int32_t id;
  bool single_word, lstrip, rstrip, normalized, special;
};

// A text segment: an added token's id, or text for the pipeline (id < 0).
struct Segment {
  size_t begin, end;
  int32_t id;
};

// Whether the character at text[i..] is a word character (Rust's regex \w, which single_word uses).
bool is_word_char(std::string_view text, size_t i) {
  static const Regex word(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])");
  const auto spans = word.find_matches(text.substr(i, utf8_length(static_cast<unsigned char>(text[i]))));
  return spans.size() == 1 && spans[0].match;
}

// The start of the character that ends text[..end] (end > 0).
size_t previous_char(std::string_view text, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
  return i;
}

// Leftmost-longest matching of some added tokens (the tokenizers library's Aho-Corasick trie) with
// their single_word, lstrip and rstrip rules.
class AddedMatcher {
 public:
  AddedMatcher(const std::vector<AddedToken>& tokens, bool normalized) : tokens_(tokens) {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i].normalized == normalized && !tokens[i].pattern.empty())
        by_first_[static_cast<unsigned char>(tokens[i].pattern[0])].push_back(i);
    for (auto& list : by_first_)
      std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) {
        return tokens[a].pattern.size() > tokens[b].pattern.size();
      });
  }
  std::vector<Segment> split(std::string_view text) const {
    std::vector<Segment> out;
    size_t start_offset = 0;
    for (size_t i = 0; i < text.size();) {
      const AddedToken* hit = longest_at(text, i);
      if (!hit) {
        ++i;
        continue;
      }
      size_t start = i, stop = i + hit->pattern.size();
      i = stop;
      if (hit->single_word && ((start > 0 && is_word_char(text, previous_char(text, start))) ||
                               (stop < text.size() && is_word_char(text, stop))))
        continue;
      for (size_t n; hit->lstrip && start > start_offset;) {
        const size_t back = previous_char(text, start);
        if (!is_white_space(utf8_decode(text, back, &n))) break;
        start = back;
      }
      if (hit->rstrip)
        for (size_t n; stop < text.size() && is_white_space(utf8_decode(text, stop, &n));) stop += n;
      if (start_offset < start) out.push_back({start_offset, start, -1});
      out.push_back({start, stop, hit->id});
      start_offset = i = stop;
    }
    if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
    return out;
  }

 private:
  const AddedToken* longest_at(std::string_view text, size_t i) const {
    for (size_t k : by_first_[static_cast<unsigned char>(text[i])])
      if (text.compare(i, tokens_[k].pattern.size(), tokens_[k].pattern) == 0) return &tokens_[k];
    return nullptr;
  }

  const std::vector<AddedToken>& tokens_;
  std::array<std::vector<size_t>, 256> by_first_;
};

// ---------------------------------------------------------------- the backend

class JsonBackend : public Tokenizer::Backend {
 public:
  JsonBackend(const Json& json, const JsonContext& context) {
    if (!json.is_object())
      context.malformed("the top level", fmt::format("a JSON {}, not an object", json.type_name()));
    if (json.contains("version") && json["version"] != "1.0")
      context.malformed("version", fmt::format("{}, not \"1.0\"", json["version"].dump()));
    model_ = parse_model(context.field(json, "model", "the top level"), context);
    normalizer_ = parse_normalizer(json.value("normalizer", Json()), context);
    pre_tokenizer_ = parse_pre_tokenizer(json.value("pre_tokenizer", Json()), context);
    post_processor_ = parse_post_processor(json.value("post_processor", Json()), context);
    decoder_ = parse_decoder(json.value("decoder", Json()), context);
    for (const auto& [token, id] : model_->vocab()) vocab_r_.emplace(id, token);
    if (json.contains("added_tokens") && !json["added_tokens"].is_null())
      add_tokens(context.array(json, "added_tokens", "the top level"), context);
    raw_ = std::make_unique<AddedMatcher>(added_, false);
    normalized_ = std::make_unique<AddedMatcher>(added_, true);
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (const Segment& s : raw_->split(text)) {
      if (s.id >= 0) {
        ids.push_back(s.id);
        continue;
      }
      std::string normalized(text.substr(s.begin, s.end - s.begin));
      if (normalizer_) normalizer_->normalize(normalized);
      for (const Segment& n : normalized_->split(normalized)) {
        if (n.id >= 0) {
          ids.push_back(n.id);
          continue;
        }
        std::vector<Piece> pieces{
            {normalized.substr(n.begin, n.end - n.begin), s.begin == 0 && n.begin == 0}};
        if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces);
        for (const Piece& p : pieces) model_->tokenize(p.text, ids);
      }
    }
    return ids;
  }

  std::vector<int32_t> add_special_tokens(std::vector<int32_t> ids) const override {
    return post_processor_ ? post_processor_->process(std::move(ids)) : ids;
  }

  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      std::optional<std::string> token = id_to_token(id);
      if (token && !(skip_special_tokens && special_.count(*token))) tokens.push_back(std::move(*token));
    }
    if (!decoder_) {  // the tokenizers library joins them with spaces
      std::string out;
      for (size_t i = 0; i < tokens.size(); ++i) out.append(i ? " " : "").append(tokens[i]);
      return out;
    }
    decoder_->decode(tokens);
    std::string out;
    for (const std::string& t : tokens) out.append(t);
    return out;
  }

  int64_t vocab_size() const override {
    return static_cast<int64_t>(model_->vocab().size() + added_outside_);
  }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    const std::string key(token);
    if (const auto it = added_ids_.find(key); it != added_ids_.end()) return it->second;
    if (const auto it = model_->vocab().find(key); it != model_->vocab().end()) return it->second;
    return std::nullopt;
  }

  std::optional<std::string> id_to_token(int32_t id) const override {
    if (const auto it = added_by_id_.find(id); it != added_by_id_.end()) return added_[it->second].pattern;
    if (const auto it = vocab_r_.find(id); it != vocab_r_.end()) return it->second;
    return std::nullopt;
  }

  void set_bos_eos(std::optional<bool> add_bos, std::optional<int32_t> bos, std::optional<bool> add_eos,
                   std::optional<int32_t> eos) override {
    if (!add_bos && !add_eos) return;
    // What the file's post-processor puts at each end, found around a marker id.
    constexpr int32_t kMarker = INT32_MIN;
    const std::vector<int32_t> around = add_special_tokens({kMarker});
    const auto marker = std::find(around.begin(), around.end(), kMarker);
    const bool file_bos = bos && marker != around.begin() && around.front() == *bos;
    const bool file_eos =
        eos && marker != around.end() && marker + 1 != around.end() && around.back() == *eos;
    std::vector<int32_t> prefix, suffix;
    if (add_bos.value_or(file_bos) && bos) prefix.push_back(*bos);
    if (add_eos.value_or(file_eos) && eos) suffix.push_back(*eos);
    post_processor_ = std::make_unique<Around>(std::move(prefix), std::move(suffix));
  }

 private:
  class Around : public PostProcessor {
   public:
    Around(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
        : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
    std::vector<int32_t> process(std::vector<int32_t> ids) const override {
      ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
      ids.insert(ids.end(), suffix_.begin(), suffix_.end());
      return ids;
    }

   private:
    std::vector<int32_t> prefix_, suffix_;
  };

  // The tokenizers library's add_tokens: a token the vocabulary has keeps its id; the others get
  // ids from the vocabulary's size on, in file order.
  void add_tokens(const Json& list, const JsonContext& context) {
    constexpr std::string_view where = "added_tokens";
    int32_t next_id = static_cast<int32_t>(model_->vocab().size());
    for (const Json& t : list) {
      AddedToken a;
      a.content = context.string(t, "content", where);
      a.special = context.boolean(t, "special", where, false);
      a.single_word = context.boolean(t, "single_word", where, false);
      a.lstrip = context.boolean(t, "lstrip", where, false);
      a.rstrip = context.boolean(t, "rstrip", where, false);
      a.normalized = context.boolean(t, "normalized", where, !a.special);
      if (!utf8_valid(a.content)) context.malformed(where, "a token is not valid UTF-8");
      if (a.content.empty()) continue;
      a.pattern = a.content;
      if (a.normalized && normalizer_) normalizer_->normalize(a.pattern);
      const std::optional<int32_t> known = token_to_id(a.content);
      a.id = known ? *known : next_id++;
      if (!known) ++added_outside_;
      added_ids_[a.content] = a.id;
      if (a.special) special_.insert(a.content);
      if (const auto it = added_by_id_.find(a.id); it != added_by_id_.end()) {
        added_[it->second] = std::move(a);  // the same token again: its last entry holds
      } else {
        added_by_id_[a.id] = added_.size();
        added_.push_back(std::move(a));
      }
    }
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::unordered_map<int32_t, std::string> vocab_r_;
  std::vector<AddedToken> added_;
  std::unordered_map<int32_t, size_t> added_by_id_;
  std::unordered_map<std::string, int32_t> added_ids_;
  std::unordered_set<std::string> special_;
  size_t added_outside_ = 0;  // added tokens the model's vocabulary lacks
  std::unique_ptr<AddedMatcher> raw_, normalized_;
};

}  // namespace
}  // namespace kiln::models::tok

namespace kiln::models {

std::unique_ptr<Tokenizer::Backend> json_backend(std::string_view text, const std::string& source) {
  tok::Json json = tok::Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  const tok::JsonContext context(source);
  if (json.is_discarded()) context.malformed("the file", "not valid JSON");
  return std::make_unique<tok::JsonBackend>(json, context);
}

}  // namespace kiln::models
