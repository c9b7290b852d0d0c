// Products with a weight stored output-major, the form the linear fusion (passes/fuse_linear.h)
// gives a MatMul whose right operand is a constant; domain "onyx".
//
//   onyx::Linear(x[..., K], w[N, K], bias?[N]; splits) -> y_0[..., N_0], ..., y_{s-1}[..., N_{s-1}]
//     y = x · w^T (+ bias) (numpy matmul of x by the transposed weight), its N columns cut into the
//     outputs by `splits` (sum N; default [N], one output). Products that share x (a layer's Q,
//     K and V projections) become one node that reads x once and the weights in one stream; the
//     bias (Qwen2's q, k and v) is added to the sums before the one rounding.
//   onyx::SiluGateLinear(x[..., K], w[2F, K]; activation) -> y[..., F]
//     y = act(x · w[:F]^T) * (x · w[F:]^T): the gate and up projections of a gated MLP with the
//     gating product, one rounding at the end; act is SiLU, or as `activation` names it (GELU
//     for Gemma: ops/gate_activation.h).
//   onyx::RmsNormLinear(x[..., K], skip?, gamma[K], w, bias?; epsilon, splits, gated) -> (sum?, y...)
//     h = x + skip (skip may be omitted), n = h / sqrt(mean(h^2) + epsilon) * gamma rounded to
//     x's type (what SimplifiedLayerNormalization and SkipSimplifiedLayerNormalization give),
//     then Linear(n, w, bias; splits), or with gated = 1 (no bias) SiluGateLinear(n, w; activation); output 0, optional, is
//     h rounded (SkipSimplifiedLayerNormalization's residual sum). The norm
//     before a layer's products: its rows are normalized where they are multiplied, with no
//     normalized tensor in between.
//
// A weight row is one output's K inputs, contiguous: a one-row product (a decode step) reads
// each row once with no transposition, and the CUDA kernel streams rows at full width.
// Sums are in the compute type (float for float16/bfloat16), as MatMul's.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/common.h"
#include "ops/gate_activation.h"
#include "ops/gemm.h"
#include "ops/rms_rows.h"

