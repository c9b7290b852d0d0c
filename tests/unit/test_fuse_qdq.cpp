// The QDQ fusion (passes/fuse_qdq.h): Q(MatMul(DQ(a), DQ(b))) becomes QLinearMatMul and
// Q(Conv(DQ(x), DQ(w), DQ(bias))) QLinearConv, computing the same codes as the float chain
// within one step (the float chain rounds its sums to float32; the integer op is exact), and
// near misses (a float value read twice, a blocked scale) stay as they are.
#include <gtest/gtest.h>

#include "op_test_util.h"
#include "passes/fuse_qdq.h"

namespace onyx {

namespace {

struct Builder {
  Graph g;
  int init(const std::string& n, Tensor t) {
    int id = g.value_id(n);
    g.values[id].is_initializer = true;
    g.initializers[id] = std::move(t);
    return id;
  }
  int node(const std::string& op, std::vector<int> in, std::vector<Attribute> attrs = {}) {
    Node n;
    n.name = op + std::to_string(g.nodes.size());
    n.op_type = op;
    n.opset = 21;
    n.inputs = std::move(in);
    int out = g.value_id(n.name + "_out");
    n.outputs = {out};
    n.attributes = std::move(attrs);
    g.values[out].producer = static_cast<int>(g.nodes.size());
    g.nodes.push_back(std::move(n));
    return out;
  }
};

Tensor random_s8(Shape s) { return test::random_tensor<int8_t>(std::move(s), -127, 127); }

// x (float feed) -> Q -> DQ -> MatMul(., DQ(w)) -> Q -> DQ -> y. `read_twice`: the MatMul's
// float output is a graph output too (no fusion).
Graph matmul_graph(const Tensor& w, const Tensor& w_scale, bool read_twice) {
  Builder b;
  int x = b.g.value_id("x");
  b.g.values[x].is_input = true;
  b.g.inputs.push_back(x);
  int xs = b.init("xs", Tensor::scalar<float>(0.02f)), xz = b.init("xz", Tensor::scalar<uint8_t>(120));
  int xq = b.node("QuantizeLinear", {x, xs, xz});
  int xd = b.node("DequantizeLinear", {xq, xs, xz});
  int wq = b.init("w", w), ws = b.init("ws", w_scale);
  int wz = b.init("wz", w_scale.numel() == 1 ? Tensor::scalar<int8_t>(0) : Tensor(DType::kInt8, w_scale.shape()));
  if (w_scale.numel() > 1) std::fill_n(b.g.initializers[wz].data<int8_t>(), w_scale.numel(), int8_t{0});
  int wd = b.node("DequantizeLinear", {wq, ws, wz}, {test::attr_int("axis", 1)});
  int mm = b.node("MatMul", {xd, wd});
  int ys = b.init("ys", Tensor::scalar<float>(0.05f)), yz = b.init("yz", Tensor::scalar<uint8_t>(128));
  int yq = b.node("QuantizeLinear", {mm, ys, yz});
  b.g.outputs = {b.node("DequantizeLinear", {yq, ys, yz})};
  if (read_twice) b.g.outputs.push_back(mm);
  return b.g;
}

std::vector<Tensor> run(Graph& g, const std::vector<Tensor>& feeds) {
  GraphExecutor exec(g, OpRegistry::global(), make_cpu_allocator(), SessionOptions{});
  return exec.run(feeds);
}

int count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes) n += node.op_type == op;
  return n;
}

// Two outputs on one grid of step `step` agree within one step.
void expect_within_a_step(const Tensor& a, const Tensor& b, double step) {
  ASSERT_EQ(a.shape(), b.shape());
  int64_t differ = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::abs(a.get_as_double(i) - b.get_as_double(i));
    EXPECT_LE(d, step * 1.0001) << "element " << i;
    differ += d > 0;
  }
  EXPECT_LT(differ, a.numel() / 10 + 1);  // a step only where a sum falls near a half step
}

}  // namespace

