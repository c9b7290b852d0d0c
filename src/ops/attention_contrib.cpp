// com.microsoft Attention (BERT/GPT-2 style: one packed QKV projection, then attention over
// heads with an optional mask, past state and bias), QAttention (the same with the projection
// in integers, as onnxruntime's quantize_dynamic emits it) and EmbedLayerNormalization (token,
// position and segment embeddings summed, then layer-normalized). onnxruntime's CPU kernels
// define the semantics; the reference computes in double.
#include <cmath>

#include "ops/attention_math.h"
#include "ops/common.h"

namespace onyx {

namespace {

enum AttnInput : size_t { kInput, kWeights, kBias, kMaskIndex, kPast, kAttentionBias, kPastSequenceLength };

struct AttnGeometry {
  int64_t B, S, D, N;            // batch, tokens, input hidden size, heads
  int64_t qh, kh, vh;            // hidden sizes of q, k, v (their head sizes: / N)
  int64_t P = 0;                 // past tokens
  int64_t T() const { return P + S; }
};

// `past` is the past state's input index (Attention's 4, QAttention's 8).
AttnGeometry attn_geometry(const InferContext& ctx, size_t past) {
  const Shape x = ctx.input_concrete_shape(kInput), w = ctx.input_concrete_shape(kWeights);
  AttnGeometry g{};
  ONYX_CHECK(x.rank() == 3, "input must be [batch, tokens, hidden], got ", x.str());
  g.B = x[0], g.S = x[1], g.D = x[2];
  g.N = ctx.attr_int("num_heads");
  ONYX_CHECK(g.N > 0, "num_heads must be positive, got ", g.N);
  ONYX_CHECK(w.rank() == 2 && w[0] == g.D, "weights must be [", g.D, ", q + k + v hidden], got ", w.str());
  const auto sizes = ctx.attr_ints("qkv_hidden_sizes");
  if (sizes.empty()) {
    ONYX_CHECK(w[1] % 3 == 0, "weights' second axis (", w[1], ") must hold q, k and v alike");
    g.qh = g.kh = g.vh = w[1] / 3;
  } else {
    ONYX_CHECK(sizes.size() == 3 && sizes[0] + sizes[1] + sizes[2] == w[1], "qkv_hidden_sizes must be three sizes ",
               "adding up to ", w[1]);
    g.qh = sizes[0], g.kh = sizes[1], g.vh = sizes[2];
  }
  ONYX_CHECK(g.qh == g.kh, "q and k hidden sizes differ (", g.qh, ", ", g.kh, ")");
  ONYX_CHECK(g.qh % g.N == 0 && g.vh % g.N == 0, "hidden sizes ", g.qh, " and ", g.vh, " must divide by ", g.N,
             " heads");
  if (ctx.has_input(kBias))
    ONYX_CHECK(ctx.input_concrete_shape(kBias) == Shape({w[1]}), "bias must be [", w[1], "], got ",
               ctx.input_concrete_shape(kBias).str());
  if (ctx.has_input(past)) {
    const Shape p = ctx.input_concrete_shape(past);
    ONYX_CHECK(p.rank() == 5 && p[0] == 2 && p[1] == g.B && p[2] == g.N && p[4] == g.qh / g.N && g.qh == g.vh,
               "past must be [2, ", g.B, ", ", g.N, ", past, ", g.qh / g.N, "], got ", p.str());
    g.P = p[3];
  }
  return g;
}

void infer_attention(InferContext& ctx) {
  const AttnGeometry g = attn_geometry(ctx, kPast);
  const DType t = ctx.input_dtype(kInput);
  ONYX_CHECK(dtype_is_float(t), "Attention computes in a floating type, got ", dtype_name(t));
  ctx.set_output(0, t, Shape{g.B, g.S, g.vh});
  if (ctx.has_output(1)) ctx.set_output(1, t, Shape{2, g.B, g.N, g.T(), g.qh / g.N});
}

// Whether query s of batch b may see key j (mask_index's forms: [B] end positions, [2B] end
// and start positions, [B, T] or [B, S, T] of 1 keep / 0 drop).
struct KeyMask {
  const Tensor* m = nullptr;
  int64_t B, S, T;
  bool keep(int64_t b, int64_t s, int64_t j) const {
    if (!m) return true;
    const Shape& sh = m->shape();
    if (sh.rank() == 1 && sh[0] == B) return j < m->get_as_int64(b);
    if (sh.rank() == 1) return j < m->get_as_int64(b) && j >= m->get_as_int64(b + B);
    if (sh.rank() == 2) return m->get_as_int64(b * T + j) != 0;
    return m->get_as_int64((b * S + s) * T + j) != 0;
  }
};

KeyMask key_mask(const KernelContext& ctx, const AttnGeometry& g, size_t input) {
  KeyMask k{nullptr, g.B, g.S, g.T()};
  if (!ctx.has_input(input)) return k;
  const Tensor& m = ctx.input(input);
  const Shape& s = m.shape();
  ONYX_CHECK((s.rank() == 1 && (s[0] == g.B || s[0] == 2 * g.B)) || s == Shape({g.B, g.T()}) ||
                 s == Shape({g.B, g.S, g.T()}),
             "mask_index must be [", g.B, "], [", 2 * g.B, "], [", g.B, ", ", g.T(), "] or [", g.B, ", ", g.S, ", ",
             g.T(), "], got ", s.str());
  ONYX_CHECK(m.dtype() == DType::kInt32 || m.dtype() == DType::kInt64, "mask_index must be int32, got ",
             dtype_name(m.dtype()));
  k.m = &m;
  return k;
}

// The attention of projected q, k, v ([B, S, qh | kh | vh], with the past prepended to k and v)
// into output 0 and present (output 1).
void attend(KernelContext& ctx, const AttnGeometry& g, const std::vector<double>& qkv, size_t mask_input,
            size_t past_input, size_t bias_input) {
  const int64_t N = g.N, H = g.qh / N, Hv = g.vh / N, T = g.T(), W = g.qh + g.kh + g.vh;
  // K and V per head over all T keys: [B, N, T, H].
  std::vector<double> K(static_cast<size_t>(g.B * N * T * H)), V(static_cast<size_t>(g.B * N * T * Hv));
  const Tensor* past = ctx.has_input(past_input) ? &ctx.input(past_input) : nullptr;
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t row = (b * N + n) * T + t;
        for (int64_t h = 0; h < H; ++h)
          K[row * H + h] = t < g.P ? past->get_as_double((((0 * g.B + b) * N + n) * g.P + t) * H + h)
                                   : qkv[(b * g.S + t - g.P) * W + g.qh + n * H + h];
        for (int64_t h = 0; h < Hv; ++h)
          V[row * Hv + h] = t < g.P ? past->get_as_double((((1 * g.B + b) * N + n) * g.P + t) * Hv + h)
                                    : qkv[(b * g.S + t - g.P) * W + g.qh + g.kh + n * Hv + h];
      }
  const KeyMask mask = key_mask(ctx, g, mask_input);
  const bool causal = ctx.attr_int("unidirectional", 0) != 0;
  const double filter = ctx.attr_float("mask_filter_value", -10000.f);
  const double scale = ctx.attr_float("scale", 0.f) != 0.f ? ctx.attr_float("scale", 0.f) : 1.0 / std::sqrt(double(H));
  const Tensor* bias = ctx.has_input(bias_input) ? &ctx.input(bias_input) : nullptr;
  if (bias) {
    const Shape& s = bias->shape();
    ONYX_CHECK(s.rank() == 4 && (s[0] == 1 || s[0] == g.B) && (s[1] == 1 || s[1] == N) && s[2] == g.S && s[3] == T,
               "attention_bias must be [", g.B, " or 1, ", N, " or 1, ", g.S, ", ", T, "], got ", s.str());
  }
  std::vector<double> out(static_cast<size_t>(g.B * g.S * g.vh)), scores(static_cast<size_t>(T));
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < g.S; ++s) {
        const double* q = qkv.data() + (b * g.S + s) * W + n * H;
        for (int64_t t = 0; t < T; ++t) {
          double dot = 0;
          for (int64_t h = 0; h < H; ++h) dot += q[h] * K[((b * N + n) * T + t) * H + h];
          double v = dot * scale;
          if (!mask.keep(b, s, t) || (causal && t > s + g.P)) v += filter;
          if (bias) {
            const Shape& bs = bias->shape();
            v += bias->get_as_double((((bs[0] == 1 ? 0 : b) * bs[1] + (bs[1] == 1 ? 0 : n)) * g.S + s) * T + t);
          }
          scores[t] = v;
        }
        softmax_weighted_sum(scores, nullptr, Hv, [&](int64_t t, int64_t x) { return V[((b * N + n) * T + t) * Hv + x]; },
                             out.data() + (b * g.S + s) * g.vh + n * Hv);
      }
  Tensor& y = ctx.output(0);
  dispatch<FloatTypes>(y.dtype(), "Attention output", [&](auto tag) {
    using TT = typename decltype(tag)::type;
    for (size_t i = 0; i < out.size(); ++i) y.data<TT>()[i] = static_cast<TT>(static_cast<compute_t<TT>>(out[i]));
    if (!ctx.has_output(1)) return;
    TT* p = ctx.output(1).data<TT>();
    for (size_t i = 0; i < K.size(); ++i) p[i] = static_cast<TT>(static_cast<compute_t<TT>>(K[i]));
    for (size_t i = 0; i < V.size(); ++i) p[K.size() + i] = static_cast<TT>(static_cast<compute_t<TT>>(V[i]));
  });
}

