// Load-time pattern fusion (passes/fuse_patterns.h): the decomposed RMSNorm becomes one
// SimplifiedLayerNormalization that computes the same, and near misses stay as they are.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "graph_builder.h"
#include "op_test_util.h"
#include "passes/fuse_patterns.h"

namespace onyx {

namespace {

using Builder = test::GraphBuilder;

Attribute int_attr(const char* name, int64_t v) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kInt;
  a.i = v;
  return a;
}

// x[3,16] -> w * (x * 1/sqrt(mean(x^2, -1) + eps)) -> y, plus x + y (x read twice, as a residual).
// `variant`: 0 Reciprocal/Mul, 1 Div(x, s), 2 Div(1, s), 3 the mean read elsewhere (no fusion),
// 4 reduced over axis 0 (no fusion).
Graph make(int variant, float eps = 1e-5f) {
  Builder b;
  int x = b.value("x");
  b.g.values[x].is_input = true;
  b.g.inputs.push_back(x);
  int two = b.init("two", Tensor::scalar<float>(2.0f));
  int axes = b.init("axes", Tensor::from_vector<int64_t>({variant == 4 ? 0 : -1}, Shape{1}));
  int e = b.init("eps", Tensor::scalar<float>(eps));
  int w = b.init("w", test::random_tensor<float>(Shape{16}, 0.5, 1.5));
  int sq = b.node("Pow", {x, two});
  int mean = b.node("ReduceMean", {sq, axes}, {int_attr("keepdims", 1)});
  int var = b.node("Add", {e, mean});  // the constant first: either order matches
  int s = b.node("Sqrt", {var});
  int y;
  if (variant == 1) {
    y = b.node("Div", {x, s});
  } else if (variant == 2) {
    int one = b.init("one", Tensor::scalar<float>(1.0f));
    y = b.node("Mul", {x, b.node("Div", {one, s})});
  } else {
    y = b.node("Mul", {b.node("Reciprocal", {s}), x});
  }
  int out = b.node("Mul", {y, w});
  int res = b.node("Add", {x, out});
  b.g.outputs = {res};
  if (variant == 3) b.g.outputs.push_back(mean);
  return b.g;
}

std::vector<Tensor> run(Graph& g, const Tensor& x) {
  auto alloc = make_cpu_allocator();
  GraphExecutor exec(g, OpRegistry::global(), alloc, SessionOptions{});
  return exec.run({x});
}

}  // namespace

TEST(FusePatterns, DecomposedRmsNormBecomesOneNodeThatComputesTheSame) {
  for (int variant : {0, 1, 2}) {
    Graph plain = make(variant), fused = make(variant);
    for (auto& [id, t] : plain.initializers) fused.initializers[fused.find_value(plain.values[id].name)] = t;
    FuseReport r = fuse_patterns(fused);
    EXPECT_EQ(r.rms_norms, 1) << "variant " << variant;
    int norms = 0;
    for (const auto& n : fused.nodes) {
      norms += n.op_type == "SimplifiedLayerNormalization";
      EXPECT_NE(n.op_type, "Sqrt") << "variant " << variant;
    }
    EXPECT_EQ(norms, 1);
    Tensor x = test::random_tensor<float>(Shape{3, 16}, -2.0, 2.0);
    auto a = run(plain, x), b = run(fused, x);
    const Tensor& w = plain.initializers.at(plain.find_value("w"));
    for (int64_t r0 = 0; r0 < 3; ++r0) {
      double ms = 0;
      for (int64_t c = 0; c < 16; ++c) ms += std::pow(double(x.data<float>()[r0 * 16 + c]), 2) / 16;
      for (int64_t c = 0; c < 16; ++c) {
        const double xv = x.data<float>()[r0 * 16 + c];
        const double want = xv + w.data<float>()[c] * xv / std::sqrt(ms + 1e-5);
        EXPECT_NEAR(b[0].data<float>()[r0 * 16 + c], want, 1e-5 * (1 + std::abs(want)));
        EXPECT_NEAR(a[0].data<float>()[r0 * 16 + c], b[0].data<float>()[r0 * 16 + c], 1e-5);
      }
    }
  }
}

TEST(FusePatterns, NearMissesAreLeftAlone) {
  for (int variant : {3, 4}) {
    Graph g = make(variant);
    const size_t nodes = g.nodes.size();
    EXPECT_EQ(fuse_patterns(g).rms_norms, 0) << "variant " << variant;
    EXPECT_EQ(g.nodes.size(), nodes);
  }
}

}  // namespace onyx

