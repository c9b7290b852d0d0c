// jinja2's builtin filters and tests (jinja2/filters.py, jinja2/tests.py) over onyx's values,
// with transformers' tojson (json.dumps, non-ASCII kept) in place of jinja2's HTML-safe one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "genai/jinja_ast.h"
#include "genai/jinja_render.h"
#include "genai/unicode.h"
#include "onyx/error.h"

namespace onyx::genai::jinja {
namespace {

std::string text_of(const Value& v) {
  if (v.is_undefined()) return "";
  return py_str(v);
}

// make_attrgetter: "a.b.0" looks up a, then b, then item 0, each as obj[key] does.
Value get_path(Renderer& r, const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return r.get_item(item, attribute);
  Value v = item;
  const std::string& path = attribute.str();
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = digits ? r.get_item(v, Value(static_cast<int64_t>(std::stoll(part)))) : r.get_item(v, Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// The key a case-insensitive comparison uses (jinja2's ignore_case).
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.str()));
  return v;
}

void stable_sort_values(List& items, const std::function<Value(const Value&)>& key, bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& v : items) keyed.emplace_back(key(v), std::move(v));
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    int c = py_compare(a.first, b.first);
    return reverse ? c > 0 : c < 0;
  });
  items.clear();
  for (auto& [k, v] : keyed) items.push_back(std::move(v));
}

Value iterator_of(List items) { return Value::list(std::move(items), Seq::kIterator); }

// ---- filters ----------------------------------------------------------------------------------

Value f_abs(Renderer&, const Value& v, Args& a) {
  Params p("abs", a, {});
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_integral()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  throw Error(cat("bad operand type for abs(): '", v.type_name(), "'"));
}

Value f_attr(Renderer& r, const Value& v, Args& a) {
  Params p("attr", a, {"name"});
  std::string name = text_of(p.value_or(0, Value("")));
  if (v.is_object()) {
    if (auto x = v.object().attr(name)) return *x;
  } else if (has_method(v, name) && !is_unsafe_method(v, name)) {
    return r.get_attr(v, name);
  }
  return Value::undefined(cat("'", v.type_name(), " object' has no attribute '", name, "'"));
}

std::string capitalize(const std::string& s) {
  std::vector<std::string_view> cps = code_points(s);
  if (cps.empty()) return "";
  std::string out = py_upper(cps[0]);
  out += py_lower(s.substr(cps[0].size()));
  return out;
}

Value f_capitalize(Renderer&, const Value& v, Args& a) {
  Params p("capitalize", a, {});
  return same_kind_string(v, capitalize(text_of(v)));
}

Value f_center(Renderer&, const Value& v, Args& a) {
  Params p("center", a, {"width"});
  std::string s = text_of(v);
  int64_t width = p.value_or(0, Value(80)).as_int(), len = py_len(Value(s));
  if (width <= len) return same_kind_string(v, s);
  int64_t total = width - len, left = total / 2 + (total & width & 1);
  return same_kind_string(v, std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(total - left), ' '));
}

