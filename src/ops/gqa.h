// The geometry of a com.microsoft GroupQueryAttention call: its attributes, the sizes its
// input shapes give, and where each row's tokens are in this step, checked once here and
// shared by shape inference and every backend's kernel (as ops/rotary.h for RotaryEmbedding).
// The semantics are onnxruntime's CPU kernel's, as observed by running it; the kernel's file
// (group_query_attention.cpp) describes them.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/op.h"

namespace onyx {

namespace gqa {

enum Input : size_t {
  kQuery,
  kKey,
  kValue,
  kPastKey,
  kPastValue,
  kSeqlensK,
  kTotalSeqLen,
  kCosCache,
  kSinCache,
  kPositionIds,
  kAttentionBias,
  kHeadSink,
  kKScale,
  kVScale,
  kQNormWeight,
  kKNormWeight,
  kQuerySeqlens,
  kNumInputs,
};

// "query", "key", ... by Input.
const char* input_name(size_t i);

}  // namespace gqa

struct GqaAttrs {
  int64_t num_heads = 0, kv_num_heads = 0;
  double scale = 0;  // 0: 1/sqrt(head_size)
  double softcap = 0;
  int64_t window = -1;        // local_window_size; -1: none
  bool window_cache = false;  // sliding_window_cache: past/present hold the last positions only
  bool causal = true, rotary = false, interleaved = false, smooth = false;
};

// Reads and checks the attributes; refuses by name what onyx does not implement.
GqaAttrs gqa_attrs(const NodeView& n);

// The sizes of one call, from the input shapes (null: input absent).
struct GqaGeometry {
  int64_t B = 0, S = 0, N = 0, kvN = 0, H = 0;
  bool packed = false;   // query holds Q, K and V
  int64_t past_len = 0;  // positions in past_key (0 without a past); the capacity of a window cache
  int64_t half = 0;      // rotary: the caches' width (rotated values per head / 2)
  int64_t cache_rows = 0;
  // Positions in present for a total_sequence_length: max(total, past) (a window cache: its capacity).
  int64_t present_len(int64_t total, const GqaAttrs& a) const;
};

GqaGeometry gqa_geometry(const GqaAttrs& a, const std::vector<const Shape*>& in);

// Checks the inputs' dtypes (kUndefined: input absent), naming the input that is wrong.
void check_gqa_dtypes(const std::vector<DType>& dt);

// Where row b's tokens are in this step.
struct GqaRow {
  int64_t total = 0;  // T_b = seqlens_k[b] + 1: the row's tokens after this step
  int64_t past = 0;   // P_b: the row's tokens before it; its new tokens are at positions [P_b, P_b + valid)
  int64_t valid = 0;  // the step's real tokens in this row: S, or query_seqlens[b] (the rest is padding)
  // Rows of past/present holding positions: before the step past's rows [0, held_before) hold
  // positions [P_b - held_before, P_b), after it present's rows [0, held_after) hold
  // [T_b - held_after, T_b). Without a window cache row p holds position p (held_before = P_b).
  int64_t held_before = 0, held_after = 0;
};

struct GqaStep {
  bool first_prompt = false;  // sequence_length == total_sequence_length
  int64_t present_len = 0;
  std::vector<GqaRow> rows;
};

// The step from total_sequence_length, seqlens_k and query_seqlens (null when absent: every
// token is real; given: a right-padded chunk, P_b = T_b - query_seqlens[b] and no first-prompt
// rule); `bias_len` is attention_bias's last dimension (-1 without one). Throws naming the row
// whose lengths do not fit.
GqaStep gqa_step(const GqaAttrs& a, const GqaGeometry& g, int64_t total, const int32_t* seqlens_k,
                 const int32_t* query_seqlens, int64_t bias_len);

// A window cache of `capacity` rows for a window of `window` positions holds the most recent
// of T positions in rows [0, window_cache_held(T)): T while it fits, then whole blocks of
// capacity - window + 1 rows are reclaimed at once (onnxruntime's layout).
int64_t window_cache_held(int64_t T, int64_t capacity, int64_t window);

}  // namespace onyx
