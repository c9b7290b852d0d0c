// The static memory planner: random graphs, guard cases, and plan invariants.
#include <gtest/gtest.h>

#include "graph_builder.h"
#include "op_test_util.h"

namespace onyx {

namespace {

struct RandomGraph {
  Graph g;
  std::vector<Tensor> inputs;
};

// A random DAG over [rows, cols]-shaped values: elementwise ops (some broadcasting),
// MatMul with square weights, Reshape and Identity views. Several outputs.
RandomGraph make_random_graph(std::mt19937_64& rng, int nodes) {
  RandomGraph rg;
  Graph& g = rg.g;
  g.name = "random";
  const int64_t n = 8 + rng() % 8;  // values are [n, n] or [n*n]
  auto add_init = [&](const std::string& name, Tensor t) {
    int id = g.value_id(name);
    g.values[id].is_initializer = true;
    g.initializers[id] = std::move(t);
    return id;
  };
  int w = add_init("W", test::random_tensor<float>(Shape{n, n}, -0.3, 0.3));
  int row = add_init("row", test::random_tensor<float>(Shape{1, n}));
  int flat = add_init("flat_shape", Tensor::from_vector<int64_t>({n * n}, Shape{1}));
  int square = add_init("square_shape", Tensor::from_vector<int64_t>({n, n}, Shape{2}));
  std::vector<int> square_values, flat_values;
  for (int i = 0; i < 2; ++i) {
    int x = g.value_id("x" + std::to_string(i));
    g.values[x].is_input = true;
    g.inputs.push_back(x);
    rg.inputs.push_back(test::random_tensor<float>(Shape{n, n}));
    square_values.push_back(x);
  }
  auto pick = [&](const std::vector<int>& v) { return v[rng() % v.size()]; };
  // Prefer recent values so that lifetimes are short and reuse matters.
  auto recent = [&](const std::vector<int>& v) { return v[v.size() - 1 - rng() % std::min<size_t>(v.size(), 4)]; };
  for (int i = 0; i < nodes; ++i) {
    Node node;
    node.name = "n" + std::to_string(i);
    node.opset = 18;
    int out = g.value_id("v" + std::to_string(i));
    bool to_flat = false;
    int kind = rng() % 8;
    if (kind == 7 && !flat_values.empty()) {
      node.op_type = "Reshape";
      node.inputs = {recent(flat_values), square};
    } else if (kind == 6) {
      node.op_type = "Reshape";
      node.inputs = {recent(square_values), flat};
      to_flat = true;
    } else if (kind == 5) {
      node.op_type = "Identity";
      node.inputs = {recent(square_values)};
    } else if (kind == 4) {
      node.op_type = "MatMul";
      node.inputs = {recent(square_values), w};
    } else if (kind == 3) {
      node.op_type = "Relu";
      node.inputs = {recent(square_values)};
    } else {
      const char* ops[] = {"Add", "Mul", "Sub"};
      node.op_type = ops[rng() % 3];
      node.inputs = {recent(square_values), rng() % 3 == 0 ? row : pick(square_values)};
    }
    node.outputs = {out};
    g.values[out].producer = static_cast<int>(g.nodes.size());
    g.nodes.push_back(std::move(node));
    (to_flat ? flat_values : square_values).push_back(out);
  }
  g.outputs.push_back(square_values.back());
  for (int k = 0; k < 2; ++k) {
    int o = pick(square_values);
    if (!g.values[o].is_input && std::find(g.outputs.begin(), g.outputs.end(), o) == g.outputs.end())
      g.outputs.push_back(o);
  }
  return rg;
}

std::vector<Tensor> run_mode(Graph& g, const std::vector<Tensor>& in, MemoryMode mode,
                             std::shared_ptr<const ExecutionPlan>* plan = nullptr) {
  SessionOptions opt;
  opt.memory = mode;
  GraphExecutor exec(g, OpRegistry::global(), make_cpu_allocator(), opt);
  if (plan) *plan = exec.plan_for(in);
  auto first = exec.run(in);
  auto second = exec.run(in);  // the same plan and arena, run again
  for (size_t o = 0; o < first.size(); ++o)
    for (int64_t i = 0; i < first[o].numel(); ++i)
      EXPECT_EQ(first[o].data<float>()[i], second[o].data<float>()[i]);
  return first;
}

// No two arena values live at the same step share a byte unless they share storage on purpose.
void check_no_overlap(const ExecutionPlan& p) {
  for (size_t a = 0; a < p.values.size(); ++a) {
    const ValuePlan& va = p.values[a];
    if (va.kind != ValueKind::kArena || !va.bytes) continue;
    for (size_t b = a + 1; b < p.values.size(); ++b) {
      const ValuePlan& vb = p.values[b];
      if (vb.kind != ValueKind::kArena || !vb.bytes || va.root == vb.root) continue;
      bool time = va.first <= std::max(vb.last, vb.first) && vb.first <= std::max(va.last, va.first);
      bool space = va.offset < vb.offset + vb.bytes && vb.offset < va.offset + va.bytes;
      ASSERT_FALSE(time && space) << "values " << a << " and " << b << " overlap";
    }
  }
}

}  // namespace

TEST(Planner, RandomGraphsMatchReleaseModeAndNeverOverlap) {
  std::mt19937_64 rng(std::random_device{}());
  int in_place = 0, views = 0;
  for (int trial = 0; trial < 150; ++trial) {
    RandomGraph rg = make_random_graph(rng, 5 + rng() % 40);
    std::shared_ptr<const ExecutionPlan> plan;
    auto planned = run_mode(rg.g, rg.inputs, MemoryMode::kPlanned, &plan);
    auto released = run_mode(rg.g, rg.inputs, MemoryMode::kRelease);
    check_no_overlap(*plan);
    EXPECT_LE(plan->host_arena.bytes, plan->host_arena.no_reuse_bytes);
    EXPECT_GE(plan->host_arena.bytes, plan->host_arena.lower_bound_bytes);
    in_place += plan->in_place_count;
    for (const auto& v : plan->values) views += v.kind == ValueKind::kArena && v.root >= 0 && !v.in_place &&
                                                 &v != &plan->values[v.root];
    ASSERT_EQ(planned.size(), released.size());
    for (size_t o = 0; o < planned.size(); ++o) {
      ASSERT_EQ(planned[o].shape(), released[o].shape());
      for (int64_t i = 0; i < planned[o].numel(); ++i)
        ASSERT_EQ(planned[o].data<float>()[i], released[o].data<float>()[i]) << "trial " << trial << " output " << o;
    }
  }
  // The trials exercised both kinds of shared storage.
  EXPECT_GT(in_place, 0);
  EXPECT_GT(views, 0);
}

TEST(Planner, GuardListCoversInputsInitializersOutputsAndMemoized) {
  std::mt19937_64 rng(std::random_device{}());
  RandomGraph rg = make_random_graph(rng, 20);
  SessionOptions opt;
  GraphExecutor exec(rg.g, OpRegistry::global(), make_cpu_allocator(), opt);
  auto plan = exec.plan_for(rg.inputs);
  const Graph& g = rg.g;
  for (int id : g.inputs) EXPECT_EQ(plan->guards.reason(id), GuardReason::kGraphInput);
  for (const auto& [id, t] : g.initializers) EXPECT_EQ(plan->guards.reason(id), GuardReason::kInitializer);
  for (int id : g.outputs) {
    EXPECT_EQ(plan->guards.reason(id), GuardReason::kGraphOutput);
    EXPECT_NE(plan->values[id].kind, ValueKind::kArena) << "outputs are handed out, never arena bytes";
  }
  // Nothing guarded is released or written in place.
  for (const Step& step : plan->steps)
    for (int v : step.release_after) EXPECT_FALSE(plan->guards.guarded(v));
  for (size_t id = 0; id < plan->values.size(); ++id)
    if (plan->values[id].in_place) {
      EXPECT_FALSE(plan->guards.guarded(plan->values[id].root));
    }
}

TEST(Planner, InputsAreNeverWrittenInPlace) {
  // Relu(x) where x is a graph input dying at its only reader: must not take x's bytes.
  Tensor x = test::random_tensor<float>(Shape{64});
  Tensor before = x.clone();
  auto out = test::run_op("Relu", {x});
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(x.data<float>()[i], before.data<float>()[i]);
  EXPECT_FALSE(out[0].shares_storage_with(x));
}

TEST(Planner, OutputsNeverPointIntoTheArena) {
  std::mt19937_64 rng(std::random_device{}());
  RandomGraph rg = make_random_graph(rng, 30);
  SessionOptions opt;
  GraphExecutor exec(rg.g, OpRegistry::global(), make_cpu_allocator(), opt);
  auto first = exec.run(rg.inputs);
  std::vector<Tensor> kept;
  for (const auto& t : first) kept.push_back(t.clone());
  // A second run with other inputs reuses the arena; the first outputs must not change.
  std::vector<Tensor> other;
  for (const auto& t : rg.inputs) other.push_back(test::random_tensor<float>(t.shape()));
  exec.run(other);
  for (size_t o = 0; o < first.size(); ++o)
    for (int64_t i = 0; i < first[o].numel(); ++i) ASSERT_EQ(first[o].data<float>()[i], kept[o].data<float>()[i]);
}

// Appends node `op` (named after it, opset 18) reading `in`; returns its output value.
static int add_node(Graph& g, const std::string& op, std::vector<int> in, std::vector<Attribute> attrs = {}) {
  Node n;
  n.name = op;
  n.op_type = op;
  n.opset = 18;
  n.inputs = std::move(in);
  n.attributes = std::move(attrs);
  int out = g.value_id(op + "_out");
  g.values[out].producer = static_cast<int>(g.nodes.size());
  n.outputs = {out};
  g.nodes.push_back(std::move(n));
  return out;
}

TEST(Planner, ShapeArithmeticIsEvaluatedWhilePlanning) {
  // y = Reshape(x, Concat(Gather(Shape(x), 0), [-1])) : the target shape is computed while planning.
  Graph g;
  g.name = "shape_arith";
  int x = g.value_id("x");
  g.values[x].is_input = true;
  g.inputs.push_back(x);
  auto init = [&](const std::string& name, Tensor t) {
    int id = g.value_id(name);
    g.values[id].is_initializer = true;
    g.initializers[id] = std::move(t);
    return id;
  };
  int minus1 = init("minus1", Tensor::from_vector<int64_t>({-1}, Shape{1}));
  int zero = init("zero", Tensor::from_vector<int64_t>({0}, Shape{1}));
  auto node = [&](const std::string& op, std::vector<int> in, std::vector<Attribute> attrs = {}) {
    return add_node(g, op, std::move(in), std::move(attrs));
  };
  int shape = node("Shape", {x});
  int first = node("Gather", {shape, zero}, {test::attr_int("axis", 0)});
  int target = node("Concat", {first, minus1}, {test::attr_int("axis", 0)});
  int y = node("Reshape", {x, target});
  int z = node("Relu", {y});
  g.outputs.push_back(z);
  Tensor in = test::random_tensor<float>(Shape{3, 4, 5});
  GraphExecutor exec(g, OpRegistry::global(), make_cpu_allocator());
  auto plan = exec.plan_for({in});
  EXPECT_TRUE(plan->dynamic_boundaries.empty());
  EXPECT_EQ(plan->folded_nodes, 3);
  EXPECT_EQ(plan->values[y].type.shape.dims, (std::vector<int64_t>{3, 20}));
  auto out = exec.run({in});
  EXPECT_EQ(out[0].shape(), (Shape{3, 20}));
}

TEST(Planner, TransposeMovingOnlySizeOneAxesIsAView) {
  // y = Relu(Transpose(x, [0, 2, 1, 3])): at x [2, 1, 3, 4] the elements keep their order (a view,
  // no kernel); at [2, 2, 3, 4] they do not (the kernel runs). Both equal the transposition.
  Graph g;
  g.name = "transpose_view";
  int x = g.value_id("x");
  g.values[x].is_input = true;
  g.inputs.push_back(x);
  auto node = [&](const std::string& op, std::vector<int> in, std::vector<Attribute> attrs = {}) {
    return add_node(g, op, std::move(in), std::move(attrs));
  };
  int t = node("Transpose", {x}, {test::attr_ints("perm", {0, 2, 1, 3})});
  g.outputs.push_back(node("Relu", {t}));
  GraphExecutor exec(g, OpRegistry::global(), make_cpu_allocator());
  for (int64_t s : {1, 2}) {
    Tensor in = test::random_tensor<float>(Shape{2, s, 3, 4}, -1.0, 1.0);
    auto plan = exec.plan_for({in});
    ASSERT_EQ(plan->steps.size(), 2u);
    EXPECT_EQ(plan->steps[0].place == StepPlace::kNone, s == 1) << "S = " << s;
    Tensor y = exec.run({in})[0];
    ASSERT_EQ(y.shape(), (Shape{2, 3, s, 4}));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t q = 0; q < s; ++q)
          for (int64_t d = 0; d < 4; ++d) {
            const float v = in.data<float>()[((b * s + q) * 3 + h) * 4 + d];
            ASSERT_EQ(y.data<float>()[((b * 3 + h) * s + q) * 4 + d], v > 0 ? v : 0.f) << "S = " << s;
          }
  }
}

