// The depthwise convolution (conv.h), per Highway target. Each output row accumulates its
// kh x kw taps as contiguous vector operations: a strided convolution first splits each input
// row into its `sw` phases (every sw-th element), so every tap reads a contiguous run.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/conv.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <vector>

#include "cpu/conv.h"
#include "cpu/thread_pool.h"
#include "cpu/vec_math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace onyx::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
constexpr int64_t kL = HWY_LANES(float);

// R output rows' columns [o0, o0 + count) of a block of NV vectors, accumulated in registers
// over the taps: rows[r * kh + i] is output row r's tap row i, the phase-split padded input row
// (a zero row for padding), tap (i, j) reading it at tap_off[j] + o0 contiguously. Several rows
// at once give narrow images (7 or 14 columns: one vector) independent accumulation chains.
template <int NV, int R>
HWY_NOINLINE void DwBlock(const float* const* rows, int64_t kh, int64_t kw, const float* w, const int64_t* tap_off,
                        int64_t o0, float bias, const Activation& act, float* out, int64_t ldo, int64_t count) {
  const DF d;
  VF acc[R][NV];
  HWY_UNROLL(8)
  for (int r = 0; r < R; ++r)
    HWY_UNROLL(8)
    for (int v = 0; v < NV; ++v) acc[r][v] = hn::Set(d, bias);
  for (int64_t i = 0; i < kh; ++i) {
    for (int64_t j = 0; j < kw; ++j) {
      const VF wv = hn::Set(d, w[i * kw + j]);
      HWY_UNROLL(8)
      for (int r = 0; r < R; ++r) {
        const float* src = rows[r * kh + i] + tap_off[j] + o0;
        HWY_UNROLL(8)
        for (int v = 0; v < NV; ++v) acc[r][v] = hn::MulAdd(wv, hn::LoadU(d, src + v * kL), acc[r][v]);
      }
    }
  }
  HWY_UNROLL(8)
  for (int r = 0; r < R; ++r)
    HWY_UNROLL(8)
    for (int v = 0; v < NV; ++v) {
      const int64_t o = v * kL;
      float* dst = out + r * ldo + o;
      const VF y = ActivateCheap(d, acc[r][v], act);
      if (o + kL <= count) hn::StoreU(y, d, dst);
      else if (o < count) hn::BlendedStore(y, hn::FirstN(d, static_cast<size_t>(count - o)), d, dst);
    }
  if (!IsCheap(act.kind))
    for (int r = 0; r < R; ++r) ActivateSpan(d, out + r * ldo, count, act);
}

// Rows [0, g) of a group (g <= RMax) with NV vectors each: DwBlock<NV, g>.
template <int NV, int RMax>
HWY_INLINE void DwRows(int64_t g, const float* const* rows, int64_t kh, int64_t kw, const float* w,
                       const int64_t* tap_off, int64_t o0, float bias, const Activation& act, float* out, int64_t ldo,
                       int64_t count) {
  if constexpr (RMax > 1) {
    if (g < RMax) return DwRows<NV, RMax - 1>(g, rows, kh, kw, w, tap_off, o0, bias, act, out, ldo, count);
  }
  DwBlock<NV, RMax>(rows, kh, kw, w, tap_off, o0, bias, act, out, ldo, count);
}

