// Tensor parallelism on the CPU (passes/shard.h, ops/collective_ops.cpp): N sessions of one
// model, each a rank holding its share, running as threads of this process and joined by a
// thread communicator, give the whole model's logits and caches (each rank its KV heads).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <thread>

#include "onyx/communicator.h"
#include "genai/generator.h"
#include "genai/language_model.h"
#include "onyx/session.h"

namespace onyx {

namespace {

std::string fixture(const std::string& name) {
  return (std::filesystem::path(ONYX_SOURCE_DIR) / "tests/fixtures/genai" / name / "model.onnx").string();
}

const Tensor& named(const NamedTensors& t, const std::string& name) {
  for (const auto& [n, v] : t)
    if (n == name) return v;
  throw Error(cat("no output '", name, "'"));
}

// Heads [h0, h1) of a [B, H, T, D] cache.
Tensor heads(const Tensor& t, int64_t h0, int64_t h1) {
  const Shape& s = t.shape();
  Tensor out(t.dtype(), Shape{s[0], h1 - h0, s[2], s[3]});
  const int64_t per_head = s[2] * s[3];
  for (int64_t b = 0; b < s[0]; ++b)
    std::copy_n(t.data<float>() + (b * s[1] + h0) * per_head, (h1 - h0) * per_head,
                out.data<float>() + b * (h1 - h0) * per_head);
  return out;
}

// Largest |a - b| over the largest |b|.
double relative_error(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double diff = 0, scale = 1e-30;
  for (int64_t i = 0; i < b.numel(); ++i) {
    diff = std::max(diff, std::abs(double(a.data<float>()[i]) - b.data<float>()[i]));
    scale = std::max(scale, std::abs(double(b.data<float>()[i])));
  }
  return diff / scale;
}

struct RankStep {
  Tensor ids, mask;
  std::vector<Tensor> past;  // key, value per layer: [B, KV heads, P, D]
};

NamedTensors feeds(const RankStep& s) {
  NamedTensors f{{"input_ids", s.ids}, {"attention_mask", s.mask}};
  for (size_t l = 0; l < s.past.size() / 2; ++l) {
    f.emplace_back(cat("past_key_values.", l, ".key"), s.past[2 * l]);
    f.emplace_back(cat("past_key_values.", l, ".value"), s.past[2 * l + 1]);
  }
  return f;
}

// Runs every rank's session on its feeds at once (one thread each); rethrows a rank's error.
std::vector<NamedTensors> run_ranks(std::vector<std::unique_ptr<Session>>& ranks, const std::vector<NamedTensors>& in) {
  std::vector<NamedTensors> out(ranks.size());
  std::vector<std::string> errors(ranks.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranks.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        out[r] = ranks[r]->run(in[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (size_t r = 0; r < ranks.size(); ++r)
    if (!errors[r].empty()) throw Error(cat("rank ", r, ": ", errors[r]));
  return out;
}

}  // namespace

// The options of rank r of a group of `world` (one kernel thread each: the ranks are threads).
SessionOptions rank_options(int world, int r, const std::shared_ptr<Communicator>& comm) {
  SessionOptions o;
  o.intra_op_threads = 1;
  o.tensor_parallel_world = world;
  o.tensor_parallel_rank = r;
  o.communicator = comm;
  return o;
}

namespace {

std::vector<std::unique_ptr<Session>> load_ranks(const std::string& path, int world,
                                                 std::shared_ptr<Communicator> comm) {
  std::vector<std::unique_ptr<Session>> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(Session::load(path, rank_options(world, r, comm)));
  return ranks;
}

// A prompt of `prompt` tokens for `batch` sequences, then two decode steps, each fed the caches
// the step before returned: whole model against `world` ranks.
void expect_ranks_match(const std::string& name, int world, int64_t batch, int64_t prompt) {
  SCOPED_TRACE(name);
  SessionOptions whole_options;
  whole_options.intra_op_threads = 1;
  auto whole = Session::load(fixture(name), whole_options);
  auto ranks = load_ranks(fixture(name), world, make_thread_communicator(world));
  // The sharded sessions declare their share of the KV heads.
  int64_t layers = 0, kv_heads = 0, head = 0;
  for (const ValueDesc& d : whole->inputs())
    if (d.name.rfind("past_key_values.", 0) == 0) {
      ++layers;
      kv_heads = d.dims[1];
      head = d.dims[3] >= 0 ? d.dims[3] : 16;  // symbolic there: the fixtures' head_size (genai_config.json)
    }
  layers /= 2;
  ASSERT_GT(layers, 0);
  for (const ValueDesc& d : ranks[0]->inputs()) {
    if (d.name == "past_key_values.0.key") {
      EXPECT_EQ(d.dims[1], kv_heads / world);
    }
  }
  const ModelSummary summary = ranks[0]->summary();
  EXPECT_EQ(summary.op_histogram.count("onyx::AllReduce") ? summary.op_histogram.at("onyx::AllReduce") : 0,
            2 * layers);
  EXPECT_EQ(summary.op_histogram.count("onyx::AllGather") ? summary.op_histogram.at("onyx::AllGather") : 0, 1);

  std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(name)));
  std::uniform_int_distribution<int64_t> token(0, 1023);
  RankStep whole_step;
  std::vector<RankStep> rank_steps(world);
  int64_t past = 0;
  for (int s = 0; s < 3; ++s) {
    const int64_t n = s == 0 ? prompt : 1;
    std::vector<int64_t> ids(batch * n);
    for (auto& t : ids) t = token(rng);
    whole_step.ids = Tensor::from_vector(ids, Shape{batch, n});
    whole_step.mask = Tensor::from_vector(std::vector<int64_t>(batch * (past + n), 1), Shape{batch, past + n});
    if (s == 0) {
      for (int64_t l = 0; l < 2 * layers; ++l) whole_step.past.push_back(Tensor(DType::kFloat32, Shape{batch, kv_heads, 0, head}));
      for (int r = 0; r < world; ++r)
        for (int64_t l = 0; l < 2 * layers; ++l)
          rank_steps[r].past.push_back(Tensor(DType::kFloat32, Shape{batch, kv_heads / world, 0, head}));
    }
    std::vector<NamedTensors> in;
    for (int r = 0; r < world; ++r) {
      rank_steps[r].ids = whole_step.ids;
      rank_steps[r].mask = whole_step.mask;
      in.push_back(feeds(rank_steps[r]));
    }
    const NamedTensors want = whole->run(feeds(whole_step));
    const std::vector<NamedTensors> got = run_ranks(ranks, in);
    for (int r = 0; r < world; ++r) {
      SCOPED_TRACE(cat("step ", s, ", rank ", r));
      EXPECT_LT(relative_error(named(got[r], "logits"), named(want, "logits")), 1e-5);
      for (int64_t l = 0; l < layers; ++l)
        for (const char* kind : {"key", "value"}) {
          const std::string out = cat("present.", l, ".", kind);
          const Tensor mine = heads(named(want, out), r * kv_heads / world, (r + 1) * kv_heads / world);
          EXPECT_LT(relative_error(named(got[r], out), mine), 1e-5) << out;
        }
    }
    // The next step reads what this one wrote.
    for (int64_t l = 0; l < layers; ++l)
      for (int k = 0; k < 2; ++k) {
        const std::string out = cat("present.", l, ".", k == 0 ? "key" : "value");
        whole_step.past[2 * l + k] = named(want, out);
        for (int r = 0; r < world; ++r) rank_steps[r].past[2 * l + k] = named(got[r], out);
      }
    past += n;
  }
}

}  // namespace

TEST(TensorParallel, TwoRanksOfLlamaGiveTheWholeModelsLogitsAndTheirCacheHeads) {
  expect_ranks_match("llama-builder-fp32", 2, 2, 5);
}

TEST(TensorParallel, TwoRanksOfMistral) { expect_ranks_match("mistral-builder-fp32", 2, 2, 3); }

// Qwen2's Q, K, V products carry a bias (an Add after the packed product): each rank keeps its
// columns of it.
TEST(TensorParallel, TwoRanksOfQwenSplitTheQueryBias) { expect_ranks_match("qwen2-builder-fp32", 2, 1, 6); }

// 4-bit products (MatMulNBits): rows of the quantized weight for the column shares, whole
// blocks of K for the row shares.
TEST(TensorParallel, TwoRanksOfFourBitLlama) { expect_ranks_match("llama-builder-int4", 2, 2, 4); }

// A group of one: the pass runs all the same (each share the whole, each collective a copy),
// which is how one GPU runs the tensor-parallel path.
TEST(TensorParallel, AGroupOfOneRunsItsCollectivesAndGivesTheWholeModel) {
  expect_ranks_match("llama-builder-fp32", 1, 2, 4);
}

// Phi-3's 4 KV heads over 4 ranks: one query head and one KV head each.
TEST(TensorParallel, FourRanksOfPhi3) { expect_ranks_match("phi3-builder-fp32", 4, 1, 3); }

TEST(TensorParallel, HeadsThatDoNotSplitEvenlyAreRefusedNamingTheNode) {
  SessionOptions o;
  o.tensor_parallel_world = 4;  // Llama's fixture has 2 KV heads
  o.tensor_parallel_rank = 1;
  o.communicator = make_thread_communicator(4);
  try {
    Session::load(fixture("llama-builder-fp32"), o);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("GroupQueryAttention"), std::string::npos) << m;
    EXPECT_NE(m.find("4 query heads and 2 KV heads do not split evenly over 4 ranks"), std::string::npos) << m;
  }
  o.communicator = make_thread_communicator(2);
  try {
    Session::load(fixture("llama-builder-fp32"), o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("joins 2 ranks, tensor_parallel_world says 4"), std::string::npos) << e.what();
  }
}

// A rank whose partner never runs gets an error naming the collective, not a hang; the group is
// then broken (later runs fail at once, saying so) and the session itself stays usable.
TEST(TensorParallel, ARankAloneGetsAnErrorNotAHang) {
  auto comm = make_thread_communicator(2, std::chrono::milliseconds(200));
  auto ranks = load_ranks(fixture("llama-builder-fp32"), 2, comm);
  RankStep s;
  s.ids = Tensor::from_vector<int64_t>({5, 7}, Shape{1, 2});
  s.mask = Tensor::from_vector<int64_t>({1, 1}, Shape{1, 2});
  for (int l = 0; l < 4; ++l) s.past.push_back(Tensor(DType::kFloat32, Shape{1, 1, 0, 16}));
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      ranks[0]->run(feeds(s));
      FAIL() << "no error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("AllReduce on rank 0"), std::string::npos) << m;
      EXPECT_NE(m.find(attempt == 0 ? "did not come" : "group is broken"), std::string::npos) << m;
    }
  }
}

