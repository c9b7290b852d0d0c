// ai.onnx.preview FlexAttention: softmax(Q K^T * scale) V with two optional subgraphs, one that
// rewrites the scores (a mask, a bias, a soft cap) and one that rewrites the probabilities,
// each given the whole [B, H, L, S] tensor in the softmax's type. KV heads repeat for GQA.
#include <cmath>

#include "ops/common.h"

namespace onyx {

namespace {

// The softmax's type: softmax_precision when given; float32 for the 16-bit floats; else Q's.
DType softmax_type(const NodeView& n, DType q) {
  if (n.has_attr("softmax_precision")) {
    const DType t = dtype_from_onnx(static_cast<int32_t>(n.attr_int("softmax_precision")));
    ONYX_CHECK(dtype_is_float(t), "softmax_precision must name a floating type, got ", dtype_name(t));
    return t;
  }
  return q == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
}

void infer_flex_attention(InferContext& ctx) {
  const Shape q = ctx.input_concrete_shape(0), k = ctx.input_concrete_shape(1), v = ctx.input_concrete_shape(2);
  ONYX_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4, "Q, K and V must be [batch, heads, tokens, size], got ",
             q.str(), ", ", k.str(), ", ", v.str());
  ONYX_CHECK(k[0] == q[0] && v[0] == q[0], "Q, K and V differ in batch: ", q.str(), ", ", k.str(), ", ", v.str());
  ONYX_CHECK(k[1] == v[1] && k[2] == v[2], "K ", k.str(), " and V ", v.str(), " must share heads and tokens");
  ONYX_CHECK(k[3] == q[3], "Q ", q.str(), " and K ", k.str(), " must share the head size");
  ONYX_CHECK(k[1] > 0 && q[1] % k[1] == 0, "Q's heads (", q[1], ") must be a multiple of K's (", k[1], ")");
  ONYX_CHECK(dtype_is_float(ctx.input_dtype(0)) && ctx.input_dtype(1) == ctx.input_dtype(0),
             "Q and K must be one floating type");
  ctx.set_output(0, ctx.input_dtype(2), Shape{q[0], q[1], q[2], v[3]});
}

// Runs a modifier subgraph on `x` (in type t) and returns its one output as doubles.
std::vector<double> modify(KernelContext& ctx, const Graph& g, const std::vector<double>& x, const Shape& shape,
                           DType t, const char* what) {
  Tensor in(t, shape);
  dispatch<FloatTypes>(t, what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < x.size(); ++i) in.data<T>()[i] = static_cast<T>(static_cast<compute_t<T>>(x[i]));
  });
  std::vector<Tensor> out = with_context(what, [&] { return ctx.run_subgraph(g, {in}); });
  ONYX_CHECK(out.size() == 1 && out[0].defined(), what, " must produce one output, got ", out.size());
  ONYX_CHECK(out[0].shape() == shape, what, " returned ", out[0].type_str(), ", expected the shape ", shape.str());
  std::vector<double> r(x.size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = out[0].get_as_double(static_cast<int64_t>(i));
  return r;
}

void flex_attention_kernel(KernelContext& ctx) {
  const Tensor &Q = ctx.input(0), &K = ctx.input(1), &V = ctx.input(2);
  Tensor& Y = ctx.output(0);
  const int64_t B = Q.shape()[0], Hq = Q.shape()[1], L = Q.shape()[2], E = Q.shape()[3];
  const int64_t Hkv = K.shape()[1], S = K.shape()[2], Ev = V.shape()[3];
  const double scale = ctx.has_attr("scale") ? ctx.attr_float("scale", 0.f) : 1.0 / std::sqrt(static_cast<double>(E));
  const DType t = softmax_type(ctx, Q.dtype());
  const int64_t group = Hq / Hkv;
  const Shape score_shape{B, Hq, L, S};
  std::vector<double> s(static_cast<size_t>(B * Hq * L * S));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < S; ++j) {
          double acc = 0;
          for (int64_t e = 0; e < E; ++e)
            acc += Q.get_as_double(((b * Hq + h) * L + i) * E + e) * K.get_as_double(((b * Hkv + h / group) * S + j) * E + e);
          s[((b * Hq + h) * L + i) * S + j] = acc * scale;
        }
  if (const Graph* g = ctx.attr_graph("score_mod")) s = modify(ctx, *g, s, score_shape, t, "score_mod");
  for (int64_t row = 0; row < B * Hq * L; ++row) {
    double* r = s.data() + row * S;
    double m = -INFINITY, sum = 0;
    for (int64_t j = 0; j < S; ++j) m = std::max(m, r[j]);
    for (int64_t j = 0; j < S; ++j) sum += (r[j] = std::exp(r[j] - m));
    for (int64_t j = 0; j < S; ++j) r[j] /= sum;
  }
  if (const Graph* g = ctx.attr_graph("prob_mod")) s = modify(ctx, *g, s, score_shape, t, "prob_mod");
  dispatch<FloatTypes>(Y.dtype(), "FlexAttention Y", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t i = 0; i < L; ++i)
          for (int64_t e = 0; e < Ev; ++e) {
            double acc = 0;
            for (int64_t j = 0; j < S; ++j)
              acc += s[((b * Hq + h) * L + i) * S + j] * V.get_as_double(((b * Hkv + h / group) * S + j) * Ev + e);
            Y.data<T>()[((b * Hq + h) * L + i) * Ev + e] = static_cast<T>(static_cast<compute_t<T>>(acc));
          }
  });
}

}  // namespace

void register_flex_attention_ops(OpRegistry& r) {
  r.add(domain_op("ai.onnx.preview", "FlexAttention", 1, infer_flex_attention, flex_attention_kernel));
}

}  // namespace onyx
