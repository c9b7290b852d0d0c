// com.microsoft GroupQueryAttention: the attention of onnxruntime-genai's decoders, with its
// KV cache in BNSH buffers that the caller may share between past and present.
//
// Semantics, as onnxruntime's CPU kernel behaves (observed by running it):
// - Row b holds T_b = seqlens_k[b] + 1 tokens after this step. Its past length is
//   P_b = 0 on a first prompt (sequence_length == total_sequence_length), else T_b - S.
// - present has max(total_sequence_length, past length) positions. The S new keys and
//   values of row b go to positions [P_b, P_b + S). When present is past's own storage
//   (a shared buffer), only those positions are written; otherwise present is past's
//   positions followed by zeros, then the new entries, so both bindings leave the same
//   bytes at every position.
// - Query s of row b is at position P_b + s. It attends to keys [lo, hi) with
//   hi = min(P_b + s + 1, T_b) (causal) or T_b (causal = 0), and lo = hi' - local_window_size
//   with hi' = P_b + s + 1 when a window is set. An empty range gives zeros.
// - Scores: q.k * scale, then softcap * tanh(x / softcap), then + attention_bias[b, h, s, key];
//   softmax, with exp(head_sink[h]) (or exp(0) for smooth_softmax) added to the denominator.
// - Rotary (do_rotary): queries and keys rotated at their positions, which are P_b + s, or
//   position_ids[b, s]; on a first prompt position_ids[0, 0] + s for every row, as onnxruntime.
// - Query head h reads KV head h / (num_heads / kv_num_heads).
// The kernel accumulates in double and rounds rotated values and outputs to the input type.
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/attention_math.h"
#include "ops/common.h"
#include "ops/rotary.h"

namespace onyx {

namespace {

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
};

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

// The attributes, checked once.
struct GqaAttrs {
  int64_t num_heads = 0, kv_num_heads = 0;
  double scale = 0;  // 0: 1/sqrt(head_size)
  double softcap = 0;
  int64_t window = -1;
  bool causal = true, rotary = false, interleaved = false, smooth = false;
};

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
  // What onyx does not implement, refused by name.
  ONYX_CHECK(n.attr_int("sliding_window_cache", 0) == 0,
             "sliding_window_cache=1 (a window-sized KV cache) is not supported by onyx");
  ONYX_CHECK(n.attr_int("qk_output", 0) == 0, "qk_output is not supported by onyx");
  for (const char* q : {"k_quant_type", "v_quant_type"})
    ONYX_CHECK(n.attr_string(q, "NONE") == "NONE", q, "=", n.attr_string(q, ""),
               ": a quantized KV cache is not supported by onyx");
  ONYX_CHECK(n.attr_int("kv_cache_bit_width", 0) == 0, "kv_cache_bit_width is not supported by onyx");
  return a;
}

// The sizes of one call, from the input shapes (null: input absent).
struct GqaGeometry {
  int64_t B = 0, S = 0, N = 0, kvN = 0, H = 0;
  bool packed = false;   // query holds Q, K and V
  int64_t past_len = 0;  // positions in past_key (0 without a past)
  int64_t half = 0;      // rotary: the caches' width (rotated values per head / 2)
  int64_t cache_rows = 0;
};

GqaGeometry gqa_geometry(const GqaAttrs& a, const std::vector<const Shape*>& in) {
  auto has = [&](size_t i) { return i < in.size() && in[i] != nullptr; };
  ONYX_CHECK(has(kQuery), "input 'query' is required");
  ONYX_CHECK(has(kSeqlensK) && has(kTotalSeqLen), "inputs 'seqlens_k' and 'total_sequence_length' are required");
  for (size_t i : {kKScale, kVScale})
    ONYX_CHECK(!has(i), "input '", kInputNames[i], "': a quantized KV cache is not supported by onyx");
  for (size_t i : {kQNormWeight, kKNormWeight})
    ONYX_CHECK(!has(i), "input '", kInputNames[i],
               "': the per-head Q/K RMS normalization is not supported by onyx (nor by onnxruntime's CPU kernel)");
  ONYX_CHECK(!has(kQuerySeqlens), "input 'query_seqlens' (right-padded query chunks) is not supported by onyx");
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
      ONYX_CHECK(k.rank() == 3 && k[0] == g.B && k[1] == g.S && k[2] == g.kvN * g.H, "input '", kInputNames[i],
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
                 kInputNames[i], "' must be [", g.B, ", ", g.kvN, ", past, ", g.H,
                 "] (BNSH, past_key and past_value of one length), got ", p.str());
    }
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
  if (has(kHeadSink)) {
    const Shape& h = *in[kHeadSink];
    ONYX_CHECK(h.rank() == 1 && h[0] == g.N, "input 'head_sink' must be [", g.N, "] (one per head), got ", h.str());
  }
  return g;
}

