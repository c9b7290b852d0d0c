// onyx.genai::Sample's penalties (repetition, OpenAI's presence and frequency) against a direct
// float64 computation of the rules in ops/sampling.h: random logits, random histories with
// repeated ids and -1 padding, random generated_start splitting each row's history into
// prompt and generated entries; greedy, and sampled with temperature and top-k (the token the
// reference draws with the same uniform number). SearchOptions' checks and draw_options.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "genai/search.h"
#include "op_test_util.h"
#include "ops/sampling.h"

namespace onyx {
namespace {

using test::rng;

constexpr const char* kDomain = "onyx.genai";

struct Row {
  std::vector<float> logits;   // [V]
  std::vector<float> opt;      // [kOptionCount]
  std::vector<int64_t> history;  // [H]
  int64_t generated_start = 0;
  uint64_t seed = 0, counter = 0;
};

// The penalized logits, the rule written out: the repetition penalty on every id the history
// holds, then each id's logit less frequency * (its generated entries) + presence if it has any.
std::vector<double> reference_logits(const Row& r) {
  const int64_t V = static_cast<int64_t>(r.logits.size()), H = static_cast<int64_t>(r.history.size());
  std::set<int64_t> held;
  std::map<int64_t, int64_t> generated;
  for (int64_t i = 0; i < H; ++i) {
    const int64_t id = r.history[i];
    if (id < 0 || id >= V) continue;
    held.insert(id);
    if (i >= r.generated_start) ++generated[id];
  }
  const double rep = r.opt[sampling::kRepetitionPenalty], presence = r.opt[sampling::kPresencePenalty],
               frequency = r.opt[sampling::kFrequencyPenalty];
  std::vector<double> z(r.logits.begin(), r.logits.end());
  for (int64_t id : held) z[id] = z[id] < 0 ? z[id] * rep : z[id] / rep;
  for (auto [id, c] : generated) z[id] -= frequency * double(c) + presence;
  return z;
}

// The token the rules choose, or -1 where float32 rounding could make another choice (a near
// tie of the top logits, of the k-th and next logit, or a draw near a boundary of the mass).
int64_t reference_token(const Row& r) {
  std::vector<double> z = reference_logits(r);
  const int64_t V = static_cast<int64_t>(z.size());
  const double t = r.opt[sampling::kTemperature];
  std::vector<double> sorted = z;
  std::sort(sorted.begin(), sorted.end(), std::greater<double>());
  const double tie = 1e-4 * std::max(1.0, std::abs(sorted[0]));
  if (t == 0) {
    if (sorted[0] - sorted[1] < tie) return -1;
    return std::max_element(z.begin(), z.end()) - z.begin();
  }
  for (double& x : z) x /= t;
  for (double& x : sorted) x /= t;
  const int64_t k = static_cast<int64_t>(r.opt[sampling::kTopK]);
  double tau = -INFINITY;
  if (k > 0 && k < V) {
    tau = sorted[k - 1];
    if (sorted[k - 1] - sorted[k] < tie) return -1;
  }
  const double m = sorted[0];
  double total = 0;
  for (double x : z)
    if (x >= tau) total += std::exp(x - m);
  const double target = sampling::uniform(r.seed, r.counter) * total;
  double cum = 0;
  for (int64_t j = 0; j < V; ++j) {
    if (z[j] < tau) continue;
    cum += std::exp(z[j] - m);
    if (std::abs(cum - target) < 1e-5 * total) return -1;
    if (cum > target) return j;
  }
  return -1;
}

// Runs Sample over the rows (one position each); `with_start`: feed generated_start.
std::vector<int64_t> run_sample(const std::vector<Row>& rows, bool with_start = true) {
  const int64_t B = static_cast<int64_t>(rows.size()), V = static_cast<int64_t>(rows[0].logits.size()),
                H = static_cast<int64_t>(rows[0].history.size());
  Tensor logits(DType::kFloat32, Shape{B, 1, V}), options(DType::kFloat32, Shape{B, sampling::kOptionCount}),
      rng_t(DType::kInt64, Shape{B, 2}), history(DType::kInt64, Shape{B, H}), start(DType::kInt64, Shape{B});
  for (int64_t b = 0; b < B; ++b) {
    const Row& r = rows[b];
    std::copy(r.logits.begin(), r.logits.end(), logits.data<float>() + b * V);
    std::copy(r.opt.begin(), r.opt.end(), options.data<float>() + b * sampling::kOptionCount);
    rng_t.data<int64_t>()[2 * b] = static_cast<int64_t>(r.seed);
    rng_t.data<int64_t>()[2 * b + 1] = static_cast<int64_t>(r.counter);
    std::copy(r.history.begin(), r.history.end(), history.data<int64_t>() + b * H);
    start.data<int64_t>()[b] = r.generated_start;
  }
  std::vector<Tensor> in = {logits, options, rng_t, history, Tensor{}};
  if (with_start) in.push_back(start);
  std::vector<Tensor> out = test::run_op("Sample", in, {}, 1, 1, kDomain);
  return std::vector<int64_t>(out[0].data<int64_t>(), out[0].data<int64_t>() + B);
}

std::vector<float> options(float t, int k, float rep, float presence, float frequency) {
  std::vector<float> o(sampling::kOptionCount);
  o[sampling::kTemperature] = t;
  o[sampling::kTopK] = static_cast<float>(k);
  o[sampling::kTopP] = 1.f;
  o[sampling::kMinP] = 0.f;
  o[sampling::kRepetitionPenalty] = rep;
  o[sampling::kPresencePenalty] = presence;
  o[sampling::kFrequencyPenalty] = frequency;
  return o;
}

// A row of random logits whose history holds ids drawn from a few (so they repeat), its
// first `filled` entries set and the rest -1, its held ids' logits raised so that the
// penalties decide between them. generated_start anywhere in [-2, filled + 2].
Row random_row(int64_t V, int64_t H, std::vector<float> opt) {
  std::normal_distribution<float> normal(0.f, 1.5f);
  std::uniform_int_distribution<int64_t> pick(0, V - 1);
  Row r;
  r.opt = std::move(opt);
  r.logits.resize(V);
  for (float& x : r.logits) x = normal(rng());
  std::vector<int64_t> pool(6 + std::uniform_int_distribution<int>(0, 6)(rng()));
  for (auto& id : pool) id = pick(rng());
  const int64_t filled = std::uniform_int_distribution<int64_t>(1, H)(rng());
  r.history.assign(H, -1);
  for (int64_t i = 0; i < filled; ++i) r.history[i] = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng())];
  for (int64_t id : pool) r.logits[id] += 3.f + std::uniform_real_distribution<float>(0.f, 1.f)(rng());
  r.generated_start = std::uniform_int_distribution<int64_t>(-2, filled + 2)(rng());
  r.seed = rng()();
  r.counter = std::uniform_int_distribution<uint64_t>(0, 1000)(rng());
  return r;
}

