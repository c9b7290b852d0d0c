// Convolutions: Conv, ConvInteger, QLinearConv, ConvTranspose, DeformConv and Col2Im.
// (The pooling ops live in pool.cpp; the window geometry in conv_util.)
// Every variant lowers to im2col/col2im plus a matrix product in float or
// double; 16-bit floats are widened to float first.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/conv.h"
#include "cpu/gemm.h"
#include "cpu/thread_pool.h"
#include "cpu/winograd.h"
#include "ops/broadcast.h"
#include "ops/gemm.h"
#include "ops/conv_util.h"
#include "ops/fused_activation.h"
#include "ops/quantize.h"

namespace onyx {

namespace {

template <class C>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const C* a, int64_t lda, const C* b, int64_t ldb, C* c,
          int64_t ldc) {
  if (m == 0 || n == 0) return;
  cpu::gemm_blas(ta, tb, m, n, k, C(1), a, std::max<int64_t>(lda, 1), b, std::max<int64_t>(ldb, 1), C(0), c,
                 std::max<int64_t>(ldc, 1));
}

std::vector<int64_t> spatial(std::span<const int64_t> dims) { return {dims.begin() + 2, dims.end()}; }

// The sizes that a Conv-like node works with, checked against each other.
struct ConvShapes {
  int64_t n = 0, c = 0, m = 0, group = 1;
  Window w;
  std::vector<int64_t> out;  // output spatial dims
};

// X [N, C, D...], W [M, C/group, k...] (or [C, M/group, k...] when transposed).
ConvShapes conv_shapes(const NodeView& node, const Shape& x, const Shape& w, bool transposed) {
  ONYX_CHECK(x.rank() >= 3, "X must have rank >= 3 (N, C, spatial...), got ", x.str());
  ONYX_CHECK(w.rank() == x.rank(), "W must have the rank of X: X ", x.str(), ", W ", w.str());
  ConvShapes s;
  s.n = x[0];
  s.c = x[1];
  s.group = node.attr_int("group", 1);
  ONYX_CHECK(s.group > 0, "group must be positive, got ", s.group);
  const size_t nd = x.rank() - 2;
  std::vector<int64_t> kernel = spatial(w.dims());
  if (node.has_attr("kernel_shape")) {
    auto ks = node.attr_ints("kernel_shape");
    ONYX_CHECK(ks == kernel, "kernel_shape attribute ", Shape(ks).str(), " does not match W's spatial dims ",
               Shape(kernel).str());
  }
  s.w = read_window(node, nd, kernel);
  if (!transposed) {
    s.m = w[0];
    ONYX_CHECK(s.c == w[1] * s.group, "X has ", s.c, " channels, but W ", w.str(), " with group ", s.group,
               " expects ", w[1] * s.group);
    ONYX_CHECK(s.m % s.group == 0, "W's ", s.m, " output channels are not divisible by group ", s.group);
  } else {
    s.m = w[1] * s.group;
    ONYX_CHECK(s.c == w[0], "X has ", s.c, " channels, but W ", w.str(), " of ConvTranspose expects ", w[0]);
    ONYX_CHECK(s.c % s.group == 0, "X's ", s.c, " channels are not divisible by group ", s.group);
  }
  return s;
}

// W's shape [M, C, 3, 3] from its Winograd-transformed form [(tile + 2)^2, M, C] (onyx::FusedConv's
// w_winograd = tile, cpu::winograd_weights).
Shape winograd_weight_shape(const Shape& u, int64_t tile) {
  ONYX_CHECK((tile == 2 || tile == 4) && u.rank() == 3 && u[0] == (tile + 2) * (tile + 2),
             "Winograd weights for output tiles of ", tile, " must have shape [", (tile + 2) * (tile + 2),
             ", M, C], got ", u.str());
  return Shape{u[1], u[2], 3, 3};
}

// Output spatial dims and begin pads of ConvTranspose (spec formulas; output_shape wins).
void conv_transpose_geometry(const NodeView& node, ConvShapes& s, const std::vector<int64_t>& in) {
  Window& w = s.w;
  const size_t nd = w.nd;
  std::vector<int64_t> out_pad = node.attr_ints("output_padding", std::vector<int64_t>(nd, 0));
  if (out_pad.empty()) out_pad.assign(nd, 0);
  ONYX_CHECK(out_pad.size() == nd, "output_padding has ", out_pad.size(), " entries for ", nd, " spatial dims");
  std::vector<int64_t> out_shape = node.attr_ints("output_shape");
  if (out_shape.size() == nd + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
  ONYX_CHECK(out_shape.empty() || out_shape.size() == nd, "output_shape has ", out_shape.size(), " entries for ", nd,
             " spatial dims");
  const bool same = w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER";
  s.out.assign(nd, 0);
  for (size_t d = 0; d < nd; ++d) {
    const int64_t full = w.strides[d] * (in[d] - 1) + out_pad[d] + w.span(d);
    if (!out_shape.empty() || same) {
      s.out[d] = !out_shape.empty() ? out_shape[d] : in[d] * w.strides[d];
      const int64_t total = full - s.out[d];
      // floor division, so that a negative total (output larger than the
      // natural size) extends the end.
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      w.pads[d] = w.auto_pad == "SAME_UPPER" ? half : total - half;
      w.pads[d + nd] = total - w.pads[d];
    } else {
      if (w.auto_pad == "VALID") w.pads[d] = w.pads[d + nd] = 0;
      s.out[d] = full - w.pads[d] - w.pads[d + nd];
    }
    ONYX_CHECK(s.out[d] > 0, "ConvTranspose output spatial dim ", d, " would be ", s.out[d], " (input ", in[d],
               ", stride ", w.strides[d], ", kernel ", w.kernel[d], ", pads ", w.pads[d], "+", w.pads[d + nd], ")");
  }
}

// Partial-shape inference shared by the forward convolutions.
// X is input 0 and W input `w_input` (1; 3 for QLinearConv).
void infer_conv_like(InferContext& ctx, DType out_dtype, bool transposed, size_t w_input = 1) {
  const PartialShape& xs = ctx.input_shape(0);
  PartialShape ws = ctx.input_shape(w_input);
  if (const int64_t tile = transposed ? 0 : ctx.attr_int("w_winograd", 0)) {
    ONYX_CHECK(ws.fully_known(), "Winograd weights must have a known shape");
    ws = winograd_weight_shape(ws.to_shape(), tile);
  }
  if (!xs.fully_known() || !ws.fully_known()) {
    PartialShape out = xs.rank_known ? PartialShape::of_rank(xs.dims.size()) : PartialShape();
    // With known weights, a forward conv still knows the batch, the output
    // channels and every spatial dim whose input dim is known.
    if (xs.rank_known && ws.fully_known() && !transposed && xs.dims.size() >= 3 &&
        ws.dims.size() == xs.dims.size()) {
      std::vector<int64_t> kernel(ws.dims.begin() + 2, ws.dims.end());
      Window w = read_window(ctx, kernel.size(), kernel);
      std::vector<int64_t> sp = window_output_dims(w, {xs.dims.begin() + 2, xs.dims.end()});
      out.dims[0] = xs.dims[0];
      out.dims[1] = ws.dims[0];
      std::copy(sp.begin(), sp.end(), out.dims.begin() + 2);
    }
    ctx.set_output(0, out_dtype, out);
    return;
  }
  Shape x = xs.to_shape(), w = ws.to_shape();
  ConvShapes s = conv_shapes(ctx, x, w, transposed);
  if (transposed)
    conv_transpose_geometry(ctx, s, spatial(x.dims()));
  else
    s.out = window_output_dims(s.w, spatial(x.dims()));
  std::vector<int64_t> dims{s.n, s.m};
  dims.insert(dims.end(), s.out.begin(), s.out.end());
  ctx.set_output(0, out_dtype, Shape(dims));
}

Im2ColGeometry make_geometry(const Window& w, std::vector<int64_t> image, std::vector<int64_t> grid) {
  Im2ColGeometry g;
  g.image = std::move(image);
  g.grid = std::move(grid);
  g.kernel = w.kernel;
  g.strides = w.strides;
  g.dilations = w.dilations;
  g.pad_begin.assign(w.pads.begin(), w.pads.begin() + w.nd);
  return g;
}

// y[N, M, out...] = conv(x[N, C, in...], w[M, C/group, k...]) + bias.
template <class C>
void conv_forward(const C* x, const C* w, const C* bias, C* y, const ConvShapes& s, const Im2ColGeometry& g) {
  const int64_t in_size = g.image_size(), out_size = g.grid_size(), K = g.kernel_size();
  const int64_t cg = s.c / s.group, mg = s.m / s.group, rows = g.grid_rows(), cols = g.grid_cols();
  bool pointwise = K == 1;
  for (size_t d = 0; d < g.grid.size(); ++d)
    pointwise = pointwise && g.strides[d] == 1 && g.pad_begin[d] == 0 && g.grid[d] == g.image[d];
  // Bound the im2col buffer (~32 MB) by processing whole grid rows in chunks.
  const int64_t row_elems = std::max<int64_t>(1, cg * K * cols);
  const int64_t chunk = pointwise ? rows : std::clamp<int64_t>((int64_t{8} << 20) / row_elems, 1, rows);
  std::vector<C> col(pointwise ? 0 : static_cast<size_t>(cg * K * chunk * cols));
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t gi = 0; gi < s.group; ++gi) {
      const C* xg = x + (n * s.c + gi * cg) * in_size;
      const C* wg = w + gi * mg * cg * K;
      C* yg = y + (n * s.m + gi * mg) * out_size;
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t r1 = std::min(rows, r0 + chunk), ncols = (r1 - r0) * cols;
        if (pointwise) {
          gemm<C>(false, false, mg, out_size, cg, wg, cg, xg, in_size, yg, out_size);
          break;
        }
        im2col(xg, cg, g, r0, r1, col.data(), ncols);
        gemm<C>(false, false, mg, ncols, cg * K, wg, cg * K, col.data(), ncols, yg + r0 * cols, out_size);
      }
    }
  if (bias)
    for (int64_t n = 0; n < s.n; ++n)
      for (int64_t m = 0; m < s.m; ++m) {
        C* p = y + (n * s.m + m) * out_size;
        for (int64_t i = 0; i < out_size; ++i) p[i] += bias[m];
      }
}

