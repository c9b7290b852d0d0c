#include "genai/jinja_lexer.h"

#include <algorithm>

#include "genai/jinja_value.h"
#include "genai/unicode.h"
#include "onyx/error.h"

namespace onyx::genai::jinja {

std::string where(int line, int column) { return cat("line ", line, ", column ", column); }

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // jinja2 reads \r\n and \r as \n, and drops one trailing newline (keep_trailing_newline=False).
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;  // the last thing matched ended a line (or nothing was matched yet)
    const size_t n = src_.size();
    while (pos < n) {
      size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        emit_data(pos, n);
        break;
      }
      char kind = src_[tag + 1];
      size_t p = tag + 2;
      char sign = 0;
      if (p < n && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      size_t raw_body = kind == '%' ? raw_begin_end(p) : std::string::npos;

      // The text before the tag: `-` strips all whitespace; lstrip_blocks strips the spaces
      // that start the tag's line (block and comment tags only).
      size_t text_end = tag;
      if (sign == '-') {
        text_end = rstrip_end(pos, tag);
      } else if (sign != '+' && kind != '{') {
        size_t nl = src_.rfind('\n', tag == 0 ? std::string::npos : tag - 1);
        size_t l_pos = (nl == std::string::npos || nl < pos) ? pos : nl + 1;
        if ((l_pos > pos || line_starting) && l_pos < tag && all_space(l_pos, tag)) text_end = l_pos;
      }
      emit_data(pos, text_end);

      if (raw_body != std::string::npos) {
        pos = lex_raw(tag, raw_body, line_starting);
      } else if (kind == '#') {
        pos = lex_comment(tag, p, line_starting);
      } else {
        pos = lex_tag(tag, p, kind == '%', line_starting);
      }
    }
    tokens_.push_back(Token{Tok::kEnd, "", 0, 0, line_of(n), column_of(n)});
    return std::move(tokens_);
  }

 private:
  int line_of(size_t pos) const {
    return static_cast<int>(std::upper_bound(line_starts_.begin(), line_starts_.end(), pos) - line_starts_.begin());
  }
  int column_of(size_t pos) const {
    size_t start = line_starts_[line_of(pos) - 1];
    int col = 1;
    for (size_t i = start; i < pos && i < src_.size(); ++i) col += (static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80;
    return col;
  }
  [[noreturn]] void fail(size_t pos, const std::string& message) const {
    throw Error(cat(where(line_of(pos), column_of(pos)), ": ", message));
  }

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  // The code point at i is whitespace in Python's sense; its length goes to `len`.
  bool space_at(size_t i, size_t* len = nullptr) const {
    char32_t c;
    size_t l = utf8_next(src_, i, c);
    if (len) *len = l;
    return is_py_space(c);
  }
  bool all_space(size_t b, size_t e) const {
    for (size_t i = b, l; i < e; i += l)
      if (!space_at(i, &l)) return false;
    return true;
  }
  size_t skip_space(size_t i) const {
    for (size_t l; i < src_.size() && space_at(i, &l);) i += l;
    return i;
  }
  size_t rstrip_end(size_t b, size_t e) const {
    std::vector<std::string_view> cps = code_points(std::string_view(src_).substr(b, e - b));
    size_t end = e;
    for (size_t k = cps.size(); k > 0; --k) {
      char32_t c;
      utf8_next(cps[k - 1], 0, c);
      if (!is_py_space(c)) break;
      end -= cps[k - 1].size();
    }
    return end;
  }
  bool starts(size_t i, std::string_view s) const { return std::string_view(src_).substr(i, s.size()) == s; }

  void emit_data(size_t b, size_t e) {
    if (e > b) tokens_.push_back(Token{Tok::kData, src_.substr(b, e - b), 0, 0, line_of(b), column_of(b)});
  }
  void emit(Tok type, std::string text, size_t at) {
    tokens_.push_back(Token{type, std::move(text), 0, 0, line_of(at), column_of(at)});
  }

  // `{% raw %}`: where its body starts, or npos when the tag at p is not `raw`.
  size_t raw_begin_end(size_t p) const {
    size_t i = skip_space(p);
    if (!starts(i, "raw")) return std::string::npos;
    i = skip_space(i + 3);
    if (starts(i, "-%}")) return skip_space(i + 3);
    if (starts(i, "%}")) return i + 2;  // no trim_blocks newline here, as in jinja2
    return std::string::npos;
  }

  size_t lex_raw(size_t tag, size_t body, bool& line_starting) {
    line_starting = body > 0 && src_[body - 1] == '\n';
    for (size_t i = src_.find("{%", body); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t p = i + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      p = skip_space(p);
      if (!starts(p, "endraw")) continue;
      p = skip_space(p + 6);
      size_t after;
      if (starts(p, "+%}")) after = p + 3;
      else if (starts(p, "-%}")) after = skip_space(p + 3);
      else if (starts(p, "%}")) after = p + 2 + (p + 2 < src_.size() && src_[p + 2] == '\n');
      else continue;
      size_t text_end = i;
      if (sign == '-') {
        text_end = rstrip_end(body, i);
      } else if (sign != '+') {
        size_t nl = src_.rfind('\n', i - 1);
        size_t l_pos = (nl == std::string::npos || nl < body) ? body : nl + 1;
        if ((l_pos > body || line_starting) && l_pos < i && all_space(l_pos, i)) text_end = l_pos;
      }
      emit_data(body, text_end);
      line_starting = src_[after - 1] == '\n';
      return after;
    }
    fail(tag, "the {% raw %} block is not closed by {% endraw %}");
  }

  size_t lex_comment(size_t tag, size_t p, bool& line_starting) {
    for (size_t i = p; i + 1 < src_.size(); ++i) {
      size_t after;
      if ((src_[i] == '+' || src_[i] == '-') && starts(i + 1, "#}")) {
        after = src_[i] == '-' ? skip_space(i + 3) : i + 3;
      } else if (starts(i, "#}")) {
        after = i + 2 + (i + 2 < src_.size() && src_[i + 2] == '\n');
      } else {
        continue;
      }
      line_starting = src_[after - 1] == '\n';
      return after;
    }
    fail(tag, "the comment {# is not closed by #}");
  }

  size_t lex_tag(size_t tag, size_t p, bool block, bool& line_starting) {
    emit(block ? Tok::kBlockBegin : Tok::kVarBegin, block ? "{%" : "{{", tag);
    std::vector<char> balance;  // the closing brackets expected
    const size_t n = src_.size();
    while (true) {
      if (p >= n) fail(tag, cat("unexpected end of template: the tag ", block ? "{%" : "{{", " is not closed"));
      if (balance.empty()) {
        size_t after = std::string::npos;
        if (block) {
          if (starts(p, "+%}")) after = p + 3;
          else if (starts(p, "-%}")) after = skip_space(p + 3);
          else if (starts(p, "%}")) after = p + 2 + (p + 2 < n && src_[p + 2] == '\n');
        } else {
          if (starts(p, "-}}")) after = skip_space(p + 3);
          else if (starts(p, "}}")) after = p + 2;
        }
        if (after != std::string::npos) {
          emit(block ? Tok::kBlockEnd : Tok::kVarEnd, block ? "%}" : "}}", p);
          line_starting = src_[after - 1] == '\n';
          return after;
        }
      }
      size_t len;
      if (space_at(p, &len)) {
        p += len;
        continue;
      }
      char c = src_[p];
      if (is_digit(c)) {
        p = lex_number(p);
      } else if (is_name_start(c)) {
        size_t e = p;
        while (e < n && is_name_char(src_[e])) ++e;
        emit(Tok::kName, src_.substr(p, e - p), p);
        p = e;
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                     "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};
        std::string op;
        for (const char* o : kOps)
          if (starts(p, o)) {
            op = o;
            break;
          }
        if (op.empty()) fail(p, cat("unexpected character '", std::string(code_points(src_.substr(p, 4))[0]), "'"));
        if (op == "(" || op == "[" || op == "{") {
          balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (balance.empty()) fail(p, cat("unexpected '", op, "'"));
          if (balance.back() != op[0]) fail(p, cat("unexpected '", op, "', expected '", balance.back(), "'"));
          balance.pop_back();
        }
        emit(Tok::kOperator, op, p);
        p += op.size();
      }
    }
  }

  size_t digits(size_t i, bool hex = false) const {
    // \d+ with single underscores between digits, as Python literals allow
    while (i < src_.size()) {
      char c = src_[i];
      bool d = is_digit(c) || (hex && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')));
      if (d) ++i;
      else if (c == '_' && i + 1 < src_.size() && (is_digit(src_[i + 1]) || hex)) ++i;
      else break;
    }
    return i;
  }

  size_t lex_number(size_t p) {
    const size_t n = src_.size();
    auto clean = [](std::string s) {
      s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
      return s;
    };
    if (src_[p] == '0' && p + 1 < n && (src_[p + 1] == 'x' || src_[p + 1] == 'X' || src_[p + 1] == 'o' ||
                                        src_[p + 1] == 'O' || src_[p + 1] == 'b' || src_[p + 1] == 'B')) {
      char base = static_cast<char>(src_[p + 1] | 0x20);
      size_t e = digits(p + 2, base == 'x');
      Token t{Tok::kInteger, src_.substr(p, e - p), 0, 0, line_of(p), column_of(p)};
      t.integer = std::stoll(clean(src_.substr(p + 2, e - p - 2)), nullptr, base == 'x' ? 16 : base == 'o' ? 8 : 2);
      tokens_.push_back(t);
      return e;
    }
    size_t e = digits(p);
    bool is_float = false;
    bool after_dot = p > 0 && src_[p - 1] == '.';  // foo.0.1 is two lookups, not a float
    if (!after_dot && e + 1 < n && src_[e] == '.' && is_digit(src_[e + 1])) {
      e = digits(e + 1);
      is_float = true;
    }
    if (!after_dot && e < n && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < n && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < n && is_digit(src_[x])) {
        e = digits(x);
        is_float = true;
      }
    }
    std::string text = clean(src_.substr(p, e - p));
    Token t{is_float ? Tok::kFloat : Tok::kInteger, src_.substr(p, e - p), 0, 0, line_of(p), column_of(p)};
    if (is_float) {
      t.number = std::stod(text);
    } else {
      try {
        t.integer = std::stoll(text);
      } catch (const std::out_of_range&) {
        fail(p, cat("the integer ", text, " is too large"));
      }
    }
    tokens_.push_back(t);
    return e;
  }

  size_t lex_string(size_t p) {
    char quote = src_[p];
    size_t i = p + 1;
    while (i < src_.size() && src_[i] != quote) i += src_[i] == '\\' ? 2 : 1;
    if (i >= src_.size()) fail(p, "the string is not closed");
    emit(Tok::kString, unescape(p + 1, i), p);
    return i + 1;
  }

  // Python's "unicode-escape" decoding, which jinja2 applies to string literals.
  std::string unescape(size_t b, size_t e) const {
    std::string out;
    for (size_t i = b; i < e; ++i) {
      char c = src_[i];
      if (c != '\\' || i + 1 >= e) {
        out += c;
        continue;
      }
      char x = src_[++i];
      switch (x) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          size_t len = x == 'x' ? 2 : x == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (size_t k = 1; k <= len; ++k) {
            char h = i + k < e ? src_[i + k] : 0;
            int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (d < 0) fail(i - 1, cat("truncated \\", x, " escape in a string"));
            cp = cp * 16 + static_cast<uint32_t>(d);
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail(i - 1, "the escape names no Unicode character");
          utf8_append(out, cp);
          i += len;
          break;
        }
        case 'N': fail(i - 1, "\\N{...} escapes are not supported");
        default:
          if (x >= '0' && x <= '7') {
            uint32_t cp = static_cast<uint32_t>(x - '0');
            for (int k = 0; k < 2 && i + 1 < e && src_[i + 1] >= '0' && src_[i + 1] <= '7'; ++k) cp = cp * 8 + (src_[++i] - '0');
            utf8_append(out, cp);
          } else {
            out += '\\';
            out += x;
          }
      }
    }
    return out;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace onyx::genai::jinja
