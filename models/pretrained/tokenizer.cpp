#include "kiln/models/pretrained/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "tokenizer_impl.h"

namespace kiln::models {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw RuntimeError::of(kTokenizerOp, "cannot read the tokenizer", "{}: a folder, not a file",
                           path.string());
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RuntimeError::of(kTokenizerOp, "cannot open the tokenizer", "{}", path.string());
  std::string bytes{std::istreambuf_iterator<char>(in), {}};
  if (in.bad()) throw RuntimeError::of(kTokenizerOp, "cannot read the tokenizer", "{}", path.string());
  return bytes;
}

// A JSON file starts with '{' (after white space); a SentencePiece model is a protobuf.
bool looks_like_json(const fs::path& path, std::string_view bytes) {
  if (path.extension() == ".json") return true;
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && bytes[first] == '{';
}

// tokenizer_config.json: the special tokens it names and whether encode() adds BOS and EOS.
struct TokenizerConfig {
  std::optional<std::string> bos, eos, pad;
  std::optional<bool> add_bos, add_eos, clean_up_spaces;
};

TokenizerConfig read_config(const fs::path& path) {
  const std::string text = read_file(path);
  const std::string source = path.string();
  const nlohmann::json json =
      nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) throw FormatError::of(kTokenizerOp, "not valid JSON", "{}", source);
  if (!json.is_object())
    throw FormatError::of(kTokenizerOp, "not a JSON object", "{}: the top level is a {}", source,
                          json.type_name());
  // A token is a string or an AddedToken object {"content": ...}; null is none.
  const auto token = [&](const char* key) -> std::optional<std::string> {
    const auto it = json.find(key);
    if (it == json.end() || it->is_null()) return std::nullopt;
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
      return (*it)["content"].get<std::string>();
    throw FormatError::of(kTokenizerOp, "a config value has the wrong type",
                          "{}: '{}' must be a token (a string or {{\"content\": ...}}), got {}", source, key,
                          it->dump());
  };
  const auto flag = [&](const char* key) -> std::optional<bool> {
    const auto it = json.find(key);
    if (it == json.end() || it->is_null()) return std::nullopt;
    if (!it->is_boolean())
      throw FormatError::of(kTokenizerOp, "a config value has the wrong type",
                            "{}: '{}' must be a boolean, got {}", source, key, it->dump());
    return it->get<bool>();
  };
  return {token("bos_token"),    token("eos_token"),    token("pad_token"),
          flag("add_bos_token"), flag("add_eos_token"), flag("clean_up_tokenization_spaces")};
}

std::unique_ptr<Tokenizer::Backend> load_backend(const fs::path& path) {
  const std::string bytes = read_file(path);
  if (looks_like_json(path, bytes)) return json_backend(bytes, path.string());
  return sentencepiece_backend(bytes, path.string());
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Backend> backend)
    : bos_id_(backend->default_bos()), eos_id_(backend->default_eos()), pad_id_(backend->default_pad()) {
  backend_ = std::move(backend);
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) { return Tokenizer(load_backend(path)); }