TEST(Planner, CastToTheInputsOwnTypeIsAView) {
  // y = Relu(Cast(x, to=FLOAT)) and z = Cast(x, to=FLOAT) (a graph output): fed float32, both
  // casts are views (no kernel); fed float64 they run. Either way the values are x's.
  test::GraphBuilder b;
  const int x = b.input("x");
  b.g.outputs.push_back(b.node("Relu", {b.node("Cast", {x}, {test::attr_int("to", 1)})}));
  b.g.outputs.push_back(b.node("Cast", {x}, {test::attr_int("to", 1)}));
  GraphExecutor exec(b.g, OpRegistry::global(), make_cpu_allocator());
  for (bool same : {true, false}) {
    Tensor in32 = test::random_tensor<float>(Shape{3, 5}, -1.0, 1.0);
    Tensor in = same ? in32 : Tensor(DType::kFloat64, in32.shape());
    if (!same)
      for (int64_t i = 0; i < in.numel(); ++i) in.data<double>()[i] = in32.data<float>()[i];
    auto plan = exec.plan_for({in});
    ASSERT_EQ(plan->steps.size(), 3u);
    EXPECT_EQ(plan->steps[0].place == StepPlace::kNone, same);
    EXPECT_EQ(plan->steps[2].place == StepPlace::kNone, same);
    auto out = exec.run({in});
    ASSERT_EQ(out[0].dtype(), DType::kFloat32);
    ASSERT_EQ(out[1].dtype(), DType::kFloat32);
    for (int64_t i = 0; i < in.numel(); ++i) {
      const float v = in32.data<float>()[i];
      ASSERT_EQ(out[0].data<float>()[i], v > 0 ? v : 0.f) << (same ? "float32" : "float64") << " at " << i;
      ASSERT_EQ(out[1].data<float>()[i], v) << (same ? "float32" : "float64") << " at " << i;
    }
  }
}

