// The BPE model of a tokenizer.json, as the tokenizers library's models/bpe: a piece becomes one
// symbol per character (byte-fallback tokens or the unknown token for characters outside the
// vocabulary), then the adjacent pair of lowest merge rank is merged until no pair has a merge.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <queue>
#include <stdexcept>

#include "kiln/core/error.h"
#include "tokenizer_impl.h"

namespace kiln::models::tok {
namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct Merge {
  int32_t rank, id;
};

class Bpe : public Model {
 public:
  Bpe(std::unordered_map<std::string, int32_t> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options)
      : vocab_(std::move(vocab)), options_(std::move(options)) {
    const size_t prefix = options_.continuing_subword_prefix.size();
    merges_.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const auto& [a, b] = merges[rank];
      const std::string joined = a + (b.size() >= prefix ? b.substr(prefix) : std::string());
      for (const std::string* part : {&a, &b, &joined})
        if (!vocab_.count(*part))
          throw std::invalid_argument(
              fmt::format("merge {} ('{} {}'): '{}' is not in the vocabulary", rank, a, b, *part));
      // A pair listed twice keeps its last rank (the tokenizers library builds a map).
      merges_[pair_key(vocab_.at(a), vocab_.at(b))] = {static_cast<int32_t>(rank), vocab_.at(joined)};
    }
    if (options_.unk_token) {
      const auto it = vocab_.find(*options_.unk_token);
      if (it != vocab_.end()) unk_id_ = it->second;
    }
    byte_ids_.fill(-1);
    if (options_.byte_fallback) {
      for (int b = 0; b < 256; ++b) {
        const auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
        if (it != vocab_.end()) byte_ids_[b] = it->second;
      }
    }
  }

  const std::unordered_map<std::string, int32_t>& vocab() const override { return vocab_; }

  void tokenize(std::string_view piece, std::vector<int32_t>& ids) const override {
    if (piece.empty()) return;
    if (options_.ignore_merges) {
      const auto it = vocab_.find(std::string(piece));
      if (it != vocab_.end()) {
        ids.push_back(it->second);
        return;
      }
    }
    std::vector<Symbol> symbols = initial_symbols(piece);
    merge_all(symbols);
    for (const Symbol& s : symbols)
      if (s.length > 0) ids.push_back(s.id);
  }

 private:
  struct Symbol {
    int32_t id;
    int prev, next;
    size_t length;  // bytes of the piece it covers; 0 once merged into its left neighbour
  };

  static void add(std::vector<Symbol>& symbols, int32_t id, size_t length) {
    const int n = static_cast<int>(symbols.size());
    if (n > 0) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, length});
  }

  std::vector<Symbol> initial_symbols(std::string_view piece) const {
    std::vector<Symbol> symbols;
    symbols.reserve(piece.size());
    int32_t unk = -1;  // a pending unknown token (fused over characters with fuse_unk) and its length
    size_t unk_length = 0;
    std::string s;
    for (size_t i = 0; i < piece.size();) {
      const size_t n = utf8_length(static_cast<unsigned char>(piece[i]));
      s.clear();
      if (i > 0) s.append(options_.continuing_subword_prefix);
      s.append(piece.substr(i, n));
      if (i + n >= piece.size()) s.append(options_.end_of_word_suffix);
      i += n;
      if (const auto it = vocab_.find(s); it != vocab_.end()) {
        if (unk >= 0) add(symbols, unk, unk_length);
        unk = -1;
        add(symbols, it->second, n);
        continue;
      }
      if (options_.byte_fallback && std::all_of(s.begin(), s.end(), [&](char c) {
            return byte_ids_[static_cast<unsigned char>(c)] >= 0;
          })) {
        for (char c : s) add(symbols, byte_ids_[static_cast<unsigned char>(c)], 1);
        continue;
      }
      if (!options_.unk_token) continue;  // dropped, as the tokenizers library does
      if (!unk_id_)
        throw FormatError::of(kTokenizerOp, "the unknown token is not in the vocabulary",
                              "{}: unk_token '{}'", options_.source, *options_.unk_token);
      if (unk >= 0 && options_.fuse_unk) {
        unk_length += n;
      } else {
        if (unk >= 0) add(symbols, unk, unk_length);
        unk = *unk_id_;
        unk_length = n;
      }
    }
    if (unk >= 0) add(symbols, unk, unk_length);
    return symbols;
  }

  const Merge* find_merge(int32_t a, int32_t b) const {
    const auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }

  void merge_all(std::vector<Symbol>& symbols) const {
    struct Candidate {
      int32_t rank;
      int pos;
      int32_t id;
      bool operator<(const Candidate& o) const {  // the queue's top: lowest rank, then leftmost
        return rank != o.rank ? rank > o.rank : pos > o.pos;
      }
    };
    std::priority_queue<Candidate> queue;
    for (size_t i = 0; i + 1 < symbols.size(); ++i)
      if (const Merge* m = find_merge(symbols[i].id, symbols[i + 1].id))
        queue.push({m->rank, static_cast<int>(i), m->id});
    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      Symbol& left = symbols[top.pos];
      if (left.length == 0 || left.next < 0) continue;
      const Symbol right = symbols[left.next];
      const Merge* m = find_merge(left.id, right.id);
      if (!m || m->id != top.id) continue;  // stale: a neighbour changed since it was queued
      symbols[left.next].length = 0;
      left.id = top.id;
      left.length += right.length;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = top.pos;
      if (left.prev >= 0)
        if (const Merge* p = find_merge(symbols[left.prev].id, left.id))
          queue.push({p->rank, left.prev, p->id});
      if (left.next >= 0)
        if (const Merge* n = find_merge(left.id, symbols[left.next].id))
          queue.push({n->rank, top.pos, n->id});
    }
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  BpeOptions options_;
  std::optional<int32_t> unk_id_;
  std::array<int32_t, 256> byte_ids_{};
};

}  // namespace

std::unique_ptr<Model> bpe_model(std::unordered_map<std::string, int32_t> vocab,
                                 const std::vector<std::pair<std::string, std::string>>& merges,
                                 BpeOptions options) {
  return std::make_unique<Bpe>(std::move(vocab), merges, std::move(options));
}

}  // namespace kiln::models::tok
