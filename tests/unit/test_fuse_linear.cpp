// The linear fusions (passes/fuse_linear.h) and the ops they make (ops/linear_ops.cpp): the
// rewritten graph computes what the original computes, the weights are stored output-major,
// products that share an input become one, and what does not match is left alone.
#include <gtest/gtest.h>

#include <cmath>

#include "graph_builder.h"
#include "op_test_util.h"
#include "passes/optimize.h"
#include "passes/rewrite_util.h"

namespace onyx {

namespace {

using Builder = test::GraphBuilder;

// A layer's products over x[2, 3, 16]: Q, K and V; the SiLU-gated MLP (gate and up); an LM
// head tied to an embedding table E[20, 16] (MatMul by Transpose(E), E also gathered).
// `gate_read_twice`: the gate product is also a graph output (no gated fusion).
Graph make_layer(bool gate_read_twice) {
  Builder b;
  const int x = b.input("x");
  const int q = b.node("MatMul", {x, b.init("wq", test::random_tensor<float>(Shape{16, 8}, -1, 1))});
  const int k = b.node("MatMul", {x, b.init("wk", test::random_tensor<float>(Shape{16, 4}, -1, 1))});
  const int v = b.node("MatMul", {x, b.init("wv", test::random_tensor<float>(Shape{16, 4}, -1, 1))});
  const int gate = b.node("MatMul", {x, b.init("wg", test::random_tensor<float>(Shape{16, 12}, -1, 1))});
  const int up = b.node("MatMul", {x, b.init("wu", test::random_tensor<float>(Shape{16, 12}, -1, 1))});
  const int mlp = b.node("Mul", {b.node("Mul", {gate, b.node("Sigmoid", {gate})}), up});
  const int e = b.init("embed", test::random_tensor<float>(Shape{20, 16}, -1, 1));
  const int hx = b.node("Concat", {q, k, v}, {test::attr_int("axis", -1)});  // [2, 3, 16]
  const int head = b.node("MatMul", {hx, b.node("Transpose", {e})});
  const int emb = b.node("Gather", {e, b.init("ids", Tensor::from_vector<int64_t>({3, 7}, Shape{2}))});
  b.g.outputs = {q, k, v, mlp, head, emb};
  if (gate_read_twice) b.g.outputs.push_back(gate);
  return b.g;
}

Graph copy_of(const Graph& g) { return g; }

std::vector<Tensor> run(Graph& g, const Tensor& x) {
  auto alloc = make_cpu_allocator();
  GraphExecutor exec(g, OpRegistry::global(), alloc, SessionOptions{});
  return exec.run({x});
}

int count(const Graph& g, const std::string& op) {
  int c = 0;
  for (const auto& n : g.nodes) c += n.op_type == op;
  return c;
}

SessionOptions linear_on() {
  SessionOptions o;
  o.fuse_linear = true;
  return o;
}

}  // namespace

TEST(FuseLinear, LayerProductsBecomeLinearsThatComputeTheSame) {
  Graph plain = make_layer(false);
  Graph fused = copy_of(plain);
  const OptimizeReport r = optimize_graph(fused, linear_on(), Device::cpu());
  EXPECT_EQ(r.linear.linears, 6);     // q, k, v, gate, up, the head
  EXPECT_EQ(r.linear.transposed, 5);  // the head reads the embedding as stored
  EXPECT_EQ(r.linear.gated, 1);
  EXPECT_EQ(r.linear.groups, 1);
  EXPECT_EQ(r.linear.grouped, 3);
  EXPECT_EQ(count(fused, "MatMul"), 0);
  EXPECT_EQ(count(fused, "Transpose"), 0);
  EXPECT_EQ(count(fused, "SiluGateLinear"), 1);
  EXPECT_EQ(count(fused, "Linear"), 2);
  for (const auto& n : fused.nodes) {
    if (n.op_type == "Linear" && n.outputs.size() == 1) {  // the head: the embedding itself, no copy
      EXPECT_EQ(fused.values[n.inputs[1]].name, "embed");
    }
  }
  // The replaced weights are gone; the embedding (gathered too) stays.
  for (const char* w : {"wq", "wk", "wv", "wg", "wu"}) EXPECT_FALSE(fused.initializers.count(fused.find_value(w))) << w;
  for (int rep = 0; rep < 3; ++rep) {
    const Tensor x = test::random_tensor<float>(Shape{2, 3, 16}, -2, 2);
    const auto a = run(plain, x), b = run(fused, x);
    ASSERT_EQ(a.size(), b.size());
    for (size_t o = 0; o < a.size(); ++o) {
      ASSERT_TRUE(a[o].shape() == b[o].shape()) << o;
      for (int64_t i = 0; i < a[o].numel(); ++i)
        EXPECT_NEAR(a[o].data<float>()[i], b[o].data<float>()[i], 2e-5 * (1 + std::abs(a[o].data<float>()[i])))
            << "output " << o << " element " << i;
    }
  }
}

TEST(FuseLinear, GateReadElsewhereIsGroupedNotGated) {
  Graph g = make_layer(true);
  const OptimizeReport r = optimize_graph(g, linear_on(), Device::cpu());
  EXPECT_EQ(r.linear.gated, 0);
  EXPECT_EQ(r.linear.groups, 1);   // q, k, v, gate and up all read x: one product
  EXPECT_EQ(r.linear.grouped, 5);
  EXPECT_EQ(count(g, "SiluMul"), 1);
}

TEST(FuseLinear, OffOnTheCpuByDefaultAndWhenAsked) {
  Graph g = make_layer(false);
  EXPECT_EQ(optimize_graph(g, SessionOptions{}, Device::cpu()).linear.linears, 0);
  EXPECT_EQ(count(g, "Linear"), 0);
  SessionOptions off;
  off.fuse_linear = false;
  Graph h = make_layer(false);
  EXPECT_EQ(optimize_graph(h, off, Device::cuda(0)).linear.linears, 0);
}

TEST(FuseLinear, ProductsOfNonConstantsOrBatchedWeightsStay) {
  Builder b;
  const int x = b.input("x");
  const int y = b.input("y");
  const int xy = b.node("MatMul", {x, y});                                                             // no constant
  const int w3 = b.node("MatMul", {x, b.init("w3", test::random_tensor<float>(Shape{2, 16, 4}))});    // 3-D weight
  const int wi = b.node("MatMul", {b.node("Cast", {x}, {test::attr_int("to", 7)}),
                                   b.init("wi", test::random_tensor<int64_t>(Shape{16, 4}, -3, 3))});  // integers
  b.g.outputs = {xy, w3, wi};
  LinearReport r = linear_from_matmul(b.g);
  EXPECT_EQ(r.linears, 0);
  EXPECT_EQ(count(b.g, "MatMul"), 3);
}

// The norms before a layer's products: SimplifiedLayerNormalization before Q and K,
// SkipSimplifiedLayerNormalization (its sum read after) before the gated MLP.
TEST(FuseLinear, NormsBeforeProductsBecomeRmsNormLinearsThatComputeTheSame) {
  Builder b;
  const int x = b.input("x"), res = b.input("res");
  const int n1 =
      b.node("SimplifiedLayerNormalization", {x, b.init("g1", test::random_tensor<float>(Shape{16}, 0.5, 1.5))},
             {test::attr_int("axis", -1), test::attr_float("epsilon", 1e-5f)});
  const int q = b.node("MatMul", {n1, b.init("wq", test::random_tensor<float>(Shape{16, 8}, -1, 1))});
  const int k = b.node("MatMul", {n1, b.init("wk", test::random_tensor<float>(Shape{16, 4}, -1, 1))});
  // (n2, -, -, sum) = SkipSimplifiedLayerNormalization(x, res, g2)
  Node skip;
  skip.name = "skip_norm";
  skip.op_type = "SkipSimplifiedLayerNormalization";
  skip.domain = "com.microsoft";
  skip.opset = 1;
  skip.inputs = {x, res, b.init("g2", test::random_tensor<float>(Shape{16}, 0.5, 1.5))};
  const int n2 = b.g.value_id("n2"), sum = b.g.value_id("sum");
  skip.outputs = {n2, -1, -1, sum};
  skip.attributes = {test::attr_float("epsilon", 1e-6f)};
  b.g.values[n2].producer = b.g.values[sum].producer = static_cast<int>(b.g.nodes.size());
  b.g.nodes.push_back(skip);
  const int gate = b.node("MatMul", {n2, b.init("wg", test::random_tensor<float>(Shape{16, 12}, -1, 1))});
  const int up = b.node("MatMul", {n2, b.init("wu", test::random_tensor<float>(Shape{16, 12}, -1, 1))});
  const int mlp = b.node("Mul", {b.node("Mul", {gate, b.node("Sigmoid", {gate})}), up});
  const int down = b.node("MatMul", {mlp, b.init("wd", test::random_tensor<float>(Shape{12, 16}, -1, 1))});
  const int out = b.node("Add", {sum, down});
  b.g.values[x].declared.dtype = DType::kFloat32;
  b.g.outputs = {q, k, out};
  Graph plain = b.g, fused = b.g;
  const OptimizeReport r = optimize_graph(fused, linear_on(), Device::cpu());
  EXPECT_EQ(r.linear.normed, 2);
  EXPECT_EQ(count(fused, "RmsNormLinear"), 2);
  EXPECT_EQ(count(fused, "SimplifiedLayerNormalization"), 0);
  EXPECT_EQ(count(fused, "SkipSimplifiedLayerNormalization"), 0);
  for (int rep = 0; rep < 3; ++rep) {
    const Tensor xv = test::random_tensor<float>(Shape{2, 3, 16}, -2, 2);
    const Tensor rv = test::random_tensor<float>(Shape{2, 3, 16}, -2, 2);
    auto alloc = make_cpu_allocator();
    GraphExecutor pe(plain, OpRegistry::global(), alloc, SessionOptions{});
    GraphExecutor fe(fused, OpRegistry::global(), alloc, SessionOptions{});
    const auto a = pe.run({xv, rv}), c = fe.run({xv, rv});
    for (size_t o = 0; o < a.size(); ++o)
      for (int64_t i = 0; i < a[o].numel(); ++i)
        EXPECT_NEAR(a[o].data<float>()[i], c[o].data<float>()[i], 2e-5 * (1 + std::abs(a[o].data<float>()[i])))
            << "output " << o << " element " << i;
  }
}

TEST(FuseLinear, BiasAddsAfterProductsBecomeTheirBias) {
  // Qwen2's attention: q, k and v products with biases, after a norm (one RmsNormLinear with three
  // outputs and a bias, v's part zeros where v has none), and a product with a bias beside one
  // whose Add reads a graph input (that Add stays) and one whose output is also read elsewhere
  // (stays). Against the unfused graph.
  for (bool v_bias : {true, false}) {
    Builder b;
    const int x = b.input("x"), other = b.input("other");
    b.g.values[x].declared.dtype = DType::kFloat32;
    const int n =
        b.node("SimplifiedLayerNormalization", {x, b.init("g", test::random_tensor<float>(Shape{16}, 0.5, 1.5))},
               {test::attr_int("axis", -1), test::attr_float("epsilon", 1e-6f)});
    auto biased = [&](int in, const char* w, int64_t out, const char* bias) {
      const int y = b.node("MatMul", {in, b.init(w, test::random_tensor<float>(Shape{16, out}, -1, 1))});
      return bias ? b.node("Add", {b.init(bias, test::random_tensor<float>(Shape{out}, -1, 1)), y}) : y;
    };
    const int q = biased(n, "wq", 8, "bq"), k = biased(n, "wk", 4, "bk"), v = biased(n, "wv", 4, v_bias ? "bv" : nullptr);
    const int o = biased(x, "wo", 6, "bo");
    const int plain_add = b.node("Add", {b.node("MatMul", {x, b.init("wp", test::random_tensor<float>(Shape{16, 6}, -1, 1))}), other});
    const int seen = b.node("MatMul", {x, b.init("ws", test::random_tensor<float>(Shape{16, 6}, -1, 1))});
    const int seen_biased = b.node("Add", {seen, b.init("bs", test::random_tensor<float>(Shape{6}, -1, 1))});
    b.g.outputs = {q, k, v, o, plain_add, seen, seen_biased};
    Graph plain = b.g, fused = b.g;
    const OptimizeReport r = optimize_graph(fused, linear_on(), Device::cpu());
    EXPECT_EQ(r.linear.normed, 1);
    EXPECT_EQ(r.linear.biased, 2) << "the normed q/k/v product and x's product (o, p and s grouped)";
    EXPECT_EQ(count(fused, "RmsNormLinear"), 1);
    EXPECT_EQ(count(fused, "Add"), 2);  // p's (a graph input) and s's (s read elsewhere)
    for (const Node& nd : fused.nodes)
      if (nd.op_type == "RmsNormLinear") {
        ASSERT_EQ(nd.inputs.size(), 5u);
        const Tensor* bias = constant_value(fused, nd.inputs[4]);
        ASSERT_TRUE(bias != nullptr);
        ASSERT_EQ(bias->numel(), 16);
        if (!v_bias)
          for (int64_t i = 12; i < 16; ++i) EXPECT_EQ(bias->data<float>()[i], 0.f);
      }
    for (int rep = 0; rep < 2; ++rep) {
      const Tensor xv = test::random_tensor<float>(Shape{2, 3, 16}, -2, 2), ov = test::random_tensor<float>(Shape{2, 3, 6});
      auto alloc = make_cpu_allocator();
      GraphExecutor pe(plain, OpRegistry::global(), alloc, SessionOptions{});
      GraphExecutor fe(fused, OpRegistry::global(), alloc, SessionOptions{});
      const auto a = pe.run({xv, ov}), c = fe.run({xv, ov});
      ASSERT_EQ(a.size(), c.size());
      for (size_t out = 0; out < a.size(); ++out) {
        ASSERT_EQ(a[out].shape(), c[out].shape());
        for (int64_t i = 0; i < a[out].numel(); ++i)
          EXPECT_NEAR(a[out].data<float>()[i], c[out].data<float>()[i], 2e-5 * (1 + std::abs(a[out].data<float>()[i])))
              << "output " << out << " element " << i;
      }
    }
  }
}

// The ops on their own, 16-bit, against a float64 computation: one rounding at the end.
TEST(LinearOps, SplitsAndGatingMatchAFloat64Reference) {
  for (int rep = 0; rep < 2; ++rep) {
    const int64_t m = 5, k = 40, f = 6;
    const Tensor x = test::random_tensor<BFloat16>(Shape{1, m, k}, -1, 1);
    const Tensor w = test::random_tensor<BFloat16>(Shape{2 * f, k}, -1, 1);
    auto dot = [&](int64_t i, int64_t j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += double(static_cast<float>(x.data<BFloat16>()[i * k + p])) *
             double(static_cast<float>(w.data<BFloat16>()[j * k + p]));
      return s;
    };
    const auto split = test::run_op("Linear", {x, w}, {test::attr_ints("splits", {7, 5})}, 2, 1, "onyx", {false, true});
    ASSERT_EQ(split.size(), 2u);
    EXPECT_TRUE(split[0].shape() == Shape({1, m, 7}));
    EXPECT_TRUE(split[1].shape() == Shape({1, m, 5}));
    const auto gated = test::run_op("SiluGateLinear", {x, w}, {}, 1, 1, "onyx", {false, true});
    EXPECT_TRUE(gated[0].shape() == Shape({1, m, f}));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < 2 * f; ++j) {
        const double want = dot(i, j);
        const Tensor& y = j < 7 ? split[0] : split[1];
        const int64_t c = j < 7 ? j : j - 7, width = j < 7 ? 7 : 5;
        EXPECT_NEAR(static_cast<float>(y.data<BFloat16>()[i * width + c]), want, 1e-2 * (1 + std::abs(want)));
      }
      for (int64_t j = 0; j < f; ++j) {
        const double g = dot(i, j), u = dot(i, f + j), want = g / (1 + std::exp(-g)) * u;
        EXPECT_NEAR(static_cast<float>(gated[0].data<BFloat16>()[i * f + j]), want, 1e-2 * (1 + std::abs(want)));
      }
    }
  }
}

