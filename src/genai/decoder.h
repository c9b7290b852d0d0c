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
  // Whether runs of <0xNN> tokens are decoded together (ByteFallback): a later byte token can
  // then change how the earlier ones read, so a stream must hold a run until it ends.
  virtual bool joins_byte_tokens() const { return false; }
};

// The byte of a "<0xNN>" token, or -1.
int parse_byte_token(const std::string& token);

std::unique_ptr<Decoder> make_decoder(const JsonNode& node);

}  // namespace onyx::genai