// Over many random batches of rows made by `make`: Sample's tokens are the reference's, and
// the penalties changed the reference's choice in at least `min_changed` of the rows (so that a
// kernel ignoring them would fail).
void check_against_reference(const std::function<std::vector<float>()>& make, double min_changed,
                             bool with_start = true) {
  int64_t compared = 0, changed = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t V = std::uniform_int_distribution<int64_t>(20, 400)(rng());
    const int64_t H = std::uniform_int_distribution<int64_t>(1, 48)(rng());
    std::vector<Row> rows;
    for (int b = 0; b < 4; ++b) {
      rows.push_back(random_row(V, H, make()));
      if (!with_start) rows.back().generated_start = 0;
    }
    const std::vector<int64_t> got = run_sample(rows, with_start);
    for (size_t b = 0; b < rows.size(); ++b) {
      const int64_t want = reference_token(rows[b]);
      if (want < 0) continue;
      ++compared;
      ASSERT_EQ(got[b], want) << "trial " << trial << ", row " << b << " (V " << V << ", H " << H
                              << ", generated_start " << rows[b].generated_start << ")";
      Row plain = rows[b];
      plain.opt[sampling::kRepetitionPenalty] = 1.f;
      plain.opt[sampling::kPresencePenalty] = plain.opt[sampling::kFrequencyPenalty] = 0.f;
      const int64_t unpenalized = reference_token(plain);
      changed += unpenalized >= 0 && unpenalized != want;
    }
  }
  std::printf("[ reference ] %lld rows compared, the penalties changed the token of %lld\n",
              static_cast<long long>(compared), static_cast<long long>(changed));
  EXPECT_GT(compared, 200);
  EXPECT_GE(double(changed), min_changed * double(compared)) << changed << " of " << compared;
}

