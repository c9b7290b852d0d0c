// A GPU tensor-parallel group (make_nccl_communicator, src/backends/cuda/nccl.cpp) over every GPU
// this process sees, one thread a rank: the sum and the rank-ordered gather of random device
// buffers against the host's, float32 and bfloat16; the AllGather kernel's placement of each
// rank's columns when the gathered axis is not the first; seed 003's pattern with the collectives
// inside every rank's captured graphs; generation on every rank with captured decode steps; and
// serving through a leader of the ranks.
// On a machine of one GPU the group has one rank: its collectives are copies, but they run
// through NCCL, inside the captured graphs, as they do on many.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>

#include "backends/cuda/cuda_kernels.h"
#include "genai/generator.h"
#include "genai/language_model.h"
#include "harness.h"
#include "model_writer.h"
#include "onyx/communicator.h"
#include "ops/registry.h"

namespace onyx {

namespace {

void ok(cudaError_t e, const char* what) { ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e); }

int gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  return n;
}

std::shared_ptr<Communicator> group_of_all(int n) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);  // never NVLink multicast (the lent machines' rule)
  std::vector<int> devices(n);
  for (int i = 0; i < n; ++i) devices[i] = i;
  // gpu/run.sh names PyTorch's copy of NCCL there (the GPU machine's image has no other).
  const char* library = std::getenv("ONYX_NCCL_LIBRARY");
  return make_nccl_communicator(devices, library ? library : "");
}

TEST(CollectivesGpu, NcclGroupSumsAndGathersEveryRanksBuffer) {
  const int n = gpus();
  ASSERT_GE(n, 1);
  auto group = group_of_all(n);
  const size_t count = 1000;
  std::vector<std::vector<float>> x(n, std::vector<float>(count));
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  for (auto& v : x)
    for (float& f : v) f = normal(rng);
  std::vector<std::vector<float>> sum(n, std::vector<float>(count)), gathered(n, std::vector<float>(count * n));
  std::vector<std::vector<uint16_t>> sum_bf16(n, std::vector<uint16_t>(count));
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      ok(cudaSetDevice(r), "cudaSetDevice");
      cudaStream_t s;
      ok(cudaStreamCreate(&s), "cudaStreamCreate");
      float *dx, *dy, *dg;
      uint16_t *bx, *by;
      ok(cudaMalloc(&dx, count * 4), "cudaMalloc");
      ok(cudaMalloc(&dy, count * 4), "cudaMalloc");
      ok(cudaMalloc(&dg, count * 4 * n), "cudaMalloc");
      ok(cudaMalloc(&bx, count * 2), "cudaMalloc");
      ok(cudaMalloc(&by, count * 2), "cudaMalloc");
      std::vector<uint16_t> hb(count);
      for (size_t i = 0; i < count; ++i) hb[i] = BFloat16(x[r][i]).bits;
      ok(cudaMemcpy(dx, x[r].data(), count * 4, cudaMemcpyHostToDevice), "copy");
      ok(cudaMemcpy(bx, hb.data(), count * 2, cudaMemcpyHostToDevice), "copy");
      group->all_reduce_sum_device(r, dx, dy, count, DType::kFloat32, s);
      group->all_gather_device(r, dx, dg, count * 4, s);
      group->all_reduce_sum_device(r, bx, by, count, DType::kBFloat16, s);
      ok(cudaStreamSynchronize(s), "sync");
      ok(cudaMemcpy(sum[r].data(), dy, count * 4, cudaMemcpyDeviceToHost), "copy");
      ok(cudaMemcpy(gathered[r].data(), dg, count * 4 * n, cudaMemcpyDeviceToHost), "copy");
      ok(cudaMemcpy(sum_bf16[r].data(), by, count * 2, cudaMemcpyDeviceToHost), "copy");
      for (void* p : {static_cast<void*>(dx), static_cast<void*>(dy), static_cast<void*>(dg), static_cast<void*>(bx),
                      static_cast<void*>(by)})
        cudaFree(p);
      cudaStreamDestroy(s);
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) {
      double want = 0;
      for (int q = 0; q < n; ++q) want += x[q][i];
      ASSERT_NEAR(sum[r][i], want, 1e-5 * n) << "rank " << r << " element " << i;
      BFloat16 b;
      b.bits = sum_bf16[r][i];
      ASSERT_NEAR(float(b), want, 0.02 * n + 0.02 * std::abs(want));
      for (int q = 0; q < n; ++q) ASSERT_EQ(gathered[r][q * count + i], x[q][i]) << "rank " << r << " from " << q;
    }
}

