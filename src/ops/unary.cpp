// Elementwise ops of one input: math functions, activations, rounding,
// predicates (IsNaN, IsInf), Clip and Dropout.
#include <cmath>
#include <optional>
#include <random>
#include <string_view>

#include "cpu/activation.h"
#include "ops/elementwise.h"

namespace onyx {

namespace {

// The ops whose float32 kernel is the vectorized activation (cpu/activation.h), with their
// parameters read from the node; nullopt for the others (and for a Gelu approximation that is
// neither "none" nor "tanh": the generic kernel names it).
std::optional<cpu::Activation> float_activation(std::string_view name, const KernelContext& ctx) {
  using cpu::Act;
  if (name == "Relu") return cpu::Activation{Act::kRelu};
  if (name == "Sigmoid") return cpu::Activation{Act::kSigmoid};
  if (name == "Tanh") return cpu::Activation{Act::kTanh};
  if (name == "HardSwish") return cpu::Activation{Act::kHardSwish};
  if (name == "Erf") return cpu::Activation{Act::kErf};
  if (name == "LeakyRelu") return cpu::Activation{Act::kLeakyRelu, ctx.attr_float("alpha", 0.01f)};
  if (name == "HardSigmoid")
    return cpu::Activation{Act::kHardSigmoid, ctx.attr_float("alpha", 0.2f), ctx.attr_float("beta", 0.5f)};
  if (name == "Gelu") {
    const std::string approx = ctx.attr_string("approximate", "none");
    if (approx == "none") return cpu::Activation{Act::kGelu};
    if (approx == "tanh") return cpu::Activation{Act::kGeluTanh};
  }
  return std::nullopt;
}

bool has_float_activation(std::string_view name) {
  for (const char* n : {"Relu", "Sigmoid", "Tanh", "HardSwish", "LeakyRelu", "HardSigmoid", "Gelu", "Erf"})
    if (name == n) return true;
  return false;
}

// Registers an op whose output has the input's dtype and shape. `make(ctx)`
// returns the generic element function, so attributes are read once per run;
// 16-bit floats compute in float.
template <class Types, class Make>
void add_unary(OpRegistry& r, const char* name, int since, Make make) {
  r.add(onnx_op(name, since, [](InferContext& ctx) { infer_same_as_input(ctx); },
              [name, make, fast = has_float_activation(name)](KernelContext& ctx) {
                if (fast && ctx.input(0).dtype() == DType::kFloat32)
                  if (auto act = float_activation(name, ctx)) {
                    cpu::activate(ctx.input(0).data<float>(), ctx.output(0).data<float>(), ctx.input(0).numel(), *act);
                    return;
                  }
                auto fn = make(ctx);
                dispatch<Types>(ctx.input(0).dtype(), name, [&](auto tag) {
                  using T = typename decltype(tag)::type;
                  using C = compute_t<T>;
                  map_unary<T, T>(ctx.input(0), ctx.output(0),
                                  [&](T x) { return static_cast<T>(fn(static_cast<C>(x))); });
                });
              })
            .in_place({0}));
}

// The same for element functions without attributes, on floating types.
template <class Fn>
void add_float_unary(OpRegistry& r, const char* name, int since, Fn fn) {
  add_unary<FloatTypes>(r, name, since, [fn](const KernelContext&) { return fn; });
}

// 1 / (1 + e^-x) needs no branch: e^-x overflows to inf for very negative x,
// giving 0, and the quotient keeps its relative accuracy elsewhere.
template <class V>
V sigmoid(V x) {
  return V(1) / (V(1) + std::exp(-x));
}
template <class V>
V softplus(V x) {
  return x > V(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

void register_math(OpRegistry& r) {
  add_float_unary(r, "Sqrt", 1, [](auto x) { return std::sqrt(x); });
  add_float_unary(r, "Reciprocal", 1, [](auto x) { return decltype(x)(1) / x; });
  add_float_unary(r, "Exp", 1, [](auto x) { return std::exp(x); });
  add_float_unary(r, "Log", 1, [](auto x) { return std::log(x); });
  add_float_unary(r, "Tanh", 1, [](auto x) { return std::tanh(x); });
  add_float_unary(r, "Erf", 9, [](auto x) { return std::erf(x); });
  add_float_unary(r, "Sin", 7, [](auto x) { return std::sin(x); });
  add_float_unary(r, "Cos", 7, [](auto x) { return std::cos(x); });
  add_float_unary(r, "Tan", 7, [](auto x) { return std::tan(x); });
  add_float_unary(r, "Asin", 7, [](auto x) { return std::asin(x); });
  add_float_unary(r, "Acos", 7, [](auto x) { return std::acos(x); });
  add_float_unary(r, "Atan", 7, [](auto x) { return std::atan(x); });
  add_float_unary(r, "Sinh", 9, [](auto x) { return std::sinh(x); });
  add_float_unary(r, "Cosh", 9, [](auto x) { return std::cosh(x); });
  add_float_unary(r, "Asinh", 9, [](auto x) { return std::asinh(x); });
  add_float_unary(r, "Acosh", 9, [](auto x) { return std::acosh(x); });
  add_float_unary(r, "Atanh", 9, [](auto x) { return std::atanh(x); });
  add_float_unary(r, "Floor", 1, [](auto x) { return std::floor(x); });
  add_float_unary(r, "Ceil", 1, [](auto x) { return std::ceil(x); });
  // rint rounds halves to even under the default rounding mode, as ONNX Round does.
  add_float_unary(r, "Round", 11, [](auto x) { return std::rint(x); });

  auto stateless = [](auto f) { return [f](const KernelContext&) { return f; }; };
  add_unary<NumericTypes>(r, "Abs", 1, stateless([](auto x) {
                            using V = decltype(x);
                            if constexpr (std::is_unsigned_v<V>) return x;
                            else return x < V(0) ? wrap_neg(x) : x;
                          }));
  add_unary<SignedNumericTypes>(r, "Neg", 1, stateless([](auto x) { return wrap_neg(x); }));
  add_unary<NumericTypes>(r, "Sign", 9, stateless([](auto x) {
                            using V = decltype(x);
                            if constexpr (std::is_floating_point_v<V>)
                              if (std::isnan(x)) return x;
                            return static_cast<V>(static_cast<int>(V(0) < x) - static_cast<int>(x < V(0)));
                          }));
}

void register_activations(OpRegistry& r) {
  auto stateless = [](auto f) { return [f](const KernelContext&) { return f; }; };
  add_unary<SignedNumericTypes>(r, "Relu", 1, stateless([](auto x) { return x > decltype(x)(0) ? x : decltype(x)(0); }));
  add_float_unary(r, "Sigmoid", 1, [](auto x) { return sigmoid(x); });
  add_float_unary(r, "Softplus", 1, [](auto x) { return softplus(x); });
  add_float_unary(r, "Softsign", 1, [](auto x) { return x / (decltype(x)(1) + std::abs(x)); });
  add_float_unary(r, "Mish", 18, [](auto x) { return x * std::tanh(softplus(x)); });
  add_float_unary(r, "HardSwish", 14, [](auto x) {
    using V = decltype(x);
    return x * std::max(V(0), std::min(V(1), x / V(6) + V(0.5)));
  });

  add_unary<FloatTypes>(r, "LeakyRelu", 1, [](const KernelContext& ctx) {
    float alpha = ctx.attr_float("alpha", 0.01f);
    return [alpha](auto x) { return x < decltype(x)(0) ? decltype(x)(alpha) * x : x; };
  });
  add_unary<FloatTypes>(r, "Elu", 1, [](const KernelContext& ctx) {
    float alpha = ctx.attr_float("alpha", 1.0f);
    return [alpha](auto x) { return x < decltype(x)(0) ? decltype(x)(alpha) * std::expm1(x) : x; };
  });
  add_unary<FloatTypes>(r, "Selu", 1, [](const KernelContext& ctx) {
    float alpha = ctx.attr_float("alpha", 1.67326319217681884765625f);
    float gamma = ctx.attr_float("gamma", 1.05070102214813232421875f);
    return [alpha, gamma](auto x) {
      using V = decltype(x);
      return x > V(0) ? V(gamma) * x : V(gamma) * (V(alpha) * std::exp(x) - V(alpha));
    };
  });
  add_unary<FloatTypes>(r, "Celu", 12, [](const KernelContext& ctx) {
    float alpha = ctx.attr_float("alpha", 1.0f);
    return [alpha](auto x) {
      using V = decltype(x);
      return std::max(V(0), x) + std::min(V(0), V(alpha) * std::expm1(x / V(alpha)));
    };
  });
  add_unary<FloatTypes>(r, "HardSigmoid", 1, [](const KernelContext& ctx) {
    float alpha = ctx.attr_float("alpha", 0.2f), beta = ctx.attr_float("beta", 0.5f);
    return [alpha, beta](auto x) {
      using V = decltype(x);
      return std::max(V(0), std::min(V(1), V(alpha) * x + V(beta)));
    };
  });
  add_unary<FloatTypes>(r, "ThresholdedRelu", 10, [](const KernelContext& ctx) {
    float alpha = ctx.attr_float("alpha", 1.0f);
    return [alpha](auto x) { return x > decltype(x)(alpha) ? x : decltype(x)(0); };
  });
  add_unary<FloatTypes>(r, "Swish", 24, [](const KernelContext& ctx) {
    float alpha = ctx.attr_float("alpha", 1.0f);
    return [alpha](auto x) { return x * sigmoid(decltype(x)(alpha) * x); };
  });
  add_unary<FloatTypes>(r, "Gelu", 20, [](const KernelContext& ctx) {
    std::string approx = ctx.attr_string("approximate", "none");
    ONYX_CHECK(approx == "none" || approx == "tanh", "approximate must be \"none\" or \"tanh\", got \"", approx, "\"");
    bool tanh_form = approx == "tanh";
    return [tanh_form](auto x) {
      using V = decltype(x);
      if (tanh_form) {
        const V k = static_cast<V>(0.7978845608028654);  // sqrt(2/pi)
        return V(0.5) * x * (V(1) + std::tanh(k * (x + V(0.044715) * x * x * x)));
      }
      return V(0.5) * x * (V(1) + std::erf(x * static_cast<V>(0.7071067811865476)));
    };
  });
  // Shrink covers integers too; it computes in double there, then converts back.
  add_unary<NumericTypes>(r, "Shrink", 9, [](const KernelContext& ctx) {
    float lambd = ctx.attr_float("lambd", 0.5f), bias = ctx.attr_float("bias", 0.0f);
    return [lambd, bias](auto x) {
      using V = decltype(x);
      using W = std::conditional_t<std::is_floating_point_v<V>, V, double>;
      W w = static_cast<W>(x);
      W y = w < -W(lambd) ? w + W(bias) : (w > W(lambd) ? w - W(bias) : W(0));
      return convert_value<V>(y);
    };
  });
}

// An op of one floating input with a bool output.
template <class Make>
void add_predicate(OpRegistry& r, const char* name, int since, Make make) {
  r.add(onnx_op(name, since, [](InferContext& ctx) { ctx.set_output(0, DType::kBool, ctx.input_shape(0)); },
              [name, make](KernelContext& ctx) {
                auto fn = make(ctx);
                dispatch<FloatTypes>(ctx.input(0).dtype(), name, [&](auto tag) {
                  using T = typename decltype(tag)::type;
                  using C = compute_t<T>;
                  map_unary<T, bool>(ctx.input(0), ctx.output(0), [&](T x) { return fn(static_cast<C>(x)); });
                });
              }));
}

// Clip: bounds are attributes before opset 11, optional scalar inputs from 11.
void register_clip(OpRegistry& r) {
  r.add(onnx_op("Clip", 1,
              [](InferContext& ctx) {
                for (size_t i = 1; i < 3; ++i)
                  if (ctx.has_input(i))
                    ONYX_CHECK(ctx.input_dtype(i) == ctx.input_dtype(0), "bound input ", i, " has dtype ",
                               dtype_name(ctx.input_dtype(i)), ", but the input has ", dtype_name(ctx.input_dtype(0)));
                infer_same_as_input(ctx);
              },
              [](KernelContext& ctx) {
                dispatch<NumericTypes>(ctx.input(0).dtype(), "Clip", [&](auto tag) {
                  using T = typename decltype(tag)::type;
                  using C = compute_t<T>;
                  C lo, hi;
                  if constexpr (std::is_floating_point_v<C>) {
                    lo = -std::numeric_limits<C>::infinity();
                    hi = std::numeric_limits<C>::infinity();
                  } else {
                    lo = std::numeric_limits<C>::lowest();
                    hi = std::numeric_limits<C>::max();
                  }
                  if (ctx.opset() < 11) {
                    lo = convert_value<C>(ctx.attr_float("min", -std::numeric_limits<float>::infinity()));
                    hi = convert_value<C>(ctx.attr_float("max", std::numeric_limits<float>::infinity()));
                  } else {
                    auto bound = [&](size_t i, C& v) {
                      if (!ctx.has_input(i)) return;
                      const Tensor& t = ctx.input(i);
                      ONYX_CHECK(t.numel() == 1, "bound input ", i, " must be a scalar, got shape ", t.shape().str());
                      v = static_cast<C>(t.data<T>()[0]);
                    };
                    bound(1, lo);
                    bound(2, hi);
                  }
                  // As numpy.clip: when min > max every element becomes max; NaN stays NaN.
                  map_unary<T, T>(ctx.input(0), ctx.output(0), [lo, hi](T x) {
                    C v = static_cast<C>(x);
                    v = v < lo ? lo : v;
                    v = v > hi ? hi : v;
                    return static_cast<T>(v);
                  });
                });
              }));
}

// Dropout. At inference the output is the input and the optional mask all true (bool from
// opset 10, the input's dtype before, where "keep" is 1). In training mode (opset 12's third
// input true, ratio above 0) each element is kept with probability 1 - ratio and scaled by
// 1 / (1 - ratio), the mask saying which; the draws follow the `seed` attribute when it is
// given (the same on every run), fresh ones otherwise. No two engines draw alike, so
// tests/unit checks the draws by their distribution.
void infer_dropout(InferContext& ctx) {
  infer_same_as_input(ctx);
  if (ctx.has_output(1)) ctx.set_output(1, ctx.opset() >= 10 ? DType::kBool : ctx.input_dtype(0), ctx.input_shape(0));
}

// The ratio when training mode drops anything, or 0.
double training_ratio(const KernelContext& ctx) {
  if (ctx.opset() < 12 || !ctx.has_input(2)) return 0;
  const Tensor& training = ctx.input(2);
  ONYX_CHECK(training.numel() == 1, "training_mode must be a scalar, got shape ", training.shape().str());
  if (training.get_as_double(0) == 0) return 0;
  double ratio = 0.5;
  if (ctx.has_input(1)) {
    ONYX_CHECK(ctx.input(1).numel() == 1, "ratio must be a scalar, got shape ", ctx.input(1).shape().str());
    ratio = ctx.input(1).get_as_double(0);
  }
  ONYX_CHECK(ratio >= 0 && ratio < 1, "ratio must be in [0, 1), got ", ratio);
  return ratio;
}

void dropout(KernelContext& ctx) {
  const double ratio = training_ratio(ctx);
  Tensor* mask = ctx.has_output(1) ? &ctx.output(1) : nullptr;
  if (ratio > 0) {
    std::mt19937_64 rng(ctx.has_attr("seed") ? static_cast<uint64_t>(ctx.attr_int("seed"))
                                             : std::random_device{}());
    std::uniform_real_distribution<double> u(0.0, 1.0);
    const Tensor& x = ctx.input(0);
    dispatch<FloatTypes>(x.dtype(), "Dropout in training mode", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = compute_t<T>;
      const C scale = static_cast<C>(1.0 / (1.0 - ratio));
      const T* xp = x.data<T>();
      T* yp = ctx.output(0).data<T>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        const bool keep = u(rng) >= ratio;
        yp[i] = keep ? static_cast<T>(static_cast<C>(xp[i]) * scale) : T(0.0f);
        if (mask) mask->data<bool>()[i] = keep;
      }
    });
    return;
  }
  dispatch<AllTypes>(ctx.input(0).dtype(), "Dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    map_unary<T, T>(ctx.input(0), ctx.output(0), [](const T& x) { return x; });
  });
  if (mask)
    dispatch<NumericBoolTypes>(mask->dtype(), "Dropout mask", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* p = mask->data<T>();
      for (int64_t i = 0; i < mask->numel(); ++i) p[i] = convert_value<T>(true);
    });
}