TEST(TensorParallel, ThreadCommunicatorSumsAndGathersInRankOrder) {
  auto comm = make_thread_communicator(3);
  std::vector<std::vector<float>> sums(3), gathered(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      std::vector<float> x{float(r), float(10 * r), 0.5f};
      sums[r].resize(3);
      comm->all_reduce_sum(r, x.data(), sums[r].data(), 3);
      gathered[r].resize(9);
      comm->all_gather(r, x.data(), gathered[r].data(), 3 * sizeof(float));
      comm->all_reduce_sum(r, x.data(), x.data(), 3);  // in place
      EXPECT_EQ(x, (std::vector<float>{3, 30, 1.5f}));
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(sums[r], (std::vector<float>{3, 30, 1.5f}));
    EXPECT_EQ(gathered[r], (std::vector<float>{0, 0, 0.5f, 1, 10, 0.5f, 2, 20, 0.5f}));
  }
}

}  // namespace onyx

// `onyx generate --tensor-parallel N`'s loop: the ranks' generators stepping together give the
// greedy tokens of one whole model, and a rank that fails ends the others with its error.
namespace onyx::genai {
namespace {

std::string folder(const std::string& name) {
  return (std::filesystem::path(ONYX_SOURCE_DIR) / "tests/fixtures/genai" / name).string();
}

std::vector<std::unique_ptr<LanguageModel>> rank_models(const std::string& name, int world,
                                                        const std::shared_ptr<Communicator>& group) {
  std::vector<std::unique_ptr<LanguageModel>> out;
  for (int r = 0; r < world; ++r)
    out.push_back(std::make_unique<LanguageModel>(folder(name), onyx::rank_options(world, r, group)));
  return out;
}

void expect_same_tokens(const std::string& name, int world) {
  SCOPED_TRACE(name);
  SessionOptions one;
  one.intra_op_threads = 1;
  LanguageModel whole(folder(name), one);
  SearchOptions s;
  s.max_new_tokens = 24;
  const std::vector<std::vector<int64_t>> prompts = {{1, 15, 300, 42, 7}, {1, 900, 3}};
  const std::vector<SequenceResult> want = Generator(whole).generate(prompts, s);
  auto group = make_thread_communicator(world);
  auto models = rank_models(name, world, group);
  EXPECT_EQ(models[0]->folder().kv_heads * world, whole.folder().kv_heads);
  std::vector<std::unique_ptr<Generator>> gens;
  std::vector<Generator*> ranks;
  for (auto& m : models) {
    gens.push_back(std::make_unique<Generator>(*m));
    ranks.push_back(gens.back().get());
  }
  const std::vector<SequenceResult> got = generate_on_ranks(ranks, *group, prompts, s);
  ASSERT_EQ(got.size(), want.size());
  int64_t tokens = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].generated_ids, want[i].generated_ids) << "sequence " << i;
    EXPECT_EQ(got[i].stop_reason, want[i].stop_reason) << "sequence " << i;
    EXPECT_GE(got[i].generated_ids.size(), 8u);  // more than a few steps (an end-of-sequence id may end one)
    tokens += static_cast<int64_t>(got[i].generated_ids.size());
  }
  EXPECT_EQ(ranks[0]->stats().generated_tokens, tokens);
}

