// com.microsoft MultiHeadAttention (Optimum-style exports: BERT, T5, Whisper), in the forms
// that onnxruntime's CPU kernel takes; semantics as it behaves (observed by running it):
// - query [B, S, N*H]; key [B, L, N*H] and value [B, L, N*Hv], or key [B, N, L, H] and value
//   [B, N, L, Hv] already split into heads (a cross-attention cache; then past must be absent).
// - bias [2*N*H + N*Hv] is added to query, key and value; with BNSH key/value only its query
//   part is used, as onnxruntime does.
// - past_key/past_value [B, N, P, H|Hv] come before the new keys: present = concat(past, new),
//   T = P + L keys.
// - key_padding_mask int32 [B] (valid key count per row), [B, T] or [B, S, T] (0 = masked):
//   a masked key's score gets mask_filter_value (default -10000) added.
// - attention_bias [B|1, N|1, S, T] is added to the scores.
// - unidirectional: query s sees keys j <= P + s (others removed from the softmax).
// Refused: packed QKV [B, L, N, 3, H] and packed KV (not on onnxruntime's CPU either), the
// [3*B + 2] mask, past_sequence_length and cache_indirection (decoder-masked attention), the qk
// output, and unidirectional with key and query of different lengths.
#include <cmath>
#include <limits>

#include "ops/attention_math.h"
#include "ops/common.h"

namespace onyx {

namespace {

enum Input : size_t {
  kQuery,
  kKey,
  kValue,
  kBias,
  kKeyPaddingMask,
  kAttentionBias,
  kPastKey,
  kPastValue,
  kPastSequenceLength,
  kCacheIndirection,
};

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

struct MhaGeometry {
  int64_t B = 0, S = 0, L = 0, N = 0, H = 0, Hv = 0, P = 0;
  bool kv_bnsh = false;  // key/value given as [B, N, L, H]
  int64_t T() const { return P + L; }
};

MhaGeometry mha_geometry(const NodeView& n, const std::vector<const Shape*>& in) {
  auto has = [&](size_t i) { return i < in.size() && in[i] != nullptr; };
  ONYX_CHECK(n.has_attr("num_heads"), "MultiHeadAttention needs the num_heads attribute");
  MhaGeometry g;
  g.N = n.attr_int("num_heads");
  ONYX_CHECK(g.N > 0, "num_heads must be positive, got ", g.N);
  ONYX_CHECK(in.size() <= kCacheIndirection + 1, "MultiHeadAttention takes at most ", kCacheIndirection + 1,
             " inputs, got ", in.size());
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
  if (n.attr_int("unidirectional", 0) == 1)
    ONYX_CHECK(g.L == g.S, "unidirectional=1 needs key and query of one length, got ", g.L, " keys for ", g.S,
               " queries");
  return g;
}

void check_dtypes(const std::vector<DType>& dt) {
  auto has = [&](size_t i) { return i < dt.size() && dt[i] != DType::kUndefined; };
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

void infer_mha(InferContext& ctx) {
  ONYX_CHECK(!ctx.has_output(3), "output 'qk' is not supported by onyx");
  std::vector<DType> dt(ctx.num_inputs(), DType::kUndefined);
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) dt[i] = ctx.input_dtype(i);
  check_dtypes(dt);
  const DType t = dt[kQuery];
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
  const MhaGeometry g = mha_geometry(ctx, in);
  ctx.set_output(0, t, Shape{g.B, g.S, g.N * g.Hv});
  if (ctx.has_output(1)) ctx.set_output(1, t, Shape{g.B, g.N, g.T(), g.H});
  if (ctx.has_output(2)) ctx.set_output(2, t, Shape{g.B, g.N, g.T(), g.Hv});
}

// x as [B, N, T, width] in double: the past's positions, then the new ones (3-D [B, L, N*width]
// input plus its bias slice, or 4-D [B, N, L, width]).
template <class T>
std::vector<double> heads(const Tensor& x, const Tensor* past, const Tensor* bias, int64_t bias_offset,
                          const MhaGeometry& g, int64_t width) {
  const int64_t Tn = g.T();
  std::vector<double> out(static_cast<size_t>(g.B * g.N * Tn * width));
  auto at = [&](const Tensor& t, int64_t i) { return static_cast<double>(static_cast<compute_t<T>>(t.data<T>()[i])); };
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t h = 0; h < g.N; ++h) {
      double* dst = &out[(b * g.N + h) * Tn * width];
      for (int64_t p = 0; p < g.P; ++p)
        for (int64_t w = 0; w < width; ++w) dst[p * width + w] = at(*past, ((b * g.N + h) * g.P + p) * width + w);
      for (int64_t l = 0; l < g.L; ++l)
        for (int64_t w = 0; w < width; ++w) {
          const int64_t src =
              g.kv_bnsh ? ((b * g.N + h) * g.L + l) * width + w : (b * g.L + l) * g.N * width + h * width + w;
          double v = at(x, src);
          if (bias) v += bias->get_as_double(bias_offset + h * width + w);
          dst[(g.P + l) * width + w] = v;
        }
    }
  return out;
}

template <class T>
void mha_kernel(KernelContext& ctx) {
  ONYX_CHECK(!ctx.has_output(3), "output 'qk' is not supported by onyx");
  std::vector<const Shape*> in(ctx.num_inputs(), nullptr);
  std::vector<DType> dt(ctx.num_inputs(), DType::kUndefined);
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) {
      in[i] = &ctx.input(i).shape();
      dt[i] = ctx.input(i).dtype();
    }
  check_dtypes(dt);
  const MhaGeometry g = mha_geometry(ctx, in);
  const int64_t B = g.B, S = g.S, N = g.N, H = g.H, Hv = g.Hv, Tn = g.T();
  const Tensor* bias = ctx.has_input(kBias) ? &ctx.input(kBias) : nullptr;
  const Tensor* pk = ctx.has_input(kPastKey) ? &ctx.input(kPastKey) : nullptr;
  const Tensor* pv = ctx.has_input(kPastValue) ? &ctx.input(kPastValue) : nullptr;
  // Queries as [B, N, S, H] (a 3-D input viewed with P = 0, L = S).
  MhaGeometry qg = g;
  qg.P = 0;
  qg.L = S;
  qg.kv_bnsh = false;
  const std::vector<double> q = heads<T>(ctx.input(kQuery), nullptr, bias, 0, qg, H);
  // With BNSH key/value onnxruntime applies only the query part of the bias.
  const Tensor* kv_bias = g.kv_bnsh ? nullptr : bias;
  const std::vector<double> k = heads<T>(ctx.input(kKey), pk, kv_bias, N * H, g, H);
  const std::vector<double> v = heads<T>(ctx.input(kValue), pv, kv_bias, 2 * N * H, g, Hv);
  for (size_t o : {1, 2})
    if (ctx.has_output(o)) {
      const std::vector<double>& src = o == 1 ? k : v;
      T* p = ctx.output(o).data<T>();
      for (size_t i = 0; i < src.size(); ++i) p[i] = static_cast<T>(static_cast<compute_t<T>>(src[i]));
    }