std::uniform_real_distribution<float> penalty_in(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi); }

TEST(SamplePenalties, PresenceAloneGreedy) {
  check_against_reference([] { return options(0.f, 0, 1.f, penalty_in(0.5f, 2.f)(rng()), 0.f); }, 0.08);
}

TEST(SamplePenalties, FrequencyAloneGreedy) {
  check_against_reference([] { return options(0.f, 0, 1.f, 0.f, penalty_in(0.3f, 2.f)(rng())); }, 0.08);
}

TEST(SamplePenalties, NegativePenaltiesFavourGeneratedIdsGreedy) {
  // Negative penalties raise the generated ids; the rows' other held ids stay where they were.
  check_against_reference([] { return options(0.f, 0, 1.f, penalty_in(-2.f, -0.5f)(rng()), penalty_in(-2.f, 0.f)(rng())); },
                          0.1);
}

TEST(SamplePenalties, AllThreeWithTemperatureAndTopK) {
  check_against_reference(
      [] {
        const int ks[] = {0, 1, 3, 10, 50};
        return options(penalty_in(0.5f, 1.5f)(rng()), ks[std::uniform_int_distribution<int>(0, 4)(rng())],
                       penalty_in(1.f, 1.6f)(rng()), penalty_in(-1.f, 2.f)(rng()), penalty_in(0.f, 2.f)(rng()));
      },
      0.1);
}

TEST(SamplePenalties, PresenceAndFrequencySampled) {
  check_against_reference(
      [] { return options(penalty_in(0.3f, 1.f)(rng()), 5, 1.f, penalty_in(0.5f, 2.f)(rng()), penalty_in(0.5f, 2.f)(rng())); },
      0.1);
}

TEST(SamplePenalties, WithoutGeneratedStartEveryEntryCounts) {
  check_against_reference([] { return options(0.f, 0, 1.f, penalty_in(0.5f, 2.f)(rng()), penalty_in(0.3f, 2.f)(rng())); },
                          0.3, /*with_start=*/false);
}

TEST(SamplePenalties, GeneratedStartSplitsPromptFromGenerated) {
  // Token 3 twice in the prompt, token 5 once generated, token 1 never: with a frequency
  // penalty of 1.5 only token 5 loses (4 - 1.5 < 3); counting from 0, token 3 loses 3 too.
  Row r;
  r.logits = {0.f, 3.f, 0.5f, 5.f, 0.25f, 4.f, -1.f, 0.75f};
  r.history = {3, 3, 5, -1};
  r.opt = options(0.f, 0, 1.f, 0.f, 1.5f);
  r.generated_start = 2;
  EXPECT_EQ(run_sample({r})[0], 3);
  r.generated_start = 0;
  EXPECT_EQ(run_sample({r})[0], 1);
  r.generated_start = 4;  // nothing generated
  EXPECT_EQ(run_sample({r})[0], 3);
  // Presence: once per id, however often it occurs; 3 loses 1.9 once: 3.1 > 3 (token 1).
  r.opt = options(0.f, 0, 1.f, 1.9f, 0.f);
  r.generated_start = 0;
  EXPECT_EQ(run_sample({r})[0], 3);
  r.opt = options(0.f, 0, 1.f, 2.1f, 0.f);
  EXPECT_EQ(run_sample({r})[0], 1);
  // Repetition covers the prompt's ids too: token 3 at 5 / 2 and token 5 at 4 / 2 fall below token 1.
  r.opt = options(0.f, 0, 2.f, 0.f, 0.f);
  r.generated_start = 4;
  EXPECT_EQ(run_sample({r})[0], 1);
}

