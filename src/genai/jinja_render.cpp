// Running the syntax tree: expressions with Python's operators, statements with jinja2's
// scoping (a loop iteration and a macro call are scopes, an `if` is not; namespace() is how
// a value leaves a loop), macros and call blocks.
#include "genai/jinja_render.h"

#include <cmath>
#include <cstdint>

#include "onyx/error.h"

namespace onyx::genai::jinja {

Value* Frame::find(const std::string& name) {
  for (auto& [k, v] : vars)
    if (k == name) return &v;
  return nullptr;
}

Renderer::Renderer(const Dict& variables) : variables_(variables) { frame = new_frame(nullptr); }

Renderer::~Renderer() {
  for (auto& weak : namespaces_) {
    if (auto ns = weak.lock()) {
      // Moved out first: destroying the attributes may destroy other namespaces of this render.
      Dict attrs = std::move(ns->attrs);
      ns->attrs = Dict{};
    }
  }
}

Value Renderer::new_namespace(Dict attrs) {
  auto ns = std::make_shared<Namespace>();
  ns->attrs = std::move(attrs);
  // Drop the entries of namespaces already gone, so a loop making one per iteration keeps
  // this list as long as the namespaces alive at once (amortized).
  if (namespaces_.size() >= 64 && namespaces_.size() == namespaces_.capacity()) {
    std::erase_if(namespaces_, [](const std::weak_ptr<Namespace>& w) { return w.expired(); });
  }
  namespaces_.push_back(ns);
  return Value::object(std::move(ns));
}

Frame* Renderer::new_frame(Frame* parent) {
  frames_.emplace_back();
  frames_.back().parent = parent;
  return &frames_.back();
}

void Renderer::assign_in(Frame* f, const std::string& name, Value v) {
  if (Value* slot = f->find(name)) *slot = std::move(v);
  else f->vars.emplace_back(name, std::move(v));
}

Value Renderer::lookup(const std::string& name) const {
  for (Frame* f = frame; f; f = f->parent)
    if (Value* v = f->find(name)) return *v;
  if (const Value* v = variables_.find(std::string_view(name))) return *v;
  if (auto g = find_global(name)) return *g;
  return Value::undefined(cat("'", name, "' is undefined"));
}

namespace {

// jinja2's object_type_repr, for the hints of Undefined values.
std::string type_repr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_object() && v.object().type_name() == "Namespace") return "jinja2.utils.Namespace object";
  return v.type_name() + " object";
}

Value missing_attr(const Value& obj, const std::string& name) {
  return Value::undefined(cat("'", type_repr(obj), "' has no attribute '", name, "'"));
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined(cat("access to attribute '", name, "' of '", obj.type_name(), "' object is unsafe."));
}

// A method of a str, list or dict, bound to it: what `s.upper` is without the call.
Value bound_method(const Value& self, const std::string& name) {
  return Value::object(std::make_shared<Function>(
      cat(name, " of ", self.type_name(), " object"),
      [self, name](Renderer& r, Args& args) { return *call_method(r, self, name, args); }));
}

// Python's sequence index: negative counts from the end; nullopt when out of range.
std::optional<size_t> normalize_index(int64_t i, size_t size) {
  if (i < 0) i += static_cast<int64_t>(size);
  if (i < 0 || i >= static_cast<int64_t>(size)) return std::nullopt;
  return static_cast<size_t>(i);
}

}  // namespace

Value Renderer::get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  // Python's own attributes (__class__, ...) are what the sandbox refuses; a dict's "_key" is an item.
  if (name.rfind("__", 0) == 0) return unsafe(obj, name);
  if (obj.is_object()) {
    if (auto v = obj.object().attr(name)) return *v;
    return missing_attr(obj, name);
  }
  if (is_unsafe_method(obj, name)) return unsafe(obj, name);
  if (has_method(obj, name)) return bound_method(obj, name);
  if (obj.is_dict())
    if (const Value* v = obj.dict().find(std::string_view(name))) return *v;
  return missing_attr(obj, name);
}