namespace onyx {

namespace {

// The weight's [N, K] and x's K, checked where inference can see them.
void check_linear(const InferContext& ctx, int64_t& n, int64_t& k) {
  check_same_dtypes(ctx);
  const PartialShape& w = ctx.input_shape(1);
  const PartialShape& x = ctx.input_shape(0);
  ONYX_CHECK(w.rank_known && w.dims.size() == 2, "the weight must be 2-D [N, K], got ", w.str());
  ONYX_CHECK(!x.rank_known || !x.dims.empty(), "x must have at least one dimension");
  n = w.dims[0];
  k = w.dims[1];
  if (x.rank_known && x.dims.back() >= 0 && k >= 0)
    ONYX_CHECK(x.dims.back() == k, "x ", x.str(), " does not end in the weight's K = ", k, " (weight ", w.str(), ")");
}

PartialShape with_last(const PartialShape& x, int64_t last) {
  if (!x.rank_known) return x;
  PartialShape s = x;
  s.dims.back() = last;
  return s;
}

std::vector<int64_t> splits_of(const NodeView& v, int64_t n) {
  std::vector<int64_t> s = v.attr_ints("splits", {});
  if (s.empty()) return {n};
  for (int64_t p : s) ONYX_CHECK(p > 0, "splits must be positive, got ", p);
  if (n >= 0) {
    const int64_t total = std::accumulate(s.begin(), s.end(), int64_t{0});
    ONYX_CHECK(total == n, "splits add up to ", total, ", not the weight's N = ", n);
  }
  return s;
}

// The optional bias at input `i`: [N].
void check_bias(const InferContext& ctx, size_t i, int64_t n) {
  if (!ctx.has_input(i)) return;
  const PartialShape& b = ctx.input_shape(i);
  ONYX_CHECK(!b.rank_known || (b.dims.size() == 1 && (b.dims[0] < 0 || n < 0 || b.dims[0] == n)), "the bias must be [",
             n, "], got ", b.str());
}

void infer_linear(InferContext& ctx) {
  int64_t n = -1, k = -1;
  check_linear(ctx, n, k);
  ONYX_CHECK(ctx.num_inputs() <= 3, "Linear takes x, w and a bias, got ", ctx.num_inputs(), " inputs");
  check_bias(ctx, 2, n);
  const std::vector<int64_t> s = splits_of(ctx, n);
  ONYX_CHECK(s.size() == ctx.num_outputs(), s.size(), " splits for ", ctx.num_outputs(), " outputs");
  for (size_t i = 0; i < s.size(); ++i) ctx.set_output(i, ctx.input_dtype(0), with_last(ctx.input_shape(0), s[i]));
}

void infer_silu_gate_linear(InferContext& ctx) {
  int64_t n = -1, k = -1;
  check_linear(ctx, n, k);
  ONYX_CHECK(n < 0 || n % 2 == 0, "the weight's N = ", n, " must be even (gate rows, then up rows)");
  gate_activation_of(ctx.attr_string("activation", "silu"));  // a name it knows, or an error naming it
  ctx.set_output(0, ctx.input_dtype(0), with_last(ctx.input_shape(0), n < 0 ? -1 : n / 2));
}

// out[m, n] = x[m, :] · w[n, :] (+ bias[n]) for the weight rows [first, first + n).
template <class T>
void product(const T* x, const T* w, const T* bias, int64_t m, int64_t n, int64_t k, T* out) {
  using C = compute_t<T>;
  if (bias)  // added by the product (beta = 1) before its one rounding
    for (int64_t i = 0; i < m; ++i) std::copy_n(bias, n, out + i * n);
  const C beta = bias ? C(1) : C(0);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    cpu::gemm_blas(false, true, m, n, k, C(1), x, k, w, k, beta, out, n);
  else
    cpu::gemm_reference<T, C>(false, true, m, n, k, C(1), x, k, w, k, beta, out, n);
}

// y_i = x[m, k] · (the weight's next N_i rows)^T (+ those entries of the bias), for each output
// in turn.
template <class T>
void linear_into(const T* x, int64_t m, const Tensor& w, const Tensor* bias, const std::vector<Tensor*>& ys) {
  const int64_t k = w.shape()[1];
  int64_t first = 0;
  for (Tensor* y : ys) {
    const int64_t n = y->shape()[y->rank() - 1];
    const T* b = bias ? bias->data<T>() + first : nullptr;
    if (k == 0) {
      T* out = y->data<T>();
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) out[i * n + j] = b ? b[j] : T(0);
    } else if (m > 0 && n > 0) {
      product(x, w.data<T>() + first * k, b, m, n, k, y->data<T>());
    }
    first += n;
  }
}

// y = act(x · w[:F]^T) * (x · w[F:]^T), both products in the compute type, one rounding.
template <class T>
void silu_gate_into(const T* xp, int64_t m, const Tensor& w, Tensor& y, GateActivation act) {
  using C = compute_t<T>;
  const int64_t k = w.shape()[1], f = w.shape()[0] / 2;
  if (m == 0 || f == 0) return;
  std::vector<C> gate(static_cast<size_t>(m * f), C(0)), up(static_cast<size_t>(m * f), C(0));
  const T* wp = w.data<T>();
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (k > 0) {
      cpu::gemm_blas(false, true, m, f, k, C(1), xp, k, wp, k, C(0), gate.data(), f);
      cpu::gemm_blas(false, true, m, f, k, C(1), xp, k, wp + f * k, k, C(0), up.data(), f);
    }
  } else {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < f; ++j) {
        C g = 0, u = 0;
        for (int64_t p = 0; p < k; ++p) {
          const C xv = static_cast<C>(xp[i * k + p]);
          g += xv * static_cast<C>(wp[j * k + p]);
          u += xv * static_cast<C>(wp[(f + j) * k + p]);
        }
        gate[static_cast<size_t>(i * f + j)] = g;
        up[static_cast<size_t>(i * f + j)] = u;
      }
  }
  T* yp = y.data<T>();
  for (size_t i = 0; i < gate.size(); ++i) yp[i] = static_cast<T>(gate_activation(gate[i], act) * up[i]);
}

template <class T>
void linear_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t k = ctx.input(1).shape()[1];
  std::vector<Tensor*> ys;
  for (size_t i = 0; i < ctx.num_outputs(); ++i) ys.push_back(&ctx.output(i));
  const Tensor* bias = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  linear_into(x.data<T>(), k == 0 ? 0 : x.numel() / k, ctx.input(1), bias, ys);
}

template <class T>
void silu_gate_linear_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t k = ctx.input(1).shape()[1];
  silu_gate_into(x.data<T>(), k == 0 ? 0 : x.numel() / k, ctx.input(1), ctx.output(0),
                 gate_activation_of(ctx.attr_string("activation", "silu")));
}

// ---- RmsNormLinear: inputs x, skip (optional), gamma, w, bias (optional); outputs sum (optional), y... ----

