#include "genai/unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <memory>

#include "onyx/error.h"

namespace onyx::genai {
namespace {

struct CodeRange {
  char32_t first, last;
};

struct LowercaseException {
  char32_t cp;
  const char* lower;
};

#include "genai/unicode_tables.inc"

template <size_t N>
bool in_table(const CodeRange (&table)[N], char32_t c) {
  auto it = std::upper_bound(std::begin(table), std::end(table), c,
                             [](char32_t v, const CodeRange& r) { return v < r.first; });
  if (it == std::begin(table)) return false;
  --it;
  return c <= it->last;
}

template <size_t N>
std::string class_items(const CodeRange (&table)[N]) {
  std::string s;
  for (const CodeRange& r : table) {
    s += cat("\\x{", std::hex, uint32_t(r.first), "}");
    if (r.last != r.first) s += cat("-\\x{", std::hex, uint32_t(r.last), "}");
  }
  return s;
}


}  // namespace

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t utf8_invalid_at(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) { ++i; continue; }
    size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || i + len > n) return i;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return i;
    unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90))
      return i;  // overlong, surrogate, or beyond U+10FFFF
    i += len;
  }
  return std::string_view::npos;
}

bool is_white_space(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return in_table(kWordChar, c);
}

bool is_bert_punctuation(char32_t c) { return in_table(kBertPunctuation, c); }
bool is_bert_removed(char32_t c) { return in_table(kBertRemoved, c); }
bool is_bert_nonspacing_mark(char32_t c) { return in_table(kBertNonspacingMark, c); }
bool is_combining_mark(char32_t c) { return in_table(kCombiningMark, c); }

const std::string& regex_letter_extra() {
  static const std::string s = class_items(kRegexLetterExtra);
  return s;
}

const std::string& regex_number_extra() {
  static const std::string s = class_items(kRegexNumberExtra);
  return s;
}

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      out.push_back(b >= 'A' && b <= 'Z' ? static_cast<char>(b + 32) : static_cast<char>(b));
      ++i;
      continue;
    }
    char32_t cp;
    i += utf8_next(s, i, cp);
    auto it = std::lower_bound(std::begin(kLowercase), std::end(kLowercase), cp,
                               [](const LowercaseException& e, char32_t v) { return e.cp < v; });
    if (it != std::end(kLowercase) && it->cp == cp) {
      out += it->lower;
      continue;
    }
    utf8_append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
  }
  return out;
}

namespace {

std::string utf8proc_normalize(std::string_view s, NormalForm form) {
  if (s.empty()) return {};
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNFC: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::kNFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::kNFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::kNFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                    static_cast<utf8proc_ssize_t>(s.size()), &out, static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> holder(out, &std::free);
  ONYX_CHECK(n >= 0, "Unicode normalization failed: ", utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

}  // namespace

std::string normalize_unicode(std::string_view s, NormalForm form) {
  bool ascii = std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  if (ascii) return std::string(s);  // every normal form of ASCII is itself
  // Characters the reference's older normalization tables do not know stay as they are, and
  // nothing reorders or composes across them.
  std::string out;
  size_t segment = 0;
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) { ++i; continue; }
    char32_t cp;
    size_t n = utf8_next(s, i, cp);
    if (in_table(kNormalizationBarrier, cp)) {
      out += utf8proc_normalize(s.substr(segment, i - segment), form);
      out.append(s.substr(i, n));
      segment = i + n;
    }
    i += n;
  }
  if (segment == 0) return utf8proc_normalize(s, form);
  out += utf8proc_normalize(s.substr(segment), form);
  return out;
}

}  // namespace onyx::genai
