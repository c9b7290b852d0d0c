#include "genai/byte_level.h"

#include "genai/unicode.h"

namespace onyx::genai {
namespace {

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<std::string, 256> utf8{};
  Tables() {
    // Printable Latin-1 bytes keep their own code point; the rest (controls, space, soft hyphen)
    // take 256, 257, ... in byte order.
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool keeps = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = keeps ? static_cast<char32_t>(b) : next++;
      utf8_append(utf8[b], to_char[b]);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_char(unsigned char b) { return tables().to_char[b]; }

std::optional<unsigned char> char_to_byte(char32_t c) {
  if ((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)) return static_cast<unsigned char>(c);
  if (c < 256 || c >= 256 + 68) return std::nullopt;
  // The remapped bytes, in order: 0x00-0x20, 0x7F-0xA0, 0xAD.
  unsigned k = c - 256;
  if (k <= 0x20) return static_cast<unsigned char>(k);
  if (k <= 0x20 + 34) return static_cast<unsigned char>(0x7F + (k - 0x21));
  return static_cast<unsigned char>(0xAD);
}

void append_bytes_as_chars(std::string_view bytes, std::string& out) {
  const Tables& t = tables();
  for (unsigned char b : bytes) out += t.utf8[b];
}

std::string bytes_to_chars(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  append_bytes_as_chars(bytes, out);
  return out;
}

bool append_chars_as_bytes(std::string_view token, std::string& out) {
  size_t start = out.size();
  for (size_t i = 0; i < token.size();) {
    unsigned char c = static_cast<unsigned char>(token[i]);
    if (c >= '!' && c <= '~') {  // printable ASCII stands for itself
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    char32_t cp;
    i += utf8_next(token, i, cp);
    auto b = char_to_byte(cp);
    if (!b) {
      out.resize(start);
      return false;
    }
    out.push_back(static_cast<char>(*b));
  }
  return true;
}

std::optional<std::string> chars_to_bytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    char32_t c;
    i += utf8_next(token, i, c);
    auto b = char_to_byte(c);
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

}  // namespace onyx::genai
