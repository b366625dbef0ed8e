#pragma once
// A Hugging Face `config.json`, read and written without exposing a JSON library: typed getters
// whose errors name the file and the key, and setters for writing a config back.
//
//   auto config = models::HfConfig::read("gpt2/config.json");
//   int64_t layers = config.get_int("n_layer");
//   double eps = config.get_double("layer_norm_epsilon", 1e-5);   // with a default
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::models {

class HfConfig {
 public:
  /// An empty object.
  HfConfig();
  HfConfig(const HfConfig& other);
  HfConfig& operator=(const HfConfig& other);
  HfConfig(HfConfig&&) noexcept;
  HfConfig& operator=(HfConfig&&) noexcept;
  ~HfConfig();

  /// Reads `path`. Throws RuntimeError naming the path when it cannot be read, FormatError when
  /// it is not a JSON object.
  static HfConfig read(const std::filesystem::path& path);
  /// Parses JSON text; `source` names it in errors. Throws FormatError as read().
  static HfConfig parse(std::string_view text, std::string source = "config.json");

  /// Whether `key` is present with a value other than null.
  bool has(std::string_view key) const;
  /// The value at `key`. Without a fallback the key is required. Throws FormatError naming the
  /// source and the key for a missing key or a value of another type (an integer is accepted
  /// where a double is asked for; a double with a fractional part is not an integer).
  int64_t get_int(std::string_view key) const;
  int64_t get_int(std::string_view key, int64_t fallback) const;
  double get_double(std::string_view key) const;
  double get_double(std::string_view key, double fallback) const;
  bool get_bool(std::string_view key, bool fallback) const;
  std::string get_string(std::string_view key) const;
  std::string get_string(std::string_view key, std::string_view fallback) const;
  /// A list of strings (`architectures`); empty when absent.
  std::vector<std::string> get_strings(std::string_view key) const;
  /// A nested object (`rope_scaling`); its source reads "config.json: rope_scaling".
  HfConfig get_object(std::string_view key) const;
  /// The number of entries of an object or list value (`id2label`); 0 when absent.
  int64_t get_size(std::string_view key) const;
  /// The JSON type of the value at `key`: "null" (also when absent), "string", "number",
  /// "boolean", "array" or "object".
  std::string type_of(std::string_view key) const;
  /// The keys, in file order.
  std::vector<std::string> keys() const;

  void set(std::string_view key, int64_t value);
  void set(std::string_view key, int value) { set(key, static_cast<int64_t>(value)); }
  void set(std::string_view key, double value);
  void set(std::string_view key, bool value);
  void set(std::string_view key, const std::string& value);
  void set(std::string_view key, const char* value) { set(key, std::string(value)); }
  void set(std::string_view key, const std::vector<std::string>& value);
  void set(std::string_view key, const HfConfig& value);
  /// Removes `key` (no-op when absent).
  void erase(std::string_view key);

  /// JSON text, indented by two spaces, keys in insertion order.
  std::string dump() const;
  /// Writes dump() to `path` atomically. Throws RuntimeError naming the path when writing fails.
  void write(const std::filesystem::path& path) const;
  const std::string& source() const { return source_; }

 private:
  struct Json;
  std::unique_ptr<Json> json_;
  std::string source_ = "config.json";
};

}  // namespace kiln::models