Value Renderer::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(key)) return *v;
  } else if ((obj.is_list() && obj.seq() != Seq::kIterator) || obj.is_string()) {
    if (key.is_integral()) {
      if (obj.is_list()) {
        if (auto i = normalize_index(key.as_int(), obj.items().size())) return obj.items()[*i];
      } else {
        std::vector<std::string_view> cps = code_points(obj.str());
        if (auto i = normalize_index(key.as_int(), cps.size())) return same_kind_string(obj, std::string(cps[*i]));
      }
      return Value::undefined(cat(type_repr(obj), " has no element ", key.as_int()));
    }
  } else if (obj.is_object() && key.is_string()) {
    if (auto v = obj.object().attr(key.str())) return *v;
  }
  if (key.is_string()) {
    if (key.str().rfind("__", 0) == 0) return unsafe(obj, key.str());
    if (is_unsafe_method(obj, key.str())) return unsafe(obj, key.str());
    if (has_method(obj, key.str())) return bound_method(obj, key.str());
    return missing_attr(obj, key.str());
  }
  return Value::undefined(cat(type_repr(obj), " has no element ", py_repr(key)));
}

Value Renderer::call(const Value& callee, Args& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_object() || !callee.object().callable())
    throw Error(cat("'", callee.type_name(), "' object is not callable"));
  return callee.object().call(*this, args);
}

// ---- macros and the loop variable -----------------------------------------------------------

namespace {

class Macro : public Object {
 public:
  Macro(const MacroDef* def, Frame* closure) : def_(def), closure_(closure) {}
  std::string type_name() const override { return "Macro"; }
  std::string repr() const override { return cat("<Macro '", def_->name, "'>"); }
  bool callable() const override { return true; }
  std::optional<Value> attr(const std::string& name) const override {
    if (name == "name") return Value(def_->name);
    return std::nullopt;
  }

  Value call(Renderer& r, Args& args) override {
    const MacroDef& m = *def_;
    if (r.depth >= 256) throw Error(cat("macro '", m.name, "': calls nested too deeply (recursion?)"));
    Frame* f = r.new_frame(closure_);
    std::vector<bool> bound(m.params.size(), false);
    List varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < m.params.size()) {
        Renderer::assign_in(f, m.params[i].name, args.positional[i]);
        bound[i] = true;
      } else if (m.uses_varargs) {
        varargs.push_back(args.positional[i]);
      } else {
        throw Error(cat("macro '", m.name, "' takes not more than ", m.params.size(), " argument(s)"));
      }
    }
    Dict kwargs;
    Value caller;
    for (auto& [key, value] : args.keywords) {
      size_t i = 0;
      while (i < m.params.size() && m.params[i].name != key) ++i;
      if (i < m.params.size()) {
        if (bound[i]) throw Error(cat("macro '", m.name, "' got multiple values for argument '", key, "'"));
        Renderer::assign_in(f, key, value);
        bound[i] = true;
      } else if (key == "caller") {
        caller = value;
      } else if (m.uses_kwargs) {
        kwargs.set(Value(key), value);
      } else {
        throw Error(cat("macro '", m.name, "' takes no keyword argument '", key, "'"));
      }
    }
    FrameScope scope(r, f);
    for (size_t i = 0; i < m.params.size(); ++i) {
      if (bound[i]) continue;
      // Defaults are evaluated at each call, and may read the parameters before them.
      Value v = m.params[i].fallback ? m.params[i].fallback->eval(r)
                                     : Value::undefined(cat("parameter '", m.params[i].name, "' was not provided"));
      Renderer::assign_in(f, m.params[i].name, std::move(v));
    }
    if (m.uses_varargs) Renderer::assign_in(f, "varargs", Value::list(std::move(varargs), Seq::kTuple));
    if (m.uses_kwargs) Renderer::assign_in(f, "kwargs", Value::dict(std::move(kwargs)));
    if (m.uses_caller) {
      Renderer::assign_in(f, "caller", caller.is_undefined() ? Value::undefined("No caller defined") : caller);
    }
    std::string out;
    ++r.depth;
    try {
      render_body(m.body, r, out);
    } catch (...) {
      --r.depth;
      throw;
    }
    --r.depth;
    return Value(std::move(out));
  }

 private:
  const MacroDef* def_;
  Frame* closure_;
};

