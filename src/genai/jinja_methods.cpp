// The Python methods that templates call on strings, lists and dicts, the global functions
// of jinja2 and transformers (namespace, range, dict, raise_exception, strftime_now), and
// Python's two string formatting languages (% and str.format).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>

#include "genai/jinja_render.h"
#include "genai/unicode.h"
#include "onyx/error.h"

namespace onyx::genai::jinja {

Params::Params(const char* function, Args& args, std::initializer_list<const char*> names, bool extra_positional)
    : slots_(names.size()), given_(names.size(), false) {
  std::vector<const char*> n(names);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < n.size()) {
      slots_[i] = args.positional[i];
      given_[i] = true;
    } else if (extra_positional) {
      extra_.push_back(args.positional[i]);
    } else {
      throw Error(cat(function, "() takes at most ", n.size(), " argument(s) (", args.positional.size(), " given)"));
    }
  }
  for (auto& [key, value] : args.keywords) {
    auto it = std::find_if(n.begin(), n.end(), [&k = key](const char* s) { return k == s; });
    if (it == n.end()) throw Error(cat(function, "() got an unexpected keyword argument '", key, "'"));
    size_t i = static_cast<size_t>(it - n.begin());
    if (given_[i]) throw Error(cat(function, "() got multiple values for argument '", key, "'"));
    slots_[i] = value;
    given_[i] = true;
  }
}

namespace {

std::string need_str(const Value& v, const char* what) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) throw Error(cat(what, " must be str, not ", v.type_name()));
  return v.str();
}

int64_t code_point_offset(const std::string& s, size_t byte) {
  int64_t n = 0;
  for (size_t i = 0; i < byte && i < s.size(); ++i) n += (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
  return n;
}

List split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  List out;
  if (sep.is_none() || sep.is_undefined()) {
    // runs of whitespace separate, and none are kept at the ends
    std::vector<std::string_view> cps = code_points(s);
    auto space = [&](size_t i) {
      char32_t c;
      utf8_next(cps[i], 0, c);
      return is_py_space(c);
    };
    std::vector<std::pair<size_t, size_t>> words;  // [begin, end) in code points
    for (size_t i = 0; i < cps.size();) {
      while (i < cps.size() && space(i)) ++i;
      if (i == cps.size()) break;
      size_t b = i;
      while (i < cps.size() && !space(i)) ++i;
      words.emplace_back(b, i);
    }
    auto text = [&](size_t b, size_t e) {
      std::string t;
      for (size_t k = b; k < e; ++k) t.append(cps[k]);
      return t;
    };
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) + 1 >= words.size()) {
      for (auto [b, e] : words) out.emplace_back(text(b, e));
      return out;
    }
    size_t m = static_cast<size_t>(maxsplit);
    if (!from_right) {
      for (size_t k = 0; k < m; ++k) out.emplace_back(text(words[k].first, words[k].second));
      std::string rest = py_strip(text(words[m].first, cps.size()), false, true, std::nullopt);
      out.emplace_back(rest);
    } else {
      size_t first = words.size() - m;
      out.emplace_back(py_strip(text(0, words[first - 1].second), true, false, std::nullopt));
      for (size_t k = first; k < words.size(); ++k) out.emplace_back(text(words[k].first, words[k].second));
    }
    return out;
  }
  std::string d = need_str(sep, "the separator");
  if (d.empty()) throw Error("empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t pos = 0;
    int64_t done = 0;
    for (size_t hit; (maxsplit < 0 || done < maxsplit) && (hit = s.find(d, pos)) != std::string::npos; ++done) {
      parts.push_back(s.substr(pos, hit - pos));
      pos = hit + d.size();
    }
    parts.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    int64_t done = 0;
    while ((maxsplit < 0 || done < maxsplit) && end >= d.size()) {
      size_t hit = s.rfind(d, end - d.size());
      if (hit == std::string::npos) break;
      parts.insert(parts.begin(), s.substr(hit + d.size(), end - hit - d.size()));
      end = hit;
      ++done;
    }
    parts.insert(parts.begin(), s.substr(0, end));
  }
  for (auto& p : parts) out.emplace_back(std::move(p));
  return out;
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list() && affix.seq() == Seq::kTuple) {
    for (const Value& a : affix.items())
      if (one(need_str(a, "a tuple item"))) return true;
    return false;
  }
  return one(need_str(affix, prefix ? "startswith's argument" : "endswith's argument"));
}

