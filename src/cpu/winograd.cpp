// Winograd F(2x2, 3x3) (winograd.h). Per Highway target, the two transforms, each vectorized
// across a row of tiles: tile tx of a tile row reads padded columns 2 tx .. 2 tx + 3, so two
// de-interleaving loads give a vector of tiles' columns 0 and 1, two more columns 2 and 3.
// The image is copied once zero-padded, wide enough that a row's last vector reads zeros.
// Transformed tiles are stored by tile-row-major position t, so the 16 products read them
// in place (cpu::gemm) as [cin x tiles] rows; tile rows are processed in blocks whose
// transformed tiles and products stay in L2.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/winograd.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/thread_pool.h"
#include "cpu/vec_math-inl.h"
#include "cpu/winograd.h"
#include "onyx/error.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace onyx::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// F(2x2, 3x3)'s input transform of one channel: tile rows [0, rows) of tw tiles, tile
// (ty, tx) the padded rows 2 ty .. 2 ty + 3 (wq floats apart), columns 2 tx .. 2 tx + 3:
// v[xi * xstride + ty * tw + tx] = (B^T d B)[xi]. A row's last vector spills past tx = tw into
// the next row's positions, which that row then overwrites (the last row's spill, finite
// values, lands in columns the products compute and the output transform drops).
template <class D>
void InputTransform2(D d, const float* pad, int64_t wq, int64_t rows, int64_t tw, float* v, int64_t xstride) {
  using V = hn::Vec<D>;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t ty = 0; ty < rows; ++ty) {
    const float* row = pad + 2 * ty * wq;
    float* out = v + ty * tw;
    for (int64_t tx = 0; tx < tw; tx += L) {
      V t[4][4];
      HWY_UNROLL(4)
      for (int r = 0; r < 4; ++r) {
        V d0, d1, d2, d3;
        hn::LoadInterleaved2(d, row + r * wq + 2 * tx, d0, d1);
        hn::LoadInterleaved2(d, row + r * wq + 2 * tx + 2, d2, d3);
        t[r][0] = hn::Sub(d0, d2);  // d B, row by row
        t[r][1] = hn::Add(d1, d2);
        t[r][2] = hn::Sub(d2, d1);
        t[r][3] = hn::Sub(d1, d3);
      }
      HWY_UNROLL(4)
      for (int j = 0; j < 4; ++j) {  // B^T (d B), column by column
        hn::StoreU(hn::Sub(t[0][j], t[2][j]), d, out + (0 + j) * xstride + tx);
        hn::StoreU(hn::Add(t[1][j], t[2][j]), d, out + (4 + j) * xstride + tx);
        hn::StoreU(hn::Sub(t[2][j], t[1][j]), d, out + (8 + j) * xstride + tx);
        hn::StoreU(hn::Sub(t[1][j], t[3][j]), d, out + (12 + j) * xstride + tx);
      }
    }
  }
}

// B^T x for F(4x4, 3x3)'s points (0, 1, -1, 2, -2, infinity), on six vectors.
template <class V>
HWY_INLINE void BT6(const V& d0, const V& d1, const V& d2, const V& d3, const V& d4, const V& d5, V* t, V four,
                    V five, V two) {
  const V a = hn::NegMulAdd(four, d2, d4), b = hn::NegMulAdd(four, d1, d3);  // d4 - 4 d2, d3 - 4 d1
  const V c = hn::Sub(d4, d2), e = hn::Mul(two, hn::Sub(d3, d1));
  t[0] = hn::MulAdd(four, d0, hn::NegMulAdd(five, d2, d4));  // 4 d0 - 5 d2 + d4
  t[1] = hn::Add(a, b);
  t[2] = hn::Sub(a, b);
  t[3] = hn::Add(c, e);
  t[4] = hn::Sub(c, e);
  t[5] = hn::MulAdd(four, d1, hn::NegMulAdd(five, d3, d5));  // 4 d1 - 5 d3 + d5
}