AttnGeometry kernel_geometry(const KernelContext& ctx, size_t past) {
  std::vector<ValueType> types;
  std::vector<const Tensor*> values;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    types.push_back(ctx.has_input(i) ? ValueType{ctx.input(i).dtype(), ctx.input(i).shape()} : ValueType{});
    values.push_back(ctx.has_input(i) ? &ctx.input(i) : nullptr);
  }
  return attn_geometry(InferContext(ctx.node(), types, values), past);
}

void attention_kernel(KernelContext& ctx) {
  const AttnGeometry g = kernel_geometry(ctx, kPast);
  ONYX_CHECK(ctx.attr_int("do_rotary", 0) == 0, "Attention with do_rotary is not supported by onyx");
  const Tensor& x = ctx.input(kInput);
  const Tensor& w = ctx.input(kWeights);
  const int64_t W = w.shape()[1], M = g.B * g.S;
  std::vector<double> qkv(static_cast<size_t>(M * W));
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < W; ++c) {
      double acc = ctx.has_input(kBias) ? ctx.input(kBias).get_as_double(c) : 0.0;
      for (int64_t d = 0; d < g.D; ++d) acc += x.get_as_double(r * g.D + d) * w.get_as_double(d * W + c);
      qkv[r * W + c] = acc;
    }
  attend(ctx, g, qkv, kMaskIndex, kPast, kAttentionBias);
}