// im2col straight into the matrix product's packed layout (cpu/gemm.h) for a 2-D convolution:
// row (c, ki, kj) of B holds x[c, oy sh - ph + ki dh, ox sw - pw + kj dw] (0 outside) for the
// output positions of grid rows [r0, r1), each panel 16 consecutive positions. Writing the
// panels directly saves packing an im2col matrix a second time. Channels split over the pool.
void im2col_packed_2d(const float* x, int64_t channels, const Im2ColGeometry& g, int64_t r0, int64_t r1,
                      float* packed) {
  const int64_t ih = g.image[0], iw = g.image[1], ow = g.grid[1];
  const int64_t kh = g.kernel[0], kw = g.kernel[1], sh = g.strides[0], sw = g.strides[1];
  const int64_t dh = g.dilations[0], dw = g.dilations[1], ph = g.pad_begin[0], pw = g.pad_begin[1];
  const int64_t krows = channels * kh * kw, ncols = (r1 - r0) * ow;
  const int64_t pstride = cpu::kPanel * krows;
  cpu::parallel_for(channels, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t ki = 0; ki < kh; ++ki)
        for (int64_t kj = 0; kj < kw; ++kj) {
          const int64_t krow = (c * kh + ki) * kw + kj;
          float* base = packed + krow * cpu::kPanel;
          const int64_t xoff = kj * dw - pw;
          // Output columns [lo, hi) read inside the row; the rest read padding.
          const int64_t lo = std::min(ow, std::max<int64_t>(0, (-xoff + sw - 1) / sw));
          const int64_t hi = std::max(lo, std::min(ow, xoff >= iw ? 0 : (iw - 1 - xoff) / sw + 1));
          for (int64_t oy = r0; oy < r1; ++oy) {
            const int64_t iy = oy * sh - ph + ki * dh;
            const float* row = iy >= 0 && iy < ih ? x + (c * ih + iy) * iw : nullptr;
            const int64_t j0 = (oy - r0) * ow;
            for (int64_t ox = 0; ox < ow;) {
              const int64_t j = j0 + ox;
              float* dst = base + (j / cpu::kPanel) * pstride + j % cpu::kPanel;
              const int64_t run = std::min(ow - ox, cpu::kPanel - j % cpu::kPanel);  // to the panel's end
              if (!row) {
                std::fill_n(dst, run, 0.f);
              } else if (sw == 1 && ox >= lo && ox + run <= hi) {  // inside the row: a copy
                const float* src = row + ox + xoff;
                if (run == cpu::kPanel) std::memcpy(dst, src, cpu::kPanel * sizeof(float));
                else std::copy_n(src, run, dst);
              } else {  // padding, then the strided interior, then padding: no test per element
                const int64_t a = std::clamp(lo - ox, int64_t{0}, run), e = std::clamp(hi - ox, a, run);
                std::fill_n(dst, a, 0.f);
                const float* src = row + (ox + a) * sw + xoff;
                for (int64_t t = a; t < e; ++t, src += sw) dst[t] = *src;
                std::fill_n(dst + e, run - e, 0.f);
              }
              ox += run;
            }
          }
        }
  });
  // The last panel's columns past ncols are zero.
  const int64_t tail = ncols % cpu::kPanel;
  if (tail)
    for (int64_t r = 0; r < krows; ++r)
      std::fill_n(packed + (ncols / cpu::kPanel) * pstride + r * cpu::kPanel + tail, cpu::kPanel - tail, 0.f);
}

