// Added tokens (tokenizer.json's "added_tokens"): matched in the text before the model runs,
// longest first at the leftmost position, honoring lstrip / rstrip / single_word; tokens with
// normalized=false are matched in the raw input, the others in the normalized text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "genai/model.h"

namespace onyx::genai {

class Normalizer;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
  // How decode and id_to_token spell it: the normalized content for a normalized token, as
  // the reference keeps it (so that decoders invert what the normalizer did).
  std::string decoded;
};

// One stretch of text: an added token (id >= 0) or text for the normalizer / model (id < 0).
struct TextSplit {
  size_t begin, end;
  int32_t id;
};

class AddedVocabulary {
 public:
  // Reads the "added_tokens" array; ids follow the reference: a token already in the model's
  // vocabulary keeps that id, the others are numbered from the vocabulary's size on.
  void load(const JsonNode& list, const Vocab& model_vocab, const Normalizer* normalizer);

  // Splits `text` at the tokens of one pass (raw: normalized=false tokens; else normalized=true).
  void split(std::string_view text, bool normalized_pass, std::vector<TextSplit>& out) const;

  const AddedToken* by_id(int32_t id) const;
  std::optional<int32_t> find(std::string_view content) const;
  bool is_special(std::string_view content) const { return special_.count(std::string(content)) != 0; }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // A byte trie over the patterns of one pass.
  struct Trie {
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> children;
      int32_t token = -1;  // index into tokens_
    };
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    void insert(std::string_view pattern, int32_t token);
    // The longest pattern starting at text[i]: (token index, length), or token -1.
    std::pair<int32_t, size_t> longest_at(std::string_view text, size_t i) const;
    bool empty() const { return nodes.size() == 1; }
  };

  std::vector<AddedToken> tokens_;
  std::vector<int32_t> index_of_id_;  // id -> index into tokens_, -1 where none
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> id_of_content_;
  std::unordered_set<std::string> special_;
  Trie raw_, normalized_;
};

}  // namespace onyx::genai
