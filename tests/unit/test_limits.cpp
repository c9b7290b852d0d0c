// Untrusted models under a session's limits: string tensors in every memory mode,
// run statistics read while other threads run, the host memory budget, deadlines and
// cancellation. Each failure is an onyx::Error naming what went wrong, and the session
// stays usable after it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <thread>

#include "onnx/onnx.pb.h"
#include "onyx/session.h"

namespace onyx {

namespace {

// A model built node by node, serialized for Session::load_from_bytes.
struct ModelBuilder {
  onnx::ModelProto m;
  onnx::GraphProto* g;
  explicit ModelBuilder(int opset = 18) : g(m.mutable_graph()) {
    m.set_ir_version(8);
    m.add_opset_import()->set_version(opset);
    g->set_name("limits");
  }
  static void typed(onnx::ValueInfoProto* v, const std::string& name, int elem, const std::vector<int64_t>& dims,
                    bool rank_known = true) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem);
    if (!rank_known) return;
    auto* s = t->mutable_shape();
    for (int64_t d : dims) {
      auto* dim = s->add_dim();
      if (d >= 0) dim->set_dim_value(d);
      else dim->set_dim_param(cat("d", s->dim_size()));
    }
  }
  void input(const std::string& name, int elem, const std::vector<int64_t>& dims) { typed(g->add_input(), name, elem, dims); }
  void output(const std::string& name, int elem) { typed(g->add_output(), name, elem, {}, false); }
  onnx::NodeProto* node(const std::string& name, const std::string& op, const std::vector<std::string>& in,
                        const std::vector<std::string>& out, onnx::GraphProto* into = nullptr) {
    onnx::NodeProto* n = (into ? into : g)->add_node();
    n->set_name(name);
    n->set_op_type(op);
    for (const auto& s : in) n->add_input(s);
    for (const auto& s : out) n->add_output(s);
    return n;
  }
  static void attr_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  void int64_initializer(const std::string& name, const std::vector<int64_t>& values, const std::vector<int64_t>& dims) {
    onnx::TensorProto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (int64_t d : dims) t->add_dims(d);
    for (int64_t v : values) t->add_int64_data(v);
  }
  std::unique_ptr<Session> load(const SessionOptions& options = {}) const {
    const std::string bytes = m.SerializeAsString();
    return Session::load_from_bytes(bytes.data(), bytes.size(), options);
  }
};

Tensor i64(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::from_vector<int64_t>(v, Shape{n});
}

std::vector<int64_t> values_of(const Tensor& t) {
  const int64_t* p = t.data<int64_t>();
  return {p, p + t.numel()};
}

const MemoryMode kModes[] = {MemoryMode::kPlanned, MemoryMode::kRelease, MemoryMode::kKeepAll};
const char* mode_name(MemoryMode m) {
  return m == MemoryMode::kPlanned ? "planned" : m == MemoryMode::kRelease ? "release" : "keep";
}

// Runs fn, which must throw an onyx::Error containing every needle.
template <class Fn>
std::string expect_error(Fn&& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected an onyx::Error";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const auto& n : needles) EXPECT_NE(what.find(n), std::string::npos) << "'" << n << "' not in: " << what;
    return what;
  }
  return "";
}

}  // namespace

// ---- 1. string tensors are objects, not arena bytes ---------------------------

TEST(Limits, CastToStringAndBackInEveryMemoryMode) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::INT64, {4});
  ModelBuilder::attr_int(b.node("to_string", "Cast", {"x"}, {"s"}), "to", onnx::TensorProto::STRING);
  ModelBuilder::attr_int(b.node("to_int", "Cast", {"s"}, {"y"}), "to", onnx::TensorProto::INT64);
  b.output("y", onnx::TensorProto::INT64);
  for (MemoryMode mode : kModes) {
    SCOPED_TRACE(mode_name(mode));
    SessionOptions o;
    o.memory = mode;
    auto s = b.load(o);
    for (int run = 0; run < 3; ++run) {  // later runs reuse the plan (and, planned, its arena)
      auto out = s->run({{"x", i64({-7, 0, 42, 1234567890123})}});
      EXPECT_EQ(values_of(out[0].second), (std::vector<int64_t>{-7, 0, 42, 1234567890123}));
    }
  }
}