// dst[i] = src[2 i] for i < count.
void split_even(const float* src, int64_t count, float* dst) {
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) {
    dst[i] = src[2 * i];
    dst[i + 1] = src[2 * i + 2];
    dst[i + 2] = src[2 * i + 4];
    dst[i + 3] = src[2 * i + 6];
  }
  for (; i < count; ++i) dst[i] = src[2 * i];
}

// A 2-D convolution as one product per group without im2col (cpu::gemm_indirect). The group's
// image is copied once, zero-padded and split into its sh x sw phases (phase (a, b) holds
// padded[a + sh y][b + sw x]), each phase a plane of hq x wq; output (oy, ox) reads, for tap
// (ki, kj), phase ((ki dh) % sh, (kj dw) % sw) at row oy + (ki dh) / sh, column ox + (kj dw) / sw.
// So the product computes every position q = oy wq + x, x < wq, and B's row (c, ki, kj) is that
// phase plane read contiguously from its shift: a stride-1 convolution reads shifted views of
// its padded image, a stride-2 one of its four phases. The columns x >= ow (the kernel's
// overhang) are computed and dropped as the result is copied out, where a residual is added
// and the activation applied (without a residual both are applied in the product's registers).
void conv_direct_2d(const float* x, const float* w, const float* bias, const float* z, float* y,
                    const ConvShapes& s, const Im2ColGeometry& g, const cpu::Activation& act) {
  const int64_t ih = g.image[0], iw = g.image[1], oh = g.grid[0], ow = g.grid[1];
  const int64_t kh = g.kernel[0], kw = g.kernel[1], dh = g.dilations[0], dw = g.dilations[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], ph = g.pad_begin[0], pw = g.pad_begin[1];
  const int64_t cg = s.c / s.group, mg = s.m / s.group, K = kh * kw;
  // The padded rows and columns any output reads, and the phase planes' sizes.
  const int64_t hp = sh * (oh - 1) + (kh - 1) * dh + 1, wp = sw * (ow - 1) + (kw - 1) * dw + 1;
  // Only the phases some tap reads are kept (a strided 1 x 1 convolution reads one of four):
  // phase (a, b) at plane slot[a * sw + b] of its channel.
  std::vector<int64_t> slot(static_cast<size_t>(sh * sw), -1);
  int64_t phases = 0;
  for (int64_t ki = 0; ki < kh; ++ki)
    for (int64_t kj = 0; kj < kw; ++kj) {
      int64_t& sl = slot[(ki * dh % sh) * sw + kj * dw % sw];
      if (sl < 0) sl = phases++;
    }
  const int64_t hq = (hp + sh - 1) / sh, wq = (wp + sw - 1) / sw, pplane = hq * wq, cplane = phases * pplane;
  const int64_t q = oh * wq;
  // Reads reach a phase plane's start + (kh - 1) dh / sh wq + (kw - 1) dw / sw + q rounded up
  // to 16, and oh + (kh - 1) dh / sh <= hq: past the last plane by (kw - 1) dw / sw + 15 floats
  // at most, zeros.
  const int64_t slack = (kw - 1) * dw / sw + cpu::kPanel;
  thread_local std::vector<float> padded_buf, out_buf;
  thread_local std::vector<int64_t> koff_buf;
  if (padded_buf.size() < static_cast<size_t>(cg * cplane + slack)) padded_buf.resize(cg * cplane + slack);
  if (out_buf.size() < static_cast<size_t>(mg * q)) out_buf.resize(mg * q);
  koff_buf.resize(cg * K);
  // Plain pointers for the pool's workers (a thread_local named in a task is the worker's own).
  float* const padded = padded_buf.data();
  float* const out = out_buf.data();
  int64_t* const koff = koff_buf.data();
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t ki = 0; ki < kh; ++ki)
      for (int64_t kj = 0; kj < kw; ++kj) {
        const int64_t r = ki * dh, col = kj * dw;
        koff[(c * kh + ki) * kw + kj] = c * cplane + slot[(r % sh) * sw + col % sw] * pplane + r / sh * wq + col / sw;
      }
  std::fill_n(padded + cg * cplane, slack, 0.f);
  const int64_t in_size = ih * iw, out_size = oh * ow;
  // Padded (row, column) (u, v) holds input (u - ph, v - pw) where that is inside the image.
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t gi = 0; gi < s.group; ++gi) {
      const float* xg = x + (n * s.c + gi * cg) * in_size;
      cpu::parallel_for(cg, std::max<int64_t>(1, 16384 / cplane), [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          float* pc = padded + c * cplane;
          const float* xc = xg + c * in_size;
          if (sh == 1 && sw == 1) {  // one plane: rows copied, the borders zeroed
            for (int64_t u = 0; u < hp; ++u) {
              float* row = pc + u * wq;
              const int64_t r = u - ph;
              if (r < 0 || r >= ih) {
                std::fill_n(row, wp, 0.f);
                continue;
              }
              const int64_t v0 = std::min(pw, wp), v1 = std::clamp<int64_t>(pw + iw, v0, wp);
              std::fill_n(row, v0, 0.f);
              std::copy_n(xc + r * iw + (v0 - pw), v1 - v0, row + v0);
              std::fill_n(row + v1, wp - v1, 0.f);
            }
            continue;
          }
          std::fill_n(pc, cplane, 0.f);
          // Input column j lands at padded column v = j + pw: phase v % sw, at v / sw. Columns
          // [j0, j1) land inside the padded width; a phase no tap reads is not written.
          const int64_t j0 = std::max<int64_t>(0, -pw), j1 = std::min(iw, wp - pw);
          for (int64_t u = 0; u < hp; ++u) {
            const int64_t r = u - ph;
            if (r < 0 || r >= ih || j0 >= j1) continue;
            const int64_t* row_slots = slot.data() + (u % sh) * sw;
            const float* src = xc + r * iw;
            const int64_t at = (u / sh) * wq;
            if (sw == 2) {
              float* even = row_slots[(j0 + pw) % 2] >= 0 ? pc + row_slots[(j0 + pw) % 2] * pplane + at : nullptr;
              float* odd = row_slots[(j0 + pw + 1) % 2] >= 0 ? pc + row_slots[(j0 + pw + 1) % 2] * pplane + at : nullptr;
              // Columns j0, j0 + 2, ... to one phase from (j0 + pw) / 2 on, the others to the
              // other phase from (j0 + 1 + pw) / 2 on.
              if (even) split_even(src + j0, (j1 - j0 + 1) / 2, even + (j0 + pw) / 2);
              if (odd) split_even(src + j0 + 1, (j1 - j0) / 2, odd + (j0 + 1 + pw) / 2);
              continue;
            }
            for (int64_t b = 0; b < sw; ++b) {
              if (row_slots[b] < 0) continue;
              float* dst = pc + row_slots[b] * pplane + at;
              // The first column of phase b: the smallest j >= j0 with (j + pw) % sw == b.
              int64_t j = j0 + (((b - j0 - pw) % sw) + sw) % sw;
              for (int64_t v = (j + pw) / sw; j < j1; j += sw, ++v) dst[v] = src[j];
            }
          }
        }
      });
      cpu::Epilogue ep;
      ep.row_bias = bias ? bias + gi * mg : nullptr;
      if (!z) ep.act = act;
      cpu::gemm_indirect(mg, q, cg * K, w + gi * mg * cg * K, cg * K, padded, koff, out, q, ep);
      float* yg = y + (n * s.m + gi * mg) * out_size;
      const float* zg = z ? z + (n * s.m + gi * mg) * out_size : nullptr;
      cpu::parallel_for(mg, std::max<int64_t>(1, 16384 / q), [&](int64_t m0, int64_t m1) {
        for (int64_t m = m0; m < m1; ++m) {
          float* ym = yg + m * out_size;
          for (int64_t oy = 0; oy < oh; ++oy) std::copy_n(out + m * q + oy * wq, ow, ym + oy * ow);
          if (!zg) continue;
          const float* zm = zg + m * out_size;
          for (int64_t i = 0; i < out_size; ++i) ym[i] += zm[i];
          if (act.kind != cpu::Act::kNone) cpu::activate(ym, ym, out_size, act);
        }
      });
    }
}

