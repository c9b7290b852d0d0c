// CUDA graph capture and replay, with the failures of the seeds reproduced whole.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "backends/backend.h"
#include "harness.h"
#include "model_writer.h"
#include "onnx/onnx.pb.h"
#include "onyx/session.h"

namespace onyx {

namespace {

using cuda::test::ModelWriter;



// x[rows, 64] -> StagedAdd (a parameter block staged through host memory) -> MatMul -> Relu.
// `pooled`: the staging buffer stays in the pool under capture, as seed 000's plugin did.
std::string staged_model(bool pooled = false) {
  ModelWriter w(pooled ? "staged_pooled" : "staged");
  w.value(w.g->mutable_input(), "x", {"rows", "64"});
  w.weight("W", {64, 64}, 0.1f);
  auto* n = w.node("StagedAdd", {"x"}, "staged", "onyx.test");
  auto* a = n->add_attribute();
  a->set_name("scale");
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(0.5f);
  if (pooled) {
    auto* p = n->add_attribute();
    p->set_name("pooled");
    p->set_type(onnx::AttributeProto::INT);
    p->set_i(1);
  }
  w.node("MatMul", {"staged", "W"}, "mm");
  w.node("Relu", {"mm"}, "y");
  w.value(w.g->mutable_output(), "y", {"rows", "64"});
  return w.save();
}

// x[rows, 64] -> y = Softmax(MatMul(x, W) + b); probe = x + 0 (echoes what the graph read).
std::string probe_model() {
  ModelWriter w("probe");
  w.value(w.g->mutable_input(), "x", {"rows", "64"});
  w.weight("W", {64, 32}, 0.1f);
  w.weight("b", {32}, 0.1f);
  auto* z = w.g->add_initializer();
  z->set_name("zero");
  z->set_data_type(onnx::TensorProto::FLOAT);
  z->add_float_data(0.f);
  w.node("MatMul", {"x", "W"}, "mm");
  w.node("Add", {"mm", "b"}, "logits");
  auto* sm = w.node("Softmax", {"logits"}, "y");
  auto* ax = sm->add_attribute();
  ax->set_name("axis");
  ax->set_type(onnx::AttributeProto::INT);
  ax->set_i(-1);
  w.node("Add", {"x", "zero"}, "probe");
  w.value(w.g->mutable_output(), "y", {"rows", "32"});
  w.value(w.g->mutable_output(), "probe", {"rows", "64"});
  return w.save();
}

Tensor random_rows(int64_t rows, std::mt19937& rng) {
  Tensor t(DType::kFloat32, Shape{rows, 64});
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
  return t;
}

double max_diff(const Tensor& a, const Tensor& b) {
  double d = 0;
  for (int64_t i = 0; i < a.numel(); ++i) d = std::max(d, std::abs(double(a.data<float>()[i]) - b.data<float>()[i]));
  return d;
}

}  // namespace

// Seed 000, whole: capture a decode graph whose copy reads a host staging buffer, run a
// prefill that stages other bytes in the same size class, replay the decode graph.
TEST(Capture, Seed000StagingBelongsToTheGraph) {
  REQUIRE_GPU();
  std::mt19937 rng(std::random_device{}());
  for (bool release_like_eager : {false, true}) {
    SCOPED_TRACE(release_like_eager ? "staging released like eager code (the bug)" : "graph-scoped staging");
    std::string path = staged_model(release_like_eager);
    auto cpu = Session::load(path);
    SessionOptions opt;
    opt.device = "cuda:0";
    opt.capture = CaptureMode::kAuto;
    auto gpu = Session::load(path, opt);
    // A first prefill sizes the shared arena, so that later ones do not move it.
    gpu->run({{"x", random_rows(32, rng)}});
    Tensor decode = random_rows(1, rng);
    auto want = cpu->run({{"x", decode}})[0].second;
    gpu->run({{"x", decode}});  // warm-up
    gpu->run({{"x", decode}});  // capture (and replay)
    CaptureReport c = gpu->capture_report();
    EXPECT_EQ(c.captures, 1u);
    EXPECT_EQ(c.retained_staging_bytes > 0, !release_like_eager) << "the graph owns the buffer its copy reads";
    // A prefill of another shape stages its own parameters (rows = 16) in the same size class.
    Tensor prefill = random_rows(16, rng);
    auto prefill_out = gpu->run({{"x", prefill}})[0].second;
    EXPECT_LE(max_diff(prefill_out, cpu->run({{"x", prefill}})[0].second), 1e-4);
    if (!release_like_eager) {
      auto got = gpu->run({{"x", decode}})[0].second;  // replay
      EXPECT_LE(max_diff(got, want), 1e-4) << "the replay must read its own staged parameters";
      EXPECT_EQ(gpu->capture_report().recaptures, 0u);
      continue;
    }
    // Released like eager code, the buffer was recycled: the replay contract refuses the graph.
    try {
      gpu->run({{"x", decode}});
      FAIL() << "a graph whose staging buffer was recycled must not be replayed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("reused since capture"), std::string::npos) << e.what();
    }
    // The session stays usable: the next run captures again, and (its buffer not yet reused) replays right.
    auto again = gpu->run({{"x", decode}})[0].second;
    EXPECT_LE(max_diff(again, want), 1e-4);
    EXPECT_EQ(gpu->capture_report().recaptures, 1u);
  }
}

// Seed 003's pattern: inputs written before each replay, through the binding API, on the
// session's stream; random prefills in between; three decode graphs sharing one arena.
TEST(Capture, InterleavedStressReadsWhatWasWritten) {
  REQUIRE_GPU();
  // ONYX_STRESS_STEPS shortens the run (under compute-sanitizer); the default is the full 10,000.
  const char* env_steps = std::getenv("ONYX_STRESS_STEPS");
  const int steps = env_steps ? std::atoi(env_steps) : 10000;
  std::string path = probe_model();
  SessionOptions eager_opt;
  eager_opt.device = "cuda:0";
  auto eager = Session::load(path, eager_opt);
  SessionOptions opt = eager_opt;
  opt.capture = CaptureMode::kAuto;
  opt.plan_cache_capacity = 64;
  auto gpu = Session::load(path, opt);
  std::mt19937 rng(std::random_device{}());
  const int64_t decode_rows[] = {1, 2, 4};
  std::vector<Session::InputBinding> bindings;
  for (int64_t r : decode_rows) bindings.push_back(gpu->bind_inputs({{"x", random_rows(r, rng)}}));
  int mismatches = 0;
  double worst = 0;
  for (int step = 0; step < steps; ++step) {
    if (step % 2 == 1) {  // a prefill of a random shape, fed from the host
      Tensor x = random_rows(5 + rng() % 28, rng);
      auto got = gpu->run({{"x", x}});
      mismatches += max_diff(got[1].second, x) != 0;
      continue;
    }
    size_t k = (step / 2) % 3;
    Tensor x = random_rows(decode_rows[k], rng);
    const Tensor& slot = bindings[k].slots[0].second;
    auto stream = static_cast<cudaStream_t>(bindings[k].stream);
    ASSERT_EQ(cudaMemcpyAsync(slot.raw(), x.raw(), x.bytes(), cudaMemcpyHostToDevice, stream), cudaSuccess);
    auto got = gpu->run({{"x", slot}});
    auto want = eager->run({{"x", x}});
    double d = max_diff(got[0].second, want[0].second);
    worst = std::max(worst, d);
    bool bad = max_diff(got[1].second, x) != 0 || d > 1e-5;
    mismatches += bad;
    if (bad && mismatches < 5) ADD_FAILURE() << "step " << step << ": probe or output differs (output diff " << d << ")";
  }
  EXPECT_EQ(mismatches, 0);
  CaptureReport c = gpu->capture_report();
  EXPECT_GE(c.replays, static_cast<size_t>(steps / 2 - 10));
  std::printf("[stress] %d steps, %d mismatches, max output diff %.3g; %zu captures (%zu recaptures), %zu replays, "
              "%zu eager runs, %zu graphs; shared arena %zu B vs %zu B for one arena per signature; capture %.3f ms "
              "in all\n",
              steps, mismatches, worst, c.captures, c.recaptures, c.replays, c.eager_runs, c.graphs,
              c.shared_arena_bytes, c.sum_of_plan_arena_bytes, c.capture_seconds * 1e3);
}

// Sessions with captured graphs, made and destroyed: device memory returns to where it was.
TEST(Capture, SessionsLeaveNothingBehind) {
  REQUIRE_GPU();
  std::string path = probe_model();
  std::mt19937 rng(std::random_device{}());
  SessionOptions opt;
  opt.device = "cuda:0";
  opt.capture = CaptureMode::kRequire;
  auto cycle = [&] {
    auto s = Session::load(path, opt);
    Tensor x = random_rows(4, rng);
    for (int i = 0; i < 3; ++i) s->run({{"x", x}});
    EXPECT_EQ(s->capture_report().graphs, 1u);
    std::string report = s->memory_report();
    EXPECT_NE(report.find("plan arenas and values"), std::string::npos);
  };
  cycle();  // the first session loads libraries and creates the context
  cudaDeviceSynchronize();
  size_t free0 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  for (int i = 0; i < 100; ++i) cycle();
  cudaDeviceSynchronize();
  size_t free1 = 0;
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  const double drift = (double(free0) - double(free1)) / (1 << 20);
  std::printf("[sessions] 100 sessions with captured graphs: free device memory moved by %.3f MiB\n", drift);
  EXPECT_LE(std::abs(drift), 1.0);
}

// A signature that cannot be captured runs eagerly under auto, with one notice, and is an
// error under require.
TEST(Capture, UncapturableSignaturesAreReportedOrRefused) {
  REQUIRE_GPU();
  ModelWriter w("uncapturable");
  w.value(w.g->mutable_input(), "x", {"rows", "64"});
  w.node("Relu", {"x"}, "r");
  auto* shape = w.g->add_initializer();
  shape->set_name("shape");
  shape->set_data_type(onnx::TensorProto::INT64);
  shape->add_dims(3);
  for (int64_t d : {-1, 4, 4}) shape->add_int64_data(d);
  w.node("Reshape", {"r", "shape"}, "sq");
  w.node("Det", {"sq"}, "y");  // no CUDA kernel: runs on the CPU
  w.value(w.g->mutable_output(), "y", {"n"});
  std::string path = w.save();
  std::mt19937 rng(std::random_device{}());
  std::vector<std::string> notices;
  SessionOptions opt;
  opt.device = "cuda:0";
  opt.capture = CaptureMode::kAuto;
  opt.log = [&](const std::string& m) { notices.push_back(m); };
  auto gpu = Session::load(path, opt);
  for (int i = 0; i < 3; ++i) gpu->run({{"x", random_rows(2, rng)}});
  int eager_notices = 0;
  for (const auto& n : notices) eager_notices += n.find("run eagerly, not from a CUDA graph") != std::string::npos;
  EXPECT_EQ(eager_notices, 1);
  EXPECT_EQ(gpu->capture_report().captures, 0u);
  opt.capture = CaptureMode::kRequire;
  auto strict = Session::load(path, opt);
  try {
    strict->run({{"x", random_rows(2, rng)}});
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("capture=require"), std::string::npos) << m;
    EXPECT_NE(m.find("Det"), std::string::npos) << m;
  }
}

}  // namespace onyx