bool is_cased(char32_t c) {
  std::string s;
  utf8_append(s, c);
  return py_upper(s) != s || py_lower(s) != s;
}

std::string str_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    size_t n = utf8_next(s, i, c);
    std::string ch = s.substr(i, n);
    out += prev_cased ? py_lower(ch) : py_upper(ch);
    prev_cased = is_cased(c);
    i += n;
  }
  return out;
}

template <class Pred>
bool all_chars(const std::string& s, Pred pred) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    i += utf8_next(s, i, c);
    if (!pred(c)) return false;
  }
  return true;
}

std::string pad(const std::string& s, int64_t width, char align, const std::string& fill = " ") {
  int64_t len = py_len(Value(s));
  if (width <= len) return s;
  int64_t total = width - len;
  auto rep = [&](int64_t n) {
    std::string o;
    for (int64_t i = 0; i < n; ++i) o += fill;
    return o;
  };
  if (align == '<') return s + rep(total);
  if (align == '>') return rep(total) + s;
  return rep(total / 2) + s + rep(total - total / 2);
}

std::optional<Value> string_method(Renderer& r, const std::string& s, const std::string& name, Args& args) {
  (void)r;
  auto chars_arg = [](const Params& p) -> std::optional<std::string> {
    if (!p.given(0) || p.get(0)->is_none()) return std::nullopt;
    return need_str(*p.get(0), "the characters to strip");
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Params p(name.c_str(), args, {"chars"});
    return Value(py_strip(s, name != "rstrip", name != "lstrip", chars_arg(p)));
  }
  if (name == "split" || name == "rsplit") {
    Params p(name.c_str(), args, {"sep", "maxsplit"});
    return Value::list(split(s, p.value_or(0, Value::none()), p.value_or(1, Value(-1)).as_int(), name == "rsplit"));
  }
  if (name == "splitlines") {
    Params p("splitlines", args, {"keepends"});
    List out;
    for (std::string& line : split_lines(s, truthy(p.value_or(0, Value(false))))) out.emplace_back(std::move(line));
    return Value::list(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    Params p(name.c_str(), args, {"affix"});
    if (!p.given(0)) throw Error(cat(name, "() takes at least 1 argument (0 given)"));
    return Value(affix_match(s, *p.get(0), name == "startswith"));
  }
  if (name == "upper" || name == "lower" || name == "title") {
    Params p(name.c_str(), args, {});
    return Value(name == "upper" ? py_upper(s) : name == "lower" ? py_lower(s) : str_title(s));
  }
  if (name == "capitalize") {
    Params p("capitalize", args, {});
    std::vector<std::string_view> cps = code_points(s);
    if (cps.empty()) return Value("");
    return Value(py_upper(cps[0]) + py_lower(s.substr(cps[0].size())));
  }
  if (name == "replace") {
    Params p("replace", args, {"old", "new", "count"});
    if (!p.given(0) || !p.given(1)) throw Error("replace() takes at least 2 arguments");
    std::string old = need_str(*p.get(0), "replace's old"), with = need_str(*p.get(1), "replace's new");
    int64_t count = p.value_or(2, Value(-1)).as_int();
    std::string out;
    if (old.empty()) {
      int64_t done = 0;
      std::vector<std::string_view> cps = code_points(s);
      for (size_t i = 0; i <= cps.size(); ++i) {
        if (count < 0 || done < count) out += with, ++done;
        if (i < cps.size()) out.append(cps[i]);
      }
      return Value(out);
    }
    size_t pos = 0;
    for (int64_t done = 0; count < 0 || done < count; ++done) {
      size_t hit = s.find(old, pos);
      if (hit == std::string::npos) break;
      out.append(s, pos, hit - pos);
      out += with;
      pos = hit + old.size();
    }
    out.append(s, pos, std::string::npos);
    return Value(out);
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    Params p(name.c_str(), args, {"sub", "start", "end"});
    if (!p.given(0)) throw Error(cat(name, "() takes at least 1 argument (0 given)"));
    std::string sub = need_str(*p.get(0), "the substring");
    std::vector<std::string_view> cps = code_points(s);
    int64_t n = static_cast<int64_t>(cps.size());
    auto norm = [&](size_t i, int64_t dflt) {
      if (!p.given(i) || p.get(i)->is_none()) return dflt;
      int64_t x = p.get(i)->as_int();
      if (x < 0) x += n;
      return std::clamp<int64_t>(x, 0, n);
    };
    int64_t b = norm(1, 0), e = norm(2, n);
    size_t bb = 0, eb = 0;
    for (int64_t k = 0; k < n; ++k) {
      if (k < b) bb += cps[static_cast<size_t>(k)].size();
      if (k < e) eb += cps[static_cast<size_t>(k)].size();
    }
    std::string window = e >= b ? s.substr(bb, eb - bb) : "";
    if (e < b) window.clear();
    if (name == "count") {
      if (e < b) return Value(0);
      if (sub.empty()) return Value(py_len(Value(window)) + 1);
      int64_t c = 0;
      for (size_t pos = window.find(sub); pos != std::string::npos; pos = window.find(sub, pos + sub.size())) ++c;
      return Value(c);
    }
    size_t hit = e < b ? std::string::npos : (name[0] == 'r' ? window.rfind(sub) : window.find(sub));
    if (hit == std::string::npos) {
      if (name == "index" || name == "rindex") throw Error("substring not found");
      return Value(-1);
    }
    return Value(b + code_point_offset(window, hit));
  }
  if (name == "join") {
    Params p("join", args, {"iterable"});
    if (!p.given(0)) throw Error("join() takes exactly one argument (0 given)");
    std::string out;
    List items = iterate(*p.get(0));
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string())
        throw Error(cat("sequence item ", i, ": expected str instance, ", items[i].type_name(), " found"));
      if (i) out += s;
      out += items[i].str();
    }
    return Value(out);
  }
  if (name == "format") return Value(brace_format(s, args));
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") {
    Params p(name.c_str(), args, {});
    return Value(all_chars(s, [](char32_t c) { return c >= '0' && c <= '9'; }));
  }
  if (name == "isalpha") {
    Params p("isalpha", args, {});
    return Value(all_chars(s, [](char32_t c) { return is_word_char(c) && !(c >= '0' && c <= '9') && c != '_'; }));
  }
  if (name == "isalnum") {
    Params p("isalnum", args, {});
    return Value(all_chars(s, [](char32_t c) { return is_word_char(c) && c != '_'; }));
  }
  if (name == "isspace") {
    Params p("isspace", args, {});
    return Value(all_chars(s, is_py_space));
  }
  if (name == "isupper" || name == "islower") {
    Params p(name.c_str(), args, {});
    bool upper = name == "isupper";
    bool cased = false, ok = true;
    for (size_t i = 0; i < s.size();) {
      char32_t c;
      size_t n = utf8_next(s, i, c);
      std::string ch = s.substr(i, n);
      if (is_cased(c)) {
        cased = true;
        if ((upper ? py_upper(ch) : py_lower(ch)) != ch) ok = false;
      }
      i += n;
    }
    return Value(cased && ok);
  }
  if (name == "zfill") {
    Params p("zfill", args, {"width"});
    int64_t width = p.value_or(0, Value(0)).as_int(), len = py_len(Value(s));
    if (width <= len) return Value(s);
    size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
    return Value(s.substr(0, sign) + std::string(static_cast<size_t>(width - len), '0') + s.substr(sign));
  }
  if (name == "ljust" || name == "rjust" || name == "center") {
    Params p(name.c_str(), args, {"width", "fillchar"});
    std::string fill = p.given(1) ? need_str(*p.get(1), "the fill character") : " ";
    int64_t width = p.value_or(0, Value(0)).as_int();
    return Value(pad(s, width, name == "ljust" ? '<' : name == "rjust" ? '>' : '^', fill));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    Params p(name.c_str(), args, {"affix"});
    std::string a = p.given(0) ? need_str(*p.get(0), "the affix") : "";
    bool prefix = name == "removeprefix";
    if (!a.empty() && affix_match(s, Value(a), prefix))
      return Value(prefix ? s.substr(a.size()) : s.substr(0, s.size() - a.size()));
    return Value(s);
  }
  return std::nullopt;
}