// A convolution whose weights are kept as the products' packed right-hand operand (w_panels:
// each group's W^T in panels, cpu::pack_b), the pixels the product's rows: Y^T = X^T W^T, X^T
// read in place (pointwise) or from a row-major im2col matrix as a column-major left operand,
// then transposed into Y with the residual and the activation. Where W is large and the image
// small (ResNet's last stage: 2048 x 512 weights over 49 pixels), the channels fill the
// vectors that 49 pixels would fill 49 of 64 lanes of, and the weights stream once, in order.
void conv_forward_panels(const float* x, const float* w, const float* bias, const float* z, float* y,
                         const ConvShapes& s, const Im2ColGeometry& g, const cpu::Activation& act) {
  const int64_t in_size = g.image_size(), out_size = g.grid_size(), K = g.kernel_size();
  const int64_t cg = s.c / s.group, mg = s.m / s.group, kg = cg * K;
  bool pointwise = K == 1;
  for (size_t d = 0; d < g.grid.size(); ++d)
    pointwise = pointwise && g.strides[d] == 1 && g.pad_begin[d] == 0 && g.grid[d] == g.image[d];
  // im2col in chunks of grid rows (about 4 MiB each): a chunk's pixels are rows of Y^T.
  const int64_t rows = g.grid_rows(), cols = g.grid_cols();
  const int64_t chunk = pointwise ? rows : std::clamp<int64_t>((int64_t{1} << 20) / std::max<int64_t>(kg * cols, 1), 1, rows);
  thread_local std::vector<float> col_buf, yt_buf;
  if (!pointwise && col_buf.size() < static_cast<size_t>(kg * chunk * cols)) col_buf.resize(kg * chunk * cols);
  if (yt_buf.size() < static_cast<size_t>(out_size * mg)) yt_buf.resize(out_size * mg);
  float* const col = col_buf.data();
  float* const yt = yt_buf.data();
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t gi = 0; gi < s.group; ++gi) {
      const float* xg = x + (n * s.c + gi * cg) * in_size;
      cpu::Epilogue ep;
      ep.bias = bias ? bias + gi * mg : nullptr;
      if (!z) ep.act = act;
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t r1 = std::min(rows, r0 + chunk), npix = (r1 - r0) * cols;
        if (pointwise) {
          cpu::gemm_packed_cols(out_size, mg, kg, xg, in_size, w + gi * mg * kg, yt, mg, ep);
          break;
        }
        im2col(xg, cg, g, r0, r1, col, npix);
        cpu::gemm_packed_cols(npix, mg, kg, col, npix, w + gi * mg * kg, yt + r0 * cols * mg, mg, ep);
      }
      float* yg = y + (n * s.m + gi * mg) * out_size;
      const float* zg = z ? z + (n * s.m + gi * mg) * out_size : nullptr;
      // Y = (Y^T)^T, 16 pixels at a time (16 lines of Y^T read along, each line used 16 times).
      cpu::parallel_for(mg, std::max<int64_t>(1, 16384 / out_size), [&](int64_t m0, int64_t m1) {
        for (int64_t i0 = 0; i0 < out_size; i0 += 16) {
          const int64_t i1 = std::min(out_size, i0 + 16);
          for (int64_t m = m0; m < m1; ++m)
            for (int64_t i = i0; i < i1; ++i) yg[m * out_size + i] = yt[i * mg + m];
        }
        if (!zg) return;
        for (int64_t m = m0; m < m1; ++m) {
          float* ym = yg + m * out_size;
          const float* zm = zg + m * out_size;
          for (int64_t i = 0; i < out_size; ++i) ym[i] += zm[i];
          if (act.kind != cpu::Act::kNone) cpu::activate(ym, ym, out_size, act);
        }
      });
    }
}

// How onyx::FusedConv holds its weights (passes/fuse_cpu.h): as the graph gave them, as the
// products' packed right-hand operand (w_panels), or Winograd-transformed (w_winograd).
enum class WeightForm { kPlain, kPanels, kWinograd2, kWinograd4 };

