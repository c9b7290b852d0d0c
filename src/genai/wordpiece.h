// WordPiece (BERT): greedy longest-match-first subwords, continuations spelled with a
// prefix ("##"); a word with an unmatchable rest, or longer than max_input_chars_per_word,
// is the unknown token. WordLevel: one vocabulary lookup per piece.
#pragma once

#include "genai/model.h"

namespace onyx::genai {

class WordPiece : public Model {
 public:
  WordPiece(Vocab vocab, std::string unk_token, std::string prefix, size_t max_chars);
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const override;
  const Vocab& vocab() const override { return vocab_; }

 private:
  int32_t unk_id() const;

  Vocab vocab_;
  std::string unk_token_;
  std::string prefix_;
  size_t max_chars_;
};

class WordLevel : public Model {
 public:
  WordLevel(Vocab vocab, std::string unk_token) : vocab_(std::move(vocab)), unk_token_(std::move(unk_token)) {}
  void tokenize(std::string_view piece, std::vector<int32_t>& out) const override;
  const Vocab& vocab() const override { return vocab_; }

 private:
  Vocab vocab_;
  std::string unk_token_;
};

std::unique_ptr<Model> make_wordpiece(const JsonNode& node);
std::unique_ptr<Model> make_wordlevel(const JsonNode& node);

}  // namespace onyx::genai
