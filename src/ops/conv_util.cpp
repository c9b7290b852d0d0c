#include "ops/conv_util.h"

#include <algorithm>
#include <cstring>

#include "cpu/thread_pool.h"

namespace onyx {

Window read_window(const NodeView& node, size_t nd, std::vector<int64_t> kernel, bool has_dilations) {
  Window w;
  w.nd = nd;
  w.kernel = std::move(kernel);
  ONYX_CHECK(w.kernel.size() == nd, "kernel_shape has ", w.kernel.size(), " entries for ", nd, " spatial dims");
  for (int64_t k : w.kernel) ONYX_CHECK(k > 0, "kernel dimensions must be positive, got ", k);
  w.strides = node.attr_ints("strides", std::vector<int64_t>(nd, 1));
  w.dilations = has_dilations ? node.attr_ints("dilations", std::vector<int64_t>(nd, 1)) : std::vector<int64_t>(nd, 1);
  w.pads = node.attr_ints("pads", std::vector<int64_t>(2 * nd, 0));
  // Some exporters write an empty list for "default".
  if (w.strides.empty()) w.strides.assign(nd, 1);
  if (w.dilations.empty()) w.dilations.assign(nd, 1);
  if (w.pads.empty()) w.pads.assign(2 * nd, 0);
  ONYX_CHECK(w.strides.size() == nd, "strides has ", w.strides.size(), " entries for ", nd, " spatial dims");
  ONYX_CHECK(w.dilations.size() == nd, "dilations has ", w.dilations.size(), " entries for ", nd, " spatial dims");
  ONYX_CHECK(w.pads.size() == 2 * nd, "pads has ", w.pads.size(), " entries, expected ", 2 * nd);
  for (int64_t s : w.strides) ONYX_CHECK(s > 0, "strides must be positive, got ", s);
  for (int64_t d : w.dilations) ONYX_CHECK(d > 0, "dilations must be positive, got ", d);
  for (int64_t p : w.pads) ONYX_CHECK(p >= 0, "pads must be non-negative, got ", p);
  w.auto_pad = node.attr_string("auto_pad", "NOTSET");
  ONYX_CHECK(w.auto_pad == "NOTSET" || w.auto_pad == "VALID" || w.auto_pad == "SAME_UPPER" ||
                 w.auto_pad == "SAME_LOWER",
             "unknown auto_pad '", w.auto_pad, "'");
  return w;
}

std::vector<int64_t> window_output_dims(Window& w, const std::vector<int64_t>& in, bool ceil_mode) {
  ONYX_CHECK(in.size() == w.nd, "input has ", in.size(), " spatial dims, the window ", w.nd);
  std::vector<int64_t> out(w.nd, -1);
  for (size_t d = 0; d < w.nd; ++d) {
    if (in[d] < 0) continue;
    const int64_t s = w.strides[d], span = w.span(d);
    if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
      out[d] = checked_add(in[d], s - 1, "the output size") / s;
      int64_t total = std::max<int64_t>(
          0, checked_add(checked_mul(out[d] - 1, s, "the padded extent"), span - in[d], "the padded extent"));
      int64_t small = total / 2, big = total - small;
      w.pads[d] = w.auto_pad == "SAME_UPPER" ? small : big;
      w.pads[d + w.nd] = w.auto_pad == "SAME_UPPER" ? big : small;
      continue;
    }
    if (w.auto_pad == "VALID") w.pads[d] = w.pads[d + w.nd] = 0;
    const int64_t padded =
        checked_add(checked_add(in[d], w.pads[d], "the padded extent"), w.pads[d + w.nd], "the padded extent");
    ONYX_CHECK(padded >= span, "window of ", span, " (kernel ", w.kernel[d], ", dilation ", w.dilations[d],
               ") does not fit spatial dim ", d, " of size ", in[d], " with pads ", w.pads[d], "+", w.pads[d + w.nd]);
    int64_t o = ceil_mode ? checked_add(padded - span, s - 1, "the output size") / s + 1 : (padded - span) / s + 1;
    // A ceil-mode window must still start inside the input or its begin padding.
    if (ceil_mode && (o - 1) * s >= in[d] + w.pads[d]) --o;
    out[d] = o;
  }
  return out;
}

int64_t Im2ColGeometry::image_size() const {
  int64_t n = 1;
  for (int64_t v : image) n *= v;
  return n;
}
int64_t Im2ColGeometry::grid_size() const {
  int64_t n = 1;
  for (int64_t v : grid) n *= v;
  return n;
}
int64_t Im2ColGeometry::kernel_size() const {
  int64_t n = 1;
  for (int64_t v : kernel) n *= v;
  return n;
}
int64_t Im2ColGeometry::grid_rows() const {
  int64_t n = 1;
  for (size_t i = 0; i + 1 < grid.size(); ++i) n *= grid[i];
  return n;
}

