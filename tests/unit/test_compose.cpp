// Graph surgery of passes/compose.h: fixing an If's condition (a merged decoder split into its
// first-run and step graphs) computes what the If computes with that condition fed, and drops
// what only the other branch needed.
#include <gtest/gtest.h>

#include <memory>

#include "exec/executor.h"
#include "op_test_util.h"
#include "passes/compose.h"

namespace onyx {

namespace {

Node plain(const std::string& name, const std::string& op, std::vector<int> in, std::vector<int> out) {
  Node n;
  n.name = name;
  n.op_type = op;
  n.opset = 18;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

int outer(Graph& b, const std::string& name) {
  const int id = b.value_id(name);
  b.values[id].is_outer = true;
  b.outer_values.push_back(id);
  return id;
}

void add(Graph& g, Node n) {
  for (int o : n.outputs) g.values[o].producer = static_cast<int>(g.nodes.size());
  g.nodes.push_back(std::move(n));
}

// x[5], c (bool), W[5], V[5] (read only by the else branch):
//   then: o1 = (x + W) * B (B the branch's own initializer), o2 = x (passed through)
//   else: o1 = x - V,                                        o2 = -x; with "t" a name both use
//   r = o1 + o2 after the If; outputs o1, o2, r.
Graph make_graph() {
  Graph g;
  g.name = "merged";
  const int x = g.value_id("x"), c = g.value_id("c");
  for (int v : {x, c}) {
    g.values[v].is_input = true;
    g.inputs.push_back(v);
  }
  const int w = g.value_id("W"), v = g.value_id("V");
  g.values[w].is_initializer = g.values[v].is_initializer = true;
  g.initializers[w] = test::random_tensor<float>(Shape{5});
  g.initializers[v] = test::random_tensor<float>(Shape{5});
  // A value of the main graph named as a value the then-branch makes (the inlining renames it).
  const int t_main = g.value_id("t");

  auto then_b = std::make_shared<Graph>();
  then_b->name = "then";
  {
    Graph& b = *then_b;
    const int bx = outer(b, "x"), bw = outer(b, "W");
    const int bb = b.value_id("B");
    b.values[bb].is_initializer = true;
    b.initializers[bb] = test::random_tensor<float>(Shape{5});
    const int t = b.value_id("t"), o1 = b.value_id("then_o1");
    add(b, plain("then_add", "Add", {bx, bw}, {t}));
    add(b, plain("then_mul", "Mul", {t, bb}, {o1}));
    b.outputs = {o1, bx};
  }
  auto else_b = std::make_shared<Graph>();
  else_b->name = "else";
  {
    Graph& b = *else_b;
    const int bx = outer(b, "x"), bv = outer(b, "V");
    const int o1 = b.value_id("else_o1"), o2 = b.value_id("else_o2");
    add(b, plain("else_sub", "Sub", {bx, bv}, {o1}));
    add(b, plain("else_neg", "Neg", {bx}, {o2}));
    b.outputs = {o1, o2};
  }
  const int o1 = g.value_id("o1"), o2 = g.value_id("o2"), r = g.value_id("r");
  Node n = plain("if", "If", {c}, {o1, o2});
  Attribute a_then, a_else;
  a_then.name = "then_branch";
  a_then.kind = Attribute::Kind::kGraph;
  a_then.g = then_b;
  a_else.name = "else_branch";
  a_else.kind = Attribute::Kind::kGraph;
  a_else.g = else_b;
  n.attributes = {a_else, a_then};
  n.implicit_inputs = {x, w, v};
  add(g, std::move(n));
  add(g, plain("after", "Add", {o1, o2}, {r}));
  add(g, plain("main_t", "Identity", {x}, {t_main}));
  g.outputs = {o1, o2, r, t_main};
  return g;
}

std::vector<Tensor> run(Graph& g, const std::vector<Tensor>& in) {
  GraphExecutor exec(g, OpRegistry::global(), make_cpu_allocator(), SessionOptions{});
  return exec.run(in);
}

}  // namespace

TEST(InlineBranch, ComputesWhatTheIfComputesWithItsConditionFed) {
  const Tensor x = test::random_tensor<float>(Shape{5});
  const Graph made = make_graph();  // fresh random weights, shared by the copies below
  for (bool value : {false, true}) {
    Graph original = made;
    const std::vector<Tensor> want = run(original, {x, Tensor::from_vector<bool>({value}, Shape{})});
    Graph g = made;
    inline_branch(g, "c", value);
    for (const Node& n : g.nodes) EXPECT_NE(n.op_type, "If");
    // The condition goes; so does V where only the else branch read it (an initializer stays a value).
    ASSERT_EQ(g.inputs.size(), 1u);
    EXPECT_EQ(g.values[g.inputs[0]].name, "x");
    const std::vector<Tensor> got = run(g, {x});
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i].shape(), want[i].shape());
      for (int64_t k = 0; k < want[i].numel(); ++k)
        EXPECT_EQ(got[i].data<float>()[k], want[i].data<float>()[k]) << "branch " << value << ", output " << i;
    }
  }
}

TEST(InlineBranch, DropOutputsRemovesWhatOnlyTheyNeeded) {
  Graph g = make_graph();
  inline_branch(g, "c", false);
  const size_t before = g.nodes.size();
  drop_outputs(g, {"r", "o2"});
  // r's Add goes; the Neg making o2 stays only if something else reads it: r was its only reader.
  EXPECT_EQ(g.nodes.size(), before - 2);
  ASSERT_EQ(g.outputs.size(), 2u);
  const std::vector<Tensor> got = run(g, {test::random_tensor<float>(Shape{5})});
  EXPECT_EQ(got.size(), 2u);
  EXPECT_THROW(drop_outputs(g, {"no_such_output"}), Error);
}

TEST(InlineBranch, RefusesAConditionReadByAnythingButOneIf) {
  Graph g = make_graph();
  const int c = g.find_value("c"), cc = g.value_id("c_copy");
  add(g, plain("reads_c", "Identity", {c}, {cc}));
  g.outputs.push_back(cc);
  try {
    inline_branch(g, "c", true);
    FAIL() << "inlined a condition that another node reads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reads_c"), std::string::npos) << e.what();
  }
  Graph h = make_graph();
  EXPECT_THROW(inline_branch(h, "x", true), Error);       // x is read by no If as its condition
  EXPECT_THROW(inline_branch(h, "missing", true), Error);
}

}  // namespace onyx
