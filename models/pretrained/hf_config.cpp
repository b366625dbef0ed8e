#include "kiln/models/pretrained/hf_config.h"

#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "../../io/atomic_file_impl.h"
#include "kiln/core/error.h"

namespace kiln::models {

namespace {
constexpr const char* kOp = "HfConfig";
}  // namespace

struct HfConfig::Json {
  nlohmann::ordered_json value = nlohmann::ordered_json::object();
};

HfConfig::HfConfig() : json_(std::make_unique<Json>()) {}
HfConfig::HfConfig(const HfConfig& other)
    : json_(std::make_unique<Json>(*other.json_)), source_(other.source_) {}
HfConfig& HfConfig::operator=(const HfConfig& other) {
  if (this != &other) {
    json_ = std::make_unique<Json>(*other.json_);
    source_ = other.source_;
  }
  return *this;
}
HfConfig::HfConfig(HfConfig&&) noexcept = default;
HfConfig& HfConfig::operator=(HfConfig&&) noexcept = default;
HfConfig::~HfConfig() = default;

HfConfig HfConfig::parse(std::string_view text, std::string source) {
  HfConfig c;
  c.source_ = std::move(source);
  try {
    c.json_->value = nlohmann::ordered_json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw FormatError::of(kOp, "not valid JSON", "{}: {}", c.source_, e.what());
  }
  if (!c.json_->value.is_object())
    throw FormatError::of(kOp, "not a JSON object", "{}: the top level is a {}", c.source_,
                          c.json_->value.type_name());
  return c;
}

HfConfig HfConfig::read(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RuntimeError::of(kOp, "cannot open the config", "{}", path.string());
  const std::string text{std::istreambuf_iterator<char>(in), {}};
  if (in.bad()) throw RuntimeError::of(kOp, "cannot read the config", "{}", path.string());
  return parse(text, path.string());
}

namespace {

const nlohmann::ordered_json* find(const nlohmann::ordered_json& j, std::string_view key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

[[noreturn]] void wrong_type(const std::string& source, std::string_view key, const char* expected,
                             const nlohmann::ordered_json& v) {
  throw FormatError::of(kOp, "a config value has the wrong type", "{}: '{}' must be {}, got {}", source, key,
                        expected, v.dump());
}

}  // namespace

bool HfConfig::has(std::string_view key) const { return find(json_->value, key) != nullptr; }

int64_t HfConfig::get_int(std::string_view key) const {
  const auto* v = find(json_->value, key);
  if (!v) throw FormatError::of(kOp, "a required config value is missing", "{}: no '{}'", source_, key);
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.0e15) return static_cast<int64_t>(d);
  }
  wrong_type(source_, key, "an integer", *v);
}

int64_t HfConfig::get_int(std::string_view key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double HfConfig::get_double(std::string_view key) const {
  const auto* v = find(json_->value, key);
  if (!v) throw FormatError::of(kOp, "a required config value is missing", "{}: no '{}'", source_, key);
  if (!v->is_number()) wrong_type(source_, key, "a number", *v);
  return v->get<double>();
}

double HfConfig::get_double(std::string_view key, double fallback) const {
  return has(key) ? get_double(key) : fallback;
}

bool HfConfig::get_bool(std::string_view key, bool fallback) const {
  const auto* v = find(json_->value, key);
  if (!v) return fallback;
  if (!v->is_boolean()) wrong_type(source_, key, "true or false", *v);
  return v->get<bool>();
}

std::string HfConfig::get_string(std::string_view key) const {
  const auto* v = find(json_->value, key);
  if (!v) throw FormatError::of(kOp, "a required config value is missing", "{}: no '{}'", source_, key);
  if (!v->is_string()) wrong_type(source_, key, "a string", *v);
  return v->get<std::string>();
}

std::string HfConfig::get_string(std::string_view key, std::string_view fallback) const {
  return has(key) ? get_string(key) : std::string(fallback);
}

std::vector<std::string> HfConfig::get_strings(std::string_view key) const {
  const auto* v = find(json_->value, key);
  if (!v) return {};
  if (!v->is_array()) wrong_type(source_, key, "a list of strings", *v);
  std::vector<std::string> out;
  for (const auto& s : *v) {
    if (!s.is_string()) wrong_type(source_, key, "a list of strings", *v);
    out.push_back(s.get<std::string>());
  }
  return out;
}

HfConfig HfConfig::get_object(std::string_view key) const {
  const auto* v = find(json_->value, key);
  if (!v) throw FormatError::of(kOp, "a required config value is missing", "{}: no '{}'", source_, key);
  if (!v->is_object()) wrong_type(source_, key, "an object", *v);
  HfConfig c;
  c.json_->value = *v;
  c.source_ = source_ + ": " + std::string(key);
  return c;
}

int64_t HfConfig::get_size(std::string_view key) const {
  const auto* v = find(json_->value, key);
  if (!v) return 0;
  if (!v->is_object() && !v->is_array()) wrong_type(source_, key, "an object or a list", *v);
  return static_cast<int64_t>(v->size());
}

std::string HfConfig::type_of(std::string_view key) const {
  const auto* v = find(json_->value, key);
  if (!v) return "null";
  if (v->is_number()) return "number";
  return v->type_name();
}

std::vector<std::string> HfConfig::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : json_->value.items()) out.push_back(k);
  return out;
}

void HfConfig::set(std::string_view key, int64_t value) { json_->value[std::string(key)] = value; }
void HfConfig::set(std::string_view key, double value) { json_->value[std::string(key)] = value; }
void HfConfig::set(std::string_view key, bool value) { json_->value[std::string(key)] = value; }
void HfConfig::set(std::string_view key, const std::string& value) { json_->value[std::string(key)] = value; }
void HfConfig::set(std::string_view key, const std::vector<std::string>& value) {
  json_->value[std::string(key)] = value;
}
void HfConfig::set(std::string_view key, const HfConfig& value) {
  json_->value[std::string(key)] = value.json_->value;
}
void HfConfig::erase(std::string_view key) { json_->value.erase(std::string(key)); }

std::string HfConfig::dump() const { return json_->value.dump(2) + "\n"; }

void HfConfig::write(const std::filesystem::path& path) const {
  const std::string text = dump();
  io::detail::replace_atomically(kOp, path,
                                 [&](io::detail::TempFile& f) { f.write(text.data(), text.size()); });
}

}  // namespace kiln::models
