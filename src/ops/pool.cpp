// Pooling: MaxPool, AveragePool, LpPool, their Global forms, and MaxUnpool.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/conv.h"
#include "cpu/thread_pool.h"
#include "ops/conv_util.h"

namespace onyx {

namespace {

enum class PoolKind { kMax, kAverage, kLp };

// |v|^p, LpPool's term: the usual orders as products (std::pow per element was three quarters
// of a large LpPool's time), others through pow.
inline double abs_pow(double v, double p) {
  const double a = std::abs(v);
  if (p == 1) return a;
  if (p == 2) return a * a;
  if (p == 3) return a * a * a;
  if (p == 4) return (a * a) * (a * a);
  return std::pow(a, p);
}

struct PoolPlan {
  Window w;
  std::vector<int64_t> in, out;  // spatial dims
  int64_t planes = 0;            // N * C
};

PoolPlan plan_pool(const NodeView& node, const Shape& x, bool has_dilations) {
  ONYX_CHECK(x.rank() >= 3, "X must have rank >= 3 (N, C, spatial...), got ", x.str());
  PoolPlan p;
  p.in.assign(x.dims().begin() + 2, x.dims().end());
  std::vector<int64_t> kernel = node.attr_ints("kernel_shape");
  ONYX_CHECK(!kernel.empty(), "required attribute 'kernel_shape' is missing");
  p.w = read_window(node, p.in.size(), kernel, has_dilations);
  p.out = window_output_dims(p.w, p.in, node.attr_int("ceil_mode", 0) != 0);
  p.planes = x[0] * x[1];
  return p;
}

// For one spatial dim and one output coordinate: the in-range input positions
// of the window, and how many window taps fall inside the padded extent.
struct DimTaps {
  std::vector<std::vector<int64_t>> pos;
  std::vector<int64_t> padded_count;
};

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// The taps k in [0, kernel) whose position base + k * dilation lies in [lo, hi]: [first, last]
// (empty when first > last). Computed, not searched, so that the cost of a window is its
// taps inside the input, however large the kernel or the padding.
std::pair<int64_t, int64_t> tap_range(int64_t base, int64_t dilation, int64_t kernel, int64_t lo, int64_t hi) {
  const int64_t first = std::max<int64_t>(0, -floor_div(checked_add(base, -lo, "a window position"), dilation));
  const int64_t last = std::min<int64_t>(kernel - 1, floor_div(checked_add(hi, -base, "a window position"), dilation));
  return {first, last};
}

std::vector<DimTaps> dim_taps(const PoolPlan& p) {
  std::vector<DimTaps> taps(p.in.size());
  for (size_t d = 0; d < p.in.size(); ++d) {
    const Window& w = p.w;
    taps[d].pos.resize(p.out[d]);
    taps[d].padded_count.resize(p.out[d]);
    const int64_t end = checked_add(p.in[d], w.pads[d + w.nd], "the padded extent");
    for (int64_t o = 0; o < p.out[d]; ++o) {
      const int64_t base = checked_add(checked_mul(o, w.strides[d], "a window position"), -w.pads[d], "a window position");
      auto [pf, pl] = tap_range(base, w.dilations[d], w.kernel[d], -w.pads[d], end - 1);
      taps[d].padded_count[o] = pl >= pf ? pl - pf + 1 : 0;
      auto [f, l] = tap_range(base, w.dilations[d], w.kernel[d], 0, p.in[d] - 1);
      for (int64_t k = f; k <= l; ++k) taps[d].pos[o].push_back(base + k * w.dilations[d]);
    }
  }
  return taps;
}

// Runs `fn(plane, out_flat, window)` for every output element, where `window`
// calls its argument with (in-plane flat offset, spatial multi-index) for each
// in-range tap, and returns (#taps in range, #taps inside the padded extent).
template <class Fn>
void for_each_window(const PoolPlan& p, Fn fn) {
  const size_t nd = p.in.size();
  std::vector<DimTaps> taps = dim_taps(p);
  int64_t out_size = 1;
  for (int64_t o : p.out) out_size *= o;
  std::vector<int64_t> oidx(nd, 0), tidx(nd), at(nd);
  for (int64_t q = 0; q < out_size; ++q) {
    int64_t padded = 1, inside = 1;
    for (size_t d = 0; d < nd; ++d) {
      padded = checked_mul(padded, taps[d].padded_count[oidx[d]], "the taps of a padded window");
      inside *= static_cast<int64_t>(taps[d].pos[oidx[d]].size());
    }
    auto window = [&](auto&& visit) {
      if (inside == 0) return;
      if (nd == 2) {  // (the common case, without the general odometer's per-tap bookkeeping)
        const auto& rows = taps[0].pos[oidx[0]];
        const auto& cols = taps[1].pos[oidx[1]];
        const int64_t* r = rows.data();
        const int64_t* c = cols.data();
        const size_t nr = rows.size(), nc = cols.size();
        const int64_t w = p.in[1];
        for (size_t i = 0; i < nr; ++i) {
          at[0] = r[i];
          for (size_t j = 0; j < nc; ++j) {
            at[1] = c[j];
            visit(r[i] * w + c[j], at);
          }
        }
        return;
      }
      std::fill(tidx.begin(), tidx.end(), 0);
      for (int64_t t = 0; t < inside; ++t) {
        int64_t off = 0;
        for (size_t d = 0; d < nd; ++d) {
          at[d] = taps[d].pos[oidx[d]][tidx[d]];
          off = off * p.in[d] + at[d];
        }
        visit(off, at);
        for (size_t d = nd; d-- > 0;) {
          if (++tidx[d] < static_cast<int64_t>(taps[d].pos[oidx[d]].size())) break;
          tidx[d] = 0;
        }
      }
    };
    fn(q, inside, padded, window);
    for (size_t d = nd; d-- > 0;) {
      if (++oidx[d] < p.out[d]) break;
      oidx[d] = 0;
    }
  }
}

template <class T>
void pool_kernel(KernelContext& ctx, PoolKind kind, const PoolPlan& p) {
  using C = std::conditional_t<std::is_integral_v<T>, T, compute_t<T>>;
  using A = std::conditional_t<std::is_integral_v<T>, T, double>;  // accumulator
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  Tensor* indices = kind == PoolKind::kMax && ctx.has_output(1) ? &ctx.output(1) : nullptr;
  const bool include_pad = ctx.attr_int("count_include_pad", 0) != 0;
  const bool col_major = ctx.attr_int("storage_order", 0) != 0;
  double lp = 2;
  if (kind == PoolKind::kLp) {
    const Attribute* a = ctx.node().find_attribute("p");
    // LpPool-1 declared p as a float; later versions as an int.
    if (a) lp = a->kind == Attribute::Kind::kFloat ? a->f : static_cast<double>(a->i);
  }
  int64_t in_size = 1, out_size = 1;
  for (int64_t v : p.in) in_size *= v;
  for (int64_t v : p.out) out_size *= v;
  // Column-major strides of the spatial dims, for storage_order = 1 indices.
  std::vector<int64_t> cm_stride(p.in.size(), 1);
  for (size_t d = 1; d < p.in.size(); ++d) cm_stride[d] = cm_stride[d - 1] * p.in[d - 1];
  const T* px = x.data<T>();
  T* py = y.data<T>();
  int64_t* pi = indices ? indices->data<int64_t>() : nullptr;
  for (int64_t plane = 0; plane < p.planes; ++plane) {
    const T* src = px + plane * in_size;
    for_each_window(p, [&](int64_t q, int64_t inside, int64_t padded, auto&& window) {
      const int64_t o = plane * out_size + q;
      if (kind == PoolKind::kMax) {
        C best = std::numeric_limits<C>::lowest();
        int64_t best_off = -1;
        bool nan = false;
        std::vector<int64_t> best_at;
        window([&](int64_t off, const std::vector<int64_t>& at) {
          C v = static_cast<C>(src[off]);
          if constexpr (!std::is_integral_v<C>)
            if (std::isnan(v)) nan = true;
          if (best_off < 0 || v > best) {
            best = v;
            best_off = off;
            if (col_major) best_at = at;
          }
        });
        if constexpr (!std::is_integral_v<C>)
          if (nan) best = std::numeric_limits<C>::quiet_NaN();
        py[o] = static_cast<T>(best_off < 0 ? C(0) : best);
        if (pi) {
          int64_t idx = best_off < 0 ? 0 : best_off;
          if (col_major && best_off >= 0) {
            idx = 0;
            for (size_t d = 0; d < best_at.size(); ++d) idx += best_at[d] * cm_stride[d];
          }
          pi[o] = plane * in_size + idx;
        }
        return;
      }
      A acc = 0;
      if (kind == PoolKind::kAverage) {
        window([&](int64_t off, const std::vector<int64_t>&) { acc += static_cast<A>(static_cast<C>(src[off])); });
        const int64_t count = include_pad ? padded : inside;
        py[o] = static_cast<T>(static_cast<C>(count > 0 ? acc / static_cast<A>(count) : A(0)));
      } else {
        // The power chosen once per window, not per element.
        auto sum = [&](auto power) {
          window([&](int64_t off, const std::vector<int64_t>&) {
            acc += power(std::abs(static_cast<double>(static_cast<C>(src[off]))));
          });
        };
        if (lp == 2) sum([](double a) { return a * a; });
        else if (lp == 1) sum([](double a) { return a; });
        else if (lp == 3) sum([](double a) { return a * a * a; });
        else sum([&](double a) { return abs_pow(a, lp); });
        py[o] = static_cast<T>(static_cast<C>(std::pow(static_cast<double>(acc), 1.0 / lp)));
      }
    });
  }
}

// The larger of a window's best so far and v, a NaN taken and then kept (NaN wins a max window).
inline float max_nan(float best, float v) { return v > best || v != v ? v : best; }

// Where tap kc of a row's column windows reads, the same for every row: column j sw + off + kc is
// phase b = (off + kc) mod sw of the row (phase b holds row[b + sw t]) at index j + q, q =
// floor((off + kc) / sw). Found once per call of max_pool2d_float, not per row (an integer
// division per tap and row took a sixth of a ResNet-50 max pool's time).
struct RowTaps {
  int64_t kw = 0, sw = 1, plen = 0;
  int64_t phase[64] = {}, at[64] = {};
};

RowTaps row_taps(int64_t iw, int64_t off, int64_t sw, int64_t kw) {
  RowTaps t;
  t.kw = kw, t.sw = sw, t.plen = (iw + sw - 1) / sw;
  for (int64_t kc = 0; kc < kw; ++kc) {
    const int64_t c = off + kc;
    const int64_t q = floor_div(c, sw);
    t.phase[kc] = c - q * sw;
    t.at[kc] = q;
  }
  return t;
}

// best[j] = max over taps kc < kw of row[j sw + off + kc] for j in [j0, j1), all inside the row.
// With a stride the row is first split into its sw phases, so that each tap reads one phase
// contiguously: loops the compiler vectorizes.
void row_window_max(const float* row, int64_t iw, const RowTaps& t, int64_t j0, int64_t j1, float* phases, float* best) {
  const float* tap_row[64];
  const int64_t sw = t.sw, plen = t.plen;
  if (sw == 2) {
    cpu::split_row2(row, iw, phases, phases + plen);
  } else if (sw > 1) {
    for (int64_t b = 0; b < sw; ++b) {
      float* ph = phases + b * plen;
      for (int64_t i = 0, c = b; c < iw; ++i, c += sw) ph[i] = row[c];
    }
  }
  for (int64_t kc = 0; kc < t.kw; ++kc) tap_row[kc] = (sw > 1 ? phases + t.phase[kc] * plen : row) + t.at[kc] + j0;
  cpu::max_nan_taps(tap_row, t.kw, j1 - j0, best + j0);
}

// MaxPool of float32 over two spatial dims (no dilation), separably: each input row's column
// windows reduced once (an input row serves up to kh / sh output rows), then each output row
// the maximum of its rows' reductions, both loops over contiguous columns the compiler
// vectorizes. Windows fully inside a row take the vector loop, the border ones their taps.
// Ties keep the first value in the window's row-major order, as the loop over taps did.
void max_pool2d_float(const float* px, float* py, const PoolPlan& p, const std::vector<DimTaps>& taps) {
  const int64_t ih = p.in[0], iw = p.in[1], oh = p.out[0], ow = p.out[1];
  const int64_t kw = p.w.kernel[1], sw = p.w.strides[1], pw = p.w.pads[1];
  // Output columns [j0, j1) read kw columns from j sw - pw, all inside the row (none for a
  // kernel wider than 64: those windows take their taps one by one).
  int64_t j0 = 0, j1 = 0;
  for (int64_t j = 0; j < ow && kw <= 64; ++j)
    if (j * sw - pw >= 0 && j * sw - pw + kw <= iw) {
      if (j1 == j0) j0 = j;
      j1 = j + 1;
    }
  const RowTaps row_tap = j1 > j0 ? row_taps(iw, -pw, sw, kw) : RowTaps{};
  // The border columns (outside [j0, j1)) with their first and last input column, and whether
  // any window lies wholly in the padding: found once, not per row.
  struct Border {
    int64_t j, first, last;
  };
  std::vector<Border> borders;
  std::vector<int64_t> empty_cols;
  for (int64_t j = 0; j < ow; ++j) {
    const auto& cols = taps[1].pos[j];
    if (cols.empty()) empty_cols.push_back(j);
    else if (j < j0 || j >= j1 || j1 == j0) borders.push_back({j, cols.front(), cols.back()});
  }
  cpu::parallel_for(p.planes, std::max<int64_t>(1, 4096 / std::max<int64_t>(oh * ow, 1)), [&](int64_t p0, int64_t p1) {
    thread_local std::vector<float> rows_max, row_phases;
    if (rows_max.size() < static_cast<size_t>(ih * ow)) rows_max.resize(ih * ow);
    if (row_phases.size() < static_cast<size_t>(iw + sw)) row_phases.resize(iw + sw);
    float* h = rows_max.data();
    float* ph = row_phases.data();
    for (int64_t plane = p0; plane < p1; ++plane) {
      const float* src = px + plane * ih * iw;
      float* dst = py + plane * oh * ow;
      for (int64_t r = 0; r < ih; ++r) {
        const float* row = src + r * iw;
        float* hr = h + r * ow;
        if (j1 > j0) row_window_max(row, iw, row_tap, j0, j1, ph, hr);
        for (const Border& e : borders) {
          float best = row[e.first];
          for (int64_t c = e.first + 1; c <= e.last; ++c) best = max_nan(best, row[c]);
          hr[e.j] = best;
        }
      }
      for (int64_t i = 0; i < oh; ++i) {
        const auto& rows = taps[0].pos[i];
        float* d = dst + i * ow;
        if (rows.empty()) {
          std::fill_n(d, ow, 0.f);
          continue;
        }
        const float* tap_rows[64];
        if (rows.size() <= 64) {
          for (size_t t = 0; t < rows.size(); ++t) tap_rows[t] = h + rows[t] * ow;
          cpu::max_nan_taps(tap_rows, static_cast<int64_t>(rows.size()), ow, d);
        } else {
          std::copy_n(h + rows[0] * ow, ow, d);
          for (size_t t = 1; t < rows.size(); ++t) cpu::max_nan_into(d, h + rows[t] * ow, ow);
        }
        for (int64_t j : empty_cols) d[j] = 0.f;  // a window wholly in the padding
      }
    }
  });
}

// MaxPool and AveragePool of float32 over two spatial dims with no dilation and no indices
// output: each window a rectangle of rows and columns computed once per output row and
// column, planes split over the intra-op pool. The same results as pool_kernel (NaN wins a
// max window; an average counts the taps inside, or inside the padded extent when asked).
bool pool2d_float(KernelContext& ctx, PoolKind kind, const PoolPlan& p) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::kFloat32 || p.in.size() != 2 || (kind != PoolKind::kMax && kind != PoolKind::kAverage))
    return false;
  if (p.w.dilations[0] != 1 || p.w.dilations[1] != 1) return false;
  if (kind == PoolKind::kMax && ctx.num_outputs() > 1 && ctx.has_output(1)) return false;
  const bool include_pad = ctx.attr_int("count_include_pad", 0) != 0;
  const std::vector<DimTaps> taps = dim_taps(p);
  const int64_t ih = p.in[0], iw = p.in[1], oh = p.out[0], ow = p.out[1];
  const float* px = x.data<float>();
  float* py = ctx.output(0).data<float>();
  if (kind == PoolKind::kMax) {
    max_pool2d_float(px, py, p, taps);
    return true;
  }
  cpu::parallel_for(p.planes, std::max<int64_t>(1, 4096 / std::max<int64_t>(oh * ow, 1)), [&](int64_t p0, int64_t p1) {
    for (int64_t plane = p0; plane < p1; ++plane) {
      const float* src = px + plane * ih * iw;
      float* dst = py + plane * oh * ow;
      for (int64_t i = 0; i < oh; ++i) {
        const auto& rows = taps[0].pos[i];
        for (int64_t j = 0; j < ow; ++j) {
          const auto& cols = taps[1].pos[j];
          const int64_t inside = static_cast<int64_t>(rows.size() * cols.size());
          if (inside == 0) {
            dst[i * ow + j] = 0.f;
            continue;
          }
          const int64_t c0 = cols.front(), c1 = cols.back() + 1;
          if (kind == PoolKind::kMax) {
            float best = -std::numeric_limits<float>::infinity();
            bool nan = false;
            for (int64_t r : rows)
              for (int64_t c = c0; c < c1; ++c) {
                const float v = src[r * iw + c];
                nan |= v != v;
                best = v > best ? v : best;
              }
            dst[i * ow + j] = nan ? std::numeric_limits<float>::quiet_NaN() : best;
          } else {
            double acc = 0;
            for (int64_t r : rows)
              for (int64_t c = c0; c < c1; ++c) acc += src[r * iw + c];
            const int64_t count = include_pad ? taps[0].padded_count[i] * taps[1].padded_count[j] : inside;
            dst[i * ow + j] = static_cast<float>(acc / static_cast<double>(count));
          }
        }
      }
    }
  });
  return true;
}

