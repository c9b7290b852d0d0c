// Unary elementwise kernels: math functions and activations (computed in
// float for the 16-bit floats), Gelu (ai.onnx opset 20 and the com.microsoft
// Gelu / FastGelu / BiasGelu), Clip with device-resident bounds, Not, and
// Cast / CastLike between float32, float16, bfloat16, int32, int64 and bool.
#include <cmath>
#include <limits>

#include <tuple>

#include "backends/cuda/kernels/elementwise_common.cuh"

namespace onyx::cuda {

namespace {

enum UnaryCode : int {
  kNeg, kAbs, kRelu, kClip,  // also on int32 / int64
  kSqrt, kRecip, kExp, kLog, kTanh, kErf, kSigmoid, kSin, kCos, kFloor, kCeil, kRound,
  kSoftplus, kSoftsign, kLeakyRelu, kElu, kHardSigmoid, kHardSwish,
  kGelu, kGeluTanh,  // optional bias added first (com.microsoft BiasGelu / FastGelu)
};

bool int_capable(int code) { return code <= kClip; }

// One code's element function; parameters travel by value. Clip's bounds
// are read from device memory once per thread in prepare().
template <class T>
struct UnaryOp {
  using C = dev_compute_t<T>;
  int code = kNeg;
  float alpha = 0, beta = 0;
  C lo{}, hi{};                   // Clip bounds when the pointers are null
  const T* lo_ptr = nullptr;      // Clip opset >= 11: optional scalar inputs
  const T* hi_ptr = nullptr;
  const T* bias = nullptr;        // added before Gelu, broadcast over the last axis
  int64_t bias_len = 1;

  __device__ __forceinline__ UnaryOp prepare() const {
    UnaryOp p = *this;
    if (lo_ptr) p.lo = to_compute(*lo_ptr);
    if (hi_ptr) p.hi = to_compute(*hi_ptr);
    return p;
  }

