// Memory follows the live set: intermediates go back to the allocator right
// after their last reader (DESIGN L3/L4), and the guard list keeps what must stay.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace onyx {

namespace {

constexpr int64_t kRows = 512, kCols = 1024;
constexpr size_t kValueBytes = kRows * kCols * sizeof(float);  // 2 MiB

// x[512,1024] -> 50 ops cycling MatMul(W) -> Reshape[1024,512] -> Transpose -> ... -> y.
Graph make_chain(int length) {
  Graph g;
  g.name = "chain";
  int x = g.value_id("x");
  g.values[x].is_input = true;
  g.inputs.push_back(x);
  int w = g.value_id("W");
  g.values[w].is_initializer = true;
  Tensor wt = test::random_tensor<float>(Shape{kCols, kCols}, -0.05, 0.05);
  g.initializers[w] = wt;
  int shape_a = g.value_id("shape_a");
  g.values[shape_a].is_initializer = true;
  g.initializers[shape_a] = Tensor::from_vector<int64_t>({kCols, kRows}, Shape{2});
  int cur = x;
  for (int i = 0; i < length; ++i) {
    Node n;
    n.name = "op" + std::to_string(i);
    n.opset = 18;
    switch (i % 3) {
      case 0: n.op_type = "MatMul"; n.inputs = {cur, w}; break;
      case 1: n.op_type = "Reshape"; n.inputs = {cur, shape_a}; break;
      case 2: n.op_type = "Transpose"; n.inputs = {cur}; break;
    }
    int out = g.value_id("v" + std::to_string(i));
    g.values[out].producer = i;
    n.outputs = {out};
    g.nodes.push_back(std::move(n));
    cur = out;
  }
  g.outputs.push_back(cur);
  return g;
}

struct ChainRun {
  Tensor output;
  AllocatorStats stats;
};

ChainRun run_chain(Graph& g, const Tensor& x, MemoryMode mode) {
  auto alloc = make_cpu_allocator();
  SessionOptions opt;
  opt.memory = mode;
  GraphExecutor exec(g, OpRegistry::global(), alloc, opt);
  auto out = exec.run({x});
  return {out[0], alloc->stats()};
}

}  // namespace

TEST(Memory, ChainOf50PeaksAtTheLiveSetNotTheSum) {
  Graph g = make_chain(50);
  Tensor x = test::random_tensor<float>(Shape{kRows, kCols});
  ChainRun released = run_chain(g, x, MemoryMode::kRelease);
  ChainRun kept = run_chain(g, x, MemoryMode::kKeepAll);
  ChainRun planned = run_chain(g, x, MemoryMode::kPlanned);

  // 17 MatMuls and 16 Transposes allocate; the Reshapes are views.
  EXPECT_EQ(released.stats.allocations, 33u);
  const size_t sum_of_outputs = 33 * kValueBytes;
  // At any step at most the op's input and its output are live, plus the graph output.
  EXPECT_LE(released.stats.high_water_bytes, 3 * kValueBytes)
      << "peak " << released.stats.high_water_bytes << " vs sum " << sum_of_outputs;
  // The same run holding everything peaks at the sum: the measurement can tell them apart.
  EXPECT_EQ(kept.stats.high_water_bytes, sum_of_outputs);
  // Only the graph output is still allocated after the run.
  EXPECT_EQ(released.stats.in_use_bytes, kValueBytes);

  // Planned: one arena of two values (an op's input and output) plus the graph output.
  EXPECT_EQ(planned.stats.allocations, 2u);
  EXPECT_LE(planned.stats.high_water_bytes, 3 * kValueBytes);

  for (const ChainRun* r : {&kept, &planned}) {
    ASSERT_EQ(released.output.shape(), r->output.shape());
    for (int64_t i = 0; i < released.output.numel(); ++i)
      ASSERT_EQ(released.output.data<float>()[i], r->output.data<float>()[i]) << "element " << i;
  }
  std::cout << "[chain50] high-water: release " << released.stats.high_water_bytes << " B, planned "
            << planned.stats.high_water_bytes << " B, keep-all " << kept.stats.high_water_bytes
            << " B (sum of outputs " << sum_of_outputs << " B)\n";
}

TEST(Memory, GuardListNamesWhatMustStay) {
  Graph g = make_chain(6);
  GuardList guards(g);
  EXPECT_EQ(guards.reason(g.find_value("x")), GuardReason::kGraphInput);
  EXPECT_EQ(guards.reason(g.find_value("W")), GuardReason::kInitializer);
  EXPECT_EQ(guards.reason(g.find_value("v5")), GuardReason::kGraphOutput);
  EXPECT_FALSE(guards.guarded(g.find_value("v2")));
  // The release-mode plan: v0 is read by op1 only, so it goes right after op1; nothing
  // guarded is ever released.
  for (auto& node : g.nodes) resolve_op(node, OpRegistry::global());
  PlanOptions po;
  po.arena = false;
  ExecutionPlan p = plan_graph(g, PlanRequest{{ValueType{DType::kFloat32, Shape{kRows, kCols}}}}, po);
  EXPECT_EQ(p.values[g.find_value("v0")].last, 1);
  ASSERT_GT(p.steps.size(), 1u);
  EXPECT_EQ(p.steps[1].node, 1);
  EXPECT_NE(std::find(p.steps[1].release_after.begin(), p.steps[1].release_after.end(), g.find_value("v0")),
            p.steps[1].release_after.end());
  for (const Step& step : p.steps)
    for (int v : step.release_after) EXPECT_FALSE(p.guards.guarded(v));
}

TEST(Memory, InputsAndInitializersSurviveTheRun) {
  Graph g = make_chain(9);
  Tensor x = test::random_tensor<float>(Shape{kRows, kCols});
  Tensor x_copy = x.clone();
  Tensor w_before = g.initializers[g.find_value("W")].clone();
  run_chain(g, x, MemoryMode::kRelease);
  run_chain(g, x, MemoryMode::kPlanned);  // a second run reads the same weights
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(x.data<float>()[i], x_copy.data<float>()[i]);
  const Tensor& w = g.initializers[g.find_value("W")];
  for (int64_t i = 0; i < w.numel(); ++i) ASSERT_EQ(w.data<float>()[i], w_before.data<float>()[i]);
}

}  // namespace onyx
