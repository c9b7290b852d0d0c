// com.microsoft FusedConv and FusedGemm: what onnxruntime's graph optimizer (level "extended"
// and above) folds a Conv or Gemm and the activation after it into, and what a model saved
// from an optimized session holds.
//
//   FusedConv(X, W, B?, Z?) = activation(Conv(X, W, B) + Z)
//     activation: Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid, with activation_params
//     (LeakyRelu: alpha; Clip: min, max; HardSigmoid: alpha, beta).
//   FusedGemm(A, B, C?) = activation(Gemm(A, B, C))
//     activation the same, and Elu, Selu, Softsign, ThresholdedRelu, ScaledTanh, Softplus;
//     parameters in activation_alpha, activation_beta, activation_gamma.
//
// The product is ONNX's Conv or Gemm, run as its own node; the activation then runs in place.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "ops/common.h"
#include "ops/compute.h"

namespace onyx {

namespace {

using ActivationFn = std::function<double(double)>;

// Parameter i of the activation (in the order its op names them), or `fallback`.
using Param = std::function<double(size_t i, double fallback)>;

ActivationFn activation(const std::string& name, const Param& p, bool gemm) {
  if (name == "Relu") return [](double x) { return std::max(x, 0.0); };
  if (name == "Tanh") return [](double x) { return std::tanh(x); };
  if (name == "Sigmoid") return [](double x) { return 1 / (1 + std::exp(-x)); };
  if (name == "LeakyRelu") return [a = p(0, 0.01)](double x) { return x >= 0 ? x : a * x; };
  if (name == "Clip")
    return [lo = p(0, -INFINITY), hi = p(1, INFINITY)](double x) { return std::clamp(x, lo, hi); };
  if (name == "HardSigmoid")
    return [a = p(0, 0.2), b = p(1, 0.5)](double x) { return std::clamp(a * x + b, 0.0, 1.0); };
  if (gemm) {
    if (name == "Elu") return [a = p(0, 1.0)](double x) { return x >= 0 ? x : a * (std::exp(x) - 1); };
    if (name == "Selu")
      return [a = p(0, 1.67326319217681884765625), g = p(2, 1.05070102214813232421875)](double x) {
        return g * (x > 0 ? x : a * (std::exp(x) - 1));
      };
    if (name == "Softsign") return [](double x) { return x / (1 + std::fabs(x)); };
    if (name == "ThresholdedRelu") return [a = p(0, 1.0)](double x) { return x > a ? x : 0.0; };
    if (name == "ScaledTanh") return [a = p(0, 1.0), b = p(1, 1.0)](double x) { return a * std::tanh(b * x); };
    if (name == "Softplus") return [](double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); };
  }
  throw Error(cat("activation \"", name, "\" is not one that onnxruntime fuses into ", gemm ? "FusedGemm" : "FusedConv"));
}

ActivationFn node_activation(const NodeView& n, bool gemm) {
  const std::string name = n.attr_string("activation", "");
  ONYX_CHECK(!name.empty(), "needs its activation attribute");
  if (gemm) {
    static const char* const kNames[] = {"activation_alpha", "activation_beta", "activation_gamma"};
    return activation(name, [&](size_t i, double fallback) {
      return n.has_attr(kNames[i]) ? static_cast<double>(n.attr_float(kNames[i], 0.f)) : fallback;
    }, true);
  }
  const std::vector<float> params = n.attr_floats("activation_params");
  return activation(name, [&](size_t i, double fallback) { return i < params.size() ? params[i] : fallback; }, false);
}

// The node computing the product: this node's attributes less the activation's, as `op`.
Node product_node(const Node& fused, const char* op, size_t inputs) {
  Node n;
  n.name = fused.name;
  n.op_type = op;
  n.opset = 13;
  for (const auto& a : fused.attributes)
    if (a.name.rfind("activation", 0) != 0) n.attributes.push_back(a);
  for (size_t i = 0; i < inputs; ++i) n.inputs.push_back(i < fused.inputs.size() && fused.inputs[i] >= 0 ? static_cast<int>(i) : -1);
  n.outputs = {static_cast<int>(inputs)};
  resolve_op(n, OpRegistry::global());
  return n;
}

void infer_via(InferContext& ctx, const char* op, size_t inputs, bool gemm) {
  node_activation(ctx, gemm);  // refuses an unknown activation while loading
  Node n = product_node(ctx.node(), op, inputs);
  std::vector<ValueType> types;
  std::vector<const Tensor*> values;
  for (size_t i = 0; i < inputs; ++i) {
    types.push_back(ctx.has_input(i) ? ValueType{ctx.input_dtype(i), ctx.input_shape(i)} : ValueType{});
    values.push_back(ctx.has_input(i) ? ctx.input_value(i) : nullptr);
  }
  InferContext inner(n, types, values);
  n.def->infer(inner);
  const DType t = inner.outputs()[0].dtype;
  ONYX_CHECK(t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16,
             "takes float, double or float16, got ", dtype_name(t));
  ctx.set_output(0, t, inner.outputs()[0].shape);
}

void run_fused(KernelContext& ctx, const char* op, size_t inputs, bool gemm) {
  const ActivationFn act = node_activation(ctx, gemm);
  const Node n = product_node(ctx.node(), op, inputs);
  std::vector<const Tensor*> in;
  for (size_t i = 0; i < inputs; ++i) in.push_back(ctx.has_input(i) ? &ctx.input(i) : nullptr);
  const Tensor y = with_context(cat("its ", op), [&] { return compute_node(n, in, ctx.allocator())[0]; });
  Tensor& out = ctx.output(0);
  ONYX_CHECK(y.shape() == out.shape() && y.dtype() == out.dtype(), "its ", op, " gave ", y.type_str(), ", not ",
             out.type_str());
  const Tensor* z = nullptr;
  if (!gemm && ctx.has_input(3)) {
    z = &ctx.input(3);
    ONYX_CHECK(z->shape() == out.shape() && z->dtype() == out.dtype(), "Z must be ", out.type_str(), " like the "
               "convolution's output, got ", z->type_str());
  }
  dispatch<TypeList<float, double, Float16>>(out.dtype(), "activation", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* src = y.data<T>();
    const T* zp = z ? z->data<T>() : nullptr;
    T* dst = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      // The sum is rounded to the output type, as the unfused Add would round it.
      const C v = zp ? static_cast<C>(static_cast<C>(src[i]) + static_cast<C>(zp[i])) : static_cast<C>(src[i]);
      dst[i] = static_cast<T>(static_cast<C>(act(static_cast<double>(v))));
    }
  });
}

}  // namespace

void register_fused_conv_gemm_ops(OpRegistry& r) {
  const std::string ms = "com.microsoft";
  r.add(domain_op(ms, "FusedConv", 1, [](InferContext& c) { infer_via(c, "Conv", 3, false); },
                  [](KernelContext& c) { run_fused(c, "Conv", 3, false); }));
  r.add(domain_op(ms, "FusedGemm", 1, [](InferContext& c) { infer_via(c, "Gemm", 3, true); },
                  [](KernelContext& c) { run_fused(c, "Gemm", 3, true); }));
}

}  // namespace onyx
