// Load-time constant folding (passes/fold_constants.h): what folds, what must not, and that a
// folded graph computes what the original does.
#include <gtest/gtest.h>

#include <cmath>

#include "op_test_util.h"
#include "passes/fold_constants.h"

namespace onyx {

// passes/rewrite_util.h's (its add_initializer would clash with this file's).
Attribute make_int_attr(const char* name, int64_t v);
Attribute make_ints_attr(const char* name, std::vector<int64_t> v);

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

namespace {

Tensor ints_tensor(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::from_vector(v, Shape{n});
}

// The TorchScript exporter's split of a head in halves: x[batch, seq, 32] -> MatMul -> Reshape to
// [Shape(x)[0], Shape(x)[1], -1, 8] (or, with `fixed_head` false, to [.., .., 4, Shape(x)[2] / 4],
// whose last dimension the graph does not fix) -> Transpose to [b, 4, s, 8] -> t; h = Shape(t)[3] / 2;
// y = Concat(Neg(t[..., h:]), t[..., :h]).
Graph make_halves(bool fixed_head) {
  Graph g;
  g.name = "halves";
  int x = add_value(g, "x");
  g.values[x].is_input = true;
  g.values[x].declared.category = TypeInfo::Category::kTensor;
  g.values[x].declared.dtype = DType::kFloat32;
  g.values[x].declared.rank_known = true;
  g.values[x].declared.dims = {-1, -1, 32};
  g.values[x].declared.dim_params = {"batch", "sequence", ""};
  g.inputs.push_back(x);
  int w = add_initializer(g, "W", test::random_tensor<float>(Shape{32, 32}));
  int h = add_value(g, "h");
  add_node(g, "MatMul", {x, w}, {h});
  int sh = add_value(g, "sh");
  add_node(g, "Shape", {x}, {sh});
  int zero = add_initializer(g, "i0", Tensor::scalar<int64_t>(0)), one = add_initializer(g, "i1", Tensor::scalar<int64_t>(1));
  int two = add_initializer(g, "i2", Tensor::scalar<int64_t>(2)), three = add_initializer(g, "i3", Tensor::scalar<int64_t>(3));
  int axis0 = add_initializer(g, "axis0", ints_tensor({0}));
  int b = add_value(g, "b"), s = add_value(g, "s"), ub = add_value(g, "ub"), us = add_value(g, "us");
  add_node(g, "Gather", {sh, zero}, {b});
  add_node(g, "Gather", {sh, one}, {s});
  add_node(g, "Unsqueeze", {b, axis0}, {ub});
  add_node(g, "Unsqueeze", {s, axis0}, {us});
  std::vector<int> pieces{ub, us};
  if (fixed_head) {
    pieces.push_back(add_initializer(g, "minus1", ints_tensor({-1})));
    pieces.push_back(add_initializer(g, "eight", ints_tensor({8})));
  } else {
    pieces.push_back(add_initializer(g, "four", ints_tensor({4})));
    int c = add_value(g, "c"), q = add_value(g, "q"), uq = add_value(g, "uq");
    add_node(g, "Gather", {sh, two}, {c});
    add_node(g, "Div", {c, add_initializer(g, "k4", Tensor::scalar<int64_t>(4))}, {q});
    add_node(g, "Unsqueeze", {q, axis0}, {uq});
    pieces.push_back(uq);
  }
  int shape = add_value(g, "shape"), r = add_value(g, "r"), t = add_value(g, "t");
  add_node(g, "Concat", pieces, {shape}, {make_int_attr("axis", 0)});
  add_node(g, "Reshape", {h, shape}, {r});
  add_node(g, "Transpose", {r}, {t}, {make_ints_attr("perm", {0, 2, 1, 3})});
  int st = add_value(g, "st"), d = add_value(g, "d"), half = add_value(g, "half"), end = add_value(g, "end");
  add_node(g, "Shape", {t}, {st});
  add_node(g, "Gather", {st, three}, {d});
  add_node(g, "Div", {d, add_initializer(g, "k2", Tensor::scalar<int64_t>(2))}, {half});
  add_node(g, "Unsqueeze", {half, axis0}, {end});
  int lo = add_value(g, "lo"), hi = add_value(g, "hi"), neg = add_value(g, "neg"), y = add_value(g, "y");
  int start0 = add_initializer(g, "start0", ints_tensor({0})), big = add_initializer(g, "big", ints_tensor({1 << 30}));
  int ax3 = add_initializer(g, "ax3", ints_tensor({3}));
  add_node(g, "Slice", {t, start0, end, ax3}, {lo});
  add_node(g, "Slice", {t, end, big, ax3}, {hi});
  add_node(g, "Neg", {hi}, {neg});
  add_node(g, "Concat", {neg, lo}, {y}, {make_int_attr("axis", -1)});
  g.outputs = {y};
  return g;
}

}  // namespace

TEST(FoldConstants, ShapeArithmeticOnFixedDimensionsFolds) {
  Graph g = make_halves(true);
  Graph plain = make_halves(true);
  for (auto& [id, t] : g.initializers) plain.initializers[plain.find_value(g.values[id].name)] = t;
  FoldReport r = fold_constants(g, OpRegistry::global());
  // Shape(t)[3] (the head's size, fixed by the Reshape's 8 through the Transpose) and the
  // arithmetic after it fold; Shape(t) goes (nothing else reads it); Shape(x) stays (the batch
  // and sequence are the feed's).
  EXPECT_EQ(r.shapes, 1);
  EXPECT_EQ(r.dead_shapes, 1);
  const int end = g.find_value("end");
  ASSERT_TRUE(g.initializers.count(end));
  EXPECT_EQ(g.initializers.at(end).to_int64_vector(), std::vector<int64_t>{4});
  int shapes = 0;
  for (const auto& n : g.nodes) shapes += n.op_type == "Shape";
  EXPECT_EQ(shapes, 1);
  for (const auto& n : g.nodes) EXPECT_NE(n.op_type, "Div") << "the half's Div should have folded";
  for (auto [batch, seq] : {std::pair<int64_t, int64_t>{2, 3}, {1, 7}}) {
    Tensor x = test::random_tensor<float>(Shape{batch, seq, 32});
    auto a = run(plain, x), b = run(g, x);
    ASSERT_EQ(a[0].shape(), (Shape{batch, 4, seq, 8}));
    ASSERT_EQ(a[0].shape(), b[0].shape());
    for (int64_t k = 0; k < a[0].numel(); ++k) ASSERT_EQ(a[0].get_as_double(k), b[0].get_as_double(k)) << k;
  }
}

TEST(FoldConstants, ShapeOfADimensionTheFeedDecidesStays) {
  // The head's size is Shape(x)[2] / 4: the declared 32 fixes it, so it folds too; a Reshape
  // entry of a value the graph does not fix would not (the case below makes x's last dimension
  // symbolic).
  {
    Graph g = make_halves(false);
    FoldReport r = fold_constants(g, OpRegistry::global());
    EXPECT_EQ(r.shapes, 2);  // Shape(x)[2] and Shape(t)[3]
  }
  Graph g = make_halves(false);
  Graph plain = make_halves(false);
  for (auto& [id, t] : g.initializers) plain.initializers[plain.find_value(g.values[id].name)] = t;
  for (Graph* gr : {&g, &plain}) {
    Value& x = gr->values[gr->find_value("x")];
    x.declared.dims = {-1, -1, -1};
    x.declared.dim_params = {"batch", "sequence", "hidden"};
  }
  FoldReport r = fold_constants(g, OpRegistry::global());
  EXPECT_EQ(r.shapes, 0);
  EXPECT_FALSE(g.initializers.count(g.find_value("end")));
  Tensor x = test::random_tensor<float>(Shape{2, 5, 32});
  auto a = run(plain, x), b = run(g, x);
  ASSERT_EQ(a[0].shape(), b[0].shape());
  for (int64_t k = 0; k < a[0].numel(); ++k) ASSERT_EQ(a[0].get_as_double(k), b[0].get_as_double(k)) << k;
}

TEST(FoldConstants, RotarySliceOfTheWholeHeadAndTheEmptyRestGo) {
  // Phi-3's rotary embeddings as TorchScript exports them: r = Shape(cos)[-1], cos computed from the
  // positions ([b, s, 1] x 8 frequencies, concatenated twice: 16); q_rot = q[..., :r],
  // q_pass = q[..., r:], y = Concat(Neg(q_rot), q_pass). With q's head fixed at 16, r folds to 16,
  // q_rot is q and q_pass is empty: y = Neg(q).
  auto build = [] {
    Graph g;
    g.name = "partial_rotary";
    auto input = [&](const char* name, DType t, std::vector<int64_t> dims, std::vector<std::string> params) {
      int id = add_value(g, name);
      Value& v = g.values[id];
      v.is_input = true;
      v.declared.category = TypeInfo::Category::kTensor;
      v.declared.dtype = t;
      v.declared.rank_known = true;
      v.declared.dims = std::move(dims);
      v.declared.dim_params = std::move(params);
      g.inputs.push_back(id);
      return id;
    };
    int q = input("q", DType::kFloat32, {-1, 4, -1, 16}, {"b", "", "s", ""});
    int pos = input("pos", DType::kFloat32, {-1, -1}, {"b", "s"});
    int ax2 = add_initializer(g, "ax2", ints_tensor({2}));
    int freq = add_initializer(g, "freq", test::random_tensor<float>(Shape{8}));
    int pu = add_value(g, "pu"), f = add_value(g, "f"), emb = add_value(g, "emb"), cos = add_value(g, "cos");
    add_node(g, "Unsqueeze", {pos, ax2}, {pu});
    add_node(g, "Mul", {pu, freq}, {f});
    add_node(g, "Concat", {f, f}, {emb}, {make_int_attr("axis", -1)});
    add_node(g, "Cos", {emb}, {cos});
    int sh = add_value(g, "sh"), r = add_value(g, "r"), ru = add_value(g, "ru");
    add_node(g, "Shape", {cos}, {sh});
    add_node(g, "Gather", {sh, add_initializer(g, "last", Tensor::scalar<int64_t>(-1))}, {r});
    add_node(g, "Unsqueeze", {r, add_initializer(g, "ax0", ints_tensor({0}))}, {ru});
    int zero = add_initializer(g, "zero", ints_tensor({0})), big = add_initializer(g, "big", ints_tensor({1 << 30}));
    int ax3 = add_initializer(g, "ax3", ints_tensor({3}));
    int rot = add_value(g, "rot"), pass = add_value(g, "pass"), neg = add_value(g, "neg"), y = add_value(g, "y");
    add_node(g, "Slice", {q, zero, ru, ax3}, {rot});
    add_node(g, "Slice", {q, ru, big, ax3}, {pass});
    add_node(g, "Neg", {rot}, {neg});
    add_node(g, "Concat", {neg, pass}, {y}, {make_int_attr("axis", -1)});
    int c = add_value(g, "c");
    add_node(g, "Mul", {cos, add_initializer(g, "one", Tensor::scalar<float>(1.f))}, {c});
    g.outputs = {y, c};
    return g;
  };
  Graph g = build(), plain = build();
  for (auto& [id, t] : g.initializers) plain.initializers[plain.find_value(g.values[id].name)] = t;
  FoldReport r = fold_constants(g, OpRegistry::global());
  EXPECT_EQ(r.shapes, 1);      // Shape(cos)[-1]
  EXPECT_EQ(r.identities, 2);  // the Slice of the whole head, the empty rest from the Concat
  int slices = 0;
  for (const auto& n : g.nodes) {
    slices += n.op_type == "Slice";
    if (n.op_type == "Concat" && n.outputs[0] == g.find_value("y")) {
      EXPECT_EQ(n.inputs.size(), 1u);
    }
  }
  EXPECT_EQ(slices, 1);  // the empty rest's Slice stays (unread now) until a later pass drops it
  for (auto [b, s] : {std::pair<int64_t, int64_t>{2, 3}, {1, 5}}) {
    Tensor q = test::random_tensor<float>(Shape{b, 4, s, 16}), pos = test::random_tensor<float>(Shape{b, s});
    auto alloc = make_cpu_allocator();
    GraphExecutor ea(plain, OpRegistry::global(), alloc, SessionOptions{});
    GraphExecutor eb(g, OpRegistry::global(), alloc, SessionOptions{});
    auto a = ea.run({q, pos}), o = eb.run({q, pos});
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].shape(), o[i].shape()) << i;
      for (int64_t k = 0; k < a[i].numel(); ++k) ASSERT_EQ(a[i].get_as_double(k), o[i].get_as_double(k)) << i;
    }
  }
}

}  // namespace onyx