// AllGather along the last axis of [3, 5] (three outer rows: the workspace path) on a group of
// one GPU: y is x, each row's block put back where it belongs.
TEST(CollectivesGpu, AllGatherKernelPutsEachRowsBlockInPlace) {
  auto group = group_of_all(1);
  const int64_t id = register_communicator(group);
  Node node;
  node.domain = "onyx";
  node.op_type = "AllGather";
  node.opset = 1;
  node.inputs = {0};
  node.outputs = {1};
  node.attributes = {cuda::test::attr_int("communicator", id), cuda::test::attr_int("rank", 0),
                     cuda::test::attr_int("world", 1), cuda::test::attr_int("axis", -1)};
  resolve_op(node, OpRegistry::global());
  const cuda::CudaKernelDef* k = cuda::CudaKernelRegistry::global().find(node);
  ASSERT_NE(k, nullptr);
  std::vector<float> host(15);
  for (int i = 0; i < 15; ++i) host[i] = 0.5f * i - 3;
  float *dx, *dy;
  ok(cudaMalloc(&dx, 60), "cudaMalloc");
  ok(cudaMalloc(&dy, 60), "cudaMalloc");
  ok(cudaMemcpy(dx, host.data(), 60, cudaMemcpyHostToDevice), "copy");
  ok(cudaMemset(dy, 0xFF, 60), "poison");
  Tensor x = Tensor::borrow(DType::kFloat32, Shape{3, 5}, dx);
  std::vector<Tensor> outs{Tensor::borrow(DType::kFloat32, Shape{3, 5}, dy)};
  KernelContext ctx(node, {&x}, outs, cpu_allocator(), nullptr);
  k->run(ctx, cuda::test::context());
  ok(cudaStreamSynchronize(cuda::test::context().stream), "sync");
  std::vector<float> got(15);
  ok(cudaMemcpy(got.data(), dy, 60, cudaMemcpyDeviceToHost), "copy");
  EXPECT_EQ(got, host);
  cudaFree(dx);
  cudaFree(dy);
}


// Rank `rank`'s probe model: y = AllReduce(x W) (the sum over the ranks of each one's product),
// gathered = AllGather(x) along the rows and along the columns: what every rank's graph read.
std::string rank_probe_model(int64_t communicator, int rank, int world, const std::vector<float>& w) {
  cuda::test::ModelWriter m(cat("collective_probe_rank", rank));
  auto* onyx_domain = m.m.add_opset_import();
  onyx_domain->set_domain("onyx");
  onyx_domain->set_version(1);
  m.value(m.g->mutable_input(), "x", {"rows", "64"});
  auto* t = m.g->add_initializer();
  t->set_name("W");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(64);
  t->add_dims(32);
  for (float f : w) t->add_float_data(f);
  auto ints = [](onnx::NodeProto* n, std::vector<std::pair<std::string, int64_t>> attrs) {
    for (auto& [k, v] : attrs) {
      auto* a = n->add_attribute();
      a->set_name(k);
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(v);
    }
  };
  m.node("MatMul", {"x", "W"}, "share");
  ints(m.node("AllReduce", {"share"}, "y", "onyx"), {{"communicator", communicator}, {"rank", rank}});
  ints(m.node("AllGather", {"x"}, "rows_of_all", "onyx"),
       {{"communicator", communicator}, {"rank", rank}, {"world", world}, {"axis", 0}});
  ints(m.node("AllGather", {"x"}, "columns_of_all", "onyx"),
       {{"communicator", communicator}, {"rank", rank}, {"world", world}, {"axis", -1}});
  m.value(m.g->mutable_output(), "y", {"rows", "32"});
  m.value(m.g->mutable_output(), "rows_of_all", {"all_rows", "64"});
  m.value(m.g->mutable_output(), "columns_of_all", {"rows", "all_columns"});
  return m.save();
}

// Rank q's x at step t: every rank can make every rank's, for the reference.
Tensor rank_input(uint64_t seed, int step, int q, int64_t rows) {
  std::mt19937_64 rng(seed ^ (uint64_t(step) * 0x9E3779B97F4A7C15ull) ^ (uint64_t(q + 1) << 48));
  std::normal_distribution<float> normal;
  Tensor x(DType::kFloat32, Shape{rows, 64});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = normal(rng);
  return x;
}

