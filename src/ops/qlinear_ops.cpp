// com.microsoft quantized ops of the QOperator form (what onnxruntime's quantize_static emits
// with QuantFormat.QOperator, and its optimizer fuses QDQ graphs into): QGemm, QLinearAdd,
// QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat and QLinearGlobalAveragePool.
// Each dequantizes its int8/uint8 inputs ((q - zero_point) * scale), computes in float, and
// quantizes the result (round half to even, saturated), as their definitions state; QGemm
// accumulates its product in integers.
#include <cmath>

#include "ops/broadcast.h"
#include "ops/common.h"
#include "ops/quantize.h"

namespace onyx {

namespace {

void check_int8(DType d, std::string_view what) {
  ONYX_CHECK(d == DType::kInt8 || d == DType::kUInt8, what, " must be int8 or uint8, got ", dtype_name(d));
}

// A per-tensor (scale, zero point) pair at inputs (s, z); the zero point may be omitted.
struct QParams {
  double scale = 1;
  int64_t zero = 0;
};

QParams qparams(const KernelContext& ctx, size_t s, size_t z, std::string_view what) {
  QParams q;
  const Tensor& st = ctx.input(s);
  ONYX_CHECK(st.numel() == 1 && dtype_is_float(st.dtype()), what, "'s scale must be one floating value, got ",
             st.type_str());
  q.scale = static_cast<float>(st.get_as_double(0));
  ONYX_CHECK(q.scale > 0 && std::isfinite(q.scale), what, "'s scale must be positive, got ", q.scale);
  if (ctx.has_input(z)) {
    ONYX_CHECK(ctx.input(z).numel() == 1, what, "'s zero point must be one value, got ", ctx.input(z).type_str());
    q.zero = ctx.input(z).get_as_int64(0);
  }
  return q;
}

double dequant(const Tensor& t, int64_t i, const QParams& q) {
  return static_cast<double>(static_cast<float>(static_cast<double>(t.get_as_int64(i) - q.zero) * q.scale));
}

void store(Tensor& y, int64_t i, double v, const QParams& q) {
  const QuantRange r = quant_range(y.dtype(), "output");
  const int64_t code = quantize_scaled(static_cast<float>(v / q.scale), q.zero, r);
  if (y.dtype() == DType::kInt8) y.data<int8_t>()[i] = static_cast<int8_t>(code);
  else y.data<uint8_t>()[i] = static_cast<uint8_t>(code);
}

// ---- QLinearAdd / QLinearMul(A, A_scale, A_zp?, B, B_scale, B_zp?, C_scale, C_zp?) ----

void infer_qlinear_binary(InferContext& ctx) {
  check_int8(ctx.input_dtype(0), "A");
  ONYX_CHECK(ctx.input_dtype(3) == ctx.input_dtype(0), "A and B must be one type, got ", dtype_name(ctx.input_dtype(0)),
             " and ", dtype_name(ctx.input_dtype(3)));
  ctx.set_output(0, ctx.input_dtype(0), broadcast_shapes(ctx.input_shape(0), ctx.input_shape(3)));
}

template <bool kMul>
void qlinear_binary(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(3);
  const QParams qa = qparams(ctx, 1, 2, "A"), qb = qparams(ctx, 4, 5, "B"), qc = qparams(ctx, 6, 7, "C");
  Tensor& c = ctx.output(0);
  for_each_broadcast<2>(c.shape(), {&a.shape(), &b.shape()}, [&](int64_t o, const std::array<int64_t, 2>& i) {
    const double x = dequant(a, i[0], qa), y = dequant(b, i[1], qb);
    store(c, o, kMul ? x * y : x + y, qc);
  });
}

// ---- QLinearSigmoid / QLinearLeakyRelu(X, X_scale, X_zp?, Y_scale, Y_zp?) ----

void infer_qlinear_unary(InferContext& ctx) {
  check_int8(ctx.input_dtype(0), "X");
  infer_same_as_input(ctx);
}

template <class Fn>
void qlinear_unary(KernelContext& ctx, Fn&& fn) {
  const Tensor& x = ctx.input(0);
  const QParams qx = qparams(ctx, 1, 2, "X"), qy = qparams(ctx, 3, 4, "Y");
  Tensor& y = ctx.output(0);
  for (int64_t i = 0; i < x.numel(); ++i) store(y, i, fn(dequant(x, i, qx)), qy);
}

// ---- QLinearConcat(Y_scale, Y_zp, (X, X_scale, X_zp)...; axis) ----

void infer_qlinear_concat(InferContext& ctx) {
  ONYX_CHECK(ctx.num_inputs() >= 5 && (ctx.num_inputs() - 2) % 3 == 0, "QLinearConcat takes Y_scale, Y_zero_point ",
             "and (X, X_scale, X_zero_point) triples, got ", ctx.num_inputs(), " inputs");
  const DType t = ctx.input_dtype(2);
  check_int8(t, "input 2");
  Shape out = ctx.input_concrete_shape(2);
  const int64_t axis = normalize_axis(ctx.attr_int("axis"), static_cast<int64_t>(out.rank()));
  std::vector<int64_t> dims = out.dims();
  for (size_t i = 5; i < ctx.num_inputs(); i += 3) {
    const Shape s = ctx.input_concrete_shape(i);
    ONYX_CHECK(ctx.input_dtype(i) == t && s.rank() == out.rank(), "input ", i, " is ", dtype_name(ctx.input_dtype(i)),
               s.str(), ", input 2 ", dtype_name(t), out.str());
    for (size_t d = 0; d < s.rank(); ++d)
      ONYX_CHECK(static_cast<int64_t>(d) == axis || s[d] == dims[d], "input ", i, " ", s.str(), " differs from ",
                 out.str(), " off axis ", axis);
    dims[axis] += s[axis];
  }
  ctx.set_output(0, t, Shape(dims));
}

void qlinear_concat(KernelContext& ctx) {
  Tensor& y = ctx.output(0);
  const QParams qy = qparams(ctx, 0, 1, "Y");
  const int64_t rank = static_cast<int64_t>(y.rank());
  const int64_t axis = normalize_axis(ctx.attr_int("axis"), rank);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= y.shape()[d];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= y.shape()[d];
  const int64_t total = y.shape()[axis];
  int64_t at = 0;
  for (size_t i = 2; i < ctx.num_inputs(); i += 3) {
    const Tensor& x = ctx.input(i);
    const QParams qx = qparams(ctx, i + 1, i + 2, "an input");
    const int64_t len = x.shape()[axis];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < len * inner; ++k) store(y, (o * total + at) * inner + k, dequant(x, o * len * inner + k, qx), qy);
    at += len;
  }
}

// ---- QLinearGlobalAveragePool(X, x_scale, x_zp, y_scale, y_zp; channels_last) ----

void infer_qlinear_gap(InferContext& ctx) {
  check_int8(ctx.input_dtype(0), "X");
  const Shape x = ctx.input_concrete_shape(0);
  ONYX_CHECK(x.rank() >= 3, "X must be [N, C, spatial...] (or channels last), got ", x.str());
  const bool last = ctx.attr_int("channels_last", 0) != 0;
  std::vector<int64_t> dims = x.dims();
  for (size_t d = last ? 1 : 2; d < (last ? dims.size() - 1 : dims.size()); ++d) dims[d] = 1;
  ctx.set_output(0, ctx.input_dtype(0), Shape(dims));
}

void qlinear_gap(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const QParams qx = qparams(ctx, 1, 2, "X"), qy = qparams(ctx, 3, 4, "Y");
  const bool last = ctx.attr_int("channels_last", 0) != 0;
  const int64_t N = x.shape()[0], C = last ? x.shape().dims().back() : x.shape()[1];
  const int64_t spatial = N * C ? x.numel() / (N * C) : 0;
  Tensor& y = ctx.output(0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      int64_t sum = 0;
      for (int64_t s = 0; s < spatial; ++s)
        sum += x.get_as_int64(last ? (n * spatial + s) * C + c : (n * C + c) * spatial + s) - qx.zero;
      store(y, n * C + c, static_cast<double>(sum) * qx.scale / static_cast<double>(spatial), qy);
    }
}

// ---- QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?; alpha, transA, transB):
//      alpha * (A - a_zp)(B - b_zp) * a_scale * b_scale + C * a_scale * b_scale (C int32), quantized
//      to y's type when y_scale is given, else float ----

void infer_qgemm(InferContext& ctx) {
  check_int8(ctx.input_dtype(0), "A");
  check_int8(ctx.input_dtype(3), "B");
  const Shape a = ctx.input_concrete_shape(0), b = ctx.input_concrete_shape(3);
  ONYX_CHECK(a.rank() == 2 && b.rank() == 2, "A and B must be matrices, got ", a.str(), " and ", b.str());
  const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  const int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1], kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
  ONYX_CHECK(k == kb, "inner dimensions differ: A ", a.str(), " x B ", b.str());
  if (ctx.has_input(6)) ONYX_CHECK(ctx.input_dtype(6) == DType::kInt32, "C must be int32");
  const DType out = ctx.has_input(7) ? (ctx.has_input(8) ? ctx.input_dtype(8) : ctx.input_dtype(0)) : DType::kFloat32;
  ctx.set_output(0, out, Shape{m, n});
}