Value f_default(Renderer&, const Value& v, Args& a) {
  Params p("default", a, {"default_value", "boolean"});
  bool boolean = truthy(p.value_or(1, Value(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return p.value_or(0, Value(""));
  return v;
}

Value f_dictsort(Renderer&, const Value& v, Args& a) {
  Params p("dictsort", a, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) throw Error(cat("dictsort: expected a mapping, got ", v.type_name()));
  bool cs = truthy(p.value_or(0, Value(false)));
  std::string by = text_of(p.value_or(1, Value("key")));
  if (by != "key" && by != "value") throw Error("You can only sort by either 'key' or 'value'");
  size_t pos = by == "key" ? 0 : 1;
  List items;
  for (const auto& [k, x] : v.dict().entries) items.push_back(Value::list({k, x}, Seq::kTuple));
  stable_sort_values(items, [&](const Value& t) { return sort_key(t.items()[pos], cs); },
                     truthy(p.value_or(2, Value(false))));
  return Value::list(std::move(items));
}

Value f_escape(Renderer&, const Value& v, Args& a) {
  Params p("escape", a, {});
  if (v.is_markup()) return v;
  return Value::markup(html_escape(text_of(v)));
}

Value f_forceescape(Renderer&, const Value& v, Args& a) {
  Params p("forceescape", a, {});
  return Value::markup(html_escape(text_of(v)));
}

Value f_first(Renderer&, const Value& v, Args& a) {
  Params p("first", a, {});
  List items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return v.is_string() ? same_kind_string(v, items.front().str()) : items.front();
}

Value f_last(Renderer&, const Value& v, Args& a) {
  Params p("last", a, {});
  if (v.is_list() && v.seq() == Seq::kIterator) throw Error("'generator' object is not reversible");
  List items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return v.is_string() ? same_kind_string(v, items.back().str()) : items.back();
}

std::optional<double> parse_float(std::string s) {
  s = py_strip(s, true, true, std::nullopt);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return std::nullopt;
  std::string lower = py_lower(s);
  std::string body = (lower[0] == '+' || lower[0] == '-') ? lower.substr(1) : lower;
  if (body == "inf" || body == "infinity" || body == "nan") {
    double x = body == "nan" ? NAN : INFINITY;
    return lower[0] == '-' ? -x : x;
  }
  if (body.find_first_not_of("0123456789.e+-") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

std::optional<int64_t> parse_int(std::string s, int base) {
  s = py_strip(s, true, true, std::nullopt);
  if (s.empty()) return std::nullopt;
  bool neg = s[0] == '-';
  if (s[0] == '+' || s[0] == '-') s = s.substr(1);
  if (base == 16 && s.size() > 2 && s[0] == '0' && (s[1] | 0x20) == 'x') s = s.substr(2);
  if (base == 8 && s.size() > 2 && s[0] == '0' && (s[1] | 0x20) == 'o') s = s.substr(2);
  if (base == 2 && s.size() > 2 && s[0] == '0' && (s[1] | 0x20) == 'b') s = s.substr(2);
  if (s.empty() || s.front() == '_' || s.back() == '_' || s.find("__") != std::string::npos) return std::nullopt;
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  int64_t v = 0;
  for (char c : s) {
    int d = (c >= '0' && c <= '9') ? c - '0' : ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ? (c | 0x20) - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    v = v * base + d;
  }
  return neg ? -v : v;
}

Value f_float(Renderer&, const Value& v, Args& a) {
  Params p("float", a, {"default"});
  Value fallback = p.value_or(0, Value(0.0));
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string())
    if (auto d = parse_float(v.str())) return Value(*d);
  return fallback;
}

Value f_int(Renderer&, const Value& v, Args& a) {
  Params p("int", a, {"default", "base"});
  Value fallback = p.value_or(0, Value(0));
  int base = static_cast<int>(p.value_or(1, Value(10)).as_int());
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_integral()) return Value(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_float())) return fallback;
    return Value(static_cast<int64_t>(std::trunc(v.as_float())));
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.str(), base)) return Value(*i);
    if (auto d = parse_float(v.str()); d && std::isfinite(*d)) return Value(static_cast<int64_t>(std::trunc(*d)));
  }
  return fallback;
}

Value f_format(Renderer&, const Value& v, Args& a) {
  if (!a.positional.empty() && !a.keywords.empty())
    throw Error("format: can't handle positional and keyword arguments at the same time");
  if (!a.keywords.empty()) {
    Dict d;
    for (auto& [k, x] : a.keywords) d.set(Value(k), x);
    return Value(percent_format(text_of(v), Value::dict(std::move(d))));
  }
  return Value(percent_format(text_of(v), Value::list(a.positional, Seq::kTuple)));
}

Value f_indent(Renderer&, const Value& v, Args& a) {
  Params p("indent", a, {"width", "first", "blank"});
  Value width = p.value_or(0, Value(4));
  std::string indention = width.is_string() ? width.str() : std::string(static_cast<size_t>(width.as_int()), ' ');
  bool first = truthy(p.value_or(1, Value(false))), blank = truthy(p.value_or(2, Value(false)));
  std::string s = text_of(v) + "\n";
  std::vector<std::string> lines = split_lines(s, false);
  std::string out;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" + indention : "") + lines[i];
  } else {
    out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) out += "\n" + (lines[i].empty() ? "" : indention + lines[i]);
  }
  if (first) out = indention + out;
  return Value(out);
}

