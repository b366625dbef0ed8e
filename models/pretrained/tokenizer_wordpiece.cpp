// The word-level models of a tokenizer.json, as the tokenizers library's models/wordpiece and
// models/wordlevel: WordPiece (BERT's greedy longest match) and WordLevel (one token per piece).
#include "kiln/core/error.h"
#include "tokenizer_impl.h"

namespace kiln::models::tok {
namespace {

class WordModel : public Model {
 public:
  WordModel(std::unordered_map<std::string, int32_t> vocab, std::string unk, std::string source)
      : vocab_(std::move(vocab)), unk_(std::move(unk)), source_(std::move(source)) {}
  const std::unordered_map<std::string, int32_t>& vocab() const override { return vocab_; }

 protected:
  int32_t unk_id() const {
    const auto it = vocab_.find(unk_);
    if (it == vocab_.end())
      throw FormatError::of(kTokenizerOp, "the unknown token is not in the vocabulary", "{}: unk_token '{}'",
                            source_, unk_);
    return it->second;
  }
  std::unordered_map<std::string, int32_t> vocab_;

 private:
  std::string unk_, source_;
};

class WordLevel : public WordModel {
 public:
  using WordModel::WordModel;
  void tokenize(std::string_view piece, std::vector<int32_t>& ids) const override {
    const auto it = vocab_.find(std::string(piece));
    ids.push_back(it != vocab_.end() ? it->second : unk_id());
  }
};

class WordPiece : public WordModel {
 public:
  WordPiece(std::unordered_map<std::string, int32_t> vocab, WordPieceOptions options)
      : WordModel(std::move(vocab), options.unk_token, options.source), options_(std::move(options)) {}

  void tokenize(std::string_view piece, std::vector<int32_t>& ids) const override {
    size_t chars = 0;
    for (char c : piece) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    if (static_cast<int64_t>(chars) > options_.max_input_chars_per_word) {
      ids.push_back(unk_id());
      return;
    }
    const size_t mark = ids.size();
    std::string candidate;
    for (size_t start = 0; start < piece.size();) {
      size_t end = piece.size();
      bool found = false;
      while (start < end) {
        candidate.assign(start > 0 ? options_.continuing_subword_prefix : "");
        candidate.append(piece.substr(start, end - start));
        if (const auto it = vocab_.find(candidate); it != vocab_.end()) {
          ids.push_back(it->second);
          found = true;
          break;
        }
        do --end;  // one character shorter
        while (end > start && (static_cast<unsigned char>(piece[end]) & 0xC0) == 0x80);
      }
      if (!found) {  // the whole word is unknown
        ids.resize(mark);
        ids.push_back(unk_id());
        return;
      }
      start = end;
    }
  }

 private:
  WordPieceOptions options_;
};

}  // namespace

std::unique_ptr<Model> word_level_model(std::unordered_map<std::string, int32_t> vocab, std::string unk_token,
                                        std::string source) {
  return std::make_unique<WordLevel>(std::move(vocab), std::move(unk_token), std::move(source));
}

std::unique_ptr<Model> word_piece_model(std::unordered_map<std::string, int32_t> vocab,
                                        WordPieceOptions options) {
  return std::make_unique<WordPiece>(std::move(vocab), std::move(options));
}

}  // namespace kiln::models::tok