void infer_pool(InferContext& ctx, PoolKind kind) {
  const PartialShape& xs = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  PartialShape out = xs.rank_known ? PartialShape::of_rank(xs.dims.size()) : PartialShape();
  if (xs.rank_known) {
    // Unknown input dims give unknown output dims; the known ones are exact.
    ONYX_CHECK(xs.dims.size() >= 3, "X must have rank >= 3 (N, C, spatial...), got ", xs.str());
    std::vector<int64_t> kernel = ctx.attr_ints("kernel_shape");
    ONYX_CHECK(!kernel.empty(), "required attribute 'kernel_shape' is missing");
    Window w = read_window(ctx, xs.dims.size() - 2, kernel, kind != PoolKind::kAverage || ctx.opset() >= 19);
    std::vector<int64_t> sp =
        window_output_dims(w, {xs.dims.begin() + 2, xs.dims.end()}, ctx.attr_int("ceil_mode", 0) != 0);
    out.dims[0] = xs.dims[0];
    out.dims[1] = xs.dims[1];
    std::copy(sp.begin(), sp.end(), out.dims.begin() + 2);
  }
  ctx.set_output(0, dt, out);
  if (ctx.num_outputs() > 1 && ctx.has_output(1)) ctx.set_output(1, DType::kInt64, out);
}