class LoopInfo : public Object {
 public:
  LoopInfo(std::shared_ptr<const List> items, size_t index) : items_(std::move(items)), i_(index) {}
  std::string type_name() const override { return "LoopContext"; }
  std::string repr() const override { return cat("<LoopContext ", i_ + 1, "/", items_->size(), ">"); }

  std::optional<Value> attr(const std::string& name) const override {
    const int64_t n = static_cast<int64_t>(items_->size()), i = static_cast<int64_t>(i_);
    if (name == "index") return Value(i + 1);
    if (name == "index0") return Value(i);
    if (name == "revindex") return Value(n - i);
    if (name == "revindex0") return Value(n - i - 1);
    if (name == "first") return Value(i == 0);
    if (name == "last") return Value(i == n - 1);
    if (name == "length") return Value(n);
    if (name == "depth") return Value(1);
    if (name == "depth0") return Value(0);
    if (name == "previtem") return i > 0 ? (*items_)[i_ - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem") return i + 1 < n ? (*items_)[i_ + 1] : Value::undefined("there is no next item");
    if (name == "cycle") {
      size_t index = i_;
      return Value::object(std::make_shared<Function>("cycle", [index](Renderer&, Args& args) {
        if (args.positional.empty()) throw Error("no items for cycling given");
        return args.positional[index % args.positional.size()];
      }));
    }
    return std::nullopt;
  }

 private:
  std::shared_ptr<const List> items_;
  size_t i_;
};

// Assigns `v` to a for/set target, unpacking tuples as Python does.
void bind(Renderer& r, const Target& t, const Value& v) {
  if (!t.attr.empty()) {
    Value ns = r.lookup(t.name);
    if (!ns.is_object() || ns.object().type_name() != "Namespace")
      throw Error(cat("cannot assign attribute on non-namespace object ('", t.name, "' is ", ns.type_name(), ")"));
    static_cast<Namespace&>(ns.object()).attrs.set(Value(t.attr), v);
    return;
  }
  if (!t.is_tuple) {
    r.assign(t.name, v);
    return;
  }
  List items = iterate(v);
  if (items.size() < t.unpack.size())
    throw Error(cat("not enough values to unpack (expected ", t.unpack.size(), ", got ", items.size(), ")"));
  if (items.size() > t.unpack.size()) throw Error(cat("too many values to unpack (expected ", t.unpack.size(), ")"));
  for (size_t i = 0; i < items.size(); ++i) bind(r, t.unpack[i], items[i]);
}

Value apply_filters(Renderer& r, const std::vector<std::unique_ptr<FilterExpr>>& filters, Value v) {
  for (const auto& f : filters) {
    Args args = f->args.eval(r);
    r.at = f->pos;
    if (!f->fn) throw Error(cat("no filter named '", f->name, "'"));
    v = f->fn(r, v, args);
  }
  return v;
}

}  // namespace

// ---- expressions ------------------------------------------------------------------------------

Args CallArgs::eval(Renderer& r) const {
  Args a;
  for (const auto& e : positional) a.positional.push_back(e->eval(r));
  if (star_args)
    for (Value& v : iterate(star_args->eval(r))) a.positional.push_back(std::move(v));
  for (const auto& [k, e] : keywords) a.keywords.emplace_back(k, e->eval(r));
  if (star_kwargs) {
    Value d = star_kwargs->eval(r);
    if (!d.is_dict()) throw Error(cat("argument after ** must be a mapping, not ", d.type_name()));
    for (const auto& [k, v] : d.dict().entries) a.keywords.emplace_back(py_str(k), v);
  }
  return a;
}

Value Literal::eval(Renderer&) const { return value; }

Value ListExpr::eval(Renderer& r) const {
  List out;
  out.reserve(items.size());
  for (const auto& e : items) out.push_back(e->eval(r));
  return Value::list(std::move(out), seq);
}