// F(4x4, 3x3)'s input transform of one channel, as InputTransform2 with 6 x 6 tiles 4 apart.
template <class D>
void InputTransform4(D d, const float* pad, int64_t wq, int64_t rows, int64_t tw, float* v, int64_t xstride) {
  using V = hn::Vec<D>;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const V four = hn::Set(d, 4.f), five = hn::Set(d, 5.f), two = hn::Set(d, 2.f);
  for (int64_t ty = 0; ty < rows; ++ty) {
    const float* row = pad + 4 * ty * wq;
    float* out = v + ty * tw;
    for (int64_t tx = 0; tx < tw; tx += L) {
      V t[6][6];
      for (int r = 0; r < 6; ++r) {
        V d0, d1, d2, d3, d4, d5, unused6, unused7;
        hn::LoadInterleaved4(d, row + r * wq + 4 * tx, d0, d1, d2, d3);
        hn::LoadInterleaved4(d, row + r * wq + 4 * tx + 4, d4, d5, unused6, unused7);
        BT6(d0, d1, d2, d3, d4, d5, t[r], four, five, two);  // d B, row by row
      }
      for (int j = 0; j < 6; ++j) {  // B^T (d B), column by column
        V col[6];
        BT6(t[0][j], t[1][j], t[2][j], t[3][j], t[4][j], t[5][j], col, four, five, two);
        for (int i = 0; i < 6; ++i) hn::StoreU(col[i], d, out + (i * 6 + j) * xstride + tx);
      }
    }
  }
}

// Stores the m x m outputs of a vector of tiles (yv[i][j]: output row i, column j of each
// tile, tile k's at columns x + m k) into rows y0 + i ow, i < rows, with z's (rows z0 + i ow)
// added and the activation applied. Tiles whose outputs lie inside the row are stored (and z
// read) interleaved in place; the row's last ones go through a staging row.
template <int M, class D, class V, class F>
HWY_INLINE void StoreTileRows(D d, V (&yv)[M][M], float* y0, const float* z0, int64_t ow, int64_t x, int64_t rows,
                              const F& finish) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  if (x + M * L <= ow) {
    for (int64_t i = 0; i < rows; ++i) {
      V o[M];
      for (int j = 0; j < M; ++j) o[j] = yv[i][j];
      if (z0) {
        V zv[4];
        if constexpr (M == 2) hn::LoadInterleaved2(d, z0 + i * ow + x, zv[0], zv[1]);
        else hn::LoadInterleaved4(d, z0 + i * ow + x, zv[0], zv[1], zv[2], zv[3]);
        for (int j = 0; j < M; ++j) o[j] = hn::Add(o[j], zv[j]);
      }
      for (int j = 0; j < M; ++j) o[j] = finish(o[j]);
      if constexpr (M == 2) hn::StoreInterleaved2(o[0], o[1], d, y0 + i * ow + x);
      else hn::StoreInterleaved4(o[0], o[1], o[2], o[3], d, y0 + i * ow + x);
    }
    return;
  }
  HWY_ALIGN float stage[4 * HWY_MAX_BYTES / sizeof(float)];
  const int64_t rem = ow - x;
  for (int64_t i = 0; i < rows; ++i) {
    if constexpr (M == 2) hn::StoreInterleaved2(yv[i][0], yv[i][1], d, stage);
    else hn::StoreInterleaved4(yv[i][0], yv[i][1], yv[i][2], yv[i][3], d, stage);
    if (z0)
      for (int64_t q = 0; q < rem; ++q) stage[q] += z0[i * ow + x + q];
    for (int64_t q = 0; q < M * L; q += L) hn::Store(finish(hn::Load(d, stage + q)), d, stage + q);
    std::memcpy(y0 + i * ow + x, stage, rem * sizeof(float));
  }
}

// A^T x for F(4x4, 3x3) on six vectors: four.
template <class V>
HWY_INLINE void AT6(const V& m0, const V& m1, const V& m2, const V& m3, const V& m4, const V& m5, V* o, V two,
                    V four, V eight) {
  const V p = hn::Add(m1, m2), q = hn::Sub(m1, m2), r = hn::Add(m3, m4), s = hn::Sub(m3, m4);
  o[0] = hn::Add(hn::Add(m0, p), r);
  o[1] = hn::MulAdd(two, s, q);
  o[2] = hn::MulAdd(four, r, p);
  o[3] = hn::Add(hn::MulAdd(eight, s, q), m5);
}