TEST(Limits, StringIdentityConcatChainInEveryMemoryMode) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::INT64, {3});
  ModelBuilder::attr_int(b.node("to_string", "Cast", {"x"}, {"s"}), "to", onnx::TensorProto::STRING);
  b.node("same", "Identity", {"s"}, {"t"});
  b.int64_initializer("shape", {3}, {1});
  b.node("flat", "Reshape", {"t", "shape"}, {"u"});
  ModelBuilder::attr_int(b.node("twice", "Concat", {"u", "s"}, {"c"}), "axis", 0);
  b.node("again", "Identity", {"c"}, {"d"});
  ModelBuilder::attr_int(b.node("to_int", "Cast", {"d"}, {"y"}), "to", onnx::TensorProto::INT64);
  b.output("y", onnx::TensorProto::INT64);
  b.output("c", onnx::TensorProto::STRING);  // a string graph output too
  for (MemoryMode mode : kModes) {
    SCOPED_TRACE(mode_name(mode));
    SessionOptions o;
    o.memory = mode;
    auto s = b.load(o);
    for (int run = 0; run < 3; ++run) {
      auto out = s->run({{"x", i64({5, -1, 300 + run})}});
      EXPECT_EQ(values_of(out[0].second), (std::vector<int64_t>{5, -1, 300 + run, 5, -1, 300 + run}));
      const Tensor& c = out[1].second;
      ASSERT_EQ(c.dtype(), DType::kString);
      ASSERT_EQ(c.numel(), 6);
      EXPECT_EQ(c.data<std::string>()[0], "5");
      EXPECT_EQ(c.data<std::string>()[5], std::to_string(300 + run));
    }
    // The planner never places a string in the arena.
    for (const auto& v : s->plan({{"x", {3}}}).values)
      if (v.type.rfind("string", 0) == 0) {
        EXPECT_NE(v.kind, "arena") << v.name;
      }
  }
}

// ---- 2. run statistics read while other threads run ---------------------------

TEST(Limits, LastRunStatsAreOneRunsWhileOtherThreadsRun) {
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {-1});
  b.node("twice", "Add", {"x", "x"}, {"t"});
  b.node("pos", "Relu", {"t"}, {"u"});
  b.node("neg", "Neg", {"u"}, {"y"});
  b.output("y", onnx::TensorProto::FLOAT);
  SessionOptions o;
  o.memory = MemoryMode::kRelease;  // every intermediate is an allocation: the two sizes differ in peak bytes
  auto s = b.load(o);
  auto feed = [](int64_t n) { return NamedTensors{{"x", Tensor(DType::kFloat32, Shape{n})}}; };
  // What each size's run reports, alone (after a warm-up that plans it).
  std::vector<NamedTensors> kept;  // outputs are kept, so no free lands inside another run's measurement
  RunStats alone[2];
  const int64_t sizes[2] = {16, 1 << 16};
  for (int k = 0; k < 2; ++k) {
    kept.push_back(s->run(feed(sizes[k])));
    kept.push_back(s->run(feed(sizes[k])));
    alone[k] = s->last_run_stats();
  }
  ASSERT_NE(alone[0].peak_bytes, alone[1].peak_bytes);
  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, reads{0};
  std::vector<std::thread> runners;
  std::vector<std::vector<NamedTensors>> outs(2);
  for (int k = 0; k < 2; ++k)
    runners.emplace_back([&, k] {
      for (int r = 0; r < 200; ++r) outs[k].push_back(s->run(feed(sizes[k])));
    });
  std::thread reader([&] {
    while (!done.load()) {
      RunStats r = s->last_run_stats();
      bool one = false;
      for (const RunStats& a : alone) one |= r.peak_bytes == a.peak_bytes && r.allocations == a.allocations;
      if (!one) torn.fetch_add(1);
      reads.fetch_add(1);
    }
  });
  for (auto& t : runners) t.join();
  done.store(true);
  reader.join();
  EXPECT_EQ(torn.load(), 0) << "of " << reads.load() << " reads";
  EXPECT_GT(reads.load(), 0);
}


