// Choosing the next token from a sequence's logits: greedy, or sampled after the logit
// processors of Hugging Face transformers, in its order: repetition penalty, then
// temperature, top-k, top-p and min-p. Sampling draws from a generator seeded per
// sequence, so a seed reproduces a generation.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace onyx::genai {

struct SearchOptions {
  int64_t max_new_tokens = 128;
  bool do_sample = false;      // false: greedy (the highest logit; the lowest id among equals)
  double temperature = 1.0;    // sampling: logits divided by it; 0 means greedy
  int top_k = 0;               // sampling: keep the k most likely tokens (0: all)
  double top_p = 1.0;          // sampling: keep the fewest most likely tokens whose probability reaches p
  double min_p = 0.0;          // sampling: drop tokens less likely than min_p times the most likely one
  double repetition_penalty = 1.0;  // > 1 makes tokens already in the sequence less likely
  uint64_t seed = 0;
  std::vector<std::string> stop;  // stop strings: generation ends when one appears (not part of the text)
};

// Checks the options; names what is wrong.
void check_search_options(const SearchOptions& s);

class Sampler {
 public:
  // `stream` tells sequences of one generation apart (each draws its own numbers).
  Sampler(const SearchOptions& options, uint64_t stream);
  // The next token of a sequence whose ids so far (prompt and generated) are `history`.
  // `logits` is overwritten.
  int64_t next(std::span<float> logits, std::span<const int64_t> history);

 private:
  SearchOptions options_;
  std::mt19937_64 rng_;
  std::vector<int64_t> order_;
};

}  // namespace onyx::genai
