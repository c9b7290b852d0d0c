// Pre-tokenizers: split each normalized stretch of text into the pieces that the model
// tokenizes one by one ("pre_tokenizer" in tokenizer.json).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "genai/json_util.h"

namespace onyx::genai {

struct Piece {
  std::string text;
  // Whether the piece starts at offset 0 of the original input (Metaspace's "first" scheme
  // prepends only there).
  bool at_origin = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their splits; empty pieces are dropped.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonNode& node);

// What a split does with the delimiters it finds (tokenizers' SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

}  // namespace onyx::genai
