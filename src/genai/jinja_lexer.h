// Splitting a Jinja template into tokens exactly as jinja2's lexer does with the settings
// that Hugging Face transformers uses (trim_blocks, lstrip_blocks, no trailing newline kept):
// the whitespace rules live here, so the parser and the renderer never see them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace onyx::genai::jinja {

enum class Tok : uint8_t {
  kData,         // template text, output as is
  kVarBegin,     // {{
  kVarEnd,       // }}
  kBlockBegin,   // {%
  kBlockEnd,     // %}
  kName,
  kString,       // text holds the value, escapes resolved
  kInteger,
  kFloat,
  kOperator,     // text holds it: "+", "//", "==", "(", ...
  kEnd,          // end of the template
};

struct Token {
  Tok type;
  std::string text;
  int64_t integer = 0;
  double number = 0;
  int line = 1, column = 1;
};

// The tokens of `source`. A syntax error the lexer sees (an unclosed tag, string or comment,
// an unexpected character, unbalanced brackets) is an onyx::Error naming line and column.
std::vector<Token> tokenize(std::string_view source);

// "line 3, column 14"
std::string where(int line, int column);

}  // namespace onyx::genai::jinja