void run_pool(KernelContext& ctx, PoolKind kind) {
  const Tensor& x = ctx.input(0);
  PoolPlan p = plan_pool(ctx, x.shape(), kind != PoolKind::kAverage || ctx.opset() >= 19);
  if (pool2d_float(ctx, kind, p)) return;
  if (kind == PoolKind::kMax) {
    dispatch<TypeList<float, double, Float16, BFloat16, int8_t, uint8_t>>(
        x.dtype(), "MaxPool", [&](auto tag) { pool_kernel<typename decltype(tag)::type>(ctx, kind, p); });
  } else {
    dispatch<FloatTypes>(x.dtype(), kind == PoolKind::kAverage ? "AveragePool" : "LpPool",
                         [&](auto tag) { pool_kernel<typename decltype(tag)::type>(ctx, kind, p); });
  }
}

// Global pools reduce every spatial dim to 1.
void infer_global_pool(InferContext& ctx) {
  const PartialShape& xs = ctx.input_shape(0);
  PartialShape out = xs;
  if (xs.rank_known) {
    ONYX_CHECK(xs.dims.size() >= 3, "X must have rank >= 3 (N, C, spatial...), got ", xs.str());
    for (size_t d = 2; d < out.dims.size(); ++d) out.dims[d] = 1;
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
}

template <class T>
void global_pool_kernel(KernelContext& ctx, PoolKind kind) {
  using C = compute_t<T>;
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  const int64_t planes = x.shape()[0] * x.shape()[1];
  const int64_t size = planes == 0 ? 0 : x.numel() / planes;
  double lp = 2;
  if (kind == PoolKind::kLp) lp = static_cast<double>(ctx.attr_int("p", 2));
  const T* px = x.data<T>();
  T* py = y.data<T>();
  // Planes split over the pool (each plane's sum in the same order on any thread): its input
  // was just written by a kernel split over the pool (squeeze-and-excitation after a depthwise
  // convolution), half of it in the other threads' caches.
  cpu::parallel_for(planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(size, 1)), [&](int64_t p0, int64_t p1) {
    for (int64_t i = p0; i < p1; ++i) {
      const T* s = px + i * size;
      double r = 0;
      if (kind == PoolKind::kMax) {
        r = size ? static_cast<double>(static_cast<C>(s[0])) : 0.0;
        for (int64_t j = 1; j < size; ++j) {
          double v = static_cast<C>(s[j]);
          if (std::isnan(v) || v > r) r = v;
          if (std::isnan(v)) break;
        }
      } else if (kind == PoolKind::kAverage) {
        // Eight partial sums in double: independent chains instead of one add's latency per
        // element (squeeze-and-excitation pools whole feature maps).
        double part[8] = {};
        int64_t j = 0;
        for (; j + 8 <= size; j += 8)
          for (int u = 0; u < 8; ++u) part[u] += static_cast<C>(s[j + u]);
        for (; j < size; ++j) part[0] += static_cast<C>(s[j]);
        r = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
        r = size ? r / static_cast<double>(size) : 0.0;
      } else {
        for (int64_t j = 0; j < size; ++j) r += abs_pow(static_cast<double>(static_cast<C>(s[j])), lp);
        r = std::pow(r, 1.0 / lp);
      }
      py[i] = static_cast<T>(static_cast<C>(r));
    }
  });
}