TEST(LinearOps, WithABiasMatchAFloat64Reference) {
  // bfloat16 Linear (two outputs) and RmsNormLinear with a bias, against float64; a bias of
  // another size, or on the gated form, is an error that says so.
  const int64_t m = 3, k = 24, n = 10;
  const Tensor x = test::random_tensor<BFloat16>(Shape{m, k}, -1, 1);
  const Tensor w = test::random_tensor<BFloat16>(Shape{n, k}, -1, 1);
  const Tensor bias = test::random_tensor<BFloat16>(Shape{n}, -4, 4);
  const Tensor gamma = test::random_tensor<BFloat16>(Shape{k}, 0.5, 1.5);
  auto f = [](const Tensor& t, int64_t i) { return double(static_cast<float>(t.data<BFloat16>()[i])); };
  const auto lin = test::run_op("Linear", {x, w, bias}, {test::attr_ints("splits", {4, 6})}, 2, 1, "onyx", {false, true});
  const auto nrm = test::run_op("RmsNormLinear", {x, Tensor(), gamma, w, bias}, {test::attr_float("epsilon", 1e-6f)}, 2,
                                1, "onyx", {false, true});
  for (int64_t i = 0; i < m; ++i) {
    double ss = 0;
    for (int64_t p = 0; p < k; ++p) ss += f(x, i * k + p) * f(x, i * k + p);
    const double inv = 1 / std::sqrt(ss / k + 1e-6);
    for (int64_t j = 0; j < n; ++j) {
      double want = f(bias, j), want_n = f(bias, j);
      for (int64_t p = 0; p < k; ++p) {
        want += f(x, i * k + p) * f(w, j * k + p);
        // the normalized row is rounded to bfloat16 before the product, as the norm's output is
        want_n += double(static_cast<float>(BFloat16(static_cast<float>(f(x, i * k + p) * inv * f(gamma, p))))) * f(w, j * k + p);
      }
      const Tensor& y = j < 4 ? lin[0] : lin[1];
      const int64_t c = j < 4 ? j : j - 4, width = j < 4 ? 4 : 6;
      EXPECT_NEAR(static_cast<float>(y.data<BFloat16>()[i * width + c]), want, 8e-3 * (1 + std::abs(want))) << i << ", " << j;
      EXPECT_NEAR(static_cast<float>(nrm[1].data<BFloat16>()[i * n + j]), want_n, 8e-3 * (1 + std::abs(want_n))) << i << ", " << j;
    }
  }
  auto error_of = [](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of([&] {
              test::run_op("Linear", {x, w, test::random_tensor<BFloat16>(Shape{n + 1})}, {}, 1, 1, "onyx", {false, true});
            }).find("the bias must be [10], got [11]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              test::run_op("RmsNormLinear", {x, Tensor(), gamma, w, bias}, {test::attr_int("gated", 1)}, 2, 1, "onyx",
                           {false, true});
            }).find("the gated form takes no bias"),
            std::string::npos);
}