namespace onyx {

// The device error word: an out-of-range Gather index on the GPU is an error naming the
// op family (eagerly and after a replay), and the session stays usable.
TEST(Capture, DeviceErrorWordReportsBadIndices) {
  REQUIRE_GPU();
  ModelWriter w("gather_ids");
  auto* in = w.g->mutable_input()->Add();
  in->set_name("ids");
  auto* t = in->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::INT64);
  t->mutable_shape()->add_dim()->set_dim_param("n");
  w.weight("table", {50, 16}, 1.f);
  w.node("Gather", {"table", "ids"}, "rows");
  w.node("Relu", {"rows"}, "y");
  w.value(w.g->mutable_output(), "y", {"n", "16"});
  std::string path = w.save();
  for (CaptureMode mode : {CaptureMode::kOff, CaptureMode::kAuto}) {
    SessionOptions opt;
    opt.device = "cuda:0";
    opt.capture = mode;
    auto gpu = Session::load(path, opt);
    auto cpu = Session::load(path);
    Tensor good = Tensor::from_vector<int64_t>({3, 7, 49, 0}, Shape{4});
    Tensor bad = Tensor::from_vector<int64_t>({3, 70, 49, 0}, Shape{4});
    for (int i = 0; i < 3; ++i) gpu->run({{"ids", good}});  // warm-up, capture, replay
    try {
      gpu->run({{"ids", bad}});
      FAIL() << "an out-of-range index must be reported";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Gather: an index was out of range"), std::string::npos) << e.what();
    }
    auto got = gpu->run({{"ids", good}})[0].second;
    auto want = cpu->run({{"ids", good}})[0].second;
    EXPECT_EQ(max_diff(got, want), 0.0);
  }
}

