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
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace onyx::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Channels [c0, c1) of padded planes (cplane floats apart, rows wq apart), tile rows
// [ty0, ty1) of tw tiles: v[xi * xstride + c * ldv + (ty - ty0) * tw + tx] = (B^T d B)[xi].
// A row's last vector spills past tx = tw into the next row's positions, which that row
// then overwrites (the last row's spill, finite values, lands in columns the products
// compute and the output transform drops). D: vectors of no more lanes
// than a row has tiles need (ResNet's 7 x 7 and 14 x 14 images: 4 and 7 tiles a row).
template <class D>
void InputTransformRows(D d, const float* padded, int64_t cplane, int64_t wq, int64_t c0, int64_t c1, int64_t ty0,
                        int64_t ty1, int64_t tw, float* v, int64_t ldv, int64_t xstride) {
  using V = hn::Vec<D>;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t c = c0; c < c1; ++c) {
    const float* pc = padded + c * cplane;
    float* vc = v + c * ldv;
    for (int64_t ty = ty0; ty < ty1; ++ty) {
      const float* row = pc + 2 * ty * wq;
      float* out = vc + (ty - ty0) * tw;
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
}

void InputTransformImpl(const float* padded, int64_t cplane, int64_t wq, int64_t c0, int64_t c1, int64_t ty0,
                        int64_t ty1, int64_t tw, float* v, int64_t ldv, int64_t xstride) {
  if (tw <= 4)
    InputTransformRows(hn::CappedTag<float, 4>(), padded, cplane, wq, c0, c1, ty0, ty1, tw, v, ldv, xstride);
  else if (tw <= 8)
    InputTransformRows(hn::CappedTag<float, 8>(), padded, cplane, wq, c0, c1, ty0, ty1, tw, v, ldv, xstride);
  else
    InputTransformRows(DF(), padded, cplane, wq, c0, c1, ty0, ty1, tw, v, ldv, xstride);
}

// Output channels [o0, o1) from the products m[xi * xstride + o * ldm + t] of tile rows
// [ty0, ty1): y[o, 2 ty + i, 2 tx + j] = act((A^T M A)[i][j] + bias[o] + z[o, ...]), rows and
// columns past oh, ow dropped. y and z point at image planes of oh x ow floats. A vector of
// tiles whose outputs lie inside the row is stored (and z read) interleaved in place; the
// row's last one goes through a staging row.
template <class D>
void OutputTransformRows(D d, const float* m, int64_t ldm, int64_t xstride, int64_t o0, int64_t o1, int64_t ty0,
                         int64_t ty1, int64_t tw, int64_t oh, int64_t ow, const float* bias, const float* z, float* y,
                         const Activation& act) {
  using V = hn::Vec<D>;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const V zero = hn::Zero(d);
  auto finish = [&](V val) {
    if (act.kind == Act::kRelu) return hn::Max(val, zero);
    if (act.kind == Act::kNone) return val;
    return Activate(d, val, act);
  };
  HWY_ALIGN float stage[4 * HWY_MAX_BYTES / sizeof(float)];
  for (int64_t o = o0; o < o1; ++o) {
    const float* mo = m + o * ldm;
    const V b = hn::Set(d, bias ? bias[o] : 0.f);
    float* yo = y + o * oh * ow;
    const float* zo = z ? z + o * oh * ow : nullptr;
    for (int64_t ty = ty0; ty < ty1; ++ty) {
      const float* in = mo + (ty - ty0) * tw;
      const bool two = 2 * ty + 1 < oh;  // the tile's second output row is inside
      float* y0 = yo + 2 * ty * ow;
      float* y1 = y0 + ow;
      const float* z0 = zo ? zo + 2 * ty * ow : nullptr;
      const float* z1 = zo ? z0 + ow : nullptr;
      for (int64_t tx = 0; tx < tw; tx += L) {
        V s0[4], s1[4];
        HWY_UNROLL(4)
        for (int j = 0; j < 4; ++j) {  // A^T M, column by column
          const V m0 = hn::LoadU(d, in + (0 + j) * xstride + tx), m1 = hn::LoadU(d, in + (4 + j) * xstride + tx);
          const V m2 = hn::LoadU(d, in + (8 + j) * xstride + tx), m3 = hn::LoadU(d, in + (12 + j) * xstride + tx);
          s0[j] = hn::Add(hn::Add(m0, m1), m2);
          s1[j] = hn::Sub(hn::Sub(m1, m2), m3);
        }
        // (A^T M) A, the bias added to every output.
        V y00 = hn::Add(hn::Add(hn::Add(s0[0], s0[1]), s0[2]), b);
        V y01 = hn::Add(hn::Sub(hn::Sub(s0[1], s0[2]), s0[3]), b);
        V y10 = hn::Add(hn::Add(hn::Add(s1[0], s1[1]), s1[2]), b);
        V y11 = hn::Add(hn::Sub(hn::Sub(s1[1], s1[2]), s1[3]), b);
        const int64_t x = 2 * tx;
        if (x + 2 * L <= ow) {
          if (zo) {
            V ze, zd;
            hn::LoadInterleaved2(d, z0 + x, ze, zd);
            y00 = hn::Add(y00, ze), y01 = hn::Add(y01, zd);
            if (two) {
              hn::LoadInterleaved2(d, z1 + x, ze, zd);
              y10 = hn::Add(y10, ze), y11 = hn::Add(y11, zd);
            }
          }
          hn::StoreInterleaved2(finish(y00), finish(y01), d, y0 + x);
          if (two) hn::StoreInterleaved2(finish(y10), finish(y11), d, y1 + x);
          continue;
        }
        // The row's last columns [x, ow): staged, z added and the activation applied there.
        const int64_t rem = ow - x;
        hn::StoreInterleaved2(y00, y01, d, stage);
        hn::StoreInterleaved2(y10, y11, d, stage + 2 * L);
        for (int i = 0; i < (two ? 2 : 1); ++i) {
          float* st = stage + i * 2 * L;
          const float* zr = i ? z1 : z0;
          if (zr)
            for (int64_t q = 0; q < rem; ++q) st[q] += zr[x + q];
          for (int64_t q = 0; q < 2 * L; q += L) hn::Store(finish(hn::Load(d, st + q)), d, st + q);
          std::memcpy((i ? y1 : y0) + x, st, rem * sizeof(float));
        }
      }
    }
  }
}

void OutputTransformImpl(const float* m, int64_t ldm, int64_t xstride, int64_t o0, int64_t o1, int64_t ty0,
                         int64_t ty1, int64_t tw, int64_t oh, int64_t ow, const float* bias, const float* z, float* y,
                         const Activation* act) {
  if (tw <= 4)
    OutputTransformRows(hn::CappedTag<float, 4>(), m, ldm, xstride, o0, o1, ty0, ty1, tw, oh, ow, bias, z, y, *act);
  else if (tw <= 8)
    OutputTransformRows(hn::CappedTag<float, 8>(), m, ldm, xstride, o0, o1, ty0, ty1, tw, oh, ow, bias, z, y, *act);
  else
    OutputTransformRows(DF(), m, ldm, xstride, o0, o1, ty0, ty1, tw, oh, ow, bias, z, y, *act);
}

}  // namespace onyx::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace onyx::cpu {

