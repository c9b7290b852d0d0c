// The recurrent blocks of linear-attention and state-space language models (opset 27):
// CausalConvWithState (a depthwise causal 1-D convolution that carries its last k - 1 inputs
// to the next call) and LinearAttention (a fixed-size state updated per token by the linear,
// gated, delta or gated-delta rule, read by the queries). Both accumulate in float32, as ONNX
// defines them, whatever the activations' type.
#include <cmath>

#include "ops/common.h"

namespace onyx {

namespace {

std::vector<float> to_floats(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  dispatch<FloatTypes>(t.dtype(), "input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<compute_t<T>>(p[i]));
  });
  return v;
}

void from_floats(const std::vector<float>& v, Tensor& t) {
  dispatch<FloatTypes>(t.dtype(), "output", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<T>(v[i]);
  });
}

// ---- CausalConvWithState(input [B, C, L], weight [C, 1, k], bias? [C], past_state? [B, C, k-1])
//      -> (output [B, C, L], present_state [B, C, k-1]) ----

struct ConvDims {
  int64_t b, c, l, k;
};

ConvDims conv_dims(const InferContext& ctx) {
  const Shape x = ctx.input_concrete_shape(0), w = ctx.input_concrete_shape(1);
  ONYX_CHECK(x.rank() == 3, "input must be [batch, channels, length], got ", x.str());
  ONYX_CHECK(w.rank() == 3 && w[0] == x[1] && w[1] == 1 && w[2] >= 1, "weight must be [", x[1],
             ", 1, k] (one filter per channel), got ", w.str());
  check_same_dtypes(ctx);
  ConvDims d{x[0], x[1], x[2], w[2]};
  if (ctx.has_input(2))
    ONYX_CHECK(ctx.input_concrete_shape(2) == Shape({d.c}), "bias must be [", d.c, "], got ",
               ctx.input_concrete_shape(2).str());
  if (ctx.has_input(3))
    ONYX_CHECK(ctx.input_concrete_shape(3) == Shape({d.b, d.c, d.k - 1}), "past_state must be [", d.b, ", ", d.c,
               ", ", d.k - 1, "], got ", ctx.input_concrete_shape(3).str());
  return d;
}

std::string conv_activation(const NodeView& n) {
  std::string a = n.attr_string("activation", "none");
  ONYX_CHECK(a == "none" || a == "silu" || a == "swish", "activation must be \"none\", \"silu\" or \"swish\", got \"",
             a, "\"");
  return a;
}

void infer_causal_conv(InferContext& ctx) {
  const ConvDims d = conv_dims(ctx);
  conv_activation(ctx);
  ONYX_CHECK(dtype_is_float(ctx.input_dtype(0)), "input must be a floating type, got ", dtype_name(ctx.input_dtype(0)));
  ctx.set_output(0, ctx.input_dtype(0), Shape{d.b, d.c, d.l});
  if (ctx.has_output(1)) ctx.set_output(1, ctx.input_dtype(0), Shape{d.b, d.c, d.k - 1});
}

void causal_conv_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t B = x.shape()[0], C = x.shape()[1], L = x.shape()[2], K = ctx.input(1).shape()[2];
  const std::vector<float> in = to_floats(x), w = to_floats(ctx.input(1));
  const std::vector<float> bias = ctx.has_input(2) ? to_floats(ctx.input(2)) : std::vector<float>(C, 0.f);
  const std::vector<float> past = ctx.has_input(3) ? to_floats(ctx.input(3)) : std::vector<float>(B * C * (K - 1), 0.f);
  const bool silu = conv_activation(ctx) != "none";
  const int64_t P = L + K - 1;  // the past, then the input
  std::vector<float> out(static_cast<size_t>(B * C * L)), state(static_cast<size_t>(B * C * (K - 1)));
  std::vector<float> padded(static_cast<size_t>(P));
  const bool half = x.dtype() != DType::kFloat32 && x.dtype() != DType::kFloat64;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t row = b * C + c;
      for (int64_t i = 0; i < K - 1; ++i) padded[i] = past[row * (K - 1) + i];
      for (int64_t i = 0; i < L; ++i) padded[K - 1 + i] = in[row * L + i];
      for (int64_t t = 0; t < L; ++t) {
        float acc = bias[c];
        for (int64_t j = 0; j < K; ++j) acc += w[c * K + j] * padded[t + j];
        // The convolution's result is rounded to the activations' type before the activation.
        if (half) acc = x.dtype() == DType::kFloat16 ? float(Float16(acc)) : float(BFloat16(acc));
        out[row * L + t] = silu ? acc / (1.f + std::exp(-acc)) : acc;
      }
      for (int64_t i = 0; i < K - 1; ++i) state[row * (K - 1) + i] = padded[P - (K - 1) + i];
    }
  from_floats(out, ctx.output(0));
  if (ctx.has_output(1)) from_floats(state, ctx.output(1));
}

