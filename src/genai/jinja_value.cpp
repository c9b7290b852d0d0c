#include "genai/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "genai/unicode.h"
#include "onyx/error.h"

namespace onyx::genai::jinja {

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.p_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.i_ = 1;
  return v;
}

Value same_kind_string(const Value& like, std::string s) {
  return like.is_markup() ? Value::markup(std::move(s)) : Value(std::move(s));
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::list(List items, Seq seq) {
  Value v;
  v.kind_ = Kind::kList;
  v.p_ = std::make_shared<const ListData>(ListData{std::move(items), seq});
  return v;
}

Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.p_ = std::make_shared<const Dict>(std::move(d));
  return v;
}

Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.kind_ = Kind::kObject;
  v.p_ = std::move(o);
  return v;
}

std::shared_ptr<Object> Value::object_ptr() const {
  return std::static_pointer_cast<Object>(std::const_pointer_cast<void>(p_));
}

const std::string& Value::undefined_hint() const {
  static const std::string kNoHint = "a value is undefined";
  return p_ ? *static_cast<const std::string*>(p_.get()) : kNoHint;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return seq() == Seq::kList ? "list" : seq() == Seq::kTuple ? "tuple" : "generator";
    case Kind::kDict: return "dict";
    case Kind::kObject: return object().type_name();
  }
  return "?";
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : entries)
    if (py_equal(k, key)) return &v;
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : entries)
    if (py_equal(k, key)) {
      v = std::move(value);
      return;
    }
  entries.emplace_back(std::move(key), std::move(value));
}

std::optional<Value> Object::attr(const std::string&) const { return std::nullopt; }

std::string Object::repr() const { return cat("<", type_name(), " object>"); }

std::string Function::repr() const { return cat("<built-in function ", name_, ">"); }

Value Object::call(Renderer&, Args&) { throw Error(cat("'", type_name(), "' object is not callable")); }

std::string Namespace::repr() const { return "<Namespace " + py_repr(Value::dict(attrs)) + ">"; }

std::optional<Value> Namespace::attr(const std::string& name) const {
  if (const Value* v = attrs.find(name)) return *v;
  return std::nullopt;
}

void fail_undefined(const Value& v) { throw Error(v.undefined_hint()); }

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool:
    case Value::Kind::kInt: return v.as_int() != 0;
    case Value::Kind::kFloat: return v.as_float() != 0.0;
    case Value::Kind::kString: return !v.str().empty();
    case Value::Kind::kList: return v.seq() == Seq::kIterator || !v.items().empty();
    case Value::Kind::kDict: return v.dict().size() != 0;
    case Value::Kind::kObject: return true;
  }
  return false;
}

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.str() == b.str();
    case Value::Kind::kList: {
      if ((a.seq() == Seq::kTuple) != (b.seq() == Seq::kTuple)) return false;
      if (a.seq() == Seq::kIterator || b.seq() == Seq::kIterator) return &a.items() == &b.items();
      const List &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!py_equal(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const Dict &x = a.dict(), &y = b.dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* w = y.find(k);
        if (!w || !py_equal(v, *w)) return false;
      }
      return true;
    }
    case Value::Kind::kObject: return &a.object() == &b.object();
    default: return false;
  }
}

int py_compare(const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.str().compare(b.str()) < 0 ? -1 : a.str() == b.str() ? 0 : 1;
  if (a.is_list() && b.is_list() && a.seq() == b.seq() && a.seq() != Seq::kIterator) {
    const List &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!py_equal(x[i], y[i])) return py_compare(x[i], y[i]);
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw Error(cat("'<' not supported between instances of '", a.type_name(), "' and '", b.type_name(), "'"));
}

namespace {

// Python's str.isprintable, closely enough: controls, format characters, separators other
// than the space, surrogates and private-use characters are escaped by repr().
bool is_printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return false;
  if ((c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB)) return false;
  if ((c >= 0xD800 && c <= 0xF8FF) || c == 0x61C || c == 0x180E || (c >= 0xE0000 && c <= 0xE0FFF)) return false;
  if (c >= 0xF0000) return false;
  return true;
}

void append_hex(std::string& out, char prefix, uint32_t v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\%c%0*x", prefix, digits, v);
  out += buf;
}

}  // namespace

std::string py_repr_string(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    size_t n = utf8_next(s, i, c);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!is_printable(c)) {
      if (c < 0x100) append_hex(out, 'x', c, 2);
      else if (c < 0x10000) append_hex(out, 'u', c, 4);
      else append_hex(out, 'U', c, 8);
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  out += quote;
  return out;
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // The shortest digits that round-trip (what Python's repr uses), then Python's layout:
  // positional while the decimal point falls within -4 < exponent <= 16, else 1.5e+20.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string digits = sci.substr(0, 1) + (e > 2 ? sci.substr(2, e - 2) : "");
  int exponent = std::stoi(sci.substr(e + 1));
  int decpt = exponent + 1;  // digits are 0.d1d2... x 10^decpt
  std::string out = negative ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp[16];
  std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp;
}

