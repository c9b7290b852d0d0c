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

#include "ops/tensor_util.h"
#include "ops/attention_math.h"
#include "ops/common.h"
#include "ops/mha.h"

namespace onyx {

namespace {

using namespace mha;

void infer_mha(InferContext& ctx) {
  ONYX_CHECK(!ctx.has_output(3), "output 'qk' is not supported by onyx");
  const PresentInputs p = present_inputs(ctx);
  check_mha_dtypes(p.dtypes);
  const DType t = p.dtypes[kQuery];
  if (!p.known) {
    for (size_t o = 0; o < 3; ++o)
      if (ctx.has_output(o)) ctx.set_output(o, t, PartialShape());
    return;
  }
  const MhaGeometry g = mha_geometry(mha_attrs(ctx), p.shape_ptrs);
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
  check_mha_dtypes(dt);
  const MhaAttrs at = mha_attrs(ctx);
  const MhaGeometry g = mha_geometry(at, in);
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

  const double scale = at.scale != 0 ? at.scale : 1.0 / std::sqrt(static_cast<double>(H));
  const double filter = at.mask_filter_value;
  const bool causal = at.unidirectional;
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
