// A 3 x 3 float32 convolution (stride 1, dilation 1, one group) by Winograd's F(2x2, 3x3):
// each 2 x 2 block of outputs from the 4 x 4 input tile under it, as 16 independent products
// of the transformed weights [cout x cin] by the transformed tiles [cin x tiles], then a
// transform back. 16 multiplications a tile and channel pair where the direct convolution
// does 36: 2.25 times fewer, for transforms that only add.
//
//   U = G g G^T (4 x 4, at load), V = B^T d B (4 x 4 input tile d), Y = A^T (sum_c U . V) A,
//   G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1], B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],
//   A^T = [1 1 1 0; 0 1 -1 -1].
#pragma once

#include <cstdint>

#include "cpu/activation.h"

namespace onyx::cpu {

// The output tile (2: F(2x2, 3x3), 4: F(4x4, 3x3)) that a 3 x 3 convolution of cin -> cout
// channels is better run with by winograd_conv3x3, or 0: not by Winograd.
int winograd_tile(int64_t cout, int64_t cin);

// The transformed weights for output tiles of `tile` (alpha = tile + 2):
// u[(i * alpha + j) * cout * cin + co * cin + ci] = (G w[co, ci] G^T)[i][j] for w [cout, cin, 3, 3]
// (computed in double, rounded once). u holds alpha^2 cout cin floats.
void winograd_weights(const float* w, int64_t cout, int64_t cin, int tile, float* u);

struct WinogradConv3x3 {
  const float* x = nullptr;     // [n, cin, ih, iw]
  const float* u = nullptr;     // winograd_weights' layout for `tile`
  const float* bias = nullptr;  // [cout], or null
  const float* z = nullptr;     // [n, cout, oh, ow] added before the activation, or null
  float* y = nullptr;           // [n, cout, oh, ow]
  int64_t n = 0, cin = 0, cout = 0, ih = 0, iw = 0, oh = 0, ow = 0;
  int64_t ph = 0, pw = 0;  // the leading pads (>= 0); the trailing ones follow from oh, ow
  int tile = 2;  // outputs a tile a side: 2 or 4
  Activation act;
};

// y = act(conv3x3(x, w) + bias + z), split over the intra-op pool.
void winograd_conv3x3(const WinogradConv3x3& a);

}  // namespace onyx::cpu