const std::set<std::string>& string_methods() {
  static const std::set<std::string> kNames = {
      "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "upper", "lower",
      "title", "capitalize", "replace", "find", "rfind", "index", "rindex", "count", "join", "format", "isdigit",
      "isnumeric", "isdecimal", "isalpha", "isalnum", "isspace", "isupper", "islower", "zfill", "ljust", "rjust",
      "center", "removeprefix", "removesuffix"};
  return kNames;
}

}  // namespace

bool is_unsafe_method(const Value& self, const std::string& name) {
  static const std::set<std::string> kList = {"append", "clear", "pop", "reverse", "insert", "sort", "extend", "remove"};
  static const std::set<std::string> kDict = {"clear", "pop", "popitem", "setdefault", "update"};
  if (self.is_list() && self.seq() == Seq::kList) return kList.count(name) != 0;
  if (self.is_dict()) return kDict.count(name) != 0;
  return false;
}

bool has_method(const Value& self, const std::string& name) {
  if (self.is_string()) return string_methods().count(name) != 0;
  if (self.is_list() && self.seq() != Seq::kIterator) return name == "index" || name == "count" || name == "copy";
  if (self.is_dict()) return name == "get" || name == "items" || name == "keys" || name == "values" || name == "copy";
  return false;
}

namespace {

// markupsafe's Markup methods escape their string arguments and return Markup.
Value markup_method(Renderer& r, const Value& self, const std::string& name, Args& args) {
  static const std::set<std::string> kKeep = {"strip", "lstrip", "rstrip", "upper", "lower", "title", "capitalize",
                                              "replace", "center", "ljust", "rjust", "zfill", "format",
                                              "removeprefix", "removesuffix"};
  auto escape_arg = [](Value& v) {
    if (v.is_string() && !v.is_markup()) v = Value::markup(html_escape(v.str()));
    else if (!v.is_string() && !v.is_undefined() && !v.is_none() && !v.is_number()) v = Value::markup(html_escape(py_str(v)));
  };
  if (name == "join") {
    Params p("join", args, {"iterable"});
    if (!p.given(0)) throw Error("join() takes exactly one argument (0 given)");
    List items = iterate(*p.get(0));
    for (Value& it : items) escape_arg(it);
    Args a;
    a.positional.push_back(Value::list(std::move(items)));
    return Value::markup(string_method(r, self.str(), name, a)->str());
  }
  bool keep = kKeep.count(name) != 0;
  if (keep && name != "strip" && name != "lstrip" && name != "rstrip") {
    for (Value& v : args.positional) escape_arg(v);
    for (auto& [k, v] : args.keywords) escape_arg(v);
  }
  Value out = *string_method(r, self.str(), name, args);
  if (keep) return Value::markup(out.str());
  if ((name == "split" || name == "rsplit" || name == "splitlines") && out.is_list()) {
    List items;
    for (const Value& v : out.items()) items.push_back(Value::markup(v.str()));
    return Value::list(std::move(items));
  }
  return out;
}

}  // namespace

