// Load-time constant folding (passes/fold_constants.h): what folds, what must not, and that a
// folded graph computes what the original does.
#include <gtest/gtest.h>

#include <cmath>

#include "op_test_util.h"
#include "passes/fold_constants.h"

namespace onyx {

namespace {

int add_value(Graph& g, const std::string& name) { return g.value_id(name); }

int add_initializer(Graph& g, const std::string& name, Tensor t) {
  int id = g.value_id(name);
  g.values[id].is_initializer = true;
  g.initializers[id] = std::move(t);
  return id;
}

void add_node(Graph& g, const std::string& op, std::vector<int> in, std::vector<int> out,
              std::vector<Attribute> attrs = {}) {
  Node n;
  n.name = op + std::to_string(g.nodes.size());
  n.op_type = op;
  n.opset = 19;
  n.inputs = std::move(in);
  n.outputs = out;
  n.attributes = std::move(attrs);
  for (int o : out) g.values[o].producer = static_cast<int>(g.nodes.size());
  g.nodes.push_back(std::move(n));
}

// x[4,16] -> MatMul(x, Transpose(W[32,16])) -> y; W also read by Identity -> w_out (an output);
// DequantizeLinear(Wq, scale) -> MatMul -> z; Expand(small, big shape) -> e -> ReduceSum -> s.
// (onyx has no DequantizeLinear kernel yet: graphs that run leave it out.)
Graph make_graph(bool qdq = true) {
  Graph g;
  g.name = "fold";
  int x = add_value(g, "x");
  g.values[x].is_input = true;
  g.inputs.push_back(x);
  int w = add_initializer(g, "W", test::random_tensor<float>(Shape{32, 16}));
  int wt = add_value(g, "WT"), y = add_value(g, "y");
  add_node(g, "Transpose", {w}, {wt});
  add_node(g, "MatMul", {x, wt}, {y});
  int w_out = add_value(g, "w_out");
  add_node(g, "Identity", {w}, {w_out});
  int z = -1;
  if (qdq) {
  Tensor q(DType::kInt8, Shape{16, 8});
  for (int64_t i = 0; i < q.numel(); ++i) q.data<int8_t>()[i] = static_cast<int8_t>((i * 37) % 255 - 127);
  int wq = add_initializer(g, "Wq", q), scale = add_initializer(g, "scale", Tensor::scalar<float>(0.02f));
  int wd = add_value(g, "Wd");
  z = add_value(g, "z");
  add_node(g, "DequantizeLinear", {wq, scale}, {wd});
  add_node(g, "MatMul", {x, wd}, {z});
  }
  int small = add_initializer(g, "small", test::random_tensor<float>(Shape{1, 16}));
  int big = add_initializer(g, "big_shape", Tensor::from_vector<int64_t>({8192, 16}, Shape{2}));
  int e = add_value(g, "e"), s = add_value(g, "s");
  add_node(g, "Expand", {small, big}, {e});
  add_node(g, "ReduceSum", {e}, {s});
  g.outputs = {y, w_out, s};
  if (z >= 0) g.outputs.push_back(z);
  return g;
}

std::vector<Tensor> run(Graph& g, const Tensor& x) {
  auto alloc = make_cpu_allocator();
  GraphExecutor exec(g, OpRegistry::global(), alloc, SessionOptions{});
  return exec.run({x});
}

}  // namespace

TEST(FoldConstants, FoldsTheTransposeOfAWeightAndKeepsWhatMustStay) {
  Graph g = make_graph();
  const size_t nodes = g.nodes.size();
  FoldReport r = fold_constants(g, OpRegistry::global());
  ASSERT_EQ(r.nodes, 1) << "folded: " << (r.ops.empty() ? "" : r.ops[0]);
  EXPECT_EQ(r.ops, std::vector<std::string>{"Transpose"});
  EXPECT_EQ(r.bytes, 32u * 16u * sizeof(float));
  EXPECT_EQ(g.nodes.size(), nodes - 1);
  for (const auto& n : g.nodes) EXPECT_NE(n.op_type, "Transpose");
  // The Identity producing a graph output, the QDQ weight and the growing Expand stay nodes.
  int seen = 0;
  for (const auto& n : g.nodes) seen += n.op_type == "Identity" || n.op_type == "DequantizeLinear" || n.op_type == "Expand";
  EXPECT_EQ(seen, 3);
  // W is still read (by Identity): it stays; WT is an initializer now.
  EXPECT_TRUE(g.initializers.count(g.find_value("W")));
  const int wt = g.find_value("WT");
  ASSERT_TRUE(g.initializers.count(wt));
  EXPECT_EQ(g.initializers.at(wt).shape(), (Shape{16, 32}));
  EXPECT_EQ(g.values[wt].producer, -1);
  // Producers point at the kept nodes.
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (int o : g.nodes[k].outputs) EXPECT_EQ(g.values[o].producer, static_cast<int>(k));
}

TEST(FoldConstants, FoldedGraphComputesWhatTheOriginalDoes) {
  Graph plain = make_graph(false);
  Graph folded = make_graph(false);
  // The same weights in both.
  for (auto& [id, t] : plain.initializers) folded.initializers[folded.find_value(plain.values[id].name)] = t;
  fold_constants(folded, OpRegistry::global());
  Tensor x = test::random_tensor<float>(Shape{4, 16});
  auto a = run(plain, x), b = run(folded, x);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].shape(), b[i].shape()) << i;
    for (int64_t k = 0; k < a[i].numel(); ++k) EXPECT_EQ(a[i].get_as_double(k), b[i].get_as_double(k)) << i;
  }
  // y against a float64 computation of x W^T.
  const Tensor& w = plain.initializers.at(plain.find_value("W"));
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 32; ++c) {
      double want = 0;
      for (int64_t k = 0; k < 16; ++k) want += double(x.data<float>()[r * 16 + k]) * double(w.data<float>()[c * 16 + k]);
      EXPECT_NEAR(b[0].data<float>()[r * 32 + c], want, 1e-4 * (1 + std::abs(want)));
    }
}