Value f_items(Renderer&, const Value& v, Args& a) {
  Params p("items", a, {});
  if (v.is_undefined()) return iterator_of({});
  if (!v.is_dict()) throw Error("Can only get item pairs from a mapping.");
  List items;
  for (const auto& [k, x] : v.dict().entries) items.push_back(Value::list({k, x}, Seq::kTuple));
  return iterator_of(std::move(items));
}

Value f_join(Renderer& r, const Value& v, Args& a) {
  Params p("join", a, {"d", "attribute"});
  std::string sep = text_of(p.value_or(0, Value("")));
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += text_of(p.given(1) && !p.get(1)->is_none() ? get_path(r, item, *p.get(1)) : item);
  }
  return Value(out);
}

Value f_length(Renderer&, const Value& v, Args& a) {
  Params p("length", a, {});
  return Value(py_len(v));
}

Value f_list(Renderer&, const Value& v, Args& a) {
  Params p("list", a, {});
  return Value::list(iterate(v));
}

Value f_lower(Renderer&, const Value& v, Args& a) {
  Params p("lower", a, {});
  return same_kind_string(v, py_lower(text_of(v)));
}

Value f_upper(Renderer&, const Value& v, Args& a) {
  Params p("upper", a, {});
  return same_kind_string(v, py_upper(text_of(v)));
}

Value f_map(Renderer& r, const Value& v, Args& a) {
  List out;
  if (!truthy(v)) return iterator_of({});
  if (a.positional.empty()) {
    Value attribute, fallback = Value::none();
    for (auto& [k, x] : a.keywords) {
      if (k == "attribute") attribute = x;
      else if (k == "default") fallback = x;
      else throw Error(cat("map: unexpected keyword argument '", k, "'"));
    }
    if (attribute.is_undefined()) throw Error("map requires a filter argument");
    for (const Value& item : iterate(v)) {
      Value x = get_path(r, item, attribute);
      out.push_back(x.is_undefined() && !fallback.is_none() ? fallback : x);
    }
    return iterator_of(std::move(out));
  }
  std::string name = text_of(a.positional[0]);
  FilterFn fn = find_filter(name);
  if (!fn) throw Error(cat("map: no filter named '", name, "'"));
  Args rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keywords = a.keywords;
  for (const Value& item : iterate(v)) {
    Args each = rest;
    out.push_back(fn(r, item, each));
  }
  return iterator_of(std::move(out));
}

