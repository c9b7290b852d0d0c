// The geometry of a com.microsoft GroupQueryAttention call (see ops/gqa.h).
#include "ops/gqa.h"

#include <algorithm>

namespace onyx {

using namespace gqa;

namespace {

constexpr const char* kInputNames[] = {"query",
                                       "key",
                                       "value",
                                       "past_key",
                                       "past_value",
                                       "seqlens_k",
                                       "total_sequence_length",
                                       "cos_cache",
                                       "sin_cache",
                                       "position_ids",
                                       "attention_bias",
                                       "head_sink",
                                       "k_scale",
                                       "v_scale",
                                       "q_norm_weight",
                                       "k_norm_weight",
                                       "query_seqlens"};
static_assert(sizeof(kInputNames) / sizeof(kInputNames[0]) == kNumInputs);

}  // namespace

const char* gqa::input_name(size_t i) { return i < kNumInputs ? kInputNames[i] : "(extra input)"; }

GqaAttrs gqa_attrs(const NodeView& n) {
  GqaAttrs a;
  ONYX_CHECK(n.has_attr("num_heads") && n.has_attr("kv_num_heads"),
             "GroupQueryAttention needs the num_heads and kv_num_heads attributes");
  a.num_heads = n.attr_int("num_heads");
  a.kv_num_heads = n.attr_int("kv_num_heads");
  ONYX_CHECK(a.num_heads > 0 && a.kv_num_heads > 0 && a.num_heads % a.kv_num_heads == 0, "num_heads ", a.num_heads,
             " must be a positive multiple of kv_num_heads ", a.kv_num_heads);
  a.scale = n.attr_float("scale", 0.f);
  a.softcap = n.attr_float("softcap", 0.f);
  ONYX_CHECK(a.softcap >= 0, "softcap must be >= 0, got ", a.softcap);
  a.window = n.attr_int("local_window_size", -1);
  ONYX_CHECK(a.window == -1 || a.window > 0, "local_window_size must be -1 (no window) or positive, got ", a.window);
  const int64_t causal = n.attr_int("causal", 1);
  ONYX_CHECK(causal == 0 || causal == 1, "causal must be 0 or 1, got ", causal);
  a.causal = causal == 1;
  ONYX_CHECK(a.causal || a.window == -1, "local_window_size needs causal=1");
  // As onnxruntime reads them: only 1 turns these on (smooth_softmax's schema default is -1).
  a.rotary = n.attr_int("do_rotary", 0) == 1;
  a.interleaved = n.attr_int("rotary_interleaved", 0) == 1;
  a.smooth = n.attr_int("smooth_softmax", 0) == 1;
  a.window_cache = n.attr_int("sliding_window_cache", 0) == 1;
  ONYX_CHECK(!a.window_cache || a.window > 0, "sliding_window_cache=1 needs local_window_size > 0");
  // What onyx does not implement, refused by name.
  ONYX_CHECK(n.attr_int("qk_output", 0) == 0, "qk_output is not supported by onyx");
  for (const char* q : {"k_quant_type", "v_quant_type"})
    ONYX_CHECK(n.attr_string(q, "NONE") == "NONE", q, "=", n.attr_string(q, ""),
               ": a quantized KV cache is not supported by onyx");
  ONYX_CHECK(n.attr_int("kv_cache_bit_width", 0) == 0, "kv_cache_bit_width is not supported by onyx");
  return a;
}

GqaGeometry gqa_geometry(const GqaAttrs& a, const std::vector<const Shape*>& in) {
  auto has = [&](size_t i) { return i < in.size() && in[i] != nullptr; };
  ONYX_CHECK(has(kQuery), "input 'query' is required");
  ONYX_CHECK(has(kSeqlensK) && has(kTotalSeqLen), "inputs 'seqlens_k' and 'total_sequence_length' are required");
  for (size_t i : {kKScale, kVScale})
    ONYX_CHECK(!has(i), "input '", input_name(i), "': a quantized KV cache is not supported by onyx");
  for (size_t i : {kQNormWeight, kKNormWeight})
    ONYX_CHECK(!has(i), "input '", input_name(i),
               "': the per-head Q/K RMS normalization is not supported by onyx (nor by onnxruntime's CPU kernel)");
  ONYX_CHECK(in.size() <= kQuerySeqlens + 1, "GroupQueryAttention takes at most ", kQuerySeqlens + 1, " inputs, got ",
             in.size());

  GqaGeometry g;
  g.N = a.num_heads;
  g.kvN = a.kv_num_heads;
  const Shape& q = *in[kQuery];
  ONYX_CHECK(q.rank() == 3, "input 'query' must be 3-D (batch, sequence, hidden), got ", q.str());
  g.B = q[0];
  g.S = q[1];
  ONYX_CHECK(has(kKey) == has(kValue), "inputs 'key' and 'value' must be given together (or both omitted for a ",
             "packed query)");
  g.packed = !has(kKey);
  if (g.packed) {
    ONYX_CHECK(q[2] % (g.N + 2 * g.kvN) == 0, "packed input 'query' of hidden size ", q[2],
               " does not split into num_heads + 2 * kv_num_heads = ", g.N + 2 * g.kvN, " heads");
    g.H = q[2] / (g.N + 2 * g.kvN);
  } else {
    ONYX_CHECK(q[2] % g.N == 0, "input 'query' hidden size ", q[2], " is not a multiple of num_heads ", g.N);
    g.H = q[2] / g.N;
    for (size_t i : {kKey, kValue}) {
      const Shape& k = *in[i];
      ONYX_CHECK(k.rank() == 3 && k[0] == g.B && k[1] == g.S && k[2] == g.kvN * g.H, "input '", input_name(i),
                 "' must be [", g.B, ", ", g.S, ", ", g.kvN * g.H,
                 "] (batch, sequence, kv_num_heads * head_size), got ", k.str());
    }
  }
  ONYX_CHECK(g.H > 0, "head size is 0 (query ", q.str(), ")");
  ONYX_CHECK(has(kPastKey) == has(kPastValue), "inputs 'past_key' and 'past_value' must be given together");
  if (has(kPastKey)) {
    const Shape& pk = *in[kPastKey];
    g.past_len = pk.rank() == 4 ? pk[2] : 0;
    for (size_t i : {kPastKey, kPastValue}) {
      const Shape& p = *in[i];
      ONYX_CHECK(p.rank() == 4 && p[0] == g.B && p[1] == g.kvN && p[2] == g.past_len && p[3] == g.H, "input '",
                 input_name(i), "' must be [", g.B, ", ", g.kvN, ", past, ", g.H,
                 "] (BNSH, past_key and past_value of one length), got ", p.str());
    }
  }
  if (a.window_cache) {
    ONYX_CHECK(has(kPastKey), "sliding_window_cache=1 needs past_key and past_value (the cache of its capacity)");
    ONYX_CHECK(g.past_len >= a.window, "sliding_window_cache=1: the cache capacity ", g.past_len,
               " (past_key's dimension 2) must be at least local_window_size ", a.window);
  }
  const Shape& sk = *in[kSeqlensK];
  ONYX_CHECK(sk.rank() == 1 && sk[0] == g.B, "input 'seqlens_k' must be [", g.B, "] (one length per row), got ",
             sk.str());
  ONYX_CHECK(in[kTotalSeqLen]->numel() == 1, "input 'total_sequence_length' must hold one value, got shape ",
             in[kTotalSeqLen]->str());
  ONYX_CHECK(has(kCosCache) == has(kSinCache), "inputs 'cos_cache' and 'sin_cache' must be given together");
  if (a.rotary) {
    ONYX_CHECK(has(kCosCache), "do_rotary=1 needs the inputs 'cos_cache' and 'sin_cache'");
    const Shape& c = *in[kCosCache];
    ONYX_CHECK(c.rank() == 2 && *in[kSinCache] == c, "inputs 'cos_cache' and 'sin_cache' must be equal 2-D shapes ",
               "(max_position, rotary_dim / 2), got ", c.str(), " and ", in[kSinCache]->str());
    g.half = c[1];
    g.cache_rows = c[0];
    ONYX_CHECK(g.cache_rows > 0, "input 'cos_cache' has no positions");
    ONYX_CHECK(g.half > 0 && 2 * g.half <= g.H, "input 'cos_cache' width ", g.half,
               " must be positive and at most head_size / 2 = ", g.H / 2);
  }
  if (has(kPositionIds)) {
    const Shape& p = *in[kPositionIds];
    ONYX_CHECK(p.rank() == 2 && p[0] == g.B && p[1] == g.S, "input 'position_ids' must be [", g.B, ", ", g.S, "], got ",
               p.str());
  }
  if (has(kAttentionBias)) {
    const Shape& b = *in[kAttentionBias];
    ONYX_CHECK(b.rank() == 4 && (b[0] == 1 || b[0] == g.B) && (b[1] == 1 || b[1] == g.N) && b[2] == g.S,
               "input 'attention_bias' must be [", g.B, " or 1, ", g.N, " or 1, ", g.S,
               ", total_sequence_length], got ", b.str());
  }
  if (has(kQuerySeqlens)) {
    const Shape& q = *in[kQuerySeqlens];
    ONYX_CHECK(q.rank() == 1 && q[0] == g.B, "input 'query_seqlens' must be [", g.B, "] (one count per row), got ",
               q.str());
    ONYX_CHECK(a.causal, "input 'query_seqlens' needs causal=1");
    ONYX_CHECK(has(kPastKey), "input 'query_seqlens' needs past_key and past_value");
  }
  if (has(kHeadSink)) {
    const Shape& h = *in[kHeadSink];
    ONYX_CHECK(h.rank() == 1 && h[0] == g.N, "input 'head_sink' must be [", g.N, "] (one per head), got ", h.str());
  }
  return g;
}

void check_gqa_dtypes(const std::vector<DType>& dt) {
  auto has = [&](size_t i) { return i < dt.size() && dt[i] != DType::kUndefined; };
  const DType t = dt[kQuery];
  ONYX_CHECK(dtype_is_float(t), "input 'query' must be a float tensor, got ", dtype_name(t));
  for (size_t i : {kKey, kValue, kPastKey, kPastValue, kCosCache, kSinCache, kAttentionBias, kHeadSink})
    if (has(i))
      ONYX_CHECK(dt[i] == t, "input '", input_name(i), "' has dtype ", dtype_name(dt[i]), ", but query has ",
                 dtype_name(t), i == kPastKey || i == kPastValue ? " (a quantized KV cache is not supported)" : "");
  for (size_t i : {kSeqlensK, kTotalSeqLen, kQuerySeqlens})
    if (has(i))
      ONYX_CHECK(dt[i] == DType::kInt32, "input '", input_name(i), "' must be int32, got ", dtype_name(dt[i]));
  if (has(kPositionIds))
    ONYX_CHECK(dt[kPositionIds] == DType::kInt64, "input 'position_ids' must be int64, got ",
               dtype_name(dt[kPositionIds]));
}

int64_t GqaGeometry::present_len(int64_t total, const GqaAttrs& a) const {
  ONYX_CHECK(total >= 1, "total_sequence_length must be at least 1, got ", total);
  return a.window_cache ? past_len : std::max(total, past_len);
}

int64_t window_cache_held(int64_t T, int64_t capacity, int64_t window) {
  if (T <= capacity) return T;
  const int64_t gap = capacity - window + 1;  // rows reclaimed at once
  return T - gap * ((T - capacity + gap - 1) / gap);
}

GqaStep gqa_step(const GqaAttrs& a, const GqaGeometry& g, int64_t total, const int32_t* seqlens_k,
                 const int32_t* query_seqlens, int64_t bias_len) {
  GqaStep st;
  const int64_t B = g.B, S = g.S;
  st.present_len = g.present_len(total, a);
  const int64_t L = st.present_len;
  // Which kind of step this is, as onnxruntime decides it (query_seqlens says it per row).
  st.first_prompt = !query_seqlens && S == total;
  ONYX_CHECK(query_seqlens || S == 1 || st.first_prompt || B == 1, "sequence_length ", S,
             " differs from total_sequence_length ", total, " (a prompt after a past): that needs batch size 1, got ",
             B);
  st.rows.resize(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    GqaRow& r = st.rows[b];
    const int32_t sk = seqlens_k[b];
    ONYX_CHECK(sk >= 0, "seqlens_k[", b, "] = ", sk, " is negative");
    r.total = int64_t{sk} + 1;
    r.valid = S;
    if (query_seqlens) {  // right-padded chunk: only its first query_seqlens[b] tokens are real
      r.valid = query_seqlens[b];
      ONYX_CHECK(r.valid >= 0 && r.valid <= std::min(S, r.total), "query_seqlens[", b, "] = ", r.valid,
                 " must be in [0, min(sequence_length ", S, ", seqlens_k[", b, "] + 1 = ", r.total, ")]");
      ONYX_CHECK(r.total <= total, "seqlens_k[", b, "] + 1 = ", r.total, " exceeds total_sequence_length ", total,
                 " (with query_seqlens it bounds every row)");
    }
    if (a.window_cache) {
      // Positions are absolute and the cache holds the last ones; the prompt rule does not apply.
      r.past = r.total - r.valid;
      ONYX_CHECK(r.past >= 0, "seqlens_k[", b, "] = ", sk, " is too small for sequence_length ", S,
                 " (a row cannot hold fewer tokens than this step adds)");
      r.held_before = window_cache_held(r.past, L, a.window);
      r.held_after = window_cache_held(r.total, L, a.window);
    } else {
      ONYX_CHECK(r.total <= L, "seqlens_k[", b, "] = ", sk, " is out of range [0, ", L, ") (the present buffer holds ",
                 L, " positions)");
      r.past = st.first_prompt ? 0 : r.total - r.valid;
      ONYX_CHECK(r.past >= 0, "seqlens_k[", b, "] = ", sk, " is too small for sequence_length ", S,
                 " (a row cannot hold fewer tokens than this step adds)");
      ONYX_CHECK(r.past <= g.past_len, "seqlens_k[", b, "] = ", sk, " needs ", r.past,
                 " past positions, but past_key holds ", g.past_len);
      ONYX_CHECK(r.past + S <= L, "row ", b, " writes positions up to ", r.past + S, ", beyond the present buffer of ",
                 L);
      r.held_before = r.past;
      r.held_after = r.past + r.valid;
    }
    if (bias_len >= 0)
      ONYX_CHECK(r.total <= bias_len, "seqlens_k[", b, "] = ", sk,
                 " reaches past the last dimension of attention_bias (", bias_len, ")");
  }
  return st;
}

}  // namespace onyx
