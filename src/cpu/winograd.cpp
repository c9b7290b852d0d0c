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
// then overwrites; positions [count, count_padded) are zeroed.
void InputTransformImpl(const float* padded, int64_t cplane, int64_t wq, int64_t c0, int64_t c1, int64_t ty0,
                        int64_t ty1, int64_t tw, float* v, int64_t ldv, int64_t xstride, int64_t count,
                        int64_t count_padded) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t c = c0; c < c1; ++c) {
    const float* pc = padded + c * cplane;
    float* vc = v + c * ldv;
    for (int64_t ty = ty0; ty < ty1; ++ty) {
      const float* row = pc + 2 * ty * wq;
      float* out = vc + (ty - ty0) * tw;
      for (int64_t tx = 0; tx < tw; tx += L) {
        VF t[4][4];
        HWY_UNROLL(4)
        for (int r = 0; r < 4; ++r) {
          VF d0, d1, d2, d3;
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
    if (count_padded > count)
      for (int xi = 0; xi < 16; ++xi) std::fill(vc + xi * xstride + count, vc + xi * xstride + count_padded, 0.f);
  }
}

// Output channels [o0, o1) from the products m[xi * xstride + o * ldm + t] of tile rows
// [ty0, ty1): y[o, 2 ty + i, 2 tx + j] = act((A^T M A)[i][j] + bias[o] + z[o, ...]), rows and
// columns past oh, ow dropped. y and z point at image planes of oh x ow floats.
void OutputTransformImpl(const float* m, int64_t ldm, int64_t xstride, int64_t o0, int64_t o1, int64_t ty0,
                         int64_t ty1, int64_t tw, int64_t oh, int64_t ow, const float* bias, const float* z, float* y,
                         const Activation* act_ptr) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const Activation act = *act_ptr;
  const int64_t wst = 2 * ((tw + L - 1) / L * L);
  thread_local std::vector<float> stage_buf;
  if (stage_buf.size() < static_cast<size_t>(2 * wst + 2 * L)) stage_buf.resize(2 * wst + 2 * L);
  float* const stage = stage_buf.data();
  const VF zero = hn::Zero(d);
  for (int64_t o = o0; o < o1; ++o) {
    const float* mo = m + o * ldm;
    const VF b = hn::Set(d, bias ? bias[o] : 0.f);
    float* yo = y + o * oh * ow;
    const float* zo = z ? z + o * oh * ow : nullptr;
    for (int64_t ty = ty0; ty < ty1; ++ty) {
      const float* in = mo + (ty - ty0) * tw;
      for (int64_t tx = 0; tx < tw; tx += L) {
        VF s0[4], s1[4];
        HWY_UNROLL(4)
        for (int j = 0; j < 4; ++j) {  // A^T M, column by column
          const VF m0 = hn::LoadU(d, in + (0 + j) * xstride + tx), m1 = hn::LoadU(d, in + (4 + j) * xstride + tx);
          const VF m2 = hn::LoadU(d, in + (8 + j) * xstride + tx), m3 = hn::LoadU(d, in + (12 + j) * xstride + tx);
          s0[j] = hn::Add(hn::Add(m0, m1), m2);
          s1[j] = hn::Sub(hn::Sub(m1, m2), m3);
        }
        // (A^T M) A, the bias added to every output.
        const VF y00 = hn::Add(hn::Add(hn::Add(s0[0], s0[1]), s0[2]), b);
        const VF y01 = hn::Add(hn::Sub(hn::Sub(s0[1], s0[2]), s0[3]), b);
        const VF y10 = hn::Add(hn::Add(hn::Add(s1[0], s1[1]), s1[2]), b);
        const VF y11 = hn::Add(hn::Sub(hn::Sub(s1[1], s1[2]), s1[3]), b);
        hn::StoreInterleaved2(y00, y01, d, stage + 2 * tx);
        hn::StoreInterleaved2(y10, y11, d, stage + wst + 2 * tx);
      }
      for (int64_t i = 0; i < 2 && 2 * ty + i < oh; ++i) {
        const float* src = stage + i * wst;
        float* dst = yo + (2 * ty + i) * ow;
        const float* zr = zo ? zo + (2 * ty + i) * ow : nullptr;
        int64_t x = 0;
        auto finish = [&](VF val) {
          if (act.kind == Act::kRelu) return hn::Max(val, zero);
          if (act.kind == Act::kNone) return val;
          return Activate(d, val, act);
        };
        for (; x + L <= ow; x += L) {
          VF val = hn::LoadU(d, src + x);
          if (zr) val = hn::Add(val, hn::LoadU(d, zr + x));
          hn::StoreU(finish(val), d, dst + x);
        }
        if (x < ow) {  // the row's last columns through a copy (z and y end where the row does)
          HWY_ALIGN float tail[HWY_MAX_BYTES / sizeof(float)] = {};
          const int64_t rem = ow - x;
          if (zr) std::memcpy(tail, zr + x, rem * sizeof(float));
          VF val = hn::LoadU(d, src + x);
          if (zr) val = hn::Add(val, hn::Load(d, tail));
          hn::Store(finish(val), d, tail);
          std::memcpy(dst + x, tail, rem * sizeof(float));
        }
      }
    }
  }
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
  // Padded planes: rows 0 .. 2 th + 1, and columns up to where a vector of 16 tiles past the
  // row's last reads (2 round_up(tw, 16) + 2), zeros outside the image.
  const int64_t hp = 2 * th + 2, wq = 2 * round_up(tw, kPanel) + 2, cplane = hp * wq;
  const int64_t per_row = 16 * (cin + cout) * tw * int64_t{sizeof(float)};
  const int64_t rows_per_block = std::clamp<int64_t>(kBlockBytes / std::max<int64_t>(per_row, 1), 1, th);
  const int64_t max_count = rows_per_block * tw;
  // Positions per channel row: the tiles rounded up to the products' panels, plus the last
  // tile row's spill.
  const int64_t ldv = round_up(max_count + kPanel, kPanel);
  thread_local std::vector<float> padded_buf, v_buf, m_buf;
  if (padded_buf.size() < static_cast<size_t>(cin * cplane)) padded_buf.resize(cin * cplane);
  if (v_buf.size() < static_cast<size_t>(16 * cin * ldv)) v_buf.resize(16 * cin * ldv);
  if (m_buf.size() < static_cast<size_t>(16 * cout * ldv + kPanel)) m_buf.resize(16 * cout * ldv + kPanel);
  // Plain pointers for the pool's workers (a thread_local named in a task is the worker's own).
  float* const padded = padded_buf.data();
  float* const v = v_buf.data();
  float* const m = m_buf.data();
  const int64_t in_size = ih * iw, out_size = oh * ow;
  for (int64_t n = 0; n < a.n; ++n) {
    const float* xn = a.x + n * cin * in_size;
    // Padded (row, column) (r, q) holds input (r - ph, q - pw) where that is inside the image.
    parallel_for(cin, std::max<int64_t>(1, 16384 / cplane), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        float* pc = padded + c * cplane;
        const float* xc = xn + c * in_size;
        const int64_t q0 = std::min(a.pw, wq), q1 = std::clamp<int64_t>(a.pw + iw, q0, wq);
        for (int64_t r = 0; r < hp; ++r) {
          float* row = pc + r * wq;
          const int64_t src = r - a.ph;
          if (src < 0 || src >= ih) {
            std::fill_n(row, wq, 0.f);
            continue;
          }
          std::fill_n(row, q0, 0.f);
          std::copy_n(xc + src * iw + (q0 - a.pw), q1 - q0, row + q0);
          std::fill_n(row + q1, wq - q1, 0.f);
        }
      }
    });
    for (int64_t ty0 = 0; ty0 < th; ty0 += rows_per_block) {
      const int64_t ty1 = std::min(th, ty0 + rows_per_block);
      const int64_t count = (ty1 - ty0) * tw, cols = round_up(count, kPanel);
      const int64_t vstride = cin * ldv, mstride = cout * cols;
      parallel_for(cin, std::max<int64_t>(1, 4096 / (count + 1)), [&](int64_t c0, int64_t c1) {
        HWY_DYNAMIC_DISPATCH(InputTransformImpl)(padded, cplane, wq, c0, c1, ty0, ty1, tw, v, ldv, vstride, count,
                                                 cols);
      });
      // The 16 products, independent: split over the pool, each on one thread.
      parallel_for(16, 1, [&](int64_t x0, int64_t x1) {
        for (int64_t xi = x0; xi < x1; ++xi)
          gemm(false, false, cout, cols, cin, a.u + xi * cout * cin, cin, v + xi * vstride, ldv, m + xi * mstride,
               cols);
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
