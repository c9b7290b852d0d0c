// GPT-2's byte-to-character table: every byte 0..255 stands for one printable code point,
// so that byte-level BPE vocabularies are strings of visible characters.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace onyx::genai {

// The code point that stands for byte b.
char32_t byte_to_char(unsigned char b);
// The byte that code point c stands for, if c is one of the 256.
std::optional<unsigned char> char_to_byte(char32_t c);

// Each byte of `bytes` replaced by its character, UTF-8 encoded.
std::string bytes_to_chars(std::string_view bytes);
void append_bytes_as_chars(std::string_view bytes, std::string& out);
// The inverse for a whole token: its bytes when every character is one of the 256.
std::optional<std::string> chars_to_bytes(std::string_view token);
// Appends the bytes of `token` to out when every character is one of the 256 (and returns
// true); otherwise leaves out as it was and returns false.
bool append_chars_as_bytes(std::string_view token, std::string& out);

}  // namespace onyx::genai
