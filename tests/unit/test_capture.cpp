// The capture state machine on the fake backend (tests/unit/fake_backend.h): warm-up,
// capture, replay, recapture after the shared arena moves, auto falling back when a
// capture fails, require refusing, released graphs; and what the executor promises
// every run: the plan's decisions used as planned, outputs where the caller wants
// them, one synchronization per run.
#include <gtest/gtest.h>

#include "fake_backend.h"
#include "op_test_util.h"

namespace onyx {

namespace {

// A small graph written node by node: x[rows, 8] -> ... -> outputs.
struct Builder {
  Graph g;
  int input(const std::string& name) {
    int id = g.value_id(name);
    g.values[id].is_input = true;
    g.inputs.push_back(id);
    return id;
  }
  int weight(const std::string& name, Tensor t) {
    int id = g.value_id(name);
    g.values[id].is_initializer = true;
    g.initializers[id] = std::move(t);
    return id;
  }
  int node(const std::string& op, std::vector<int> in, std::vector<Attribute> attrs = {}) {
    Node n;
    n.name = cat(op, "_", g.nodes.size());
    n.op_type = op;
    n.opset = 18;
    n.inputs = std::move(in);
    n.attributes = std::move(attrs);
    int out = g.value_id(n.name + "_out");
    g.values[out].producer = static_cast<int>(g.nodes.size());
    n.outputs = {out};
    g.nodes.push_back(std::move(n));
    return out;
  }
  void output(int id) { g.outputs.push_back(id); }
};

// y = Relu(x W + b), z = Sigmoid(y): every op has a fake kernel.
Graph mlp() {
  Builder b;
  int x = b.input("x");
  int w = b.weight("W", test::random_tensor<float>(Shape{8, 8}));
  int bias = b.weight("b", test::random_tensor<float>(Shape{8}));
  int y = b.node("Relu", {b.node("Add", {b.node("MatMul", {x, w}), bias})});
  b.output(y);
  b.output(b.node("Sigmoid", {y}));
  return std::move(b.g);
}

// y = Exp(Relu(x)) where the fake Exp takes scratch memory from the pool: capturing fails.
Graph allocating() {
  Builder b;
  int x = b.input("x");
  b.output(b.node("Exp", {b.node("Relu", {x})}));
  return std::move(b.g);
}

// y = Det(Reshape(Relu(x), [-1, 2, 2])): Det has no fake kernel and runs on the CPU.
Graph with_fallback() {
  Builder b;
  int x = b.input("x");
  int shape = b.weight("shape", Tensor::from_vector<int64_t>({-1, 2, 2}, Shape{3}));
  b.output(b.node("Det", {b.node("Reshape", {b.node("Relu", {x}), shape})}));
  return std::move(b.g);
}

struct Rig {
  Graph graph;
  Graph cpu_graph;
  test::FakeBackend backend;
  std::vector<std::string> notices;
  std::unique_ptr<GraphExecutor> gpu, cpu;