// Output channels [o0, o1) from the products m[xi * xstride + o * ldm + t] of tile rows
// [ty0, ty1): y[o, M ty + i, M tx + j] = act((A^T P A)[i][j] + bias[o] + z[o, ...]), rows and
// columns past oh, ow dropped. y and z point at image planes of oh x ow floats.
template <int M, class D>
void OutputTransformRows(D d, const float* m, int64_t ldm, int64_t xstride, int64_t o0, int64_t o1, int64_t ty0,
                         int64_t ty1, int64_t tw, int64_t oh, int64_t ow, const float* bias, const float* z, float* y,
                         const Activation& act) {
  using V = hn::Vec<D>;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const V zero = hn::Zero(d), two = hn::Set(d, 2.f), four = hn::Set(d, 4.f), eight = hn::Set(d, 8.f);
  auto finish = [&](V val) {
    if (act.kind == Act::kRelu) return hn::Max(val, zero);
    if (act.kind == Act::kNone) return val;
    return Activate(d, val, act);
  };
  for (int64_t o = o0; o < o1; ++o) {
    const float* mo = m + o * ldm;
    const V b = hn::Set(d, bias ? bias[o] : 0.f);
    float* yo = y + o * oh * ow;
    const float* zo = z ? z + o * oh * ow : nullptr;
    for (int64_t ty = ty0; ty < ty1; ++ty) {
      const float* in = mo + (ty - ty0) * tw;
      const int64_t rows = std::min<int64_t>(M, oh - M * ty);  // the tile's output rows inside
      float* yr = yo + M * ty * ow;
      const float* zr = zo ? zo + M * ty * ow : nullptr;
      for (int64_t tx = 0; tx < tw; tx += L) {
        V yv[M][M];
        if constexpr (M == 2) {
          V s0[4], s1[4];
          HWY_UNROLL(4)
          for (int j = 0; j < 4; ++j) {  // A^T P, column by column
            const V m0 = hn::LoadU(d, in + (0 + j) * xstride + tx), m1 = hn::LoadU(d, in + (4 + j) * xstride + tx);
            const V m2 = hn::LoadU(d, in + (8 + j) * xstride + tx), m3 = hn::LoadU(d, in + (12 + j) * xstride + tx);
            s0[j] = hn::Add(hn::Add(m0, m1), m2);
            s1[j] = hn::Sub(hn::Sub(m1, m2), m3);
          }
          // (A^T P) A, the bias added to every output.
          yv[0][0] = hn::Add(hn::Add(hn::Add(s0[0], s0[1]), s0[2]), b);
          yv[0][1] = hn::Add(hn::Sub(hn::Sub(s0[1], s0[2]), s0[3]), b);
          yv[1][0] = hn::Add(hn::Add(hn::Add(s1[0], s1[1]), s1[2]), b);
          yv[1][1] = hn::Add(hn::Sub(hn::Sub(s1[1], s1[2]), s1[3]), b);
        } else {
          V s[4][6];  // A^T P: 4 x 6
          for (int j = 0; j < 6; ++j) {
            V col[4];
            AT6(hn::LoadU(d, in + (0 + j) * xstride + tx), hn::LoadU(d, in + (6 + j) * xstride + tx),
                hn::LoadU(d, in + (12 + j) * xstride + tx), hn::LoadU(d, in + (18 + j) * xstride + tx),
                hn::LoadU(d, in + (24 + j) * xstride + tx), hn::LoadU(d, in + (30 + j) * xstride + tx), col, two, four,
                eight);
            for (int i = 0; i < 4; ++i) s[i][j] = col[i];
          }
          for (int i = 0; i < 4; ++i) {  // (A^T P) A, the bias added to every output
            AT6(s[i][0], s[i][1], s[i][2], s[i][3], s[i][4], s[i][5], yv[i], two, four, eight);
            for (int j = 0; j < 4; ++j) yv[i][j] = hn::Add(yv[i][j], b);
          }
        }
        StoreTileRows<M>(d, yv, yr, zr, ow, M * tx, rows, finish);
      }
    }
  }
}