namespace onyx {

// The residual add before an RMSNorm fuses when a contrib product feeds it: x[3,64] ->
// MatMulNBits (4 bits, blocks of 32) -> h[3,16]; SimplifiedLayerNormalization(h + r, w) -> y, and
// the sum h + r read on (the next layer's residual). Before the contrib ops had ranks in the
// matcher, the Add's operands had no known rank and the fusion passed it by.
TEST(FusePatterns, ResidualAddAfterAQuantizedProductFusesIntoTheNorm) {
  auto make = [](const Tensor& packed, const Tensor& scales, const Tensor& w) {
    Builder b;
    const int x = b.input("x"), r = b.input("r");
    const int pb = b.init("B", packed), ps = b.init("scales", scales), pw = b.init("w", w);
    const int h = b.node("MatMulNBits", {x, pb, ps},
                         {int_attr("K", 64), int_attr("N", 16), int_attr("bits", 4), int_attr("block_size", 32)});
    b.g.nodes.back().domain = "com.microsoft";
    b.g.nodes.back().opset = 1;
    const int sum = b.node("Add", {h, r});
    const int y = b.node("SimplifiedLayerNormalization", {sum, pw}, {int_attr("axis", -1)});
    b.g.values[x].declared = TypeInfo{TypeInfo::Category::kTensor, DType::kFloat32, DType::kUndefined, true, {3, 64}, {}};
    b.g.values[r].declared = TypeInfo{TypeInfo::Category::kTensor, DType::kFloat32, DType::kUndefined, true, {3, 16}, {}};
    b.g.outputs = {y, sum};
    return b.g;
  };
  const Tensor packed = test::random_tensor<uint8_t>(Shape{16, 2, 16}, 0, 255);
  const Tensor scales = test::random_tensor<float>(Shape{16, 2}, 0.01, 0.1);
  const Tensor w = test::random_tensor<float>(Shape{16}, 0.5, 1.5);
  Graph plain = make(packed, scales, w), fused = make(packed, scales, w);
  FuseReport rep = fuse_patterns(fused);
  EXPECT_EQ(rep.skip_norms, 1);
  int skips = 0, adds = 0;
  for (const auto& n : fused.nodes) {
    skips += n.op_type == "SkipSimplifiedLayerNormalization";
    adds += n.op_type == "Add";
  }
  EXPECT_EQ(skips, 1);
  EXPECT_EQ(adds, 0);
  const Tensor x = test::random_tensor<float>(Shape{3, 64}), r = test::random_tensor<float>(Shape{3, 16});
  auto alloc = make_cpu_allocator();
  GraphExecutor ea(plain, OpRegistry::global(), alloc, SessionOptions{}), eb(fused, OpRegistry::global(), alloc,
                                                                             SessionOptions{});
  auto a = ea.run({x, r}), b = eb.run({x, r});
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t o = 0; o < 2; ++o)
    for (int64_t i = 0; i < a[o].numel(); ++i)
      EXPECT_NEAR(a[o].data<float>()[i], b[o].data<float>()[i], 1e-5 * (1 + std::abs(a[o].data<float>()[i])))
          << "output " << o;
}

}  // namespace onyx

#include "passes/optimize.h"