  Rig(Graph g, CaptureMode mode, bool validate = false) : graph(std::move(g)), cpu_graph(graph) {
    SessionOptions o;
    o.capture = mode;
    o.validate_replays = validate;
    o.log = [this](const std::string& m) { notices.push_back(m); };
    gpu = std::make_unique<GraphExecutor>(graph, OpRegistry::global(), make_cpu_allocator(), o, &backend);
    cpu = std::make_unique<GraphExecutor>(cpu_graph, OpRegistry::global(), make_cpu_allocator());
  }
  // One run with fresh random inputs, checked against the CPU: a replay must read them.
  void run_checked(int64_t rows, int64_t cols = 8) {
    Tensor x = test::random_tensor<float>(Shape{rows, cols});
    auto got = gpu->run({x});
    auto want = cpu->run({x});
    ASSERT_EQ(got.size(), want.size());
    for (size_t o = 0; o < got.size(); ++o) {
      ASSERT_TRUE(got[o].on_host());
      ASSERT_EQ(got[o].shape(), want[o].shape());
      for (int64_t i = 0; i < got[o].numel(); ++i)
        ASSERT_NEAR(got[o].data<float>()[i], want[o].data<float>()[i], 1e-5) << "output " << o << " element " << i;
    }
  }
  int notices_with(const std::string& text) const {
    int n = 0;
    for (const auto& m : notices) n += m.find(text) != std::string::npos;
    return n;
  }
};

}  // namespace

TEST(Capture, WarmUpThenCaptureThenReplay) {
  Rig r(mlp(), CaptureMode::kAuto);
  r.run_checked(4);
  CaptureReport c = r.gpu->capture_report();
  EXPECT_EQ(c.eager_runs, 1u);
  EXPECT_EQ(c.captures, 0u) << "run 1 of a signature is the warm-up";
  r.run_checked(4);
  c = r.gpu->capture_report();
  EXPECT_EQ(c.captures, 1u);
  EXPECT_EQ(c.replays, 1u) << "the run that captures also replays";
  EXPECT_EQ(c.graphs, 1u);
  const int launches = r.backend.launches;
  for (int i = 0; i < 5; ++i) r.run_checked(4);
  c = r.gpu->capture_report();
  EXPECT_EQ(c.replays, 6u);
  EXPECT_EQ(c.captures, 1u);
  EXPECT_EQ(r.backend.launches, launches) << "replays launch no kernel one by one";
  EXPECT_EQ(r.backend.last_graph->replays, 6);
}

TEST(Capture, ALargerSignatureMovesTheArenaAndTheGraphIsCapturedAgain) {
  Rig r(mlp(), CaptureMode::kAuto);
  for (int i = 0; i < 3; ++i) r.run_checked(2);
  ASSERT_EQ(r.gpu->capture_report().captures, 1u);
  size_t arena = r.gpu->capture_report().shared_arena_bytes;
  r.run_checked(256);  // a larger signature's warm-up grows the shared arena
  EXPECT_GT(r.gpu->capture_report().shared_arena_bytes, arena);
  r.run_checked(2);  // the old graph points into the old arena: captured again, never replayed
  CaptureReport c = r.gpu->capture_report();
  EXPECT_EQ(c.recaptures, 1u);
  EXPECT_EQ(c.captures, 2u);
  r.run_checked(2);
  EXPECT_EQ(r.gpu->capture_report().captures, 2u);
}

TEST(Capture, AutoRunsEagerlyWhenTheCaptureFails) {
  Rig r(allocating(), CaptureMode::kAuto);
  r.backend.allocating_ops = {"Exp"};
  for (int i = 0; i < 4; ++i) r.run_checked(3);
  CaptureReport c = r.gpu->capture_report();
  EXPECT_EQ(c.captures, 0u);
  EXPECT_EQ(c.replays, 0u);
  EXPECT_EQ(c.eager_runs, 4u);
  EXPECT_EQ(r.notices_with("its capture failed"), 1) << "said once";
  EXPECT_EQ(r.notices_with("during a capture"), 1) << "with the reason";
}

TEST(Capture, RequireFailsWhenTheCaptureFails) {
  Rig r(allocating(), CaptureMode::kRequire);
  r.backend.allocating_ops = {"Exp"};
  r.run_checked(3);  // the warm-up
  try {
    r.run_checked(3);
    FAIL() << "capture=require must not run eagerly";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("during a capture"), std::string::npos) << e.what();
  }
  r.backend.allocating_ops.clear();
  r.run_checked(3);  // the executor stays usable: this capture succeeds
  EXPECT_EQ(r.gpu->capture_report().captures, 1u);
}

TEST(Capture, UncapturableSignaturesAreSaidOnceOrRefused) {
  Rig r(with_fallback(), CaptureMode::kAuto);
  for (int i = 0; i < 3; ++i) r.run_checked(2);
  EXPECT_EQ(r.gpu->capture_report().captures, 0u);
  EXPECT_EQ(r.notices_with("run eagerly, not from a CUDA graph"), 1);
  EXPECT_EQ(r.notices_with("runs on the CPU, not cuda:0"), 1);
  Rig strict(with_fallback(), CaptureMode::kRequire);
  try {
    strict.run_checked(2);
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("capture=require"), std::string::npos) << m;
    EXPECT_NE(m.find("Det"), std::string::npos) << m;
  }
}