// ---- 3a. the host memory budget ------------------------------------------------

namespace {

constexpr int64_t kTenGB = 10'000'000'000;  // bytes

// y = ConstantOfShape(shape) of float32 (and, with `then_relu`, an intermediate fed to a Relu).
ModelBuilder constant_of_shape_model(bool shape_is_input, int64_t elements, bool then_relu) {
  ModelBuilder b;
  if (shape_is_input) b.input("shape", onnx::TensorProto::INT64, {1});
  else b.int64_initializer("shape", {elements}, {1});
  b.node("fill", "ConstantOfShape", {"shape"}, {then_relu ? "big" : "y"});
  if (then_relu) b.node("pos", "Relu", {"big"}, {"y"});
  b.output("y", onnx::TensorProto::FLOAT);
  return b;
}

}  // namespace

TEST(Limits, TenGigabyteConstantOfShapeIsRefusedByTheBudget) {
  SessionOptions o;
  o.host_memory_budget_bytes = size_t{1} << 30;
  for (MemoryMode mode : kModes) {
    SCOPED_TRACE(mode_name(mode));
    o.memory = mode;
    auto s = constant_of_shape_model(false, kTenGB / 4, false).load(o);
    expect_error([&] { s->run({}); }, {"node 'fill' (ConstantOfShape)", "output 'y' needs 9.31 GiB",
                                       "more than the session's host memory budget of 1.00 GiB"});
  }
  // An intermediate of a planned run: the arena is refused, naming its largest value.
  o.memory = MemoryMode::kPlanned;
  auto s = constant_of_shape_model(false, kTenGB / 4, true).load(o);
  expect_error([&] { s->run({}); }, {"the plan's host arena", "node 'fill' (ConstantOfShape): output 'big', 9.31 GiB",
                                     "more than the session's host memory budget of 1.00 GiB"});
}

TEST(Limits, TheDefaultBudgetRefusesMoreThanThePhysicalMemory) {
  EXPECT_GT(default_host_memory_budget(), size_t{0});
  auto s = constant_of_shape_model(false, int64_t{1} << 50, false).load();  // 4 PiB of float32
  expect_error([&] { s->run({}); }, {"node 'fill' (ConstantOfShape)", "output 'y' needs 4.00 PiB",
                                     "host memory budget of"});
}

TEST(Limits, ARefusedRunLeavesTheSessionUsable) {
  SessionOptions o;
  o.host_memory_budget_bytes = size_t{64} << 20;
  auto s = constant_of_shape_model(true, 0, false).load(o);  // the shape is known only at run time
  expect_error([&] { s->run({{"shape", i64({kTenGB / 4})}}); },
               {"node 'fill' (ConstantOfShape)", "output 'y' needs 9.31 GiB", "budget of 64.00 MiB"});
  auto out = s->run({{"shape", i64({5})}});
  EXPECT_EQ(out[0].second.shape(), (Shape{5}));
  EXPECT_EQ(out[0].second.data<float>()[4], 0.f);
}

// ---- 3b. Loops, deadlines and cancellation -------------------------------------

