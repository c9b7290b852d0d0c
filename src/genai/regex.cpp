#include "genai/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "genai/unicode.h"
#include "onyx/error.h"

namespace onyx::genai {
namespace {

// Rewrites an Oniguruma pattern for PCRE2 so that it matches the same characters. Oniguruma's
// \s is Unicode White_Space, which includes U+0085 (NEL); PCRE2's \s under UCP is the
// separators plus \t\n\v\f\r. And the reference's tables are of Unicode 16.0, PCRE2's older:
// \p{L} and \p{N} gain the letters and numbers it lacks. (\S and \P{..} inside a class stay
// as they are: a class cannot subtract.)
std::string translate(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[i + 1];
      if (n == 's') out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      else if (n == 'S' && !in_class) out += "[^\\s\\x{85}]";
      else if (n == 'p' || n == 'P') {
        // \p{L} and \p{N} (or \pL, \pN): add what PCRE2's older tables lack.
        size_t len = p.compare(i + 2, 3, "{L}") == 0 || p.compare(i + 2, 3, "{N}") == 0 ? 5
                     : (i + 2 < p.size() && (p[i + 2] == 'L' || p[i + 2] == 'N')) ? 3 : 0;
        if (len == 0 || (n == 'P' && in_class)) {
          out += c;
          out += n;
          ++i;
          continue;
        }
        char prop = p[i + len - 1] == '}' ? p[i + len - 2] : p[i + len - 1];
        const std::string& extra = prop == 'L' ? regex_letter_extra() : regex_number_extra();
        std::string item = cat("\\p{", prop, "}", extra);
        if (in_class) out += item;
        else out += cat(n == 'P' ? "[^" : "[", item, "]");
        i += len - 1;
        continue;
      }
      else { out += c; out += n; }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') { out += '^'; ++i; }
      if (i + 1 < p.size() && p[i + 1] == ']') { out += ']'; ++i; }
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:] inside a class
      size_t end = p.find(":]", i + 2);
      if (end != std::string::npos) {
        out.append(p, i, end + 2 - i);
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct JitStack {
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  ~JitStack() { if (stack) pcre2_jit_stack_free(stack); }
};

}  // namespace

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { if (code) pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern) : pattern_(pattern), impl_(std::make_unique<Impl>()) {
  std::string translated = translate(pattern);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &err_off, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(cat("regex '", pattern, "' does not compile: ", reinterpret_cast<const char*>(msg), " at offset ",
                    err_off));
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;

void Regex::find_all(std::string_view text, std::vector<Span>& out) const {
  out.clear();
  if (text.empty()) return;
  thread_local JitStack jit_stack;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  pcre2_match_context* mc = pcre2_match_context_create(nullptr);
  if (impl_->jit && jit_stack.stack) pcre2_jit_stack_assign(mc, nullptr, jit_stack.stack);
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  int rc = 0;
  while (pos <= text.size()) {
    rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, text.size(), pos, 0, md, mc)
                    : pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, mc);
    if (rc < 0) break;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (e == b) {  // an empty match: step over one character
      if (b >= text.size()) break;
      pos = b + utf8_len(static_cast<unsigned char>(text[b]));
      continue;
    }
    out.emplace_back(b, e);
    pos = e;
  }
  pcre2_match_context_free(mc);
  pcre2_match_data_free(md);
  if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    throw Error(cat("regex '", pattern_, "' failed on a text of ", text.size(), " bytes: ",
                    reinterpret_cast<const char*>(msg)));
  }
}

std::string Regex::escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-#&~ \t\n\r\v\f").find(c) != std::string_view::npos) {
      if (c == ' ') { out += "\\x20"; continue; }
      if (c == '\t') { out += "\\t"; continue; }
      if (c == '\n') { out += "\\n"; continue; }
      if (c == '\r') { out += "\\r"; continue; }
      if (c == '\v') { out += "\\x0b"; continue; }
      if (c == '\f') { out += "\\f"; continue; }
      out += '\\';
    }
    out += c;
  }
  return out;
}

}  // namespace onyx::genai