Value aggregate(Renderer& r, const Value& v, Args& a, const char* name, bool want_max) {
  Params p(name, a, {"case_sensitive", "attribute"});
  bool cs = truthy(p.value_or(0, Value(false)));
  List items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) {
    return sort_key(p.given(1) && !p.get(1)->is_none() ? get_path(r, x, *p.get(1)) : x, cs);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    int c = py_compare(k, best_key);
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

Value f_max(Renderer& r, const Value& v, Args& a) { return aggregate(r, v, a, "max", true); }
Value f_min(Renderer& r, const Value& v, Args& a) { return aggregate(r, v, a, "min", false); }

// select / reject / selectattr / rejectattr
Value select_common(Renderer& r, const Value& v, Args& a, bool by_attr, bool keep) {
  if (!truthy(v)) return iterator_of({});  // jinja2 looks at nothing of a false value
  size_t next = 0;
  Value attribute;
  if (by_attr) {
    if (a.positional.empty()) throw Error("Missing parameter for attribute name");
    attribute = a.positional[next++];
  }
  TestFn test = nullptr;
  std::string test_name;
  if (next < a.positional.size()) {
    test_name = text_of(a.positional[next++]);
    test = find_test(test_name);
    if (!test) throw Error(cat("no test named '", test_name, "'"));
  }
  Args test_args;
  test_args.positional.assign(a.positional.begin() + static_cast<ptrdiff_t>(next), a.positional.end());
  test_args.keywords = a.keywords;
  List out;
  for (const Value& item : iterate(v)) {
    Value subject = by_attr ? get_path(r, item, attribute) : item;
    bool ok;
    if (test) {
      Args each = test_args;
      ok = test(r, subject, each);
    } else {
      ok = truthy(subject);
    }
    if (ok == keep) out.push_back(item);
  }
  return iterator_of(std::move(out));
}

Value f_select(Renderer& r, const Value& v, Args& a) { return select_common(r, v, a, false, true); }
Value f_reject(Renderer& r, const Value& v, Args& a) { return select_common(r, v, a, false, false); }
Value f_selectattr(Renderer& r, const Value& v, Args& a) { return select_common(r, v, a, true, true); }
Value f_rejectattr(Renderer& r, const Value& v, Args& a) { return select_common(r, v, a, true, false); }

std::string replace_all(const std::string& s, const std::string& old, const std::string& with, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts `with` around every character
    std::vector<std::string_view> cps = code_points(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      if (i < cps.size()) out.append(cps[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += with;
    pos = hit + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

Value f_replace(Renderer&, const Value& v, Args& a) {
  Params p("replace", a, {"old", "new", "count"});
  if (!p.given(0) || !p.given(1)) throw Error("replace: missing the 'old' and 'new' arguments");
  int64_t count = p.given(2) && !p.get(2)->is_none() ? p.get(2)->as_int() : -1;
  return Value(replace_all(text_of(v), text_of(*p.get(0)), text_of(*p.get(1)), count));
}

Value f_reverse(Renderer&, const Value& v, Args& a) {
  Params p("reverse", a, {});
  if (v.is_string()) {
    std::vector<std::string_view> cps = code_points(v.str());
    std::string out;
    for (size_t i = cps.size(); i > 0; --i) out.append(cps[i - 1]);
    return same_kind_string(v, out);
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  // reversed() of a list is an iterator; a generator has no reversed() and becomes a list.
  return Value::list(std::move(items), v.is_list() && v.seq() == Seq::kIterator ? Seq::kList : Seq::kIterator);
}

Value f_round(Renderer&, const Value& v, Args& a) {
  Params p("round", a, {"precision", "method"});
  int64_t precision = p.value_or(0, Value(0)).as_int();
  std::string method = text_of(p.value_or(1, Value("common")));
  if (method != "common" && method != "ceil" && method != "floor")
    throw Error("method must be 'common', 'ceil' or 'floor'");
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) throw Error(cat("type ", v.type_name(), " doesn't define __round__ method"));
  double scale = std::pow(10.0, static_cast<double>(precision));
  if (method != "common") {
    double x = v.as_float() * scale;
    return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
  }
  if (v.is_integral()) return Value(v.as_int());
  double x = v.as_float();
  if (!std::isfinite(x)) return v;
  // Python rounds the exact binary value half to even, as printf does.
  if (precision >= 0) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::min<int64_t>(precision, 300)), x);
    return Value(std::strtod(buf, nullptr));
  }
  return Value(std::nearbyint(x / scale) * scale);
}

Value f_safe(Renderer&, const Value& v, Args& a) {
  Params p("safe", a, {});
  return Value::markup(text_of(v));
}

Value f_sort(Renderer& r, const Value& v, Args& a) {
  Params p("sort", a, {"reverse", "case_sensitive", "attribute"});
  bool reverse = truthy(p.value_or(0, Value(false))), cs = truthy(p.value_or(1, Value(false)));
  List items = iterate(v);
  std::vector<Value> attrs;
  if (p.given(2) && !p.get(2)->is_none()) {
    const Value& at = *p.get(2);
    if (at.is_string()) {
      std::string s = at.str();
      for (size_t b = 0;;) {
        size_t c = s.find(',', b);
        attrs.emplace_back(py_strip(s.substr(b, c == std::string::npos ? std::string::npos : c - b), true, true, std::nullopt));
        if (c == std::string::npos) break;
        b = c + 1;
      }
    } else {
      attrs.push_back(at);
    }
  }
  stable_sort_values(items, [&](const Value& x) {
    if (attrs.empty()) return sort_key(x, cs);
    if (attrs.size() == 1) return sort_key(get_path(r, x, attrs[0]), cs);
    List keys;
    for (const Value& at : attrs) keys.push_back(sort_key(get_path(r, x, at), cs));
    return Value::list(std::move(keys));
  }, reverse);
  return Value::list(std::move(items));
}

Value f_string(Renderer&, const Value& v, Args& a) {
  Params p("string", a, {});
  if (v.is_string()) return v;  // Markup stays Markup
  return Value(text_of(v));
}

Value f_sum(Renderer& r, const Value& v, Args& a) {
  Params p("sum", a, {"attribute", "start"});
  Value total = p.value_or(1, Value(0));
  for (const Value& item : iterate(v)) {
    Value x = p.given(0) && !p.get(0)->is_none() ? get_path(r, item, *p.get(0)) : item;
    if (!x.is_number() || !total.is_number())
      throw Error(cat("unsupported operand type(s) for +: '", total.type_name(), "' and '", x.type_name(), "'"));
    total = total.is_float() || x.is_float() ? Value(total.as_float() + x.as_float()) : Value(total.as_int() + x.as_int());
  }
  return total;
}

Value f_title(Renderer&, const Value& v, Args& a) {
  Params p("title", a, {});
  // jinja2 splits before runs of whitespace and -({[< and capitalizes each piece
  std::string s = text_of(v), out, piece;
  auto is_sep = [](char32_t c) { return is_py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<'; };
  auto flush = [&] {
    if (!piece.empty()) out += capitalize(piece);
    piece.clear();
  };
  bool in_sep = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    size_t n = utf8_next(s, i, c);
    bool sep = is_sep(c);
    if (sep != in_sep) {
      if (sep) flush();
      else out += piece, piece.clear();
      in_sep = sep;
    }
    piece.append(s, i, n);
    i += n;
  }
  if (in_sep) out += piece;
  else flush();
  return Value(out);
}

Value f_tojson(Renderer&, const Value& v, Args& a) {
  Params p("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle style;
  style.ensure_ascii = truthy(p.value_or(0, Value(false)));
  if (p.given(1) && !p.get(1)->is_none()) {
    const Value& indent = *p.get(1);
    style.indent = indent.is_string() ? indent.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, indent.as_int())), ' ');
    style.item_separator = ",";
  }
  if (p.given(2) && !p.get(2)->is_none()) {
    List seps = iterate(*p.get(2));
    if (seps.size() != 2) throw Error("tojson: separators must be a pair (item_separator, key_separator)");
    style.item_separator = text_of(seps[0]);
    style.key_separator = text_of(seps[1]);
  }
  style.sort_keys = truthy(p.value_or(3, Value(false)));
  if (v.is_undefined()) throw Error("Object of type Undefined is not JSON serializable");
  return Value(to_json(v, style));
}

