// Shared geometry for the sliding-window ops (Conv, pools, ConvTranspose, Col2Im):
// attribute parsing, output-size rules and im2col / col2im.
#pragma once

#include <string>
#include <vector>

#include "ops/common.h"

namespace onyx {

// The window attributes of one node, for `nd` spatial dimensions.
struct Window {
  size_t nd = 0;
  std::vector<int64_t> kernel, strides, dilations;
  std::vector<int64_t> pads;  // [begin_0..begin_nd-1, end_0..end_nd-1]
  std::string auto_pad = "NOTSET";

  int64_t span(size_t d) const {
    return checked_add(checked_mul(dilations[d], kernel[d] - 1, "the window's span"), 1, "the window's span");
  }
};

// Reads strides, dilations, pads and auto_pad (each checked for length and sign).
// `kernel` comes from kernel_shape or from the weights, as the op decides.
Window read_window(const NodeView& node, size_t nd, std::vector<int64_t> kernel, bool has_dilations = true);

// Output spatial sizes for a forward window op (Conv, pools) and, for auto_pad,
// the pads it implies (written into w.pads). Unknown input dims (< 0) give
// unknown output dims. Throws when the window does not fit.
std::vector<int64_t> window_output_dims(Window& w, const std::vector<int64_t>& in, bool ceil_mode = false);

// The sliding-window layout used by im2col/col2im: `grid` positions (the conv
// output, or the ConvTranspose input), each reading the image at
// grid * stride - pad_begin + k * dilation.
struct Im2ColGeometry {
  std::vector<int64_t> image, grid, kernel, strides, dilations, pad_begin;
  int64_t image_size() const;
  int64_t grid_size() const;
  int64_t kernel_size() const;
  // Rows of the grid: all grid dims but the last (1 for 1-D).
  int64_t grid_rows() const;
  int64_t grid_cols() const { return grid.empty() ? 1 : grid.back(); }
};

// col[(c*K + k) * ldcol + (p - row0*cols)] = image[c][...] (0 outside), for
// channels [0, channels) and the grid positions of rows [row0, row1).
template <class C>
void im2col(const C* image, int64_t channels, const Im2ColGeometry& g, int64_t row0, int64_t row1, C* col,
            int64_t ldcol);

// image[c][...] += col[(c*K + k) * grid_size + p] for every in-range target.
template <class C>
void col2im(const C* col, int64_t channels, const Im2ColGeometry& g, C* image);

// Copies a tensor of any float dtype into a buffer of compute type C.
template <class C>
std::vector<C> to_compute(const Tensor& t);

// Registration of the pooling ops (pool.cpp) and GridSample/AffineGrid
// (grid_sample.cpp); called from the family registration functions.
void register_pool_ops(OpRegistry& r);
void register_grid_sample_ops(OpRegistry& r);

}  // namespace onyx
