// A SentencePiece model (tokenizer.model of Llama 2, TinyLlama, Mistral) through libsentencepiece:
// its encoder and decoder, BOS (when the model has one) and optionally EOS around the ids.
#include <sentencepiece_processor.h>

#include "kiln/core/error.h"
#include "tokenizer_impl.h"

namespace kiln::models {
namespace {

class SentencePieceBackend : public Tokenizer::Backend {
 public:
  SentencePieceBackend(std::string_view bytes, std::string source) : source_(std::move(source)) {
    const auto status = processor_.LoadFromSerializedProto(bytes);
    if (!status.ok())
      throw FormatError::of(kTokenizerOp, "not a SentencePiece model", "{}: {}", source_, status.ToString());
    size_ = processor_.GetPieceSize();
    add_bos_ = processor_.bos_id() >= 0;
    if (add_bos_) bos_ = processor_.bos_id();
    if (processor_.eos_id() >= 0) eos_ = processor_.eos_id();
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    const auto status = processor_.Encode(text, &ids);
    if (!status.ok())
      throw RuntimeError::of(kTokenizerOp, "SentencePiece could not encode", "{}: {}", source_,
                             status.ToString());
    return {ids.begin(), ids.end()};
  }

  std::vector<int32_t> add_special_tokens(std::vector<int32_t> ids) const override {
    if (add_bos_ && bos_) ids.insert(ids.begin(), *bos_);
    if (add_eos_ && eos_) ids.push_back(*eos_);
    return ids;
  }

  // Runs of ordinary ids decode as SentencePiece decodes them; control tokens (BOS, EOS) are
  // their piece's text unless skipped.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::string out;
    std::vector<int> run;
    const auto flush = [&] {
      if (run.empty()) return;
      std::string text;
      const auto status = processor_.Decode(run, &text);
      if (!status.ok())
        throw RuntimeError::of(kTokenizerOp, "SentencePiece could not decode", "{}: {}", source_,
                               status.ToString());
      out.append(text);
      run.clear();
    };
    for (int32_t id : ids) {
      if (id < 0 || id >= size_) continue;  // no such piece: left out, as the tokenizers library does
      if (!processor_.IsControl(id)) {
        run.push_back(id);
        continue;
      }
      flush();
      if (!skip_special_tokens) out.append(processor_.IdToPiece(id));
    }
    flush();
    return out;
  }

  int64_t vocab_size() const override { return size_; }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    const int id = processor_.PieceToId(token);
    // PieceToId gives the unknown id for a piece it lacks.
    if (id < 0 || (processor_.IsUnknown(id) && processor_.IdToPiece(id) != token)) return std::nullopt;
    return id;
  }

  std::optional<std::string> id_to_token(int32_t id) const override {
    if (id < 0 || id >= size_) return std::nullopt;
    return processor_.IdToPiece(id);
  }

  void set_bos_eos(std::optional<bool> add_bos, std::optional<int32_t> bos, std::optional<bool> add_eos,
                   std::optional<int32_t> eos) override {
    if (add_bos) add_bos_ = *add_bos;
    if (add_eos) add_eos_ = *add_eos;
    if (bos) bos_ = bos;
    if (eos) eos_ = eos;
  }
  std::optional<int32_t> default_bos() const override { return bos_; }
  std::optional<int32_t> default_eos() const override { return eos_; }
  std::optional<int32_t> default_pad() const override {
    return processor_.pad_id() >= 0 ? std::optional<int32_t>(processor_.pad_id()) : std::nullopt;
  }

 private:
  std::string source_;
  sentencepiece::SentencePieceProcessor processor_;
  int size_ = 0;
  bool add_bos_ = true, add_eos_ = false;
  std::optional<int32_t> bos_, eos_;
};

}  // namespace

std::unique_ptr<Tokenizer::Backend> sentencepiece_backend(std::string_view bytes, const std::string& source) {
  return std::make_unique<SentencePieceBackend>(bytes, source);
}

}  // namespace kiln::models