namespace {

// Loop(M, "") whose body returns cond_in (so it never stops on its own): with `scan`, a
// float32[256] scan output per iteration; without, M carried through every iteration.
ModelBuilder endless_loop_model(bool scan) {
  ModelBuilder b;
  b.input("M", onnx::TensorProto::INT64, {});
  onnx::NodeProto* loop = scan ? b.node("loop", "Loop", {"M", ""}, {"stacked"})
                               : b.node("loop", "Loop", {"M", "", "M"}, {"y"});
  auto* a = loop->add_attribute();
  a->set_name("body");
  a->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* body = a->mutable_g();
  body->set_name("body");
  ModelBuilder::typed(body->add_input(), "iter", onnx::TensorProto::INT64, {});
  ModelBuilder::typed(body->add_input(), "cond_in", onnx::TensorProto::BOOL, {});
  if (!scan) ModelBuilder::typed(body->add_input(), "v_in", onnx::TensorProto::INT64, {});
  b.node("keep_going", "Identity", {"cond_in"}, {"cond_out"}, body);
  ModelBuilder::typed(body->add_output(), "cond_out", onnx::TensorProto::BOOL, {});
  if (!scan) {
    b.node("carry", "Identity", {"v_in"}, {"v_out"}, body);
    ModelBuilder::typed(body->add_output(), "v_out", onnx::TensorProto::INT64, {});
  }
  if (scan) {
    onnx::TensorProto* shape = body->add_initializer();
    shape->set_name("row_shape");
    shape->set_data_type(onnx::TensorProto::INT64);
    shape->add_dims(1);
    shape->add_int64_data(256);
    b.node("row", "ConstantOfShape", {"row_shape"}, {"row_out"}, body);
    ModelBuilder::typed(body->add_output(), "row_out", onnx::TensorProto::FLOAT, {256});
    b.output("stacked", onnx::TensorProto::FLOAT);
  } else {
    b.output("y", onnx::TensorProto::INT64);
  }
  return b;
}

NamedTensors trips(int64_t m) { return {{"M", Tensor::scalar<int64_t>(m)}}; }

}  // namespace

TEST(Limits, AnUnboundedLoopsScanOutputIsBoundedByTheBudget) {
  SessionOptions o;
  o.host_memory_budget_bytes = size_t{4} << 20;
  auto s = endless_loop_model(true).load(o);
  auto out = s->run(trips(10));
  EXPECT_EQ(out[0].second.shape(), (Shape{10, 256}));
  expect_error([&] { s->run(trips(INT64_MAX)); },
               {"node 'loop' (Loop)", "scan output 0", "iterations of float32[256]",
                "more than the session's host memory budget of 4.00 MiB"});
  out = s->run(trips(3));  // still usable
  EXPECT_EQ(out[0].second.shape(), (Shape{3, 256}));
}

TEST(Limits, ARunPastItsDeadlineStopsAndTheSessionStaysUsable) {
  auto s = endless_loop_model(false).load();
  RunOptions ro;
  ro.timeout_seconds = 0.2;
  const auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { s->run(trips(INT64_MAX), ro); },
               {"node 'loop' (Loop)", "run exceeded its deadline of 0.2 s at "});
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 5.0);
  EXPECT_EQ(s->run(trips(4), ro)[0].second.data<int64_t>()[0], 4);
}