TEST(LinearOps, BadShapesAreErrorsThatSayWhy) {
  const Tensor x = test::random_tensor<float>(Shape{2, 8});
  try {
    test::run_op("Linear", {x, test::random_tensor<float>(Shape{4, 9})}, {}, 1, 1, "onyx", {false, true});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not end in the weight's K = 9"), std::string::npos) << e.what();
  }
  try {
    test::run_op("Linear", {x, test::random_tensor<float>(Shape{4, 8})}, {test::attr_ints("splits", {3, 2})}, 2, 1,
                 "onyx", {false, true});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("splits add up to 5, not the weight's N = 4"), std::string::npos) << e.what();
  }
  try {
    test::run_op("SiluGateLinear", {x, test::random_tensor<float>(Shape{5, 8})}, {}, 1, 1, "onyx", {false, true});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be even"), std::string::npos) << e.what();
  }
  try {
    test::run_op("SiluGateLinear", {x, test::random_tensor<float>(Shape{4, 8})}, {test::attr_string("activation", "relu")},
                 1, 1, "onyx", {false, true});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("activation 'relu' is not a gate activation"), std::string::npos) << e.what();
  }
  try {
    test::run_op("RmsNormLinear",
                 {x, Tensor(), test::random_tensor<float>(Shape{8}), test::random_tensor<float>(Shape{4, 8})},
                 {test::attr_string("activation", "gelu")}, 2, 1, "onyx", {false, false, true, true});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("applies to the gated form"), std::string::npos) << e.what();
  }
}