HWY_EXPORT(InputTransformImpl);
HWY_EXPORT(OutputTransformImpl);

namespace {
int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }
// The transformed tiles and their products of one block of tile rows: about this many bytes,
// so that both stay in L2 between the transforms and the products.
constexpr int64_t kBlockBytes = int64_t{1} << 20;
}  // namespace

bool winograd_pays(int64_t cout, int64_t cin) { return cout >= 32 && cin >= 32; }

void winograd_weights(const float* w, int64_t cout, int64_t cin, float* u) {
  static const double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  const int64_t plane = cout * cin;
  parallel_for(cout, 1, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t c = 0; c < cin; ++c) {
        const float* g = w + (o * cin + c) * 9;
        double gg[4][3];  // G g
        for (int i = 0; i < 4; ++i)
          for (int k = 0; k < 3; ++k) gg[i][k] = G[i][0] * g[k] + G[i][1] * g[3 + k] + G[i][2] * g[6 + k];
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j)
            u[(i * 4 + j) * plane + o * cin + c] =
                static_cast<float>(gg[i][0] * G[j][0] + gg[i][1] * G[j][1] + gg[i][2] * G[j][2]);
      }
  });
}

void winograd_conv3x3(const WinogradConv3x3& a) {
  if (a.n <= 0 || a.cout <= 0 || a.oh <= 0 || a.ow <= 0) return;
  const int64_t cin = a.cin, cout = a.cout, ih = a.ih, iw = a.iw, oh = a.oh, ow = a.ow;
  const int64_t th = (oh + 1) / 2, tw = (ow + 1) / 2;
  // A padded row: columns up to where a vector of 16 tiles past the row's last reads
  // (2 round_up(tw, 16) + 2), zeros outside the image.
  const int64_t wq = 2 * round_up(tw, kPanel) + 2;
  const int64_t per_row = 16 * (cin + cout) * tw * int64_t{sizeof(float)};
  const int64_t rows_per_block = std::clamp<int64_t>(kBlockBytes / std::max<int64_t>(per_row, 1), 1, th);
  const int64_t max_count = rows_per_block * tw;
  // Positions per channel row: the tiles rounded up to the products' panels, plus the last
  // tile row's spill.
  int64_t ldv = round_up(max_count + kPanel, kPanel);
  if (ldv % 1024 == 0) ldv += kPanel;  // (rows 4 KiB apart would share L1 sets)
  // The 16 transformed matrices (and products) one line more than a multiple of their size
  // apart: 16 streams a multiple of 4 KiB apart would share L1 sets.
  const int64_t vstride = cin * ldv + kPanel;
  thread_local std::vector<float> v_buf, m_buf;
  thread_local std::vector<int64_t> koff_buf;
  if (v_buf.size() < static_cast<size_t>(16 * vstride)) v_buf.resize(16 * vstride);
  if (m_buf.size() < static_cast<size_t>(16 * (cout * ldv + kPanel) + kPanel))
    m_buf.resize(16 * (cout * ldv + kPanel) + kPanel);
  // The products read the transformed tiles in place, row ci at ci ldv.
  koff_buf.resize(cin);
  for (int64_t c = 0; c < cin; ++c) koff_buf[c] = c * ldv;
  // Plain pointers for the pool's workers (a thread_local named in a task is the worker's own).
  float* const v = v_buf.data();
  float* const m = m_buf.data();
  const int64_t* const koff = koff_buf.data();
  const int64_t in_size = ih * iw, out_size = oh * ow;
  for (int64_t n = 0; n < a.n; ++n) {
    const float* xn = a.x + n * cin * in_size;
    for (int64_t ty0 = 0; ty0 < th; ty0 += rows_per_block) {
      const int64_t ty1 = std::min(th, ty0 + rows_per_block);
      const int64_t count = (ty1 - ty0) * tw, cols = round_up(count, kPanel);
      const int64_t mstride = cout * cols + kPanel;
      // Per channel, the block's padded rows 2 ty0 .. 2 ty1 + 1 copied (padded row r holds
      // input row r - ph, column q input column q - pw, zeros outside), then transformed
      // while they are in L1.
      const int64_t hb = 2 * (ty1 - ty0) + 2;
      parallel_for(cin, std::max<int64_t>(1, 4096 / (count + 1)), [&](int64_t c0, int64_t c1) {
        thread_local std::vector<float> pad_buf;
        if (pad_buf.size() < static_cast<size_t>(hb * wq)) pad_buf.resize(hb * wq);
        float* const pad = pad_buf.data();
        const int64_t q0 = std::min(a.pw, wq), q1 = std::clamp<int64_t>(a.pw + iw, q0, wq);
        for (int64_t c = c0; c < c1; ++c) {
          const float* xc = xn + c * in_size;
          for (int64_t r = 0; r < hb; ++r) {
            float* row = pad + r * wq;
            const int64_t src = 2 * ty0 + r - a.ph;
            if (src < 0 || src >= ih) {
              std::fill_n(row, wq, 0.f);
              continue;
            }
            std::fill_n(row, q0, 0.f);
            std::copy_n(xc + src * iw + (q0 - a.pw), q1 - q0, row + q0);
            std::fill_n(row + q1, wq - q1, 0.f);
          }
          HWY_DYNAMIC_DISPATCH(InputTransformImpl)(pad, 0, wq, 0, 1, 0, ty1 - ty0, tw, v + c * ldv, ldv, vstride);
        }
      });
      // The 16 products, independent: split over the pool, each on one thread.
      parallel_for(16, 1, [&](int64_t x0, int64_t x1) {
        for (int64_t xi = x0; xi < x1; ++xi)
          gemm_indirect(cout, cols, cin, a.u + xi * cout * cin, cin, v + xi * vstride, koff, m + xi * mstride, cols);
      });
      float* yn = a.y + n * cout * out_size;
      const float* zn = a.z ? a.z + n * cout * out_size : nullptr;
      parallel_for(cout, std::max<int64_t>(1, 4096 / (count + 1)), [&](int64_t o0, int64_t o1) {
        HWY_DYNAMIC_DISPATCH(OutputTransformImpl)(m, cols, mstride, o0, o1, ty0, ty1, tw, oh, ow, a.bias, zn, yn,
                                                  &a.act);
      });
    }
  }
}

}  // namespace onyx::cpu
#endif  // HWY_ONCE