TEST(TensorParallelGenerate, TwoRanksDrawTheWholeModelsGreedyTokens) {
  expect_same_tokens("llama-builder-fp32", 2);
  expect_same_tokens("llama-builder-int4", 2);
}

// What a failing rank does to the others (generate_on_ranks aborts the group): a rank waiting in
// a collective throws at once, with the reason, instead of waiting out the timeout.
TEST(TensorParallel, AbortWakesARankWaitingInACollective) {
  auto comm = make_thread_communicator(2, std::chrono::seconds(30));
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    comm->abort("rank 1 failed: out of memory");
  });
  const auto t0 = std::chrono::steady_clock::now();
  float x = 1, y = 0;
  try {
    comm->all_reduce_sum(0, &x, &y, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken (rank 1 failed: out of memory)"), std::string::npos) << e.what();
  }
  other.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// A prompt that the ranks cannot run comes back as an error from generate_on_ranks, not a hang.
TEST(TensorParallelGenerate, ABadPromptIsAnErrorFromTheRanks) {
  auto group = make_thread_communicator(2);
  auto models = rank_models("llama-builder-fp32", 2, group);
  Generator g0(*models[0]), g1(*models[1]);
  SearchOptions s;
  s.max_new_tokens = 4;
  // A token id past the vocabulary: every rank's prompt run fails.
  const auto t0 = std::chrono::steady_clock::now();
  try {
    std::vector<Generator*> ranks{&g0, &g1};
    generate_on_ranks(ranks, *group, {{1, 5, 99999}}, s);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor-parallel rank"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
}

}  // namespace
}  // namespace onyx::genai