// str.splitlines(): \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, \u2028 and \u2029 end lines; with
// keepends each line keeps its ending.
std::vector<std::string> split_lines(const std::string& s, bool keepends) {
  std::vector<std::string> lines;
  std::string cur;
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    const size_t n = utf8_next(s, i, c);
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                     c == 0x2028 || c == 0x2029;
    if (!brk) {
      cur.append(s, i, n);
      i += n;
      continue;
    }
    const size_t len = (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ? 2 : n;
    if (keepends) cur.append(s, i, len);
    lines.push_back(std::move(cur));
    cur.clear();
    i += len;
  }
  if (!cur.empty()) lines.push_back(std::move(cur));
  return lines;
}

std::optional<Value> call_method(Renderer& r, const Value& self, const std::string& name, Args& args) {
  if (self.is_markup() && string_methods().count(name)) return markup_method(r, self, name, args);
  if (self.is_string()) return string_method(r, self.str(), name, args);
  if (self.is_list()) {
    const List& items = self.items();
    if (name == "copy") {
      Params p("copy", args, {});
      return Value::list(items, self.seq());
    }
    Params p(name.c_str(), args, {"value"});
    if (!p.given(0)) throw Error(cat(name, "() takes exactly one argument (0 given)"));
    int64_t count = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!py_equal(items[i], *p.get(0))) continue;
      if (name == "index") return Value(static_cast<int64_t>(i));
      ++count;
    }
    if (name == "index") throw Error(cat(py_repr(*p.get(0)), " is not in list"));
    return Value(count);
  }
  if (self.is_dict()) {
    const Dict& d = self.dict();
    if (name == "get") {
      Params p("get", args, {"key", "default"});
      if (!p.given(0)) throw Error("get expected at least 1 argument, got 0");
      if (const Value* v = d.find(*p.get(0))) return *v;
      return p.value_or(1, Value::none());
    }
    Params p(name.c_str(), args, {});
    if (name == "copy") return self;
    List out;
    for (const auto& [k, v] : d.entries) {
      if (name == "items") out.push_back(Value::list({k, v}, Seq::kTuple));
      else out.push_back(name == "keys" ? k : v);
    }
    return Value::list(std::move(out));
  }
  return std::nullopt;
}

