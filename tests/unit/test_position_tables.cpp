// The position tables (passes/position_tables.h): transformers' rotary chains from position_ids
// (the Mul form of transformers 5's exports, the MatMul form of Optimum's, with a scaling and a
// cast to float16) become Gathers of tables that give what the chains computed, for random
// positions in batches of other shapes; chains that read more than each position alone, or whose
// tables would not fit, stay as they are.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "exec/executor.h"
#include "graph_builder.h"
#include "op_test_util.h"
#include "passes/position_tables.h"

namespace onyx {

namespace {

using Builder = test::GraphBuilder;

constexpr int64_t kHalf = 8;  // inverse frequencies: rotary width 16

int ints(Builder& b, const std::string& name, std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return b.init(name, Tensor::from_vector<int64_t>(v, Shape{n}));
}

std::vector<float> inverse_frequencies() {
  std::vector<float> f;
  for (int64_t i = 0; i < kHalf; ++i) f.push_back(static_cast<float>(std::pow(10000.0, -double(i) / kHalf)));
  return f;
}

enum class Form {
  kMul,           // transformers 5: Unsqueeze(pos, -1), Cast, Mul(inv_freq)
  kMatMul,        // Optimum: MatMul(Expand(inv_freq[1, 8, 1], [batch, 1, 1]), Cast(Unsqueeze(pos, 1))), Transpose
  kLongFactors,   // the inverse frequencies divided by factors chosen by the largest position (Phi-3's long rope)
  kCumSum,        // positions summed along the sequence first
  kWideConstant,  // a constant [S, 1] that meets the positions' sequence axis
  kSeqExpand,     // the MatMul form, the inverse frequencies expanded to the sequence's length
  kExported,      // torch.export (torch 2.11): the MatMul form, the batch taken from x's shape,
                  // Expand(inv_freq[1, 8, 1], Concat(Shape(x, 0, 1), [1], [1]))
  kExportedWide,  // the same but the last entry from x's shape too: not known to keep c's
};

// Inputs pos [batch, seq] (int64) and x [batch, 2, seq, 16]; output y = x * cos + x * sin (cos
// and sin [batch, 1, seq, 16]), with the rotary tables made from pos as `form` makes them.
Graph make_graph(Form form, bool half = false) {
  Builder b;
  const int pos = b.input("position_ids", DType::kInt64, {-1, -1});
  const int x = b.input("x");
  const int inv = b.init("inv_freq", Tensor::from_vector<float>(inverse_frequencies(), Shape{kHalf}));
  const Attribute to_float = test::attr_int("to", static_cast<int64_t>(DType::kFloat32));
  int freqs = -1;  // [batch, seq, 8]
  if (form == Form::kMul || form == Form::kLongFactors || form == Form::kCumSum || form == Form::kWideConstant) {
    int p = pos;
    if (form == Form::kCumSum) p = b.node("CumSum", {pos, b.init("axis1", Tensor::scalar<int64_t>(1))});
    const int angle = b.node("Cast", {b.node("Unsqueeze", {p, ints(b, "minus1", {-1})})}, {to_float});
    int f = inv;
    if (form == Form::kLongFactors) {
      const int longest = b.node("ReduceMax", {pos}, {test::attr_int("keepdims", 0)});
      const int is_long = b.node("Greater", {longest, b.init("original", Tensor::scalar<int64_t>(32))});
      const int factors = b.node("Where", {is_long, b.init("long", Tensor::from_vector<float>(std::vector<float>(kHalf, 4.f), Shape{kHalf})),
                                           b.init("short", Tensor::from_vector<float>(std::vector<float>(kHalf, 1.f), Shape{kHalf}))});
      f = b.node("Div", {inv, factors});
    }
    if (form == Form::kWideConstant) {
      freqs = b.node("Mul", {angle, b.init("wide", Tensor::from_vector<float>({1.f, 2.f, 3.f}, Shape{3, 1}))});
      freqs = b.node("Mul", {freqs, inv});
    } else {
      freqs = b.node("Mul", {angle, f});
    }
  } else {
    // The batch's size from the positions' shape, as [batch, 1, 1] (kSeqExpand: [seq, 1, 1]); or
    // from x's, as torch.export writes it.
    const bool seq = form == Form::kSeqExpand;
    int target;
    if (form == Form::kExported || form == Form::kExportedWide) {
      auto piece = [&](int64_t start) {
        return b.node("Shape", {x}, {test::attr_int("start", start), test::attr_int("end", start + 1)});
      };
      target = form == Form::kExported ? b.node("Concat", {piece(0), ints(b, "one_a", {1}), ints(b, "one_b", {1})},
                                                {test::attr_int("axis", 0)})
                                       : b.node("Concat", {piece(0), ints(b, "one_a", {1}), piece(1)},
                                                {test::attr_int("axis", 0)});
    } else {
      const int shape = b.node("Shape", {pos});
      const int entry = b.node("Gather", {shape, b.init("entry", Tensor::scalar<int64_t>(seq ? 1 : 0))}, {test::attr_int("axis", 0)});
      target = b.node("Concat", {b.node("Unsqueeze", {entry, ints(b, "zero", {0})}), ints(b, "ones", {1, 1})},
                      {test::attr_int("axis", 0)});
    }
    const int expanded = b.node(
        "Expand", {b.init("inv_freq_3d", Tensor::from_vector<float>(inverse_frequencies(), Shape{1, kHalf, 1})), target});
    const int angle = b.node("Cast", {b.node("Unsqueeze", {pos, ints(b, "one", {1})})}, {to_float});  // [batch, 1, seq]
    const int product = b.node("MatMul", {expanded, angle});                                         // [batch, 8, seq]
    freqs = b.node("Transpose", {product}, {test::attr_ints("perm", {0, 2, 1})});
  }
  const int emb = b.node("Concat", {freqs, freqs}, {test::attr_int("axis", -1)});
  const int scale = b.init("scaling", Tensor::scalar<float>(1.25f));
  int cos = b.node("Mul", {b.node("Cos", {emb}), scale});
  int sin = b.node("Mul", {b.node("Sin", {emb}), scale});
  int xt = x;
  if (half) {  // the tables and x in float16
    const Attribute to_half = test::attr_int("to", static_cast<int64_t>(DType::kFloat16));
    cos = b.node("Cast", {cos}, {to_half});
    sin = b.node("Cast", {sin}, {to_half});
    xt = b.node("Cast", {x}, {to_half});
  }
  const int heads = ints(b, "heads", {1});
  const int y = b.node("Add", {b.node("Mul", {xt, b.node("Unsqueeze", {cos, heads})}),
                               b.node("Mul", {xt, b.node("Unsqueeze", {sin, heads})})});
  b.g.outputs = {y};
  return b.g;
}

Tensor positions(int64_t batch, int64_t seq, int64_t count) {
  static std::mt19937_64 rng(std::random_device{}());
  Tensor t(DType::kInt64, Shape{batch, seq});
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = std::uniform_int_distribution<int64_t>(0, count - 1)(rng);
  return t;
}

Tensor run(Graph& g, const Tensor& pos, const Tensor& x) {
  auto alloc = make_cpu_allocator();
  GraphExecutor exec(g, OpRegistry::global(), alloc, SessionOptions{});
  return exec.run({pos, x}).at(0);
}

int count(const Graph& g, const std::string& op) {
  int c = 0;
  for (const auto& n : g.nodes) c += n.op_type == op;
  return c;
}

}  // namespace

TEST(PositionTables, RotaryChainsBecomeGathersOfTablesThatComputeTheSame) {
  constexpr int64_t kCount = 300;
  for (Form form : {Form::kMul, Form::kMatMul, Form::kExported})
    for (bool half : {false, true}) {
      SCOPED_TRACE(testing::Message() << (form == Form::kMul ? "Mul form" : form == Form::kMatMul ? "MatMul form" : "torch.export's form")
                                      << (half ? ", float16" : ""));
      Graph plain = make_graph(form, half);
      Graph tabled = plain;
      const PositionTableReport r = tabulate_positions(tabled, "position_ids", kCount, size_t{1} << 20);
      EXPECT_EQ(r.tables, 2) << r.why_not;
      EXPECT_EQ(r.bytes, 2u * kCount * 2 * kHalf * (half ? 2 : 4));
      EXPECT_EQ(count(tabled, "Gather"), 2);
      for (const char* op : {"Cos", "Sin", "Concat", "MatMul", "Expand", "Transpose", "Shape"})
        EXPECT_EQ(count(tabled, op), 0) << op;
      EXPECT_EQ(count(tabled, "Cast"), half ? 1 : 0);  // x's
      for (auto [batch, seq] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {2, 1}}) {
        const Tensor pos = positions(batch, seq, kCount);
        const Tensor x = test::random_tensor<float>(Shape{batch, 2, seq, 2 * kHalf});
        const Tensor want = run(plain, pos, x), got = run(tabled, pos, x);
        ASSERT_EQ(got.shape(), want.shape());
        ASSERT_EQ(got.dtype(), want.dtype());
        double worst = 0;
        for (int64_t i = 0; i < want.numel(); ++i)
          worst = std::max(worst, std::abs(got.get_as_double(i) - want.get_as_double(i)));
        EXPECT_EQ(worst, 0.0) << "batch " << batch << ", seq " << seq;
      }
      // A position past the tables is an error that names it (the generator feeds none).
      Tensor far = positions(1, 2, kCount);
      far.data<int64_t>()[1] = kCount;
      try {
        run(tabled, far, test::random_tensor<float>(Shape{1, 2, 2, 2 * kHalf}));
        ADD_FAILURE() << "a position past the tables ran";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(std::to_string(kCount)), std::string::npos) << e.what();
      }
    }
}