// Seed 003's pattern with collectives inside the graphs: on every rank at once, decode steps of
// 1, 2 and 4 rows written into their bound input slots on the session's stream right before each
// replay, with prefills of random sizes fed from the host in between. Every rank's outputs must
// be the sum over all ranks' inputs of x W and every rank's inputs gathered: a graph that read a
// stale input (its own, or the one a collective took from another rank) fails the step.
TEST(CollectivesGpu, CapturedStepsOnEveryRankReadWhatEachRankWrote) {
  const int world = gpus();
  ASSERT_GE(world, 1);
  const char* env_steps = std::getenv("ONYX_STRESS_STEPS");
  const int steps = env_steps ? std::atoi(env_steps) : 10000;
  auto group = group_of_all(world);
  const int64_t id = register_communicator(group);
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(cat("seed ", seed));
  std::vector<float> w(64 * 32);
  {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 0.1f);
    for (float& f : w) f = normal(rng);
  }
  std::vector<std::unique_ptr<Session>> sessions;
  for (int r = 0; r < world; ++r) {
    SessionOptions opt;
    opt.device = cat("cuda:", r);
    opt.capture = CaptureMode::kAuto;
    opt.plan_cache_capacity = 64;
    opt.allow_cpu_fallback = false;
    sessions.push_back(Session::load(rank_probe_model(id, r, world, w), opt));
  }
  std::vector<int> mismatches(world, 0);
  std::vector<double> worst(world, 0);
  std::vector<std::string> errors(world);
  std::vector<CaptureReport> reports(world);
  auto rank = [&](int r) {
    try {
      Session& s = *sessions[r];
      const int64_t decode_rows[] = {1, 2, 4};
      std::vector<Session::InputBinding> bindings;
      for (int64_t rows : decode_rows) bindings.push_back(s.bind_inputs({{"x", rank_input(seed, -1, r, rows)}}));
      std::mt19937 shapes(static_cast<unsigned>(seed));  // the same on every rank: the same collectives
      for (int step = 0; step < steps; ++step) {
        const bool prefill = step % 2 == 1;
        const int64_t rows = prefill ? 5 + shapes() % 28 : decode_rows[(step / 2) % 3];
        std::vector<Tensor> xs;
        for (int q = 0; q < world; ++q) xs.push_back(rank_input(seed, step, q, rows));
        NamedTensors got;
        if (prefill) {
          got = s.run({{"x", xs[r]}});
        } else {
          const Session::InputBinding& b = bindings[(step / 2) % 3];
          const Tensor& slot = b.slots[0].second;
          if (cudaMemcpyAsync(slot.raw(), xs[r].raw(), xs[r].bytes(), cudaMemcpyHostToDevice,
                              static_cast<cudaStream_t>(b.stream)) != cudaSuccess)
            throw Error("cudaMemcpyAsync into the bound slot failed");
          got = s.run({{"x", slot}});
        }
        bool bad = false;
        double d = 0;
        const float* y = got[0].second.data<float>();
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < 32; ++j) {
            double want = 0;
            for (int q = 0; q < world; ++q)
              for (int64_t k = 0; k < 64; ++k) want += double(xs[q].data<float>()[i * 64 + k]) * w[k * 32 + j];
            d = std::max(d, std::abs(y[i * 32 + j] - want));
          }
        bad |= d > 2e-2;  // float32 products (TF32 where the library takes it) of 64 terms per rank
        const Tensor& rows_all = got[1].second;
        const Tensor& cols_all = got[2].second;
        bad |= rows_all.shape() != Shape{rows * world, 64} || cols_all.shape() != Shape{rows, 64 * world};
        for (int q = 0; q < world && !bad; ++q)
          for (int64_t i = 0; i < rows; ++i)
            for (int64_t k = 0; k < 64; ++k) {
              const float want = xs[q].data<float>()[i * 64 + k];
              bad |= rows_all.data<float>()[(q * rows + i) * 64 + k] != want ||
                     cols_all.data<float>()[i * 64 * world + q * 64 + k] != want;
            }
        worst[r] = std::max(worst[r], d);
        if (bad && mismatches[r]++ < 5)
          std::fprintf(stderr, "rank %d step %d (%s, %lld rows): outputs differ (product diff %.3g)\n", r, step,
                       prefill ? "prefill" : "decode", static_cast<long long>(rows), d);
      }
      reports[r] = s.capture_report();
    } catch (const std::exception& e) {
      errors[r] = e.what();
      group->abort(cat("rank ", r, " failed: ", e.what()));
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < world; ++r) threads.emplace_back(rank, r);
  rank(0);
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE(cat("rank ", r, " of ", world));
    EXPECT_EQ(errors[r], "");
    EXPECT_EQ(mismatches[r], 0);
    EXPECT_GE(reports[r].replays, static_cast<size_t>(steps / 2 - 10)) << "the decode steps were not replayed";
    std::printf("[collectives stress] rank %d of %d: %d steps, %d mismatches, max product diff %.3g; %zu captures, "
                "%zu replays, %zu eager runs\n",
                r, world, steps, mismatches[r], worst[r], reports[r].captures, reports[r].replays,
                reports[r].eager_runs);
  }
}