// ---- QAttention(input u8, weight s8/u8, bias, input_scale, weight_scale, mask_index?,
//      input_zero_point?, weight_zero_point?, past?) ----

constexpr size_t kQAttentionPast = 8;

void infer_qattention(InferContext& ctx) {
  const AttnGeometry g = attn_geometry(ctx, kQAttentionPast);
  ONYX_CHECK(ctx.attr_ints("qkv_hidden_sizes").empty(), "QAttention takes no qkv_hidden_sizes");
  const DType t = ctx.input_dtype(kBias);
  ONYX_CHECK(dtype_is_float(t), "bias must be a floating type, got ", dtype_name(t));
  const DType in = ctx.input_dtype(kInput), wt = ctx.input_dtype(kWeights);
  ONYX_CHECK((in == DType::kUInt8 || in == DType::kInt8) && (wt == DType::kUInt8 || wt == DType::kInt8),
             "input and weight must be int8 or uint8, got ", dtype_name(in), " and ", dtype_name(wt));
  ctx.set_output(0, t, Shape{g.B, g.S, g.vh});
  if (ctx.has_output(1)) ctx.set_output(1, t, Shape{2, g.B, g.N, g.T(), g.qh / g.N});
}

void qattention_kernel(KernelContext& ctx) {
  enum : size_t { kInputScale = 3, kWeightScale, kMask, kInputZp, kWeightZp, kQPast };
  static_assert(kQPast == kQAttentionPast);
  ONYX_CHECK(ctx.attr_int("do_rotary", 0) == 0, "QAttention with do_rotary is not supported by onyx");
  const AttnGeometry g = kernel_geometry(ctx, kQPast);
  const Tensor& x = ctx.input(kInput);
  const Tensor& w = ctx.input(kWeights);
  const int64_t W = w.shape()[1];
  const Tensor& in_scale = ctx.input(kInputScale);
  const Tensor& w_scale = ctx.input(kWeightScale);
  ONYX_CHECK(in_scale.numel() == 1, "input_scale must be a scalar, got ", in_scale.type_str());
  ONYX_CHECK(w_scale.numel() == 1 || w_scale.numel() == W, "weight_scale must be a scalar or [", W, "], got ",
             w_scale.type_str());
  const int64_t izp = ctx.has_input(kInputZp) ? ctx.input(kInputZp).get_as_int64(0) : 0;
  const Tensor* wzp = ctx.has_input(kWeightZp) ? &ctx.input(kWeightZp) : nullptr;
  if (wzp) ONYX_CHECK(wzp->numel() == 1 || wzp->numel() == W, "weight_zero_point must be a scalar or [", W, "]");
  const int64_t M = g.B * g.S;
  std::vector<double> qkv(static_cast<size_t>(M * W));
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < W; ++c) {
      const int64_t zc = wzp ? wzp->get_as_int64(wzp->numel() == 1 ? 0 : c) : 0;
      int64_t acc = 0;  // exact in integers, as onnxruntime's int32 accumulation
      for (int64_t d = 0; d < g.D; ++d) acc += (x.get_as_int64(r * g.D + d) - izp) * (w.get_as_int64(d * W + c) - zc);
      const double s = static_cast<float>(in_scale.get_as_double(0) * w_scale.get_as_double(w_scale.numel() == 1 ? 0 : c));
      qkv[r * W + c] = static_cast<float>(static_cast<float>(acc) * s) + ctx.input(kBias).get_as_double(c);
    }
  attend(ctx, g, qkv, kMask, kQPast, SIZE_MAX);
}