// MaxUnpool: scatters X into a zero tensor at the flat positions in I.
std::vector<int64_t> unpool_shape(const NodeView& node, const Shape& x, const Tensor* output_shape) {
  ONYX_CHECK(x.rank() >= 3, "X must have rank >= 3 (N, C, spatial...), got ", x.str());
  const size_t nd = x.rank() - 2;
  std::vector<int64_t> kernel = node.attr_ints("kernel_shape");
  Window w = read_window(node, nd, kernel, false);
  std::vector<int64_t> dims{x[0], x[1]};
  for (size_t d = 0; d < nd; ++d) {
    int64_t o = (x[d + 2] - 1) * w.strides[d] + w.kernel[d] - w.pads[d] - w.pads[d + nd];
    ONYX_CHECK(o > 0, "MaxUnpool output spatial dim ", d, " would be ", o);
    dims.push_back(o);
  }
  if (output_shape) {
    std::vector<int64_t> given = output_shape->to_int64_vector();
    ONYX_CHECK(given.size() == x.rank(), "output_shape has ", given.size(), " entries for input ", x.str());
    ONYX_CHECK(given[0] == x[0] && given[1] == x[1], "output_shape ", Shape(given).str(),
               " must keep N and C of the input ", x.str());
    for (size_t d = 2; d < given.size(); ++d) ONYX_CHECK(given[d] >= 0, "negative output_shape ", Shape(given).str());
    dims = given;
  }
  return dims;
}