// Validation mode: replays check the retained staging bytes and start from a poisoned
// arena, and still match the eager results.
TEST(Capture, ValidationModeReplaysMatch) {
  REQUIRE_GPU();
  std::mt19937 rng(std::random_device{}());
  for (const std::string& path : {staged_model(), probe_model()}) {
    auto cpu = Session::load(path);
    SessionOptions opt;
    opt.device = "cuda:0";
    opt.capture = CaptureMode::kRequire;
    opt.validate_replays = true;
    auto gpu = Session::load(path, opt);
    for (int step = 0; step < 20; ++step) {
      Tensor x = random_rows(step % 2 ? 3 : 8, rng);
      auto got = gpu->run({{"x", x}});
      auto want = cpu->run({{"x", x}});
      for (size_t o = 0; o < got.size(); ++o) EXPECT_LE(max_diff(got[o].second, want[o].second), 1e-4) << path;
    }
    EXPECT_GE(gpu->capture_report().replays, 16u);
  }
}

}  // namespace onyx

namespace onyx {

// An If runs on the CPU while the value its branch reads lives on the GPU; and a signature
// with empty outputs captures and replays.
TEST(Capture, HostSubgraphsReadDeviceValuesAndEmptyOutputsReplay) {
  REQUIRE_GPU();
  ModelWriter w("if_on_host");
  w.value(w.g->mutable_input(), "x", {"rows", "64"});
  auto* c = w.g->mutable_input()->Add();
  c->set_name("c");
  c->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::BOOL);
  c->mutable_type()->mutable_tensor_type()->mutable_shape();
  w.node("Relu", {"x"}, "r");
  auto* n = w.node("If", {"c"}, "y");
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* a = n->add_attribute();
    a->set_name(branch);
    a->set_type(onnx::AttributeProto::GRAPH);
    auto* g = a->mutable_g();
    g->set_name(branch);
    auto* b = g->add_node();
    b->set_op_type(std::string(branch) == "then_branch" ? "Neg" : "Sigmoid");
    b->add_input("r");
    b->add_output(std::string(branch) + "_out");
    auto* o = g->add_output();
    o->set_name(std::string(branch) + "_out");
    o->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  }
  w.value(w.g->mutable_output(), "y", {"rows", "64"});
  std::string path = w.save();
  std::mt19937 rng(std::random_device{}());
  auto cpu = Session::load(path);
  SessionOptions opt;
  opt.device = "cuda:0";
  auto gpu = Session::load(path, opt);
  for (bool cond : {true, false}) {
    Tensor x = random_rows(5, rng);
    NamedTensors feeds{{"x", x}, {"c", Tensor::scalar<bool>(cond)}};
    EXPECT_LE(max_diff(gpu->run(feeds)[0].second, cpu->run(feeds)[0].second), 1e-6);
  }
  SessionOptions cap = opt;
  cap.capture = CaptureMode::kRequire;
  auto replayer = Session::load(probe_model(), cap);
  for (int i = 0; i < 3; ++i) {
    auto out = replayer->run({{"x", random_rows(0, rng)}});
    EXPECT_EQ(out[0].second.shape(), (Shape{0, 32}));
    EXPECT_EQ(out[1].second.shape(), (Shape{0, 64}));
  }
}

}  // namespace onyx