TEST(Planner, ExpandToTheInputsOwnShapeIsAView) {
  // y = Relu(Expand(x, Shape(t))) and z = Expand(x, Shape(t)) (a graph output), x [2, 3, 4]: to t's
  // shape [2, 3, 4] or [1, 3, 1] the output has x's shape (views, no kernel); to [2, 2, 3, 4] the
  // kernel runs. Either way the values are the broadcast's.
  test::GraphBuilder b;
  const int x = b.input("x");
  const int shape = b.node("Shape", {b.input("t")});
  b.g.outputs.push_back(b.node("Relu", {b.node("Expand", {x, shape})}));
  b.g.outputs.push_back(b.node("Expand", {x, shape}));
  GraphExecutor exec(b.g, OpRegistry::global(), make_cpu_allocator());
  for (std::vector<int64_t> to : {std::vector<int64_t>{2, 3, 4}, {1, 3, 1}, {2, 2, 3, 4}}) {
    const bool same = to.size() == 3;
    Tensor in = test::random_tensor<float>(Shape{2, 3, 4}, -1.0, 1.0);
    const Tensor by = test::random_tensor<float>(Shape(to));
    auto plan = exec.plan_for({in, by});
    ASSERT_EQ(plan->steps.size(), 3u);  // the Shape is computed while planning
    EXPECT_EQ(plan->steps[0].place == StepPlace::kNone, same) << Shape(to).str();
    EXPECT_EQ(plan->steps[2].place == StepPlace::kNone, same) << Shape(to).str();
    auto out = exec.run({in, by});
    const int64_t copies = same ? 1 : 2;
    ASSERT_EQ(out[1].numel(), copies * in.numel());
    for (int64_t i = 0; i < out[1].numel(); ++i) {
      const float v = in.data<float>()[i % in.numel()];
      ASSERT_EQ(out[0].data<float>()[i], v > 0 ? v : 0.f) << Shape(to).str() << " at " << i;
      ASSERT_EQ(out[1].data<float>()[i], v) << Shape(to).str() << " at " << i;
    }
  }
}