std::string genai_fixture(const std::string& name) {
  const char* env = std::getenv("ONYX_GENAI_FIXTURES");
  std::filesystem::path dir = env ? env : ONYX_SOURCE_DIR "/tests/fixtures/genai";
  return (dir / name).string();
}

// Generation split over a group of GPUs (1, 2, 4 and 8 ranks, as many as this machine has),
// every rank's decode steps captured with its collectives inside (capture=require) and replayed:
// the greedy tokens of a batch of prompts are those of the whole model on cuda:0.
TEST(CollectivesGpu, RanksOnEveryGpuDrawTheWholeModelsTokensUnderCapture) {
  using namespace genai;
  for (const char* name : {"llama-builder-fp32", "llama-builder-int4"}) {
    SCOPED_TRACE(name);
    const std::string dir = genai_fixture(name);
    ASSERT_TRUE(std::filesystem::exists(dir)) << dir;
    SessionOptions opt;
    opt.device = "cuda:0";
    opt.capture = CaptureMode::kRequire;
    opt.allow_cpu_fallback = false;
    std::vector<std::vector<int64_t>> prompts = {{1, 15, 200, 7}, {3, 9}, {400, 2, 81, 5, 6, 11}};
    SearchOptions s;
    s.max_new_tokens = 24;
    std::vector<SequenceResult> want;
    int64_t kv_heads = 0;
    {
      LanguageModel whole(dir, opt);
      kv_heads = whole.folder().kv_heads;
      want = Generator(whole).generate(prompts, s);
    }
    for (int world : {1, 2, 4, 8}) {
      if (world > gpus() || kv_heads % world != 0) continue;
      SCOPED_TRACE(cat(world, " ranks"));
      std::vector<int> devices(world);
      for (int r = 0; r < world; ++r) devices[r] = r;
      const char* library = std::getenv("ONYX_NCCL_LIBRARY");
      auto group = make_nccl_communicator(devices, library ? library : "");
      std::vector<std::unique_ptr<LanguageModel>> models;
      std::vector<std::unique_ptr<Generator>> gens;
      std::vector<Generator*> ranks;
      for (int r = 0; r < world; ++r) {
        SessionOptions o = opt;
        o.device = cat("cuda:", r);
        o.tensor_parallel_world = world;
        o.tensor_parallel_rank = r;
        o.communicator = group;
        models.push_back(std::make_unique<LanguageModel>(dir, o));
        EXPECT_EQ(models.back()->folder().kv_heads * world, kv_heads);
        gens.push_back(std::make_unique<Generator>(*models.back()));
        ranks.push_back(gens.back().get());
      }
      for (int round = 0; round < 2; ++round) {  // the second round replays the first one's graphs
        const std::vector<SequenceResult> got = generate_on_ranks(ranks, *group, prompts, s);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i)
          EXPECT_EQ(got[i].generated_ids, want[i].generated_ids) << "round " << round << ", sequence " << i;
      }
      for (int r = 0; r < world; ++r) {
        const CaptureReport c = models[r]->capture_report();
        EXPECT_GE(c.captures, 1u) << "rank " << r;
        EXPECT_GT(c.replays, 20u) << "rank " << r;
        std::printf("[tensor-parallel generate] %s, rank %d of %d: %zu captures, %zu replays, %zu eager runs\n", name,
                    r, world, c.captures, c.replays, c.eager_runs);
      }
    }
  }
}