Value DictExpr::eval(Renderer& r) const {
  Dict d;
  for (const auto& [k, v] : items) {
    Value key = k->eval(r);
    if (!(key.is_string() || key.is_number() || key.is_none() || (key.is_list() && key.seq() == Seq::kTuple))) {
      r.at = k->pos;
      throw Error(cat("unhashable type: '", key.type_name(), "'"));
    }
    d.set(std::move(key), v->eval(r));
  }
  return Value::dict(std::move(d));
}

Value NameExpr::eval(Renderer& r) const { return r.lookup(name); }

Value GetAttr::eval(Renderer& r) const {
  Value o = object->eval(r);
  r.at = pos;
  return r.get_attr(o, name);
}

Value GetItem::eval(Renderer& r) const {
  Value o = object->eval(r);
  Value k = key->eval(r);
  r.at = pos;
  return r.get_item(o, k);
}

Value SliceExpr::eval(Renderer& r) const {
  Value o = object->eval(r);
  auto bound = [&](const ExprPtr& e) -> std::optional<int64_t> {
    if (!e) return std::nullopt;
    Value v = e->eval(r);
    if (v.is_none()) return std::nullopt;
    if (!v.is_integral()) throw Error("slice indices must be integers or None");
    return v.as_int();
  };
  std::optional<int64_t> b = bound(start), e = bound(stop), s = bound(step);
  r.at = pos;
  if (o.is_undefined()) fail_undefined(o);
  int64_t st = s.value_or(1);
  if (st == 0) throw Error("slice step cannot be zero");
  bool is_str = o.is_string();
  if (!is_str && !(o.is_list() && o.seq() != Seq::kIterator))
    throw Error(cat("'", o.type_name(), "' object is not subscriptable"));
  std::vector<std::string_view> cps;
  if (is_str) cps = code_points(o.str());
  const int64_t n = static_cast<int64_t>(is_str ? cps.size() : o.items().size());
  // Python's slice.indices()
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v < 0 ? *v + n : *v;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t from = clamp(b, st > 0 ? 0 : n - 1), to = clamp(e, st > 0 ? n : -1);
  std::string text;
  List items;
  for (int64_t i = from; st > 0 ? i < to : i > to; i += st) {
    if (is_str) text.append(cps[static_cast<size_t>(i)]);
    else items.push_back(o.items()[static_cast<size_t>(i)]);
  }
  if (is_str) return same_kind_string(o, std::move(text));
  return Value::list(std::move(items), o.seq());
}

Value CallExpr::eval(Renderer& r) const {
  // obj.method(...) on a str, list or dict calls the method without making a bound object.
  if (auto* attr = dynamic_cast<const GetAttr*>(callee.get())) {
    Value self = attr->object->eval(r);
    if ((self.is_string() || self.is_list() || self.is_dict()) && has_method(self, attr->name) &&
        !is_unsafe_method(self, attr->name)) {
      Args a = args.eval(r);
      r.at = pos;
      return *call_method(r, self, attr->name, a);
    }
    r.at = attr->pos;
    Value fn = r.get_attr(self, attr->name);
    Args a = args.eval(r);
    r.at = pos;
    return r.call(fn, a);
  }
  Value fn = callee->eval(r);
  Args a = args.eval(r);
  r.at = pos;
  return r.call(fn, a);
}

Value FilterExpr::eval(Renderer& r) const {
  Value v = subject->eval(r);
  Args a = args.eval(r);
  r.at = pos;
  if (!fn) throw Error(cat("no filter named '", name, "'"));
  return fn(r, v, a);
}

Value TestExpr::eval(Renderer& r) const {
  Value v = subject->eval(r);
  Args a = args.eval(r);
  r.at = pos;
  if (!fn) throw Error(cat("no test named '", name, "'"));
  return Value(fn(r, v, a));
}

