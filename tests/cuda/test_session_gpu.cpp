// Whole sessions on the GPU: device choice, CPU fallback, and the memory governor.
#include <gtest/gtest.h>

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

// x[16, k] -> MatMul -> Add -> Relu, and optionally Reshape -> Det (which has no CUDA kernel).
std::string write_model(const std::string& name, int64_t k, bool with_det) {
  cuda::test::ModelWriter w(name);
  w.value(w.g->mutable_input(), "x", {"16", std::to_string(k)});
  w.weight("W", {k, 16}, 0.05f);
  w.weight("b", {16}, 0.05f);
  w.node("MatMul", {"x", "W"}, "mm");
  w.node("Add", {"mm", "b"}, "sum");
  w.node("Relu", {"sum"}, "act");
  if (!with_det) {
    w.value(w.g->mutable_output(), "act", {"16", "16"});
    return w.save();
  }
  auto* shape = w.g->add_initializer();
  shape->set_name("shape");
  shape->set_data_type(onnx::TensorProto::INT64);
  shape->add_dims(3);
  for (int64_t d : {16, 4, 4}) shape->add_int64_data(d);
  w.node("Reshape", {"act", "shape"}, "squares");
  w.node("Det", {"squares"}, "det");
  w.value(w.g->mutable_output(), "det", {"16"});
  return w.save();
}


Tensor random_input(int64_t k) {
  Tensor t(DType::kFloat32, Shape{16, k});
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
  return t;
}

double max_rel_error(const Tensor& a, const Tensor& b) {
  double diff = 0, scale = 1e-12;
  for (int64_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, std::abs(double(a.data<float>()[i]) - b.data<float>()[i]));
    scale = std::max(scale, std::abs(double(b.data<float>()[i])));
  }
  return diff / scale;
}

}  // namespace

TEST(GpuSession, MatchesTheCpuAndUploadsWeightsOnce) {
  REQUIRE_GPU();
  std::string path = write_model("gpu_mlp", 256, false);
  auto cpu = Session::load(path);
  SessionOptions opt;
  opt.device = "cuda:0";
  opt.allow_cpu_fallback = false;
  auto gpu = Session::load(path, opt);
  EXPECT_EQ(gpu->device(), "cuda:0");
  for (int run = 0; run < 3; ++run) {
    Tensor x = random_input(256);
    auto want = cpu->run({{"x", x}});
    auto got = gpu->run({{"x", x}});
    ASSERT_EQ(got[0].second.shape(), want[0].second.shape());
    EXPECT_TRUE(got[0].second.on_host());
    EXPECT_LE(max_rel_error(got[0].second, want[0].second), 1e-5);
  }
  EXPECT_TRUE(gpu->cpu_fallbacks().empty());
  EXPECT_NE(gpu->memory_report().find("weights"), std::string::npos) << gpu->memory_report();
}

TEST(GpuSession, AMissingDeviceIsAClearError) {
  REQUIRE_GPU();
  SessionOptions opt;
  opt.device = "cuda:64";
  try {
    Session::load(write_model("gpu_mlp_missing", 8, false), opt);
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cuda:64"), std::string::npos) << m;
    EXPECT_NE(m.find("available: cpu, cuda:0"), std::string::npos) << m;
  }
}

TEST(GpuSession, FallbackIsReportedOnceOrRefused) {
  REQUIRE_GPU();
  std::string path = write_model("gpu_det", 64, true);
  auto cpu = Session::load(path);
  SessionOptions opt;
  opt.device = "cuda:0";
  auto gpu = Session::load(path, opt);
  for (int run = 0; run < 2; ++run) {
    Tensor x = random_input(64);
    auto want = cpu->run({{"x", x}});
    auto got = gpu->run({{"x", x}});
    EXPECT_LE(max_rel_error(got[0].second, want[0].second), 1e-4);
  }
  auto fallbacks = gpu->cpu_fallbacks();
  ASSERT_EQ(fallbacks.size(), 1u);
  EXPECT_NE(fallbacks[0].first.find("Det"), std::string::npos);
  EXPECT_NE(fallbacks[0].second.find("no CUDA kernel"), std::string::npos) << fallbacks[0].second;

  opt.allow_cpu_fallback = false;
  auto strict = Session::load(path, opt);
  try {
    strict->run({{"x", random_input(64)}});
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("Det_det"), std::string::npos) << m;
    EXPECT_NE(m.find("CPU fallback is disabled"), std::string::npos) << m;
  }
}

TEST(GpuSession, GovernorRefusesWithTheHolderTableThenRecovers) {
  REQUIRE_GPU();
  std::string path = write_model("gpu_budget", 256, false);
  SessionOptions opt;
  opt.device = "cuda:0";
  // Room for the weights block and the library workspace, not for the plan arena's block.
  opt.memory_budget_bytes = 100ull << 20;
  auto gpu = Session::load(path, opt);
  Tensor x = random_input(256);
  try {
    gpu->run({{"x", x}});
    FAIL() << "the arena should not fit the budget";
  } catch (const Error& e) {
    std::string m = e.what();
    for (const char* holder : {"plan arenas and values", "weights", "library workspace", "budget"})
      EXPECT_NE(m.find(holder), std::string::npos) << holder << " missing from: " << m;
  }
  gpu->set_memory_budget(1ull << 30);
  auto cpu = Session::load(path);
  auto got = gpu->run({{"x", x}});
  auto want = cpu->run({{"x", x}});
  EXPECT_LE(max_rel_error(got[0].second, want[0].second), 1e-5);
}

}  // namespace onyx
