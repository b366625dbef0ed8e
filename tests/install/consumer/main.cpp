// Builds a small graph with the installed kiln and checks its value, and encodes with a tokenizer
// (whose PCRE2, utf8proc and SentencePiece libkiln.a needs the consumer to link).
#include <kiln/kiln.h>
#include <kiln/models/pretrained/tokenizer.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>

int main() {
  kiln::Array x({1.0f, 2.0f, 3.0f});
  kiln::Array y = x * x + 1.0f;
  std::cout << y << "\n";
  const float total = kiln::sum(y).item<float>();
  if (std::abs(total - 17.0f) > 1e-5f) {
    std::cerr << "expected sum 17, got " << total << "\n";
    return 1;
  }
  const auto path = std::filesystem::temp_directory_path() /
                    ("kiln_consumer_tokenizer_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << R"({"version": "1.0", "added_tokens": [], "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "vocab": {"h": 0, "i": 1, "hi": 2}, "merges": ["h i"]}})";
  const auto ids = kiln::models::Tokenizer::from_file(path).encode("hi");
  std::filesystem::remove(path);
  if (ids != std::vector<int32_t>{2}) {
    std::cerr << "expected the tokenizer to encode \"hi\" as [2]\n";
    return 1;
  }
  return 0;
}