// The transforms at the row's width: vectors of no more lanes than a row has tiles need
// (ResNet's 7 x 7 and 14 x 14 images: 4 and 7 tiles a row for F(2x2, 3x3)).
void InputTransformImpl(int tile, const float* pad, int64_t wq, int64_t rows, int64_t tw, float* v, int64_t xstride) {
  auto run = [&](auto d) {
    if (tile == 2) InputTransform2(d, pad, wq, rows, tw, v, xstride);
    else InputTransform4(d, pad, wq, rows, tw, v, xstride);
  };
  if (tw <= 4) run(hn::CappedTag<float, 4>());
  else if (tw <= 8) run(hn::CappedTag<float, 8>());
  else run(DF());
}

void OutputTransformImpl(int tile, const float* m, int64_t ldm, int64_t xstride, int64_t o0, int64_t o1, int64_t ty0,
                         int64_t ty1, int64_t tw, int64_t oh, int64_t ow, const float* bias, const float* z, float* y,
                         const Activation* act) {
  auto run = [&](auto d) {
    if (tile == 2) OutputTransformRows<2>(d, m, ldm, xstride, o0, o1, ty0, ty1, tw, oh, ow, bias, z, y, *act);
    else OutputTransformRows<4>(d, m, ldm, xstride, o0, o1, ty0, ty1, tw, oh, ow, bias, z, y, *act);
  };
  if (tw <= 4) run(hn::CappedTag<float, 4>());
  else if (tw <= 8) run(hn::CappedTag<float, 8>());
  else run(DF());
}

}  // namespace onyx::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace onyx::cpu {

HWY_EXPORT(InputTransformImpl);
HWY_EXPORT(OutputTransformImpl);

namespace {
int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }
// The transformed tiles and their products of one block of tile rows: about this many bytes
// (or the weights' size, if larger), so that both stay in L2 between the transforms and the
// products.
constexpr int64_t kBlockBytes = int64_t{1} << 20;
}  // namespace

int winograd_tile(int64_t cout, int64_t cin) {
  // Transformed weights grow 16/9 (F(2x2)) or 4 times (F(4x4)), and each block of tiles reads
  // them all: past 4 MiB (F(2x2) for 256 x 256 channels) the products wait on memory. ResNet-50's
  // 512-channel convolutions over 7 x 7 (16 tiles: 16 MiB of weights for 16 columns) measured
  // slower in the model than the direct product over 49 pixels; F(4x4) over 14 x 14 (16 tiles)
  // slower than F(2x2) (9 MiB of weights).
  if (cout < 32 || cin < 32 || cout * cin > int64_t{256} * 256) return 0;
  return cout * cin <= int64_t{128} * 128 ? 4 : 2;
}

void winograd_weights(const float* w, int64_t cout, int64_t cin, int tile, float* u) {
  ONYX_CHECK(tile == 2 || tile == 4, "Winograd output tiles are 2 x 2 or 4 x 4, not ", tile);
  // G (alpha x 3) of F(2x2, 3x3) (points 0, 1, -1, infinity) and F(4x4, 3x3) (0, 1, -1, 2, -2, infinity).
  static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  static const double G4[6][3] = {{1. / 4, 0, 0},           {-1. / 6, -1. / 6, -1. / 6}, {-1. / 6, 1. / 6, -1. / 6},
                                  {1. / 24, 1. / 12, 1. / 6}, {1. / 24, -1. / 12, 1. / 6}, {0, 0, 1}};
  const int alpha = tile + 2;
  auto G = [&](int i, int k) { return tile == 2 ? G2[i][k] : G4[i][k]; };
  const int64_t plane = cout * cin;
  parallel_for(cout, 1, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t c = 0; c < cin; ++c) {
        const float* g = w + (o * cin + c) * 9;
        double gg[6][3];  // G g
        for (int i = 0; i < alpha; ++i)
          for (int k = 0; k < 3; ++k) gg[i][k] = G(i, 0) * g[k] + G(i, 1) * g[3 + k] + G(i, 2) * g[6 + k];
        for (int i = 0; i < alpha; ++i)
          for (int j = 0; j < alpha; ++j)
            u[(i * alpha + j) * plane + o * cin + c] =
                static_cast<float>(gg[i][0] * G(j, 0) + gg[i][1] * G(j, 1) + gg[i][2] * G(j, 2));
      }
  });
}