// The float32 convolution: a depthwise 2-D one by its direct kernel, the others as matrix
// products (the weights the left operand, im2col's columns, or the image itself for a pointwise
// convolution, the right), with bias and activation applied as each product stores its tile.
// `form`: kPanels, the weights as conv_forward_panels reads them; kWinograd2 and kWinograd4, as
// cpu::winograd_conv3x3 does with output tiles of 2 or 4 (a 3 x 3 convolution of stride 1,
// dilation 1, one group).
void conv_forward_float(const float* x, const float* w, WeightForm form, const float* bias, const float* z, float* y,
                        const ConvShapes& s, const Im2ColGeometry& g, const cpu::Activation& act) {
  if (form == WeightForm::kPanels) {
    conv_forward_panels(x, w, bias, z, y, s, g, act);
    return;
  }
  if (form == WeightForm::kWinograd2 || form == WeightForm::kWinograd4) {
    ONYX_CHECK(g.grid.size() == 2 && s.group == 1 && g.kernel == std::vector<int64_t>({3, 3}) &&
                   g.strides == std::vector<int64_t>({1, 1}) && g.dilations == std::vector<int64_t>({1, 1}) &&
                   g.pad_begin[0] >= 0 && g.pad_begin[1] >= 0,
               "Winograd weights need a 2-D 3 x 3 convolution of stride 1, dilation 1, one group and pads >= 0");
    cpu::WinogradConv3x3 a;
    a.x = x, a.u = w, a.bias = bias, a.z = z, a.y = y;
    a.n = s.n, a.cin = s.c, a.cout = s.m;
    a.ih = g.image[0], a.iw = g.image[1], a.oh = g.grid[0], a.ow = g.grid[1];
    a.ph = g.pad_begin[0], a.pw = g.pad_begin[1];
    a.tile = form == WeightForm::kWinograd2 ? 2 : 4;
    a.act = act;
    cpu::winograd_conv3x3(a);
    return;
  }
  const int64_t in_size = g.image_size(), out_size = g.grid_size(), K = g.kernel_size();
  const int64_t cg = s.c / s.group, mg = s.m / s.group, rows = g.grid_rows(), cols = g.grid_cols();
  if (cg == 1 && mg == 1 && g.grid.size() == 2 && !z) {
    for (int64_t n = 0; n < s.n; ++n) {
      cpu::DepthwiseConv2d a;
      a.x = x + n * s.c * in_size;
      a.w = w;
      a.bias = bias;
      a.y = y + n * s.m * out_size;
      a.channels = s.m;
      a.ih = g.image[0], a.iw = g.image[1], a.oh = g.grid[0], a.ow = g.grid[1];
      a.kh = g.kernel[0], a.kw = g.kernel[1], a.sh = g.strides[0], a.sw = g.strides[1];
      a.ph = g.pad_begin[0], a.pw = g.pad_begin[1], a.dh = g.dilations[0], a.dw = g.dilations[1];
      a.act = act;
      cpu::depthwise_conv2d(a);
    }
    return;
  }
  bool pointwise = K == 1;
  for (size_t d = 0; d < g.grid.size(); ++d)
    pointwise = pointwise && g.strides[d] == 1 && g.pad_begin[d] == 0 && g.grid[d] == g.image[d];
  // (A strided 1 x 1 convolution stays with im2col, a subsampling copy into the packed layout:
  // measured faster than reading one phase of four through offsets.)
  if (!pointwise && K > 1 && g.grid.size() == 2) {
    conv_direct_2d(x, w, bias, z, y, s, g, act);
    return;
  }
  // Grid rows in chunks whose packed right-hand operand (~1 MiB) stays in L2 from being written
  // to being read by the product.
  const int64_t row_elems = std::max<int64_t>(1, cg * K * cols);
  const int64_t chunk = pointwise ? rows : std::clamp<int64_t>((int64_t{256} << 10) / row_elems, 1, rows);
  // 2-D: im2col straight into the packed layout (measured faster than a row-major im2col read
  // in place by the product); a pointwise convolution reads the image in place.
  const bool packed_im2col = g.grid.size() == 2;
  thread_local std::vector<float> col;  // grows to the largest chunk, then no allocation per run
  const int64_t col_floats = packed_im2col ? cpu::packed_size(cg * K, chunk * cols) : cg * K * chunk * cols;
  if (!pointwise && col.size() < static_cast<size_t>(col_floats)) col.resize(col_floats);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t gi = 0; gi < s.group; ++gi) {
      const float* xg = x + (n * s.c + gi * cg) * in_size;
      const float* wg = w + gi * mg * cg * K;
      float* yg = y + (n * s.m + gi * mg) * out_size;
      cpu::Epilogue ep;
      ep.row_bias = bias ? bias + gi * mg : nullptr;
      ep.act = act;
      ep.residual = z ? z + (n * s.m + gi * mg) * out_size : nullptr;
      ep.ldr = out_size;
      if (pointwise) {  // the image is the right-hand operand, in column blocks that fit L2
        const int64_t block = std::max<int64_t>(cpu::kPanel, (int64_t{256} << 10) / std::max<int64_t>(cg, 1) /
                                                                 cpu::kPanel * cpu::kPanel);
        for (int64_t j0 = 0; j0 < out_size; j0 += block) {
          cpu::Epilogue epc = ep;
          if (z) epc.residual = ep.residual + j0;
          cpu::gemm(false, false, mg, std::min(block, out_size - j0), cg, wg, cg, xg + j0, in_size, yg + j0, out_size,
                    epc);
        }
        continue;
      }
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t r1 = std::min(rows, r0 + chunk), ncols = (r1 - r0) * cols;
        cpu::Epilogue epc = ep;  // this chunk's columns of the residual
        if (z) epc.residual = ep.residual + r0 * cols;
        if (packed_im2col) {
          im2col_packed_2d(xg, cg, g, r0, r1, col.data());
          cpu::gemm_packed(mg, ncols, cg * K, wg, cg * K, col.data(), yg + r0 * cols, out_size, epc);
          continue;
        }
        im2col(xg, cg, g, r0, r1, col.data(), ncols);
        cpu::gemm(false, false, mg, ncols, cg * K, wg, cg * K, col.data(), ncols, yg + r0 * cols, out_size, epc);
      }
    }
}

// Runs `body(x, w, bias, y)` on C-typed buffers for a tensor of T, widening
// and narrowing only when T is not C itself.
template <class T, class C, class Body>
void with_compute_buffers(KernelContext& ctx, size_t bias_input, Body body) {
  const Tensor& xt = ctx.input(0);
  const Tensor& wt = ctx.input(1);
  const Tensor* bt = ctx.has_input(bias_input) ? &ctx.input(bias_input) : nullptr;
  Tensor& yt = ctx.output(0);
  if constexpr (std::is_same_v<T, C>) {
    body(xt.data<C>(), wt.data<C>(), bt ? bt->data<C>() : nullptr, yt.data<C>());
  } else {
    std::vector<C> x = to_compute<C>(xt), w = to_compute<C>(wt), b = bt ? to_compute<C>(*bt) : std::vector<C>();
    std::vector<C> y(static_cast<size_t>(yt.numel()));
    body(x.data(), w.data(), bt ? b.data() : nullptr, y.data());
    T* py = yt.data<T>();
    for (size_t i = 0; i < y.size(); ++i) py[i] = static_cast<T>(y[i]);
  }
}

void check_bias(KernelContext& ctx, size_t i, int64_t m) {
  if (!ctx.has_input(i)) return;
  const Tensor& b = ctx.input(i);
  ONYX_CHECK(b.rank() == 1 && b.shape()[0] == m, "bias must have shape [", m, "], got ", b.shape().str());
}

