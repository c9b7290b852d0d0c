// Byte-pair encoding: start from characters (or <0xNN> byte tokens), then apply the merge
// with the lowest rank, leftmost first, until none applies. Covers byte-level BPE (GPT-2,
// Llama-3, Qwen2) and SentencePiece-style BPE (Llama-2, Mistral: byte_fallback, fuse_unk).
#pragma once

#include <array>
#include <mutex>
#include <optional>

#include "genai/model.h"

namespace onyx::genai {

// (left id, right id) -> (rank, merged id), open addressing: the merge table is probed once
// per candidate pair, the hot loop of BPE.
class MergeTable {
 public:
  struct Merge {
    uint32_t rank;
    int32_t id;
  };
  void reserve(size_t n);
  // A pair seen again keeps the later rank, as a map built from the list in order would.
  void insert(int32_t a, int32_t b, Merge m);
  const Merge* find(int32_t a, int32_t b) const {
    if (slots_.empty()) return nullptr;
    uint64_t key = pack(a, b);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return count_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static uint64_t pack(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  static size_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0, count_ = 0;
};

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class Bpe : public Model {
 public:
  // merges: pairs of token strings, in rank order.
  Bpe(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options);
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const override;
  const Vocab& vocab() const override { return vocab_; }

 private:
  void merge_word(std::string_view piece, std::vector<int32_t>& out) const;
  int32_t char_id(std::string_view ch, bool first, bool last) const;

  Vocab vocab_;
  MergeTable merges_;
  BpeOptions options_;
  std::optional<int32_t> unk_id_;
  std::array<int32_t, 256> byte_ids_{};  // <0xNN> tokens, -1 where absent
  std::vector<int32_t> small_char_ids_;  // code point < 0x800 -> id of that one-character token, -1 if none
  bool plain_chars_ = true;              // no subword prefix or word suffix: small_char_ids_ apply
  // Recently seen pieces and their ids; pieces repeat a lot in text.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

std::unique_ptr<Model> make_bpe(const JsonNode& node);

}  // namespace onyx::genai