Value UnaryExpr::eval(Renderer& r) const {
  Value v = operand->eval(r);
  r.at = pos;
  if (op == UnaryOp::kNot) return Value(!truthy(v));
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) throw Error(cat("bad operand type for unary ", op == UnaryOp::kNeg ? "-" : "+", ": '", v.type_name(), "'"));
  if (op == UnaryOp::kPos) return v.is_float() ? v : Value(v.as_int());
  return v.is_float() ? Value(-v.as_float()) : Value(-v.as_int());
}

namespace {

[[noreturn]] void bad_operands(const char* op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  throw Error(cat("unsupported operand type(s) for ", op, ": '", a.type_name(), "' and '", b.type_name(), "'"));
}

// Python's integers have no bound; templates here compute in 64 bits, and a result outside them
// is an error (never a wrapped value).
[[noreturn]] void int_overflow(const char* op, int64_t a, int64_t b) {
  throw Error(cat("integer overflow: ", a, " ", op, " ", b, " is outside the 64-bit integers templates compute in"));
}

int64_t checked_int(BinaryOp op, int64_t a, int64_t b) {
  int64_t r = 0;
  switch (op) {
    case BinaryOp::kAdd:
      if (__builtin_add_overflow(a, b, &r)) int_overflow("+", a, b);
      return r;
    case BinaryOp::kSub:
      if (__builtin_sub_overflow(a, b, &r)) int_overflow("-", a, b);
      return r;
    default:
      if (__builtin_mul_overflow(a, b, &r)) int_overflow("*", a, b);
      return r;
  }
}

// a ** e for e >= 0 by repeated squaring: as many multiplications as e has bits.
int64_t int_pow(int64_t a, int64_t e) {
  int64_t result = 1, base = a;
  for (int64_t k = e; k > 0; k >>= 1) {
    if (k & 1)
      if (__builtin_mul_overflow(result, base, &result)) int_overflow("**", a, e);
    if (k > 1 && __builtin_mul_overflow(base, base, &base)) {
      // The square only matters if a higher bit of the exponent uses it; |base| >= 2 then overflows.
      int_overflow("**", a, e);
    }
  }
  return result;
}

Value repeat(const Value& seq, int64_t times) {
  const size_t unit = seq.is_string() ? seq.str().size() : seq.items().size();
  constexpr size_t kMaxRepeat = size_t{1} << 28;  // elements or bytes
  ONYX_CHECK(times <= 0 || unit == 0 || static_cast<uint64_t>(times) <= kMaxRepeat / unit,
             "repeating a sequence of ", unit, " ", times, " times makes more than ", kMaxRepeat, " elements");
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return same_kind_string(seq, std::move(out));
  }
  List out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out), seq.seq());
}

bool is_sequence(const Value& v) { return v.is_string() || (v.is_list() && v.seq() != Seq::kIterator); }

