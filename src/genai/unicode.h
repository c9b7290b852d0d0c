// UTF-8 and the Unicode character facts the tokenizer needs, each named after the
// behaviour of the Hugging Face tokenizers function it stands for.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace onyx::genai {

// Decodes the code point at s[i] (s must be valid UTF-8) and returns its byte length.
inline size_t utf8_next(std::string_view s, size_t i, char32_t& cp) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) { cp = c; return 1; }
  if (c < 0xE0) { cp = (char32_t(c & 0x1F) << 6) | (s[i + 1] & 0x3F); return 2; }
  if (c < 0xF0) {
    cp = (char32_t(c & 0x0F) << 12) | (char32_t(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    return 3;
  }
  cp = (char32_t(c & 0x07) << 18) | (char32_t(s[i + 1] & 0x3F) << 12) | (char32_t(s[i + 2] & 0x3F) << 6) |
       (s[i + 3] & 0x3F);
  return 4;
}

// Byte length of the UTF-8 sequence that starts with lead byte c (1 for a stray continuation byte).
inline size_t utf8_len(unsigned char c) { return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

void utf8_append(std::string& out, char32_t cp);

// The offset of the first byte that is not valid UTF-8, or npos when all of s is valid.
size_t utf8_invalid_at(std::string_view s);

// Rust's char::is_whitespace (the Unicode White_Space property).
bool is_white_space(char32_t c);
// Rust regex `\w` (Alphabetic, marks, decimal digits, connector punctuation, joiners), as the
// reference's regex crate knows it.
bool is_word_char(char32_t c);

// Character sets as the reference answers them (measured from it into unicode_tables.inc by
// tools/gen_unicode_tables.py; its BERT code asks tables of Unicode 8.0).
bool is_bert_punctuation(char32_t c);  // BertPreTokenizer and Punctuation split these off
bool is_bert_removed(char32_t c);      // BertNormalizer's clean_text drops these (controls, NUL, U+FFFD)
bool is_bert_nonspacing_mark(char32_t c);  // BertNormalizer's strip_accents drops these after NFD
bool is_combining_mark(char32_t c);    // StripAccents drops these
// PCRE2 class items ("\x{..}-\x{..}...") for letters and numbers that the reference's regexes
// (Unicode 16.0) know and PCRE2's tables do not yet.
const std::string& regex_letter_extra();
const std::string& regex_number_extra();
// BertNormalizer's CJK ideograph blocks.
bool is_chinese_char(char32_t c);

// Rust's char::to_lowercase per character (full mapping: U+0130 becomes two code points).
std::string to_lower(std::string_view s);

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
std::string normalize_unicode(std::string_view s, NormalForm form);

}  // namespace onyx::genai
