// QuantizeLinear, DequantizeLinear (per tensor, per axis, blocked) and DynamicQuantizeLinear,
// for every quantized type ONNX names: int8, uint8, int16, uint16 (int32 to dequantize), the
// narrow integers int4, uint4, int2, uint2, and the 8- and 4-bit floats.
#include "ops/quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/narrow_types.h"
#include "cpu/rowwise.h"
#include "ops/common.h"

#if defined(__SSE2__)
#endif

namespace onyx {

QuantRange quant_range(DType t, std::string_view what) {
  switch (t) {
    case DType::kInt8: return {-128, 127};
    case DType::kUInt8: return {0, 255};
    case DType::kInt16: return {-32768, 32767};
    case DType::kUInt16: return {0, 65535};
    default:
      throw Error(cat(what, ": quantized type ", dtype_name(t), " is not supported (int8, uint8, int16 or uint16)"));
  }
}

QuantGranularity quant_granularity(const Shape& x, const Shape& scale, int64_t axis, int64_t block_size,
                                   bool allow_axis, bool allow_blocks) {
  QuantGranularity g;
  ONYX_CHECK(block_size >= 0, "block_size must not be negative, got ", block_size);
  if (block_size == 0 && scale.numel() == 1 && scale.rank() <= 1) {
    g.axis_dim = x.numel();
    return g;
  }
  ONYX_CHECK(allow_axis, "the scale must be a scalar at this opset, got shape ", scale.str());
  ONYX_CHECK(x.rank() >= 1, "a scale of shape ", scale.str(), " needs x of rank >= 1, got a scalar");
  const int64_t rank = static_cast<int64_t>(x.rank());
  ONYX_CHECK(axis >= -rank && axis < rank, "axis ", axis, " is out of range for x of shape ", x.str());
  const size_t ax = static_cast<size_t>(normalize_axis(axis, rank));
  for (size_t i = 0; i < ax; ++i) g.outer *= x[i];
  g.axis_dim = x[ax];
  for (size_t i = ax + 1; i < x.rank(); ++i) g.inner *= x[i];
  if (block_size == 0) {
    ONYX_CHECK(scale.rank() == 1 && scale[0] == x[ax], "a per-axis scale must be 1-D of x's dimension ", x[ax],
               " on axis ", ax, " (x ", x.str(), "), got shape ", scale.str());
    g.kind = QuantGranularity::Kind::kPerAxis;
    return g;
  }
  ONYX_CHECK(allow_blocks, "blocked quantization (block_size ", block_size, ") is not defined at this opset");
  bool fits = scale.rank() == x.rank();
  for (size_t i = 0; fits && i < x.rank(); ++i)
    fits = i == ax ? scale[i] == (x[i] + block_size - 1) / block_size : scale[i] == x[i];
  ONYX_CHECK(fits, "a blocked scale for x ", x.str(), " with block_size ", block_size, " on axis ", ax,
             " must have x's shape with dimension ", ax, " = ceil(", x[ax], " / ", block_size, "), got ",
             scale.str());
  g.kind = QuantGranularity::Kind::kBlocked;
  g.block = block_size;
  return g;
}

std::vector<double> scale_values(const Tensor& scale, std::string_view what) {
  ONYX_CHECK(dtype_is_float(scale.dtype()), what, " must be a floating type, got ", dtype_name(scale.dtype()));
  std::vector<double> v(static_cast<size_t>(scale.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale.get_as_double(static_cast<int64_t>(i));
  return v;
}

std::vector<int64_t> zero_point_values(const Tensor* zero_point, const Tensor& scale, std::string_view what) {
  std::vector<int64_t> v(static_cast<size_t>(scale.numel()), 0);
  if (!zero_point) return v;
  ONYX_CHECK(zero_point->numel() == scale.numel() && (zero_point->numel() == 1 || zero_point->shape() == scale.shape()),
             what, " has shape ", zero_point->shape().str(), ", but the scale has ", scale.shape().str(),
             " (they must match)");
  for (size_t i = 0; i < v.size(); ++i) v[i] = zero_point->get_as_int64(static_cast<int64_t>(i));
  return v;
}

double round_to_dtype(DType t, double v) {
  switch (t) {
    case DType::kFloat32: return static_cast<float>(v);
    case DType::kFloat16: return static_cast<float>(Float16(static_cast<float>(v)));
    case DType::kBFloat16: return static_cast<float>(BFloat16(static_cast<float>(v)));
    default: return v;
  }
}

namespace {

using QuantTypes = TypeList<int8_t, uint8_t, int16_t, uint16_t>;
using DequantTypes = TypeList<int8_t, uint8_t, int16_t, uint16_t, int32_t>;
using QuantizeInputTypes = TypeList<float, Float16, BFloat16, int32_t>;

// The ONNX opset whose QuantizeLinear/DequantizeLinear a node follows: com.microsoft's (what
// onnxruntime's quantizer emits for 16- and 4-bit types) is opset 19's (per-axis, no blocks).
int q_opset(const NodeView& n) { return n.node().domain == "com.microsoft" ? 19 : n.opset(); }

// The narrow integers are held as int8 or uint8 values (core/narrow_types.h): quantizing to
// them is quantizing to that storage type with the narrow range.
DType narrow_storage(DType t) {
  return t == DType::kInt4 || t == DType::kInt2 ? DType::kInt8 : DType::kUInt8;
}
QuantRange narrow_int_range(DType t) {
  switch (t) {
    case DType::kInt4: return {-8, 7};
    case DType::kUInt4: return {0, 15};
    case DType::kInt2: return {-2, 1};
    default: return {0, 3};  // uint2
  }
}
bool is_narrow_float(DType t) { return dtype_is_narrow(t) && !narrow_is_int(t); }

// Float quantized types take no integer zero point: its values as doubles. The 8-bit floats
// need it zero (ONNX's definition); float4e2m1's is added before rounding.
std::vector<double> float_zero_points(const Tensor* zero_point, const Tensor& scale, DType t, std::string_view what) {
  std::vector<double> v(static_cast<size_t>(scale.numel()), 0.0);
  if (!zero_point) return v;
  ONYX_CHECK(zero_point->numel() == scale.numel(), what, " has shape ", zero_point->shape().str(),
             ", but the scale has ", scale.shape().str(), " (they must match)");
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = zero_point->get_as_double(static_cast<int64_t>(i));
    ONYX_CHECK(t == DType::kFloat4E2M1 || v[i] == 0, what, " must be zero for ", dtype_name(t), ", got ", v[i],
               " at ", i);
  }
  return v;
}


// ---- QuantizeLinear ----

// The output type: y_zero_point's, else output_dtype (opset 21), else uint8.
DType quantize_output_dtype(const InferContext& ctx) {
  const int64_t attr = q_opset(ctx) >= 21 ? ctx.attr_int("output_dtype", 0) : 0;
  DType attr_dtype = attr ? dtype_from_onnx(static_cast<int32_t>(attr)) : DType::kUndefined;
  if (ctx.has_input(2)) {
    DType z = ctx.input_dtype(2);
    ONYX_CHECK(attr_dtype == DType::kUndefined || attr_dtype == z, "output_dtype ", dtype_name(attr_dtype),
               " differs from y_zero_point's type ", dtype_name(z));
    return z;
  }
  return attr_dtype == DType::kUndefined ? DType::kUInt8 : attr_dtype;
}

void infer_quantize(InferContext& ctx) {
  DType out = quantize_output_dtype(ctx);
  ONYX_CHECK(out != DType::kFloat8E8M0, "QuantizeLinear: quantized type float8e8m0 is not supported");
  if (!dtype_is_narrow(out)) quant_range(out, "QuantizeLinear");
  DType x = ctx.input_dtype(0);
  ONYX_CHECK(x == DType::kFloat32 || x == DType::kFloat16 || x == DType::kBFloat16 || x == DType::kInt32,
             "x must be float32, float16, bfloat16 or int32, got ", dtype_name(x));
  ONYX_CHECK(dtype_is_float(ctx.input_dtype(1)), "y_scale must be a floating type, got ",
             dtype_name(ctx.input_dtype(1)));
  ctx.set_output(0, out, ctx.input_shape(0));
}

// The type of x / y_scale: the precision attribute (opset 23) when given; else numpy's
// promotion of the two, as the ONNX reference divides (a 16-bit float only when both
// are that type; double for int32 x).
DType division_type(const KernelContext& ctx, DType x, DType scale) {
  const int64_t precision = q_opset(ctx) >= 23 ? ctx.attr_int("precision", 0) : 0;
  if (precision) {
    DType p = dtype_from_onnx(static_cast<int32_t>(precision));
    ONYX_CHECK(dtype_is_float(p), "precision ", dtype_name(p), " is not supported (a floating type)");
    return p;
  }
  if (x == scale) return x;
  return x == DType::kInt32 ? DType::kFloat64 : DType::kFloat32;
}

// The common case (float32 x and scale, 8-bit y: every activation of a QDQ model) in float
// arithmetic, vectorized (cpu::quantize_8bit). The same values as the general path: a float32
// quotient rounded from double is the float32 quotient (double holds over twice float's
// digits), rounding to an integer is exact in float, and the zero point and the range are
// applied in float, where those integers are exact; NaN takes the zero point.
void quantize_float_to_8bit(const float* x, const std::vector<double>& scales, const std::vector<int64_t>& zeros,
                            QuantRange r, const QuantGranularity& g, Tensor& y) {
  const float lo = static_cast<float>(r.lo), hi = static_cast<float>(r.hi);
  const bool is_signed = y.dtype() == DType::kInt8;
  auto run = [&](auto* py) {
    auto span = [&](int64_t from, int64_t n, int64_t p) {
      cpu::quantize_8bit(x + from, n, static_cast<float>(scales[static_cast<size_t>(p)]),
                         static_cast<float>(zeros[static_cast<size_t>(p)]), lo, hi, is_signed, py + from);
    };
    if (g.kind == QuantGranularity::Kind::kPerTensor) {
      span(0, g.outer * g.axis_dim * g.inner, 0);
    } else if (g.kind == QuantGranularity::Kind::kPerAxis) {
      for (int64_t o = 0; o < g.outer; ++o)
        for (int64_t a = 0; a < g.axis_dim; ++a) span((o * g.axis_dim + a) * g.inner, g.inner, a);
    } else {  // blocked: one element at a time, the scalar form of the same arithmetic
      using Q = std::remove_pointer_t<decltype(py)>;
      g.for_each([&](int64_t i, int64_t p) {
        const float s = static_cast<float>(scales[static_cast<size_t>(p)]);
        const float z = static_cast<float>(zeros[static_cast<size_t>(p)]);
        const float scaled = x[i] / s;
        py[i] = static_cast<Q>(std::isnan(scaled) ? std::clamp(z, lo, hi) : std::clamp(std::nearbyint(scaled) + z, lo, hi));
      });
    }
  };
  if (y.dtype() == DType::kInt8) run(y.data<int8_t>());
  else run(y.data<uint8_t>());
}

void quantize_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  Tensor& y = ctx.output(0);
  const QuantGranularity g = quant_granularity(x.shape(), scale.shape(), ctx.attr_int("axis", 1),
                                               q_opset(ctx) >= 21 ? ctx.attr_int("block_size", 0) : 0,
                                               q_opset(ctx) >= 13, q_opset(ctx) >= 21);
  const DType div = division_type(ctx, x.dtype(), scale.dtype());
  std::vector<double> s = scale_values(scale, "y_scale");
  for (double& v : s) v = round_to_dtype(div, v);
  if (is_narrow_float(y.dtype())) {
    const std::vector<double> zf = float_zero_points(zp, scale, y.dtype(), "y_zero_point");
    const bool saturate = q_opset(ctx) < 19 || ctx.attr_int("saturate", 1) != 0;
    auto* py = static_cast<uint8_t*>(y.raw());
    g.for_each([&](int64_t i, int64_t p) {
      const double v = round_to_dtype(div, round_to_dtype(div, x.get_as_double(i)) / s[p]);
      py[i] = narrow_from_double(y.dtype(), round_to_dtype(div, v + zf[p]), saturate);
    });
    return;
  }
  const std::vector<int64_t> z = zero_point_values(zp, scale, "y_zero_point");
  const bool narrow = dtype_is_narrow(y.dtype());
  const QuantRange r = narrow ? narrow_int_range(y.dtype()) : quant_range(y.dtype(), "QuantizeLinear");
  if (x.dtype() == DType::kFloat32 && div == DType::kFloat32 && (y.dtype() == DType::kInt8 || y.dtype() == DType::kUInt8)) {
    quantize_float_to_8bit(x.data<float>(), s, z, r, g, y);
    return;
  }
  dispatch<QuantizeInputTypes>(x.dtype(), "QuantizeLinear x", [&](auto xt) {
    using X = typename decltype(xt)::type;
    dispatch<QuantTypes>(narrow ? narrow_storage(y.dtype()) : y.dtype(), "QuantizeLinear y", [&](auto qt) {
      using Q = typename decltype(qt)::type;
      const X* px = x.data<X>();
      Q* py = static_cast<Q*>(y.raw());
      g.for_each([&](int64_t i, int64_t p) {
        const double v = round_to_dtype(div, static_cast<double>(static_cast<compute_t<X>>(px[i])));
        py[i] = static_cast<Q>(quantize_scaled(round_to_dtype(div, v / s[p]), z[p], r));
      });
    });
  });
}

// ---- DequantizeLinear ----

void infer_dequantize(InferContext& ctx) {
  DType x = ctx.input_dtype(0);
  ONYX_CHECK(x == DType::kInt32 || x == DType::kInt8 || x == DType::kUInt8 || x == DType::kInt16 ||
                 x == DType::kUInt16 || (dtype_is_narrow(x) && x != DType::kFloat8E8M0),
             "x must be int8, uint8, int16, uint16, int32, int4, uint4, int2, uint2 or an 8- or 4-bit float, got ",
             dtype_name(x));
  if (ctx.has_input(2))
    ONYX_CHECK(ctx.input_dtype(2) == x, "x_zero_point has type ", dtype_name(ctx.input_dtype(2)), ", x ",
               dtype_name(x), " (they must match)");
  DType scale = ctx.input_dtype(1);
  ONYX_CHECK(dtype_is_float(scale), "x_scale must be a floating type, got ", dtype_name(scale));
  const int64_t attr = q_opset(ctx) >= 23 ? ctx.attr_int("output_dtype", 0) : 0;
  DType out = attr ? dtype_from_onnx(static_cast<int32_t>(attr)) : scale;
  ONYX_CHECK(dtype_is_float(out), "output_dtype must be a floating type, got ", dtype_name(out));
  ctx.set_output(0, out, ctx.input_shape(0));
}

// y = (x - zero_point) * scale, the product in float32 as the ONNX reference computes it,
// then rounded to the output type. The difference is exact in int64 (int32 inputs).
void dequantize_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  Tensor& y = ctx.output(0);
  const QuantGranularity g = quant_granularity(x.shape(), scale.shape(), ctx.attr_int("axis", 1),
                                               q_opset(ctx) >= 21 ? ctx.attr_int("block_size", 0) : 0,
                                               q_opset(ctx) >= 13, q_opset(ctx) >= 21);
  const std::vector<double> s = scale_values(scale, "x_scale");
  std::vector<float> sf(s.begin(), s.end());
  if (dtype_is_narrow(x.dtype())) {
    const DType xt = x.dtype();
    const std::vector<double> z = is_narrow_float(xt) ? float_zero_points(zp, scale, xt, "x_zero_point") : [&] {
      const auto zi = zero_point_values(zp, scale, "x_zero_point");
      return std::vector<double>(zi.begin(), zi.end());
    }();
    const auto* px = static_cast<const uint8_t*>(x.raw());
    dispatch<FloatTypes>(y.dtype(), "DequantizeLinear y", [&](auto yt) {
      using Y = typename decltype(yt)::type;
      Y* py = y.data<Y>();
      g.for_each([&](int64_t i, int64_t p) {
        const float d = static_cast<float>(narrow_to_double(xt, px[i]) - z[p]);
        py[i] = static_cast<Y>(d * sf[p]);
      });
    });
    return;
  }
  const std::vector<int64_t> z = zero_point_values(zp, scale, "x_zero_point");
  dispatch<DequantTypes>(x.dtype(), "DequantizeLinear x", [&](auto qt) {
    using Q = typename decltype(qt)::type;
    dispatch<FloatTypes>(y.dtype(), "DequantizeLinear y", [&](auto yt) {
      using Y = typename decltype(yt)::type;
      const Q* px = x.data<Q>();
      Y* py = y.data<Y>();
      if (g.kind == QuantGranularity::Kind::kPerTensor && sizeof(Q) == 1 && std::is_same_v<Y, float>) {
        // One scale and zero point over 8-bit codes (a QDQ model's activations): the same
        // arithmetic as below, in a loop that vectorizes.
        const float zf = static_cast<float>(z[0]), s0 = sf[0];
        const int64_t n = x.numel();
        for (int64_t i = 0; i < n; ++i) py[i] = static_cast<Y>((static_cast<float>(px[i]) - zf) * s0);
        return;
      }
      g.for_each([&](int64_t i, int64_t p) {
        const float d = static_cast<float>(static_cast<int64_t>(px[i]) - z[p]);
        py[i] = static_cast<Y>(d * sf[p]);
      });
    });
  });
}

// ---- DynamicQuantizeLinear ----

void infer_dynamic_quantize(InferContext& ctx) {
  ONYX_CHECK(ctx.input_dtype(0) == DType::kFloat32, "x must be float32, got ", dtype_name(ctx.input_dtype(0)));
  ctx.set_output(0, DType::kUInt8, ctx.input_shape(0));
  if (ctx.has_output(1)) ctx.set_output(1, DType::kFloat32, Shape{});
  if (ctx.has_output(2)) ctx.set_output(2, DType::kUInt8, Shape{});
}

}  // namespace