// Top-k, top-p and min-p over vocabularies up to Llama 3's, against the rules computed from a
// whole sorted copy in float64 (z itself as the kernel computes it, l / t in float32): the
// kernel selects among the largest tokens only. Logits at several scales, some rounded to
// quarters (many ties at the thresholds), the largest value repeated in some rows. A case
// where rounding could decide (a top-p group boundary, the min-p threshold, the draw near a
// boundary) is left out and counted.
int64_t threshold_reference(const std::vector<float>& logits, const std::vector<float>& opt, double u) {
  const int64_t V = static_cast<int64_t>(logits.size());
  const float t = opt[sampling::kTemperature];
  std::vector<float> z(logits);
  for (float& x : z) x /= t;
  std::vector<float> sorted(z);
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  const double m = sorted[0];
  float tau = -INFINITY;
  const int64_t k = static_cast<int64_t>(opt[sampling::kTopK]);
  if (k > 0 && k < V) tau = sorted[k - 1];
  double above = 0;
  for (float x : sorted)
    if (x >= tau) above += std::exp(double(x) - m);
  if (opt[sampling::kTopP] < 1.f) {
    const double want = double(opt[sampling::kTopP]) * above;
    double mass = 0;
    for (size_t i = 0; i < sorted.size() && sorted[i] >= tau;) {
      const float v = sorted[i];
      while (i < sorted.size() && sorted[i] == v) mass += std::exp(double(sorted[i++]) - m);
      if (std::abs(mass - want) < 1e-9 * above) return -1;
      if (mass >= want) {
        tau = std::max(tau, v);
        break;
      }
    }
  }
  if (opt[sampling::kMinP] > 0.f) {
    const float tau_min = static_cast<float>(m) + std::log(opt[sampling::kMinP]);
    for (float x : sorted)
      if (std::abs(double(x) - tau_min) < 1e-4) return -1;
    tau = std::max(tau, tau_min);
  }
  double total = 0;
  for (float x : z)
    if (x >= tau) total += std::exp(double(x) - m);
  const double target = u * total;
  double cum = 0;
  for (int64_t j = 0; j < V; ++j) {
    if (z[j] < tau) continue;
    cum += std::exp(double(z[j]) - m);
    if (std::abs(cum - target) < 1e-9 * total) return -1;
    if (cum > target) return j;
  }
  return -1;
}

TEST(SampleThresholds, TopKTopPMinPAgainstAWholeSort) {
  int64_t compared = 0, left_out = 0, narrowed = 0;
  const int64_t sizes[] = {50, 1000, 32000, 128256};
  for (int trial = 0; trial < 48; ++trial) {
    const int64_t V = sizes[trial % 4];
    const float scale = std::array<float, 3>{0.5f, 3.f, 12.f}[(trial / 4) % 3];
    std::normal_distribution<float> normal(0.f, scale);
    std::uniform_real_distribution<float> unit(0.f, 1.f);
    const int B = 3;
    std::vector<Row> rows;
    for (int b = 0; b < B; ++b) {
      Row r;
      r.logits.resize(V);
      const bool quarters = (trial + b) % 3 == 0;
      for (float& x : r.logits) x = quarters ? std::round(normal(rng()) * 4.f) / 4.f : normal(rng());
      if (b == 1) r.logits[V / 3] = r.logits[V / 2] = *std::max_element(r.logits.begin(), r.logits.end());
      const int ks[] = {0, 1, 5, 50, 400};
      r.opt = options(0.3f + 1.2f * unit(rng()), ks[std::uniform_int_distribution<int>(0, 4)(rng())], 1.f, 0.f, 0.f);
      r.opt[sampling::kTopP] = (trial + b) % 4 == 3 ? 1.f : 0.05f + 0.94f * unit(rng());
      r.opt[sampling::kMinP] = (trial + b) % 5 == 0 ? 0.001f + 0.2f * unit(rng()) : 0.f;
      r.seed = rng()();
      r.counter = std::uniform_int_distribution<uint64_t>(0, 1000)(rng());
      r.history = {-1};
      rows.push_back(std::move(r));
    }
    const std::vector<int64_t> got = run_sample(rows);
    for (int b = 0; b < B; ++b) {
      const Row& r = rows[b];
      const int64_t want = threshold_reference(r.logits, r.opt, sampling::uniform(r.seed, r.counter));
      if (want < 0) {
        ++left_out;
        continue;
      }
      ++compared;
      // (How often the thresholds cut the vocabulary to under a hundredth: the selection's case.)
      narrowed += r.opt[sampling::kTopP] < 1.f || r.opt[sampling::kTopK] > 0;
      ASSERT_EQ(got[b], want) << "trial " << trial << ", row " << b << " (V " << V << ", scale " << scale
                              << ", t " << r.opt[0] << ", k " << r.opt[1] << ", p " << r.opt[2] << ", min_p " << r.opt[3]
                              << ")";
    }
  }
  std::printf("[ reference ] %lld rows compared (%lld with top-k or top-p), %lld left out as rounding-close\n",
              static_cast<long long>(compared), static_cast<long long>(narrowed), static_cast<long long>(left_out));
  EXPECT_GT(compared, 120);
  EXPECT_GT(narrowed, 90);
}