void winograd_conv3x3(const WinogradConv3x3& a) {
  if (a.n <= 0 || a.cout <= 0 || a.oh <= 0 || a.ow <= 0) return;
  ONYX_CHECK(a.tile == 2 || a.tile == 4, "Winograd output tiles are 2 x 2 or 4 x 4, not ", a.tile);
  const int tile = a.tile, alpha = tile + 2;
  const int64_t nxi = alpha * alpha;  // transformed values a tile
  const int64_t cin = a.cin, cout = a.cout, ih = a.ih, iw = a.iw, oh = a.oh, ow = a.ow;
  const int64_t th = (oh + tile - 1) / tile, tw = (ow + tile - 1) / tile;
  // A padded row: columns up to where a vector of 16 tiles past the row's last reads
  // (tile round_up(tw, 16) + tile), zeros outside the image.
  const int64_t wq = tile * round_up(tw, kPanel) + tile;
  const int64_t per_row = nxi * (cin + cout) * tw * int64_t{sizeof(float)};
  // Each block reads all the transformed weights: blocks at least as large as those, so that
  // large weights (2.25-4 MiB in ResNet-50's 128- and 256-channel stages) are read once.
  const int64_t block_bytes = std::max(kBlockBytes, nxi * cin * cout * int64_t{sizeof(float)});
  int64_t rows_per_block = std::clamp<int64_t>(block_bytes / std::max<int64_t>(per_row, 1), 1, th);
  // With several threads, blocks of tile rows split over them, each block on one thread from
  // its input transform to its output transform, where there are rows for each thread: the
  // transforms and products of a block then stay in one core's caches (split within a block, by
  // channels for the transforms and by transformed matrix for the products, half of each
  // thread's reads came from the other core's writes). As many blocks as a whole number of
  // rounds over the threads needs, their rows differing by at most one.
  // (Not where the transformed weights outweigh the images: each thread of the spatial split
  // reads all of them. resnet50 at 2 threads, two cores sharing an L3: 38.6-39.5 -> 38.1-38.6 ms;
  // on two that share none, no change.)
  const int threads = parallelism();
  int64_t blocks = (th + rows_per_block - 1) / rows_per_block;
  const int64_t weight_bytes = nxi * cin * cout * int64_t{sizeof(float)};
  const int64_t image_bytes = a.n * (cin * ih * iw + cout * oh * ow) * int64_t{sizeof(float)};
  const bool spatial = threads > 1 && th >= threads && weight_bytes <= image_bytes;
  if (spatial) {
    blocks = (std::max<int64_t>(blocks, threads) + threads - 1) / threads * threads;
    blocks = std::min(blocks, th);
    rows_per_block = (th + blocks - 1) / blocks;
  }
  const int64_t max_count = rows_per_block * tw;
  // Positions per channel row: the tiles rounded up to the products' panels, plus the last
  // tile row's spill.
  int64_t ldv = round_up(max_count + kPanel, kPanel);
  if (ldv % 1024 == 0) ldv += kPanel;  // (rows 4 KiB apart would share L1 sets)
  // The transformed matrices (and products) one line more than a multiple of their size
  // apart: 16 or 36 streams a multiple of 4 KiB apart would share L1 sets.
  const int64_t vstride = cin * ldv + kPanel;
  const size_t v_size = static_cast<size_t>(nxi * vstride);
  const size_t m_size = static_cast<size_t>(nxi * (cout * ldv + kPanel) + kPanel);
  // The products read the transformed tiles in place, row ci at ci ldv.
  std::vector<int64_t> koff_buf(static_cast<size_t>(cin));
  for (int64_t c = 0; c < cin; ++c) koff_buf[c] = c * ldv;
  const int64_t* const koff = koff_buf.data();
  const int64_t in_size = ih * iw, out_size = oh * ow;
  // Tile rows [ty0, ty1) of image n, with v and m (v_size and m_size floats) for its transformed
  // tiles and products. Inside a task of the spatial split, its parallel_for calls run serially.
  auto run_block = [&](int64_t n, int64_t ty0, int64_t ty1, float* v, float* m) {
    const float* xn = a.x + n * cin * in_size;
    const int64_t count = (ty1 - ty0) * tw, cols = round_up(count, kPanel);
    const int64_t mstride = cout * cols + kPanel;
    // Per channel, the block's padded rows tile ty0 .. tile ty1 + 1 copied (padded row r holds
    // input row r - ph, column q input column q - pw, zeros outside), then transformed
    // while they are in L1.
    const int64_t hb = tile * (ty1 - ty0) + 2;
    // Channels per chunk of the transforms: each channel writes (or reads) nxi values per
    // tile, so a grain by tiles alone (4096 / count) kept ResNet-50's 64- and 128-channel
    // stages (56 and 49 tiles a block) on one thread.
    const int64_t grain = std::max<int64_t>(1, 8192 / (count * nxi + 1));
    parallel_for(cin, grain, [&](int64_t c0, int64_t c1) {
      thread_local std::vector<float> pad_buf;
      if (pad_buf.size() < static_cast<size_t>(hb * wq)) pad_buf.resize(hb * wq);
      float* const pad = pad_buf.data();
      const int64_t q0 = std::min(a.pw, wq), q1 = std::clamp<int64_t>(a.pw + iw, q0, wq);
      for (int64_t c = c0; c < c1; ++c) {
        const float* xc = xn + c * in_size;
        for (int64_t r = 0; r < hb; ++r) {
          float* row = pad + r * wq;
          const int64_t src = tile * ty0 + r - a.ph;
          if (src < 0 || src >= ih) {
            std::fill_n(row, wq, 0.f);
            continue;
          }
          std::fill_n(row, q0, 0.f);
          std::copy_n(xc + src * iw + (q0 - a.pw), q1 - q0, row + q0);
          std::fill_n(row + q1, wq - q1, 0.f);
        }
        HWY_DYNAMIC_DISPATCH(InputTransformImpl)(tile, pad, wq, ty1 - ty0, tw, v + c * ldv, vstride);
      }
    });
    // The products, independent: split over the pool, each on one thread.
    parallel_for(nxi, 1, [&](int64_t x0, int64_t x1) {
      for (int64_t xi = x0; xi < x1; ++xi)
        gemm_indirect(cout, cols, cin, a.u + xi * cout * cin, cin, v + xi * vstride, koff, m + xi * mstride, cols);
    });
    float* yn = a.y + n * cout * out_size;
    const float* zn = a.z ? a.z + n * cout * out_size : nullptr;
    parallel_for(cout, grain, [&](int64_t o0, int64_t o1) {
      HWY_DYNAMIC_DISPATCH(OutputTransformImpl)(tile, m, cols, mstride, o0, o1, ty0, ty1, tw, oh, ow, a.bias, zn, yn,
                                                &a.act);
    });
  };
  // This thread's buffers (a worker's own, named inside its task).
  auto buffers = [&](float*& v, float*& m) {
    thread_local std::vector<float> v_buf, m_buf;
    if (v_buf.size() < v_size) v_buf.resize(v_size);
    if (m_buf.size() < m_size) m_buf.resize(m_size);
    v = v_buf.data();
    m = m_buf.data();
  };
  // Block b's tile rows: split evenly over the threads' blocks; else rows_per_block each, the
  // last block what is left (at one thread, 64 channels over 56 x 56 measured 4% slower in
  // blocks of 3, 4, 3 and 4 tile rows than in 4, 4, 4 and 2).
  auto block_rows = [&](int64_t b, int64_t& ty0, int64_t& ty1) {
    ty0 = spatial ? b * th / blocks : b * rows_per_block;
    ty1 = spatial ? (b + 1) * th / blocks : std::min(th, ty0 + rows_per_block);
  };
  if (spatial) {
    parallel_for(a.n * blocks, 1, [&](int64_t t0, int64_t t1) {
      float *v = nullptr, *m = nullptr;
      buffers(v, m);
      for (int64_t t = t0; t < t1; ++t) {
        int64_t ty0 = 0, ty1 = 0;
        block_rows(t % blocks, ty0, ty1);
        run_block(t / blocks, ty0, ty1, v, m);
      }
    });
    return;
  }
  float *v = nullptr, *m = nullptr;
  buffers(v, m);
  for (int64_t n = 0; n < a.n; ++n)
    for (int64_t b = 0; b < blocks; ++b) {
      int64_t ty0 = 0, ty1 = 0;
      block_rows(b, ty0, ty1);
      run_block(n, ty0, ty1, v, m);
    }
}

}  // namespace onyx::cpu
#endif  // HWY_ONCE
