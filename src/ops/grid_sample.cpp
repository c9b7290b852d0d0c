// GridSample (N-D, nearest/linear/cubic, zeros/border/reflection padding) and
// AffineGrid, which makes the sampling grids that GridSample consumes.
#include <algorithm>
#include <cmath>

#include "ops/conv_util.h"

namespace onyx {

namespace {

enum class Padding { kZeros, kBorder, kReflection };

// Folds x back into [lo, hi] by reflecting at the borders, as often as needed.
double reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const auto n = static_cast<int64_t>(dx / range);
    const double r = dx - static_cast<double>(n) * range;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi;
    const auto n = static_cast<int64_t>(dx / range);
    const double r = dx - static_cast<double>(n) * range;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

double keys_cubic(double t) {
  constexpr double a = -0.75;
  t = std::abs(t);
  if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
  if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
  return 0;
}

struct GridSampleParams {
  int mode = 1;  // 0 nearest, 1 linear, 2 cubic
  Padding padding = Padding::kZeros;
  bool align_corners = false;
};

GridSampleParams read_params(const NodeView& node) {
  GridSampleParams p;
  const std::string mode = node.attr_string("mode", node.opset() >= 20 ? "linear" : "bilinear");
  if (mode == "nearest")
    p.mode = 0;
  else if (mode == "linear" || mode == "bilinear")
    p.mode = 1;
  else if (mode == "cubic" || mode == "bicubic")
    p.mode = 2;
  else
    throw Error(cat("unknown GridSample mode '", mode, "'"));
  const std::string pad = node.attr_string("padding_mode", "zeros");
  if (pad == "zeros")
    p.padding = Padding::kZeros;
  else if (pad == "border")
    p.padding = Padding::kBorder;
  else if (pad == "reflection")
    p.padding = Padding::kReflection;
  else
    throw Error(cat("unknown GridSample padding_mode '", pad, "'"));
  p.align_corners = node.attr_int("align_corners", 0) != 0;
  return p;
}

void infer_grid_sample(InferContext& ctx) {
  const PartialShape& xs = ctx.input_shape(0);
  const PartialShape& gs = ctx.input_shape(1);
  if (!xs.rank_known || !gs.rank_known) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape());
    return;
  }
  ONYX_CHECK(xs.dims.size() >= 3, "X must have rank >= 3 (N, C, spatial...), got ", xs.str());
  const size_t nd = xs.dims.size() - 2;
  ONYX_CHECK(gs.dims.size() == nd + 2, "grid must have rank ", nd + 2, " for X ", xs.str(), ", got ", gs.str());
  ONYX_CHECK(gs.dims.back() < 0 || gs.dims.back() == static_cast<int64_t>(nd), "grid's last dim must be ", nd,
             ", got ", gs.str());
  ONYX_CHECK(xs.dims[0] < 0 || gs.dims[0] < 0 || xs.dims[0] == gs.dims[0], "X ", xs.str(), " and grid ", gs.str(),
             " differ in batch size");
  PartialShape out = PartialShape::of_rank(nd + 2);
  out.dims[0] = xs.dims[0];
  out.dims[1] = xs.dims[1];
  for (size_t d = 0; d < nd; ++d) out.dims[d + 2] = gs.dims[d + 1];
  ctx.set_output(0, ctx.input_dtype(0), out);
}