// ---- EmbedLayerNormalization(input_ids, segment_ids?, word_embedding, position_embedding,
//      segment_embedding?, gamma, beta, mask?, position_ids?) -> (output, mask_index, embedding_sum?) ----

void infer_embed_layer_norm(InferContext& ctx) {
  const Shape ids = ctx.input_concrete_shape(0), word = ctx.input_concrete_shape(2);
  ONYX_CHECK(ids.rank() == 2, "input_ids must be [batch, tokens], got ", ids.str());
  ONYX_CHECK(word.rank() == 2, "word_embedding must be [vocabulary, hidden], got ", word.str());
  const DType t = ctx.input_dtype(2);
  ONYX_CHECK(dtype_is_float(t), "the embeddings must be a floating type");
  ctx.set_output(0, t, Shape{ids[0], ids[1], word[1]});
  if (ctx.has_output(1)) ctx.set_output(1, DType::kInt32, Shape{ids[0]});
  if (ctx.has_output(2)) ctx.set_output(2, t, Shape{ids[0], ids[1], word[1]});
}

void embed_layer_norm_kernel(KernelContext& ctx) {
  const Tensor& ids = ctx.input(0);
  const Tensor& word = ctx.input(2);
  const Tensor& pos = ctx.input(3);
  const int64_t B = ids.shape()[0], S = ids.shape()[1], H = word.shape()[1];
  const double eps = ctx.attr_float("epsilon", 1e-12f);
  auto row_of = [&](const Tensor& table, int64_t id, const char* what) {
    ONYX_CHECK(table.rank() == 2 && table.shape()[1] == H, what, " must be [rows, ", H, "], got ", table.type_str());
    ONYX_CHECK(id >= 0 && id < table.shape()[0], what, " has no row ", id, " (", table.shape()[0], " rows)");
    return id * H;
  };
  const Tensor& gamma = ctx.input(5);
  const Tensor& beta = ctx.input(6);
  ONYX_CHECK(gamma.numel() == H && beta.numel() == H, "gamma and beta must be [", H, "]");
  std::vector<double> sum(static_cast<size_t>(H));
  Tensor& y = ctx.output(0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t w = row_of(word, ids.get_as_int64(b * S + s), "word_embedding");
      int64_t p_id = s;
      if (ctx.has_input(8)) {
        const Tensor& pid = ctx.input(8);
        p_id = pid.get_as_int64(pid.numel() == S ? s : b * S + s);
      }
      const int64_t p = row_of(pos, p_id, "position_embedding");
      int64_t g = -1;
      if (ctx.has_input(1) && ctx.has_input(4)) g = row_of(ctx.input(4), ctx.input(1).get_as_int64(b * S + s), "segment_embedding");
      double mean = 0, var = 0;
      for (int64_t h = 0; h < H; ++h) {
        sum[h] = word.get_as_double(w + h) + pos.get_as_double(p + h) + (g >= 0 ? ctx.input(4).get_as_double(g + h) : 0.0);
        mean += sum[h];
      }
      mean /= static_cast<double>(H);
      for (int64_t h = 0; h < H; ++h) var += (sum[h] - mean) * (sum[h] - mean);
      const double inv = 1 / std::sqrt(var / static_cast<double>(H) + eps);
      dispatch<FloatTypes>(y.dtype(), "output", [&](auto tag) {
        using T = typename decltype(tag)::type;
        for (int64_t h = 0; h < H; ++h) {
          const double v = (sum[h] - mean) * inv * gamma.get_as_double(h) + beta.get_as_double(h);
          y.data<T>()[(b * S + s) * H + h] = static_cast<T>(static_cast<compute_t<T>>(v));
          if (ctx.has_output(2))
            ctx.output(2).data<T>()[(b * S + s) * H + h] = static_cast<T>(static_cast<compute_t<T>>(sum[h]));
        }
      });
    }
  // mask_index: each row's count of kept tokens (the mask's ones); zeros without a mask, as
  // onnxruntime gives them.
  if (ctx.has_output(1))
    for (int64_t b = 0; b < B; ++b) {
      int32_t count = 0;
      for (int64_t s = 0; s < S && ctx.has_input(7); ++s) count += ctx.input(7).get_as_int64(b * S + s) != 0;
      ctx.output(1).data<int32_t>()[b] = count;
    }
}

}  // namespace

void register_attention_contrib_ops(OpRegistry& r) {
  const std::string ms = "com.microsoft";
  r.add(domain_op(ms, "Attention", 1, infer_attention, attention_kernel));
  r.add(domain_op(ms, "QAttention", 1, infer_qattention, qattention_kernel));
  r.add(domain_op(ms, "EmbedLayerNormalization", 1, infer_embed_layer_norm, embed_layer_norm_kernel));
}

}  // namespace onyx
