// The KV-cache rewrite: a decoder whose present is Concat(past, new) (Optimum, torch.onnx)
// becomes one whose present is the past itself with the new keys and values written in
// place at a position given as data (onyx.genai::CacheUpdate). Fed a cache of fixed
// capacity and an attention mask over all of it, the rewritten decoder has one input
// signature for every decode step (DESIGN L11), and computes what the original computes
// over the valid positions.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/ir.h"

namespace onyx {

struct CacheRewrite {
  bool applied = false;
  std::string why_not;      // when not applied: which pair did not have the form, and how
  std::string index_input;  // the added input: int64, the first cache position a step writes (a scalar, or one per row)
  int position_ranges = 0;  // Range nodes rewritten to start at the index (positions_from_past)
};

// Rewrites every (past input, present output) pair of `pairs`, or none: each present must be
// the output of a Concat of that past input and one other value along the sequence axis (2
// of [batch, heads, positions, head size]), or a present of an onyx::RotaryCache of that past
// (the rotary-cache fusion's Concat form, passes/fuse_rotary_cache.h; both of its presents among
// the pairs), which is given the index and so writes in place. Adds the graph input `index_name`.
//
// Exporters also compute lengths from the past's shape (the key length as past length plus
// new positions, for masks). Fed the whole cache, the past's length would be the capacity and
// the key length one more than the cache holds, so every Shape of a past input is rewritten to
// read the capacity less the new positions (the length of `ids_input`'s axis 1): what the
// original decoder's past length is when its cache is full. The caller verifies the result.
//
// With `positions_from_past` (decoders with no position input: Whisper, BART and T5 as Optimum
// exports them), the positions the new tokens take come from the past's length too, as a
// Range(past length, past length + new); every Range whose start is computed from a past's shape
// (through Cast, Gather, Squeeze, Unsqueeze, Identity, Reshape, Slice) is rewritten to
// Range(0, end - start) + index (a length the plan knows from shapes: the step stays
// capturable), so that the queries sit at the filled length while the keys span the capacity
// (a causal mask over those positions then hides the unfilled ones). The index must then be a
// scalar.
CacheRewrite rewrite_concat_cache(Graph& g, const std::vector<std::pair<std::string, std::string>>& pairs,
                                  const std::string& ids_input, const std::string& index_name = "onyx_cache_index",
                                  bool positions_from_past = false);

}  // namespace onyx