  __device__ __forceinline__ T operator()(T in, int64_t i) const {
    if constexpr (is_int_dev_v<T>) {
      switch (code) {
        case kNeg: return wrap_neg(in);
        case kAbs: return in < T(0) ? wrap_neg(in) : in;
        case kRelu: return in > T(0) ? in : T(0);
        default: {  // kClip; when lo > hi every element becomes hi, as numpy.clip
          T v = in < lo ? lo : in;
          return v > hi ? hi : v;
        }
      }
    } else {
      float x = to_compute(in);
      float y;
      switch (code) {
        case kNeg: y = -x; break;
        case kAbs: y = x < 0.f ? -x : x; break;
        case kRelu: y = x > 0.f ? x : 0.f; break;
        case kClip:
          y = x < lo ? lo : x;
          y = y > hi ? hi : y;
          break;
        case kSqrt: y = sqrtf(x); break;
        case kRecip: y = 1.f / x; break;
        case kExp: y = expf(x); break;
        case kLog: y = logf(x); break;
        case kTanh: y = tanhf(x); break;
        case kErf: y = erff(x); break;
        // e^-x overflows to inf for very negative x, giving 0 without a branch.
        case kSigmoid: y = 1.f / (1.f + expf(-x)); break;
        case kSin: y = sinf(x); break;
        case kCos: y = cosf(x); break;
        case kFloor: y = floorf(x); break;
        case kCeil: y = ceilf(x); break;
        case kRound: y = rintf(x); break;  // halves to even, as ONNX Round
        case kSoftplus: y = x > 0.f ? x + log1pf(expf(-x)) : log1pf(expf(x)); break;
        case kSoftsign: y = x / (1.f + fabsf(x)); break;
        case kLeakyRelu: y = x < 0.f ? alpha * x : x; break;
        case kElu: y = x < 0.f ? alpha * expm1f(x) : x; break;
        case kHardSigmoid: y = fmaxf(0.f, fminf(1.f, alpha * x + beta)); break;
        case kHardSwish: y = x * fmaxf(0.f, fminf(1.f, x / 6.f + 0.5f)); break;
        case kGelu:
          if (bias) x += to_compute(bias[i % bias_len]);
          y = 0.5f * x * (1.f + erff(x * 0.7071067811865476f));
          break;
        default:  // kGeluTanh
          if (bias) x += to_compute(bias[i % bias_len]);
          y = 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
          break;
      }
      return from_compute<T>(y);
    }
  }
};

template <class T>
void run_unary(KernelContext& ctx, CudaContext& cu, UnaryOp<T> op, const char* what) {
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.output(0);
  ONYX_CHECK(in.numel() == out.numel(), what, ": output size differs from the input's");
  launch_map1<T, T>(in.raw(), out.raw(), in.numel(), op, cu, what);
}

// Fills the op's parameters from the node, then launches for T.
template <class T>
void launch_unary_typed(KernelContext& ctx, CudaContext& cu, int code, const char* what) {
  using C = dev_compute_t<T>;
  UnaryOp<T> op;
  op.code = code;
  switch (code) {
    case kLeakyRelu: op.alpha = ctx.attr_float("alpha", 0.01f); break;
    case kElu: op.alpha = ctx.attr_float("alpha", 1.0f); break;
    case kHardSigmoid:
      op.alpha = ctx.attr_float("alpha", 0.2f);
      op.beta = ctx.attr_float("beta", 0.5f);
      break;
    case kClip:
      if constexpr (std::is_floating_point_v<C>) {
        op.lo = -std::numeric_limits<C>::infinity();
        op.hi = std::numeric_limits<C>::infinity();
      } else {
        op.lo = std::numeric_limits<C>::lowest();
        op.hi = std::numeric_limits<C>::max();
      }
      if (ctx.opset() < 11) {
        if constexpr (std::is_floating_point_v<C>) {
          op.lo = ctx.attr_float("min", -std::numeric_limits<float>::infinity());
          op.hi = ctx.attr_float("max", std::numeric_limits<float>::infinity());
        }
      } else {
        for (size_t i = 1; i < 3; ++i) {
          if (!ctx.has_input(i)) continue;
          const Tensor& t = ctx.input(i);
          ONYX_CHECK(t.dtype() == ctx.input(0).dtype() && t.numel() == 1, "Clip: bound input ", i,
                     " must be a scalar of the input's type, got ", t.type_str());
          (i == 1 ? op.lo_ptr : op.hi_ptr) = static_cast<const T*>(t.raw());
        }
      }
      break;
    case kGelu:
    case kGeluTanh:
      if (ctx.node().domain == "com.microsoft" && ctx.has_input(1)) {
        const Tensor& b = ctx.input(1);
        const Tensor& x = ctx.input(0);
        ONYX_CHECK(b.dtype() == x.dtype() && b.rank() == 1 && x.rank() >= 1 && b.numel() == x.shape()[x.rank() - 1],
                   what, ": bias ", b.type_str(), " must be 1-D with the last dimension of the input ",
                   x.type_str());
        op.bias = static_cast<const T*>(b.raw());
        op.bias_len = std::max<int64_t>(1, b.numel());
      }
      break;
    default: break;
  }
  run_unary<T>(ctx, cu, op, what);
}

void launch_unary(KernelContext& ctx, CudaContext& cu, int code, const char* what) {
  switch (ctx.input(0).dtype()) {
    case DType::kFloat32: return launch_unary_typed<float>(ctx, cu, code, what);
    case DType::kFloat16: return launch_unary_typed<__half>(ctx, cu, code, what);
    case DType::kBFloat16: return launch_unary_typed<__nv_bfloat16>(ctx, cu, code, what);
    case DType::kInt32:
      if (int_capable(code)) return launch_unary_typed<int32_t>(ctx, cu, code, what);
      break;
    case DType::kInt64:
      if (int_capable(code)) return launch_unary_typed<int64_t>(ctx, cu, code, what);
      break;
    default: break;
  }
  throw Error(cat(what, " on CUDA: element type ", dtype_name(ctx.input(0).dtype()), " is not supported"));
}

// ---- Not ------------------------------------------------------------------------

struct NotOp {
  __device__ __forceinline__ NotOp prepare() const { return *this; }
  __device__ __forceinline__ bool operator()(bool x, int64_t) const { return !x; }
};

// IsNaN (both signs off) and IsInf (the signs it detects).
template <class T>
struct FloatClassOp {
  bool nan = false, neg = false, pos = false;
  __device__ __forceinline__ FloatClassOp prepare() const { return *this; }
  __device__ __forceinline__ bool operator()(T x, int64_t) const {
    const float v = to_compute(x);
    if (nan) return isnan(v);
    return isinf(v) && (v < 0 ? neg : pos);
  }
};

void launch_float_class(KernelContext& ctx, CudaContext& cu, bool nan, const char* what) {
  const Tensor& in = ctx.input(0);
  dispatch_float(in.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    FloatClassOp<T> op;
    op.nan = nan;
    op.neg = ctx.attr_int("detect_negative", 1) != 0;
    op.pos = ctx.attr_int("detect_positive", 1) != 0;
    launch_map1<T, bool>(in.raw(), ctx.output(0).raw(), in.numel(), op, cu, what);
  });
}

// ---- Cast -----------------------------------------------------------------------

// Floating value -> integer D, truncating toward zero, as the CPU reference:
// values inside int64's range go through int64 (so narrower types wrap);
// NaN and values beyond give INT64_MIN's low bits.
template <class D, class F>
__device__ __forceinline__ D float_to_int(F v) {
  if (v > F(-9223372036854775808.0) && v < F(9223372036854775808.0))
    return static_cast<D>(static_cast<long long>(v));
  return static_cast<D>(std::numeric_limits<long long>::min());
}

template <class D, class S>
__device__ __forceinline__ D convert(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (std::is_same_v<S, bool>) {
    return convert<D>(static_cast<int32_t>(s));
  } else if constexpr (std::is_same_v<D, bool>) {
    return to_compute(s) != dev_compute_t<S>(0);
  } else if constexpr (is_half_dev_v<D>) {
    return from_compute<D>(static_cast<float>(to_compute(s)));  // via float, as the CPU reference
  } else if constexpr (std::is_same_v<D, float>) {
    return static_cast<float>(to_compute(s));
  } else if constexpr (is_float_dev_v<S>) {
    return float_to_int<D>(to_compute(s));
  } else {
    return static_cast<D>(s);  // integer narrowing wraps (two's complement)
  }
}

template <class S, class D>
struct CastOp {
  __device__ __forceinline__ CastOp prepare() const { return *this; }
  __device__ __forceinline__ D operator()(S x, int64_t) const { return convert<D>(x); }
};

template <class S, class D>
void cast_to(const Tensor& in, Tensor& out, CudaContext& cu) {
  if constexpr (std::is_same_v<S, D>) copy_async(in, out, cu);
  else launch_map1<S, D>(in.raw(), out.raw(), in.numel(), CastOp<S, D>{}, cu, "Cast");
}

template <class S>
void launch_cast_from(const Tensor& in, Tensor& out, CudaContext& cu) {
  switch (out.dtype()) {
    case DType::kFloat32: return cast_to<S, float>(in, out, cu);
    case DType::kFloat16: return cast_to<S, __half>(in, out, cu);
    case DType::kBFloat16: return cast_to<S, __nv_bfloat16>(in, out, cu);
    case DType::kInt32: return cast_to<S, int32_t>(in, out, cu);
    case DType::kInt64: return cast_to<S, int64_t>(in, out, cu);
    case DType::kBool: return cast_to<S, bool>(in, out, cu);
    default: break;
  }
  throw Error(cat("Cast on CUDA: target type ", dtype_name(out.dtype()), " is not supported"));
}

void launch_cast(const Tensor& in, Tensor& out, CudaContext& cu) {
  ONYX_CHECK(in.numel() == out.numel(), "Cast: output size differs from the input's");
  switch (in.dtype()) {
    case DType::kFloat32: return launch_cast_from<float>(in, out, cu);
    case DType::kFloat16: return launch_cast_from<__half>(in, out, cu);
    case DType::kBFloat16: return launch_cast_from<__nv_bfloat16>(in, out, cu);
    case DType::kInt32: return launch_cast_from<int32_t>(in, out, cu);
    case DType::kInt64: return launch_cast_from<int64_t>(in, out, cu);
    case DType::kBool: return launch_cast_from<bool>(in, out, cu);
    default: break;
  }
  throw Error(cat("Cast on CUDA: source type ", dtype_name(in.dtype()), " is not supported"));
}

constexpr std::initializer_list<DType> kCastTypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                                                     DType::kInt32,   DType::kInt64,   DType::kBool};
constexpr std::initializer_list<DType> kFloatTypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