void conv_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  ONYX_CHECK(w.dtype() == x.dtype(), "W has dtype ", dtype_name(w.dtype()), ", X ", dtype_name(x.dtype()));
  // onyx::FusedConv's weights may be Winograd-transformed for output tiles of w_winograd
  // (2 or 4), [(w_winograd + 2)^2, M, C] for W [M, C, 3, 3].
  const int64_t winograd = ctx.attr_int("w_winograd", 0);
  const bool w_winograd = winograd != 0;
  ConvShapes s = conv_shapes(ctx, x.shape(), w_winograd ? winograd_weight_shape(w.shape(), winograd) : w.shape(), false);
  s.out = window_output_dims(s.w, spatial(x.shape().dims()));
  check_bias(ctx, 2, s.m);
  Im2ColGeometry g = make_geometry(s.w, spatial(x.shape().dims()), s.out);
  // onyx::FusedConv: a Conv with the activation that followed it (passes/fuse_cpu.h).
  const cpu::Activation act = parse_activation_attrs(ctx);
  // onyx::FusedConv's weights may be kept as the products' packed operand (passes/fuse_cpu.h).
  const bool w_panels = ctx.attr_int("w_panels", 0) != 0;
  ONYX_CHECK(!w_panels || (x.dtype() == DType::kFloat32 && (s.m / s.group) % cpu::kPanel == 0),
             "weights in panels need float32 and output channels per group a multiple of ", cpu::kPanel);
  ONYX_CHECK(!w_winograd || (x.dtype() == DType::kFloat32 && !w_panels), "Winograd weights need float32");
  const WeightForm form = w_panels     ? WeightForm::kPanels
                          : !w_winograd ? WeightForm::kPlain
                                        : (winograd == 2 ? WeightForm::kWinograd2 : WeightForm::kWinograd4);
  if (x.dtype() == DType::kFloat32) {
    const float* pb = ctx.has_input(2) ? ctx.input(2).data<float>() : nullptr;
    Tensor& y = ctx.output(0);
    if (!ctx.has_input(3)) {
      conv_forward_float(x.data<float>(), w.data<float>(), form, pb, nullptr, y.data<float>(), s, g, act);
      return;
    }
    // onyx::FusedConv's Z, added before the activation: in the product's epilogue when it has
    // the output's shape, else broadcast onto it afterwards (as the Add it replaced did).
    const Tensor& z = ctx.input(3);
    ONYX_CHECK(z.dtype() == DType::kFloat32, "Z must be float32, got ", dtype_name(z.dtype()));
    std::vector<int64_t> dims{s.n, s.m};
    dims.insert(dims.end(), s.out.begin(), s.out.end());
    const Shape conv_shape(dims);
    if (z.shape() == conv_shape && y.shape() == conv_shape) {
      conv_forward_float(x.data<float>(), w.data<float>(), form, pb, z.data<float>(), y.data<float>(), s, g, act);
      return;
    }
    // Z of another shape (broadcast, perhaps raising the output's): the convolution apart, then
    // both broadcast onto the output as the Add did.
    Tensor conv(DType::kFloat32, conv_shape, ctx.allocator());
    conv_forward_float(x.data<float>(), w.data<float>(), form, pb, nullptr, conv.data<float>(), s, g,
                       cpu::Activation{});
    float* py = y.data<float>();
    const float* pc = conv.data<float>();
    const float* pz = z.data<float>();
    for_each_broadcast<2>(y.shape(), {&conv.shape(), &z.shape()},
                          [&](int64_t o, const std::array<int64_t, 2>& i) { py[o] = pc[i[0]] + pz[i[1]]; });
    cpu::activate(py, py, y.numel(), act);
    return;
  }
  ONYX_CHECK(act.kind == cpu::Act::kNone && !ctx.has_input(3), "a fused activation or Z needs float32");
  dispatch<FloatTypes>(x.dtype(), "Conv", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    with_compute_buffers<T, C>(ctx, 2, [&](const C* px, const C* pw, const C* pb, C* py) {
      conv_forward<C>(px, pw, pb, py, s, g);
    });
  });
}

int64_t spatial_size(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// conv(x - x_zero_point, w - w_zero_point) for uint8/int8 x and w, with x's zero point per
// tensor and w's per tensor or per output channel; inputs x, x_zero_point, w, w_zero_point
// are at the given indices. Products of 8-bit values summed in double are exact (so equal
// to the int32 sum) well past any realistic kernel size.
std::vector<double> conv_integer_sums(KernelContext& ctx, size_t ix, size_t ixz, size_t iw, size_t iwz,
                                      ConvShapes& s) {
  const Tensor& x = ctx.input(ix);
  const Tensor& w = ctx.input(iw);
  s = conv_shapes(ctx, x.shape(), w.shape(), false);
  s.out = window_output_dims(s.w, spatial(x.shape().dims()));
  Im2ColGeometry g = make_geometry(s.w, spatial(x.shape().dims()), s.out);
  auto widen = [](const Tensor& t, const char* what) {
    ONYX_CHECK(t.dtype() == DType::kUInt8 || t.dtype() == DType::kInt8, what, " must be uint8 or int8, got ",
               dtype_name(t.dtype()));
    std::vector<double> v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = t.get_as_double(static_cast<int64_t>(i));
    return v;
  };
  std::vector<double> xv = widen(x, "x"), wv = widen(w, "w");
  if (ctx.has_input(ixz)) {
    const Tensor& z = ctx.input(ixz);
    ONYX_CHECK(z.numel() == 1, "x_zero_point must be a scalar, got ", z.shape().str());
    double zp = widen(z, "x_zero_point")[0];
    for (double& v : xv) v -= zp;
  }
  if (ctx.has_input(iwz)) {
    const Tensor& z = ctx.input(iwz);
    ONYX_CHECK(z.numel() == 1 || (z.rank() == 1 && z.shape()[0] == s.m), "w_zero_point must be a scalar or [", s.m,
               "], got ", z.shape().str());
    std::vector<double> zp = widen(z, "w_zero_point");
    const int64_t per_m = s.m == 0 ? 0 : w.numel() / s.m;
    for (int64_t i = 0; i < w.numel(); ++i) wv[i] -= zp.size() == 1 ? zp[0] : zp[i / per_m];
  }
  std::vector<double> yv(static_cast<size_t>(s.n * s.m * spatial_size(s.out)));
  conv_forward<double>(xv.data(), wv.data(), nullptr, yv.data(), s, g);
  return yv;
}

// y = conv(x - x_zero_point, w - w_zero_point) in int32.
void conv_integer_kernel(KernelContext& ctx) {
  ConvShapes s;
  std::vector<double> yv = conv_integer_sums(ctx, 0, 2, 1, 3, s);
  int32_t* py = ctx.output(0).data<int32_t>();
  for (size_t i = 0; i < yv.size(); ++i) py[i] = static_cast<int32_t>(std::llround(yv[i]));
}

enum QLinearConvInput { kQx, kQxScale, kQxZero, kQw, kQwScale, kQwZero, kQyScale, kQyZero, kQBias };

void infer_qlinear_conv(InferContext& ctx) {
  DType y = ctx.has_input(kQyZero) ? ctx.input_dtype(kQyZero) : ctx.input_dtype(kQx);
  ONYX_CHECK(y == DType::kUInt8 || y == DType::kInt8, "y_zero_point must be uint8 or int8, got ", dtype_name(y));
  infer_conv_like(ctx, y, false, kQw);
}

// y = saturate(rint((conv + B) * (x_scale * w_scale / y_scale)) + y_zero_point), with B
// the int32 bias and w_scale per tensor or per output channel; the multiplier in the
// scales' type and its product in double, as the ONNX reference computes it.
void qlinear_conv_kernel(KernelContext& ctx) {
  ConvShapes s;
  std::vector<double> acc = conv_integer_sums(ctx, kQx, kQxZero, kQw, kQwZero, s);
  auto scalar = [&](size_t i, const char* what) {
    const Tensor& t = ctx.input(i);
    ONYX_CHECK(t.numel() == 1, what, " must be a scalar, got shape ", t.shape().str());
    return scale_values(t, what)[0];
  };
  const double sx = scalar(kQxScale, "x_scale"), sy = scalar(kQyScale, "y_scale");
  const Tensor& ws = ctx.input(kQwScale);
  std::vector<double> sw = scale_values(ws, "w_scale");
  ONYX_CHECK(sw.size() == 1 || (ws.rank() == 1 && ws.shape()[0] == s.m), "w_scale must be a scalar or [", s.m,
             "], got ", ws.shape().str());
  const DType st = ctx.input(kQxScale).dtype();
  std::vector<double> mult(static_cast<size_t>(s.m));
  for (int64_t m = 0; m < s.m; ++m)
    mult[m] = round_to_dtype(st, round_to_dtype(st, sx * sw[sw.size() == 1 ? 0 : m]) / sy);
  std::vector<int64_t> bias(static_cast<size_t>(s.m), 0);
  if (ctx.has_input(kQBias)) {
    const Tensor& b = ctx.input(kQBias);
    ONYX_CHECK(b.dtype() == DType::kInt32, "B must be int32, got ", dtype_name(b.dtype()));
    check_bias(ctx, kQBias, s.m);
    for (int64_t m = 0; m < s.m; ++m) bias[m] = b.get_as_int64(m);
  }
  Tensor& y = ctx.output(0);
  int64_t zy = 0;
  if (ctx.has_input(kQyZero)) {
    const Tensor& z = ctx.input(kQyZero);
    ONYX_CHECK(z.numel() == 1, "y_zero_point must be a scalar, got shape ", z.shape().str());
    zy = z.get_as_int64(0);
  }
  const QuantRange r = quant_range(y.dtype(), "QLinearConv");
  const int64_t plane = std::max<int64_t>(spatial_size(s.out), 1);
  dispatch<TypeList<int8_t, uint8_t>>(y.dtype(), "QLinearConv y", [&](auto yt) {
    using Y = typename decltype(yt)::type;
    Y* py = y.data<Y>();
    for (size_t i = 0; i < acc.size(); ++i) {
      const int64_t m = static_cast<int64_t>(i) / plane % s.m;
      py[i] = static_cast<Y>(quantize_scaled((acc[i] + static_cast<double>(bias[m])) * mult[m], zy, r));
    }
  });
}

void conv_transpose_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  ONYX_CHECK(w.dtype() == x.dtype(), "W has dtype ", dtype_name(w.dtype()), ", X ", dtype_name(x.dtype()));
  ConvShapes s = conv_shapes(ctx, x.shape(), w.shape(), true);
  const std::vector<int64_t> in = spatial(x.shape().dims());
  conv_transpose_geometry(ctx, s, in);
  check_bias(ctx, 2, s.m);
  // col2im scatters from the input grid into the output image.
  Im2ColGeometry g = make_geometry(s.w, s.out, in);
  dispatch<FloatTypes>(x.dtype(), "ConvTranspose", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    with_compute_buffers<T, C>(ctx, 2, [&](const C* px, const C* pw, const C* pb, C* py) {
      const int64_t in_size = g.grid_size(), out_size = g.image_size(), K = g.kernel_size();
      const int64_t cg = s.c / s.group, mg = s.m / s.group;
      std::fill(py, py + s.n * s.m * out_size, C(0));
      std::vector<C> col(static_cast<size_t>(mg * K * in_size));
      for (int64_t n = 0; n < s.n; ++n)
        for (int64_t gi = 0; gi < s.group; ++gi) {
          // col[mg*K, in] = W_g^T [mg*K, cg] * X_g [cg, in]
          gemm<C>(true, false, mg * K, in_size, cg, pw + gi * cg * mg * K, mg * K, px + (n * s.c + gi * cg) * in_size,
                  in_size, col.data(), in_size);
          col2im(col.data(), mg, g, py + (n * s.m + gi * mg) * out_size);
        }
      if (pb)
        for (int64_t n = 0; n < s.n; ++n)
          for (int64_t m = 0; m < s.m; ++m) {
            C* p = py + (n * s.m + m) * out_size;
            for (int64_t i = 0; i < out_size; ++i) p[i] += pb[m];
          }
    });
  });
}

