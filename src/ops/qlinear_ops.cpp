// com.microsoft quantized ops of the QOperator form (what onnxruntime's quantize_static emits
// with QuantFormat.QOperator, and its optimizer fuses QDQ graphs into): QGemm, QLinearAdd,
// QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat, QLinearGlobalAveragePool,
// QLinearWhere, and QLinearSoftmax, QLinearAveragePool and QLinearReduceMean (which run the
// float op's own kernel between dequantizing and quantizing).
// Each dequantizes its int8/uint8 inputs ((q - zero_point) * scale), computes in float, and
// quantizes the result (round half to even, saturated), as their definitions state; QGemm
// accumulates its product in integers.
#include <algorithm>
#include <cmath>

#include "ops/broadcast.h"
#include "ops/common.h"
#include "ops/compute.h"
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
//      alpha * ((A - a_zp)(B - b_zp) + C) * a_scale * b_scale (C int32), quantized
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
      // C joins the int32 sum before alpha scales it, as onnxruntime's kernel computes it.
      if (C) acc += C->get_as_int64(C->numel() == 1 ? 0 : C->numel() == N ? j : i * N + j);
      const double v = alpha * static_cast<double>(acc) * s;
      if (quantized) store(Y, i * N + j, v, qy);
      else Y.data<float>()[i * N + j] = static_cast<float>(v);
    }
}

// ---- QLinearWhere(condition, X, x_scale, x_zp, Y, y_scale, y_zp, z_scale, z_zp) ----

void infer_qlinear_where(InferContext& ctx) {
  ONYX_CHECK(ctx.input_dtype(0) == DType::kBool, "condition must be bool, got ", dtype_name(ctx.input_dtype(0)));
  check_int8(ctx.input_dtype(1), "X");
  ONYX_CHECK(ctx.input_dtype(4) == ctx.input_dtype(1), "X and Y must be one type");
  const DType z = ctx.has_input(8) ? ctx.input_dtype(8) : ctx.input_dtype(1);
  ctx.set_output(0, z, broadcast_shapes(broadcast_shapes(ctx.input_shape(0), ctx.input_shape(1)), ctx.input_shape(4)));
}

void qlinear_where(KernelContext& ctx) {
  const Tensor& c = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(4);
  const QParams qx = qparams(ctx, 2, 3, "X"), qy = qparams(ctx, 5, 6, "Y"), qz = qparams(ctx, 7, 8, "Z");
  Tensor& z = ctx.output(0);
  for_each_broadcast<3>(z.shape(), {&c.shape(), &x.shape(), &y.shape()},
                        [&](int64_t o, const std::array<int64_t, 3>& i) {
                          store(z, o, c.data<bool>()[i[0]] ? dequant(x, i[1], qx) : dequant(y, i[2], qy), qz);
                        });
}

// ---- QLinearSoftmax, QLinearAveragePool, QLinearReduceMean: the float op between ----

// The float tensor of x's values.
Tensor dequantized(const Tensor& x, const QParams& q, Allocator& alloc) {
  Tensor f(DType::kFloat32, x.shape(), alloc);
  for (int64_t i = 0; i < x.numel(); ++i) f.data<float>()[i] = static_cast<float>(dequant(x, i, q));
  return f;
}

// Runs float op `op` at `opset` with this node's attributes except `drop` on `inputs`.
Tensor run_float_op(const KernelContext& ctx, const char* op, int opset, const std::vector<const Tensor*>& inputs,
                    std::initializer_list<std::string_view> drop) {
  Node n;
  n.name = ctx.node().name;
  n.op_type = op;
  n.opset = opset;
  for (const auto& a : ctx.node().attributes)
    if (std::find(drop.begin(), drop.end(), a.name) == drop.end()) n.attributes.push_back(a);
  for (size_t i = 0; i < inputs.size(); ++i) n.inputs.push_back(inputs[i] ? static_cast<int>(i) : -1);
  n.outputs = {static_cast<int>(inputs.size())};
  resolve_op(n, OpRegistry::global());
  return with_context(cat("its ", op), [&] { return compute_node(n, inputs, ctx.allocator())[0]; });
}

