// How the decode attention kernel (attention_decode.cuh) picks its form and key splits, in host
// arithmetic alone (no CUDA headers), so that CPU-only builds test the rule too.
#pragma once

#include <algorithm>
#include <cstdint>

namespace onyx::cuda {

constexpr int kDecodeWarps = 8;        // warps of a decode kernel's block
constexpr int kMaxClusterBlocks = 16;  // the largest cluster of key splits

// Keys one step of a decode block's warps reads, head size d (64 or 128): a key's d values lie
// across d / 8 lanes, so a warp reads 32 / (d / 8) keys a load, `loads` such loads a step.
constexpr int64_t decode_step_keys(int64_t d, int loads) { return kDecodeWarps * (32 / (d / 8)) * loads; }

// At 4 query rows a KV head (a GQA group of 4 at one position), the key splits of the short form
// (two loads in flight a lane, at most 128 registers, two blocks an SM) for S keys over `heads`
// (batch row, KV head) pairs on `sms` SMs, or 0 where the long form (four loads, one block an
// SM) runs. First splits of one step's keys each (every warp one step), at most a cluster and at
// most one block an SM; else up to 8 splits of at least 64 keys, at most one block an SM but 2
// splits (the long form's rule), if they leave a warp at most two steps. On an H200 (the 1.24B Llama's 32 query heads on 8 KV heads of 64, bf16,
// a cache of 576 positions, the generation loop, bench/results/llama_decode_gpu.md calls 87 and
// 89): batch 1 took 9 splits of one step against the long form's 8 (0.935 against 0.951 ms a
// step, one process), and 8 splits of two steps for one warp lost (0.955 against 0.950); batch 2
// took 8 splits (1.026 against 1.056); batch 4 and 8 keep the long form (at batch 8 the short
// form lost at 2 splits and at 4, 9.85 against 10.42 and 14.47 us a launch).
constexpr int64_t decode_short_form_splits(int64_t S, int64_t heads, int64_t sms, int64_t d) {
  if (S <= 0 || heads <= 0 || sms <= 0 || (d != 64 && d != 128)) return 0;
  const int64_t step = decode_step_keys(d, 2);
  const int64_t one = (S + step - 1) / step;
  if (one <= kMaxClusterBlocks && heads * one <= sms) return one;
  const int64_t two = std::min<int64_t>({8, (S + 63) / 64, std::max<int64_t>(2, sms / heads)});
  return (S + two - 1) / two <= 2 * step ? two : 0;
}

}  // namespace onyx::cuda
