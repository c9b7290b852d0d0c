#include "genai/wordpiece.h"

#include "genai/unicode.h"

namespace onyx::genai {

WordPiece::WordPiece(Vocab vocab, std::string unk_token, std::string prefix, size_t max_chars)
    : vocab_(std::move(vocab)), unk_token_(std::move(unk_token)), prefix_(std::move(prefix)), max_chars_(max_chars) {}

int32_t WordPiece::unk_id() const {
  auto id = vocab_.find(unk_token_);
  ONYX_CHECK(id, "WordPiece: the unknown token \"", unk_token_, "\" is not in the vocabulary");
  return *id;
}

void WordPiece::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  size_t chars = 0;
  for (size_t i = 0; i < word.size(); i += utf8_len(static_cast<unsigned char>(word[i]))) ++chars;
  if (chars > max_chars_) {
    out.push_back(unk_id());
    return;
  }
  size_t first = out.size();
  std::string candidate;
  for (size_t start = 0; start < word.size();) {
    size_t end = word.size();
    int32_t found = -1;
    while (start < end) {
      candidate.clear();
      if (start > 0) candidate += prefix_;
      candidate.append(word.substr(start, end - start));
      if (auto id = vocab_.find(candidate)) {
        found = *id;
        break;
      }
      // Drop the last character.
      do --end; while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
    }
    if (found < 0) {
      out.resize(first);
      out.push_back(unk_id());
      return;
    }
    out.push_back(found);
    start = end;
  }
}

void WordLevel::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (auto id = vocab_.find(piece)) {
    out.push_back(*id);
    return;
  }
  auto unk = vocab_.find(unk_token_);
  ONYX_CHECK(unk, "WordLevel: the unknown token \"", unk_token_, "\" is not in the vocabulary");
  out.push_back(*unk);
}

std::unique_ptr<Model> make_wordpiece(const JsonNode& node) {
  int64_t max_chars = node.int_or("max_input_chars_per_word", 100);
  if (max_chars < 0) node.at("max_input_chars_per_word").fail("must not be negative");
  return std::make_unique<WordPiece>(Vocab::from_json(node.at("vocab")), node.string_or("unk_token", "[UNK]"),
                                     node.string_or("continuing_subword_prefix", "##"), static_cast<size_t>(max_chars));
}

std::unique_ptr<Model> make_wordlevel(const JsonNode& node) {
  return std::make_unique<WordLevel>(Vocab::from_json(node.at("vocab")), node.string_or("unk_token", "<unk>"));
}

}  // namespace onyx::genai
