// onyx::DenseMatMul: a matrix product by a constant weight, the weight packed at load
// (passes/fuse_cpu.h puts it in place of MatMul or Gemm by an initializer, with the bias Add
// and the activation that follow):
//
//   onyx::DenseMatMul(X [..., k], W (packed, cpu/gemm.h), bias [n]?, R?; k, n, activation, alpha, beta)
//     = act(X W + bias + R) of shape [..., n], R (a residual) broadcast onto it
//
// activation: "" (none), relu, leaky_relu (alpha), clip (alpha = min, beta = max), sigmoid, tanh,
// gelu, gelu_tanh, silu, hard_sigmoid (alpha, beta), hard_swish.
#include "cpu/gemm.h"
#include "ops/broadcast.h"
#include "ops/common.h"
#include "ops/fused_activation.h"

namespace onyx {

cpu::Activation parse_activation(const std::string& name, float alpha, float beta) {
  using cpu::Act;
  static const std::pair<const char*, Act> kinds[] = {
      {"", Act::kNone},         {"relu", Act::kRelu},          {"leaky_relu", Act::kLeakyRelu},
      {"clip", Act::kClip},     {"sigmoid", Act::kSigmoid},    {"tanh", Act::kTanh},
      {"gelu", Act::kGelu},     {"gelu_tanh", Act::kGeluTanh}, {"silu", Act::kSilu},
      {"hard_sigmoid", Act::kHardSigmoid}, {"hard_swish", Act::kHardSwish}};
  for (const auto& [n, k] : kinds)
    if (name == n) return cpu::Activation{k, alpha, beta};
  throw Error(cat("unknown activation '", name, "'"));
}

cpu::Activation parse_activation_attrs(const NodeView& node) {
  return parse_activation(node.attr_string("activation", ""), node.attr_float("alpha", 0.f),
                          node.attr_float("beta", 0.f));
}

namespace {

void infer_dense(InferContext& ctx) {
  const int64_t k = ctx.attr_int("k"), n = ctx.attr_int("n");
  ONYX_CHECK(k >= 0 && n >= 0, "k = ", k, " and n = ", n, " must be >= 0");
  ONYX_CHECK(ctx.input_dtype(0) == DType::kFloat32 && ctx.input_dtype(1) == DType::kFloat32,
             "DenseMatMul takes float32 X and W, got ", dtype_name(ctx.input_dtype(0)), " and ",
             dtype_name(ctx.input_dtype(1)));
  parse_activation_attrs(ctx);
  const PartialShape& x = ctx.input_shape(0);
  if (!x.rank_known) {
    ctx.set_output(0, DType::kFloat32, PartialShape());
    return;
  }
  ONYX_CHECK(!x.dims.empty(), "X must have rank >= 1");
  ONYX_CHECK(x.dims.back() < 0 || x.dims.back() == k, "X ", x.str(), " must end in k = ", k);
  PartialShape out = x;
  out.dims.back() = n;
  if (ctx.has_input(3)) out = broadcast_shapes(out, ctx.input_shape(3));  // the residual's Add
  ctx.set_output(0, DType::kFloat32, out);
}

// What a DenseMatMul node's attributes say, read once per node (dense_specialize) or per call.
struct DenseAttrs {
  int64_t k = 0, n = 0;
  cpu::Activation act;
  explicit DenseAttrs(const NodeView& node)
      : k(node.attr_int("k")), n(node.attr_int("n")), act(parse_activation_attrs(node)) {}
};

void dense_run(KernelContext& ctx, const DenseAttrs& attrs) {
  const int64_t k = attrs.k, n = attrs.n;
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  ONYX_CHECK(w.numel() == cpu::packed_size(k, n), "the packed weight has ", w.numel(), " values, not ",
             cpu::packed_size(k, n), " (k = ", k, ", n = ", n, ")");
  cpu::Epilogue ep;
  if (ctx.has_input(2)) {
    const Tensor& b = ctx.input(2);
    ONYX_CHECK(b.dtype() == DType::kFloat32 && b.numel() == n, "the bias must be ", n, " float32 values, got ",
               b.numel(), " of ", dtype_name(b.dtype()));
    ep.bias = b.data<float>();
  }
  ep.act = attrs.act;
  Tensor& out = ctx.output(0);
  if (out.numel() == 0) return;
  const int64_t rows = out.numel() / n;  // X's leading dimensions, flattened
  const Tensor* r = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  if (r) ONYX_CHECK(r->dtype() == DType::kFloat32, "R must be float32, got ", dtype_name(r->dtype()));
  if (!r || (r->shape() == out.shape() && rows * k == x.numel())) {  // the residual in the product's epilogue
    ep.residual = r ? r->data<float>() : nullptr;
    ep.ldr = n;
    cpu::gemm_packed(rows, n, k, x.data<float>(), k, w.data<float>(), out.data<float>(), n, ep);
    return;
  }
  // A residual of another shape: the product first (X's rows), then both broadcast onto the
  // output as the Add did, then the activation.
  const cpu::Activation act = ep.act;
  ep.act = cpu::Activation{};
  Shape product_shape = x.shape();
  product_shape[product_shape.rank() - 1] = n;
  Tensor product(DType::kFloat32, product_shape, ctx.allocator());
  cpu::gemm_packed(product.numel() / n, n, k, x.data<float>(), k, w.data<float>(), product.data<float>(), n, ep);
  float* po = out.data<float>();
  const float* pp = product.data<float>();
  const float* pr = r->data<float>();
  for_each_broadcast<2>(out.shape(), {&product.shape(), &r->shape()},
                        [&](int64_t o, const std::array<int64_t, 2>& i) { po[o] = pp[i[0]] + pr[i[1]]; });
  cpu::activate(po, po, out.numel(), act);
}

void dense_kernel(KernelContext& ctx) { dense_run(ctx, DenseAttrs(ctx)); }

KernelFn dense_specialize(const Node& node) {
  return [attrs = DenseAttrs(NodeView(node))](KernelContext& ctx) { dense_run(ctx, attrs); };
}

}  // namespace

void register_dense_ops(OpRegistry& r) {
  r.add(domain_op("onyx", "DenseMatMul", 1, infer_dense, dense_kernel).specialized(dense_specialize));
}

}  // namespace onyx
