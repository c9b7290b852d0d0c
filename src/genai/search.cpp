#include "genai/search.h"

#include <cmath>

#include "onyx/error.h"
#include "ops/sampling.h"

namespace onyx::genai {

void check_search_options(const SearchOptions& s) {
  ONYX_CHECK(s.max_new_tokens >= 0, "max_new_tokens must be >= 0, got ", s.max_new_tokens);
  ONYX_CHECK(s.temperature >= 0 && std::isfinite(s.temperature), "temperature must be >= 0, got ", s.temperature);
  ONYX_CHECK(s.top_k >= 0, "top_k must be >= 0, got ", s.top_k);
  ONYX_CHECK(s.top_p > 0 && s.top_p <= 1, "top_p must be in (0, 1], got ", s.top_p);
  ONYX_CHECK(s.min_p >= 0 && s.min_p <= 1, "min_p must be in [0, 1], got ", s.min_p);
  ONYX_CHECK(s.repetition_penalty > 0 && std::isfinite(s.repetition_penalty), "repetition_penalty must be > 0, got ",
             s.repetition_penalty);
  ONYX_CHECK(s.presence_penalty >= -2 && s.presence_penalty <= 2, "presence_penalty must be in [-2, 2], got ",
             s.presence_penalty);
  ONYX_CHECK(s.frequency_penalty >= -2 && s.frequency_penalty <= 2, "frequency_penalty must be in [-2, 2], got ",
             s.frequency_penalty);
  for (const auto& stop : s.stop) ONYX_CHECK(!stop.empty(), "a stop string is empty");
}

std::array<float, 7> draw_options(const SearchOptions& s) {
  static_assert(sampling::kOptionCount == 7 && sampling::kRepetitionPenalty == 4 && sampling::kPresencePenalty == 5 &&
                sampling::kFrequencyPenalty == 6);
  const bool greedy = !s.do_sample || s.temperature == 0.0;
  return {greedy ? 0.f : static_cast<float>(s.temperature), static_cast<float>(s.top_k), static_cast<float>(s.top_p),
          static_cast<float>(s.min_p), static_cast<float>(s.repetition_penalty),
          static_cast<float>(s.presence_penalty), static_cast<float>(s.frequency_penalty)};
}

uint64_t sequence_seed(uint64_t seed, size_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace onyx::genai
