#include "genai/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_set>

#include "onyx/error.h"

namespace onyx::genai {

void check_search_options(const SearchOptions& s) {
  ONYX_CHECK(s.max_new_tokens >= 0, "max_new_tokens must be >= 0, got ", s.max_new_tokens);
  ONYX_CHECK(s.temperature >= 0 && std::isfinite(s.temperature), "temperature must be >= 0, got ", s.temperature);
  ONYX_CHECK(s.top_k >= 0, "top_k must be >= 0, got ", s.top_k);
  ONYX_CHECK(s.top_p > 0 && s.top_p <= 1, "top_p must be in (0, 1], got ", s.top_p);
  ONYX_CHECK(s.min_p >= 0 && s.min_p <= 1, "min_p must be in [0, 1], got ", s.min_p);
  ONYX_CHECK(s.repetition_penalty > 0 && std::isfinite(s.repetition_penalty), "repetition_penalty must be > 0, got ",
             s.repetition_penalty);
  for (const auto& stop : s.stop) ONYX_CHECK(!stop.empty(), "a stop string is empty");
}

Sampler::Sampler(const SearchOptions& options, uint64_t stream) : options_(options) {
  // One generator per sequence: the seed and the sequence's number mixed (splitmix64).
  uint64_t z = options.seed + 0x9e3779b97f4a7c15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  rng_.seed(z ^ (z >> 31));
}

int64_t Sampler::next(std::span<float> logits, std::span<const int64_t> history) {
  const int64_t n = static_cast<int64_t>(logits.size());
  ONYX_CHECK(n > 0, "no logits to choose a token from");
  if (options_.repetition_penalty != 1.0) {
    const float p = static_cast<float>(options_.repetition_penalty);
    std::unordered_set<int64_t> seen(history.begin(), history.end());
    for (int64_t id : seen)
      if (id >= 0 && id < n) logits[id] = logits[id] < 0 ? logits[id] * p : logits[id] / p;
  }
  if (!options_.do_sample || options_.temperature == 0.0)
    return std::max_element(logits.begin(), logits.end()) - logits.begin();

  const double t = options_.temperature;
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  auto more_likely = [&](int64_t a, int64_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int64_t keep = n;
  if (options_.top_k > 0 && options_.top_k < n) {
    // Only the k most likely are ordered; tokens equal to the k-th logit stay too, as a
    // threshold on the value keeps them.
    std::partial_sort(order_.begin(), order_.begin() + options_.top_k, order_.end(), more_likely);
    const float kth = logits[order_[options_.top_k - 1]];
    keep = options_.top_k;
    for (int64_t i = keep; i < n; ++i)
      if (logits[order_[i]] == kth) std::swap(order_[i], order_[keep++]);
  } else {
    std::sort(order_.begin(), order_.end(), more_likely);
  }
  // Probabilities of the kept tokens at this temperature (the most likely first).
  const double top = static_cast<double>(logits[order_[0]]) / t;
  std::vector<double> prob(keep);
  double sum = 0;
  for (int64_t i = 0; i < keep; ++i) sum += prob[i] = std::exp(static_cast<double>(logits[order_[i]]) / t - top);
  for (double& q : prob) q /= sum;
  if (options_.top_p < 1.0) {
    double cum = 0;
    int64_t k = 0;
    while (k < keep && cum < options_.top_p) cum += prob[k++];
    keep = std::max<int64_t>(k, 1);
  }
  if (options_.min_p > 0) {
    const double floor = options_.min_p * prob[0];
    int64_t k = 1;
    while (k < keep && prob[k] >= floor) ++k;
    keep = k;
  }
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) total += prob[i];
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
  double cum = 0;
  for (int64_t i = 0; i < keep; ++i) {
    cum += prob[i];
    if (u < cum) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace onyx::genai