  const double scale_attr = ctx.attr_float("scale", 0.f);
  const double scale = scale_attr != 0 ? scale_attr : 1.0 / std::sqrt(static_cast<double>(H));
  const double filter = ctx.attr_float("mask_filter_value", -10000.f);
  const bool causal = ctx.attr_int("unidirectional", 0) == 1;
  const Tensor* mask = ctx.has_input(kKeyPaddingMask) ? &ctx.input(kKeyPaddingMask) : nullptr;
  const Tensor* ab = ctx.has_input(kAttentionBias) ? &ctx.input(kAttentionBias) : nullptr;
  auto masked = [&](int64_t b, int64_t s, int64_t j) {
    if (!mask) return false;
    const int32_t* m = mask->data<int32_t>();
    switch (mask->rank()) {
      case 1:
        return j >= m[b];
      case 2:
        return m[b * Tn + j] == 0;
      default:
        return m[(b * S + s) * Tn + j] == 0;
    }
  };
  T* y = ctx.output(0).data<T>();
  std::vector<double> score(static_cast<size_t>(Tn)), acc(static_cast<size_t>(Hv));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < N; ++h) {
      const double* kh = &k[(b * N + h) * Tn * H];
      const double* vh = &v[(b * N + h) * Tn * Hv];
      for (int64_t s = 0; s < S; ++s) {
        const double* qs = &q[((b * N + h) * S + s) * H];
        for (int64_t j = 0; j < Tn; ++j) {
          if (causal && j > g.P + s) {
            score[j] = -std::numeric_limits<double>::infinity();
            continue;
          }
          double dot = 0;
          for (int64_t x = 0; x < H; ++x) dot += qs[x] * kh[j * H + x];
          double sc = dot * scale;
          if (masked(b, s, j)) sc += filter;
          if (ab) {
            const Shape& as = ab->shape();
            sc += ab->get_as_double((((as[0] == 1 ? 0 : b) * as[1] + (as[1] == 1 ? 0 : h)) * S + s) * Tn + j);
          }
          score[j] = sc;
        }
        softmax_weighted_sum(
            score, nullptr, Hv, [&](int64_t j, int64_t x) { return vh[j * Hv + x]; }, acc.data());
        T* ys = y + (b * S + s) * N * Hv + h * Hv;
        for (int64_t x = 0; x < Hv; ++x) ys[x] = static_cast<T>(static_cast<compute_t<T>>(acc[x]));
      }
    }
}

}  // namespace

void register_multi_head_attention_ops(OpRegistry& r) {
  r.add(domain_op("com.microsoft", "MultiHeadAttention", 1, infer_mha, [](KernelContext& ctx) {
    dispatch<FloatTypes>(ctx.input(kQuery).dtype(), "MultiHeadAttention",
                         [&](auto tag) { mha_kernel<typename decltype(tag)::type>(ctx); });
  }));
}

}  // namespace onyx