void qgemm(KernelContext& ctx) {
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(3);
  Tensor& Y = ctx.output(0);
  const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  const int64_t M = Y.shape()[0], N = Y.shape()[1], K = ta ? A.shape()[0] : A.shape()[1];
  const QParams qa = qparams(ctx, 1, 2, "A");
  const Tensor& bs = ctx.input(4);
  ONYX_CHECK(bs.numel() == 1 || bs.numel() == N, "b_scale must be a scalar or [", N, "], got ", bs.type_str());
  const Tensor* bz = ctx.has_input(5) ? &ctx.input(5) : nullptr;
  if (bz) ONYX_CHECK(bz->numel() == bs.numel(), "b_zero_point must match b_scale's shape");
  const Tensor* C = ctx.has_input(6) ? &ctx.input(6) : nullptr;
  if (C) ONYX_CHECK(C->numel() == 1 || C->numel() == N || C->shape() == Shape({M, N}), "C must broadcast to [", M,
                    ", ", N, "], got ", C->type_str());
  const bool quantized = ctx.has_input(7);
  const QParams qy = quantized ? qparams(ctx, 7, 8, "Y") : QParams{};
  const double alpha = ctx.attr_float("alpha", 1.f);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const int64_t pc = bs.numel() == 1 ? 0 : j;
      const int64_t zb = bz ? bz->get_as_int64(pc) : 0;
      int64_t acc = 0;
      for (int64_t p = 0; p < K; ++p)
        acc += (A.get_as_int64(ta ? p * M + i : i * K + p) - qa.zero) * (B.get_as_int64(tb ? j * K + p : p * N + j) - zb);
      const double s = qa.scale * static_cast<float>(bs.get_as_double(pc));
      double v = alpha * static_cast<double>(acc) * s;
      if (C) v += static_cast<double>(C->get_as_int64(C->numel() == 1 ? 0 : C->numel() == N ? j : i * N + j)) * s;
      if (quantized) store(Y, i * N + j, v, qy);
      else Y.data<float>()[i * N + j] = static_cast<float>(v);
    }
}

}  // namespace

void register_qlinear_ops(OpRegistry& r) {
  const std::string ms = "com.microsoft";
  r.add(domain_op(ms, "QLinearAdd", 1, infer_qlinear_binary, qlinear_binary<false>));
  r.add(domain_op(ms, "QLinearMul", 1, infer_qlinear_binary, qlinear_binary<true>));
  r.add(domain_op(ms, "QLinearSigmoid", 1, infer_qlinear_unary,
                  [](KernelContext& c) { qlinear_unary(c, [](double v) { return 1 / (1 + std::exp(-v)); }); }));
  r.add(domain_op(ms, "QLinearLeakyRelu", 1, infer_qlinear_unary, [](KernelContext& c) {
    const double alpha = c.attr_float("alpha", 0.01f);
    qlinear_unary(c, [alpha](double v) { return v >= 0 ? v : alpha * v; });
  }));
  r.add(domain_op(ms, "QLinearConcat", 1, infer_qlinear_concat, qlinear_concat));
  r.add(domain_op(ms, "QLinearGlobalAveragePool", 1, infer_qlinear_gap, qlinear_gap));
  r.add(domain_op(ms, "QGemm", 1, infer_qgemm, qgemm));
}

}  // namespace onyx