TEST(LinearOps, GeluGatesMatchAFloat64Reference) {
  // Gemma's gate: act(x · w[:F]^T) * (x · w[F:]^T) with act GELU by tanh or by erf, plain and
  // after the RMS norm (RmsNormLinear, gated), against the formulas in float64.
  const int64_t m = 4, k = 24, f = 5;
  const Tensor x = test::random_tensor<float>(Shape{m, k}, -2, 2), skip = test::random_tensor<float>(Shape{m, k}, -2, 2);
  const Tensor gamma = test::random_tensor<float>(Shape{k}, 0.5, 1.5), w = test::random_tensor<float>(Shape{2 * f, k}, -1, 1);
  const float* xp = x.data<float>();
  const float* sp = skip.data<float>();
  const float* gp = gamma.data<float>();
  const float* wp = w.data<float>();
  for (const char* act : {"gelu_tanh", "gelu"}) {
    SCOPED_TRACE(act);
    const bool tanh_form = std::string(act) == "gelu_tanh";
    auto gelu = [&](double g) {
      return tanh_form ? 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)))
                       : 0.5 * g * (1 + std::erf(g / std::sqrt(2.0)));
    };
    const auto plain = test::run_op("SiluGateLinear", {x, w}, {test::attr_string("activation", act)}, 1, 1, "onyx",
                                    {false, true});
    const auto normed = test::run_op(
        "RmsNormLinear", {x, skip, gamma, w},
        {test::attr_float("epsilon", 1e-5f), test::attr_int("gated", 1), test::attr_string("activation", act)}, 2, 1,
        "onyx", {false, false, true, true});
    for (int64_t i = 0; i < m; ++i) {
      std::vector<double> h(static_cast<size_t>(k));
      double ms = 0;
      for (int64_t p = 0; p < k; ++p) {
        h[p] = double(xp[i * k + p]) + sp[i * k + p];
        ms += h[p] * h[p] / k;
      }
      for (int64_t j = 0; j < f; ++j) {
        double g = 0, u = 0, gn = 0, un = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double n = h[p] / std::sqrt(ms + 1e-5) * gp[p];
          g += double(xp[i * k + p]) * wp[j * k + p];
          u += double(xp[i * k + p]) * wp[(f + j) * k + p];
          gn += n * wp[j * k + p];
          un += n * wp[(f + j) * k + p];
        }
        const double want = gelu(g) * u, want_n = gelu(gn) * un;
        EXPECT_NEAR(plain[0].data<float>()[i * f + j], want, 1e-4 * (1 + std::abs(want))) << i << "," << j;
        EXPECT_NEAR(normed[1].data<float>()[i * f + j], want_n, 1e-4 * (1 + std::abs(want_n))) << i << "," << j;
      }
    }
  }
}