// ---- LinearAttention(query [B, T, Hq*dk], key [B, T, Hkv*dk], value [B, T, Hkv*dv],
//      past_state? [B, Hkv, dk, dv], decay? [B, T, Hkv or Hkv*dk], beta? [B, T, Hkv or 1])
//      -> (output [B, T, Hq*dv], present_state [B, Hkv, dk, dv]) ----

struct LinearAttentionDims {
  int64_t b, t, hq, hkv, dk, dv;
  bool gated, delta;
  int64_t decay_last = 0, beta_last = 0;
};

LinearAttentionDims linear_attention_dims(const InferContext& ctx) {
  LinearAttentionDims d{};
  const std::string rule = ctx.attr_string("update_rule", "gated_delta");
  ONYX_CHECK(rule == "linear" || rule == "gated" || rule == "delta" || rule == "gated_delta",
             "update_rule must be \"linear\", \"gated\", \"delta\" or \"gated_delta\", got \"", rule, "\"");
  d.gated = rule == "gated" || rule == "gated_delta";
  d.delta = rule == "delta" || rule == "gated_delta";
  d.hq = ctx.attr_int("q_num_heads");
  d.hkv = ctx.attr_int("kv_num_heads");
  ONYX_CHECK(d.hq > 0 && d.hkv > 0 && d.hq % d.hkv == 0, "q_num_heads (", d.hq, ") must be a positive multiple of ",
             "kv_num_heads (", d.hkv, ")");
  const Shape q = ctx.input_concrete_shape(0), k = ctx.input_concrete_shape(1), v = ctx.input_concrete_shape(2);
  ONYX_CHECK(q.rank() == 3 && k.rank() == 3 && v.rank() == 3, "query, key and value must be [batch, tokens, heads * ",
             "head size], got ", q.str(), ", ", k.str(), ", ", v.str());
  ONYX_CHECK(k[0] == q[0] && v[0] == q[0] && k[1] == q[1] && v[1] == q[1], "query ", q.str(), ", key ", k.str(),
             " and value ", v.str(), " differ in batch or tokens");
  ONYX_CHECK(q[2] % d.hq == 0 && k[2] % d.hkv == 0 && v[2] % d.hkv == 0, "the last dimensions of query ", q.str(),
             ", key ", k.str(), " and value ", v.str(), " must divide by their heads (", d.hq, ", ", d.hkv, ")");
  d.b = q[0];
  d.t = q[1];
  d.dk = q[2] / d.hq;
  d.dv = v[2] / d.hkv;
  ONYX_CHECK(k[2] / d.hkv == d.dk, "key heads have size ", k[2] / d.hkv, ", query heads ", d.dk, " (they must match)");
  if (ctx.has_input(3))
    ONYX_CHECK(ctx.input_concrete_shape(3) == Shape({d.b, d.hkv, d.dk, d.dv}), "past_state must be [", d.b, ", ",
               d.hkv, ", ", d.dk, ", ", d.dv, "], got ", ctx.input_concrete_shape(3).str());
  ONYX_CHECK(d.gated == ctx.has_input(4), "update_rule \"", rule, "\" ", d.gated ? "needs" : "takes no", " decay input");
  ONYX_CHECK(d.delta == ctx.has_input(5), "update_rule \"", rule, "\" ", d.delta ? "needs" : "takes no", " beta input");
  if (d.gated) {
    const Shape g = ctx.input_concrete_shape(4);
    ONYX_CHECK(g.rank() == 3 && g[0] == d.b && g[1] == d.t && (g[2] == d.hkv || g[2] == d.hkv * d.dk),
               "decay must be [", d.b, ", ", d.t, ", ", d.hkv, " or ", d.hkv * d.dk, "], got ", g.str());
    d.decay_last = g[2];
  }
  if (d.delta) {
    const Shape be = ctx.input_concrete_shape(5);
    ONYX_CHECK(be.rank() == 3 && be[0] == d.b && be[1] == d.t && (be[2] == d.hkv || be[2] == 1), "beta must be [",
               d.b, ", ", d.t, ", ", d.hkv, " or 1], got ", be.str());
    d.beta_last = be[2];
  }
  return d;
}