TEST(PositionTables, ChainsThatReadMoreThanEachPositionOrWouldNotFitStay) {
  struct Case {
    Form form;
    size_t max_bytes;
    const char* why;
  };
  const Case cases[] = {
      {Form::kLongFactors, size_t{1} << 20, "would not save any"},  // the Cast alone is followed
      {Form::kCumSum, size_t{1} << 20, "nothing is computed"},
      {Form::kWideConstant, size_t{1} << 20, "would not save any"},
      {Form::kSeqExpand, size_t{1} << 20, "came out"},  // caught by computing the chain for two shapes
      {Form::kMul, 1000, "would pass 1000 bytes"},
      {Form::kExportedWide, size_t{1} << 20, "nothing is computed"},  // its Expand is not read as c
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.why);
    Graph g = make_graph(c.form);
    const size_t nodes = g.nodes.size();
    const PositionTableReport r = tabulate_positions(g, "position_ids", 64, c.max_bytes);
    EXPECT_EQ(r.tables, 0);
    EXPECT_NE(r.why_not.find(c.why), std::string::npos) << r.why_not;
    EXPECT_EQ(g.nodes.size(), nodes);
    EXPECT_EQ(count(g, "Gather"), c.form == Form::kSeqExpand ? 1 : 0);
  }
  // No such input, or a float one.
  Graph g = make_graph(Form::kMul);
  EXPECT_NE(tabulate_positions(g, "positions", 64, 1 << 20).why_not.find("no input 'positions'"), std::string::npos);
  EXPECT_NE(tabulate_positions(g, "x", 64, 1 << 20).why_not.find("not an integer tensor"), std::string::npos);
}

}  // namespace onyx