TEST(FuseQdq, MatMulBetweenDequantizeAndQuantizeBecomesQLinearMatMul) {
  for (bool per_column : {false, true}) {
    Tensor w = random_s8(Shape{16, 8});
    Tensor ws = per_column ? test::random_tensor<float>(Shape{8}, 0.005, 0.02) : Tensor::scalar<float>(0.01f);
    Graph plain = matmul_graph(w, ws, false), fused = matmul_graph(w, ws, false);
    const QdqFuseReport r = fuse_qdq(fused);
    EXPECT_EQ(r.matmuls, 1);
    EXPECT_EQ(count(fused, "QLinearMatMul"), 1);
    EXPECT_EQ(count(fused, "MatMul"), 0);
    EXPECT_EQ(count(fused, "DequantizeLinear"), 1);  // x's and the weight's went with it; the output's stays
    Tensor x = test::random_tensor<float>(Shape{2, 3, 16}, -2, 2);
    expect_within_a_step(run(plain, {x})[0], run(fused, {x})[0], 0.05);
  }
}

TEST(FuseQdq, NearMissesStayAsTheyAre) {
  Tensor w = random_s8(Shape{16, 8});
  Graph g = matmul_graph(w, Tensor::scalar<float>(0.01f), /*read_twice=*/true);
  EXPECT_EQ(fuse_qdq(g).matmuls, 0);
  EXPECT_EQ(count(g, "MatMul"), 1);
  // A weight scale along the wrong axis (per row of B) is not a QLinearMatMul.
  Graph rows = matmul_graph(w, Tensor::scalar<float>(0.01f), false);
  rows.initializers[rows.find_value("ws")] = test::random_tensor<float>(Shape{16}, 0.005, 0.02);
  rows.initializers[rows.find_value("wz")] = Tensor(DType::kInt8, Shape{16});
  std::fill_n(rows.initializers[rows.find_value("wz")].data<int8_t>(), 16, int8_t{0});
  for (auto& n : rows.nodes)
    if (n.op_type == "DequantizeLinear" && n.inputs[0] == rows.find_value("w")) n.attributes = {test::attr_int("axis", 0)};
  EXPECT_EQ(fuse_qdq(rows).matmuls, 0);
}

TEST(FuseQdq, ConvWithAnInt32BiasBecomesQLinearConv) {
  Builder b;
  int x = b.g.value_id("x");
  b.g.values[x].is_input = true;
  b.g.inputs.push_back(x);
  const float xs_v = 0.03f;
  Tensor ws_t = test::random_tensor<float>(Shape{4}, 0.005, 0.02);
  Tensor bs_t(DType::kFloat32, Shape{4});
  for (int c = 0; c < 4; ++c) bs_t.data<float>()[c] = xs_v * ws_t.data<float>()[c];
  int xs = b.init("xs", Tensor::scalar<float>(xs_v)), xz = b.init("xz", Tensor::scalar<uint8_t>(100));
  int xd = b.node("DequantizeLinear", {b.node("QuantizeLinear", {x, xs, xz}), xs, xz});
  int wz = b.init("wz", Tensor(DType::kInt8, Shape{4}));
  std::fill_n(b.g.initializers[wz].data<int8_t>(), 4, int8_t{0});
  int wd = b.node("DequantizeLinear", {b.init("w", random_s8(Shape{4, 3, 3, 3})), b.init("ws", ws_t), wz},
                  {test::attr_int("axis", 0)});
  int bd = b.node("DequantizeLinear", {b.init("bias", test::random_tensor<int32_t>(Shape{4}, -300, 300)),
                                       b.init("bs", bs_t)}, {test::attr_int("axis", 0)});
  int conv = b.node("Conv", {xd, wd, bd}, {test::attr_ints("pads", {1, 1, 1, 1})});
  int ys = b.init("ys", Tensor::scalar<float>(0.1f)), yz = b.init("yz", Tensor::scalar<uint8_t>(128));
  b.g.outputs = {b.node("DequantizeLinear", {b.node("QuantizeLinear", {conv, ys, yz}), ys, yz})};
  Graph fused = b.g;
  EXPECT_EQ(fuse_qdq(fused).convs, 1);
  EXPECT_EQ(count(fused, "QLinearConv"), 1);
  EXPECT_EQ(count(fused, "Conv"), 0);
  Tensor in = test::random_tensor<float>(Shape{1, 3, 6, 5}, -2, 2);
  expect_within_a_step(run(b.g, {in})[0], run(fused, {in})[0], 0.1);
}

}  // namespace onyx