// Cast's target type from its 'to' attribute (a type code, or a name before opset 6).
DType cast_target(const Node& node) {
  const Attribute* a = node.find_attribute("to");
  if (!a) return DType::kUndefined;
  if (a->kind == Attribute::Kind::kInt) {
    switch (a->i) {
      case 1: return DType::kFloat32;
      case 6: return DType::kInt32;
      case 7: return DType::kInt64;
      case 9: return DType::kBool;
      case 10: return DType::kFloat16;
      case 16: return DType::kBFloat16;
      default: return DType::kUndefined;
    }
  }
  if (a->kind == Attribute::Kind::kString) {
    if (a->s == "FLOAT") return DType::kFloat32;
    if (a->s == "INT32") return DType::kInt32;
    if (a->s == "INT64") return DType::kInt64;
    if (a->s == "BOOL") return DType::kBool;
    if (a->s == "FLOAT16") return DType::kFloat16;
    if (a->s == "BFLOAT16") return DType::kBFloat16;
  }
  return DType::kUndefined;
}

// ---- registration -------------------------------------------------------------

void add_unary(CudaKernelRegistry& r, const char* domain, const char* name, int code) {
  r.add(domain_kernel(domain, name, 1, [name, code](KernelContext& ctx, CudaContext& cu) { launch_unary(ctx, cu, code, name); },
      [name, code](const Node& node, const std::vector<ValueType>& in) -> std::string {
        const DType t = input_dtype(in, 0);
        const bool ints_ok = int_capable(code) && !(code == kClip && node.opset < 11);
        if (!dtype_in(t, kFloatTypes) && !(ints_ok && (t == DType::kInt32 || t == DType::kInt64)))
          return cat(name, " on CUDA supports float32/float16/bfloat16", ints_ok ? "/int32/int64" : "");
        if (code == kGelu || code == kGeluTanh) {
          if (node.domain.empty()) {
            const Attribute* a = node.find_attribute("approximate");
            if (a && a->kind == Attribute::Kind::kString && a->s != "none" && a->s != "tanh")
              return "Gelu: approximate must be \"none\" or \"tanh\"";
          } else if (node.inputs.size() > 1 && node.inputs[1] >= 0) {
            if (input_dtype(in, 1) != t) return cat(name, " on CUDA needs the bias in the input's type");
            if (in.size() > 1 && in[1].shape.rank_known && in[1].shape.dims.size() != 1)
              return cat(name, " on CUDA supports a 1-D bias");
          }
        }
        if (code == kClip && node.opset >= 11)
          for (size_t i = 1; i < 3 && i < node.inputs.size(); ++i)
            if (node.inputs[i] >= 0 && input_dtype(in, i) != t) return "Clip on CUDA needs bounds of the input's type";
        return "";
      }));
}

}  // namespace