void DepthwiseImpl(const DepthwiseConv2d* ap) {
  const DepthwiseConv2d& a = *ap;
  // Each input row, padded with zeros to the left (pw) and right, split into its sw phases
  // (phase p holds padded[p], padded[p + sw], ...), each phase `stride` floats long with room
  // for the last vector's over-read. Output column o of tap j reads phase (j dw) % sw at
  // o + (j dw) / sw.
  const int64_t padded_w = a.pw + a.iw + (a.kw - 1) * a.dw + (a.ow + 1) * a.sw;
  const int64_t stride = (padded_w + a.sw - 1) / a.sw + 8 * kL;
  std::vector<int64_t> tap_off(static_cast<size_t>(a.kw));
  for (int64_t j = 0; j < a.kw; ++j) tap_off[j] = ((j * a.dw) % a.sw) * stride + (j * a.dw) / a.sw;
  const int64_t row_floats = a.sw * stride;
  parallel_for(a.channels, std::max<int64_t>(1, 4096 / std::max<int64_t>(a.oh * a.ow * a.kh * a.kw, 1)),
               [&](int64_t c0, int64_t c1) {
    thread_local std::vector<float> image_buf;  // the channel's padded, phase-split rows
    thread_local std::vector<const float*> rows_buf;
    // (One more row, never written: the zero row that padding rows read.)
    image_buf.assign(static_cast<size_t>((a.ih + 1) * row_floats), 0.f);
    rows_buf.resize(static_cast<size_t>(8 * a.kh));
    // Plain pointers: the loops below would otherwise reload the thread-local vectors' data.
    float* const image = image_buf.data();
    const float** const rows = rows_buf.data();
    const DF d;
    for (int64_t c = c0; c < c1; ++c) {
      const float* xc = a.x + c * a.ih * a.iw;
      for (int64_t r = 0; r < a.ih; ++r) {
        float* dst = image + r * row_floats;
        const float* src = xc + r * a.iw;
        if (a.sw == 1) {
          std::copy_n(src, a.iw, dst + a.pw);
          continue;
        }
        if (a.sw == 2) {
          // Input column q lands in padded column q + pw: phase (q + pw) % 2, at (q + pw) / 2.
          // From the first q with q + pw even, pairs of vectors split into both phases at once;
          // the columns before and after it one at a time. Padding columns are never written
          // (zero since the buffer was filled).
          float* ph0 = dst;
          float* ph1 = dst + stride;
          int64_t q = 0;
          if (a.pw % 2) {  // column 0 is odd in the padded row: phase 1 at (0 + pw) / 2
            ph1[a.pw / 2] = src[0];
            q = 1;
          }
          for (; q + 2 * kL <= a.iw; q += 2 * kL) {
            VF even, odd;
            hn::LoadInterleaved2(d, src + q, even, odd);
            const int64_t at = (q + a.pw) / 2;
            hn::StoreU(even, d, ph0 + at);
            hn::StoreU(odd, d, ph1 + at);
          }
          if (q < a.iw) {  // the last columns (fewer than two vectors) through a zeroed copy
            HWY_ALIGN float tail[2 * kL] = {};
            const int64_t rem = a.iw - q;
            std::copy_n(src + q, rem, tail);
            VF even, odd;
            hn::LoadInterleaved2(d, tail, even, odd);
            const int64_t at = (q + a.pw) / 2;
            hn::BlendedStore(even, hn::FirstN(d, static_cast<size_t>((rem + 1) / 2)), d, ph0 + at);
            hn::BlendedStore(odd, hn::FirstN(d, static_cast<size_t>(rem / 2)), d, ph1 + at);
          }
          continue;
        }
        // Input column q lands in padded column q + pw: phase (q + pw) % sw, at (q + pw) / sw.
        for (int64_t p = 0; p < a.sw; ++p) {
          const int64_t q0 = ((p - a.pw) % a.sw + a.sw) % a.sw;  // the first column of phase p
          float* out = dst + p * stride + (q0 + a.pw) / a.sw;
          for (int64_t q = q0, i = 0; q < a.iw; q += a.sw, ++i) out[i] = src[q];
        }
      }
      const float* wc = a.w + c * a.kh * a.kw;
      const float b = a.bias ? a.bias[c] : 0.f;
      float* yc = a.y + c * a.oh * a.ow;
      // Output rows in groups (8 for one-vector rows, 4 for two, 2 for three or four, else 1:
      // about 8 independent accumulators), each group's tap rows looked up once.
      const int64_t nv_row = (std::min<int64_t>(a.ow, 8 * kL) + kL - 1) / kL;
      const int64_t group = nv_row == 1 ? 8 : nv_row == 2 ? 4 : nv_row <= 4 ? 2 : 1;
      const float* zero_row = image + a.ih * row_floats;
      const int64_t* toff = tap_off.data();
      // (The geometry in locals: the stores into rows would otherwise reload it each time.)
      const int64_t kh = a.kh, ih = a.ih, sh = a.sh, ph = a.ph, dh = a.dh, rf = row_floats;
      for (int64_t orow = 0; orow < a.oh; orow += group) {
        const int64_t g = std::min(group, a.oh - orow);
        for (int64_t r = 0; r < g; ++r)
          for (int64_t i = 0; i < kh; ++i) {
            const int64_t ir = (orow + r) * sh - ph + i * dh;
            rows[r * kh + i] = ir < 0 || ir >= ih ? zero_row : image + ir * rf;
          }
        const float* const* use = rows;
        for (int64_t o0 = 0; o0 < a.ow; o0 += 8 * kL) {
          const int64_t count = std::min<int64_t>(8 * kL, a.ow - o0);
          float* out = yc + orow * a.ow + o0;
          const int64_t nv = (count + kL - 1) / kL;
          switch (nv) {  // (a row's last block may have fewer vectors than the group was sized for)
            case 1: DwRows<1, 8>(g, use, a.kh, a.kw, wc, toff, o0, b, a.act, out, a.ow, count); continue;
            case 2: DwRows<2, 4>(g, use, a.kh, a.kw, wc, toff, o0, b, a.act, out, a.ow, count); continue;
            case 3: DwRows<3, 2>(g, use, a.kh, a.kw, wc, toff, o0, b, a.act, out, a.ow, count); continue;
            case 4: DwRows<4, 2>(g, use, a.kh, a.kw, wc, toff, o0, b, a.act, out, a.ow, count); continue;
            default: break;
          }
          for (int64_t r = 0; r < g; ++r) {  // wide rows: one at a time
            const float* const* ur = use + r * a.kh;
            float* orow_out = out + r * a.ow;
            switch (nv) {
              case 5: DwBlock<5, 1>(ur, a.kh, a.kw, wc, toff, o0, b, a.act, orow_out, a.ow, count); break;
              case 6: DwBlock<6, 1>(ur, a.kh, a.kw, wc, toff, o0, b, a.act, orow_out, a.ow, count); break;
              case 7: DwBlock<7, 1>(ur, a.kh, a.kw, wc, toff, o0, b, a.act, orow_out, a.ow, count); break;
              default: DwBlock<8, 1>(ur, a.kh, a.kw, wc, toff, o0, b, a.act, orow_out, a.ow, count); break;
            }
          }
        }
      }
    }
  });
}

}  // namespace onyx::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace onyx::cpu {

HWY_EXPORT(DepthwiseImpl);

void depthwise_conv2d(const DepthwiseConv2d& a) {
  if (a.channels <= 0 || a.oh <= 0 || a.ow <= 0) return;
  HWY_DYNAMIC_DISPATCH(DepthwiseImpl)(&a);
}

}  // namespace onyx::cpu
#endif  // HWY_ONCE