// Col2Im: input [N, C*prod(block), L] -> [N, C, image...].
void infer_col2im(InferContext& ctx) {
  const PartialShape& xs = ctx.input_shape(0);
  const Tensor* image = ctx.input_value(1);
  const Tensor* block = ctx.input_value(2);
  if (!xs.fully_known() || !image || !block) {
    const PartialShape& is = ctx.input_shape(1);
    if (is.fully_known() && is.dims.size() == 1)
      ctx.set_output(0, ctx.input_dtype(0), PartialShape::of_rank(2 + is.dims[0]));
    else
      ctx.set_output(0, ctx.input_dtype(0), PartialShape());
    return;
  }
  Shape x = xs.to_shape();
  std::vector<int64_t> img = input_ints(ctx, 1), blk = input_ints(ctx, 2);
  ONYX_CHECK(x.rank() == 3, "Col2Im input must be [N, C*prod(block_shape), L], got ", x.str());
  ONYX_CHECK(img.size() == blk.size() && !img.empty(), "image_shape has ", img.size(), " entries, block_shape ",
             blk.size());
  Window w = read_window(ctx, blk.size(), blk);
  // The divisor: each block dim is positive (read_window), so the checked product is too.
  const int64_t kprod = checked_product(blk, "prod(block_shape)");
  ONYX_CHECK(kprod > 0 && x[1] % kprod == 0, "Col2Im input dim 1 (", x[1], ") is not a multiple of prod(block_shape) = ", kprod);
  for (int64_t v : img) ONYX_CHECK(v > 0, "image_shape entries must be positive, got ", Shape(img).str());
  std::vector<int64_t> grid = window_output_dims(w, img);
  const int64_t l = checked_product(grid, "the number of blocks");
  ONYX_CHECK(x[2] == l, "Col2Im input has ", x[2], " blocks, but image ", Shape(img).str(), " with block ",
             Shape(blk).str(), " gives ", l);
  std::vector<int64_t> dims{x[0], x[1] / kprod};
  dims.insert(dims.end(), img.begin(), img.end());
  ctx.set_output(0, ctx.input_dtype(0), Shape(dims));
}

void col2im_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> img = ctx.input(1).to_int64_vector(), blk = ctx.input(2).to_int64_vector();
  Window w = read_window(ctx, blk.size(), blk);
  Im2ColGeometry g = make_geometry(w, img, window_output_dims(w, img));
  Tensor& y = ctx.output(0);
  const int64_t n = x.shape()[0], c = y.shape()[1];
  dispatch<FloatTypes>(x.dtype(), "Col2Im", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    std::vector<C> xv = to_compute<C>(x), yv(static_cast<size_t>(y.numel()), C(0));
    const int64_t per_in = x.numel() / std::max<int64_t>(n, 1), per_out = y.numel() / std::max<int64_t>(n, 1);
    for (int64_t b = 0; b < n; ++b) col2im(xv.data() + b * per_in, c, g, yv.data() + b * per_out);
    T* py = y.data<T>();
    for (size_t i = 0; i < yv.size(); ++i) py[i] = static_cast<T>(yv[i]);
  });
}