void infer_max_unpool(InferContext& ctx) {
  const PartialShape& xs = ctx.input_shape(0);
  const bool need_value = ctx.has_input(2);
  if (!xs.fully_known() || (need_value && !ctx.input_value(2))) {
    ctx.set_output(0, ctx.input_dtype(0), xs.rank_known ? PartialShape::of_rank(xs.dims.size()) : PartialShape());
    return;
  }
  ctx.set_output(0, ctx.input_dtype(0), Shape(unpool_shape(ctx, xs.to_shape(), ctx.input_value(2))));
}

void max_unpool_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  ONYX_CHECK(idx.shape() == x.shape(), "indices shape ", idx.shape().str(), " differs from X ", x.shape().str());
  Tensor& y = ctx.output(0);
  // Indices address the default-sized output (what MaxPool saw); a larger
  // output_shape keeps that block in its leading corner, as the reference does.
  const Shape natural(unpool_shape(ctx, x.shape(), nullptr));
  const Shape& out = y.shape();
  const bool same = natural == out;
  std::vector<int64_t> coord(natural.rank());
  dispatch<NumericTypes>(x.dtype(), "MaxUnpool", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* py = y.data<T>();
    std::fill(py, py + y.numel(), T(0.0f));
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t j = idx.get_as_int64(i);
      ONYX_CHECK(j >= 0 && j < natural.numel(), "index ", j, " at position ", i, " is outside the unpooled tensor ",
                 natural.str());
      if (same) {
        py[j] = px[i];
        continue;
      }
      int64_t rest = j, flat = 0;
      for (size_t d = natural.rank(); d-- > 0;) {
        coord[d] = rest % natural[d];
        rest /= natural[d];
      }
      bool inside = true;
      for (size_t d = 0; d < natural.rank(); ++d) {
        inside = inside && coord[d] < out[d];
        flat = flat * out[d] + coord[d];
      }
      if (inside) py[flat] = px[i];
    }
  });
}

}  // namespace

