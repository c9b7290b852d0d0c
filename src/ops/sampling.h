// onyx.genai::Sample: the next token of each sequence, chosen from its logits by the rules of
// Hugging Face transformers' processors (repetition penalty, then temperature, top-k, top-p,
// min-p) with OpenAI's presence and frequency penalties after the repetition penalty, written
// as thresholds on the logits so that the CPU kernel here and the CUDA kernel compute the same
// function (a kernel per sequence, no sort):
//   l_j     the logit, then (in this order, penalized() below)
//           repetition: l_j < 0 ? l_j * r : l_j / r       for every j the history holds
//           presence, frequency (OpenAI's and vLLM's definition):
//             l_j -= frequency * c_j + presence * (c_j > 0)
//           c_j = how many of the row's *generated* history entries are j (the repetition
//           penalty covers every history entry, prompt and generated; these only the generated)
//   kept = { j : z_j >= max(tau_k, tau_p, tau_min) },  z = (penalized logits) / temperature
//   tau_k   the k-th largest z (top-k; every token equal to it stays)
//   tau_p   the largest z value whose tokens at or above it carry top_p of the mass above tau_k
//   tau_min max z + ln(min_p)
// then the token is drawn from the kept ones in index order by a uniform number made from
// (seed, counter) by the hash below, the same on both devices. Temperature 0 is greedy: the
// first largest (penalized) logit.
//
//   inputs:  logits [B, S, V], options [B, 7] float32 (temperature, top_k, top_p, min_p,
//            repetition_penalty, presence_penalty, frequency_penalty), rng [B, 2] int64 (seed,
//            counter), history [B, H] int64 (the ids the penalties look at, -1 for none;
//            optional: no penalty applies), position [B] int64 (the position of each row's
//            logits to read; optional: the last), generated_start [B] int64 (history entries
//            at index >= generated_start[b] are generated tokens, the ones presence and
//            frequency count; any value is valid: <= 0 all, >= H none; optional: all entries
//            count)
//   outputs: token [B] int64; logits [B, V] float32 as read, before any processing (optional)
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ONYX_HOST_DEVICE __host__ __device__
#else
#define ONYX_HOST_DEVICE
#endif

namespace onyx::sampling {

enum Option : int {
  kTemperature = 0,
  kTopK = 1,
  kTopP = 2,
  kMinP = 3,
  kRepetitionPenalty = 4,
  kPresencePenalty = 5,
  kFrequencyPenalty = 6,
  kOptionCount = 7
};

// Whether a row's options penalize what its history holds: the repetition penalty, the count
// penalties (presence, frequency).
ONYX_HOST_DEVICE inline bool repetition_applies(const float* opt) { return opt[kRepetitionPenalty] != 1.f; }
ONYX_HOST_DEVICE inline bool counts_apply(const float* opt) {
  return opt[kPresencePenalty] != 0.f || opt[kFrequencyPenalty] != 0.f;
}

// The logit `l` of a token the history holds, `count` of its entries generated ones, after the
// penalties, in their order. The count penalty is computed in double: frequency * count is
// exact there, so the result is the same with or without fused multiply-adds, on both devices.
ONYX_HOST_DEVICE inline float penalized(float l, const float* opt, int64_t count) {
  const float r = opt[kRepetitionPenalty];
  if (r != 1.f) l = l < 0 ? l * r : l / r;
  if (count > 0 && counts_apply(opt))
    l = static_cast<float>(static_cast<double>(l) - (static_cast<double>(opt[kFrequencyPenalty]) *
                                                         static_cast<double>(count) +
                                                     static_cast<double>(opt[kPresencePenalty])));
  return l;
}

ONYX_HOST_DEVICE inline uint64_t mix(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A uniform number in [0, 1) for draw `counter` of the sequence seeded `seed`.
ONYX_HOST_DEVICE inline double uniform(uint64_t seed, uint64_t counter) {
  const uint64_t bits = mix(mix(seed + 0x9e3779b97f4a7c15ull) ^ (counter * 0x9e3779b97f4a7c15ull + 1));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace onyx::sampling