namespace onyx {

// What the rewrites leave unread goes: a chain of standard nodes whose last output nothing reads
// (as a fold leaves a Slice whose only reader it dropped), not a node of another domain, not one
// whose output a graph output or a subgraph names; and nothing when the graph optimizations are
// off (the graph runs as written).
TEST(FusePatterns, NodesWhoseOutputsNothingReadsGo) {
  for (bool on : {true, false}) {
    test::GraphBuilder b;
    const int x = b.input("x");
    const int y = b.node("Relu", {x});
    b.node("Neg", {b.node("Slice", {x, b.init("s0", Tensor::from_vector<int64_t>({1}, Shape{1})),
                                     b.init("s1", Tensor::from_vector<int64_t>({3}, Shape{1}))})});
    const int other = b.node("Sigmoid", {x});
    b.g.nodes.back().domain = "com.example";  // not known to be free of effects
    const int named = b.node("Abs", {x});
    b.g.nodes[0].implicit_inputs.push_back(named);  // as a subgraph of the Relu's would read it
    b.g.outputs = {y};
    SessionOptions o;
    o.fuse_patterns = o.fold_constants = on;
    const OptimizeReport r = optimize_graph(b.g, o, Device::cpu());
    std::multiset<std::string> ops;
    for (const auto& n : b.g.nodes) ops.insert(n.op_type);
    EXPECT_EQ(r.dead_nodes, on ? 2 : 0);
    EXPECT_EQ(ops.count("Slice") + ops.count("Neg"), on ? 0u : 2u);
    EXPECT_EQ(ops.count("Relu") + ops.count("Sigmoid") + ops.count("Abs"), 3u);
    (void)other;
  }
}

TEST(FusePatterns, GeluGatedProductsFuseOnEveryDevice) {
  // Gemma's MLP: Mul(gelu_tanh(gate), up), the GELU written out (0.5 x (1 + tanh(sqrt(2/pi)
  // (x + 0.044715 x^3)))), and the erf form: one com.microsoft FastGelu / Gelu on the CPU and on
  // CUDA (whose kernels take them), computing what the chain computes.
  // (form 0: tanh with Pow(x, 3); 1: tanh with Mul(x, Mul(x, x)), as TorchScript writes Gemma's;
  // 2: erf)
  for (int form : {0, 1, 2})
    for (Device device : {Device::cpu(), Device::cuda(0)}) {
      const bool tanh_form = form < 2;
      SCOPED_TRACE(testing::Message() << "form " << form << " on " << device.str());
      Builder b;
      const int gate = b.input("gate"), up = b.input("up");
      auto scalar = [&](const char* name, float v) { return b.init(name, Tensor::scalar<float>(v)); };
      int gelu;
      if (tanh_form) {
        const int x3 = form == 0 ? b.node("Pow", {gate, scalar("three", 3.f)})
                                 : b.node("Mul", {gate, b.node("Mul", {gate, gate})});
        const int cube = b.node("Mul", {scalar("c", 0.044715f), x3});
        const int inner = b.node("Mul", {scalar("k", std::sqrt(2.f / static_cast<float>(M_PI))), b.node("Add", {gate, cube})});
        const int one_plus = b.node("Add", {scalar("one", 1.f), b.node("Tanh", {inner})});
        gelu = b.node("Mul", {b.node("Mul", {scalar("half", 0.5f), gate}), one_plus});
      } else {
        const int erf = b.node("Erf", {b.node("Div", {gate, scalar("root2", std::sqrt(2.f))})});
        gelu = b.node("Mul", {b.node("Mul", {gate, b.node("Add", {erf, scalar("one", 1.f)})}), scalar("half", 0.5f)});
      }
      b.g.outputs = {b.node("Mul", {gelu, up})};
      Graph plain = b.g;
      SessionOptions o;
      const OptimizeReport r = optimize_graph(b.g, o, device);
      EXPECT_EQ(r.fuse.gelus, 1);
      std::multiset<std::string> ops;
      for (const auto& n : b.g.nodes) ops.insert(n.op_type);
      EXPECT_EQ(ops, (std::multiset<std::string>{tanh_form ? "FastGelu" : "Gelu", "Mul"}));
      if (!device.is_cpu()) continue;
      const Tensor g = test::random_tensor<float>(Shape{3, 40}, -6, 6), u = test::random_tensor<float>(Shape{3, 40});
      auto alloc = make_cpu_allocator();
      GraphExecutor pe(plain, OpRegistry::global(), alloc, SessionOptions{});
      GraphExecutor fe(b.g, OpRegistry::global(), alloc, SessionOptions{});
      const Tensor want = pe.run({g, u}).at(0), got = fe.run({g, u}).at(0);
      for (int64_t i = 0; i < want.numel(); ++i)
        ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5 * (1 + std::abs(want.data<float>()[i]))) << i;
    }
}

TEST(FusePatterns, RotaryOfANormalizedHeadFuses) {
  // Gemma 3's queries: RMSNorm of each head (decomposed, its output's rank shown only through the
  // mean of squares), then the rotary embedding by halves with Slices and a Concat at axis 3 (not
  // -1), as TorchScript writes them: one SimplifiedLayerNormalization and one RotaryHalf, computing
  // what the chain computes.
  Builder b;
  const int x = b.input("x", DType::kFloat32, {-1, 2, -1, 8});
  const int cos = b.input("cos"), sin = b.input("sin");
  auto ints = [&](const char* name, std::vector<int64_t> v) {
    return b.init(name, Tensor::from_vector<int64_t>(v, Shape{static_cast<int64_t>(v.size())}));
  };
  const int mean = b.node("ReduceMean", {b.node("Pow", {x, b.init("two", Tensor::scalar<float>(2.f))}), ints("axes", {-1})},
                          {int_attr("keepdims", 1)});
  const int inv = b.node("Div", {b.init("one", Tensor::scalar<float>(1.f)),
                                 b.node("Sqrt", {b.node("Add", {mean, b.init("eps", Tensor::scalar<float>(1e-6f))})})});
  const int normed = b.node("Mul", {b.node("Mul", {x, inv}), b.init("w", test::random_tensor<float>(Shape{8}, 0.5, 1.5))});
  const int axis3 = ints("axis3", {3}), one = ints("step", {1});
  const int lo = b.node("Slice", {normed, ints("zero", {0}), ints("half", {4}), axis3, one});
  const int hi = b.node("Slice", {normed, ints("half2", {4}), ints("end", {int64_t{1} << 62}), axis3, one});
  const int rotated = b.node("Concat", {b.node("Neg", {hi}), lo}, {int_attr("axis", 3)});
  b.g.outputs = {b.node("Add", {b.node("Mul", {normed, cos}), b.node("Mul", {rotated, sin})})};
  Graph plain = b.g;
  const FuseReport r = fuse_patterns(b.g);
  EXPECT_EQ(r.rms_norms, 1);
  EXPECT_EQ(r.rotary_halves, 1);
  std::multiset<std::string> ops;
  for (const auto& n : b.g.nodes) ops.insert(n.op_type);
  EXPECT_EQ(ops, (std::multiset<std::string>{"SimplifiedLayerNormalization", "RotaryHalf"}));
  const Tensor in = test::random_tensor<float>(Shape{3, 2, 5, 8}), c = test::random_tensor<float>(Shape{5, 8}),
               s = test::random_tensor<float>(Shape{5, 8});
  auto alloc = make_cpu_allocator();
  GraphExecutor pe(plain, OpRegistry::global(), alloc, SessionOptions{});
  GraphExecutor fe(b.g, OpRegistry::global(), alloc, SessionOptions{});
  const Tensor want = pe.run({in, c, s}).at(0), got = fe.run({in, c, s}).at(0);
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5 * (1 + std::abs(want.data<float>()[i]))) << i;
}

}  // namespace onyx