void register_unary_kernels(CudaKernelRegistry& r) {
  struct Entry {
    const char* name;
    int code;
  };
  static constexpr Entry kOnnx[] = {
      {"Neg", kNeg},         {"Abs", kAbs},           {"Relu", kRelu},         {"Clip", kClip},
      {"Sqrt", kSqrt},       {"Reciprocal", kRecip},  {"Exp", kExp},           {"Log", kLog},
      {"Tanh", kTanh},       {"Erf", kErf},           {"Sigmoid", kSigmoid},   {"Sin", kSin},
      {"Cos", kCos},         {"Floor", kFloor},       {"Ceil", kCeil},         {"Round", kRound},
      {"Softplus", kSoftplus}, {"Softsign", kSoftsign}, {"LeakyRelu", kLeakyRelu}, {"Elu", kElu},
      {"HardSigmoid", kHardSigmoid}, {"HardSwish", kHardSwish},
  };
  for (const Entry& e : kOnnx) add_unary(r, "", e.name, e.code);

  // ai.onnx Gelu (opset 20): the 'approximate' attribute picks the form at run time.
  r.add(onnx_kernel("Gelu", 20,
      [](KernelContext& ctx, CudaContext& cu) {
        const std::string approx = ctx.attr_string("approximate", "none");
        ONYX_CHECK(approx == "none" || approx == "tanh", "approximate must be \"none\" or \"tanh\", got \"", approx,
                   "\"");
        launch_unary(ctx, cu, approx == "tanh" ? kGeluTanh : kGelu, "Gelu");
      },
      [](const Node& node, const std::vector<ValueType>& in) -> std::string {
        if (!dtype_in(input_dtype(in, 0), kFloatTypes)) return "Gelu on CUDA supports float32/float16/bfloat16";
        const Attribute* a = node.find_attribute("approximate");
        if (a && (a->kind != Attribute::Kind::kString || (a->s != "none" && a->s != "tanh")))
          return "Gelu: approximate must be \"none\" or \"tanh\"";
        return "";
      }));
  // com.microsoft: Gelu (erf form), FastGelu (tanh form, optional bias), BiasGelu (erf form, bias).
  add_unary(r, "com.microsoft", "Gelu", kGelu);
  add_unary(r, "com.microsoft", "FastGelu", kGeluTanh);
  add_unary(r, "com.microsoft", "BiasGelu", kGelu);

  r.add(onnx_kernel("Not", 1,
      [](KernelContext& ctx, CudaContext& cu) {
        const Tensor& in = ctx.input(0);
        launch_map1<bool, bool>(in.raw(), ctx.output(0).raw(), in.numel(), NotOp{}, cu, "Not");
      },
      [](const Node&, const std::vector<ValueType>& in) -> std::string {
        return input_dtype(in, 0) == DType::kBool ? "" : "Not on CUDA supports bool";
      }));

  for (auto [name, since, nan] : {std::tuple{"IsNaN", 9, true}, std::tuple{"IsInf", 10, false}})
    r.add(onnx_kernel(name, since, [name, nan](KernelContext& ctx, CudaContext& cu) { launch_float_class(ctx, cu, nan, name); },
                      [name](const Node&, const std::vector<ValueType>& in) -> std::string {
                        return dtype_in(input_dtype(in, 0), kFloatTypes)
                                   ? ""
                                   : cat(name, " on CUDA supports float32/float16/bfloat16");
                      }));

  auto cast_run = [](KernelContext& ctx, CudaContext& cu) { launch_cast(ctx.input(0), ctx.output(0), cu); };
  const char* cast_reason = "Cast on CUDA supports float32/float16/bfloat16/int32/int64/bool to the same set";
  r.add(onnx_kernel("Cast", 1, cast_run, [cast_reason](const Node& node, const std::vector<ValueType>& in) {
                        const bool ok = dtype_in(input_dtype(in, 0), kCastTypes) && dtype_in(cast_target(node), kCastTypes);
                        return std::string(ok ? "" : cast_reason);
                      }));
  r.add(onnx_kernel("CastLike", 15, cast_run, [cast_reason](const Node&, const std::vector<ValueType>& in) {
                        const bool ok = dtype_in(input_dtype(in, 0), kCastTypes) && dtype_in(input_dtype(in, 1), kCastTypes);
                        return std::string(ok ? "" : cast_reason);
                      }));
}

}  // namespace onyx::cuda