// ---- formatting -------------------------------------------------------------------------------

namespace {

// The widest field and the longest precision a format may ask for: larger ones are refused (the
// digits used to overflow an int, and a field of millions of characters is a template's bug).
constexpr int kMaxFormatCount = 1 << 20;

// The count whose digits start at s[i] (a width or precision), i moved past them; -1 if there are
// none.
int read_format_count(const std::string& s, size_t& i, const char* what) {
  if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return -1;
  int64_t n = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    n = n * 10 + (s[i++] - '0');
    if (n > kMaxFormatCount) throw Error(cat("format ", what, " past ", kMaxFormatCount, " in '", s, "'"));
  }
  return static_cast<int>(n);
}

// printf's output for one value, as long as it is.
template <class T>
std::string printf_string(const std::string& spec, T value) {
  const int n = std::snprintf(nullptr, 0, spec.c_str(), value);
  if (n < 0) throw Error(cat("format '", spec, "' failed"));
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), spec.c_str(), value);
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string format_number(char type, const std::string& flags, int width, int precision, const Value& v) {
  std::string spec = "%" + flags;
  if (width >= 0) spec += std::to_string(width);
  if (precision >= 0) spec += "." + std::to_string(precision);
  if (type == 'd' || type == 'i' || type == 'u' || type == 'x' || type == 'X' || type == 'o' || type == 'c') {
    int64_t i;
    if (v.is_integral()) i = v.as_int();
    else if (v.is_float()) i = static_cast<int64_t>(std::trunc(v.as_float()));
    else throw Error(cat("%", type, " format: a real number is required, not ", v.type_name()));
    if (type == 'c') {
      std::string s;
      utf8_append(s, static_cast<char32_t>(i));
      return s;
    }
    spec += "ll";
    spec += type == 'i' || type == 'u' ? 'd' : type;
    return printf_string(spec, static_cast<long long>(i));
  }
  if (!v.is_number()) throw Error(cat("%", type, " format: a real number is required, not ", v.type_name()));
  spec += type;
  return printf_string(spec, v.as_float());
}

}  // namespace

std::string percent_format(const std::string& format, const Value& args) {
  std::vector<Value> positional;
  const Dict* named = args.is_dict() ? &args.dict() : nullptr;
  if (args.is_list() && args.seq() == Seq::kTuple) positional = args.items();
  else if (!named) positional.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) throw Error("incomplete format");
    const Value* arg = nullptr;
    if (format[i] == '(') {
      size_t close = format.find(')', i);
      if (close == std::string::npos || !named) throw Error("format requires a mapping");
      const Value* v = named->find(std::string_view(format).substr(i + 1, close - i - 1));
      if (!v) throw Error(cat("KeyError: '", format.substr(i + 1, close - i - 1), "'"));
      arg = v;
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() && std::string("-+ #0").find(format[i]) != std::string::npos) flags += format[i++];
    const int width = read_format_count(format, i, "width");
    int precision = -1;
    if (i < format.size() && format[i] == '.') {
      ++i;
      precision = std::max(read_format_count(format, i, "precision"), 0);
    }
    if (i >= format.size()) throw Error("incomplete format");
    char type = format[i];
    if (type == '%') {
      out += '%';
      continue;
    }
    if (!arg) {
      if (named) arg = &args;
      else if (next < positional.size()) arg = &positional[next++];
      else throw Error("not enough arguments for format string");
    }
    if (type == 's' || type == 'r' || type == 'a') {
      std::string s = type == 's' ? py_str(*arg) : py_repr(*arg);
      if (precision >= 0) {
        std::vector<std::string_view> cps = code_points(s);
        if (cps.size() > static_cast<size_t>(precision)) {
          std::string cut;
          for (int k = 0; k < precision; ++k) cut.append(cps[static_cast<size_t>(k)]);
          s = cut;
        }
      }
      out += pad(s, width, flags.find('-') != std::string::npos ? '<' : '>');
    } else if (std::string("diuxXoeEfFgGc").find(type) != std::string::npos) {
      out += format_number(type, flags, width, precision, *arg);
    } else {
      throw Error(cat("unsupported format character '", type, "'"));
    }
  }
  if (!named && next < positional.size()) throw Error("not all arguments converted during string formatting");
  return out;
}

