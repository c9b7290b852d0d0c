// Resize and Upsample. (GridSample and AffineGrid live in grid_sample.cpp.)
//
// Resizing is separable: every resized axis is handled on its own, as a list
// of (input index, weight) taps per output position, applied one axis after
// the other.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/conv_util.h"

namespace onyx {

namespace {

enum class Mode { kNearest, kLinear, kCubic };

struct ResizeConfig {
  Mode mode = Mode::kNearest;
  std::string coord = "half_pixel";
  std::string nearest = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  bool antialias = false;
  double extrapolation = 0;
  // Per axis of the input (all of them, after `axes` is applied).
  std::vector<int64_t> out;
  std::vector<double> scale;
  std::vector<double> roi_start, roi_end;
};

Mode parse_mode(const std::string& m) {
  if (m == "nearest") return Mode::kNearest;
  if (m == "linear" || m == "bilinear" || m == "trilinear") return Mode::kLinear;
  if (m == "cubic" || m == "bicubic") return Mode::kCubic;
  throw Error(cat("unknown mode '", m, "' (expected nearest, linear or cubic)"));
}

// Values of a float input (scales, roi) as doubles; empty when absent or empty.
std::vector<double> float_values(const Tensor* t) {
  std::vector<double> v;
  if (!t) return v;
  for (int64_t i = 0; i < t->numel(); ++i) v.push_back(t->get_as_double(i));
  return v;
}

// Output sizes and scales from the node's inputs. Returns false when the
// values needed are not known yet (planning without data).
template <class Ctx, class ValueFn>
bool resolve_sizes(const Ctx& node, const Shape& x, ValueFn value, ResizeConfig& cfg) {
  const int opset = node.opset();
  const size_t rank = x.rank();
  const std::string op = node.node().op_type;
  const bool upsample = op == "Upsample";
  std::vector<int64_t> axes(rank);
  for (size_t i = 0; i < rank; ++i) axes[i] = static_cast<int64_t>(i);
  if (!upsample && opset >= 18 && node.has_attr("axes")) {
    axes = node.attr_ints("axes");
    std::vector<bool> seen(rank, false);
    for (int64_t& a : axes) {
      a = normalize_axis(a, static_cast<int64_t>(rank));
      ONYX_CHECK(!seen[a], "axis ", a, " repeated in axes");
      seen[a] = true;
    }
  }
  const size_t na = axes.size();
  cfg.out = x.dims();
  cfg.scale.assign(rank, 1.0);
  cfg.roi_start.assign(rank, 0.0);
  cfg.roi_end.assign(rank, 1.0);

  std::vector<double> scales;
  const Tensor* sizes_t = nullptr;
  if (upsample) {
    if (opset < 9) {
      auto f = node.attr_floats("scales");
      scales.assign(f.begin(), f.end());
    } else {
      const Tensor* t = value(1);
      if (!t) return false;
      scales = float_values(t);
    }
    ONYX_CHECK(!scales.empty(), "Upsample needs scales");
  } else if (opset < 11) {
    const Tensor* t = value(1);
    if (!t) return false;
    scales = float_values(t);
  } else {
    if (node.has_input(1)) {
      const Tensor* roi = value(1);
      if (!roi) return false;
      std::vector<double> r = float_values(roi);
      if (!r.empty()) {
        ONYX_CHECK(r.size() == 2 * na, "roi has ", r.size(), " values, expected ", 2 * na);
        for (size_t i = 0; i < na; ++i) {
          cfg.roi_start[axes[i]] = r[i];
          cfg.roi_end[axes[i]] = r[na + i];
        }
      }
    }
    if (node.has_input(2)) {
      const Tensor* t = value(2);
      if (!t) return false;
      scales = float_values(t);
    }
    if (node.has_input(3)) {
      sizes_t = value(3);
      if (!sizes_t) return false;
      if (sizes_t->numel() == 0) sizes_t = nullptr;
    }
  }

  if (!scales.empty()) {
    ONYX_CHECK(!sizes_t, "only one of scales and sizes may be given");
    ONYX_CHECK(scales.size() == na, "scales has ", scales.size(), " values for ", na, " axes of input ", x.str());
    for (size_t i = 0; i < na; ++i) {
      ONYX_CHECK(scales[i] > 0, "scales must be positive, got ", scales[i], " for axis ", axes[i]);
      cfg.scale[axes[i]] = scales[i];
      cfg.out[axes[i]] = static_cast<int64_t>(std::floor(static_cast<double>(x[axes[i]]) * scales[i]));
    }
    return true;
  }
  ONYX_CHECK(sizes_t, "one of scales and sizes must be given");
  std::vector<int64_t> sizes = sizes_t->to_int64_vector();
  ONYX_CHECK(sizes.size() == na, "sizes has ", sizes.size(), " values for ", na, " axes of input ", x.str());
  for (int64_t s : sizes) ONYX_CHECK(s >= 0, "sizes must be non-negative, got ", Shape(sizes).str());
  const std::string policy = opset >= 18 ? node.attr_string("keep_aspect_ratio_policy", "stretch") : "stretch";
  if (policy == "stretch") {
    for (size_t i = 0; i < na; ++i) {
      cfg.out[axes[i]] = sizes[i];
      cfg.scale[axes[i]] = x[axes[i]] ? static_cast<double>(sizes[i]) / static_cast<double>(x[axes[i]]) : 1.0;
    }
    return true;
  }
  ONYX_CHECK(policy == "not_larger" || policy == "not_smaller", "unknown keep_aspect_ratio_policy '", policy, "'");
  double s = policy == "not_larger" ? std::numeric_limits<double>::infinity() : 0.0;
  for (size_t i = 0; i < na; ++i) {
    ONYX_CHECK(x[axes[i]] > 0, "keep_aspect_ratio_policy needs non-empty input dims, got ", x.str());
    double r = static_cast<double>(sizes[i]) / static_cast<double>(x[axes[i]]);
    s = policy == "not_larger" ? std::min(s, r) : std::max(s, r);
  }
  for (size_t i = 0; i < na; ++i) {
    cfg.scale[axes[i]] = s;
    cfg.out[axes[i]] = static_cast<int64_t>(std::floor(s * static_cast<double>(x[axes[i]]) + 0.5));
  }
  return true;
}

ResizeConfig read_config(const NodeView& node) {
  ResizeConfig cfg;
  const int opset = node.opset();
  cfg.mode = parse_mode(node.attr_string("mode", "nearest"));
  if (node.node().op_type == "Upsample" || opset < 11) {
    // Upsample and Resize-10: output index / scale, nearest rounds down.
    cfg.coord = "asymmetric";
    cfg.nearest = "floor";
    ONYX_CHECK(cfg.mode != Mode::kCubic, node.node().op_type, "-", opset, " has no cubic mode");
    return cfg;
  }
  cfg.coord = node.attr_string("coordinate_transformation_mode", "half_pixel");
  cfg.nearest = node.attr_string("nearest_mode", "round_prefer_floor");
  cfg.cubic_a = node.attr_float("cubic_coeff_a", -0.75f);
  cfg.exclude_outside = node.attr_int("exclude_outside", 0) != 0;
  cfg.extrapolation = node.attr_float("extrapolation_value", 0.f);
  cfg.antialias = opset >= 18 && node.attr_int("antialias", 0) != 0;
  static const char* kCoords[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                  "asymmetric", "tf_crop_and_resize"};
  ONYX_CHECK(std::find(std::begin(kCoords), std::end(kCoords), cfg.coord) != std::end(kCoords),
             "unknown coordinate_transformation_mode '", cfg.coord, "'");
  ONYX_CHECK(cfg.nearest == "round_prefer_floor" || cfg.nearest == "round_prefer_ceil" || cfg.nearest == "floor" ||
                 cfg.nearest == "ceil",
             "unknown nearest_mode '", cfg.nearest, "'");
  return cfg;
}

// The taps of one resized axis: `taps` (index, weight) pairs per output position.
struct AxisTaps {
  int64_t in = 0, out = 0, taps = 0;
  std::vector<int64_t> index;
  std::vector<double> weight;
  std::vector<uint8_t> extrapolate;  // per output position
};

double cubic_weight(double t, double a) {
  t = std::abs(t);
  if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
  if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
  return 0;
}

AxisTaps axis_taps(const ResizeConfig& cfg, size_t axis, int64_t in) {
  AxisTaps a;
  a.in = in;
  a.out = cfg.out[axis];
  const double scale = cfg.scale[axis];
  // The fractional output length the coordinate formulas are defined with.
  const double out_len = scale * static_cast<double>(in);
  const double fin = static_cast<double>(in);
  const double rs = cfg.roi_start[axis], re = cfg.roi_end[axis];
  // Filter support and its stretch for antialiased downscaling.
  const double radius = cfg.mode == Mode::kCubic ? 2 : 1;
  const double stretch = cfg.antialias && scale < 1 ? scale : 1.0;
  const int64_t first = cfg.mode == Mode::kNearest ? 0 : static_cast<int64_t>(std::floor(-radius / stretch)) + 1;
  a.taps = cfg.mode == Mode::kNearest ? 1 : 2 - 2 * first;
  a.index.resize(static_cast<size_t>(a.out * a.taps));
  a.weight.resize(a.index.size());
  a.extrapolate.assign(static_cast<size_t>(a.out), 0);
  for (int64_t o = 0; o < a.out; ++o) {
    const double x = static_cast<double>(o);
    double src = 0;
    if (cfg.coord == "half_pixel") {
      src = (x + 0.5) / scale - 0.5;
    } else if (cfg.coord == "half_pixel_symmetric") {
      const double adjustment = static_cast<double>(a.out) / out_len;
      src = fin / 2 * (1 - adjustment) + (x + 0.5) / scale - 0.5;
    } else if (cfg.coord == "pytorch_half_pixel") {
      src = out_len > 1 ? (x + 0.5) / scale - 0.5 : -0.5;
    } else if (cfg.coord == "align_corners") {
      src = out_len == 1 ? 0 : x * (fin - 1) / (out_len - 1);
    } else if (cfg.coord == "asymmetric") {
      src = x / scale;
    } else {  // tf_crop_and_resize
      src = out_len == 1 ? (re - rs) * (fin - 1) / 2 : x * (re - rs) * (fin - 1) / (out_len - 1);
      src += rs * (fin - 1);
      a.extrapolate[o] = src < 0 || src > fin - 1;
    }
    int64_t* idx = &a.index[o * a.taps];
    double* w = &a.weight[o * a.taps];
    int64_t base = static_cast<int64_t>(std::floor(src));
    double ratio = src - static_cast<double>(base);
    if (cfg.mode == Mode::kNearest) {
      int64_t pick = base;
      if (ratio != 0) {
        if (cfg.nearest == "ceil" || (cfg.nearest == "round_prefer_floor" && ratio > 0.5) ||
            (cfg.nearest == "round_prefer_ceil" && ratio >= 0.5))
          pick = base + 1;
      }
      idx[0] = std::clamp<int64_t>(pick, 0, in - 1);
      w[0] = 1;
      continue;
    }
    // An exact hit is treated as ratio 1 from the pixel to its left, so that
    // the tap window is the same as the reference's.
    if (ratio == 0) {
      --base;
      ratio = 1;
    }
    double sum = 0;
    for (int64_t t = 0; t < a.taps; ++t) {
      const int64_t i = first + t;
      const double arg = stretch * (static_cast<double>(i) - ratio);
      double wt = cfg.mode == Mode::kLinear ? std::max(0.0, 1 - std::abs(arg)) : cubic_weight(arg, cfg.cubic_a);
      const int64_t at = base + i;
      if (cfg.exclude_outside && (at < 0 || at >= in)) wt = 0;
      idx[t] = std::clamp<int64_t>(at, 0, in - 1);
      w[t] = wt;
      sum += wt;
    }
    if ((cfg.antialias || cfg.exclude_outside) && sum != 0)
      for (int64_t t = 0; t < a.taps; ++t) w[t] /= sum;
  }
  return a;
}

// dst[outer, out, inner] = sum_t w * src[outer, index, inner] (or the
// extrapolation value).
template <class V>
void apply_axis(const std::vector<V>& src, std::vector<V>& dst, int64_t outer, int64_t inner, const AxisTaps& a,
                V extrapolation) {
  dst.resize(static_cast<size_t>(outer * a.out * inner));
  for (int64_t b = 0; b < outer; ++b)
    for (int64_t o = 0; o < a.out; ++o) {
      V* d = &dst[(b * a.out + o) * inner];
      if (a.extrapolate[o]) {
        std::fill(d, d + inner, extrapolation);
        continue;
      }
      const int64_t* idx = &a.index[o * a.taps];
      if constexpr (std::is_same_v<V, double>) {
        const double* w = &a.weight[o * a.taps];
        std::fill(d, d + inner, 0.0);
        for (int64_t t = 0; t < a.taps; ++t) {
          if (w[t] == 0) continue;
          const double* s = &src[(b * a.in + idx[t]) * inner];
          for (int64_t i = 0; i < inner; ++i) d[i] += w[t] * s[i];
        }
      } else {
        const V* s = &src[(b * a.in + idx[0]) * inner];
        std::copy(s, s + inner, d);
      }
    }
}

// Resizes every axis whose size or mapping changes, in V (double, or T for nearest).
template <class V>
std::vector<V> resize_axes(std::vector<V> data, const Shape& x, const ResizeConfig& cfg, V extrapolation) {
  std::vector<int64_t> cur = x.dims();
  std::vector<V> tmp;
  for (size_t axis = 0; axis < cur.size(); ++axis) {
    const bool roi_trivial = cfg.coord != "tf_crop_and_resize" || (cfg.roi_start[axis] == 0 && cfg.roi_end[axis] == 1);
    if (cfg.out[axis] == cur[axis] && cfg.scale[axis] == 1.0 && roi_trivial) continue;
    ONYX_CHECK(cur[axis] > 0 || cfg.out[axis] == 0, "cannot resize an empty axis ", axis, " to ", cfg.out[axis]);
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < axis; ++d) outer *= cur[d];
    for (size_t d = axis + 1; d < cur.size(); ++d) inner *= cur[d];
    if (cfg.out[axis] == 0) {
      data.clear();
      cur[axis] = 0;
      continue;
    }
    AxisTaps a = axis_taps(cfg, axis, cur[axis]);
    apply_axis(data, tmp, outer, inner, a, extrapolation);
    data.swap(tmp);
    cur[axis] = cfg.out[axis];
  }
  return data;
}

template <class T>
void resize_kernel(KernelContext& ctx, const ResizeConfig& cfg) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  const T* px = x.data<T>();
  T* py = y.data<T>();
  if (cfg.mode == Mode::kNearest) {
    std::vector<T> data(px, px + x.numel());
    T ext{};
    if constexpr (!std::is_same_v<T, std::string>) ext = static_cast<T>(static_cast<float>(cfg.extrapolation));
    std::vector<T> out = resize_axes<T>(std::move(data), x.shape(), cfg, ext);
    std::copy(out.begin(), out.end(), py);
    return;
  }
  if constexpr (std::is_same_v<T, std::string>) {
    throw Error(cat("Resize: mode linear/cubic needs a numeric input, got ", dtype_name(x.dtype())));
  } else {
    std::vector<double> data(static_cast<size_t>(x.numel()));
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<double>(static_cast<compute_t<T>>(px[i]));
    std::vector<double> out = resize_axes<double>(std::move(data), x.shape(), cfg, cfg.extrapolation);
    for (size_t i = 0; i < out.size(); ++i) {
      if constexpr (std::is_integral_v<T>) {
        // Round half to even and saturate, like a numpy saturating cast.
        double v = std::nearbyint(out[i]);
        v = std::clamp(v, static_cast<double>(std::numeric_limits<T>::lowest()),
                       static_cast<double>(std::numeric_limits<T>::max()));
        py[i] = static_cast<T>(v);
      } else {
        py[i] = static_cast<T>(static_cast<compute_t<T>>(out[i]));
      }
    }
  }
}