// Serving through a leader (LanguageModel::lead_ranks, as onyx serve --tensor-parallel runs) over
// every GPU: slots, prefills and captured decode steps of several slots give the tokens of the
// whole model on cuda:0.
TEST(CollectivesGpu, ALeaderOnEveryGpuServesTheWholeModelsTokensUnderCapture) {
  using namespace genai;
  const std::string dir = genai_fixture("qwen2-builder-fp32");
  ASSERT_TRUE(std::filesystem::exists(dir)) << dir;
  SessionOptions opt;
  opt.device = "cuda:0";
  opt.capture = CaptureMode::kRequire;
  opt.allow_cpu_fallback = false;
  const std::vector<std::vector<int64_t>> prompts = {{1, 15, 300, 42, 7}, {1, 900, 3}, {5, 6, 7, 8, 9, 10, 11}};
  auto greedy = [](size_t rows, int64_t counter) {
    Draw d;
    d.options.assign(rows, draw_options(SearchOptions{}));
    d.seeds.assign(rows, 0);
    d.counter = counter;
    return d;
  };
  auto serve = [&](LanguageModel& m) {
    m.open_slots(4, 64);
    std::vector<int64_t> tokens;
    for (size_t s = 0; s < prompts.size(); ++s)
      tokens.push_back(m.prefill(static_cast<int64_t>(s), prompts[s], 0, greedy(1, 0)));
    std::vector<int64_t> all = tokens;
    for (int step = 0; step < 20; ++step) {
      tokens = m.decode(tokens, greedy(tokens.size(), step + 1));
      all.insert(all.end(), tokens.begin(), tokens.end());
    }
    return all;
  };
  std::vector<int64_t> want;
  int64_t kv_heads = 0;
  {
    LanguageModel whole(dir, opt);
    kv_heads = whole.folder().kv_heads;
    want = serve(whole);
  }
  int world = 1;
  while (world * 2 <= gpus() && kv_heads % (world * 2) == 0) world *= 2;
  std::vector<int> devices(world);
  for (int r = 0; r < world; ++r) devices[r] = r;
  const char* library = std::getenv("ONYX_NCCL_LIBRARY");
  auto group = make_nccl_communicator(devices, library ? library : "");
  std::vector<std::unique_ptr<LanguageModel>> others;
  SessionOptions o = opt;
  o.tensor_parallel_world = world;
  o.communicator = group;
  auto lead = std::make_unique<LanguageModel>(dir, o);
  for (int r = 1; r < world; ++r) {
    o.tensor_parallel_rank = r;
    o.device = cat("cuda:", r);
    others.push_back(std::make_unique<LanguageModel>(dir, o));
  }
  lead->lead_ranks(std::move(others), group);
  EXPECT_EQ(serve(*lead), want) << world << " ranks";
  EXPECT_GT(lead->capture_report().replays, 10u);
}

// A rank that never comes to its collective: the other rank's NCCL kernel waits on its GPU until
// the group is aborted, and then its stream is released (needs two GPUs).
TEST(CollectivesGpu, AbortReleasesARankWaitingOnItsGpu) {
  if (gpus() < 2) GTEST_SKIP() << "needs two GPUs; this machine has " << gpus();
  auto group = group_of_all(2);
  ok(cudaSetDevice(0), "cudaSetDevice");
  cudaStream_t s;
  ok(cudaStreamCreate(&s), "cudaStreamCreate");
  float* d;
  ok(cudaMalloc(&d, 1024), "cudaMalloc");
  group->all_reduce_sum_device(0, d, d, 256, DType::kFloat32, s);  // rank 1 never calls it
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    group->abort("rank 1 failed before its collective");
  });
  const auto t0 = std::chrono::steady_clock::now();
  cudaStreamSynchronize(s);  // returns once the abort ends the kernel (an error is expected)
  aborter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  try {
    group->all_reduce_sum_device(0, d, d, 256, DType::kFloat32, s);
    FAIL() << "a collective of an aborted group must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken (rank 1 failed"), std::string::npos) << e.what();
  }
  cudaGetLastError();
  cudaFree(d);
  cudaStreamDestroy(s);
}

}  // namespace

}  // namespace onyx