TEST(Capture, AReleasedGraphIsCapturedAgain) {
  Rig r(mlp(), CaptureMode::kRequire);
  Tensor x = test::random_tensor<float>(Shape{5, 8});
  for (int i = 0; i < 3; ++i) r.run_checked(5);
  EXPECT_TRUE(r.gpu->release_captured_graph({x}));
  EXPECT_FALSE(r.gpu->release_captured_graph({x}));
  EXPECT_EQ(r.gpu->capture_report().graphs, 0u);
  r.run_checked(5);
  EXPECT_EQ(r.gpu->capture_report().captures, 2u);
}

TEST(Capture, ValidationModePoisonsTheArenaBeforeEveryReplay) {
  Rig r(mlp(), CaptureMode::kRequire, true);
  for (int i = 0; i < 6; ++i) r.run_checked(3);
  EXPECT_EQ(r.backend.poisons, 5);
}

// Inputs written into the slots the graph reads, by the caller, are what the replay reads (L6).
TEST(Capture, InputsWrittenIntoTheSlotsAreRead) {
  Rig r(mlp(), CaptureMode::kRequire);
  Tensor like = test::random_tensor<float>(Shape{3, 8});
  std::vector<Tensor> slots = r.gpu->input_slots({like});
  ASSERT_EQ(slots.size(), 1u);
  ASSERT_FALSE(slots[0].on_host());
  for (int step = 0; step < 5; ++step) {
    Tensor x = test::random_tensor<float>(Shape{3, 8});
    std::memcpy(slots[0].raw(), x.raw(), x.bytes());
    const int uploads = r.backend.uploads;
    auto got = r.gpu->run({slots[0]});
    auto want = r.cpu->run({x});
    if (step >= 2) EXPECT_EQ(r.backend.uploads, uploads) << "a feed that is the slot is not copied";
    for (int64_t i = 0; i < got[0].numel(); ++i) ASSERT_NEAR(got[0].data<float>()[i], want[0].data<float>()[i], 1e-5);
  }
  EXPECT_EQ(r.gpu->capture_report().replays, 4u);
}

// Outputs left on the device feed the next run in place; host outputs share one synchronization.
// x -> Tanh(x + x).
Graph tanh_of_twice() {
  Builder b;
  int x = b.input("x");
  b.output(b.node("Tanh", {b.node("Add", {x, x})}));
  return std::move(b.g);
}

TEST(Executor, DeviceOutputsFeedTheNextRunWithoutACopy) {
  Graph g = tanh_of_twice(), cpu_g = g;
  test::FakeBackend backend;
  GraphExecutor gpu(g, OpRegistry::global(), make_cpu_allocator(), SessionOptions{}, &backend);
  GraphExecutor cpu(cpu_g, OpRegistry::global(), make_cpu_allocator());
  Tensor start = test::random_tensor<float>(Shape{4, 4}, -0.5, 0.5);
  std::vector<OutputPlace> on_device{OutputPlace::kDevice};
  Tensor cur = gpu.run({start}, nullptr, &on_device)[0];
  Tensor want = cpu.run({start})[0];
  ASSERT_FALSE(cur.on_host());
  const int uploads = backend.uploads, downloads = backend.downloads, copies = backend.device_copies;
  for (int step = 0; step < 5; ++step) {
    Tensor next = gpu.run({cur}, nullptr, &on_device)[0];
    EXPECT_NE(next.raw(), cur.raw());
    cur = next;
    want = cpu.run({want})[0];
  }
  EXPECT_EQ(backend.uploads, uploads) << "device feeds are used where they are";
  EXPECT_EQ(backend.downloads, downloads);
  EXPECT_EQ(backend.device_copies, copies) << "outputs the run allocated are handed over, not copied";
  Tensor host = gpu.run({cur})[0];
  want = cpu.run({want})[0];
  for (int64_t i = 0; i < host.numel(); ++i) ASSERT_NEAR(host.data<float>()[i], want.data<float>()[i], 1e-5);
}

