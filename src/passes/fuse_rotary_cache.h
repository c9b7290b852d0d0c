// The rotary-cache fusion: a layer's rotary embeddings of q and k and its two cache writes become
// one onyx::RotaryCache node (ops/rotary_cache.cpp), so one CUDA kernel per layer where the graph
// after fuse_patterns has four. On the graph after fuse_patterns (which makes the RotaryHalf and
// Attention nodes it matches):
//
//   Attention(RotaryHalf(q, cos, sin), Cache(past_k, RotaryHalf(k, cos, sin)), Cache(past_v, v), ...)
//   Cache(p, x) = Concat(p, x, axis 2), or for both caches onyx.genai CacheUpdate(p, x, index) with
//   one index
//   -> (q_rot, present_k, present_v) = RotaryCache(q, k, v, cos, sin, past_k, past_v[, index])
//
// It fires only where every piece has that form: the two RotaryHalf nodes with the same cos, sin
// and split; q, k, v and both pasts 4-D where the graph shows their rank; both pasts of one known
// float dtype (float32, float16 or bfloat16: the dtypes every other input then has, or the
// unfused graph would not run); the fused node placeable in the graph's order (after what it
// reads, before what reads its outputs). The rotated keys, when something besides their cache
// reads them, are still made (output 3). Anything else is left unfused. The generator's cache
// rewrite (passes/kv_cache.h) turns a Concat-form RotaryCache into the indexed, in-place form.
#pragma once

#include "model/ir.h"

namespace onyx {

struct RotaryCacheReport {
  int fused = 0;      // RotaryCache nodes made (one per layer)
  int keys_kept = 0;  // of them, also making the rotated keys (read elsewhere)
};

RotaryCacheReport fuse_rotary_cache(Graph& g);

// The rotary-attention fusion, on a graph after the rotary-cache fusion and the generator's cache
// rewrite (passes/kv_cache.h), which gives RotaryCache its index:
//
//   Attention(q_rot, present_k, present_v[, mask]; scale)
//     with (q_rot, present_k, present_v) = RotaryCache(q, k, v, cos, sin, past_k, past_v, index)
//   -> (q_rot, present_k, present_v, y) = RotaryCacheAttention(q, k, v, cos, sin, past_k, past_v, index[, mask])
//
// (ops/rotary_cache.cpp), so that a decode step's rotary embeddings, cache writes and attention
// are one kernel on CUDA. It fires where the RotaryCache makes no rotated keys of their own, the
// Attention reads nothing else (no past, no nonpad lengths), makes only Y, is not causal and has
// no softcap, q_rot is read by that Attention alone, and the fused node has a place in the
// graph's order. Returns how many it made.
int fuse_rotary_attention(Graph& g);

}  // namespace onyx