TEST(FuseLinear, GeluGatedMlpsBecomeOneGatedProduct) {
  // Gemma's MLP after the pattern fusion, Mul(FastGelu(x W_g), x W_u) (com.microsoft), and the
  // ai.onnx Gelu of opset 20 (approximate "none"): one SiluGateLinear with the activation, the
  // GELU gone, computing what the graph computed.
  for (int form : {0, 1}) {
    SCOPED_TRACE(testing::Message() << "form " << form);
    Builder b;
    const int x = b.input("x");
    const int gate = b.node("MatMul", {x, b.init("wg", test::random_tensor<float>(Shape{16, 12}, -1, 1))});
    const int up = b.node("MatMul", {x, b.init("wu", test::random_tensor<float>(Shape{16, 12}, -1, 1))});
    const int act = form == 0 ? b.node("FastGelu", {gate}) : b.node("Gelu", {gate});
    if (form == 0) b.g.nodes.back().domain = "com.microsoft", b.g.nodes.back().opset = 1;
    else b.g.nodes.back().opset = 20;
    b.g.outputs = {b.node("Mul", {up, act})};  // the up product first: either order matches
    Graph plain = b.g;
    const OptimizeReport r = optimize_graph(b.g, linear_on(), Device::cpu());
    EXPECT_EQ(r.linear.gated, 1);
    ASSERT_EQ(count(b.g, "SiluGateLinear"), 1);
    EXPECT_EQ(count(b.g, "FastGelu") + count(b.g, "Gelu") + count(b.g, "Mul"), 0);
    for (const auto& n : b.g.nodes)
      if (n.op_type == "SiluGateLinear") {
        const Attribute* a = n.find_attribute("activation");
        ASSERT_NE(a, nullptr);
        EXPECT_EQ(a->s, form == 0 ? "gelu_tanh" : "gelu");
      }
    const Tensor in = test::random_tensor<float>(Shape{2, 3, 16}, -2, 2);
    const Tensor want = run(plain, in).at(0), got = run(b.g, in).at(0);
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-4 * (1 + std::abs(want.data<float>()[i]))) << i;
  }
}

}  // namespace onyx

namespace onyx {

namespace {

// A com.microsoft MatMulNBits node of 4 bits: x times the weights [B, scales, (zero points)].
int nbits_node(test::GraphBuilder& b, int x, std::vector<int> weights, int64_t K, int64_t N, int64_t block) {
  weights.insert(weights.begin(), x);
  const int out = b.node("MatMulNBits", std::move(weights),
                         {test::attr_int("K", K), test::attr_int("N", N), test::attr_int("bits", 4),
                          test::attr_int("block_size", block)});
  b.g.nodes.back().domain = "com.microsoft";
  b.g.nodes.back().opset = 1;
  return out;
}

}  // namespace

// group_nbits: three 4-bit products of one A (N 16, 8 and 8, uint8 zero points packed two to a
// byte, scales flat) become one LinearNBits whose outputs compute what the three did; a fourth
// product of A with other block size, and a product of another input, stay apart.
TEST(GroupNBits, ProductsOfOneInputStackAndComputeTheSame) {
  const int64_t K = 64;
  struct W {
    Tensor b, s, z;
  };
  auto weights = [&](int64_t N, int64_t block) {
    const int64_t kb = K / block;
    return W{test::random_tensor<uint8_t>(Shape{N, kb, block / 2}, 0, 255), test::random_tensor<float>(Shape{N * kb}, 0.01, 0.1),
             test::random_tensor<uint8_t>(Shape{N * ((kb + 1) / 2)}, 0, 255)};
  };
  const std::vector<std::pair<int64_t, int64_t>> shapes{{16, 32}, {8, 32}, {8, 32}, {8, 16}, {8, 32}};
  std::vector<W> ws;
  for (auto [n, block] : shapes) ws.push_back(weights(n, block));
  auto make = [&]() {
    test::GraphBuilder b;
    const int a = b.input("a"), other = b.input("other");
    std::vector<int> outs;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto [n, block] = shapes[i];
      const int x = i == 4 ? other : a;
      outs.push_back(nbits_node(b, x, {b.init(cat("b", i), ws[i].b), b.init(cat("s", i), ws[i].s), b.init(cat("z", i), ws[i].z)},
                                K, n, block));
    }
    b.g.outputs = outs;
    return b.g;
  };
  Graph plain = make(), grouped = make();
  const LinearReport rep = group_nbits(grouped);
  EXPECT_EQ(rep.groups, 1);
  EXPECT_EQ(rep.grouped, 3);
  int products = 0, stacked = 0;
  for (const Node& n : grouped.nodes) {
    products += n.op_type == "MatMulNBits";
    if (n.op_type == "LinearNBits") {
      ++stacked;
      EXPECT_EQ(n.outputs.size(), 3u);
      ASSERT_NE(n.find_attribute("splits"), nullptr);
      EXPECT_EQ(n.find_attribute("splits")->ints, (std::vector<int64_t>{16, 8, 8}));
    }
    EXPECT_NE(n.op_type, "Split");  // the stacked product writes its outputs itself
  }
  EXPECT_EQ(products, 2);  // the other block size, the other input
  EXPECT_EQ(stacked, 1);
  const Tensor a = test::random_tensor<float>(Shape{3, K}), other = test::random_tensor<float>(Shape{3, K});
  auto alloc = make_cpu_allocator();
  GraphExecutor ea(plain, OpRegistry::global(), alloc, SessionOptions{});
  GraphExecutor eb(grouped, OpRegistry::global(), alloc, SessionOptions{});
  auto want = ea.run({a, other}), got = eb.run({a, other});
  ASSERT_EQ(want.size(), got.size());
  for (size_t o = 0; o < want.size(); ++o) {
    ASSERT_EQ(want[o].shape(), got[o].shape()) << "output " << o;
    for (int64_t i = 0; i < want[o].numel(); ++i)
      EXPECT_NEAR(want[o].data<float>()[i], got[o].data<float>()[i], 1e-5 * (1 + std::abs(want[o].data<float>()[i])))
          << "output " << o;
  }
}