template <class T>
void grid_sample_kernel(KernelContext& ctx) {
  using C = compute_t<T>;
  const GridSampleParams prm = read_params(ctx);
  const Tensor& x = ctx.input(0);
  const Tensor& grid_t = ctx.input(1);
  Tensor& y = ctx.output(0);
  const size_t nd = x.rank() - 2;
  const int64_t n = x.shape()[0], ch = x.shape()[1];
  std::vector<int64_t> dims(x.shape().dims().begin() + 2, x.shape().dims().end());
  int64_t in_size = 1, out_size = 1;
  for (int64_t d : dims) in_size *= d;
  for (size_t d = 0; d < nd; ++d) out_size *= grid_t.shape()[d + 1];
  std::vector<double> grid = to_compute<double>(grid_t);
  const T* px = x.data<T>();
  T* py = y.data<T>();
  std::vector<double> lo(nd), hi(nd);
  for (size_t d = 0; d < nd; ++d) {
    lo[d] = prm.align_corners ? 0.0 : -0.5;
    hi[d] = prm.align_corners ? static_cast<double>(dims[d] - 1) : static_cast<double>(dims[d]) - 0.5;
  }
  const int ntaps = prm.mode == 0 ? 1 : prm.mode == 1 ? 2 : 4;
  // Per spatial dim: tap indices (-1 = reads zero) and weights.
  std::vector<int64_t> tap_idx(nd * ntaps);
  std::vector<double> tap_w(nd * ntaps);
  std::vector<int> t(nd);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t q = 0; q < out_size; ++q) {
      const double* g = &grid[(b * out_size + q) * nd];
      bool any_tap = true;
      for (size_t d = 0; d < nd; ++d) {
        // grid's last axis lists coordinates innermost dimension first (x, y, z).
        const double v = g[nd - 1 - d];
        const double len = static_cast<double>(dims[d]);
        double pos = prm.align_corners ? (v + 1) / 2 * (len - 1) : ((v + 1) * len - 1) / 2;
        if (prm.mode == 0) pos = std::nearbyint(pos);  // half to even, like PyTorch
        if (pos < lo[d] || pos > hi[d]) {
          if (prm.padding == Padding::kBorder) pos = std::clamp(pos, 0.0, len - 1);
          if (prm.padding == Padding::kReflection) pos = reflect(pos, lo[d], hi[d]);
        }
        auto fetch_index = [&](int64_t i) -> int64_t {
          if (i >= 0 && i < dims[d]) return i;
          if (prm.padding == Padding::kZeros) return -1;
          if (prm.padding == Padding::kBorder) return std::clamp<int64_t>(i, 0, dims[d] - 1);
          int64_t r = static_cast<int64_t>(reflect(static_cast<double>(i), lo[d], hi[d]));
          return std::clamp<int64_t>(r, 0, dims[d] - 1);
        };
        if (!std::isfinite(pos)) {
          any_tap = false;
          break;
        }
        int64_t* idx = &tap_idx[d * ntaps];
        double* w = &tap_w[d * ntaps];
        if (prm.mode == 0) {
          idx[0] = fetch_index(static_cast<int64_t>(pos));
          w[0] = 1;
        } else {
          const double fl = std::floor(pos), r = pos - fl;
          const auto base = static_cast<int64_t>(fl);
          if (prm.mode == 1) {
            idx[0] = fetch_index(base);
            idx[1] = fetch_index(base + 1);
            w[0] = 1 - r;
            w[1] = r;
          } else {
            for (int k = 0; k < 4; ++k) {
              idx[k] = fetch_index(base - 1 + k);
              w[k] = keys_cubic(static_cast<double>(k - 1) - r);
            }
          }
        }
      }
      for (int64_t c = 0; c < ch; ++c) {
        const T* img = px + (b * ch + c) * in_size;
        double acc = 0;
        if (any_tap) {
          std::fill(t.begin(), t.end(), 0);
          int64_t total = 1;
          for (size_t d = 0; d < nd; ++d) total *= ntaps;
          for (int64_t k = 0; k < total; ++k) {
            double w = 1;
            int64_t off = 0;
            for (size_t d = 0; d < nd && off >= 0; ++d) {
              const int64_t i = tap_idx[d * ntaps + t[d]];
              w *= tap_w[d * ntaps + t[d]];
              off = i < 0 ? -1 : off * dims[d] + i;
            }
            if (off >= 0 && w != 0) acc += w * static_cast<double>(static_cast<C>(img[off]));
            for (size_t d = nd; d-- > 0;) {
              if (++t[d] < ntaps) break;
              t[d] = 0;
            }
          }
        }
        py[(b * ch + c) * out_size + q] = static_cast<T>(static_cast<C>(acc));
      }
    }
}

void grid_sample_kernel_dispatch(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& g = ctx.input(1);
  ONYX_CHECK(x.rank() >= 3, "X must have rank >= 3, got ", x.shape().str());
  ONYX_CHECK(g.rank() == x.rank() && g.shape()[0] == x.shape()[0] &&
                 g.shape()[x.rank() - 1] == static_cast<int64_t>(x.rank() - 2),
             "grid ", g.shape().str(), " does not match X ", x.shape().str());
  ONYX_CHECK(ctx.opset() >= 20 || x.rank() == 4, "GridSample-", ctx.opset(), " takes 4-D input, got ",
             x.shape().str());
  for (int64_t d : x.shape().dims())
    ONYX_CHECK(d > 0 || x.numel() == 0, "X has an empty dim: ", x.shape().str());
  if (ctx.output(0).numel() == 0) return;
  dispatch<FloatTypes>(x.dtype(), "GridSample", [&](auto tag) { grid_sample_kernel<typename decltype(tag)::type>(ctx); });
}