namespace {

// Walks the (channel, kernel offset, grid row) triples of an im2col layout and
// calls fn(col_row_ptr_offset, image_row_offset or -1, grid_row) with the
// image coordinates of the last dimension handled by the caller.
template <class Fn>
void for_each_row(const Im2ColGeometry& g, int64_t channels, int64_t row0, int64_t row1, Fn fn) {
  // No rows (an empty grid dimension): nothing to visit, and no grid extent to divide by.
  if (row0 >= row1) return;
  const size_t nd = g.grid.size();
  const int64_t K = g.kernel_size();
  const int64_t img_size = g.image_size();
  std::vector<int64_t> kidx(nd, 0), ridx(nd, 0);
  for (int64_t c = 0; c < channels; ++c) {
    std::fill(kidx.begin(), kidx.end(), 0);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t crow = c * K + k;
      // Grid row multi-index for row0 (all dims but the last).
      int64_t r = row0;
      for (size_t d = nd - 1; d-- > 0;) {
        ridx[d] = r % g.grid[d];
        r /= g.grid[d];
      }
      for (int64_t row = row0; row < row1; ++row) {
        // Offset of this row's image line, or -1 when it lies in padding.
        int64_t off = 0;
        bool inside = true;
        for (size_t d = 0; d + 1 < nd; ++d) {
          int64_t pos = ridx[d] * g.strides[d] - g.pad_begin[d] + kidx[d] * g.dilations[d];
          if (pos < 0 || pos >= g.image[d]) {
            inside = false;
            break;
          }
          off = off * g.image[d] + pos;
        }
        fn(crow, row, inside ? c * img_size + off * g.image[nd - 1] : -1, kidx[nd - 1]);
        for (size_t d = nd - 1; d-- > 0;) {
          if (++ridx[d] < g.grid[d]) break;
          ridx[d] = 0;
        }
      }
      for (size_t d = nd; d-- > 0;) {
        if (++kidx[d] < g.kernel[d]) break;
        kidx[d] = 0;
      }
    }
  }
}

}  // namespace

template <class C>
void im2col(const C* image, int64_t channels, const Im2ColGeometry& g, int64_t row0, int64_t row1, C* col,
            int64_t ldcol) {
  const size_t nd = g.grid.size();
  const int64_t cols = g.grid_cols(), width = g.image[nd - 1];
  const int64_t s = g.strides[nd - 1], dil = g.dilations[nd - 1], pb = g.pad_begin[nd - 1];
  const int64_t K = g.kernel_size(), img_size = g.image_size();
  // Channels [c0, c1): their rows of col, c K .. c K + K - 1 each, are theirs alone.
  auto part = [&](int64_t c0, int64_t c1) {
    const C* base = image + c0 * img_size;
    C* out = col + c0 * K * ldcol;
    for_each_row(g, c1 - c0, row0, row1, [&](int64_t crow, int64_t row, int64_t img_off, int64_t kw) {
      C* dst = out + crow * ldcol + (row - row0) * cols;
      if (img_off < 0) {
        std::fill(dst, dst + cols, C(0));
        return;
      }
      const C* src = base + img_off;
      const int64_t shift = kw * dil - pb;
      if (s == 1) {
        // Columns x read image column x + shift: those inside the image copied, zeros around.
        const int64_t lo = std::clamp<int64_t>(-shift, 0, cols), hi = std::clamp<int64_t>(width - shift, lo, cols);
        std::fill(dst, dst + lo, C(0));
        if (hi > lo) std::memcpy(dst + lo, src + shift + lo, sizeof(C) * (hi - lo));
        std::fill(dst + hi, dst + cols, C(0));
        return;
      }
      for (int64_t x = 0; x < cols; ++x) {
        int64_t pos = x * s + shift;
        dst[x] = pos >= 0 && pos < width ? src[pos] : C(0);
      }
    });
  };
  // Over the intra-op pool from 32K values a chunk (ResNet-50's last 3 x 3 convolution, 4,608
  // rows of 49, had taken 11% of its time copying on one thread).
  const int64_t per_channel = std::max<int64_t>(1, K * (row1 - row0) * cols);
  cpu::parallel_for(channels, std::max<int64_t>(1, 32768 / per_channel), part);
}

template <class C>
void col2im(const C* col, int64_t channels, const Im2ColGeometry& g, C* image) {
  const size_t nd = g.grid.size();
  const int64_t cols = g.grid_cols(), width = g.image[nd - 1], ld = g.grid_size();
  const int64_t s = g.strides[nd - 1], dil = g.dilations[nd - 1], pb = g.pad_begin[nd - 1];
  for_each_row(g, channels, 0, g.grid_rows(), [&](int64_t crow, int64_t row, int64_t img_off, int64_t kw) {
    if (img_off < 0) return;
    const C* src = col + crow * ld + row * cols;
    C* dst = image + img_off;
    const int64_t shift = kw * dil - pb;
    for (int64_t x = 0; x < cols; ++x) {
      int64_t pos = x * s + shift;
      if (pos >= 0 && pos < width) dst[pos] += src[x];
    }
  });
}

template <class C>
std::vector<C> to_compute(const Tensor& t) {
  std::vector<C> v(static_cast<size_t>(t.numel()));
  dispatch<FloatTypes>(t.dtype(), "convert", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<C>(static_cast<compute_t<T>>(p[i]));
  });
  return v;
}

template void im2col<float>(const float*, int64_t, const Im2ColGeometry&, int64_t, int64_t, float*, int64_t);
template void im2col<double>(const double*, int64_t, const Im2ColGeometry&, int64_t, int64_t, double*, int64_t);
template void col2im<float>(const float*, int64_t, const Im2ColGeometry&, float*);
template void col2im<double>(const double*, int64_t, const Im2ColGeometry&, double*);
template std::vector<float> to_compute<float>(const Tensor&);
template std::vector<double> to_compute<double>(const Tensor&);

}  // namespace onyx
