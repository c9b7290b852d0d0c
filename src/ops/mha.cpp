// The geometry of a com.microsoft MultiHeadAttention call (see ops/mha.h).
#include "ops/mha.h"

namespace onyx {

using namespace mha;

namespace {

constexpr const char* kInputNames[] = {"query",
                                       "key",
                                       "value",
                                       "bias",
                                       "key_padding_mask",
                                       "attention_bias",
                                       "past_key",
                                       "past_value",
                                       "past_sequence_length",
                                       "cache_indirection"};
static_assert(sizeof(kInputNames) / sizeof(kInputNames[0]) == kNumInputs);

}  // namespace

const char* mha::input_name(size_t i) { return i < kNumInputs ? kInputNames[i] : "(extra input)"; }

MhaAttrs mha_attrs(const NodeView& n) {
  ONYX_CHECK(n.has_attr("num_heads"), "MultiHeadAttention needs the num_heads attribute");
  MhaAttrs a;
  a.num_heads = n.attr_int("num_heads");
  ONYX_CHECK(a.num_heads > 0, "num_heads must be positive, got ", a.num_heads);
  a.scale = n.attr_float("scale", 0.f);
  a.mask_filter_value = n.attr_float("mask_filter_value", -10000.f);
  a.unidirectional = n.attr_int("unidirectional", 0) == 1;
  return a;
}

MhaGeometry mha_geometry(const MhaAttrs& a, const std::vector<const Shape*>& in) {
  auto has = [&](size_t i) { return i < in.size() && in[i] != nullptr; };
  MhaGeometry g;
  g.N = a.num_heads;
  ONYX_CHECK(in.size() <= kNumInputs, "MultiHeadAttention takes at most ", size_t{kNumInputs}, " inputs, got ",
             in.size());
  for (size_t i : {kPastSequenceLength, kCacheIndirection})
    ONYX_CHECK(!has(i), "input '", kInputNames[i], "' (decoder-masked attention with beam search) is not supported ",
               "by onyx");
  ONYX_CHECK(has(kQuery), "input 'query' is required");
  const Shape& q = *in[kQuery];
  ONYX_CHECK(q.rank() != 5, "packed QKV query ", q.str(), " is not supported (nor by onnxruntime's CPU kernel)");
  ONYX_CHECK(q.rank() == 3, "input 'query' must be 3-D (batch, sequence, hidden), got ", q.str());
  g.B = q[0];
  g.S = q[1];
  ONYX_CHECK(q[2] % g.N == 0, "input 'query' hidden size ", q[2], " is not a multiple of num_heads ", g.N);
  g.H = q[2] / g.N;
  ONYX_CHECK(has(kKey) && has(kValue), "inputs 'key' and 'value' are required (packed QKV and packed KV are not ",
             "supported)");
  const Shape& k = *in[kKey];
  const Shape& v = *in[kValue];
  ONYX_CHECK(k.rank() != 5, "packed KV key ", k.str(), " is not supported (nor by onnxruntime's CPU kernel)");
  if (k.rank() == 4) {
    g.kv_bnsh = true;
    ONYX_CHECK(k[0] == g.B && k[1] == g.N && k[3] == g.H, "4-D input 'key' must be [", g.B, ", ", g.N, ", L, ", g.H,
               "] (BNSH), got ", k.str());
    g.L = k[2];
    ONYX_CHECK(v.rank() == 4 && v[0] == g.B && v[1] == g.N && v[2] == g.L, "input 'value' must be [", g.B, ", ", g.N,
               ", ", g.L, ", v_head_size] like key, got ", v.str());
    g.Hv = v[3];
    ONYX_CHECK(!has(kPastKey) && !has(kPastValue), "past_key/past_value cannot be given with 4-D (BNSH) key and value");
  } else {
    ONYX_CHECK(k.rank() == 3 && k[0] == g.B && k[2] == g.N * g.H, "input 'key' must be [", g.B, ", L, ", g.N * g.H,
               "], got ", k.str());
    g.L = k[1];
    ONYX_CHECK(v.rank() == 3 && v[0] == g.B && v[1] == g.L && v[2] % g.N == 0, "input 'value' must be [", g.B, ", ",
               g.L, ", num_heads * v_head_size], got ", v.str());
    g.Hv = v[2] / g.N;
  }
  if (has(kBias)) {
    const Shape& b = *in[kBias];
    ONYX_CHECK(b.rank() == 1 && b[0] == 2 * g.N * g.H + g.N * g.Hv, "input 'bias' must be [",
               2 * g.N * g.H + g.N * g.Hv, "] (query, key and value biases), got ", b.str());
  }
  ONYX_CHECK(has(kPastKey) == has(kPastValue), "inputs 'past_key' and 'past_value' must be given together");
  if (has(kPastKey)) {
    const Shape& pk = *in[kPastKey];
    const Shape& pv = *in[kPastValue];
    ONYX_CHECK(pk.rank() == 4 && pk[0] == g.B && pk[1] == g.N && pk[3] == g.H, "input 'past_key' must be [", g.B, ", ",
               g.N, ", past, ", g.H, "], got ", pk.str());
    g.P = pk[2];
    ONYX_CHECK(pv.rank() == 4 && pv[0] == g.B && pv[1] == g.N && pv[2] == g.P && pv[3] == g.Hv,
               "input 'past_value' must be [", g.B, ", ", g.N, ", ", g.P, ", ", g.Hv, "], got ", pv.str());
  }
  const int64_t T = g.T();
  if (has(kKeyPaddingMask)) {
    const Shape& m = *in[kKeyPaddingMask];
    const bool ok = (m.rank() == 1 && m[0] == g.B) || (m.rank() == 2 && m[0] == g.B && m[1] == T) ||
                    (m.rank() == 3 && m[0] == g.B && m[1] == g.S && m[2] == T);
    ONYX_CHECK(ok, "input 'key_padding_mask' must be [", g.B, "], [", g.B, ", ", T, "] or [", g.B, ", ", g.S, ", ", T,
               "] (total sequence ", T, "), got ", m.str());
  }
  if (has(kAttentionBias)) {
    const Shape& b = *in[kAttentionBias];
    ONYX_CHECK(b.rank() == 4 && (b[0] == 1 || b[0] == g.B) && (b[1] == 1 || b[1] == g.N) && b[2] == g.S && b[3] == T,
               "input 'attention_bias' must be [", g.B, " or 1, ", g.N, " or 1, ", g.S, ", ", T, "], got ", b.str());
  }
  if (a.unidirectional)
    ONYX_CHECK(g.L == g.S, "unidirectional=1 needs key and query of one length, got ", g.L, " keys for ", g.S,
               " queries");
  return g;
}

void check_mha_dtypes(const std::vector<DType>& dt) {
  auto has = [&](size_t i) { return i < dt.size() && dt[i] != DType::kUndefined; };
  ONYX_CHECK(has(kQuery), "input 'query' is required");
  const DType t = dt[kQuery];
  ONYX_CHECK(dtype_is_float(t), "input 'query' must be a float tensor, got ", dtype_name(t));
  for (size_t i : {kKey, kValue, kBias, kAttentionBias, kPastKey, kPastValue})
    if (has(i))
      ONYX_CHECK(dt[i] == t, "input '", kInputNames[i], "' has dtype ", dtype_name(dt[i]), ", but query has ",
                 dtype_name(t));
  if (has(kKeyPaddingMask))
    ONYX_CHECK(dt[kKeyPaddingMask] == DType::kInt32, "input 'key_padding_mask' must be int32, got ",
               dtype_name(dt[kKeyPaddingMask]));
}

}  // namespace onyx