DynamicQuantParams dynamic_quant_params(const float* x, int64_t n) {
  float lo = 0.f, hi = 0.f;  // the range always holds 0, so that 0 is exact
  cpu::range_with_zero(x, n, &lo, &hi);
  DynamicQuantParams p;
  // An all-zero x has no range; onnxruntime then takes scale 1 (any scale gives q = 0).
  p.scale = hi == lo ? 1.f : (hi - lo) / 255.f;
  p.zero_point = static_cast<uint8_t>(quantize_scaled(static_cast<float>(0.f - lo / p.scale), 0, {0, 255}));
  return p;
}

void dynamic_quantize(const float* x, int64_t n, const DynamicQuantParams& p, uint8_t* y) {
  cpu::quantize_8bit(x, n, p.scale, p.zero_point, 0.f, 255.f, false, y);
}

namespace {

void dynamic_quantize_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const DynamicQuantParams p = dynamic_quant_params(x.data<float>(), x.numel());
  dynamic_quantize(x.data<float>(), x.numel(), p, ctx.output(0).data<uint8_t>());
  if (ctx.has_output(1)) *ctx.output(1).data<float>() = p.scale;
  if (ctx.has_output(2)) *ctx.output(2).data<uint8_t>() = p.zero_point;
}

}  // namespace

void register_quantize_ops(OpRegistry& r) {
  // One definition serves every version; the kernels read what each opset adds
  // (axis at 13, block_size and output_dtype at 21, precision at 23).
  for (int since : {10, 13, 19, 21, 23, 24, 25}) {
    r.add(onnx_op("QuantizeLinear", since, infer_quantize, quantize_kernel));
    r.add(onnx_op("DequantizeLinear", since, infer_dequantize, dequantize_kernel));
  }
  r.add(onnx_op("DynamicQuantizeLinear", 11, infer_dynamic_quantize, dynamic_quantize_kernel));
  r.add(domain_op("com.microsoft", "QuantizeLinear", 1, infer_quantize, quantize_kernel));
  r.add(domain_op("com.microsoft", "DequantizeLinear", 1, infer_dequantize, dequantize_kernel));
}

}  // namespace onyx