// A run with finish = false (LanguageModel's run-ahead) returns with its work enqueued: no
// synchronization; its device outputs are the finished run's values once the backend finishes.
// One that would give an output to the host, or that has no backend, is refused by name, and
// the executor runs normally after.
TEST(Executor, AnUnfinishedRunDoesNotSynchronizeAndGivesDeviceOutputsOnly) {
  Graph g = tanh_of_twice(), cpu_g = g;
  test::FakeBackend backend;
  GraphExecutor gpu(g, OpRegistry::global(), make_cpu_allocator(), SessionOptions{}, &backend);
  GraphExecutor cpu(cpu_g, OpRegistry::global(), make_cpu_allocator());
  const Tensor in = test::random_tensor<float>(Shape{4, 4}, -0.5, 0.5);
  const Tensor want = cpu.run({in})[0];
  std::vector<OutputPlace> on_device{OutputPlace::kDevice};
  const int syncs = backend.syncs;
  const Tensor out = gpu.run({in}, nullptr, &on_device, nullptr, nullptr, false)[0];
  EXPECT_EQ(backend.syncs, syncs) << "an unfinished run synchronized";
  ASSERT_FALSE(out.on_host());
  EXPECT_EQ(backend.finish(), "");
  // Fed to the next (finished) run where it lies: its values are the run's.
  const Tensor next = gpu.run({out})[0], want_next = cpu.run({want})[0];
  ASSERT_TRUE(next.on_host());
  for (int64_t i = 0; i < want.numel(); ++i) ASSERT_NEAR(next.data<float>()[i], want_next.data<float>()[i], 1e-5);
  try {
    gpu.run({in}, nullptr, nullptr, nullptr, nullptr, false);  // its output would go to the host
    FAIL() << "an unfinished run gave an output to the host";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("goes to the host"), std::string::npos) << e.what();
  }
  try {
    cpu.run({in}, nullptr, nullptr, nullptr, nullptr, false);
    FAIL() << "an unfinished run without a backend was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a backend"), std::string::npos) << e.what();
  }
  const Tensor again = gpu.run({in})[0];
  ASSERT_TRUE(again.on_host());
  for (int64_t i = 0; i < want.numel(); ++i) ASSERT_NEAR(again.data<float>()[i], want.data<float>()[i], 1e-5);
}

TEST(Executor, HostOutputsShareOneSynchronization) {
  Rig r(mlp(), CaptureMode::kAuto);
  for (int i = 0; i < 4; ++i) {
    const int syncs = r.backend.syncs, downloads = r.backend.downloads;
    r.run_checked(6);
    EXPECT_EQ(r.backend.syncs - syncs, 1) << "run " << i;
    EXPECT_EQ(r.backend.downloads - downloads, 2) << "run " << i << ": two outputs";
  }
}

// The plan carries its decisions: a run looks up no kernel and reports fallbacks from the plan.
TEST(Executor, ThePlanCarriesKernelsPlacesCopiesAndFallbacks) {
  Rig r(with_fallback(), CaptureMode::kOff);
  Tensor x = test::random_tensor<float>(Shape{3, 4});
  auto plan = r.gpu->plan_for({x});
  ASSERT_EQ(plan->steps.size(), 3u);
  EXPECT_EQ(plan->steps[0].place, StepPlace::kAccel);  // Relu
  EXPECT_EQ(plan->steps[1].place, StepPlace::kNone);   // Reshape: a view
  const Step& det = plan->steps[2];
  EXPECT_EQ(det.place, StepPlace::kHost);
  EXPECT_NE(det.fallback.find("no fake kernel for Det"), std::string::npos) << det.fallback;
  ASSERT_EQ(det.to_host.size(), 1u) << "the view of a device value is copied to the host before Det";
  EXPECT_EQ(plan->steps[0].to_accel.size(), 1u) << "the host feed goes to the device before Relu";
  EXPECT_NE(plan->capture_blocker.find("Det"), std::string::npos);
  EXPECT_EQ(r.notices_with("runs on the CPU, not cuda:0"), 1) << "reported from the plan when it was made";
  const int lookups = r.backend.lookups;
  for (int i = 0; i < 3; ++i) r.run_checked(3, 4);
  EXPECT_EQ(r.backend.lookups, lookups) << "runs of a planned signature resolve no kernel";
  EXPECT_EQ(r.notices_with("runs on the CPU, not cuda:0"), 1);

  SessionOptions strict;
  strict.allow_cpu_fallback = false;
  Graph g = with_fallback();
  test::FakeBackend backend;
  GraphExecutor refusing(g, OpRegistry::global(), make_cpu_allocator(), strict, &backend);
  try {
    refusing.run({x});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CPU fallback is disabled"), std::string::npos) << e.what();
  }
}

}  // namespace onyx