void infer_linear_attention(InferContext& ctx) {
  const LinearAttentionDims d = linear_attention_dims(ctx);
  ONYX_CHECK(dtype_is_float(ctx.input_dtype(0)), "query must be a floating type, got ", dtype_name(ctx.input_dtype(0)));
  ctx.set_output(0, ctx.input_dtype(0), Shape{d.b, d.t, d.hq * d.dv});
  // The state keeps past_state's type (the activations' when there is no past).
  if (ctx.has_output(1))
    ctx.set_output(1, ctx.has_input(3) ? ctx.input_dtype(3) : ctx.input_dtype(0), Shape{d.b, d.hkv, d.dk, d.dv});
}

void linear_attention_kernel(KernelContext& ctx) {
  std::vector<ValueType> types;
  std::vector<const Tensor*> values;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    types.push_back(ctx.has_input(i) ? ValueType{ctx.input(i).dtype(), ctx.input(i).shape()} : ValueType{});
    values.push_back(ctx.has_input(i) ? &ctx.input(i) : nullptr);
  }
  const LinearAttentionDims d = linear_attention_dims(InferContext(ctx.node(), types, values));
  const std::vector<float> q = to_floats(ctx.input(0)), k = to_floats(ctx.input(1)), v = to_floats(ctx.input(2));
  const std::vector<float> decay = d.gated ? to_floats(ctx.input(4)) : std::vector<float>();
  const std::vector<float> beta = d.delta ? to_floats(ctx.input(5)) : std::vector<float>();
  std::vector<float> state = ctx.has_input(3) ? to_floats(ctx.input(3))
                                              : std::vector<float>(static_cast<size_t>(d.b * d.hkv * d.dk * d.dv), 0.f);
  const float scale_attr = ctx.attr_float("scale", 0.f);
  const float scale = scale_attr == 0.f ? 1.f / std::sqrt(static_cast<float>(d.dk)) : scale_attr;
  const int64_t group = d.hq / d.hkv;
  std::vector<float> out(static_cast<size_t>(d.b * d.t * d.hq * d.dv));
  std::vector<float> vt(static_cast<size_t>(d.dv));
  for (int64_t b = 0; b < d.b; ++b)
    for (int64_t t = 0; t < d.t; ++t) {
      const int64_t bt = b * d.t + t;
      for (int64_t h = 0; h < d.hkv; ++h) {
        float* S = state.data() + ((b * d.hkv + h) * d.dk) * d.dv;  // [dk, dv]
        const float* kt = k.data() + (bt * d.hkv + h) * d.dk;
        for (int64_t m = 0; m < d.dv; ++m) vt[m] = v[(bt * d.hkv + h) * d.dv + m];
        if (d.gated)
          for (int64_t i = 0; i < d.dk; ++i) {
            const float g = d.decay_last == d.hkv ? decay[bt * d.hkv + h] : decay[(bt * d.hkv + h) * d.dk + i];
            const float e = std::exp(g);
            for (int64_t m = 0; m < d.dv; ++m) S[i * d.dv + m] *= e;
          }
        if (d.delta) {
          const float be = beta[bt * d.beta_last + (d.beta_last == 1 ? 0 : h)];
          for (int64_t m = 0; m < d.dv; ++m) {
            float retrieved = 0.f;
            for (int64_t i = 0; i < d.dk; ++i) retrieved += S[i * d.dv + m] * kt[i];
            vt[m] = be * (vt[m] - retrieved);
          }
        }
        for (int64_t i = 0; i < d.dk; ++i)
          for (int64_t m = 0; m < d.dv; ++m) S[i * d.dv + m] += kt[i] * vt[m];
        // Each query head of this KV head's group reads the updated state.
        for (int64_t hq = h * group; hq < (h + 1) * group; ++hq) {
          const float* qt = q.data() + (bt * d.hq + hq) * d.dk;
          float* o = out.data() + (bt * d.hq + hq) * d.dv;
          for (int64_t m = 0; m < d.dv; ++m) {
            float acc = 0.f;
            for (int64_t i = 0; i < d.dk; ++i) acc += qt[i] * S[i * d.dv + m];
            o[m] = scale * acc;
          }
        }
      }
    }
  from_floats(out, ctx.output(0));
  if (ctx.has_output(1)) from_floats(state, ctx.output(1));
}

}  // namespace

void register_state_space_ops(OpRegistry& r) {
  r.add(onnx_op("CausalConvWithState", 27, infer_causal_conv, causal_conv_kernel));
  r.add(onnx_op("LinearAttention", 27, infer_linear_attention, linear_attention_kernel));
}

}  // namespace onyx