TEST(SamplePenalties, ShapesAndTypesAreChecked) {
  const int64_t B = 2, V = 10;
  Tensor logits = test::random_tensor<float>(Shape{B, 1, V});
  Tensor rng_t(DType::kInt64, Shape{B, 2});
  std::fill_n(rng_t.data<int64_t>(), 4, 0);
  Tensor history(DType::kInt64, Shape{B, 3});
  std::fill_n(history.data<int64_t>(), 6, 1);
  Tensor opt7(DType::kFloat32, Shape{B, 7});
  for (int b = 0; b < B; ++b) {
    std::vector<float> o = options(0.f, 0, 1.f, 1.f, 1.f);
    std::copy(o.begin(), o.end(), opt7.data<float>() + b * 7);
  }
  auto fails = [&](const std::vector<Tensor>& in, const std::string& what) {
    try {
      test::run_op("Sample", in, {}, 1, 1, kDomain);
      ADD_FAILURE() << "no error; expected " << what;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  fails({logits, Tensor(DType::kFloat32, Shape{B, 5}), rng_t}, "options must be [2, 7]");
  fails({logits, opt7, rng_t, history, Tensor{}, Tensor(DType::kInt64, Shape{B + 1})}, "generated_start must be [2]");
  fails({logits, opt7, rng_t, history, Tensor{}, Tensor(DType::kInt32, Shape{B})}, "generated_start must be int64");
  Tensor start(DType::kInt64, Shape{B});
  std::fill_n(start.data<int64_t>(), B, 1);
  EXPECT_NO_THROW(test::run_op("Sample", {logits, opt7, rng_t, history, Tensor{}, start}, {}, 1, 1, kDomain));
}

TEST(SearchOptions, PresenceAndFrequencyPenaltiesAreCheckedAndDrawn) {
  genai::SearchOptions s;
  s.presence_penalty = -2;
  s.frequency_penalty = 2;
  EXPECT_NO_THROW(genai::check_search_options(s));
  const std::array<float, 7> o = genai::draw_options(s);
  EXPECT_EQ(o[sampling::kPresencePenalty], -2.f);
  EXPECT_EQ(o[sampling::kFrequencyPenalty], 2.f);
  EXPECT_EQ(o[sampling::kRepetitionPenalty], 1.f);
  for (double bad : {2.5, -2.01, double(NAN)}) {
    genai::SearchOptions p;
    p.presence_penalty = bad;
    EXPECT_THROW(
        {
          try {
            genai::check_search_options(p);
          } catch (const std::exception& e) {
            EXPECT_NE(std::string(e.what()).find("presence_penalty must be in [-2, 2]"), std::string::npos) << e.what();
            throw;
          }
        },
        std::exception);
    genai::SearchOptions f;
    f.frequency_penalty = bad;
    EXPECT_THROW(
        {
          try {
            genai::check_search_options(f);
          } catch (const std::exception& e) {
            EXPECT_NE(std::string(e.what()).find("frequency_penalty must be in [-2, 2]"), std::string::npos) << e.what();
            throw;
          }
        },
        std::exception);
  }
}

}  // namespace
}  // namespace onyx