namespace onyx {

namespace {

// logits = MatMul(x, W); present = CacheUpdate(past, k, index): a one-layer KV cache.
Graph cache_graph() {
  Builder b;
  int x = b.input("x");
  int past = b.input("past");
  int k = b.input("k");
  int index = b.input("index");
  int w = b.weight("W", test::random_tensor<float>(Shape{8, 8}));
  b.output(b.node("MatMul", {x, w}));
  Node n;
  n.name = "update";
  n.op_type = "CacheUpdate";
  n.domain = "onyx.genai";
  n.opset = 1;
  n.inputs = {past, k, index};
  int present = b.g.value_id("present");
  b.g.values[present].producer = static_cast<int>(b.g.nodes.size());
  n.outputs = {present};
  b.g.nodes.push_back(std::move(n));
  b.output(present);
  return std::move(b.g);
}

}  // namespace

// A present bound to the past it was fed updates it in place: only the new entries are
// written, on the CPU, eagerly on a device, and from a captured graph that writes into the
// caller's buffer (binding another buffer captures again).
TEST(Executor, ABoundCacheIsUpdatedInPlace) {
  for (bool device : {false, true}) {
    SCOPED_TRACE(device ? "fake device, capture" : "cpu");
    Graph g = cache_graph();
    test::FakeBackend backend;
    SessionOptions o;
    if (device) o.capture = CaptureMode::kRequire;
    GraphExecutor exec(g, OpRegistry::global(), make_cpu_allocator(), o, device ? &backend : nullptr);
    Tensor cache_host = test::random_tensor<float>(Shape{2, 3, 16, 4});
    Tensor expect = cache_host.clone();
    Tensor cache = cache_host;
    std::shared_ptr<Allocator> pool = backend.make_pool("kv cache");
    if (device) {  // fed and bound, the cache is read and written where it is, never copied into a slot
      cache = Tensor(DType::kFloat32, cache_host.shape(), *pool);
      std::memcpy(cache.raw(), cache_host.raw(), cache_host.bytes());
    }
    std::vector<Tensor> bound{Tensor(), cache};
    const int copies = backend.device_copies;
    for (int64_t step = 0; step < 5; ++step) {
      Tensor x = test::random_tensor<float>(Shape{1, 8});
      Tensor k = test::random_tensor<float>(Shape{2, 3, 1, 4});
      Tensor kin = k;
      if (device) {
        kin = Tensor(DType::kFloat32, k.shape(), backend.allocator());
        std::memcpy(kin.raw(), k.raw(), k.bytes());
      }
      auto out = exec.run({x, cache, kin, Tensor::scalar<int64_t>(3 + step)}, nullptr, nullptr, &bound);
      ASSERT_EQ(out[1].raw(), cache.raw()) << "the present is the caller's cache";
      for (int64_t r = 0; r < 6; ++r)
        for (int64_t d = 0; d < 4; ++d) expect.data<float>()[(r * 16 + 3 + step) * 4 + d] = k.data<float>()[r * 4 + d];
      for (int64_t i = 0; i < expect.numel(); ++i)
        ASSERT_EQ(cache.data<float>()[i], expect.data<float>()[i]) << "step " << step << " element " << i;
    }
    if (device) {
      CaptureReport c = exec.capture_report();
      EXPECT_EQ(c.captures, 1u);
      EXPECT_EQ(c.replays, 4u);
      // Each run copies k into its slot; the cache moves no bytes: the graph writes into it.
      EXPECT_EQ(backend.device_copies - copies, 5) << "only k is copied into its slot";
      Tensor other(DType::kFloat32, cache.shape(), backend.allocator());
      std::memcpy(other.raw(), cache.raw(), cache.bytes());
      std::vector<Tensor> rebound{Tensor(), other};
      Tensor k(DType::kFloat32, Shape{2, 3, 1, 4}, backend.allocator());
      exec.run({test::random_tensor<float>(Shape{1, 8}), other, k, Tensor::scalar<int64_t>(9)}, nullptr, nullptr,
               &rebound);
      EXPECT_EQ(exec.capture_report().recaptures, 1u);
    }
  }
}

}  // namespace onyx