void register_dropout(OpRegistry& r) {
  r.add(onnx_op("Dropout", 1, infer_dropout, dropout));
  // From opset 12 a run may draw: never computed while planning.
  r.add(onnx_op("Dropout", 12, infer_dropout, dropout).never_fold());
}

}  // namespace

// com.microsoft Gelu (erf form), FastGelu (tanh form) and BiasGelu (erf form):
// gelu(x + bias), with the bias input optional for FastGelu and broadcast over the last axis.
void add_contrib_gelu(OpRegistry& r, const char* name, bool tanh_form) {
  r.add(domain_op("com.microsoft", name, 1,
              [](InferContext& ctx) {
                if (ctx.has_input(1))
                  ONYX_CHECK(ctx.input_dtype(1) == ctx.input_dtype(0), "bias dtype ", dtype_name(ctx.input_dtype(1)),
                             " differs from the input's ", dtype_name(ctx.input_dtype(0)));
                infer_same_as_input(ctx);
              },
              [name, tanh_form](KernelContext& ctx) {
                const Tensor& x = ctx.input(0);
                const Tensor* bias = ctx.has_input(1) ? &ctx.input(1) : nullptr;
                int64_t cols = x.rank() ? x.shape()[x.rank() - 1] : 1;
                if (bias)
                  ONYX_CHECK(bias->numel() == cols, "bias of ", bias->numel(), " values for a last axis of ", cols);
                if (x.dtype() == DType::kFloat32) {  // the vectorized activation, after the bias
                  const float* in = x.data<float>();
                  float* out = ctx.output(0).data<float>();
                  const int64_t n = x.numel();
                  if (bias) {
                    const float* b = bias->data<float>();
                    for (int64_t i = 0; i < n; ++i) out[i] = in[i] + b[i % cols];
                    in = out;
                  }
                  cpu::activate(in, out, n, cpu::Activation{tanh_form ? cpu::Act::kGeluTanh : cpu::Act::kGelu});
                  return;
                }
                dispatch<FloatTypes>(x.dtype(), name, [&](auto tag) {
                  using T = typename decltype(tag)::type;
                  const T* in = x.data<T>();
                  const T* b = bias ? bias->data<T>() : nullptr;
                  T* out = ctx.output(0).data<T>();
                  for (int64_t i = 0; i < x.numel(); ++i) {
                    double v = static_cast<double>(static_cast<compute_t<T>>(in[i]));
                    if (b) v += static_cast<double>(static_cast<compute_t<T>>(b[i % cols]));
                    double g = tanh_form ? 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))
                                         : 0.5 * v * (1 + std::erf(v * 0.7071067811865476));
                    out[i] = static_cast<T>(static_cast<float>(g));
                  }
                });
              }));
}

void register_unary_ops(OpRegistry& r) {
  add_contrib_gelu(r, "Gelu", false);
  add_contrib_gelu(r, "FastGelu", true);
  add_contrib_gelu(r, "BiasGelu", false);
  register_math(r);
  register_activations(r);
  register_clip(r);
  register_dropout(r);
  add_predicate(r, "IsNaN", 9, [](const KernelContext&) { return [](auto x) { return std::isnan(x); }; });
  add_predicate(r, "IsInf", 10, [](const KernelContext& ctx) {
    bool neg = ctx.attr_int("detect_negative", 1) != 0, pos = ctx.attr_int("detect_positive", 1) != 0;
    return [neg, pos](auto x) { return std::isinf(x) && (x < 0 ? neg : pos); };
  });
}

}  // namespace onyx
