// The model of a tokenizer: turns one pre-tokenized piece into token ids (BPE, WordPiece,
// WordLevel), over a vocabulary of token strings.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "genai/json_util.h"

namespace onyx::genai {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Token string <-> id, ids not necessarily dense.
class Vocab {
 public:
  // Reads {"token": id, ...}; an id below zero or above 2^31 is an error naming the path.
  static Vocab from_json(const JsonNode& node);
  void add(std::string token, int32_t id);

  std::optional<int32_t> find(std::string_view token) const {
    auto it = ids_.find(token);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  const std::string* token(int32_t id) const {
    return id >= 0 && size_t(id) < tokens_.size() && has_[id] ? &tokens_[id] : nullptr;
  }
  size_t size() const { return ids_.size(); }

 private:
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_;
  std::vector<std::string> tokens_;
  std::vector<bool> has_;
};

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of `piece` (never empty) to `out`.
  virtual void tokenize(std::string_view piece, std::vector<int32_t>& out) const = 0;
  virtual const Vocab& vocab() const = 0;
};

// Builds the model that tokenizer.json's "model" describes.
std::unique_ptr<Model> make_model(const JsonNode& node);

}  // namespace onyx::genai
