// libFuzzer target: bytes -> encode and decode with one fixed tokenizer (the small Llama
// tokenizer of tests/fixtures/genai/llama-optimum, loaded once). The first byte picks what
// the rest is: text to encode (then its ids decoded, at once and one at a time), or raw
// little-endian int32 ids to decode. An onyx::Error (text that is not UTF-8) is a normal
// outcome.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "genai/token_stream.h"
#include "genai/tokenizer.h"
#include "onyx/error.h"

#ifndef ONYX_SOURCE_DIR
#define ONYX_SOURCE_DIR "."
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const onyx::genai::Tokenizer tokenizer =
      onyx::genai::Tokenizer::from_file(ONYX_SOURCE_DIR "/tests/fixtures/genai/llama-optimum");
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  ++data;
  --size;
  const bool special = (mode & 1) != 0;
  try {
    std::vector<int32_t> ids;
    if (mode & 2) {
      ids.resize(size / 4);
      if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
    } else {
      ids = tokenizer.encode(std::string_view(reinterpret_cast<const char*>(data), size), special);
    }
    tokenizer.decode(ids, (mode & 4) != 0);
    onyx::genai::TokenStream stream(tokenizer, (mode & 4) != 0);
    for (int32_t id : ids) stream.step(id);
    stream.finish();
  } catch (const onyx::Error&) {
  }
  return 0;
}