// DeformConv: im2col where every kernel tap samples the image (N-linearly,
// zero outside) at its regular position plus a learned offset, times a mask.
template <class C>
void deform_conv(const C* x, const C* w, const C* offset, const C* mask, const C* bias, C* y, const ConvShapes& s,
                 const Im2ColGeometry& g, int64_t offset_groups) {
  const size_t nd = g.grid.size();
  const int64_t in_size = g.image_size(), out_size = g.grid_size(), K = g.kernel_size();
  const int64_t cg = s.c / s.group, mg = s.m / s.group, c_per_og = s.c / offset_groups;
  std::vector<C> col(static_cast<size_t>(s.c * K * out_size));
  std::vector<int64_t> kidx(nd), oidx(nd), base(nd);
  std::vector<double> pos(nd);
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t c = 0; c < s.c; ++c) {
      const int64_t og = c / c_per_og;
      const C* img = x + (n * s.c + c) * in_size;
      std::fill(kidx.begin(), kidx.end(), 0);
      for (int64_t k = 0; k < K; ++k) {
        const C* off = offset + ((n * offset_groups + og) * K + k) * static_cast<int64_t>(nd) * out_size;
        const C* msk = mask ? mask + ((n * offset_groups + og) * K + k) * out_size : nullptr;
        C* dst = col.data() + (c * K + k) * out_size;
        std::fill(oidx.begin(), oidx.end(), 0);
        for (int64_t p = 0; p < out_size; ++p) {
          for (size_t d = 0; d < nd; ++d) {
            pos[d] = static_cast<double>(oidx[d] * g.strides[d] - g.pad_begin[d] + kidx[d] * g.dilations[d]) +
                     static_cast<double>(off[d * out_size + p]);
            base[d] = static_cast<int64_t>(std::floor(pos[d]));
          }
          // Sum over the 2^nd corners around pos; outside corners contribute 0.
          double acc = 0;
          for (int64_t corner = 0; corner < (int64_t{1} << nd); ++corner) {
            double wgt = 1;
            int64_t flat = 0;
            bool inside = true;
            for (size_t d = 0; d < nd; ++d) {
              const int64_t hi = (corner >> (nd - 1 - d)) & 1, at = base[d] + hi;
              const double frac = pos[d] - static_cast<double>(base[d]);
              wgt *= hi ? frac : 1 - frac;
              inside = inside && at >= 0 && at < g.image[d];
              flat = flat * g.image[d] + at;
            }
            if (inside && wgt != 0) acc += wgt * static_cast<double>(img[flat]);
          }
          dst[p] = static_cast<C>(msk ? acc * static_cast<double>(msk[p]) : acc);
          for (size_t d = nd; d-- > 0;) {
            if (++oidx[d] < g.grid[d]) break;
            oidx[d] = 0;
          }
        }
        for (size_t d = nd; d-- > 0;) {
          if (++kidx[d] < g.kernel[d]) break;
          kidx[d] = 0;
        }
      }
    }
    for (int64_t gi = 0; gi < s.group; ++gi)
      gemm<C>(false, false, mg, out_size, cg * K, w + gi * mg * cg * K, cg * K, col.data() + gi * cg * K * out_size,
              out_size, y + (n * s.m + gi * mg) * out_size, out_size);
  }
  if (bias)
    for (int64_t n = 0; n < s.n; ++n)
      for (int64_t m = 0; m < s.m; ++m)
        for (int64_t i = 0; i < out_size; ++i) y[(n * s.m + m) * out_size + i] += bias[m];
}

void deform_conv_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Tensor& off = ctx.input(2);
  ConvShapes s = conv_shapes(ctx, x.shape(), w.shape(), false);
  s.out = window_output_dims(s.w, spatial(x.shape().dims()));
  check_bias(ctx, 3, s.m);
  const int64_t og = ctx.attr_int("offset_group", 1);
  const size_t nd = s.w.nd;
  ONYX_CHECK(og > 0 && s.c % og == 0, "offset_group ", og, " must divide the ", s.c, " input channels");
  int64_t K = 1;
  for (int64_t k : s.w.kernel) K *= k;
  std::vector<int64_t> want{s.n, og * K * static_cast<int64_t>(nd)};
  want.insert(want.end(), s.out.begin(), s.out.end());
  ONYX_CHECK(off.shape() == Shape(want), "offset must have shape ", Shape(want).str(), ", got ", off.shape().str());
  const Tensor* mask = ctx.has_input(4) ? &ctx.input(4) : nullptr;
  if (mask) {
    want[1] = og * K;
    ONYX_CHECK(mask->shape() == Shape(want), "mask must have shape ", Shape(want).str(), ", got ",
               mask->shape().str());
  }
  Im2ColGeometry g = make_geometry(s.w, spatial(x.shape().dims()), s.out);
  dispatch<FloatTypes>(x.dtype(), "DeformConv", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    std::vector<C> offv = to_compute<C>(off), maskv = mask ? to_compute<C>(*mask) : std::vector<C>();
    with_compute_buffers<T, C>(ctx, 3, [&](const C* px, const C* pw, const C* pb, C* py) {
      deform_conv<C>(px, pw, offv.data(), mask ? maskv.data() : nullptr, pb, py, s, g, og);
    });
  });
}

}  // namespace

void register_conv_pool_ops(OpRegistry& r) {
  r.add(onnx_op("Conv", 1, [](InferContext& ctx) { infer_conv_like(ctx, ctx.input_dtype(0), false); },
              conv_kernel));
  // Conv with the activation after it (passes/fuse_cpu.h): Conv's attributes plus activation,
  // alpha and beta (ops/fused_activation.h).
  r.add(domain_op("onyx", "FusedConv", 1,
                  [](InferContext& ctx) {
                    parse_activation_attrs(ctx);
                    infer_conv_like(ctx, ctx.input_dtype(0), false);
                    if (ctx.has_input(3))  // Z, added as the Add it replaced did
                      ctx.set_output(0, ctx.input_dtype(0), broadcast_shapes(ctx.outputs()[0].shape, ctx.input_shape(3)));
                  },
                  conv_kernel));
  r.add(onnx_op("ConvInteger", 10, [](InferContext& ctx) { infer_conv_like(ctx, DType::kInt32, false); },
              conv_integer_kernel));
  r.add(onnx_op("QLinearConv", 10, infer_qlinear_conv, qlinear_conv_kernel));
  r.add(onnx_op("ConvTranspose", 1, [](InferContext& ctx) { infer_conv_like(ctx, ctx.input_dtype(0), true); },
              conv_transpose_kernel));
  r.add(onnx_op("DeformConv", 19, [](InferContext& ctx) { infer_conv_like(ctx, ctx.input_dtype(0), false); },
              deform_conv_kernel));
  r.add(onnx_op("Col2Im", 18, infer_col2im, col2im_kernel).reads_values({1, 2}));
  register_pool_ops(r);
}

}  // namespace onyx