TEST(Planner, SliceKeepingAllOfItsInputIsAView) {
  // y = Relu(Slice(x, 0, Shape(t)[0], axis 1, step)) and z = the Slice (a graph output), x [2, 5]:
  // to t's length 5 with step 1 the Slice keeps all of x (views, no kernel); to 3 it runs, and so
  // does step -1 from the end (x reversed: the same shape, not the same order). The values are
  // the slice's.
  test::GraphBuilder b;
  const int x = b.input("x");
  const int len = b.node("Shape", {b.input("t")}, {test::attr_int("start", 0), test::attr_int("end", 1)});
  auto i64 = [&](const char* name, int64_t v) { return b.init(name, Tensor::from_vector<int64_t>({v}, Shape{1})); };
  const int axis = i64("axis", 1);
  const int forward = b.node("Slice", {x, i64("zero", 0), len, axis, i64("one", 1)});
  b.g.outputs.push_back(b.node("Relu", {forward}));
  b.g.outputs.push_back(forward);
  b.g.outputs.push_back(b.node("Slice", {x, i64("last", -1), i64("before_first", INT64_MIN), axis, i64("back", -1)}));
  for (Node& n : b.g.nodes) n.opset = 13;
  GraphExecutor exec(b.g, OpRegistry::global(), make_cpu_allocator());
  for (int64_t keep : {5, 3}) {
    Tensor in = test::random_tensor<float>(Shape{2, 5}, -1.0, 1.0);
    const Tensor t = test::random_tensor<float>(Shape{keep});
    auto plan = exec.plan_for({in, t});
    ASSERT_EQ(plan->steps.size(), 3u);  // the Shape is computed while planning
    EXPECT_EQ(plan->steps[0].place == StepPlace::kNone, keep == 5) << "to " << keep;
    EXPECT_NE(plan->steps[2].place, StepPlace::kNone) << "step -1";
    auto out = exec.run({in, t});
    ASSERT_EQ(out[1].shape(), (Shape{2, keep}));
    ASSERT_EQ(out[2].shape(), (Shape{2, 5}));
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t c = 0; c < 5; ++c) {
        const float v = in.data<float>()[r * 5 + c];
        if (c < keep) {
          ASSERT_EQ(out[1].data<float>()[r * keep + c], v);
          ASSERT_EQ(out[0].data<float>()[r * keep + c], v > 0 ? v : 0.f);
        }
        ASSERT_EQ(out[2].data<float>()[r * 5 + (4 - c)], v);
      }
  }
}

}  // namespace onyx