void check_dtypes(const std::vector<DType>& dt) {
  auto has = [&](size_t i) { return i < dt.size() && dt[i] != DType::kUndefined; };
  const DType t = dt[kQuery];
  ONYX_CHECK(dtype_is_float(t), "input 'query' must be a float tensor, got ", dtype_name(t));
  for (size_t i : {kKey, kValue, kPastKey, kPastValue, kCosCache, kSinCache, kAttentionBias, kHeadSink})
    if (has(i))
      ONYX_CHECK(dt[i] == t, "input '", kInputNames[i], "' has dtype ", dtype_name(dt[i]), ", but query has ",
                 dtype_name(t), i == kPastKey || i == kPastValue ? " (a quantized KV cache is not supported)" : "");
  for (size_t i : {kSeqlensK, kTotalSeqLen})
    ONYX_CHECK(dt[i] == DType::kInt32, "input '", kInputNames[i], "' must be int32, got ", dtype_name(dt[i]));
  if (has(kPositionIds))
    ONYX_CHECK(dt[kPositionIds] == DType::kInt64, "input 'position_ids' must be int64, got ",
               dtype_name(dt[kPositionIds]));
}

int64_t present_length(int64_t total, const GqaGeometry& g) {
  ONYX_CHECK(total >= 1, "total_sequence_length must be at least 1, got ", total);
  return std::max(total, g.past_len);
}

void infer_gqa(InferContext& ctx) {
  const GqaAttrs a = gqa_attrs(ctx);
  ONYX_CHECK(!ctx.has_output(3), "output 'output_qk' is not supported by onyx");
  std::vector<DType> dts(ctx.num_inputs(), DType::kUndefined);
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) dts[i] = ctx.input_dtype(i);
  ONYX_CHECK(ctx.num_inputs() > kTotalSeqLen, "GroupQueryAttention needs at least ", kTotalSeqLen + 1, " inputs");
  check_dtypes(dts);
  const DType t = ctx.input_dtype(kQuery);
  bool known = true;
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) known &= ctx.input_shape(i).fully_known();
  if (!known) {
    for (size_t o = 0; o < 3; ++o)
      if (ctx.has_output(o)) ctx.set_output(o, t, PartialShape());
    return;
  }
  std::vector<Shape> shapes(ctx.num_inputs());
  std::vector<const Shape*> in(ctx.num_inputs(), nullptr);
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) {
      shapes[i] = ctx.input_concrete_shape(i);
      in[i] = &shapes[i];
    }
  const GqaGeometry g = gqa_geometry(a, in);
  ctx.set_output(0, t, Shape{g.B, g.S, g.N * g.H});
  PartialShape present = PartialShape::of_rank(4);
  present.dims = {g.B, g.kvN, PartialShape::kUnknown, g.H};
  if (const Tensor* total = ctx.input_value(kTotalSeqLen)) present.dims[2] = present_length(total->get_as_int64(0), g);
  for (size_t o : {1, 2})
    if (ctx.has_output(o)) ctx.set_output(o, t, present);
}

// Whether `a` and `b` share bytes; throws when they overlap without being the same tensor.
bool same_buffer(const Tensor& past, const Tensor& present, const char* name) {
  const char* p0 = static_cast<const char*>(past.raw());
  const char* q0 = static_cast<const char*>(present.raw());
  if (p0 == q0) {
    ONYX_CHECK(past.shape() == present.shape(), name, " shares past's buffer but has shape ", present.shape().str(),
               " instead of past's ", past.shape().str(), " (total_sequence_length exceeds the shared buffer)");
    return true;
  }
  ONYX_CHECK(q0 + present.bytes() <= p0 || p0 + past.bytes() <= q0, name,
             " partially overlaps its past input: it must be the same buffer or a separate one");
  return false;
}