TEST(FoldConstants, ChainsFoldAndUnreadWeightsAreDropped) {
  // W -> Transpose -> Cast(f16) -> MatMul input: both fold, and W (read by nothing else) goes.
  Graph g;
  int x = add_value(g, "x");
  g.values[x].is_input = true;
  g.inputs.push_back(x);
  int w = add_initializer(g, "W", test::random_tensor<float>(Shape{8, 4}));
  int wt = add_value(g, "WT"), wh = add_value(g, "WH"), y = add_value(g, "y");
  add_node(g, "Transpose", {w}, {wt});
  Attribute to;
  to.name = "to";
  to.kind = Attribute::Kind::kInt;
  to.i = 10;  // float16
  add_node(g, "Cast", {wt}, {wh}, {to});
  add_node(g, "MatMul", {x, wh}, {y});
  g.outputs = {y};
  FoldReport r = fold_constants(g, OpRegistry::global());
  EXPECT_EQ(r.nodes, 2);
  EXPECT_EQ(r.freed_initializers, 2u);  // W, then WT: each read only by a folded node
  EXPECT_FALSE(g.initializers.count(w));
  EXPECT_FALSE(g.initializers.count(wt));
  ASSERT_TRUE(g.initializers.count(wh));
  EXPECT_EQ(g.initializers.at(wh).dtype(), DType::kFloat16);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "MatMul");
}

TEST(FoldConstants, AnInputWithADefaultIsNotAConstant) {
  Graph g;
  int w = add_initializer(g, "W", test::random_tensor<float>(Shape{3, 2}));
  g.values[w].is_input = true;  // a graph input backed by an initializer: a feed may replace it
  g.inputs.push_back(w);
  int wt = add_value(g, "WT");
  add_node(g, "Transpose", {w}, {wt});
  int y = add_value(g, "y");
  add_node(g, "Relu", {wt}, {y});
  g.outputs = {y};
  EXPECT_EQ(fold_constants(g, OpRegistry::global()).nodes, 0);
  EXPECT_EQ(g.nodes.size(), 2u);
}

}  // namespace onyx