void register_pool_ops(OpRegistry& r) {
  r.add(onnx_op("MaxPool", 1, [](InferContext& ctx) { infer_pool(ctx, PoolKind::kMax); },
              [](KernelContext& ctx) { run_pool(ctx, PoolKind::kMax); }));
  r.add(onnx_op("AveragePool", 1, [](InferContext& ctx) { infer_pool(ctx, PoolKind::kAverage); },
              [](KernelContext& ctx) { run_pool(ctx, PoolKind::kAverage); }));
  r.add(onnx_op("LpPool", 1, [](InferContext& ctx) { infer_pool(ctx, PoolKind::kLp); },
              [](KernelContext& ctx) { run_pool(ctx, PoolKind::kLp); }));
  auto add_global = [&](const char* name, PoolKind kind) {
    r.add(onnx_op(name, 1, infer_global_pool, [name, kind](KernelContext& ctx) {
                  dispatch<FloatTypes>(ctx.input(0).dtype(), name, [&](auto tag) {
                    global_pool_kernel<typename decltype(tag)::type>(ctx, kind);
                  });
                }));
  };
  add_global("GlobalMaxPool", PoolKind::kMax);
  add_global("GlobalAveragePool", PoolKind::kAverage);
  add_global("GlobalLpPool", PoolKind::kLp);
  r.add(onnx_op("MaxUnpool", 9, infer_max_unpool, max_unpool_kernel));
}

}  // namespace onyx