std::string py_repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kString: return py_repr_string(v.str());
    case Value::Kind::kList: {
      if (v.seq() == Seq::kIterator) return "<generator object>";
      bool tuple = v.seq() == Seq::kTuple;
      std::string out = tuple ? "(" : "[";
      const List& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        out += py_repr(items[i]);
      }
      if (tuple && items.size() == 1) out += ",";
      return out + (tuple ? ")" : "]");
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.dict().entries) {
        if (!first) out += ", ";
        first = false;
        out += py_repr(k) + ": " + py_repr(x);
      }
      return out + "}";
    }
    case Value::Kind::kObject: return v.object().repr();
    default: return py_str(v);
  }
}

std::string py_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.as_int());
    case Value::Kind::kFloat: return py_float_repr(v.as_float());
    case Value::Kind::kString: return v.str();
    default: return py_repr(v);
  }
}

namespace {

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    size_t n = utf8_next(s, i, c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c >= 0x10000) {  // a surrogate pair, as json.dumps writes it
            char32_t u = c - 0x10000;
            append_hex(out, 'u', 0xD800 + (u >> 10), 4);
            append_hex(out, 'u', 0xDC00 + (u & 0x3FF), 4);
          } else {
            append_hex(out, 'u', c, 4);
          }
        } else {
          out.append(s.substr(i, n));
        }
    }
    i += n;
  }
  out += '"';
}

std::string json_key(const Value& k) {
  if (k.is_string()) return k.str();
  if (k.is_bool()) return k.as_bool() ? "true" : "false";
  if (k.is_none()) return "null";
  if (k.is_int() || k.is_float()) return py_str(k);
  throw Error(cat("keys must be str, int, float, bool or None, not ", k.type_name()));
}

void json_value(std::string& out, const Value& v, const JsonStyle& style, int depth) {
  auto newline = [&](int d) {
    if (!style.indent) return;
    out += '\n';
    for (int i = 0; i < d; ++i) out += *style.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: {
      double d = v.as_float();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : py_float_repr(d);
      return;
    }
    case Value::Kind::kString: json_string(out, v.str(), style.ensure_ascii); return;
    case Value::Kind::kList: {
      if (v.seq() == Seq::kIterator) throw Error("Object of type generator is not JSON serializable");
      const List& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += style.item_separator;
        newline(depth + 1);
        json_value(out, items[i], style, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      const auto& entries = v.dict().entries;
      if (entries.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> order;
      for (const auto& [k, x] : entries) order.emplace_back(json_key(k), &x);
      if (style.sort_keys)
        std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      for (size_t i = 0; i < order.size(); ++i) {
        if (i) out += style.item_separator;
        newline(depth + 1);
        json_string(out, order[i].first, style.ensure_ascii);
        out += style.key_separator;
        json_value(out, *order[i].second, style, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default: throw Error(cat("Object of type ", v.type_name(), " is not JSON serializable"));
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  json_value(out, v, style, 0);
  return out;
}

std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = std::min(utf8_len(static_cast<unsigned char>(s[i])), s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.items();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, x] : v.dict().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (std::string_view c : code_points(v.str())) chars.emplace_back(std::string(c));
      return chars;
    }
    default: throw Error(cat("'", v.type_name(), "' object is not iterable"));
  }
}

int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: {
      int64_t n = 0;
      for (unsigned char c : v.str()) n += (c & 0xC0) != 0x80;
      return n;
    }
    case Value::Kind::kList:
      if (v.seq() != Seq::kIterator) return static_cast<int64_t>(v.items().size());
      break;
    case Value::Kind::kDict: return static_cast<int64_t>(v.dict().size());
    default: break;
  }
  throw Error(cat("object of type '", v.type_name(), "' has no len()"));
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) d.entries.emplace_back(Value(it.key()), from_json(it.value()));
      return Value::dict(std::move(d));
    }
    default: throw Error(cat("a JSON value of type ", j.type_name(), " cannot be a template variable"));
  }
}

bool is_py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string py_strip(std::string_view s, bool left, bool right, const std::optional<std::string>& chars) {
  std::vector<std::string_view> cps = code_points(s);
  std::vector<std::string_view> set;
  if (chars) set = code_points(*chars);
  auto strip_this = [&](std::string_view c) {
    if (chars) return std::find(set.begin(), set.end(), c) != set.end();
    char32_t cp;
    utf8_next(c, 0, cp);
    return is_py_space(cp);
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_this(cps[b])) ++b;
  if (right)
    while (e > b && strip_this(cps[e - 1])) --e;
  if (b == e) return "";
  const char* start = cps[b].data();
  const char* end = cps[e - 1].data() + cps[e - 1].size();
  return std::string(start, end);
}

namespace {

// Simple case mappings for the scripts that chat text mostly uses (ASCII, Latin-1, Latin
// Extended-A, Greek, Cyrillic); other characters keep their case.
char32_t upper_of(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    bool odd_is_lower = !((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E));
    if (odd_is_lower ? (c & 1) : !(c & 1)) return c - 1;
    return c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

}  // namespace

std::string py_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    size_t n = utf8_next(s, i, c);
    if (c == 0xDF) out += "SS";  // ß, as Python's full mapping has it
    else utf8_append(out, upper_of(c));
    i += n;
  }
  return out;
}

std::string py_lower(std::string_view s) { return to_lower(s); }

}  // namespace onyx::genai::jinja