Value f_trim(Renderer&, const Value& v, Args& a) {
  Params p("trim", a, {"chars"});
  std::optional<std::string> chars;
  if (p.given(0) && !p.get(0)->is_none()) chars = text_of(*p.get(0));
  return same_kind_string(v, py_strip(text_of(v), true, true, chars));
}

Value f_unique(Renderer& r, const Value& v, Args& a) {
  Params p("unique", a, {"case_sensitive", "attribute"});
  bool cs = truthy(p.value_or(0, Value(false)));
  List out, seen;
  for (const Value& item : iterate(v)) {
    Value key = sort_key(p.given(1) && !p.get(1)->is_none() ? get_path(r, item, *p.get(1)) : item, cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, key); })) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return iterator_of(std::move(out));
}

Value f_wordcount(Renderer&, const Value& v, Args& a) {
  Params p("wordcount", a, {});
  std::string s = text_of(v);
  int64_t words = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    i += utf8_next(s, i, c);
    bool w = is_word_char(c);
    if (w && !in_word) ++words;
    in_word = w;
  }
  return Value(words);
}

Value f_batch(Renderer&, const Value& v, Args& a) {
  Params p("batch", a, {"linecount", "fill_with"});
  if (!p.given(0)) throw Error("batch: missing the 'linecount' argument");
  int64_t n = p.get(0)->as_int();
  if (n <= 0) throw Error("batch: linecount must be positive");
  List out, cur;
  for (const Value& item : iterate(v)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == n) out.push_back(Value::list(std::move(cur))), cur.clear();
  }
  if (!cur.empty()) {
    if (p.given(1) && !p.get(1)->is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*p.get(1));
    out.push_back(Value::list(std::move(cur)));
  }
  return iterator_of(std::move(out));
}