TEST(Limits, AProfiledRunTimesEachNodeThatRuns) {
  // x -> Relu -> Reshape (a view: no step) -> Exp -> y: the profile lists Relu and Exp, in order.
  ModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {64, 256});
  b.int64_initializer("shape", {256, 64}, {2});
  b.node("relu", "Relu", {"x"}, {"r"});
  b.node("reshape", "Reshape", {"r", "shape"}, {"v"});
  b.node("exp", "Exp", {"v"}, {"y"});
  b.output("y", onnx::TensorProto::FLOAT);
  auto s = b.load();
  Tensor x(DType::kFloat32, Shape{64, 256});
  std::mt19937 rng(std::random_device{}());
  for (float& v : x.span<float>()) v = std::uniform_real_distribution<float>(-2.f, 2.f)(rng);
  const NamedTensors feeds = {{"x", x}};
  s->run(feeds);
  EXPECT_TRUE(s->last_run_stats().nodes.empty()) << "not profiled, no node times";
  RunOptions ro;
  ro.profile = true;
  s->run(feeds, ro);
  RunStats st = s->last_run_stats();
  ASSERT_EQ(st.nodes.size(), 2u);
  EXPECT_EQ(st.nodes[0].node, "node 'relu' (Relu)");
  EXPECT_EQ(st.nodes[0].op, "Relu");
  EXPECT_EQ(st.nodes[1].node, "node 'exp' (Exp)");
  double sum = 0;
  for (const NodeTime& n : st.nodes) {
    EXPECT_GT(n.seconds, 0.0) << n.node;
    sum += n.seconds;
  }
  EXPECT_LE(sum, st.seconds);
  // A Loop's body is timed as its node: one entry, not one per body node and iteration.
  auto loop = endless_loop_model(false).load();
  EXPECT_EQ(loop->run(trips(50), ro)[0].second.data<int64_t>()[0], 50);
  st = loop->last_run_stats();
  ASSERT_EQ(st.nodes.size(), 1u);
  EXPECT_EQ(st.nodes[0].node, "node 'loop' (Loop)");
}

TEST(Limits, ACancelledRunStopsAndTheSessionStaysUsable) {
  auto s = endless_loop_model(false).load();
  RunOptions ro;
  ro.cancel = std::make_shared<std::atomic<bool>>(false);
  std::thread canceller([flag = ro.cancel] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    flag->store(true);
  });
  expect_error([&] { s->run(trips(INT64_MAX), ro); }, {"node 'loop' (Loop)", "run cancelled at "});
  canceller.join();
  // Set before the run: it stops at the first node.
  expect_error([&] { s->run(trips(2), ro); }, {"run cancelled at node 'loop' (Loop)"});
  ro.cancel->store(false);
  EXPECT_EQ(s->run(trips(2), ro)[0].second.data<int64_t>()[0], 2);
}


// A Loop whose inputs are all known is computed while planning: the run's deadline holds there too.
TEST(Limits, ALoopComputedWhilePlanningKeepsTheRunsDeadline) {
  ModelBuilder b;
  b.int64_initializer("v0", {7}, {});
  onnx::NodeProto* loop = b.node("loop", "Loop", {"", "", "v0"}, {"y"});
  auto* a = loop->add_attribute();
  a->set_name("body");
  a->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* body = a->mutable_g();
  body->set_name("body");
  ModelBuilder::typed(body->add_input(), "iter", onnx::TensorProto::INT64, {});
  ModelBuilder::typed(body->add_input(), "cond_in", onnx::TensorProto::BOOL, {});
  ModelBuilder::typed(body->add_input(), "v_in", onnx::TensorProto::INT64, {});
  b.node("keep_going", "Identity", {"cond_in"}, {"cond_out"}, body);
  b.node("carry", "Identity", {"v_in"}, {"v_out"}, body);
  ModelBuilder::typed(body->add_output(), "cond_out", onnx::TensorProto::BOOL, {});
  ModelBuilder::typed(body->add_output(), "v_out", onnx::TensorProto::INT64, {});
  b.output("y", onnx::TensorProto::INT64);
  auto s = b.load();
  RunOptions ro;
  ro.timeout_seconds = 0.2;
  const auto t0 = std::chrono::steady_clock::now();
  expect_error([&] { s->run({}, ro); }, {"run exceeded its deadline of 0.2 s"});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  ro.timeout_seconds = 0;
  ro.cancel = std::make_shared<std::atomic<bool>>(false);
  std::thread canceller([flag = ro.cancel] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    flag->store(true);
  });
  expect_error([&] { s->run({}, ro); }, {"run cancelled"});
  canceller.join();
}

}  // namespace onyx
