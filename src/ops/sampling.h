// onyx.genai::Sample: the next token of each sequence, chosen from its logits by the rules of
// Hugging Face transformers' processors (repetition penalty, then temperature, top-k, top-p,
// min-p), written as thresholds on the logits so that the CPU kernel here and the CUDA kernel
// compute the same function (a kernel per sequence, no sort):
//   kept = { j : z_j >= max(tau_k, tau_p, tau_min) },  z = (penalized logits) / temperature
//   tau_k   the k-th largest z (top-k; every token equal to it stays)
//   tau_p   the largest z value whose tokens at or above it carry top_p of the mass above tau_k
//   tau_min max z + ln(min_p)
// then the token is drawn from the kept ones in index order by a uniform number made from
// (seed, counter) by the hash below, the same on both devices. Temperature 0 is greedy: the
// first largest logit.
//
//   inputs:  logits [B, S, V], options [B, 5] float32 (temperature, top_k, top_p, min_p,
//            repetition_penalty), rng [B, 2] int64 (seed, counter), history [B, H] int64 (ids for
//            the repetition penalty, -1 for none; optional), position [B] int64 (the position of
//            each row's logits to read; optional: the last)
//   outputs: token [B] int64; logits [B, V] float32 as read, before any processing (optional)
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ONYX_HOST_DEVICE __host__ __device__
#else
#define ONYX_HOST_DEVICE
#endif

namespace onyx::sampling {

enum Option : int { kTemperature = 0, kTopK = 1, kTopP = 2, kMinP = 3, kRepetitionPenalty = 4, kOptionCount = 5 };

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