namespace {

// format(value, spec) for the mini-language's common part: [[fill]align][sign][0][width][.precision][type]
std::string apply_spec(const Value& v, const std::string& spec) {
  if (spec.empty()) return py_str(v);
  size_t i = 0;
  std::string fill = " ";
  char align = 0;
  std::vector<std::string_view> cps = code_points(spec);
  if (cps.size() >= 2 && (cps[1] == "<" || cps[1] == ">" || cps[1] == "^")) {
    fill = std::string(cps[0]);
    align = cps[1][0];
    i = cps[0].size() + 1;
  } else if (!spec.empty() && (spec[0] == '<' || spec[0] == '>' || spec[0] == '^')) {
    align = spec[0];
    i = 1;
  }
  std::string sign;
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  bool zero = false;
  if (i < spec.size() && spec[i] == '0') zero = true, ++i;
  const int width = read_format_count(spec, i, "width");
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    precision = std::max(read_format_count(spec, i, "precision"), 0);
  }
  char type = i < spec.size() ? spec[i++] : 0;
  if (i != spec.size()) throw Error(cat("invalid format specifier '", spec, "'"));
  std::string body;
  if (v.is_string() && (type == 0 || type == 's')) {
    body = v.str();
    if (precision >= 0 && py_len(v) > precision) {
      std::vector<std::string_view> c = code_points(body);
      body.clear();
      for (int k = 0; k < precision; ++k) body.append(c[static_cast<size_t>(k)]);
    }
    return pad(body, width, align ? align : '<', fill);
  }
  if (v.is_number()) {
    std::string flags = sign == "-" ? "" : sign;
    if (type == 0 && v.is_integral()) type = 'd';
    if (type == 0) {
      body = precision >= 0 ? format_number('g', flags, -1, precision, v) : (sign == "+" && v.as_float() >= 0 ? "+" : "") + py_str(v);
    } else {
      body = format_number(type == 'n' ? 'd' : type, flags, -1, precision, v);
    }
    if (zero && !align) {
      size_t s = !body.empty() && (body[0] == '+' || body[0] == '-' || body[0] == ' ') ? 1 : 0;
      int64_t len = static_cast<int64_t>(body.size());
      if (width > len) body.insert(s, std::string(static_cast<size_t>(width - len), '0'));
      return body;
    }
    return pad(body, width, align ? align : '>', fill);
  }
  throw Error(cat("unsupported format string passed to ", v.type_name(), ".__format__"));
}

}  // namespace

std::string brace_format(const std::string& format, const Args& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      throw Error("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = format.find('}', i);
    if (close == std::string::npos) throw Error("Single '{' encountered in format string");
    std::string field = format.substr(i + 1, close - i - 1);
    i = close;
    std::string spec, conversion;
    if (size_t colon = field.find(':'); colon != std::string::npos) spec = field.substr(colon + 1), field.resize(colon);
    if (size_t bang = field.find('!'); bang != std::string::npos) conversion = field.substr(bang + 1), field.resize(bang);
    Value v;
    if (field.empty()) {
      if (auto_index >= args.positional.size()) throw Error(cat("Replacement index ", auto_index, " out of range for positional args tuple"));
      v = args.positional[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), [](char x) { return x >= '0' && x <= '9'; })) {
      size_t k = std::stoul(field);
      if (k >= args.positional.size()) throw Error(cat("Replacement index ", k, " out of range for positional args tuple"));
      v = args.positional[k];
    } else {
      auto it = std::find_if(args.keywords.begin(), args.keywords.end(), [&](const auto& kv) { return kv.first == field; });
      if (it == args.keywords.end()) throw Error(cat("KeyError: '", field, "'"));
      v = it->second;
    }
    if (conversion == "r") v = Value(py_repr(v));
    else if (conversion == "s") v = Value(py_str(v));
    else if (!conversion.empty()) throw Error(cat("Unknown conversion specifier ", conversion));
    out += apply_spec(v, spec);
  }
  return out;
}