namespace onyx {

// A branch graph whose only node is Constant(value) -> out.
static std::shared_ptr<Graph> constant_branch(const Tensor& value) {
  auto g = std::make_shared<Graph>();
  g->name = "branch";
  Node n;
  n.name = "c";
  n.op_type = "Constant";
  n.opset = 18;
  Attribute a;
  a.name = "value";
  a.kind = Attribute::Kind::kTensor;
  a.t = value;
  n.attributes.push_back(a);
  int out = g->value_id("branch_out");
  g->values[out].producer = 0;
  n.outputs = {out};
  g->nodes.push_back(std::move(n));
  g->outputs.push_back(out);
  return g;
}

TEST(Planner, LoopInvariantIfIsServedFromThePlanAndNeverOverwritten) {
  // y = Add(If(true){c1}else{c2}, x): the If depends on nothing that changes between
  // runs, so the plan computes it once; the Add may not write over it in place.
  Tensor c1 = test::random_tensor<float>(Shape{4, 8});
  Tensor c2 = test::random_tensor<float>(Shape{4, 8});
  Graph g;
  g.name = "memo";
  int x = g.value_id("x");
  g.values[x].is_input = true;
  g.inputs.push_back(x);
  int cond = g.value_id("cond");
  g.values[cond].is_initializer = true;
  g.initializers[cond] = Tensor::scalar<bool>(true);
  Node iff;
  iff.name = "if";
  iff.op_type = "If";
  iff.opset = 18;
  iff.inputs = {cond};
  Attribute then_a, else_a;
  then_a.name = "then_branch";
  then_a.kind = Attribute::Kind::kGraph;
  then_a.g = constant_branch(c1);
  else_a.name = "else_branch";
  else_a.kind = Attribute::Kind::kGraph;
  else_a.g = constant_branch(c2);
  iff.attributes = {then_a, else_a};
  int memo = g.value_id("memo");
  g.values[memo].producer = 0;
  iff.outputs = {memo};
  g.nodes.push_back(std::move(iff));
  Node add;
  add.name = "add";
  add.op_type = "Add";
  add.opset = 18;
  add.inputs = {memo, x};
  int y = g.value_id("y");
  g.values[y].producer = 1;
  add.outputs = {y};
  g.nodes.push_back(std::move(add));
  g.outputs.push_back(y);

  GraphExecutor exec(g, OpRegistry::global(), make_cpu_allocator());
  Tensor x0 = test::random_tensor<float>(Shape{4, 8});
  auto plan = exec.plan_for({x0});
  EXPECT_TRUE(plan->folded[0]) << "the If is computed while planning";
  EXPECT_EQ(plan->guards.reason(memo), GuardReason::kMemoized);
  EXPECT_EQ(plan->values[memo].kind, ValueKind::kConstant);
  for (int run = 0; run < 3; ++run) {
    Tensor xr = test::random_tensor<float>(Shape{4, 8});
    auto out = exec.run({xr});
    for (int64_t i = 0; i < 32; ++i)
      ASSERT_EQ(out[0].data<float>()[i], c1.data<float>()[i] + xr.data<float>()[i]) << "run " << run;
  }
  EXPECT_EQ(exec.plan_cache_stats().misses, 1u);
  EXPECT_EQ(exec.plan_cache_stats().hits, 3u);
}

TEST(Planner, PlanCacheIsBoundedLeastRecentlyUsed) {
  std::mt19937_64 rng(std::random_device{}());
  Graph g;
  g.name = "relu";
  int x = g.value_id("x");
  g.values[x].is_input = true;
  g.inputs.push_back(x);
  Node n;
  n.name = "relu";
  n.op_type = "Relu";
  n.opset = 18;
  n.inputs = {x};
  int y = g.value_id("y");
  g.values[y].producer = 0;
  n.outputs = {y};
  g.nodes.push_back(n);
  g.outputs.push_back(y);
  SessionOptions opt;
  opt.plan_cache_capacity = 2;
  GraphExecutor exec(g, OpRegistry::global(), make_cpu_allocator(), opt);
  for (int64_t len : {3, 4, 3, 5, 4}) exec.run({test::random_tensor<float>(Shape{len})});
  PlanCacheStats s = exec.plan_cache_stats();
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.hits, 1u);       // the second [3]
  EXPECT_EQ(s.misses, 4u);     // [3], [4], [5], and [4] again after it was evicted
  EXPECT_EQ(s.evictions, 2u);
}

}  // namespace onyx
