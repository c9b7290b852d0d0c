#include "genai/model.h"

#include "genai/bpe.h"
#include "genai/wordpiece.h"

namespace onyx::genai {

Vocab Vocab::from_json(const JsonNode& node) {
  node.expect_object();
  Vocab v;
  v.ids_.reserve(node.value().size());
  for (auto it = node.value().begin(); it != node.value().end(); ++it) {
    JsonNode entry(it.value(), cat(node.path(), "/", it.key()));
    int64_t id = entry.as_int();
    if (id < 0 || id > INT32_MAX) entry.fail(cat("token id ", id, " is out of range"));
    v.add(it.key(), static_cast<int32_t>(id));
  }
  return v;
}

void Vocab::add(std::string token, int32_t id) {
  if (size_t(id) >= tokens_.size()) {
    tokens_.resize(size_t(id) + 1);
    has_.resize(size_t(id) + 1, false);
  }
  tokens_[id] = token;
  has_[id] = true;
  ids_[std::move(token)] = id;
}

std::unique_ptr<Model> make_model(const JsonNode& node) {
  node.expect_object();
  // Files written by old versions leave "type" out; their fields tell the kind.
  std::string type = node.has("type") ? node.type() : node.has("merges") ? "BPE" : node.has("max_input_chars_per_word") ? "WordPiece" : "";
  if (type == "BPE") return make_bpe(node);
  if (type == "WordPiece") return make_wordpiece(node);
  if (type == "WordLevel") return make_wordlevel(node);
  if (type == "Unigram") node.fail("model type \"Unigram\" is not supported by onyx (only BPE, WordPiece and WordLevel)");
  node.fail(cat("model type \"", type, "\" is not supported by onyx"));
}

}  // namespace onyx::genai
