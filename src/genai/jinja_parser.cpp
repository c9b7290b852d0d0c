// jinja2's grammar, one function per rule of its parser (jinja2/parser.py): the same
// precedence (filters and tests bind tighter than arithmetic, `not` looser than comparisons),
// the same tuple and assignment-target rules, the same statements.
#include <set>
#include <type_traits>

#include "genai/jinja_ast.h"
#include "genai/jinja_lexer.h"
#include "onyx/error.h"

namespace onyx::genai::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse_all() {
    Body body = subparse({});
    if (cur().type != Tok::kEnd) fail_here("unexpected tag");
    for (const Unknown& u : unknown_)
      if (!u.soft) fail_at(u.at, cat("no ", u.kind, " named '", u.name, "'"));
    return body;
  }

 private:
  // ---- the token stream -----------------------------------------------------------------------
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  Pos pos() const { return Pos{cur().line, cur().column}; }
  bool is_op(const char* op) const { return cur().type == Tok::kOperator && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::kName && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::kData: return "template text";
      case Tok::kVarBegin: return "'{{'";
      case Tok::kVarEnd: return "the end of the {{ }} expression";
      case Tok::kBlockBegin: return "'{%'";
      case Tok::kBlockEnd: return "the end of the {% %} tag";
      case Tok::kName: return "'" + t.text + "'";
      case Tok::kString: return "a string";
      case Tok::kInteger:
      case Tok::kFloat: return "the number " + t.text;
      case Tok::kOperator: return "'" + t.text + "'";
      case Tok::kEnd: return "the end of the template";
    }
    return "?";
  }
  [[noreturn]] void fail_at(const Token& t, const std::string& message) const {
    throw Error(cat(where(t.line, t.column), ": ", message));
  }
  [[noreturn]] void fail_here(const std::string& message) const {
    fail_at(cur(), cat(message, ", got ", describe(cur())));
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail_here(cat("expected '", op, "'"));
  }
  void expect_name(const char* name) {
    if (!skip_name(name)) fail_here(cat("expected '", name, "'"));
  }
  std::string expect_identifier() {
    if (cur().type != Tok::kName) fail_here("expected a name");
    return next().text;
  }
  void expect_block_end() {
    if (cur().type != Tok::kBlockEnd) fail_here("expected the end of the tag ('%}')");
    next();
  }

  // ---- statements -----------------------------------------------------------------------------
  struct Open {
    std::string tag;
    Pos pos;
  };

  // Statements up to a block tag named in `ends` (left current) or the end of the template.
  Body subparse(const std::set<std::string>& ends) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::kEnd) {
        if (!ends.empty()) {
          const Open& o = open_.back();
          fail_at(t, cat("unexpected end of template: the '", o.tag, "' tag at ", where(o.pos.line, o.pos.column),
                         " is not closed (expected ", join_tags(ends), ")"));
        }
        return body;
      }
      if (t.type == Tok::kData) {
        body.push_back(std::make_unique<DataStmt>(Pos{t.line, t.column}, t.text));
        next();
      } else if (t.type == Tok::kVarBegin) {
        Pos p{t.line, t.column};
        next();
        ExprPtr e = parse_tuple(false, true, {}, false);
        if (cur().type != Tok::kVarEnd) fail_here("expected the end of the expression ('}}')");
        next();
        body.push_back(std::make_unique<OutputStmt>(p, std::move(e)));
      } else if (t.type == Tok::kBlockBegin) {
        next();
        if (cur().type == Tok::kName && ends.count(cur().text)) return body;
        body.push_back(parse_statement());
        expect_block_end();
      } else {
        fail_here("unexpected token");
      }
    }
  }

  static std::string join_tags(const std::set<std::string>& ends) {
    std::string s;
    for (const auto& e : ends) s += (s.empty() ? "'" : " or '") + e + "'";
    return s;
  }

  // The body of a block tag, after its header: up to one of `ends`, which stays current.
  Body parse_statements(const std::set<std::string>& ends, bool drop_end) {
    skip_op(":");
    expect_block_end();
    Body body = subparse(ends);
    if (drop_end) next();
    return body;
  }

  StmtPtr parse_statement() {
    if (cur().type != Tok::kName) fail_here("expected a tag name");
    const Token& tag = cur();
    Pos p = pos();
    const std::string name = tag.text;
    static const std::set<std::string> kUnsupported = {"block", "extends", "include", "import", "from",
                                                        "autoescape", "do", "print", "trans"};
    if (kUnsupported.count(name)) fail_at(tag, cat("the '", name, "' tag is not supported in chat templates"));
    open_.push_back(Open{name, p});
    StmtPtr s;
    if (name == "for") s = parse_for();
    else if (name == "if") s = parse_if();
    else if (name == "set") s = parse_set();
    else if (name == "macro") s = parse_macro();
    else if (name == "call") s = parse_call_block();
    else if (name == "filter") s = parse_filter_block();
    else if (name == "with") s = parse_with();
    else if (name == "generation") s = parse_generation();
    else if (name == "break" || name == "continue") {
      next();
      if (loops_ == 0) fail_at(tag, cat("'", name, "' outside of a loop"));
      s = std::make_unique<LoopControlStmt>(p, name == "break" ? Flow::kBreak : Flow::kContinue);
    } else {
      open_.pop_back();
      if (!open_.empty()) {
        const Open& o = open_.back();
        fail_at(tag, cat("unexpected tag '", name, "'; the innermost open block is '", o.tag, "' at ",
                         where(o.pos.line, o.pos.column)));
      }
      fail_at(tag, cat("unknown tag '", name, "'"));
    }
    open_.pop_back();
    return s;
  }

  StmtPtr parse_for() {
    auto s = std::make_unique<ForStmt>(pos());
    next();
    s->target = parse_assign_target(false, {"in"});
    expect_name("in");
    s->iterable = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->filter = parse_expression(true);
    if (is_name("recursive")) fail_here("recursive loops are not supported in chat templates");
    with_soft(false, [&] {
      ++loops_;
      s->body = parse_statements({"endfor", "else"}, false);
      --loops_;
      if (next().text == "else") s->otherwise = parse_statements({"endfor"}, true);
    });
    return s;
  }

  StmtPtr parse_if() {
    return with_soft(true, [&] { return parse_if_soft(); });
  }

  StmtPtr parse_if_soft() {
    auto s = std::make_unique<IfStmt>(pos());
    next();
    while (true) {
      ExprPtr test = parse_tuple(false, false, {}, false);
      Body body = parse_statements({"elif", "else", "endif"}, false);
      s->branches.emplace_back(std::move(test), std::move(body));
      std::string end = next().text;
      if (end == "elif") continue;
      if (end == "else") s->otherwise = parse_statements({"endif"}, true);
      break;
    }
    return s;
  }

  StmtPtr parse_set() {
    Pos p = pos();
    next();
    Target target = parse_assign_target(true, {});
    if (skip_op("=")) {
      auto s = std::make_unique<SetStmt>(p);
      s->target = std::move(target);
      s->value = parse_tuple(false, true, {}, false);
      return s;
    }
    auto s = std::make_unique<SetBlockStmt>(p);
    s->target = std::move(target);
    if (!s->target.attr.empty() || s->target.is_tuple) fail_here("a {% set %} block assigns to one name");
    while (is_op("|")) {
      next();
      s->filters.push_back(parse_filter_call(nullptr));
    }
    with_soft(false, [&] { s->body = parse_statements({"endset"}, true); });
    return s;
  }

  void parse_signature(MacroDef& m) {
    expect_op("(");
    bool defaults = false;
    while (!is_op(")")) {
      if (!m.params.empty()) expect_op(",");
      MacroParam param;
      param.name = expect_identifier();
      if (skip_op("=")) {
        param.fallback = parse_expression(true);
        defaults = true;
      } else if (defaults) {
        fail_here("a parameter without a default follows one with a default");
      }
      m.params.push_back(std::move(param));
    }
    expect_op(")");
  }

  // Parses a macro-like body, noting whether it reads varargs, kwargs or caller.
  void parse_macro_body(MacroDef& m, const char* end) {
    int saved_loops = loops_;
    loops_ = 0;
    bool v = uses_varargs_, k = uses_kwargs_, c = uses_caller_;
    uses_varargs_ = uses_kwargs_ = uses_caller_ = false;
    with_soft(false, [&] { m.body = parse_statements({end}, true); });
    m.uses_varargs = uses_varargs_;
    m.uses_kwargs = uses_kwargs_;
    m.uses_caller = uses_caller_;
    uses_varargs_ |= v;
    uses_kwargs_ |= k;
    uses_caller_ |= c;
    loops_ = saved_loops;
  }

  StmtPtr parse_macro() {
    auto s = std::make_unique<MacroStmt>(pos());
    next();
    s->macro.pos = s->pos;
    s->macro.name = expect_identifier();
    parse_signature(s->macro);
    parse_macro_body(s->macro, "endmacro");
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = std::make_unique<CallBlockStmt>(pos());
    next();
    s->caller.name = "caller";
    s->caller.pos = s->pos;
    if (is_op("(")) parse_signature(s->caller);
    const Token& at = cur();
    ExprPtr call = parse_expression(true);
    auto* c = dynamic_cast<CallExpr*>(call.get());
    if (!c) fail_at(at, "{% call %} needs a macro call");
    call.release();
    s->call.reset(c);
    parse_macro_body(s->caller, "endcall");
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = std::make_unique<FilterBlockStmt>(pos());
    next();
    s->filters.push_back(parse_filter_call(nullptr));
    while (skip_op("|")) s->filters.push_back(parse_filter_call(nullptr));
    with_soft(false, [&] { s->body = parse_statements({"endfilter"}, true); });
    return s;
  }

  StmtPtr parse_with() {
    auto s = std::make_unique<WithStmt>(pos());
    next();
    while (cur().type != Tok::kBlockEnd) {
      if (!s->assignments.empty()) expect_op(",");
      Target t = parse_assign_target(false, {});
      expect_op("=");
      s->assignments.emplace_back(std::move(t), parse_expression(true));
    }
    with_soft(false, [&] { s->body = parse_statements({"endwith"}, true); });
    return s;
  }

  StmtPtr parse_generation() {
    auto s = std::make_unique<BlockStmt>(pos());
    next();
    s->body = parse_statements({"endgeneration"}, true);
    return s;
  }

  // name | ns.attr (with_namespace) | a, b | (a, b), c
  Target parse_assign_target(bool with_namespace, const std::set<std::string>& extra_ends) {
    Target t;
    t.pos = pos();
    if (with_namespace && cur().type == Tok::kName && peek().type == Tok::kOperator && peek().text == ".") {
      t.name = next().text;
      next();
      t.attr = expect_identifier();
      return t;
    }
    std::vector<Target> items;
    bool tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_ends)) break;
      items.push_back(parse_target_primary());
      if (is_op(",")) tuple = true;
      else break;
    }
    if (!tuple) {
      if (items.empty()) fail_here("expected a name to assign to");
      return std::move(items[0]);
    }
    t.is_tuple = true;
    t.unpack = std::move(items);
    return t;
  }

  Target parse_target_primary() {
    Target t;
    t.pos = pos();
    if (skip_op("(")) {
      t.is_tuple = true;
      while (!is_op(")")) {
        if (!t.unpack.empty()) expect_op(",");
        if (is_op(")")) break;
        t.unpack.push_back(parse_target_primary());
      }
      expect_op(")");
      return t;
    }
    if (cur().type != Tok::kName) fail_here("expected a name to assign to");
    static const std::set<std::string> kConstants = {"true", "false", "none", "True", "False", "None"};
    if (kConstants.count(cur().text)) fail_here("cannot assign to a constant");
    t.name = next().text;
    return t;
  }

  // ---- expressions ----------------------------------------------------------------------------
  bool is_tuple_end(const std::set<std::string>& extra_ends) const {
    if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || cur().type == Tok::kEnd) return true;
    if (is_op(")")) return true;
    return cur().type == Tok::kName && extra_ends.count(cur().text);
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const std::set<std::string>& extra_ends,
                      bool explicit_parentheses) {
    Pos p = pos();
    std::vector<ExprPtr> items;
    bool tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_ends)) break;
      items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(",")) tuple = true;
      else break;
    }
    if (!tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) fail_here("expected an expression");
    }
    auto t = std::make_unique<ListExpr>(p, Seq::kTuple);
    t->items = std::move(items);
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    if (!with_condexpr) return parse_or();
    Pos p = pos();
    size_t first_unknown = unknown_.size();
    ExprPtr e = parse_or();
    while (skip_name("if")) {
      for (size_t k = first_unknown; k < unknown_.size(); ++k) unknown_[k].soft = true;
      auto c = std::make_unique<CondExpr>(p);
      with_soft(true, [&] {
        c->test = parse_or();
        if (skip_name("else")) c->otherwise = parse_expression(true);
      });
      c->then = std::move(e);
      e = std::move(c);
      p = pos();
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      Pos p = pos();
      next();
      e = std::make_unique<BinaryExpr>(p, BinaryOp::kOr, std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      Pos p = pos();
      next();
      e = std::make_unique<BinaryExpr>(p, BinaryOp::kAnd, std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      Pos p = pos();
      next();
      return std::make_unique<UnaryExpr>(p, UnaryOp::kNot, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    Pos p = pos();
    ExprPtr first = parse_math1();
    std::unique_ptr<CompareExpr> c;
    while (true) {
      CompareOp op;
      if (is_op("==")) op = CompareOp::kEq;
      else if (is_op("!=")) op = CompareOp::kNe;
      else if (is_op("<")) op = CompareOp::kLt;
      else if (is_op("<=")) op = CompareOp::kLe;
      else if (is_op(">")) op = CompareOp::kGt;
      else if (is_op(">=")) op = CompareOp::kGe;
      else if (is_name("in")) op = CompareOp::kIn;
      else if (is_name("not") && peek().type == Tok::kName && peek().text == "in") {
        next();
        op = CompareOp::kNotIn;
      } else {
        break;
      }
      next();
      if (!c) c = std::make_unique<CompareExpr>(p, std::move(first));
      c->rest.emplace_back(op, parse_math1());
    }
    if (c) return c;
    return first;
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      Pos p = pos();
      BinaryOp op = next().text == "+" ? BinaryOp::kAdd : BinaryOp::kSub;
      e = std::make_unique<BinaryExpr>(p, op, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      Pos p = pos();
      next();
      e = std::make_unique<BinaryExpr>(p, BinaryOp::kConcat, std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      Pos p = pos();
      std::string o = next().text;
      BinaryOp op = o == "*" ? BinaryOp::kMul : o == "/" ? BinaryOp::kDiv : o == "//" ? BinaryOp::kFloorDiv : BinaryOp::kMod;
      e = std::make_unique<BinaryExpr>(p, op, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      Pos p = pos();
      next();
      e = std::make_unique<BinaryExpr>(p, BinaryOp::kPow, std::move(e), parse_unary(true));
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    Pos p = pos();
    ExprPtr e;
    if (is_op("-")) {
      next();
      e = std::make_unique<UnaryExpr>(p, UnaryOp::kNeg, parse_unary(false));
    } else if (is_op("+")) {
      next();
      e = std::make_unique<UnaryExpr>(p, UnaryOp::kPos, parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    Pos p = pos();
    switch (t.type) {
      case Tok::kName: {
        std::string name = next().text;
        if (name == "true" || name == "True") return std::make_unique<Literal>(p, Value(true));
        if (name == "false" || name == "False") return std::make_unique<Literal>(p, Value(false));
        if (name == "none" || name == "None") return std::make_unique<Literal>(p, Value::none());
        if (name == "varargs") uses_varargs_ = true;
        if (name == "kwargs") uses_kwargs_ = true;
        if (name == "caller") uses_caller_ = true;
        return std::make_unique<NameExpr>(p, name);
      }
      case Tok::kString: {
        std::string s = next().text;
        while (cur().type == Tok::kString) s += next().text;  // "a" "b" is "ab", as in Python
        return std::make_unique<Literal>(p, Value(std::move(s)));
      }
      case Tok::kInteger: return std::make_unique<Literal>(p, Value(next().integer));
      case Tok::kFloat: return std::make_unique<Literal>(p, Value(next().number));
      case Tok::kOperator:
        if (t.text == "(") {
          next();
          ExprPtr e = parse_tuple(false, true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          auto l = std::make_unique<ListExpr>(p, Seq::kList);
          while (!is_op("]")) {
            if (!l->items.empty()) expect_op(",");
            if (is_op("]")) break;
            l->items.push_back(parse_expression(true));
          }
          expect_op("]");
          return l;
        }
        if (t.text == "{") {
          next();
          auto d = std::make_unique<DictExpr>(p);
          while (!is_op("}")) {
            if (!d->items.empty()) expect_op(",");
            if (is_op("}")) break;
            ExprPtr key = parse_expression(true);
            expect_op(":");
            d->items.emplace_back(std::move(key), parse_expression(true));
          }
          expect_op("}");
          return d;
        }
        break;
      default: break;
    }
    fail_here("expected an expression");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) e = parse_subscript(std::move(e));
      else if (is_op("(")) e = parse_call(std::move(e));
      else return e;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        next();
        e = parse_filter_call(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr e) {
    Pos p = pos();
    if (skip_op(".")) {
      const Token& t = cur();
      if (t.type == Tok::kName) return std::make_unique<GetAttr>(p, std::move(e), next().text);
      if (t.type == Tok::kInteger)
        return std::make_unique<GetItem>(p, std::move(e), std::make_unique<Literal>(p, Value(next().integer)));
      fail_here("expected a name or a number after '.'");
    }
    expect_op("[");
    std::vector<ExprPtr> keys;
    std::unique_ptr<SliceExpr> slice;
    while (!is_op("]")) {
      if (!keys.empty() || slice) expect_op(",");
      // a[start:stop:step], each part optional
      Pos kp = pos();
      ExprPtr start;
      if (!is_op(":")) {
        start = parse_expression(true);
        if (!is_op(":")) {
          keys.push_back(std::move(start));
          continue;
        }
      }
      if (slice || !keys.empty()) fail_at(cur(), "a subscript with several slices is not supported");
      slice = std::make_unique<SliceExpr>(kp, nullptr);
      slice->start = std::move(start);
      next();  // ':'
      if (!is_op("]") && !is_op(",") && !is_op(":")) slice->stop = parse_expression(true);
      if (skip_op(":") && !is_op("]") && !is_op(",")) slice->step = parse_expression(true);
    }
    expect_op("]");
    if (slice) {
      if (!keys.empty()) fail_at(cur(), "a subscript with several slices is not supported");
      slice->object = std::move(e);
      slice->pos = p;
      return slice;
    }
    if (keys.empty()) fail_here("expected a subscript");
    if (keys.size() == 1) return std::make_unique<GetItem>(p, std::move(e), std::move(keys[0]));
    auto tuple = std::make_unique<ListExpr>(p, Seq::kTuple);
    tuple->items = std::move(keys);
    return std::make_unique<GetItem>(p, std::move(e), std::move(tuple));
  }

  void parse_call_args(CallArgs& a) {
    const Token& open = cur();
    expect_op("(");
    bool need_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) fail_at(open, "invalid syntax for a function call");
    };
    while (!is_op(")")) {
      if (need_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (skip_op("*")) {
        ensure(!a.star_args && !a.star_kwargs);
        a.star_args = parse_expression(true);
      } else if (skip_op("**")) {
        ensure(!a.star_kwargs);
        a.star_kwargs = parse_expression(true);
      } else if (cur().type == Tok::kName && peek().type == Tok::kOperator && peek().text == "=") {
        ensure(!a.star_kwargs);
        std::string key = next().text;
        next();
        a.keywords.emplace_back(std::move(key), parse_expression(true));
      } else {
        ensure(!a.star_args && !a.star_kwargs && a.keywords.empty());
        a.positional.push_back(parse_expression(true));
      }
      need_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr e) {
    Pos at = e->pos;  // errors of a call point at what was called
    auto c = std::make_unique<CallExpr>(at, std::move(e));
    parse_call_args(c->args);
    return c;
  }

  // After the '|': name[(args)]. `subject` may be null (filter blocks, {% set x | f %}).
  std::unique_ptr<FilterExpr> parse_filter_call(ExprPtr subject) {
    const Token& t = cur();
    std::string name = expect_identifier();
    while (is_op(".")) {
      next();
      name += "." + expect_identifier();
    }
    FilterFn fn = find_filter(name);
    if (!fn) note_unknown(t, "filter", name);
    auto f = std::make_unique<FilterExpr>(Pos{t.line, t.column}, std::move(subject), name, fn);
    if (is_op("(")) parse_call_args(f->args);
    return f;
  }

  ExprPtr parse_test(ExprPtr e) {
    Pos p = pos();
    next();  // 'is'
    bool negated = skip_name("not");
    const Token& t = cur();
    std::string name = expect_identifier();
    while (is_op(".")) {
      next();
      name += "." + expect_identifier();
    }
    TestFn fn = find_test(name);
    if (!fn) note_unknown(t, "test", name);
    auto test = std::make_unique<TestExpr>(p, std::move(e), name, fn);
    const Token& a = cur();
    bool arg_start = a.type == Tok::kName || a.type == Tok::kString || a.type == Tok::kInteger ||
                     a.type == Tok::kFloat || (a.type == Tok::kOperator && (a.text == "[" || a.text == "{"));
    if (is_op("(")) {
      parse_call_args(test->args);
    } else if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_here("tests cannot be chained with 'is'");
      test->args.positional.push_back(parse_postfix(parse_primary()));
    }
    if (negated) return std::make_unique<UnaryExpr>(p, UnaryOp::kNot, std::move(test));
    return test;
  }

  // A filter or test that jinja2 does not have is an error when the template is parsed,
  // except inside an `if` or an inline if-expression, where jinja2 fails only if it runs.
  struct Unknown {
    Token at;
    std::string kind, name;
    bool soft;
  };
  void note_unknown(const Token& at, const char* kind, const std::string& name) {
    unknown_.push_back(Unknown{at, kind, name, soft_});
  }
  // Runs fn with soft_ set to `soft`.
  template <class Fn>
  std::invoke_result_t<Fn> with_soft(bool soft, Fn&& fn) {
    bool saved = soft_;
    soft_ = soft;
    struct Restore {
      bool& flag;
      bool saved;
      ~Restore() { flag = saved; }
    } restore{soft_, saved};
    return fn();
  }

  std::vector<Unknown> unknown_;
  bool soft_ = false;
  std::vector<Token> t_;
  size_t i_ = 0;
  std::vector<Open> open_;
  int loops_ = 0;
  bool uses_varargs_ = false, uses_kwargs_ = false, uses_caller_ = false;
};

}  // namespace

Body parse_template(std::string_view source) { return Parser(tokenize(source)).parse_all(); }

}  // namespace onyx::genai::jinja
