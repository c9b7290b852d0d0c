// What a generation is asked for: the token budget, stop strings, and how the next token
// is chosen (greedy, or sampled after the logit processors of Hugging Face transformers, in
// its order: repetition penalty, then temperature, top-k, top-p and min-p; OpenAI's presence
// and frequency penalties right after the repetition penalty). The choice
// itself is made on the decoder's device by onyx.genai::Sample (ops/sampling.h), from a
// uniform number made from the seed, so a seed reproduces a generation.
#pragma once

#include <array>
#include <cstdint>
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
  double repetition_penalty = 1.0;  // > 1 makes tokens already in the sequence (prompt or generated) less likely
  // OpenAI's penalties, in [-2, 2], on the tokens generated so far (not the prompt's): each
  // token's logit less presence_penalty if it was generated at all, and less frequency_penalty
  // times the number of times it was generated (> 0 discourages repeats, < 0 encourages them).
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  uint64_t seed = 0;
  std::vector<std::string> stop;  // stop strings: generation ends when one appears (not part of the text)
  // Positions the KV cache starts with (0: the longest prompt and max_new_tokens); a full
  // cache grows by blocks of 64 positions, up to the context length.
  int64_t kv_capacity = 0;
  // Keep the logits each new token was drawn from (before the logit processors), per sequence.
  bool return_logits = false;
  // On a GPU: launch each decode step before the step before it has given its tokens to the
  // host (LanguageModel::step's run-ahead), so that the device does not wait for the host
  // between steps. The tokens are the same either way; a generation then runs one step more
  // than it keeps (launched, then forgotten when the sequences end).
  bool run_ahead = true;
};

// Checks the options; names what is wrong.
void check_search_options(const SearchOptions& s);

// The options row of onyx.genai::Sample for these options (ops/sampling.h's order).
std::array<float, 7> draw_options(const SearchOptions& s);

// The seed of sequence `index` of a generation seeded `seed` (each draws its own numbers).
uint64_t sequence_seed(uint64_t seed, size_t index);

}  // namespace onyx::genai