void infer_rms_norm_linear(InferContext& ctx) {
  check_same_dtypes(ctx);
  ONYX_CHECK((ctx.num_inputs() == 4 || ctx.num_inputs() == 5) && ctx.has_input(2) && ctx.has_input(3),
             "RmsNormLinear takes x, skip, gamma, w and a bias");
  const PartialShape& x = ctx.input_shape(0);
  const PartialShape& w = ctx.input_shape(3);
  ONYX_CHECK(w.rank_known && w.dims.size() == 2, "the weight must be 2-D [N, K], got ", w.str());
  ONYX_CHECK(!x.rank_known || !x.dims.empty(), "x must have at least one dimension");
  const int64_t n = w.dims[0], k = w.dims[1];
  if (x.rank_known && x.dims.back() >= 0 && k >= 0)
    ONYX_CHECK(x.dims.back() == k, "x ", x.str(), " does not end in the weight's K = ", k, " (weight ", w.str(), ")");
  const PartialShape& g = ctx.input_shape(2);
  if (g.fully_known() && k >= 0)
    ONYX_CHECK(g.dims.size() == 1 && g.dims[0] == k, "gamma must be [", k, "], got ", g.str());
  if (ctx.has_input(1) && ctx.input_shape(1).fully_known() && x.fully_known())
    ONYX_CHECK(ctx.input_shape(1).dims == x.dims, "skip ", ctx.input_shape(1).str(), " must have x's shape ", x.str());
  const DType dt = ctx.input_dtype(0);
  if (ctx.has_output(0)) ctx.set_output(0, dt, x);
  check_bias(ctx, 4, n);
  if (ctx.attr_int("gated", 0) != 0) {
    ONYX_CHECK(!ctx.has_input(4), "the gated form takes no bias");
    ONYX_CHECK(ctx.num_outputs() == 2, "the gated form gives the sum and one output");
    ONYX_CHECK(n < 0 || n % 2 == 0, "the weight's N = ", n, " must be even (gate rows, then up rows)");
    gate_activation_of(ctx.attr_string("activation", "silu"));
    ctx.set_output(1, dt, with_last(x, n < 0 ? -1 : n / 2));
    return;
  }
  ONYX_CHECK(!ctx.has_attr("activation"), "an activation applies to the gated form (gated = 1) only");
  const std::vector<int64_t> s = splits_of(ctx, n);
  ONYX_CHECK(s.size() + 1 == ctx.num_outputs(), s.size(), " splits for ", ctx.num_outputs() - 1, " outputs");
  for (size_t i = 0; i < s.size(); ++i) ctx.set_output(i + 1, dt, with_last(x, s[i]));
}

template <class T>
void rms_norm_linear_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& gamma = ctx.input(2);
  const Tensor& w = ctx.input(3);
  const int64_t k = w.shape()[1];
  const int64_t m = k == 0 ? 0 : x.numel() / k;
  const std::vector<T> normed =
      rms_normalized_rows<T>(x.data<T>(), ctx.has_input(1) ? ctx.input(1).data<T>() : nullptr, gamma.data<T>(),
                             ctx.has_output(0) ? ctx.output(0).data<T>() : nullptr, m, k,
                             ctx.attr_float("epsilon", 1e-5f));
  if (ctx.attr_int("gated", 0) != 0) {
    silu_gate_into(normed.data(), m, w, ctx.output(1), gate_activation_of(ctx.attr_string("activation", "silu")));
    return;
  }
  std::vector<Tensor*> ys;
  for (size_t i = 1; i < ctx.num_outputs(); ++i) ys.push_back(&ctx.output(i));
  linear_into(normed.data(), m, w, ctx.has_input(4) ? &ctx.input(4) : nullptr, ys);
}

}  // namespace

void register_linear_ops(OpRegistry& r) {
  r.add(domain_op("onyx", "Linear", 1, infer_linear, [](KernelContext& ctx) {
    dispatch<FloatTypes>(ctx.input(0).dtype(), "Linear",
                         [&](auto tag) { linear_kernel<typename decltype(tag)::type>(ctx); });
  }));
  r.add(domain_op("onyx", "SiluGateLinear", 1, infer_silu_gate_linear, [](KernelContext& ctx) {
    dispatch<FloatTypes>(ctx.input(0).dtype(), "SiluGateLinear",
                         [&](auto tag) { silu_gate_linear_kernel<typename decltype(tag)::type>(ctx); });
  }));
  r.add(domain_op("onyx", "RmsNormLinear", 1, infer_rms_norm_linear, [](KernelContext& ctx) {
    dispatch<FloatTypes>(ctx.input(0).dtype(), "RmsNormLinear",
                         [&](auto tag) { rms_norm_linear_kernel<typename decltype(tag)::type>(ctx); });
  }));
}

}  // namespace onyx
