// Streaming decode: feed ids one at a time as a model generates them, get back the text
// that is complete. A partial UTF-8 sequence (a 4-byte emoji split over byte-level tokens)
// is held until it completes, a <0xNN> byte-fallback run until the token after it (a later
// byte could still make the run invalid, and the reference then shows every byte of it as
// U+FFFD); the concatenation of everything step() and finish() return equals
// Tokenizer::decode of the whole sequence.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace onyx::genai {

class Tokenizer;

class TokenStream {
 public:
  // The tokenizer must outlive the stream. One stream per generated sequence; not thread-safe.
  TokenStream(const Tokenizer& tokenizer, bool skip_special_tokens);

  // The text that `id` completes (often empty while a character is incomplete).
  std::string step(int32_t id);
  // Whatever is still held (an incomplete sequence comes out as U+FFFD, as decode shows it).
  std::string finish();
  // Forget everything: the next id starts a new sequence.
  void reset();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  // The ids of the last emitted chunk (context for the decoders) followed by pending ids.
  std::vector<int32_t> window_;
  size_t context_ = 0;   // how many of window_ are context
  std::string context_text_;  // decode of the context ids
  // Every id and everything emitted, for the rare decoder whose output is not a
  // continuation of its context's (then the whole sequence is decoded again).
  std::vector<int32_t> all_;
  std::string emitted_;
};

}  // namespace onyx::genai