template <class T>
void gqa_kernel(KernelContext& ctx) {
  const GqaAttrs a = gqa_attrs(ctx);
  ONYX_CHECK(!ctx.has_output(3), "output 'output_qk' is not supported by onyx");
  std::vector<const Shape*> in(ctx.num_inputs(), nullptr);
  std::vector<DType> dts(ctx.num_inputs(), DType::kUndefined);
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) {
      in[i] = &ctx.input(i).shape();
      dts[i] = ctx.input(i).dtype();
    }
  check_dtypes(dts);
  const GqaGeometry g = gqa_geometry(a, in);
  const int64_t B = g.B, S = g.S, N = g.N, kvN = g.kvN, H = g.H;
  const int64_t total = ctx.input(kTotalSeqLen).get_as_int64(0);
  const int64_t L = present_length(total, g);

  // Which kind of step this is, as onnxruntime decides it.
  const bool first_prompt = S == total;
  ONYX_CHECK(S == 1 || first_prompt || B == 1, "sequence_length ", S, " differs from total_sequence_length ", total,
             " (a prompt after a past): that needs batch size 1, got ", B);
  const int32_t* seqlens = ctx.input(kSeqlensK).data<int32_t>();
  std::vector<int64_t> rows(B), past(B);  // T_b and P_b
  for (int64_t b = 0; b < B; ++b) {
    rows[b] = int64_t{seqlens[b]} + 1;
    ONYX_CHECK(rows[b] >= 1 && rows[b] <= L, "seqlens_k[", b, "] = ", seqlens[b], " is out of range [0, ", L,
               ") (the present buffer holds ", L, " positions)");
    past[b] = first_prompt ? 0 : rows[b] - S;
    ONYX_CHECK(past[b] >= 0, "seqlens_k[", b, "] = ", seqlens[b], " is too small for sequence_length ", S,
               " (a row cannot hold fewer tokens than this step adds)");
    ONYX_CHECK(past[b] <= g.past_len, "seqlens_k[", b, "] = ", seqlens[b], " needs ", past[b],
               " past positions, but past_key holds ", g.past_len);
    ONYX_CHECK(past[b] + S <= L, "row ", b, " writes positions up to ", past[b] + S, ", beyond the present buffer of ",
               L);
    if (ctx.has_input(kAttentionBias))
      ONYX_CHECK(rows[b] <= ctx.input(kAttentionBias).shape()[3], "seqlens_k[", b, "] = ", seqlens[b],
                 " reaches past the last dimension of attention_bias (", ctx.input(kAttentionBias).shape()[3], ")");
  }

  // The new queries, keys and values, as [B, heads, S, H].
  std::vector<T> q(static_cast<size_t>(B * N * S * H)), k(static_cast<size_t>(B * kvN * S * H)), v(k.size());
  {
    const T* pq = ctx.input(kQuery).data<T>();
    const int64_t qw = g.packed ? (N + 2 * kvN) * H : N * H;  // query's row width
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        const T* row = pq + (b * S + s) * qw;
        for (int64_t h = 0; h < N; ++h) std::memcpy(&q[((b * N + h) * S + s) * H], row + h * H, sizeof(T) * H);
        for (int64_t h = 0; h < kvN; ++h) {
          const T* kr = g.packed ? row + (N + h) * H : ctx.input(kKey).data<T>() + (b * S + s) * kvN * H + h * H;
          const T* vr =
              g.packed ? row + (N + kvN + h) * H : ctx.input(kValue).data<T>() + (b * S + s) * kvN * H + h * H;
          std::memcpy(&k[((b * kvN + h) * S + s) * H], kr, sizeof(T) * H);
          std::memcpy(&v[((b * kvN + h) * S + s) * H], vr, sizeof(T) * H);
        }
      }
  }

  if (a.rotary) {
    std::vector<int64_t> pos(static_cast<size_t>(B * S));
    const Tensor* pids = ctx.has_input(kPositionIds) ? &ctx.input(kPositionIds) : nullptr;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        int64_t p = past[b] + s;
        if (pids) p = first_prompt ? pids->data<int64_t>()[0] + s : pids->data<int64_t>()[b * S + s];
        ONYX_CHECK(p >= 0 && p < g.cache_rows, "row ", b, " token ", s, " is at position ", p, ", outside cos_cache's ",
                   g.cache_rows, " positions");
        pos[b * S + s] = p;
      }
    const Tensor& cosc = ctx.input(kCosCache);
    const Tensor& sinc = ctx.input(kSinCache);
    auto cs = [&](int64_t b, int64_t s, int64_t j) {
      const int64_t i = pos[b * S + s] * g.half + j;
      return std::pair<double, double>{cosc.get_as_double(i), sinc.get_as_double(i)};
    };
    rotate(
        q.data(), q.data(), B, S, N, H, 2 * g.half, a.interleaved,
        [&](int64_t b, int64_t s, int64_t h) { return ((b * N + h) * S + s) * H; }, cs);
    rotate(
        k.data(), k.data(), B, S, kvN, H, 2 * g.half, a.interleaved,
        [&](int64_t b, int64_t s, int64_t h) { return ((b * kvN + h) * S + s) * H; }, cs);
  }

  // The present buffers: past's positions (unless they are past's own storage), then
  // the new entries at each row's positions.
  const Shape present_shape{B, kvN, L, H};
  Tensor scratch[2];
  T* present[2];
  for (int i = 0; i < 2; ++i) {
    const size_t out = 1 + i;
    Tensor& pt = ctx.has_output(out) ? ctx.output(out) : (scratch[i] = Tensor(dtype_of<T>, present_shape));
    ONYX_CHECK(pt.shape() == present_shape, "present output has shape ", pt.shape().str(), ", expected ",
               present_shape.str());
    present[i] = pt.data<T>();
    const size_t past_in = i == 0 ? kPastKey : kPastValue;
    const char* name = i == 0 ? "present_key" : "present_value";
    if (ctx.has_input(past_in) && same_buffer(ctx.input(past_in), pt, name)) continue;
    std::fill(present[i], present[i] + present_shape.numel(), T{});
    if (!ctx.has_input(past_in)) continue;
    const T* pp = ctx.input(past_in).data<T>();
    for (int64_t bh = 0; bh < B * kvN; ++bh)
      std::memcpy(present[i] + bh * L * H, pp + bh * g.past_len * H, sizeof(T) * g.past_len * H);
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < kvN; ++h)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t dst = ((b * kvN + h) * L + past[b] + s) * H, src = ((b * kvN + h) * S + s) * H;
        std::memcpy(present[0] + dst, &k[src], sizeof(T) * H);
        std::memcpy(present[1] + dst, &v[src], sizeof(T) * H);
      }

  // Attention, one query at a time.
  const double scale = a.scale != 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(H));
  const Tensor* bias = ctx.has_input(kAttentionBias) ? &ctx.input(kAttentionBias) : nullptr;
  const Tensor* sink = ctx.has_input(kHeadSink) ? &ctx.input(kHeadSink) : nullptr;
  T* y = ctx.output(0).data<T>();
  const int64_t group = N / kvN;
  std::vector<double> score, acc(static_cast<size_t>(H));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < N; ++h) {
      const T* kh = present[0] + (b * kvN + h / group) * L * H;
      const T* vh = present[1] + (b * kvN + h / group) * L * H;
      // A sink is one more logit in the softmax that contributes no value.
      const double sink_logit = sink ? sink->get_as_double(h) : 0.0;
      const double* sink_ptr = a.smooth || sink ? &sink_logit : nullptr;
      for (int64_t s = 0; s < S; ++s) {
        const T* qs = &q[((b * N + h) * S + s) * H];
        const int64_t causal_end = past[b] + s + 1;
        const int64_t hi = a.causal ? std::min(causal_end, rows[b]) : rows[b];
        const int64_t lo = std::min(hi, a.window > 0 ? std::max<int64_t>(0, causal_end - a.window) : 0);
        score.assign(static_cast<size_t>(hi - lo), 0.0);
        for (int64_t j = lo; j < hi; ++j) {
          double dot = 0;
          for (int64_t x = 0; x < H; ++x)
            dot += static_cast<double>(static_cast<compute_t<T>>(qs[x])) *
                   static_cast<double>(static_cast<compute_t<T>>(kh[j * H + x]));
          double sc = dot * scale;
          if (a.softcap > 0) sc = a.softcap * std::tanh(sc / a.softcap);
          if (bias) {
            const Shape& bs = bias->shape();
            const int64_t bi = (((bs[0] == 1 ? 0 : b) * bs[1] + (bs[1] == 1 ? 0 : h)) * S + s) * bs[3] + j;
            sc += bias->get_as_double(bi);
          }
          score[j - lo] = sc;
        }
        softmax_weighted_sum(
            score, hi > lo ? sink_ptr : nullptr, H,
            [&](int64_t j, int64_t x) { return static_cast<double>(static_cast<compute_t<T>>(vh[(lo + j) * H + x])); },
            acc.data());
        T* ys = y + (b * S + s) * N * H + h * H;
        for (int64_t x = 0; x < H; ++x) ys[x] = static_cast<T>(static_cast<compute_t<T>>(acc[x]));
      }
    }
}

}  // namespace

void register_group_query_attention_ops(OpRegistry& r) {
  r.add(domain_op("com.microsoft", "GroupQueryAttention", 1, infer_gqa, [](KernelContext& ctx) {
          dispatch<FloatTypes>(ctx.input(kQuery).dtype(), "GroupQueryAttention",
                               [&](auto tag) { gqa_kernel<typename decltype(tag)::type>(ctx); });
        }).reads_values({kTotalSeqLen}));
}

}  // namespace onyx