// ---- tests ------------------------------------------------------------------------------------

bool t_defined(Renderer&, const Value& v, Args&) { return !v.is_undefined(); }
bool t_undefined(Renderer&, const Value& v, Args&) { return v.is_undefined(); }
bool t_none(Renderer&, const Value& v, Args&) { return v.is_none(); }
bool t_boolean(Renderer&, const Value& v, Args&) { return v.is_bool(); }
bool t_true(Renderer&, const Value& v, Args&) { return v.is_bool() && v.as_bool(); }
bool t_false(Renderer&, const Value& v, Args&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(Renderer&, const Value& v, Args&) { return v.is_int(); }
bool t_float(Renderer&, const Value& v, Args&) { return v.is_float(); }
bool t_number(Renderer&, const Value& v, Args&) { return v.is_number(); }
bool t_string(Renderer&, const Value& v, Args&) { return v.is_string(); }
bool t_mapping(Renderer&, const Value& v, Args&) { return v.is_dict(); }
bool t_iterable(Renderer&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict() ||
         (v.is_object() && v.object().type_name() == "LoopContext");
}
bool t_sequence(Renderer&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_dict() || (v.is_list() && v.seq() != Seq::kIterator);
}
bool t_callable(Renderer&, const Value& v, Args&) { return v.is_object() && v.object().callable(); }
bool t_escaped(Renderer&, const Value&, Args&) { return false; }

const Value& test_arg(Args& a, const char* test) {
  if (a.positional.empty()) throw Error(cat("the '", test, "' test needs an argument"));
  return a.positional[0];
}

bool t_sameas(Renderer&, const Value& v, Args& a) {
  const Value& o = test_arg(a, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::kNone:
    case Value::Kind::kUndefined: return true;
    case Value::Kind::kBool:
    case Value::Kind::kInt: return v.as_int() == o.as_int();
    case Value::Kind::kFloat: return v.as_float() == o.as_float();
    case Value::Kind::kString: return v.str() == o.str();
    case Value::Kind::kList: return &v.items() == &o.items();
    case Value::Kind::kDict: return &v.dict() == &o.dict();
    case Value::Kind::kObject: return &v.object() == &o.object();
  }
  return false;
}

bool t_eq(Renderer&, const Value& v, Args& a) { return py_equal(v, test_arg(a, "eq")); }
bool t_ne(Renderer&, const Value& v, Args& a) { return !py_equal(v, test_arg(a, "ne")); }
bool t_lt(Renderer&, const Value& v, Args& a) { return py_compare(v, test_arg(a, "lt")) < 0; }
bool t_le(Renderer&, const Value& v, Args& a) { return py_compare(v, test_arg(a, "le")) <= 0; }
bool t_gt(Renderer&, const Value& v, Args& a) { return py_compare(v, test_arg(a, "gt")) > 0; }
bool t_ge(Renderer&, const Value& v, Args& a) { return py_compare(v, test_arg(a, "ge")) >= 0; }

bool t_in(Renderer&, const Value& v, Args& a) {
  const Value& seq = test_arg(a, "in");
  if (seq.is_string()) {
    if (!v.is_string()) throw Error(cat("'in <string>' requires string as left operand, not ", v.type_name()));
    return seq.str().find(v.str()) != std::string::npos;
  }
  if (seq.is_dict()) return seq.dict().find(v) != nullptr;
  for (const Value& x : iterate(seq))
    if (py_equal(x, v)) return true;
  return false;
}

int64_t int_arg(const Value& v, const char* test) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_integral()) throw Error(cat("the '", test, "' test needs an integer, got ", v.type_name()));
  return v.as_int();
}

