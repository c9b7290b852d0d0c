// Normalizers: the text transforms tokenizer.json's "normalizer" names, applied to each
// stretch of input between added tokens before pre-tokenization.
#pragma once

#include <memory>
#include <string>

#include "genai/json_util.h"

namespace onyx::genai {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Normalizes text. at_origin is cleared when what now comes first no longer stands for
  // the first original character (Strip or a removal took it), as Metaspace's "first" asks.
  virtual void normalize(std::string& text, bool& at_origin) const = 0;
  void normalize(std::string& text) const {
    bool unused = true;
    normalize(text, unused);
  }
};

// A Replace or Split pattern, {"String": s} or {"Regex": r}, as a regex source.
std::string pattern_source(const JsonNode& pattern);

// Builds the normalizer that `node` describes; null gives nullptr. A type onyx does not
// implement is an error naming it.
std::unique_ptr<Normalizer> make_normalizer(const JsonNode& node);

}  // namespace onyx::genai