namespace onyx::genai {
namespace {

// Rank 0 leading the others (LanguageModel::lead_ranks): every call runs on every rank.
std::unique_ptr<LanguageModel> leader_of(const std::string& name, int world) {
  auto group = make_thread_communicator(world);
  auto models = rank_models(name, world, group);
  std::unique_ptr<LanguageModel> lead = std::move(models[0]);
  models.erase(models.begin());
  lead->lead_ranks(std::move(models), group);
  return lead;
}

Draw greedy_draw(size_t rows) {
  Draw d;
  d.options.assign(rows, draw_options(SearchOptions{}));
  d.seeds.assign(rows, 0);
  return d;
}

// The serving calls (slots, prefills, decode steps of several slots, swaps) through a leader of
// two ranks give the whole model's tokens; a prefill that fails on the ranks is an error, after
// which the group serves again.
TEST(TensorParallelLead, SlotsPrefillsAndDecodeStepsGiveTheWholeModelsTokens) {
  SessionOptions one;
  one.intra_op_threads = 1;
  LanguageModel whole(folder("llama-builder-fp32"), one);
  auto lead = leader_of("llama-builder-fp32", 2);
  EXPECT_EQ(lead->tensor_parallel_ranks(), 2);
  const std::vector<std::vector<int64_t>> prompts = {{1, 15, 300, 42, 7}, {1, 900, 3}, {5, 6, 7, 8, 9, 10, 11}};
  auto serve = [&](LanguageModel& m, bool with_failure) {
    m.open_slots(4, 64);
    std::vector<int64_t> tokens;
    for (size_t s = 0; s < prompts.size(); ++s) {
      if (with_failure && s == 1) {
        // A token id past the vocabulary: every rank's prefill fails; the call says so.
        EXPECT_THROW(m.prefill(1, {1, 99999}, 0, greedy_draw(1)), Error);
      }
      tokens.push_back(m.prefill(static_cast<int64_t>(s), prompts[s], 0, greedy_draw(1)));
    }
    std::vector<int64_t> all = tokens;
    for (int step = 0; step < 12; ++step) {
      Draw d = greedy_draw(tokens.size());
      d.counter = step + 1;
      tokens = m.decode(tokens, d);
      all.insert(all.end(), tokens.begin(), tokens.end());
      if (step == 5) {  // slots exchanged: their sequences follow them
        m.swap_slots(0, 2);
        std::swap(tokens[0], tokens[2]);
      }
    }
    return all;
  };
  const std::vector<int64_t> want = serve(whole, false);
  EXPECT_EQ(serve(*lead, true), want);
}

// A generation through the leader (start, steps, keep) draws the whole model's greedy tokens.
TEST(TensorParallelLead, GeneratorOnALeaderDrawsTheWholeModelsTokens) {
  SessionOptions one;
  one.intra_op_threads = 1;
  LanguageModel whole(folder("llama-builder-int4"), one);
  auto lead = leader_of("llama-builder-int4", 2);
  SearchOptions s;
  s.max_new_tokens = 16;
  const std::vector<std::vector<int64_t>> prompts = {{1, 15, 300, 42, 7}, {1, 900, 3}, {2}};
  const std::vector<SequenceResult> want = Generator(whole).generate(prompts, s);
  const std::vector<SequenceResult> got = Generator(*lead).generate(prompts, s);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i].generated_ids, want[i].generated_ids) << "sequence " << i;
}

}  // namespace
}  // namespace onyx::genai