bool t_odd(Renderer&, const Value& v, Args&) { return int_arg(v, "odd") % 2 != 0; }
bool t_even(Renderer&, const Value& v, Args&) { return int_arg(v, "even") % 2 == 0; }
bool t_divisibleby(Renderer&, const Value& v, Args& a) {
  int64_t d = int_arg(test_arg(a, "divisibleby"), "divisibleby");
  if (d == 0) throw Error("integer division or modulo by zero");
  return int_arg(v, "divisibleby") % d == 0;
}

bool t_lower(Renderer&, const Value& v, Args&) {
  std::string s = py_str(v);
  return py_lower(s) == s && py_upper(s) != s;
}
bool t_upper(Renderer&, const Value& v, Args&) {
  std::string s = py_str(v);
  return py_upper(s) == s && py_lower(s) != s;
}
bool t_filter(Renderer&, const Value& v, Args&) { return v.is_string() && find_filter(v.str()) != nullptr; }
bool t_test(Renderer&, const Value& v, Args&) { return v.is_string() && find_test(v.str()) != nullptr; }

}  // namespace

FilterFn find_filter(const std::string& name) {
  static const std::map<std::string, FilterFn> kFilters = {
      {"abs", f_abs},         {"attr", f_attr},           {"batch", f_batch},       {"capitalize", f_capitalize},
      {"center", f_center},   {"count", f_length},        {"d", f_default},         {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},          {"escape", f_escape},     {"first", f_first},
      {"float", f_float},     {"forceescape", f_forceescape},  {"format", f_format},     {"indent", f_indent},
      {"int", f_int},         {"items", f_items},         {"join", f_join},         {"last", f_last},
      {"length", f_length},   {"list", f_list},           {"lower", f_lower},       {"map", f_map},
      {"max", f_max},         {"min", f_min},             {"reject", f_reject},     {"rejectattr", f_rejectattr},
      {"replace", f_replace}, {"reverse", f_reverse},     {"round", f_round},       {"safe", f_safe},
      {"select", f_select},   {"selectattr", f_selectattr}, {"sort", f_sort},       {"string", f_string},
      {"sum", f_sum},         {"title", f_title},         {"tojson", f_tojson},     {"trim", f_trim},
      {"unique", f_unique},   {"upper", f_upper},         {"wordcount", f_wordcount},
  };
  auto it = kFilters.find(name);
  return it == kFilters.end() ? nullptr : it->second;
}

TestFn find_test(const std::string& name) {
  static const std::map<std::string, TestFn> kTests = {
      {"boolean", t_boolean},   {"callable", t_callable}, {"defined", t_defined}, {"divisibleby", t_divisibleby},
      {"eq", t_eq},             {"equalto", t_eq},        {"==", t_eq},           {"escaped", t_escaped},
      {"even", t_even},         {"false", t_false},       {"filter", t_filter},   {"float", t_float},
      {"ge", t_ge},             {">=", t_ge},             {"gt", t_gt},           {"greaterthan", t_gt},
      {">", t_gt},              {"in", t_in},             {"integer", t_integer}, {"iterable", t_iterable},
      {"le", t_le},             {"<=", t_le},             {"lower", t_lower},     {"lt", t_lt},
      {"lessthan", t_lt},       {"<", t_lt},              {"mapping", t_mapping}, {"ne", t_ne},
      {"!=", t_ne},             {"none", t_none},         {"number", t_number},   {"odd", t_odd},
      {"sameas", t_sameas},     {"sequence", t_sequence}, {"string", t_string},   {"test", t_test},
      {"true", t_true},         {"undefined", t_undefined}, {"upper", t_upper},
  };
  auto it = kTests.find(name);
  return it == kTests.end() ? nullptr : it->second;
}

}  // namespace onyx::genai::jinja