// AffineGrid: theta [N, 2, 3] with size [N, C, H, W], or [N, 3, 4] with
// [N, C, D, H, W] -> grid [N, (D,) H, W, nd] of theta applied to the base grid.
void infer_affine_grid(InferContext& ctx) {
  const Tensor* size = ctx.input_value(1);
  const PartialShape& ts = ctx.input_shape(0);
  if (!size) {
    const PartialShape& ss = ctx.input_shape(1);
    if (ss.fully_known() && ss.dims.size() == 1)
      ctx.set_output(0, ctx.input_dtype(0), PartialShape::of_rank(ss.dims[0] - 1));
    else
      ctx.set_output(0, ctx.input_dtype(0), PartialShape());
    return;
  }
  std::vector<int64_t> sz = input_ints(ctx, 1);
  ONYX_CHECK(sz.size() == 4 || sz.size() == 5, "size must have 4 or 5 entries, got ", Shape(sz).str());
  const int64_t nd = static_cast<int64_t>(sz.size()) - 2;
  for (int64_t v : sz) ONYX_CHECK(v >= 0, "negative size ", Shape(sz).str());
  if (ts.fully_known()) {
    Shape t = ts.to_shape();
    ONYX_CHECK(t.rank() == 3 && t[0] == sz[0] && t[1] == nd && t[2] == nd + 1, "theta must be [", sz[0], ", ", nd,
               ", ", nd + 1, "] for size ", Shape(sz).str(), ", got ", t.str());
  }
  std::vector<int64_t> dims{sz[0]};
  dims.insert(dims.end(), sz.begin() + 2, sz.end());
  dims.push_back(nd);
  ctx.set_output(0, ctx.input_dtype(0), Shape(dims));
}

template <class T>
void affine_grid_kernel(KernelContext& ctx) {
  using C = compute_t<T>;
  const bool align = ctx.attr_int("align_corners", 0) != 0;
  const Tensor& theta = ctx.input(0);
  std::vector<int64_t> sz = ctx.input(1).to_int64_vector();
  const size_t nd = sz.size() - 2;
  std::vector<int64_t> dims(sz.begin() + 2, sz.end());
  // Base coordinate along each dim, innermost dim first in the output vector.
  auto base = [&](size_t d, int64_t i) {
    const double len = static_cast<double>(dims[d]);
    if (align) return dims[d] == 1 ? -1.0 : -1.0 + 2.0 * static_cast<double>(i) / (len - 1);
    return (2.0 * static_cast<double>(i) + 1) / len - 1;
  };
  const T* th = theta.data<T>();
  T* out = ctx.output(0).data<T>();
  int64_t points = 1;
  for (int64_t d : dims) points *= d;
  std::vector<int64_t> idx(nd);
  std::vector<double> h(nd + 1);
  for (int64_t b = 0; b < sz[0]; ++b) {
    const T* m = th + b * nd * (nd + 1);
    std::fill(idx.begin(), idx.end(), 0);
    for (int64_t p = 0; p < points; ++p) {
      for (size_t k = 0; k < nd; ++k) h[k] = base(nd - 1 - k, idx[nd - 1 - k]);
      h[nd] = 1;
      for (size_t r = 0; r < nd; ++r) {
        double acc = 0;
        for (size_t k = 0; k <= nd; ++k) acc += static_cast<double>(static_cast<C>(m[r * (nd + 1) + k])) * h[k];
        out[(b * points + p) * nd + r] = static_cast<T>(static_cast<C>(acc));
      }
      for (size_t d = nd; d-- > 0;) {
        if (++idx[d] < dims[d]) break;
        idx[d] = 0;
      }
    }
  }
}

}  // namespace

void register_grid_sample_ops(OpRegistry& r) {
  r.add(onnx_op("GridSample", 16, infer_grid_sample, grid_sample_kernel_dispatch));
  r.add(onnx_op("AffineGrid", 20, infer_affine_grid, [](KernelContext& ctx) {
                dispatch<FloatTypes>(ctx.input(0).dtype(), "AffineGrid", [&](auto tag) {
                  affine_grid_kernel<typename decltype(tag)::type>(ctx);
                });
              }));
}

}  // namespace onyx