// The same layer with 4-bit products: Q and K after SimplifiedLayerNormalization, the gated MLP
// after SkipSimplifiedLayerNormalization (its sum read after), through the whole pipeline:
// two onyx::RmsNormLinearNBits (splits; gated) that compute what the graph computed.
TEST(GroupNBits, NormsBeforeFourBitProductsFuseIntoRmsNormLinearNBits) {
  const int64_t K = 64, block = 32, kb = K / block;
  Builder b;
  const int x = b.input("x"), res = b.input("res");
  auto product = [&](int in, const char* name, int64_t n) {
    return nbits_node(b, in,
                      {b.init(cat(name, "_b"), test::random_tensor<uint8_t>(Shape{n, kb, block / 2}, 0, 255)),
                       b.init(cat(name, "_s"), test::random_tensor<float>(Shape{n, kb}, 0.01, 0.1)),
                       b.init(cat(name, "_z"), test::random_tensor<uint8_t>(Shape{n, (kb + 1) / 2}, 0, 255))},
                      K, n, block);
  };
  const int n1 =
      b.node("SimplifiedLayerNormalization", {x, b.init("g1", test::random_tensor<float>(Shape{K}, 0.5, 1.5))},
             {test::attr_int("axis", -1), test::attr_float("epsilon", 1e-5f)});
  const int q = product(n1, "q", 16), k = product(n1, "k", 8);
  Node skip;
  skip.name = "skip_norm";
  skip.op_type = "SkipSimplifiedLayerNormalization";
  skip.domain = "com.microsoft";
  skip.opset = 1;
  skip.inputs = {x, res, b.init("g2", test::random_tensor<float>(Shape{K}, 0.5, 1.5))};
  const int n2 = b.g.value_id("n2"), sum = b.g.value_id("sum");
  skip.outputs = {n2, -1, -1, sum};
  skip.attributes = {test::attr_float("epsilon", 1e-6f)};
  b.g.values[n2].producer = b.g.values[sum].producer = static_cast<int>(b.g.nodes.size());
  b.g.nodes.push_back(skip);
  const int gate = product(n2, "gate", 24), up = product(n2, "up", 24);
  const int mlp = b.node("Mul", {b.node("Mul", {gate, b.node("Sigmoid", {gate})}), up});
  b.g.values[x].declared.dtype = DType::kFloat32;
  b.g.outputs = {q, k, mlp, sum};
  Graph plain = b.g, fused = b.g;
  const OptimizeReport r = optimize_graph(fused, linear_on(), Device::cpu());
  EXPECT_EQ(r.linear.normed, 2);
  EXPECT_EQ(count(fused, "RmsNormLinearNBits"), 2);
  EXPECT_EQ(count(fused, "MatMulNBits"), 0);
  EXPECT_EQ(count(fused, "LinearNBits"), 0);
  EXPECT_EQ(count(fused, "SkipSimplifiedLayerNormalization"), 0);
  auto alloc = make_cpu_allocator();
  GraphExecutor pe(plain, OpRegistry::global(), alloc, SessionOptions{});
  GraphExecutor fe(fused, OpRegistry::global(), alloc, SessionOptions{});
  for (int64_t rows : {1, 5}) {
    const Tensor xv = test::random_tensor<float>(Shape{rows, K}, -2, 2);
    const Tensor rv = test::random_tensor<float>(Shape{rows, K}, -2, 2);
    const auto a = pe.run({xv, rv}), c = fe.run({xv, rv});
    ASSERT_EQ(a.size(), c.size());
    for (size_t o = 0; o < a.size(); ++o)
      for (int64_t i = 0; i < a[o].numel(); ++i)
        EXPECT_NEAR(a[o].data<float>()[i], c[o].data<float>()[i], 2e-5 * (1 + std::abs(a[o].data<float>()[i])))
            << "output " << o << " element " << i << ", rows " << rows;
  }
}

