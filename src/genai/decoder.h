// Decoders: turn token strings back into text ("decoder": ByteLevel, Metaspace, WordPiece,
// BPEDecoder, Replace, ByteFallback, Fuse, Strip, CTC, Sequence). Each works on the list
// of token strings, as the reference's decode_chain does; the result is their concatenation.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "genai/json_util.h"

namespace onyx::genai {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

std::unique_ptr<Decoder> make_decoder(const JsonNode& node);

}  // namespace onyx::genai