void infer_resize(InferContext& ctx) {
  const PartialShape& xs = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  if (!xs.fully_known()) {
    ctx.set_output(0, dt, xs.rank_known ? PartialShape::of_rank(xs.dims.size()) : PartialShape());
    return;
  }
  Shape x = xs.to_shape();
  ResizeConfig cfg = read_config(ctx);
  if (!resolve_sizes(ctx, x, [&](size_t i) { return ctx.input_value(i); }, cfg)) {
    ctx.set_output(0, dt, PartialShape::of_rank(x.rank()));
    return;
  }
  ctx.set_output(0, dt, Shape(cfg.out));
}

void run_resize(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ResizeConfig cfg = read_config(ctx);
  resolve_sizes(ctx, x.shape(), [&](size_t i) { return ctx.has_input(i) ? &ctx.input(i) : nullptr; }, cfg);
  ONYX_CHECK(Shape(cfg.out) == ctx.output(0).shape(), "internal: Resize output shape mismatch");
  if (x.dtype() == DType::kBool) {
    // Booleans only make sense with nearest; copy them as bytes.
    ONYX_CHECK(cfg.mode == Mode::kNearest, "Resize of bool input needs mode nearest");
    resize_kernel<uint8_t>(ctx, cfg);
    return;
  }
  using Types = TypeList<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,
                         uint32_t, uint64_t, std::string>;
  dispatch<Types>(x.dtype(), ctx.node().op_type, [&](auto tag) {
    resize_kernel<typename decltype(tag)::type>(ctx, cfg);
  });
}

}  // namespace

void register_resize_ops(OpRegistry& r) {
  r.add(onnx_op("Resize", 10, infer_resize, run_resize).reads_values({1, 2, 3}));
  r.add(onnx_op("Upsample", 7, infer_resize, run_resize).reads_values({1}));
  register_grid_sample_ops(r);
}

}  // namespace onyx