// SiluMul of two 4-bit products of one input (an MLP's gate and up) -> one gated LinearNBits,
// and Gemma's GELU gate (Mul(FastGelu(gate), up)) -> one with activation gelu_tanh; the products
// of another input beside it (Q, K, V) -> one LinearNBits with splits; both compute what the
// nodes they replace computed (random inputs, 1, 3 and 8 rows).
TEST(GroupNBits, GateAndUpProductsBecomeOneGatedProduct) {
  for (const bool gelu : {false, true}) {
    SCOPED_TRACE(gelu ? "GELU gate" : "SiLU gate");
    const int64_t K = 96, F = 24, block = 32, kb = K / block;
    auto bw = [&](int64_t n) { return test::random_tensor<uint8_t>(Shape{n, kb, block / 2}, 0, 255); };
    auto sw = [&](int64_t n) { return test::random_tensor<float>(Shape{n, kb}, 0.01, 0.1); };
    const Tensor bg = bw(F), bu = bw(F), bq = bw(16), bk = bw(8);
    const Tensor sg = sw(F), su = sw(F), sq = sw(16), sk = sw(8);
    auto make = [&]() {
      test::GraphBuilder b;
      const int x = b.input("x"), h = b.input("h");
      auto product = [&](int in, const char* name, const Tensor& w, const Tensor& sc, int64_t n) {
        return nbits_node(b, in, {b.init(cat(name, "_b"), w), b.init(cat(name, "_s"), sc)}, K, n, block);
      };
      const int gate = product(x, "gate", bg, sg, F), up = product(x, "up", bu, su, F);
      int act;
      if (gelu) {
        const int g = b.node("FastGelu", {gate}, {});
        b.g.nodes.back().domain = "com.microsoft";
        b.g.nodes.back().opset = 1;
        act = b.node("Mul", {g, up});
      } else {
        act = b.node("SiluMul", {gate, up}, {});
        b.g.nodes.back().domain = "onyx";
        b.g.nodes.back().opset = 1;
      }
      const int q = product(h, "q", bq, sq, 16), k = product(h, "k", bk, sk, 8);
      b.g.outputs = {act, q, k};
      return b.g;
    };
    Graph plain = make(), fused = make();
    const LinearReport rep = group_nbits(fused);
    EXPECT_EQ(rep.groups, 2);
    EXPECT_EQ(rep.grouped, 4);
    int gated = 0, split = 0;
    for (const Node& n : fused.nodes) {
      EXPECT_NE(n.op_type, "MatMulNBits");
      EXPECT_NE(n.op_type, "SiluMul");
      EXPECT_NE(n.op_type, "FastGelu");
      if (n.op_type == "LinearNBits") (n.find_attribute("gated") ? gated : split) += 1;
      if (n.op_type == "LinearNBits" && n.find_attribute("gated")) {
        const Attribute* a = n.find_attribute("activation");
        EXPECT_EQ(a ? a->s : std::string("silu"), gelu ? "gelu_tanh" : "silu");
      }
    }
    EXPECT_EQ(gated, 1);
    EXPECT_EQ(split, 1);
    auto alloc = make_cpu_allocator();
    GraphExecutor ea(plain, OpRegistry::global(), alloc, SessionOptions{});
    GraphExecutor eb(fused, OpRegistry::global(), alloc, SessionOptions{});
    for (int64_t rows : {1, 3, 8}) {
      const Tensor x = test::random_tensor<float>(Shape{rows, K}), h = test::random_tensor<float>(Shape{rows, K});
      auto want = ea.run({x, h}), got = eb.run({x, h});
      ASSERT_EQ(want.size(), got.size());
      for (size_t o = 0; o < want.size(); ++o) {
        ASSERT_EQ(want[o].shape(), got[o].shape()) << "output " << o;
        for (int64_t i = 0; i < want[o].numel(); ++i)
          EXPECT_NEAR(want[o].data<float>()[i], got[o].data<float>()[i], 1e-5 * (1 + std::abs(want[o].data<float>()[i])))
              << "output " << o << ", rows " << rows;
      }
    }
  }
}

}  // namespace onyx