namespace onyx {

// One signature's graph released alone: it is captured again on its next run; the other stays.
TEST(Capture, ReleasingOneSignatureKeepsTheOthers) {
  REQUIRE_GPU();
  std::mt19937 rng(std::random_device{}());
  SessionOptions opt;
  opt.device = "cuda:0";
  opt.capture = CaptureMode::kRequire;
  auto gpu = Session::load(probe_model(), opt);
  Tensor a = random_rows(2, rng), b = random_rows(3, rng);
  for (int i = 0; i < 3; ++i) {
    gpu->run({{"x", a}});
    gpu->run({{"x", b}});
  }
  EXPECT_EQ(gpu->capture_report().graphs, 2u);
  EXPECT_TRUE(gpu->release_captured_graph({{"x", a}}));
  EXPECT_FALSE(gpu->release_captured_graph({{"x", a}}));
  EXPECT_EQ(gpu->capture_report().graphs, 1u);
  size_t captures = gpu->capture_report().captures;
  auto out = gpu->run({{"x", a}});
  EXPECT_EQ(max_diff(out[1].second, a), 0.0);
  EXPECT_EQ(gpu->capture_report().captures, captures + 1);
  EXPECT_EQ(gpu->capture_report().graphs, 2u);
}

// Host feeds of neighbouring input slots go over in one copy: inputs of several dtypes and
// sizes (none a multiple of the slots' alignment), fresh each replay, each echoed exactly by the
// graph; on some steps the middle one is fed from the device instead, splitting the copy in two.
TEST(Capture, NeighbouringHostFeedsArriveWhole) {
  REQUIRE_GPU();
  ModelWriter w("neighbours");
  w.value(w.g->mutable_input(), "a", {"rows", "3"});
  w.value(w.g->mutable_input(), "ids", {"rows"});
  w.g->mutable_input(1)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
  w.value(w.g->mutable_input(), "c", {"5"});
  w.value(w.g->mutable_input(), "d", {"rows", "7"});
  auto* zf = w.g->add_initializer();
  zf->set_name("zero");
  zf->set_data_type(onnx::TensorProto::FLOAT);
  zf->add_float_data(0.f);
  auto* zi = w.g->add_initializer();
  zi->set_name("zero_i");
  zi->set_data_type(onnx::TensorProto::INT64);
  zi->add_int64_data(0);
  w.node("Add", {"a", "zero"}, "ya");
  w.node("Add", {"ids", "zero_i"}, "yi");
  w.node("Add", {"c", "zero"}, "yc");
  w.node("Add", {"d", "zero"}, "yd");
  w.value(w.g->mutable_output(), "ya", {"rows", "3"});
  w.value(w.g->mutable_output(), "yi", {"rows"});
  w.g->mutable_output(1)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
  w.value(w.g->mutable_output(), "yc", {"5"});
  w.value(w.g->mutable_output(), "yd", {"rows", "7"});
  SessionOptions opt;
  opt.device = "cuda:0";
  opt.capture = CaptureMode::kRequire;
  auto gpu = Session::load(w.save(), opt);
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  auto floats = [&](Shape s) {
    Tensor t(DType::kFloat32, std::move(s));
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
    return t;
  };
  void* device_c = nullptr;
  ASSERT_EQ(cudaMalloc(&device_c, 5 * sizeof(float)), cudaSuccess);
  int mismatches = 0;
  for (int step = 0; step < 60; ++step) {
    const int64_t rows = step % 3 == 0 ? 1 : 3;
    Tensor a = floats(Shape{rows, 3}), c = floats(Shape{5}), d = floats(Shape{rows, 7});
    Tensor ids(DType::kInt64, Shape{rows});
    for (int64_t i = 0; i < rows; ++i) ids.data<int64_t>()[i] = static_cast<int64_t>(rng()) - (int64_t{1} << 31);
    Tensor c_fed = c;
    if (step % 4 == 1) {
      ASSERT_EQ(cudaMemcpy(device_c, c.raw(), c.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
      c_fed = Tensor::borrow(DType::kFloat32, Shape{5}, device_c, nullptr, Device::cuda(0));
    }
    auto got = gpu->run({{"a", a}, {"ids", ids}, {"c", c_fed}, {"d", d}});
    const bool same = max_diff(got[0].second, a) == 0 && max_diff(got[2].second, c) == 0 &&
                      max_diff(got[3].second, d) == 0 &&
                      std::memcmp(got[1].second.raw(), ids.raw(), ids.bytes()) == 0;
    mismatches += !same;
    if (!same && mismatches < 4) ADD_FAILURE() << "step " << step << " (rows " << rows << "): an echo differs";
  }
  cudaFree(device_c);
  EXPECT_EQ(mismatches, 0);
  EXPECT_GE(gpu->capture_report().replays, 50u);
}

// Many device -> device copies at once: 70 (two launches of the batch kernel) of random sizes
// (0 to 9,968 bytes) at random byte offsets (the 16-byte path and the byte path), each checked
// byte for byte, and the bytes around each destination untouched.
TEST(Capture, DeviceCopiesInOneLaunchLandWhole) {
  REQUIRE_GPU();
  SessionOptions opt;
  auto backend = make_backend(Device::cuda(0), opt);
  std::mt19937 rng(std::random_device{}());
  constexpr int kCopies = 70;
  constexpr size_t kRoom = 10000;
  std::vector<unsigned char> src(kCopies * kRoom), dst(kCopies * kRoom, 0xAB);
  for (auto& b : src) b = static_cast<unsigned char>(rng());
  unsigned char *dsrc = nullptr, *ddst = nullptr;
  ASSERT_EQ(cudaMalloc(&dsrc, src.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&ddst, dst.size()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dsrc, src.data(), src.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(ddst, dst.data(), dst.size(), cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<Backend::DeviceCopy> copies;
  std::vector<unsigned char> want = dst;
  for (int i = 0; i < kCopies; ++i) {
    const size_t so = i % 3 ? rng() % 16 : 0, d_off = i % 3 == 1 ? so : rng() % 16;
    const size_t bytes = i % 11 == 0 ? 0 : rng() % (kRoom - 32);
    copies.push_back({ddst + i * kRoom + d_off, dsrc + i * kRoom + so, bytes});
    std::memcpy(want.data() + i * kRoom + d_off, src.data() + i * kRoom + so, bytes);
  }
  backend->copy_many_on_device(copies);
  EXPECT_EQ(backend->finish(), "");
  std::vector<unsigned char> got(dst.size());
  ASSERT_EQ(cudaMemcpy(got.data(), ddst, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  int wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != want[i];
  EXPECT_EQ(wrong, 0);
  cudaFree(dsrc);
  cudaFree(ddst);
}

// A captured run fed device tensors (a bound past cache's way) reads this run's values in every
// input: five device feeds of other sizes, the first at an address off 16 bytes, and a host feed
// beside them, new random values every step.
TEST(Capture, DeviceFeedsArriveTogether) {
  REQUIRE_GPU();
  ModelWriter w("device_feeds");
  const std::vector<int64_t> widths = {3, 64, 5, 1, 130, 4};  // the last one fed from the host
  auto* zf = w.g->add_initializer();
  zf->set_name("zero");
  zf->set_data_type(onnx::TensorProto::FLOAT);
  zf->add_float_data(0.f);
  for (size_t i = 0; i < widths.size(); ++i) {
    const std::string x = "x" + std::to_string(i), y = "y" + std::to_string(i), width = std::to_string(widths[i]);
    w.value(w.g->mutable_input(), x, {"rows", width});
    w.node("Add", {x, "zero"}, y);
    w.value(w.g->mutable_output(), y, {"rows", width});
  }
  SessionOptions opt;
  opt.device = "cuda:0";
  opt.capture = CaptureMode::kRequire;
  auto gpu = Session::load(w.save(), opt);
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  unsigned char* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 1 << 16), cudaSuccess);
  int mismatches = 0;
  for (int step = 0; step < 40; ++step) {
    const int64_t rows = step % 4 == 0 ? 1 : 2;
    std::vector<Tensor> host;
    NamedTensors feeds;
    size_t at = 4;  // the first device feed off 16 bytes
    for (size_t i = 0; i < widths.size(); ++i) {
      Tensor t(DType::kFloat32, Shape{rows, widths[i]});
      for (int64_t j = 0; j < t.numel(); ++j) t.data<float>()[j] = normal(rng);
      host.push_back(t);
      if (i + 1 == widths.size()) {
        feeds.emplace_back("x" + std::to_string(i), t);
        continue;
      }
      ASSERT_EQ(cudaMemcpy(device + at, t.raw(), t.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
      feeds.emplace_back("x" + std::to_string(i),
                         Tensor::borrow(DType::kFloat32, t.shape(), device + at, nullptr, Device::cuda(0)));
      at = (at + t.bytes() + 255) / 256 * 256;
    }
    auto got = gpu->run(feeds);
    bool same = got.size() == widths.size();
    for (size_t i = 0; same && i < widths.size(); ++i) same = max_diff(got[i].second, host[i]) == 0;
    mismatches += !same;
    if (!same && mismatches < 4) ADD_FAILURE() << "step " << step << " (rows " << rows << "): an echo differs";
  }
  cudaFree(device);
  EXPECT_EQ(mismatches, 0);
  EXPECT_GE(gpu->capture_report().replays, 30u);
}

}  // namespace onyx
