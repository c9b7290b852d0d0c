// The syntax tree of a parsed Jinja template (jinja_parser.cpp builds it, jinja_render.cpp
// runs it). Nodes are immutable after parsing, so one tree serves concurrent renders.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "genai/jinja_value.h"

namespace onyx::genai::jinja {

struct Pos {
  int line = 0, column = 0;
};

// ---- expressions ------------------------------------------------------------------------------

struct Expr {
  explicit Expr(Pos p) : pos(p) {}
  virtual ~Expr() = default;
  virtual Value eval(Renderer& r) const = 0;
  Pos pos;
};
using ExprPtr = std::unique_ptr<Expr>;

struct CallArgs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  ExprPtr star_args, star_kwargs;  // *args, **kwargs
  Args eval(Renderer& r) const;
};

struct Literal : Expr {
  Literal(Pos p, Value v) : Expr(p), value(std::move(v)) {}
  Value eval(Renderer& r) const override;
  Value value;
};

struct ListExpr : Expr {
  ListExpr(Pos p, Seq s) : Expr(p), seq(s) {}
  Value eval(Renderer& r) const override;
  Seq seq;  // a list or a tuple
  std::vector<ExprPtr> items;
};

struct DictExpr : Expr {
  using Expr::Expr;
  Value eval(Renderer& r) const override;
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct NameExpr : Expr {
  NameExpr(Pos p, std::string n) : Expr(p), name(std::move(n)) {}
  Value eval(Renderer& r) const override;
  std::string name;
};

struct GetAttr : Expr {
  GetAttr(Pos p, ExprPtr o, std::string n) : Expr(p), object(std::move(o)), name(std::move(n)) {}
  Value eval(Renderer& r) const override;
  ExprPtr object;
  std::string name;
};

struct GetItem : Expr {
  GetItem(Pos p, ExprPtr o, ExprPtr k) : Expr(p), object(std::move(o)), key(std::move(k)) {}
  Value eval(Renderer& r) const override;
  ExprPtr object, key;
};

struct SliceExpr : Expr {
  SliceExpr(Pos p, ExprPtr o) : Expr(p), object(std::move(o)) {}
  Value eval(Renderer& r) const override;
  ExprPtr object, start, stop, step;  // any may be null
};

struct CallExpr : Expr {
  CallExpr(Pos p, ExprPtr c) : Expr(p), callee(std::move(c)) {}
  Value eval(Renderer& r) const override;
  ExprPtr callee;
  CallArgs args;
};

// A filter or a test, resolved to its function when parsed.
using FilterFn = Value (*)(Renderer& r, const Value& subject, Args& args);
using TestFn = bool (*)(Renderer& r, const Value& subject, Args& args);

struct FilterExpr : Expr {
  FilterExpr(Pos p, ExprPtr s, std::string n, FilterFn f) : Expr(p), subject(std::move(s)), name(std::move(n)), fn(f) {}
  Value eval(Renderer& r) const override;
  ExprPtr subject;
  std::string name;
  FilterFn fn;
  CallArgs args;
};

struct TestExpr : Expr {
  TestExpr(Pos p, ExprPtr s, std::string n, TestFn f) : Expr(p), subject(std::move(s)), name(std::move(n)), fn(f) {}
  Value eval(Renderer& r) const override;
  ExprPtr subject;
  std::string name;
  TestFn fn;
  CallArgs args;
};

enum class UnaryOp { kNot, kNeg, kPos };
struct UnaryExpr : Expr {
  UnaryExpr(Pos p, UnaryOp o, ExprPtr e) : Expr(p), op(o), operand(std::move(e)) {}
  Value eval(Renderer& r) const override;
  UnaryOp op;
  ExprPtr operand;
};

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat, kAnd, kOr };
struct BinaryExpr : Expr {
  BinaryExpr(Pos p, BinaryOp o, ExprPtr a, ExprPtr b) : Expr(p), op(o), left(std::move(a)), right(std::move(b)) {}
  Value eval(Renderer& r) const override;
  BinaryOp op;
  ExprPtr left, right;
};

enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };
struct CompareExpr : Expr {
  CompareExpr(Pos p, ExprPtr f) : Expr(p), first(std::move(f)) {}
  Value eval(Renderer& r) const override;
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;  // a < b < c compares pairwise, as Python does
};

struct CondExpr : Expr {
  using Expr::Expr;
  Value eval(Renderer& r) const override;
  ExprPtr test, then, otherwise;  // otherwise may be null: an Undefined then
};

// ---- statements -------------------------------------------------------------------------------

enum class Flow { kNormal, kBreak, kContinue };

struct Stmt {
  explicit Stmt(Pos p) : pos(p) {}
  virtual ~Stmt() = default;
  virtual Flow render(Renderer& r, std::string& out) const = 0;
  Pos pos;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

Flow render_body(const Body& body, Renderer& r, std::string& out);

struct DataStmt : Stmt {
  DataStmt(Pos p, std::string t) : Stmt(p), text(std::move(t)) {}
  Flow render(Renderer& r, std::string& out) const override;
  std::string text;
};

struct OutputStmt : Stmt {
  OutputStmt(Pos p, ExprPtr e) : Stmt(p), expr(std::move(e)) {}
  Flow render(Renderer& r, std::string& out) const override;
  ExprPtr expr;
};

struct IfStmt : Stmt {
  using Stmt::Stmt;
  Flow render(Renderer& r, std::string& out) const override;
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif...
  Body otherwise;
};

// What `for` and `set` assign to: a name, a namespace attribute (set only), or names to unpack.
struct Target {
  std::string name;
  std::string attr;  // ns.attr when not empty
  std::vector<Target> unpack;
  bool is_tuple = false;
  Pos pos;
};

struct ForStmt : Stmt {
  using Stmt::Stmt;
  Flow render(Renderer& r, std::string& out) const override;
  Target target;
  ExprPtr iterable, filter;  // filter may be null
  Body body, otherwise;
};

struct SetStmt : Stmt {
  using Stmt::Stmt;
  Flow render(Renderer& r, std::string& out) const override;
  Target target;
  ExprPtr value;
};

// {% set name %}...{% endset %}, optionally through filters ({% set name | trim %}).
struct SetBlockStmt : Stmt {
  using Stmt::Stmt;
  Flow render(Renderer& r, std::string& out) const override;
  Target target;
  Body body;
  std::vector<std::unique_ptr<FilterExpr>> filters;  // each applied to the captured text in turn
};

struct MacroParam {
  std::string name;
  ExprPtr fallback;  // may be null
};

struct MacroDef {
  std::string name;
  std::vector<MacroParam> params;
  Body body;
  // jinja2 accepts extra arguments only when the body reads varargs / kwargs.
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
  Pos pos;
};

struct MacroStmt : Stmt {
  using Stmt::Stmt;
  Flow render(Renderer& r, std::string& out) const override;
  MacroDef macro;
};

// {% call(params) macro(args) %}body{% endcall %}: the body is the macro's caller().
struct CallBlockStmt : Stmt {
  using Stmt::Stmt;
  Flow render(Renderer& r, std::string& out) const override;
  std::unique_ptr<CallExpr> call;
  MacroDef caller;
};

struct FilterBlockStmt : Stmt {
  using Stmt::Stmt;
  Flow render(Renderer& r, std::string& out) const override;
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
};

struct WithStmt : Stmt {
  using Stmt::Stmt;
  Flow render(Renderer& r, std::string& out) const override;
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};

struct LoopControlStmt : Stmt {
  LoopControlStmt(Pos p, Flow f) : Stmt(p), flow(f) {}
  Flow render(Renderer& r, std::string& out) const override;
  Flow flow;
};

// A body rendered in place: {% generation %} (transformers' assistant-mask tag) and the like.
struct BlockStmt : Stmt {
  using Stmt::Stmt;
  Flow render(Renderer& r, std::string& out) const override;
  Body body;
};

// Parses a whole template; syntax errors are onyx::Errors that name line and column.
Body parse_template(std::string_view source);

// The builtin filters and tests by name (nullptr when jinja2 has no such one).
FilterFn find_filter(const std::string& name);
TestFn find_test(const std::string& name);

}  // namespace onyx::genai::jinja