// Infers through the float op on a float input of X's shape; output type: y_zero_point's, else X's.
void infer_via_float(InferContext& ctx, const char* op, int opset, std::initializer_list<std::string_view> drop,
                     size_t y_zero) {
  check_int8(ctx.input_dtype(0), "X");
  Node n;
  n.op_type = op;
  n.opset = opset;
  for (const auto& a : ctx.node().attributes)
    if (std::find(drop.begin(), drop.end(), a.name) == drop.end()) n.attributes.push_back(a);
  n.inputs = {0};
  n.outputs = {1};
  InferContext inner(n, {ValueType{DType::kFloat32, ctx.input_shape(0)}}, {nullptr});
  resolve_op(n, OpRegistry::global());
  n.def->infer(inner);
  ctx.set_output(0, ctx.has_input(y_zero) ? ctx.input_dtype(y_zero) : ctx.input_dtype(0), inner.outputs()[0].shape);
}

void quantize_into(const Tensor& f, Tensor& y, const QParams& q) {
  for (int64_t i = 0; i < f.numel(); ++i) store(y, i, f.data<float>()[i], q);
}

// QLinearSoftmax follows the Softmax of its `opset` attribute (before 13: over the axes from
// `axis` on, flattened).
int softmax_opset(const NodeView& n) { return static_cast<int>(n.attr_int("opset", 13)); }

void qlinear_softmax(KernelContext& ctx) {
  const QParams qx = qparams(ctx, 1, 2, "X"), qy = qparams(ctx, 3, 4, "Y");
  const Tensor x = dequantized(ctx.input(0), qx, ctx.allocator());
  quantize_into(run_float_op(ctx, "Softmax", softmax_opset(ctx), {&x}, {"opset"}), ctx.output(0), qy);
}

void check_channels_first(const NodeView& n) {
  ONYX_CHECK(n.attr_int("channels_last", 0) == 0, "QLinearAveragePool with channels_last=1 is not supported by onyx");
}

void qlinear_average_pool(KernelContext& ctx) {
  check_channels_first(ctx);
  const QParams qx = qparams(ctx, 1, 2, "X"), qy = qparams(ctx, 3, 4, "Y");
  const Tensor x = dequantized(ctx.input(0), qx, ctx.allocator());
  quantize_into(run_float_op(ctx, "AveragePool", 19, {&x}, {"channels_last"}), ctx.output(0), qy);
}

void qlinear_reduce_mean(KernelContext& ctx) {
  const QParams qx = qparams(ctx, 1, 2, "data"), qy = qparams(ctx, 3, 4, "reduced");
  const Tensor x = dequantized(ctx.input(0), qx, ctx.allocator());
  quantize_into(run_float_op(ctx, "ReduceMean", 13, {&x}, {}), ctx.output(0), qy);
}

}  // namespace

void register_qlinear_ops(OpRegistry& r) {
  r.add(domain_op("com.microsoft", "QLinearWhere", 1, infer_qlinear_where, qlinear_where));
  r.add(domain_op("com.microsoft", "QLinearSoftmax", 1,
                  [](InferContext& c) { infer_via_float(c, "Softmax", softmax_opset(c), {"opset"}, 4); },
                  qlinear_softmax));
  r.add(domain_op("com.microsoft", "QLinearAveragePool", 1,
                  [](InferContext& c) {
                    check_channels_first(c);
                    infer_via_float(c, "AveragePool", 19, {"channels_last"}, 4);
                  },
                  qlinear_average_pool));
  r.add(domain_op("com.microsoft", "QLinearReduceMean", 1,
                  [](InferContext& c) { infer_via_float(c, "ReduceMean", 13, {}, 4); }, qlinear_reduce_mean));
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