Value arithmetic(BinaryOp op, const Value& a, const Value& b) {
  const bool numbers = a.is_number() && b.is_number();
  const bool floats = numbers && (a.is_float() || b.is_float());
  switch (op) {
    case BinaryOp::kAdd:
      if (numbers) return floats ? Value(a.as_float() + b.as_float()) : Value(checked_int(op, a.as_int(), b.as_int()));
      if (a.is_string() && b.is_string()) {
        // Markup + str escapes the str (and str + Markup too), as markupsafe does.
        if (a.is_markup() || b.is_markup())
          return Value::markup((a.is_markup() ? a.str() : html_escape(a.str())) + (b.is_markup() ? b.str() : html_escape(b.str())));
        return Value(a.str() + b.str());
      }
      if (a.is_list() && b.is_list() && a.seq() == b.seq() && a.seq() != Seq::kIterator) {
        List out = a.items();
        out.insert(out.end(), b.items().begin(), b.items().end());
        return Value::list(std::move(out), a.seq());
      }
      if (a.is_string() && !b.is_undefined())
        throw Error(cat("can only concatenate str (not \"", b.type_name(), "\") to str"));
      bad_operands("+", a, b);
    case BinaryOp::kSub:
      if (numbers) return floats ? Value(a.as_float() - b.as_float()) : Value(checked_int(op, a.as_int(), b.as_int()));
      bad_operands("-", a, b);
    case BinaryOp::kMul:
      if (numbers) return floats ? Value(a.as_float() * b.as_float()) : Value(checked_int(op, a.as_int(), b.as_int()));
      if (is_sequence(a) && b.is_integral()) return repeat(a, b.as_int());
      if (a.is_integral() && is_sequence(b)) return repeat(b, a.as_int());
      bad_operands("*", a, b);
    case BinaryOp::kDiv:
      if (!numbers) bad_operands("/", a, b);
      if (b.as_float() == 0) throw Error("division by zero");
      return Value(a.as_float() / b.as_float());
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      if (op == BinaryOp::kMod && a.is_string()) return Value(percent_format(a.str(), b));
      if (!numbers) bad_operands(op == BinaryOp::kMod ? "%" : "//", a, b);
      if (b.as_float() == 0) throw Error(floats ? "float division by zero" : "integer division or modulo by zero");
      if (floats) {
        double x = a.as_float(), y = b.as_float();
        // CPython's float divmod
        double m = std::fmod(x, y);
        double div = (x - m) / y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          m += y;
          div -= 1.0;
        }
        if (op == BinaryOp::kMod) return Value(m != 0 ? m : std::copysign(0.0, y));
        double q = std::floor(div);
        if (div - q > 0.5) q += 1.0;
        return Value(div != 0 ? q : std::copysign(0.0, x / y));
      }
      int64_t x = a.as_int(), y = b.as_int();
      if (x == INT64_MIN && y == -1) int_overflow(op == BinaryOp::kMod ? "%" : "//", x, y);
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        m += y;
        --q;
      }
      return op == BinaryOp::kMod ? Value(m) : Value(q);
    }
    case BinaryOp::kPow:
      if (!numbers) bad_operands("**", a, b);
      if (!floats && b.as_int() >= 0) return Value(int_pow(a.as_int(), b.as_int()));
      return Value(std::pow(a.as_float(), b.as_float()));
    default: break;
  }
  throw Error("unknown operator");
}

}  // namespace

Value BinaryExpr::eval(Renderer& r) const {
  if (op == BinaryOp::kAnd) {
    Value a = left->eval(r);
    return truthy(a) ? right->eval(r) : a;
  }
  if (op == BinaryOp::kOr) {
    Value a = left->eval(r);
    return truthy(a) ? a : right->eval(r);
  }
  Value a = left->eval(r);
  Value b = right->eval(r);
  r.at = pos;
  if (op == BinaryOp::kConcat) return Value(py_str(a) + py_str(b));
  return arithmetic(op, a, b);
}

namespace {

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string())
        throw Error(cat("'in <string>' requires string as left operand, not ", item.type_name()));
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.items())
        if (py_equal(v, item)) return true;
      return false;
    case Value::Kind::kDict: return container.dict().find(item) != nullptr;
    default: throw Error(cat("argument of type '", container.type_name(), "' is not iterable"));
  }
}

}  // namespace

Value CompareExpr::eval(Renderer& r) const {
  Value a = first->eval(r);
  for (const auto& [op, e] : rest) {
    Value b = e->eval(r);
    r.at = pos;
    bool ok;
    switch (op) {
      case CompareOp::kEq: ok = py_equal(a, b); break;
      case CompareOp::kNe: ok = !py_equal(a, b); break;
      case CompareOp::kLt: ok = py_compare(a, b) < 0; break;
      case CompareOp::kLe: ok = py_compare(a, b) <= 0; break;
      case CompareOp::kGt: ok = py_compare(a, b) > 0; break;
      case CompareOp::kGe: ok = py_compare(a, b) >= 0; break;
      case CompareOp::kIn: ok = contains(b, a); break;
      case CompareOp::kNotIn: ok = !contains(b, a); break;
    }
    if (!ok) return Value(false);
    a = std::move(b);
  }
  return Value(true);
}

Value CondExpr::eval(Renderer& r) const {
  if (truthy(test->eval(r))) return then->eval(r);
  if (otherwise) return otherwise->eval(r);
  return Value::undefined(cat("the inline if-expression on line ", pos.line,
                              " evaluated to false and no else section was defined."));
}