namespace onyx {

TEST(FusePatterns, SoftCappedAttentionFusesWithItsCap) {
  // Gemma 2's eager attention: Softmax(Add(cap * tanh(Mul(MatMul(q, k^T), scale) / cap), mask)) V,
  // the cap divided (form 0) or multiplied by its inverse (form 1): one Attention with scale and
  // softcap, computing what the chain computes (the CPU's float32 kernel). A cap whose two
  // constants differ (form 2) is not a soft cap: the chain stays.
  for (int form : {0, 1, 2}) {
    SCOPED_TRACE(testing::Message() << "form " << form);
    Builder b;
    const int q = b.input("q", DType::kFloat32, {2, 4, 3, 16});
    const int k = b.input("k", DType::kFloat32, {2, 4, 7, 16});
    const int v = b.input("v", DType::kFloat32, {2, 4, 7, 16});
    const int mask = b.input("mask", DType::kFloat32, {2, 1, 3, 7});
    auto scalar = [&](const char* name, float x) { return b.init(name, Tensor::scalar<float>(x)); };
    Attribute perm;
    perm.name = "perm";
    perm.kind = Attribute::Kind::kInts;
    perm.ints = {0, 1, 3, 2};
    const int raw = b.node("Mul", {b.node("MatMul", {q, b.node("Transpose", {k}, {perm})}), scalar("scale", 0.6f)});
    const float cap = 1.7f;
    const int inside = form == 1 ? b.node("Mul", {scalar("inv_cap", 1.f / cap), raw})
                                 : b.node("Div", {raw, scalar("cap", form == 2 ? 2 * cap : cap)});
    const int capped = b.node("Mul", {b.node("Tanh", {inside}), scalar("cap_out", cap)});
    const int probs = b.node("Softmax", {b.node("Add", {capped, mask})}, {int_attr("axis", -1)});
    b.g.outputs = {b.node("MatMul", {probs, v})};
    Graph plain = b.g;
    const FuseReport r = fuse_patterns(b.g);
    if (form == 2) {
      EXPECT_EQ(r.attentions, 0);
      continue;
    }
    ASSERT_EQ(r.attentions, 1);
    ASSERT_EQ(b.g.nodes.size(), 1u);
    const Node& att = b.g.nodes[0];
    EXPECT_EQ(att.op_type, "Attention");
    const Attribute* sc = att.find_attribute("softcap");
    ASSERT_NE(sc, nullptr);
    EXPECT_NEAR(sc->f, cap, 1e-6);
    const Tensor tq = test::random_tensor<float>(Shape{2, 4, 3, 16}, -2, 2), tk = test::random_tensor<float>(Shape{2, 4, 7, 16}, -2, 2),
                 tv = test::random_tensor<float>(Shape{2, 4, 7, 16}), tm = test::random_tensor<float>(Shape{2, 1, 3, 7}, -3, 0);
    auto alloc = make_cpu_allocator();
    GraphExecutor pe(plain, OpRegistry::global(), alloc, SessionOptions{});
    GraphExecutor fe(b.g, OpRegistry::global(), alloc, SessionOptions{});
    const Tensor want = pe.run({tq, tk, tv, tm}).at(0), got = fe.run({tq, tk, tv, tm}).at(0);
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5 * (1 + std::abs(want.data<float>()[i]))) << i;
  }
}

}  // namespace onyx