// ---- globals ----------------------------------------------------------------------------------

namespace {

Value g_range(Renderer&, Args& a) {
  if (!a.keywords.empty()) throw Error("range() takes no keyword arguments");
  std::vector<int64_t> n;
  for (const Value& v : a.positional) {
    if (!v.is_integral()) throw Error(cat("'", v.type_name(), "' object cannot be interpreted as an integer"));
    n.push_back(v.as_int());
  }
  if (n.empty() || n.size() > 3) throw Error(cat("range expected 1 to 3 arguments, got ", n.size()));
  int64_t start = n.size() > 1 ? n[0] : 0, stop = n.size() > 1 ? n[1] : n[0], step = n.size() > 2 ? n[2] : 1;
  if (step == 0) throw Error("range() arg 3 must not be zero");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (out.size() >= 100000) throw Error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    out.emplace_back(i);
  }
  return Value::list(std::move(out));
}

Dict dict_from(Args& a, const char* what) {
  Dict d;
  if (a.positional.size() > 1) throw Error(cat(what, " expected at most 1 argument, got ", a.positional.size()));
  if (!a.positional.empty()) {
    const Value& src = a.positional[0];
    if (src.is_dict()) {
      d = src.dict();
    } else {
      for (const Value& pair : iterate(src)) {
        List kv = iterate(pair);
        if (kv.size() != 2) throw Error(cat(what, ": a sequence element has length ", kv.size(), "; 2 is required"));
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : a.keywords) d.set(Value(k), v);
  return d;
}

Value g_dict(Renderer&, Args& a) { return Value::dict(dict_from(a, "dict")); }

// The `dict` global is Python's dict type: dict.fromkeys(keys, value), and (a quirk templates
// rely on) dict.anything(...) is dict[...] (a generic alias), which calls dict(...).
class DictType : public Function {
 public:
  DictType() : Function("dict", g_dict) {}
  std::string type_name() const override { return "type"; }
  std::string repr() const override { return "<class 'dict'>"; }
  std::optional<Value> attr(const std::string& name) const override {
    if (name == "fromkeys")
      return Value::object(std::make_shared<Function>("fromkeys", [](Renderer&, Args& a) {
        Params p("fromkeys", a, {"iterable", "value"});
        if (!p.given(0)) throw Error("fromkeys expected at least 1 argument, got 0");
        Dict d;
        for (const Value& k : iterate(*p.get(0))) d.set(k, p.value_or(1, Value::none()));
        return Value::dict(std::move(d));
      }));
    return Value::object(std::make_shared<Function>("dict", g_dict));
  }
};

Value g_namespace(Renderer& r, Args& a) { return r.new_namespace(dict_from(a, "namespace")); }

Value g_raise_exception(Renderer&, Args& a) {
  std::string message = a.positional.empty() ? "" : py_str(a.positional[0]);
  throw Error(message).add_context("the template raised an error");
}

Value g_strftime_now(Renderer&, Args& a) {
  Params p("strftime_now", a, {"format"});
  std::string format = p.given(0) ? need_str(*p.get(0), "strftime_now's format") : "";
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string buf(256 + format.size() * 4, '\0');
  size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &local);
  if (n == 0 && !format.empty()) buf.clear();
  buf.resize(n);
  return Value(buf);
}

}  // namespace

std::optional<Value> find_global(const std::string& name) {
  static const std::vector<std::pair<std::string, Value>> kGlobals = [] {
    std::vector<std::pair<std::string, Value>> g;
    auto add = [&](const char* n, Function::Fn fn) { g.emplace_back(n, Value::object(std::make_shared<Function>(n, std::move(fn)))); };
    add("range", g_range);
    g.emplace_back("dict", Value::object(std::make_shared<DictType>()));
    add("namespace", g_namespace);
    add("raise_exception", g_raise_exception);
    add("strftime_now", g_strftime_now);
    return g;
  }();
  for (const auto& [n, v] : kGlobals)
    if (n == name) return v;
  return std::nullopt;
}

}  // namespace onyx::genai::jinja
