// The state of one render of a parsed template: the scopes, the variables it was given, and
// the operations whose meaning jinja2 defines beyond Python's (attribute and item lookup,
// calls). Each render has its own Renderer, so a template renders on many threads at once.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "genai/jinja_ast.h"
#include "genai/jinja_value.h"

namespace onyx::genai::jinja {

// A scope: the template's top level, one iteration of a loop, one call of a macro, a
// {% with %}. Frames live as long as their render (macros keep the frame they were defined in).
struct Frame {
  Frame* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;
  Value* find(const std::string& name);
};

class Renderer {
 public:
  explicit Renderer(const Dict& variables);
  // Breaks the reference cycles a render may have made (see namespaces_).
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  // A name as the template sees it: the scopes from the innermost out, then the variables
  // of the render, then the globals (namespace, range, raise_exception, strftime_now, ...).
  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value v) { assign_in(frame, name, std::move(v)); }
  static void assign_in(Frame* f, const std::string& name, Value v);
  Frame* new_frame(Frame* parent);
  // A namespace() made by this render (the global function calls it).
  Value new_namespace(Dict attrs);

  // jinja2's `obj.name` (an attribute, else an item) and `obj[key]` (an item, else an attribute).
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  Value call(const Value& callee, Args& args);

  Frame* frame;  // the current scope
  Pos at;        // the node being run, for error messages
  int depth = 0; // macro calls in progress

 private:
  const Dict& variables_;
  std::deque<Frame> frames_;
  // Every namespace this render made. A namespace is the one value that changes after it is
  // built, so it is the only way to an owning cycle: every other value can hold only values
  // older than itself ({% set ns.me = ns %}, or two namespaces holding each other, would keep
  // their shared values alive for ever). The destructor empties the namespaces still alive,
  // which breaks every cycle; nothing of a render outlives it but its text.
  std::vector<std::weak_ptr<Namespace>> namespaces_;
};

// Sets the current frame for a scope's lifetime.
class FrameScope {
 public:
  FrameScope(Renderer& r, Frame* f) : r_(r), saved_(r.frame) { r.frame = f; }
  ~FrameScope() { r_.frame = saved_; }
  FrameScope(const FrameScope&) = delete;
  FrameScope& operator=(const FrameScope&) = delete;

 private:
  Renderer& r_;
  Frame* saved_;
};

// Python's methods of str, list and dict that templates call ("a b".split(), d.get("k"),
// d.items()); nullopt when the type has no such method. Methods that would mutate a value
// are refused, as jinja2's ImmutableSandboxedEnvironment refuses them.
std::optional<Value> call_method(Renderer& r, const Value& self, const std::string& name, Args& args);
bool has_method(const Value& self, const std::string& name);
bool is_unsafe_method(const Value& self, const std::string& name);

// The global functions, by name (nullopt when there is none).
std::optional<Value> find_global(const std::string& name);

// Binds call arguments to a builtin's parameters by position and keyword, as Python would.
class Params {
 public:
  Params(const char* function, Args& args, std::initializer_list<const char*> names, bool extra_positional = false);
  const Value* get(size_t i) const { return slots_[i].is_undefined() && !given_[i] ? nullptr : &slots_[i]; }
  Value value_or(size_t i, Value fallback) const { return given_[i] ? slots_[i] : std::move(fallback); }
  bool given(size_t i) const { return given_[i]; }
  const std::vector<Value>& extra() const { return extra_; }

 private:
  std::vector<Value> slots_;
  std::vector<bool> given_;
  std::vector<Value> extra_;
};

// Python's `%` formatting of a string (also the `format` filter).
std::string percent_format(const std::string& format, const Value& args);
// Python's str.splitlines(keepends) (jinja_methods.cpp; the indent filter uses it too).
std::vector<std::string> split_lines(const std::string& s, bool keepends);
// str.format()
std::string brace_format(const std::string& format, const Args& args);

}  // namespace onyx::genai::jinja