namespace onyx {

namespace {

// Phi-3's products as torch.onnx writes them: one MatMul for Q, K and V cut by three Slices (one
// at axis 2, one at -1, one to the end), one for gate and up cut in halves at bounds computed from
// the product's Shape (TorchScript) or by a Split (torch.export); the RMS norm before them
// decomposed, behind a Cast to float32 of a float32 value (the bounds fold only where the norm's
// dimensions are followed through ReduceMean and Pow), and V times a scalar 1.
Graph make_sliced_layer(bool split) {
  Builder b;
  const int h = b.input("h", DType::kFloat32, {-1, -1, 16});
  const int hf = b.node("Cast", {h}, {test::attr_int("to", 1)});
  const int ms = b.node("ReduceMean", {b.node("Pow", {hf, b.init("two", Tensor::scalar<float>(2.f))}),
                                       b.init("axes", Tensor::from_vector<int64_t>({-1}, Shape{1}))});
  const int inv = b.node("Reciprocal", {b.node("Sqrt", {b.node("Add", {ms, b.init("eps", Tensor::scalar<float>(1e-5f))})})});
  const int x = b.node("Mul", {b.init("gamma", test::random_tensor<float>(Shape{16}, 0.5, 1.5)), b.node("Mul", {hf, inv})});
  auto i64 = [&](const char* n, int64_t v) { return b.init(n, Tensor::from_vector<int64_t>({v}, Shape{1})); };
  const int qkv = b.node("MatMul", {x, b.init("wqkv", test::random_tensor<float>(Shape{16, 16}, -1, 1))});
  const int q = b.node("Slice", {qkv, i64("q0", 0), i64("q1", 8), i64("qa", 2)});
  const int k = b.node("Slice", {qkv, i64("k0", 8), i64("k1", 12), i64("ka", -1)});
  const int v = b.node("Neg", {b.node("Mul", {b.node("Slice", {qkv, i64("v0", -4), i64("v1", INT64_MAX), i64("va", -1)}),
                                              b.init("one", Tensor::scalar<float>(1.f))})});
  const int gu = b.node("MatMul", {x, b.init("wgu", test::random_tensor<float>(Shape{16, 24}, -1, 1))});
  int gate = -1, up = -1;
  if (split) {
    Node n;
    n.name = "split";
    n.op_type = "Split";
    n.opset = 18;
    n.inputs = {gu, b.init("halves", Tensor::from_vector<int64_t>({12, 12}, Shape{2}))};
    gate = b.g.value_id("gate");
    up = b.g.value_id("up");
    n.outputs = {gate, up};
    n.attributes = {test::attr_int("axis", -1)};
    b.g.values[gate].producer = b.g.values[up].producer = static_cast<int>(b.g.nodes.size());
    b.g.nodes.push_back(std::move(n));
  } else {
    const int width = b.node("Gather", {b.node("Shape", {gu}), b.init("last", Tensor::scalar<int64_t>(-1))});
    const int half = b.node("Unsqueeze", {b.node("Div", {width, b.init("two_i", Tensor::scalar<int64_t>(2))}),
                                          b.init("zero_axis", Tensor::from_vector<int64_t>({0}, Shape{1}))});
    gate = b.node("Slice", {gu, i64("g0", 0), half, i64("ga", -1)});
    up = b.node("Slice", {gu, half, i64("u1", INT64_MAX), i64("ua", -1)});
  }
  const int mlp = b.node("Mul", {b.node("Mul", {gate, b.node("Sigmoid", {gate})}), up});
  b.g.outputs = {q, k, v, mlp};
  return b.g;
}

}  // namespace

TEST(FuseLinear, ProductsCutBySlicesOrASplitBecomeTheProductsTheyFuse) {
  for (bool split : {false, true}) {
    SCOPED_TRACE(split ? "Split" : "Slices at computed bounds");
    Graph plain = make_sliced_layer(split);
    Graph fused = copy_of(plain);
    const OptimizeReport r = optimize_graph(fused, linear_on(), Device::cpu());
    EXPECT_EQ(r.linear.sliced, 2);      // the q/k/v product and the gate/up one
    EXPECT_EQ(r.linear.gated, 1);       // gate and up: one gated product again
    EXPECT_EQ(r.linear.groups, 1);      // q, k and v: one product with three outputs
    EXPECT_EQ(r.fuse.noop_casts, 1);
    EXPECT_EQ(r.fuse.multiplications_by_one, 1);
    EXPECT_EQ(r.linear.normed, 0);      // one norm read by both products stays a norm of its own
    for (const char* op : {"Slice", "Split", "MatMul", "Cast", "Mul", "SiluMul"}) EXPECT_EQ(count(fused, op), 0) << op;
    EXPECT_EQ(count(fused, "SimplifiedLayerNormalization"), 1);
    EXPECT_EQ(count(fused, "Linear"), 1);
    EXPECT_EQ(count(fused, "SiluGateLinear"), 1);
    for (int rep = 0; rep < 3; ++rep) {
      const Tensor h = test::random_tensor<float>(Shape{2, 3, 16}, -2, 2);
      const auto a = run(plain, h), b = run(fused, h);
      ASSERT_EQ(a.size(), b.size());
      for (size_t o = 0; o < a.size(); ++o) {
        ASSERT_TRUE(a[o].shape() == b[o].shape()) << o << ": " << a[o].shape().str() << " vs " << b[o].shape().str();
        for (int64_t i = 0; i < a[o].numel(); ++i)
          EXPECT_NEAR(a[o].data<float>()[i], b[o].data<float>()[i], 2e-5 * (1 + std::abs(a[o].data<float>()[i])))
              << "output " << o << " element " << i;
      }
    }
  }
}

TEST(FuseLinear, ProductsCutInOverlappingPiecesOrReadWholeStay) {
  for (int variant = 0; variant < 2; ++variant) {
    Builder b;
    const int x = b.input("x");
    const int p = b.node("MatMul", {x, b.init("w", test::random_tensor<float>(Shape{16, 12}, -1, 1))});
    auto i64 = [&](const char* n, int64_t v) { return b.init(n, Tensor::from_vector<int64_t>({v}, Shape{1})); };
    const int a = b.node("Slice", {p, i64("a0", 0), i64("a1", 8), i64("aa", -1)});
    // 0: the second piece overlaps the first; 1: the whole product is read too.
    const int c = variant == 0 ? b.node("Slice", {p, i64("c0", 6), i64("c1", 12), i64("ca", -1)}) : b.node("Relu", {p});
    b.g.outputs = {a, c};
    const OptimizeReport r = optimize_graph(b.g, linear_on(), Device::cpu());
    EXPECT_EQ(r.linear.sliced, 0) << variant;
    EXPECT_EQ(count(b.g, "Linear"), 1) << variant;
    EXPECT_EQ(count(b.g, "Slice"), variant == 0 ? 2 : 1) << variant;
  }
}

}  // namespace onyx
