// The values of onyx's Jinja interpreter (chat_template.h), with Python's semantics: chat
// templates are Python code in all but syntax, and a prompt must match what jinja2 renders
// byte for byte. So truthiness, ==, <, str() and repr() (True, None, ['a', 1]), json.dumps
// and Jinja's Undefined behave as CPython and jinja2 do. Values are immutable once built
// (the templates run in jinja2's ImmutableSandboxedEnvironment), except a namespace().
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace onyx::genai::jinja {

class Value;
class Object;
class Renderer;
struct Dict;
using List = std::vector<Value>;

// How a sequence came to be: a list, a tuple (prints as (a, b)) or an iterator that a filter
// such as selectattr or map returned (always true, no length, prints as a generator).
enum class Seq : uint8_t { kList, kTuple, kIterator };

struct ListData {
  List items;
  Seq seq = Seq::kList;
};

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kObject };

  Value() = default;  // undefined, with no hint
  Value(bool b) : kind_(Kind::kBool), i_(b) {}
  Value(int v) : kind_(Kind::kInt), i_(v) {}
  Value(int64_t v) : kind_(Kind::kInt), i_(v) {}
  Value(double v) : kind_(Kind::kFloat), f_(v) {}
  Value(std::string s) : kind_(Kind::kString), p_(std::make_shared<const std::string>(std::move(s))) {}
  Value(const char* s) : Value(std::string(s)) {}

  // Undefined; `hint` is what using it in an operation reports ("'x' is undefined").
  // A string marked safe (markupsafe's Markup, what |safe and |escape return): `+` with a
  // plain string escapes the plain one, as Markup.__add__ does.
  static Value markup(std::string s);
  static Value undefined(std::string hint);
  static Value none();
  static Value list(List items, Seq seq = Seq::kList);
  static Value dict(Dict d);
  static Value object(std::shared_ptr<Object> o);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return kind_ == Kind::kString && i_ != 0; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_object() const { return kind_ == Kind::kObject; }
  // Python's numbers: bool is an int there.
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_integral() const { return kind_ == Kind::kBool || kind_ == Kind::kInt; }

  bool as_bool() const { return i_ != 0; }
  int64_t as_int() const { return i_; }  // bool or int
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(i_); }
  const std::string& str() const { return *static_cast<const std::string*>(p_.get()); }
  const List& items() const { return static_cast<const ListData*>(p_.get())->items; }
  Seq seq() const { return static_cast<const ListData*>(p_.get())->seq; }
  const Dict& dict() const { return *static_cast<const Dict*>(p_.get()); }
  Object& object() const { return *static_cast<Object*>(const_cast<void*>(p_.get())); }
  std::shared_ptr<Object> object_ptr() const;
  const std::string& undefined_hint() const;

  // Python's type name, for error messages ("str", "NoneType", "list", ...).
  std::string type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const void> p_;  // the string, ListData, Dict, Object, or an undefined's hint
};

// A Python dict: insertion order kept, keys compared as Python compares them (1 == 1.0 == True).
struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  const Value* find(const std::string& key) const { return find(std::string_view(key)); }
  const Value* find(const char* key) const { return find(std::string_view(key)); }
  void set(Value key, Value value);
  size_t size() const { return entries.size(); }
};

// Call arguments: positional, then keyword.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
};

// Things that are not data: namespace(), macros, the loop variable, functions and bound methods.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  virtual std::string repr() const;
  // The attribute `name`, or nullopt when there is none.
  virtual std::optional<Value> attr(const std::string& name) const;
  virtual bool callable() const { return false; }
  virtual Value call(Renderer& r, Args& args);
};

// A builtin function or a method bound to its object.
class Function : public Object {
 public:
  using Fn = std::function<Value(Renderer&, Args&)>;
  Function(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  std::string repr() const override;
  bool callable() const override { return true; }
  Value call(Renderer& r, Args& args) override { return fn_(r, args); }

 private:
  std::string name_;
  Fn fn_;
};

// jinja2's namespace(): the one mutable value, assigned with {% set ns.attr = ... %}.
class Namespace : public Object {
 public:
  Dict attrs;
  std::string type_name() const override { return "Namespace"; }
  std::string repr() const override;
  std::optional<Value> attr(const std::string& name) const override;
};

// Python's operations on values. Those that Python refuses (1 + 'a', 'a' < 1, using an
// Undefined) throw onyx::Error with Python's or jinja2's wording.
bool truthy(const Value& v);
bool py_equal(const Value& a, const Value& b);
// <0, 0, >0 as Python's < orders a and b; an error when Python cannot order them.
int py_compare(const Value& a, const Value& b);
std::string py_str(const Value& v);
std::string py_repr(const Value& v);
std::string py_repr_string(std::string_view s);
std::string py_float_repr(double d);
// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as transformers' tojson calls it.
struct JsonStyle {
  std::optional<std::string> indent;  // none: one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
std::string to_json(const Value& v, const JsonStyle& style);
// Throws the error that using an Undefined in an operation raises in jinja2.
[[noreturn]] void fail_undefined(const Value& v);

// Elements of an iterable, as Python's `for` sees them: a dict's keys, a string's characters,
// nothing for an Undefined.
List iterate(const Value& v);
// len(v); an error for values without one (numbers, None, iterators).
int64_t py_len(const Value& v);

Value from_json(const nlohmann::ordered_json& j);

// UTF-8 helpers with Python's view of a string as code points.
std::vector<std::string_view> code_points(std::string_view s);
bool is_py_space(char32_t c);  // str.isspace() and the regex \s
std::string py_strip(std::string_view s, bool left, bool right, const std::optional<std::string>& chars);
std::string py_upper(std::string_view s);
// markupsafe's escape: & < > ' " as entities.
std::string html_escape(std::string_view s);
// A string result of an operation on `like`: Markup when `like` is Markup.
Value same_kind_string(const Value& like, std::string s);
std::string py_lower(std::string_view s);

}  // namespace onyx::genai::jinja