// ---- statements -------------------------------------------------------------------------------

Flow render_body(const Body& body, Renderer& r, std::string& out) {
  for (const auto& s : body) {
    Flow f = s->render(r, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Flow DataStmt::render(Renderer&, std::string& out) const {
  out += text;
  return Flow::kNormal;
}

Flow OutputStmt::render(Renderer& r, std::string& out) const {
  r.at = pos;
  out += py_str(expr->eval(r));
  return Flow::kNormal;
}

Flow IfStmt::render(Renderer& r, std::string& out) const {
  for (const auto& [test, body] : branches) {
    r.at = test->pos;
    if (truthy(test->eval(r))) return render_body(body, r, out);
  }
  return render_body(otherwise, r, out);
}

Flow ForStmt::render(Renderer& r, std::string& out) const {
  r.at = iterable->pos;
  Value seq = iterable->eval(r);
  r.at = iterable->pos;
  List items = iterate(seq);
  if (filter) {
    List kept;
    for (Value& v : items) {
      FrameScope scope(r, r.new_frame(r.frame));
      bind(r, target, v);
      if (truthy(filter->eval(r))) kept.push_back(std::move(v));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    FrameScope scope(r, r.new_frame(r.frame));
    render_body(otherwise, r, out);
    return Flow::kNormal;
  }
  auto shared = std::make_shared<const List>(std::move(items));
  Frame* outer = r.frame;
  for (size_t i = 0; i < shared->size(); ++i) {
    FrameScope scope(r, r.new_frame(outer));
    r.at = target.pos;
    bind(r, target, (*shared)[i]);
    r.assign("loop", Value::object(std::make_shared<LoopInfo>(shared, i)));
    if (render_body(body, r, out) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Flow SetStmt::render(Renderer& r, std::string& out) const {
  Value v = value->eval(r);
  r.at = pos;
  bind(r, target, v);
  (void)out;
  return Flow::kNormal;
}

Flow SetBlockStmt::render(Renderer& r, std::string&) const {
  std::string text;
  {
    FrameScope scope(r, r.new_frame(r.frame));
    render_body(body, r, text);
  }
  Value v = apply_filters(r, filters, Value(std::move(text)));
  r.at = pos;
  bind(r, target, v);
  return Flow::kNormal;
}

Flow MacroStmt::render(Renderer& r, std::string&) const {
  r.assign(macro.name, Value::object(std::make_shared<Macro>(&macro, r.frame)));
  return Flow::kNormal;
}

Flow CallBlockStmt::render(Renderer& r, std::string& out) const {
  Value caller_fn = Value::object(std::make_shared<Macro>(&caller, r.frame));
  Value fn;
  if (auto* attr = dynamic_cast<const GetAttr*>(call->callee.get())) {
    Value self = attr->object->eval(r);
    r.at = attr->pos;
    fn = r.get_attr(self, attr->name);
  } else {
    fn = call->callee->eval(r);
  }
  Args a = call->args.eval(r);
  a.keywords.emplace_back("caller", caller_fn);
  r.at = call->pos;
  out += py_str(r.call(fn, a));
  return Flow::kNormal;
}

Flow FilterBlockStmt::render(Renderer& r, std::string& out) const {
  std::string text;
  {
    FrameScope scope(r, r.new_frame(r.frame));
    render_body(body, r, text);
  }
  out += py_str(apply_filters(r, filters, Value(std::move(text))));
  return Flow::kNormal;
}

Flow WithStmt::render(Renderer& r, std::string& out) const {
  std::vector<Value> values;
  for (const auto& [t, e] : assignments) values.push_back(e->eval(r));
  FrameScope scope(r, r.new_frame(r.frame));
  for (size_t i = 0; i < values.size(); ++i) bind(r, assignments[i].first, values[i]);
  return render_body(body, r, out);
}

Flow LoopControlStmt::render(Renderer&, std::string&) const { return flow; }

Flow BlockStmt::render(Renderer& r, std::string& out) const { return render_body(body, r, out); }

}  // namespace onyx::genai::jinja