Tokenizer Tokenizer::from_pretrained(const std::filesystem::path& dir) {
  fs::path file = dir / "tokenizer.json";
  std::error_code ec;
  if (!fs::exists(file, ec)) file = dir / "tokenizer.model";
  if (!fs::exists(file, ec))
    throw RuntimeError::of(kTokenizerOp, "no tokenizer in the folder",
                           "{} has neither tokenizer.json nor tokenizer.model", dir.string());
  std::unique_ptr<Backend> backend = load_backend(file);
  const fs::path config_path = dir / "tokenizer_config.json";
  if (!fs::exists(config_path, ec)) return Tokenizer(std::move(backend));
  const TokenizerConfig config = read_config(config_path);
  std::optional<int32_t> ids[3] = {backend->default_bos(), backend->default_eos(), backend->default_pad()};
  const std::optional<std::string>* names[3] = {&config.bos, &config.eos, &config.pad};
  const char* keys[3] = {"bos_token", "eos_token", "pad_token"};
  for (int k = 0; k < 3; ++k) {
    if (!*names[k]) continue;
    ids[k] = backend->token_to_id(**names[k]);
    if (!ids[k])
      throw FormatError::of(kTokenizerOp, "a special token is not in the vocabulary", "{}: {} '{}' (of {})",
                            config_path.string(), keys[k], **names[k], file.string());
  }
  if (config.add_bos.value_or(false) && !ids[0])
    throw FormatError::of(kTokenizerOp, "add_bos_token without a bos token", "{}", config_path.string());
  if (config.add_eos.value_or(false) && !ids[1])
    throw FormatError::of(kTokenizerOp, "add_eos_token without an eos token", "{}", config_path.string());
  backend->set_bos_eos(config.add_bos, ids[0], config.add_eos, ids[1]);
  Tokenizer t(std::move(backend));
  t.bos_id_ = ids[0];
  t.eos_id_ = ids[1];
  t.pad_id_ = ids[2];
  t.clean_up_spaces_ = config.clean_up_spaces.value_or(false);
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (!tok::utf8_valid(text)) throw ValueError::of(kTokenizerOp, "the text is not valid UTF-8");
  std::vector<int32_t> ids = backend_->encode(text);
  return add_special_tokens ? backend_->add_special_tokens(std::move(ids)) : ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string text = backend_->decode(ids, skip_special_tokens);
  if (clean_up_spaces_) tok::clean_up_tokenization(text, /*do_not=*/false);
  return text;
}

BatchEncoding Tokenizer::encode_batch(const std::vector<std::string>& texts, const PaddingOptions& padding,
                                      bool add_special_tokens) const {
  const std::optional<int64_t> max_length = padding.max_length;
  if (max_length && *max_length < 0)
    throw ValueError::of(kTokenizerOp, "max_length is negative", "max_length {}", *max_length);
  if (padding.truncation && !max_length) throw ValueError::of(kTokenizerOp, "truncation needs a max_length");
  const std::optional<int32_t> pad = padding.pad_id ? padding.pad_id : pad_id_;
  if (!pad)
    throw ValueError::of(kTokenizerOp, "no pad token",
                         "this tokenizer has none: set PaddingOptions::pad_id (e.g. to eos_id())");
  // Truncation keeps room for the special tokens, as transformers does.
  const size_t specials = add_special_tokens ? backend_->add_special_tokens({}).size() : 0;
  if (padding.truncation && static_cast<size_t>(*max_length) < specials)
    throw ValueError::of(kTokenizerOp, "max_length cannot hold the special tokens",
                         "max_length {} < {} special tokens", *max_length, specials);
  std::vector<std::vector<int32_t>> rows;
  rows.reserve(texts.size());
  size_t longest = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> ids = encode(texts[i], false);
    if (padding.truncation && ids.size() + specials > static_cast<size_t>(*max_length))
      ids.resize(static_cast<size_t>(*max_length) - specials);
    if (add_special_tokens) ids = backend_->add_special_tokens(std::move(ids));
    if (max_length && ids.size() > static_cast<size_t>(*max_length))
      throw ValueError::of(kTokenizerOp, "a text is longer than max_length",
                           "text {} has {} tokens, max_length is {} (set truncation to cut it)", i,
                           ids.size(), *max_length);
    longest = std::max(longest, ids.size());
    rows.push_back(std::move(ids));
  }
  const size_t length = max_length ? static_cast<size_t>(*max_length) : longest;
  std::vector<int32_t> ids(rows.size() * length, *pad), mask(rows.size() * length, 0);
  for (size_t r = 0; r < rows.size(); ++r) {
    const size_t offset =
        r * length + (padding.side == PaddingOptions::Side::left ? length - rows[r].size() : 0);
    std::copy(rows[r].begin(), rows[r].end(), ids.begin() + static_cast<std::ptrdiff_t>(offset));
    std::fill_n(mask.begin() + static_cast<std::ptrdiff_t>(offset), rows[r].size(), 1);
  }
  const Shape shape{static_cast<int64_t>(rows.size()), static_cast<int64_t>(length)};
  return {Array(ids, shape), Array(mask, shape)};
}

int64_t Tokenizer::vocab_size() const { return backend_->vocab_size(); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  return backend_->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  std::optional<std::string> token = backend_->id_to_token(id);
  if (!token)
    throw KeyError::of(kTokenizerOp, "no token has this id", "id {} (vocab size {})", id,
                       backend_->vocab_size());
  return *token;
}

}  // namespace kiln::models
