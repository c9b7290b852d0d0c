// Arithmetic elementwise ops with numpy broadcasting: Add Sub Mul Div Pow Mod
// PRelu, the variadic Max Min Sum Mean, and Where.
#include <algorithm>
#include <bit>

#include "ops/elementwise.h"

namespace onyx {

namespace {

// Registers a binary op whose inputs and output share one dtype. `make(ctx)`
// returns the generic element function (so attributes are read once per run).
template <class Types, class Make>
void add_binary(OpRegistry& r, const char* name, int since, Make make) {
  r.add(onnx_op(name, since,
              [](InferContext& ctx) {
                check_same_dtypes(ctx);
                infer_broadcast(ctx);
              },
              [name, make](KernelContext& ctx) {
                auto fn = make(ctx);
                dispatch<Types>(ctx.input(0).dtype(), name, [&](auto tag) {
                  using T = typename decltype(tag)::type;
                  using C = compute_t<T>;
                  broadcast_binary<T, T, T>(ctx.input(0), ctx.input(1), ctx.output(0), [&](T a, T b) {
                    return static_cast<T>(fn(static_cast<C>(a), static_cast<C>(b)));
                  });
                });
              })
            .in_place({0, 1}));
}

template <class F>
auto stateless(F f) {
  return [f](const KernelContext&) { return f; };
}

template <class T>
T int_div(T a, T b) {
  ONYX_CHECK(b != 0, "integer division by zero");
  if constexpr (std::is_signed_v<T>)
    if (b == -1) return wrap_neg(a);  // INT_MIN / -1 overflows (and traps on x86)
  return static_cast<T>(a / b);
}

// Remainder with the sign of the divisor (Python / numpy.mod), or of the
// dividend (C fmod) when `c_style`.
template <class T>
T mod_value(T a, T b, bool c_style) {
  if constexpr (std::is_floating_point_v<T>) {
    T r = std::fmod(a, b);
    if (!c_style && r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  } else {
    ONYX_CHECK(b != 0, "integer modulo by zero");
    if constexpr (std::is_signed_v<T>) {
      if (b == -1) return 0;
      T r = static_cast<T>(a % b);
      if (!c_style && r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
      return r;
    } else {
      return static_cast<T>(a % b);
    }
  }
}

// Integer power by squaring, wrapping on overflow; negative exponents give
// the integer part of 1/x^n.
template <class T, class E>
T int_pow(T base, E exp) {
  if (exp < 0) {
    if (base == 1) return 1;
    if constexpr (std::is_signed_v<T>)
      if (base == -1) return (exp % 2 == 0) ? T(1) : T(-1);
    ONYX_CHECK(base != 0, "integer 0 raised to a negative power");
    return 0;
  }
  T result = 1;
  auto e = static_cast<uint64_t>(exp);
  while (e) {
    if (e & 1) result = wrap_mul(result, base);
    base = wrap_mul(base, base);
    e >>= 1;
  }
  return result;
}

// Pow: base T and exponent T1 may differ; the result has the base's type.
template <class T, class T1>
T pow_value(T x, T1 y) {
  if constexpr (is_int_v<T> && is_int_v<T1>) {
    return int_pow(x, y);
  } else if constexpr (is_int_v<T>) {
    return float_to_int<T>(std::pow(static_cast<double>(x), static_cast<double>(static_cast<compute_t<T1>>(y))));
  } else {
    using C = compute_t<T>;
    return static_cast<T>(std::pow(static_cast<C>(x), static_cast<C>(static_cast<compute_t<T1>>(y))));
  }
}

// Pow's exponent with the same values in one of four types: float (for the 16-bit floats),
// double, int64 (signed integers) or uint64 (unsigned), so that the broadcast loop exists for
// 12 bases x 4 exponent types rather than 12 x 12 (its compile time was most of this file's).
// Every exponent value converts exactly, and pow_value gives the same result for it.
Tensor widened_exponent(const Tensor& y, Allocator& alloc) {
  DType to;
  switch (y.dtype()) {
    case DType::kFloat16: case DType::kBFloat16: to = DType::kFloat32; break;
    case DType::kInt8: case DType::kInt16: case DType::kInt32: to = DType::kInt64; break;
    case DType::kUInt8: case DType::kUInt16: case DType::kUInt32: to = DType::kUInt64; break;
    default: return y;
  }
  Tensor wide(to, y.shape(), alloc);
  dispatch<NumericTypes>(y.dtype(), "Pow exponent", [&](auto tag) {
    using T1 = typename decltype(tag)::type;
    const T1* src = y.data<T1>();
    const int64_t n = y.numel();
    if (to == DType::kFloat32)
      for (int64_t i = 0; i < n; ++i) wide.data<float>()[i] = static_cast<float>(src[i]);
    else if (to == DType::kInt64)
      for (int64_t i = 0; i < n; ++i) wide.data<int64_t>()[i] = static_cast<int64_t>(src[i]);
    else
      for (int64_t i = 0; i < n; ++i) wide.data<uint64_t>()[i] = static_cast<uint64_t>(src[i]);
  });
  return wide;
}

void register_pow(OpRegistry& r) {
  using BaseTypes = TypeList<float, double, Float16, BFloat16, int32_t, int64_t, int8_t, int16_t, uint8_t, uint16_t,
                             uint32_t, uint64_t>;
  using ExponentTypes = TypeList<float, double, int64_t, uint64_t>;
  r.add(onnx_op("Pow", 1, [](InferContext& ctx) { infer_broadcast(ctx); },
              [](KernelContext& ctx) {
                const Tensor exponent = widened_exponent(ctx.input(1), ctx.allocator());
                dispatch<BaseTypes>(ctx.input(0).dtype(), "Pow base", [&](auto base_tag) {
                  using T = typename decltype(base_tag)::type;
                  dispatch<ExponentTypes>(exponent.dtype(), "Pow exponent", [&](auto exp_tag) {
                    using T1 = typename decltype(exp_tag)::type;
                    broadcast_binary<T, T1, T>(ctx.input(0), exponent, ctx.output(0),
                                               [](T x, T1 y) { return pow_value(x, y); });
                  });
                });
              })
            .in_place({0, 1}));
}

// Before opset 7 a 1-D slope of X's channel count applied per channel (axis 1), not by numpy
// broadcasting: that slope seen as [C, 1, ..., 1].
PartialShape prelu_slope_shape(const NodeView& node, const PartialShape& x, const PartialShape& slope) {
  if (node.opset() >= 7 || !x.rank_known || !slope.rank_known || slope.dims.size() != 1 || x.dims.size() < 2 ||
      slope.dims[0] != x.dims[1] || slope.dims[0] == 1)
    return slope;
  PartialShape s = PartialShape::of_rank(x.dims.size() - 1);
  std::fill(s.dims.begin(), s.dims.end(), 1);
  s.dims[0] = slope.dims[0];
  return s;
}

// PRelu: the slope broadcasts to X (one-directionally), so the output is X's shape.
void register_prelu(OpRegistry& r) {
  r.add(onnx_op("PRelu", 1,
              [](InferContext& ctx) {
                check_same_dtypes(ctx);
                PartialShape out = broadcast_shapes(ctx.input_shape(0),
                                                    prelu_slope_shape(ctx, ctx.input_shape(0), ctx.input_shape(1)));
                const PartialShape& x = ctx.input_shape(0);
                if (out.fully_known() && x.fully_known())
                  ONYX_CHECK(out.to_shape() == x.to_shape(), "slope of shape ", ctx.input_shape(1).str(),
                             " does not broadcast to X of shape ", x.str());
                ctx.set_output(0, ctx.input_dtype(0), x);
              },
              [](KernelContext& ctx) {
                dispatch<NumericTypes>(ctx.input(0).dtype(), "PRelu", [&](auto tag) {
                  using T = typename decltype(tag)::type;
                  using C = compute_t<T>;
                  const Tensor& slope = ctx.input(1);
                  const PartialShape ss = prelu_slope_shape(ctx, ctx.input(0).shape(), slope.shape());
                  broadcast_binary<T, T, T>(ctx.input(0), slope.view(ss.to_shape()), ctx.output(0), [](T x, T s) {
                    C cx = static_cast<C>(x);
                    return cx < C(0) ? static_cast<T>(wrap_mul(cx, static_cast<C>(s))) : x;
                  });
                });
              })
            .in_place({0, 1}));
}

// Max Min Sum Mean over N >= 1 broadcast inputs: out starts as input 0
// broadcast to the output shape, then folds in each further input in place.
template <class Types, class Fold>
void add_variadic(OpRegistry& r, const char* name, bool mean, Fold fold) {
  r.add(onnx_op(name, 1,
              [](InferContext& ctx) {
                ONYX_CHECK(ctx.num_inputs() >= 1, "needs at least one input");
                check_same_dtypes(ctx);
                infer_broadcast(ctx);
              },
              [name, mean, fold](KernelContext& ctx) {
                dispatch<Types>(ctx.input(0).dtype(), name, [&](auto tag) {
                  using T = typename decltype(tag)::type;
                  using C = compute_t<T>;
                  Tensor& out = ctx.output(0);
                  if (out.numel() == 0) return;
                  T* po = out.data<T>();
                  const Tensor& first = ctx.input(0);
                  const T* p0 = first.data<T>();
                  for_each_broadcast<1>(out.shape(), {&first.shape()},
                                        [&](int64_t o, const std::array<int64_t, 1>& i) { po[o] = p0[i[0]]; });
                  size_t count = 1;
                  for (size_t k = 1; k < ctx.num_inputs(); ++k) {
                    if (!ctx.has_input(k)) continue;
                    ++count;
                    broadcast_binary<T, T, T>(out, ctx.input(k), out, [&](T a, T b) {
                      return static_cast<T>(fold(static_cast<C>(a), static_cast<C>(b)));
                    });
                  }
                  if (mean) {
                    if constexpr (!is_int_v<T>) {
                      const C inv = C(1) / static_cast<C>(count);
                      for (int64_t i = 0; i < out.numel(); ++i) po[i] = static_cast<T>(static_cast<C>(po[i]) * inv);
                    }
                  }
                });
              }));
}

// Max/Min propagate NaN, as numpy.maximum/minimum do.
template <class C>
bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) return std::isnan(v);
  else return false;
}

// cond ? a : b without a branch for plain element types: conditions are often
// random, and GCC turns a float ?: into a branch that mispredicts half the time
// (Where on random bools ran 4x slower than this mask select).
template <class T>
T select_value(bool cond, const T& a, const T& b) {
  if constexpr (std::is_trivially_copyable_v<T> && (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8)) {
    using U = std::conditional_t<sizeof(T) == 1, uint8_t,
                                 std::conditional_t<sizeof(T) == 2, uint16_t,
                                                    std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
    const U mask = static_cast<U>(U(0) - static_cast<U>(cond));
    return std::bit_cast<T>(static_cast<U>((std::bit_cast<U>(a) & mask) | (std::bit_cast<U>(b) & ~mask)));
  } else {
    return cond ? a : b;
  }
}

void register_where(OpRegistry& r) {
  r.add(onnx_op("Where", 9,
              [](InferContext& ctx) {
                ONYX_CHECK(ctx.input_dtype(0) == DType::kBool, "condition must be bool, got ",
                           dtype_name(ctx.input_dtype(0)));
                ONYX_CHECK(ctx.input_dtype(1) == ctx.input_dtype(2), "X has dtype ", dtype_name(ctx.input_dtype(1)),
                           " but Y has ", dtype_name(ctx.input_dtype(2)));
                infer_broadcast(ctx, ctx.input_dtype(1));
              },
              [](KernelContext& ctx) {
                dispatch<AllTypes>(ctx.input(1).dtype(), "Where", [&](auto tag) {
                  using T = typename decltype(tag)::type;
                  const Tensor &c = ctx.input(0), &x = ctx.input(1), &y = ctx.input(2);
                  Tensor& out = ctx.output(0);
                  const int64_t n = out.numel();
                  const bool* pc = c.data<bool>();
                  const T* px = x.data<T>();
                  const T* py = y.data<T>();
                  T* po = out.data<T>();
                  if (c.numel() == n && x.numel() == n && y.numel() == n) {
                    for (int64_t i = 0; i < n; ++i) po[i] = select_value(pc[i], px[i], py[i]);
                    return;
                  }
                  // By runs along the last axis, the common forms (a mask and scores beside a
                  // constant: attention's masking) as plain loops the compiler vectorizes.
                  for_each_broadcast_row<3>(
                      out.shape(), {&c.shape(), &x.shape(), &y.shape()},
                      [&](int64_t o, const std::array<int64_t, 3>& base, const std::array<int64_t, 3>& step,
                          int64_t len) {
                        const bool* cc = pc + base[0];
                        const T* a = px + base[1];
                        const T* b = py + base[2];
                        T* d = po + o;
                        if (step[0] == 1 && step[1] == 1 && step[2] == 1) {
                          for (int64_t j = 0; j < len; ++j) d[j] = select_value(cc[j], a[j], b[j]);
                        } else if (step[0] == 1 && step[1] == 1 && step[2] == 0) {
                          const T bv = b[0];
                          for (int64_t j = 0; j < len; ++j) d[j] = select_value(cc[j], a[j], bv);
                        } else if (step[0] == 1 && step[1] == 0 && step[2] == 1) {
                          const T av = a[0];
                          for (int64_t j = 0; j < len; ++j) d[j] = select_value(cc[j], av, b[j]);
                        } else {
                          for (int64_t j = 0; j < len; ++j)
                            d[j] = select_value(cc[j * step[0]], a[j * step[1]], b[j * step[2]]);
                        }
                      });
                });
              }));
}

}  // namespace

void register_elementwise_ops(OpRegistry& r) {
  add_binary<NumericTypes>(r, "Add", 1, stateless([](auto a, auto b) { return wrap_add(a, b); }));
  add_binary<NumericTypes>(r, "Sub", 1, stateless([](auto a, auto b) { return wrap_sub(a, b); }));
  add_binary<NumericTypes>(r, "Mul", 1, stateless([](auto a, auto b) { return wrap_mul(a, b); }));
  add_binary<NumericTypes>(r, "Div", 1, stateless([](auto a, auto b) {
                             if constexpr (is_int_v<decltype(a)>) return int_div(a, b);
                             else return a / b;
                           }));
  add_binary<NumericTypes>(r, "Mod", 10, [](const KernelContext& ctx) {
    bool c_style = ctx.attr_int("fmod", 0) != 0;
    return [c_style](auto a, auto b) { return mod_value(a, b, c_style); };
  });
  register_pow(r);
  register_prelu(r);
  register_where(r);

  add_variadic<NumericTypes>(r, "Max", false, [](auto a, auto b) { return is_nan(a) || a > b ? a : b; });
  add_variadic<NumericTypes>(r, "Min", false, [](auto a, auto b) { return is_nan(a) || a < b ? a : b; });
  add_variadic<NumericTypes>(r, "Sum", false, [](auto a, auto b) { return wrap_add(a, b); });
  add_variadic<FloatTypes>(r, "Mean", true, [](auto a, auto b) { return a + b; });

  register_logical_ops(r);
}

}  // namespace onyx
