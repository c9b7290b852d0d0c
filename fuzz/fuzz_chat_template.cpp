// libFuzzer target: bytes -> a chat template and a JSON conversation -> parse + render.
// The input is the template source, then a NUL byte, then the messages as JSON (a list of
// {"role", "content"} objects, or anything else JSON); without a NUL byte, or when the JSON
// does not parse, a fixed two-message conversation is rendered. An onyx::Error (a syntax
// error, raise_exception, a type error while rendering) is a normal outcome.
#include <cstdint>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "genai/chat_template.h"
#include "onyx/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* text = reinterpret_cast<const char*>(data);
  const void* nul = std::memchr(data, 0, size);
  const size_t split = nul ? size_t(static_cast<const uint8_t*>(nul) - data) : size;
  std::string source(text, split);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array(
      {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hello"}}});
  bool add_generation_prompt = true;
  if (nul) {
    auto parsed = nlohmann::ordered_json::parse(text + split + 1, text + size, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded()) messages = std::move(parsed);
    add_generation_prompt = (size - split) % 2 == 0;
  }
  nlohmann::ordered_json special = {{"bos_token", "<s>"}, {"eos_token", "</s>"},
                                    {"additional_special_tokens", {"<tool>", "</tool>"}}};
  try {
    onyx::genai::ChatTemplate tmpl(std::move(source), special);
    onyx::genai::apply_chat_template(tmpl, messages, add_generation_prompt);
  } catch (const onyx::Error&) {
  }
  return 0;
}
