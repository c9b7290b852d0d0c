// The ai.onnx.preview.training optimizers, Adagrad, Adam and Momentum (plain and Nesterov):
// one update step of tensors X given their gradients G and optimizer state, for models that
// carry their own training step. Inputs are R (learning rate, scalar) and T (the step count,
// int64 scalar), then each of the n tensors' X, then their G, then their state; outputs are
// the n new X, then the new state. Math in double, stored in each tensor's float type.
//
// Also the two helpers that Gradient's expansion (passes/expand_gradient.h) emits:
// onyx::OnesLike, the seed dy/dy, and onyx::SumToShape, which sums a gradient over the axes
// along which the forward value was broadcast.
#include <cmath>

#include "ops/broadcast.h"
#include "ops/common.h"

namespace onyx {

namespace {

// The tensors' count n from the input count: 2 + per_tensor * n inputs, outputs_per * n outputs.
int64_t tensor_count(const NodeView& n, int per_tensor, int outputs_per) {
  const int64_t ins = static_cast<int64_t>(n.num_inputs()) - 2;
  ONYX_CHECK(ins > 0 && ins % per_tensor == 0, "takes R, T and then ", per_tensor,
             " inputs per optimized tensor (X.., G.., state..); got ", n.num_inputs(), " inputs");
  const int64_t count = ins / per_tensor;
  ONYX_CHECK(static_cast<int64_t>(n.num_outputs()) == outputs_per * count, "optimizes ", count, " tensors, so it has ",
             outputs_per * count, " outputs; got ", n.num_outputs());
  return count;
}

bool float_like(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }

// Output k * n + i is the new value of input group (k + 1)'s tensor i (X, then the state
// after G): same dtype and shape as X.
void infer_optimizer(InferContext& ctx, int per_tensor, int outputs_per) {
  const int64_t n = tensor_count(ctx, per_tensor, outputs_per);
  ONYX_CHECK(float_like(ctx.input_dtype(0)), "R must be float or double, got ", dtype_name(ctx.input_dtype(0)));
  ONYX_CHECK(ctx.input_dtype(1) == DType::kInt64, "T must be int64, got ", dtype_name(ctx.input_dtype(1)));
  for (int64_t i = 0; i < n; ++i) {
    const size_t x = static_cast<size_t>(2 + i);
    const DType t = ctx.input_dtype(x);
    ONYX_CHECK(float_like(t), "X", i, " must be float or double, got ", dtype_name(t));
    for (int k = 1; k < per_tensor; ++k)
      ONYX_CHECK(ctx.input_dtype(static_cast<size_t>(2 + k * n + i)) == t, "input ", 2 + k * n + i,
                 " must have X", i, "'s type ", dtype_name(t), ", got ",
                 dtype_name(ctx.input_dtype(static_cast<size_t>(2 + k * n + i))));
    // Outputs: X's new value, then the state inputs' new values (groups 2.. of the inputs).
    for (int k = 0; k < outputs_per; ++k) ctx.set_output(static_cast<size_t>(k * n + i), t, ctx.input_shape(x));
  }
}

struct StepInputs {
  double r = 0;
  int64_t t = 0;
};

StepInputs step_inputs(const KernelContext& ctx) {
  ONYX_CHECK(ctx.input(0).numel() == 1, "R must hold one value, has shape ", ctx.input(0).shape().str());
  ONYX_CHECK(ctx.input(1).numel() == 1, "T must hold one value, has shape ", ctx.input(1).shape().str());
  return {ctx.input(0).get_as_double(0), ctx.input(1).get_as_int64(0)};
}

// Calls fn(x, g, states, outs, count) per optimized tensor with pointers of its type, after
// checking every group has X's shape.
template <class Fn>
void for_each_tensor(KernelContext& ctx, int per_tensor, int outputs_per, Fn&& fn) {
  const int64_t n = tensor_count(ctx, per_tensor, outputs_per);
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& x = ctx.input(static_cast<size_t>(2 + i));
    for (int k = 1; k < per_tensor; ++k) {
      const Tensor& other = ctx.input(static_cast<size_t>(2 + k * n + i));
      ONYX_CHECK(other.shape() == x.shape(), "input ", 2 + k * n + i, " has shape ", other.shape().str(), "; X", i,
                 " has ", x.shape().str());
    }
    dispatch<TypeList<float, double>>(x.dtype(), "optimizer", [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::vector<const T*> in;
      for (int k = 0; k < per_tensor; ++k) in.push_back(ctx.input(static_cast<size_t>(2 + k * n + i)).template data<T>());
      std::vector<T*> out;
      for (int k = 0; k < outputs_per; ++k) out.push_back(ctx.output(static_cast<size_t>(k * n + i)).template data<T>());
      fn(in, out, x.numel());
    });
  }
}

// ---- Adagrad: inputs R, T, X.., G.., H.. (accumulated squared gradients); outputs X.., H.. ----

void adagrad(KernelContext& ctx) {
  const StepInputs step = step_inputs(ctx);
  const double r = step.r;  // a plain variable: lambdas below capture it (clang 14 cannot capture a binding)
  const int64_t t = step.t;
  const double decay = ctx.attr_float("decay_factor", 0.f), eps = ctx.attr_float("epsilon", 1e-6f),
               lambda = ctx.attr_float("norm_coefficient", 0.f);
  const double rate = r / (1 + static_cast<double>(t) * decay);
  for_each_tensor(ctx, 3, 2, [&](const auto& in, const auto& out, int64_t count) {
    for (int64_t j = 0; j < count; ++j) {
      const double x = in[0][j], g = lambda * x + in[1][j];
      const double h = in[2][j] + g * g;
      out[0][j] = static_cast<std::remove_reference_t<decltype(*out[0])>>(x - rate * g / (std::sqrt(h) + eps));
      out[1][j] = static_cast<std::remove_reference_t<decltype(*out[1])>>(h);
    }
  });
}

// ---- Adam: inputs R, T, X.., G.., V.. (momentum), H.. (squared); outputs X.., V.., H.. ----

void adam(KernelContext& ctx) {
  const StepInputs step = step_inputs(ctx);
  const double r = step.r;  // a plain variable: lambdas below capture it (clang 14 cannot capture a binding)
  const int64_t t = step.t;
  const double alpha = ctx.attr_float("alpha", 0.9f), beta = ctx.attr_float("beta", 0.999f),
               eps = ctx.attr_float("epsilon", 1e-6f), lambda = ctx.attr_float("norm_coefficient", 0.f),
               post = ctx.attr_float("norm_coefficient_post", 0.f);
  // Bias correction from the second step on (T counts steps taken before this one).
  const double td = static_cast<double>(t);
  const double rate = t > 0 ? r * std::sqrt(1 - std::pow(beta, td)) / (1 - std::pow(alpha, td)) : r;
  for_each_tensor(ctx, 4, 3, [&](const auto& in, const auto& out, int64_t count) {
    using T = std::remove_reference_t<decltype(*out[0])>;
    for (int64_t j = 0; j < count; ++j) {
      const double x = in[0][j], g = lambda * x + in[1][j];
      const double v = alpha * in[2][j] + (1 - alpha) * g;
      const double h = beta * in[3][j] + (1 - beta) * g * g;
      const double x_new = x - rate * v / (std::sqrt(h) + eps);
      out[0][j] = static_cast<T>((1 - post) * x_new);
      out[1][j] = static_cast<T>(v);
      out[2][j] = static_cast<T>(h);
    }
  });
}

// ---- Momentum: inputs R, T, X.., G.., V..; outputs X.., V.. ----

void momentum(KernelContext& ctx) {
  const StepInputs step = step_inputs(ctx);
  const double r = step.r;  // a plain variable: lambdas below capture it (clang 14 cannot capture a binding)
  const int64_t t = step.t;
  const double alpha = ctx.attr_float("alpha", NAN), beta = ctx.attr_float("beta", NAN),
               lambda = ctx.attr_float("norm_coefficient", NAN);
  ONYX_CHECK(!std::isnan(alpha) && !std::isnan(beta) && !std::isnan(lambda),
             "alpha, beta and norm_coefficient are required");
  const std::string mode = ctx.attr_string("mode", "");
  ONYX_CHECK(mode == "standard" || mode == "nesterov", "mode must be \"standard\" or \"nesterov\", got \"", mode, "\"");
  const double b = t > 0 ? beta : 1.0;  // the first step takes the whole gradient
  for_each_tensor(ctx, 3, 2, [&](const auto& in, const auto& out, int64_t count) {
    using T = std::remove_reference_t<decltype(*out[0])>;
    for (int64_t j = 0; j < count; ++j) {
      const double x = in[0][j], g = lambda * x + in[1][j];
      const double v = alpha * in[2][j] + b * g;
      out[0][j] = static_cast<T>(mode == "standard" ? x - r * v : x - r * (g + alpha * v));
      out[1][j] = static_cast<T>(v);
    }
  });
}

// ---- onyx::OnesLike(x): ones of x's type and shape ----

void infer_ones_like(InferContext& ctx) {
  dispatch<NumericTypes>(ctx.input_dtype(0), "OnesLike", [](auto) {});
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
}

void ones_like(KernelContext& ctx) {
  Tensor& y = ctx.output(0);
  dispatch<NumericTypes>(y.dtype(), "OnesLike", [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::fill_n(y.data<T>(), y.numel(), T(1.0f));
  });
}

// ---- onyx::SumToShape(g, like): g summed to like's shape, which broadcasts to g's (the
//      gradient of a broadcast); zeros of like's type and shape when g is omitted (a value the
//      differentiated output does not depend on) ----

void infer_sum_to_shape(InferContext& ctx) {
  const DType t = ctx.input_dtype(1);
  dispatch<FloatTypes>(t, "SumToShape", [](auto) {});
  if (ctx.has_input(0))
    ONYX_CHECK(ctx.input_dtype(0) == t, "the gradient is ", dtype_name(ctx.input_dtype(0)), ", its value ",
               dtype_name(t));
  ctx.set_output(0, t, ctx.input_shape(1));
}

void sum_to_shape(KernelContext& ctx) {
  Tensor& y = ctx.output(0);
  dispatch<FloatTypes>(y.dtype(), "SumToShape", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    std::vector<double> acc(static_cast<size_t>(y.numel()), 0.0);
    if (ctx.has_input(0)) {
      const Tensor& g = ctx.input(0);
      ONYX_CHECK(broadcast_shapes(g.shape(), y.shape()) == g.shape(), "the gradient's shape ", g.shape().str(),
                 " is not a broadcast of its value's ", y.shape().str());
      const Shape& ys = y.shape();
      const T* gp = g.data<T>();
      for_each_broadcast<1>(g.shape(), {&ys}, [&](int64_t o, const std::array<int64_t, 1>& idx) {
        acc[static_cast<size_t>(idx[0])] += static_cast<double>(static_cast<C>(gp[o]));
      });
    }
    T* yp = y.data<T>();
    for (int64_t i = 0; i < y.numel(); ++i) yp[i] = T(static_cast<C>(acc[static_cast<size_t>(i)]));
  });
}

}  // namespace

void register_training_ops(OpRegistry& r) {
  const std::string training = "ai.onnx.preview.training";
  r.add(domain_op(training, "Adagrad", 1, [](InferContext& c) { infer_optimizer(c, 3, 2); }, adagrad));
  r.add(domain_op(training, "Adam", 1, [](InferContext& c) { infer_optimizer(c, 4, 3); }, adam));
  r.add(domain_op(training, "Momentum", 1, [](InferContext& c) { infer_optimizer(c, 3, 2); }, momentum));
  r.add(domain_op("onyx", "OnesLike", 1, infer_ones_like, ones_like));
  r.add(domain_op("onyx", "SumToShape", 1, infer_sum_to_shape, sum_to_shape));
}

}  // namespace onyx
