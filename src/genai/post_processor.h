// Post-processors: what add_special_tokens adds around the encoded ids ("post_processor":
// TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "genai/json_util.h"

namespace onyx::genai {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Rewrites the ids of one sequence; called only when special tokens are to be added.
  virtual void process(std::vector<int32_t>& ids) const = 0;
  // How many ids process() adds to a single sequence (truncation leaves room for them).
  virtual size_t added_tokens() const = 0;
};

std::unique_ptr<PostProcessor> make_post_processor(const JsonNode& node);

}  // namespace onyx::genai
