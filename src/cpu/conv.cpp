// The depthwise convolution (conv.h), per Highway target, by one of two kernels.
//
// The flat kernel: each channel's image is copied once into zero-padded planes, split into its
// sh x sw stride phases (phase (a, b) holds the padded image's rows a, a + sh, ... and columns
// b, b + sw, ...), each plane wq floats a row. Output (oy, ox) reads tap (i, j) in phase
// ((i dh) % sh, (j dw) % sw) at row oy + (i dh) / sh, column ox + (j dw) / sw; so at flat
// position f = oy wq + ox every tap is the phase plane read at f + a fixed offset, and the
// kernel computes contiguous runs of flat positions, a vector of lanes at a time, the columns
// ox >= ow among them dropped as they are stored.
//
// The blocked kernel: kL channels at a time, a pixel one vector of their values. The block's
// planes are transposed (kL pixels by kL channels in registers) into a zero-padded
// [row][column][kL] buffer, each output is then bias plus one load and one multiply-add per
// tap, and the [row][column][kL] outputs are transposed back into the channels' planes.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/conv.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <array>
#include <cstdint>
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
// Vectors of flat positions accumulated at once: independent FMA chains, as many as leave
// registers for a tap's weight and loads.
constexpr int kMaxNV = kL >= 16 ? 16 : 8;
// Masked loads that never touch the lanes they leave out (so a row's last columns can be read
// at the end of a tensor); the portable targets load whole vectors.
#undef ONYX_DW_SAFE_MASKED_LOAD
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define ONYX_DW_SAFE_MASKED_LOAD 1
#else
#define ONYX_DW_SAFE_MASKED_LOAD 0
#endif

// Where each vector of flat positions goes: the output index of its first kept lane, the
// kept lanes (ox < ow) as mask bits and their count.
struct FlatStore {
  int64_t dst;
  uint64_t bits;
  int64_t count;
};
// Targets with a compress instruction pack a vector's kept lanes by its mask; the others by a
// permutation made with the mask (`from`: kL lanes a vector, the i-th kept lane's index at
// i), as Highway's Compress there copies a table onto the stack at every call.
#undef ONYX_DW_NATIVE_COMPRESS
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define ONYX_DW_NATIVE_COMPRESS 1
#else
#define ONYX_DW_NATIVE_COMPRESS 0
#endif

// NV vectors of flat positions from f0 of CH channels at once (channel h's plane at
// plane + h plane_step, its taps' weights at w + h taps, its output at y + h y_step): bias plus
// every tap, then stored through `st`. Two channels of a small image give twice the
// independent FMA chains of one.
template <int NV, int CH>
HWY_NOINLINE void DwFlat(const float* HWY_RESTRICT plane, int64_t plane_step, const int64_t* HWY_RESTRICT toff,
                         const float* HWY_RESTRICT w, int64_t taps, const float* HWY_RESTRICT bias, int64_t f0,
                         const FlatStore* HWY_RESTRICT st, const int32_t* HWY_RESTRICT from,
                         const Activation& act, float* HWY_RESTRICT y, int64_t y_step) {
  const DF d;
  VF acc[CH][NV];
  HWY_UNROLL(2)
  for (int h = 0; h < CH; ++h)
    HWY_UNROLL(16)
    for (int v = 0; v < NV; ++v) acc[h][v] = hn::Set(d, bias[h]);
  const float* HWY_RESTRICT base = plane + f0;
  for (int64_t t = 0; t < taps; ++t) {
    HWY_UNROLL(2)
    for (int h = 0; h < CH; ++h) {
      const VF wv = hn::Set(d, w[h * taps + t]);
      const float* HWY_RESTRICT src = base + h * plane_step + toff[t];
      HWY_UNROLL(16)
      for (int v = 0; v < NV; ++v) acc[h][v] = hn::MulAdd(wv, hn::LoadU(d, src + v * kL), acc[h][v]);
    }
  }
  HWY_UNROLL(2)
  for (int h = 0; h < CH; ++h)
    HWY_UNROLL(16)
    for (int v = 0; v < NV; ++v) {
      const VF out = ActivateCheap(d, acc[h][v], act);
      float* dst = y + h * y_step + st[v].dst;
      if (st[v].count == kL) {
        hn::StoreU(out, d, dst);
      } else if (st[v].count > 0) {
#if ONYX_DW_NATIVE_COMPRESS
        const VF kept = hn::Compress(out, hn::LoadMaskBits(d, reinterpret_cast<const uint8_t*>(&st[v].bits)));
#else
        const VF kept = hn::TableLookupLanes(out, hn::SetTableIndices(d, from + v * kL));
#endif
        hn::BlendedStore(kept, hn::FirstN(d, static_cast<size_t>(st[v].count)), d, dst);
      }
    }
}

// `nv` (<= NV) vectors: DwFlat<nv, CH>.
template <int NV, int CH>
HWY_INLINE void DwFlatUpTo(int64_t nv, const float* plane, int64_t plane_step, const int64_t* toff, const float* w,
                           int64_t taps, const float* bias, int64_t f0, const FlatStore* st, const int32_t* from,
                           const Activation& act, float* y, int64_t y_step) {
  if constexpr (NV > 1) {
    if (nv < NV)
      return DwFlatUpTo<NV - 1, CH>(nv, plane, plane_step, toff, w, taps, bias, f0, st, from, act, y, y_step);
  }
  DwFlat<NV, CH>(plane, plane_step, toff, w, taps, bias, f0, st, from, act, y, y_step);
}

// dst[0, n) = src[0, n): whole vectors, then the last lanes masked.
HWY_INLINE void CopyRow(const float* HWY_RESTRICT src, int64_t n, float* HWY_RESTRICT dst) {
  const DF d;
  int64_t q = 0;
  for (; q + kL <= n; q += kL) hn::StoreU(hn::LoadU(d, src + q), d, dst + q);
  if (q == n) return;
#if ONYX_DW_SAFE_MASKED_LOAD
  const auto m = hn::FirstN(d, static_cast<size_t>(n - q));
  hn::BlendedStore(hn::MaskedLoad(m, d, src + q), m, d, dst + q);
#else
  for (; q < n; ++q) dst[q] = src[q];
#endif
}

// A row of n input columns split into two phases: column q to ph0 (q even) or ph1 (q odd), at
// q / 2.
HWY_INLINE void SplitRow2(const float* HWY_RESTRICT src, int64_t n, float* HWY_RESTRICT ph0, float* HWY_RESTRICT ph1) {
  const DF d;
  int64_t q = 0;
  for (; q + 2 * kL <= n; q += 2 * kL) {
    VF even, odd;
    hn::LoadInterleaved2(d, src + q, even, odd);
    hn::StoreU(even, d, ph0 + q / 2);
    hn::StoreU(odd, d, ph1 + q / 2);
  }
  if (q == n) return;
#if ONYX_DW_SAFE_MASKED_LOAD
  const int64_t rem = n - q;
  const VF lo = hn::MaskedLoad(hn::FirstN(d, static_cast<size_t>(std::min(rem, kL))), d, src + q);
  const VF hi = hn::MaskedLoad(hn::FirstN(d, static_cast<size_t>(std::max<int64_t>(rem - kL, 0))), d, src + q + kL);
  hn::BlendedStore(hn::ConcatEven(d, hi, lo), hn::FirstN(d, static_cast<size_t>((rem + 1) / 2)), d, ph0 + q / 2);
  hn::BlendedStore(hn::ConcatOdd(d, hi, lo), hn::FirstN(d, static_cast<size_t>(rem / 2)), d, ph1 + q / 2);
#else
  for (; q < n; ++q) (q % 2 ? ph1 : ph0)[q / 2] = src[q];
#endif
}

void DepthwiseFlat(const DepthwiseConv2d& a) {
  // The padded image's extent: its input, and every row and column a tap of an output reads.
  const int64_t padded_h = std::max(a.ph + a.ih, (a.oh - 1) * a.sh + (a.kh - 1) * a.dh + 1);
  const int64_t padded_w = std::max(a.pw + a.iw, (a.ow - 1) * a.sw + (a.kw - 1) * a.dw + 1);
  const int64_t hq = (padded_h + a.sh - 1) / a.sh, wq = (padded_w + a.sw - 1) / a.sw;
  const int64_t plane_floats = hq * wq;
  const int64_t taps = a.kh * a.kw;
  std::vector<int64_t> toff(static_cast<size_t>(taps));
  int64_t max_off = 0;
  for (int64_t i = 0; i < a.kh; ++i)
    for (int64_t j = 0; j < a.kw; ++j) {
      const int64_t pr = (i * a.dh) % a.sh, pc = (j * a.dw) % a.sw;
      toff[i * a.kw + j] = (pr * a.sw + pc) * plane_floats + (i * a.dh) / a.sh * wq + (j * a.dw) / a.sw;
      max_off = std::max(max_off, toff[i * a.kw + j]);
    }
  // Flat positions up to the last output's; each vector's kept lanes and where they go.
  const int64_t flat = (a.oh - 1) * wq + a.ow;
  const int64_t nvec = (flat + kL - 1) / kL;
  std::vector<FlatStore> stores(static_cast<size_t>(nvec), FlatStore{0, 0, 0});
  std::vector<int32_t> from(ONYX_DW_NATIVE_COMPRESS ? 0 : static_cast<size_t>(nvec * kL), 0);
  for (int64_t v = 0; v < nvec; ++v) {
    const int64_t f = v * kL;
    stores[v].dst = f / wq * a.ow + std::min(f % wq, a.ow);
  }
  for (int64_t oy = 0; oy < a.oh; ++oy)  // output row oy: flat positions [oy wq, oy wq + ow)
    for (int64_t f = oy * wq, end = f + a.ow; f < end;) {
      const int64_t v = f / kL, l0 = f - v * kL, l1 = std::min(kL, end - v * kL);
      FlatStore& st = stores[v];
      if (!from.empty())
        for (int64_t l = l0; l < l1; ++l) from[v * kL + st.count + (l - l0)] = static_cast<int32_t>(l);
      const uint64_t upto = l1 == 64 ? ~uint64_t{0} : (uint64_t{1} << l1) - 1;
      st.bits |= upto & ~((uint64_t{1} << l0) - 1);
      st.count += l1 - l0;
      f = v * kL + l1;
    }
  // The planes, and room for the last vectors' reads past them (lanes that are dropped).
  const int64_t buf_floats = std::max(a.sh * a.sw * plane_floats, max_off + nvec * kL);
  const bool cheap = IsCheap(a.act.kind);
  // Channels computed together: two where two images' vectors fit the accumulators.
  const int64_t group = 2 * nvec <= kMaxNV ? 2 : 1;
  const int64_t out_floats = a.oh * a.ow;
  parallel_for(a.channels, std::max<int64_t>(1, 4096 / std::max<int64_t>(out_floats * taps, 1)),
               [&](int64_t c0, int64_t c1) {
    // Zeroed once per geometry on each thread: the padding is never written, each channel
    // writes its input's positions only (the same ones for every channel of one geometry).
    thread_local std::vector<float> planes_buf;
    thread_local std::array<int64_t, 9> zeroed_for{};
    const std::array<int64_t, 9> geometry{group * buf_floats, a.ih, a.iw, a.ph, a.pw, a.sh, a.sw, wq, plane_floats};
    if (zeroed_for != geometry || planes_buf.size() != static_cast<size_t>(group * buf_floats)) {
      planes_buf.assign(static_cast<size_t>(group * buf_floats), 0.f);
      zeroed_for = geometry;
    }
    float* const planes = planes_buf.data();
    const int64_t* const to = toff.data();
    const FlatStore* const st = stores.data();
    const int32_t* const fr = from.data();
    const DF d;
    // (The geometry in locals: the stores into the planes would otherwise reload it each row.)
    const int64_t ih = a.ih, iw = a.iw, sh = a.sh, sw = a.sw, pw = a.pw, pf = plane_floats;
    // Channel c's input into the planes at `dst`. Input row r is padded row r + ph, in row
    // phase (r + ph) % sh at (r + ph) / sh; input column q padded column q + pw.
    auto copy_in = [&](int64_t c, float* dst) {
      const float* src = a.x + c * ih * iw;
      int64_t phase = a.ph % sh, at = a.ph / sh;
      for (int64_t r = 0; r < ih; ++r, src += iw) {
        float* row = dst + phase * sw * pf + at * wq;
        if (++phase == sh) phase = 0, ++at;
        if (sw == 1) {
          CopyRow(src, iw, row + pw);
        } else if (sw == 2) {
          // With pw odd, input column 0 is phase 1's, and the pairs start at input column 1.
          if (pw % 2) {
            row[pf + pw / 2] = src[0];
            if (iw > 1) SplitRow2(src + 1, iw - 1, row + (pw + 1) / 2, row + pf + (pw + 1) / 2);
          } else {
            SplitRow2(src, iw, row + pw / 2, row + pf + pw / 2);
          }
        } else {
          for (int64_t q = 0; q < iw; ++q) row[((q + pw) % sw) * pf + (q + pw) / sw] = src[q];
        }
      }
    };
    for (int64_t c = c0; c < c1; c += group) {
      const int64_t n = std::min(group, c1 - c);
      for (int64_t h = 0; h < n; ++h) copy_in(c + h, planes + h * buf_floats);
      const float* wc = a.w + c * taps;
      float* yc = a.y + c * out_floats;
      float b[2] = {0.f, 0.f};
      for (int64_t h = 0; h < n; ++h) b[h] = a.bias ? a.bias[c + h] : 0.f;
      if (n == 2) {
        DwFlatUpTo<kMaxNV / 2, 2>(nvec, planes, buf_floats, to, wc, taps, b, 0, st, fr, a.act, yc, out_floats);
      } else {
        int64_t v = 0;
        for (; v + kMaxNV <= nvec; v += kMaxNV)
          DwFlat<kMaxNV, 1>(planes, buf_floats, to, wc, taps, b, v * kL, st + v, fr + (fr ? v * kL : 0), a.act, yc,
                            out_floats);
        if (v < nvec)
          DwFlatUpTo<kMaxNV - 1, 1>(nvec - v, planes, buf_floats, to, wc, taps, b, v * kL, st + v,
                                    fr + (fr ? v * kL : 0), a.act, yc, out_floats);
      }
      if (!cheap)
        for (int64_t h = 0; h < n; ++h) ActivateSpan(d, yc + h * out_floats, out_floats, a.act);
    }
  });
}

// ---- The blocked kernel: kL channels a vector (not on the one-lane scalar target) ----
#if HWY_TARGET != HWY_SCALAR

// Stage B of a kL x kL transposition in registers (v[r] lane c holds element (r, c)): the
// off-diagonal B x B blocks of every 2B x 2B block swap, then the next stage halves B. After
// the stage for B = 1, v[c] lane r holds what v[r] lane c held.
template <int B>
HWY_INLINE void TransposeStages(VF* v) {
  if constexpr (B >= 1) {
    const DF d;
    HWY_UNROLL(16)
    for (int r = 0; r < kL; ++r) {
      if (r & B) continue;
      const VF a = v[r], c = v[r + B];
      if constexpr (B == kL / 2) {  // halves
        v[r] = hn::ConcatLowerLower(d, c, a);
        v[r + B] = hn::ConcatUpperUpper(d, c, a);
      } else if constexpr (B == 4) {  // 128-bit blocks (16 lanes)
        v[r] = hn::OddEvenBlocks(hn::SwapAdjacentBlocks(c), a);
        v[r + B] = hn::OddEvenBlocks(c, hn::SwapAdjacentBlocks(a));
      } else if constexpr (B == 2) {  // pairs, as 64-bit lanes
        const hn::Repartition<double, DF> d64;
        const auto a64 = hn::BitCast(d64, a), c64 = hn::BitCast(d64, c);
        v[r] = hn::BitCast(d, hn::OddEven(hn::DupEven(c64), a64));
        v[r + B] = hn::BitCast(d, hn::OddEven(c64, hn::DupOdd(a64)));
      } else {  // single lanes
        v[r] = hn::OddEven(hn::DupEven(c), a);
        v[r + B] = hn::OddEven(c, hn::DupOdd(a));
      }
    }
    TransposeStages<B / 2>(v);
  }
}

// U outputs of one row, ox0 .. ox0 + U - 1, for the block's kL channels: bias plus every tap, each
// tap one vector load per output and the tap's kL weights. `in` is the input row of tap row 0
// at padded column 0, `ws` the taps' weights, kL a tap.
template <int U>
HWY_NOINLINE void DwBlockRow(const float* HWY_RESTRICT in, int64_t row_step, const float* HWY_RESTRICT ws,
                             const float* HWY_RESTRICT bias, int64_t kh, int64_t kw, int64_t sw, int64_t dw,
                             int64_t ox0, const Activation& act, float* HWY_RESTRICT out) {
  const DF d;
  VF acc[U];
  const VF b = hn::LoadU(d, bias);
  HWY_UNROLL(16)
  for (int u = 0; u < U; ++u) acc[u] = b;
  for (int64_t i = 0; i < kh; ++i) {
    const float* HWY_RESTRICT row = in + i * row_step + ox0 * sw * kL;
    for (int64_t j = 0; j < kw; ++j, ws += kL) {
      const VF w = hn::LoadU(d, ws);
      const float* HWY_RESTRICT p = row + j * dw * kL;
      HWY_UNROLL(16)
      for (int u = 0; u < U; ++u) acc[u] = hn::MulAdd(hn::LoadU(d, p + u * sw * kL), w, acc[u]);
    }
  }
  HWY_UNROLL(16)
  for (int u = 0; u < U; ++u) hn::StoreU(ActivateCheap(d, acc[u], act), d, out + u * kL);
}

constexpr int kBlockU = kL >= 16 ? 12 : 6;  // outputs a call: accumulators, leaving registers for loads

template <int U>
HWY_INLINE void DwBlockRowUpTo(int64_t n, const float* in, int64_t row_step, const float* ws, const float* bias,
                               int64_t kh, int64_t kw, int64_t sw, int64_t dw, int64_t ox0, const Activation& act,
                               float* out) {
  if constexpr (U > 1) {
    if (n < U) return DwBlockRowUpTo<U - 1>(n, in, row_step, ws, bias, kh, kw, sw, dw, ox0, act, out);
  }
  DwBlockRow<U>(in, row_step, ws, bias, kh, kw, sw, dw, ox0, act, out);
}

// v[l] = kL floats from src + l * step for l < rows (lanes past n zero), zero vectors for l >= rows.
HWY_INLINE void LoadRows(const float* HWY_RESTRICT src, int64_t step, int64_t rows, int64_t n, VF* v) {
  const DF d;
  if (rows == kL && n == kL) {
    HWY_UNROLL(16)
    for (int l = 0; l < kL; ++l) v[l] = hn::LoadU(d, src + l * step);
    return;
  }
#if ONYX_DW_SAFE_MASKED_LOAD
  const auto m = hn::FirstN(d, static_cast<size_t>(n));
  for (int l = 0; l < kL; ++l) v[l] = l < rows ? hn::MaskedLoad(m, d, src + l * step) : hn::Zero(d);
#else
  HWY_ALIGN float buf[kL];
  for (int l = 0; l < kL; ++l) {
    for (int64_t q = 0; q < kL; ++q) buf[q] = l < rows && q < n ? src[l * step + q] : 0.f;
    v[l] = hn::Load(d, buf);
  }
#endif
}

// dst + l * step gets v[l]'s first n lanes, l < rows; nothing else is written (other threads
// write beside them).
HWY_INLINE void StoreRows(const VF* v, int64_t rows, int64_t n, float* HWY_RESTRICT dst, int64_t step) {
  const DF d;
  if (rows == kL && n == kL) {
    HWY_UNROLL(16)
    for (int l = 0; l < kL; ++l) hn::StoreU(v[l], d, dst + l * step);
    return;
  }
#if ONYX_DW_SAFE_MASKED_LOAD
  const auto m = hn::FirstN(d, static_cast<size_t>(n));
  for (int64_t l = 0; l < rows; ++l) hn::BlendedStore(v[l], m, d, dst + l * step);
#else
  HWY_ALIGN float buf[kL];
  for (int64_t l = 0; l < rows; ++l) {
    hn::Store(v[l], d, buf);
    for (int64_t q = 0; q < n; ++q) dst[l * step + q] = buf[q];
  }
#endif
}

void DepthwiseBlocked(const DepthwiseConv2d& a) {
  const DF d;
  // The padded row's extent, as the flat kernel's; each padded pixel a vector of kL floats.
  // (Rows past the image's end that a tap reaches are zeroed as the band's rows are.)
  const int64_t padded_w = std::max(a.pw + a.iw, (a.ow - 1) * a.sw + (a.kw - 1) * a.dw + 1);
  const int64_t taps = a.kh * a.kw, row_floats = padded_w * kL;
  const int64_t blocks = (a.channels + kL - 1) / kL;
  // Output rows a task: its input rows (with the taps' reach) about 128 KiB, then fewer while
  // the tasks do not give each thread four.
  auto in_rows = [&](int64_t rows) { return (rows - 1) * a.sh + (a.kh - 1) * a.dh + 1; };
  int64_t band = std::max<int64_t>(1, ((int64_t{32} << 10) / row_floats - (a.kh - 1) * a.dh - 1) / a.sh + 1);
  band = std::min(band, a.oh);
  const int64_t want_tasks = 4 * parallelism();
  if (blocks * ((a.oh + band - 1) / band) < want_tasks)
    band = std::max<int64_t>(1, a.oh / std::max<int64_t>(1, (want_tasks + blocks - 1) / blocks));
  const int64_t bands = (a.oh + band - 1) / band;
  const int64_t plane = a.ih * a.iw, out_plane = a.oh * a.ow;
  const bool cheap = IsCheap(a.act.kind);
  parallel_for(blocks * bands, 1, [&](int64_t t0, int64_t t1) {
    // One buffer, each part aligned to 64 bytes (a pixel's vector then never straddles two lines).
    thread_local std::vector<float> buf;
    const int64_t xb_floats = (in_rows(band) * row_floats + 15) / 16 * 16;
    const int64_t yb_floats = ((band * a.ow + kL) * kL + 15) / 16 * 16;
    const int64_t wb_floats = ((taps + kL) * kL + 15) / 16 * 16;
    buf.resize(static_cast<size_t>(xb_floats + yb_floats + wb_floats + 16));
    float* const xb = buf.data() + ((64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64) / sizeof(float);
    float* const yb = xb + xb_floats;
    float* const wb = yb + yb_floats;
    VF v[kL];
    for (int64_t t = t0; t < t1; ++t) {
      // Band-major: the pool's first threads take the top bands, whose input rows the product
      // before (split by pixels the same way) left in their own caches.
      const int64_t blk = t % blocks, oy0 = (t / blocks) * band, oy1 = std::min(a.oh, oy0 + band);
      const int64_t c0 = blk * kL, nch = std::min<int64_t>(kL, a.channels - c0);
      // The block's weights, tap-major (channel lanes past the last channel zero), then its bias.
      for (int64_t k = 0; k < taps; k += kL) {
        LoadRows(a.w + c0 * taps + k, taps, nch, std::min<int64_t>(kL, taps - k), v);
        TransposeStages<kL / 2>(v);
        for (int64_t q = 0; q < std::min<int64_t>(kL, taps - k); ++q) hn::Store(v[q], d, wb + (k + q) * kL);
      }
      std::fill(wb + taps * kL, wb + (taps + 1) * kL, 0.f);
      if (a.bias) std::copy(a.bias + c0, a.bias + c0 + nch, wb + taps * kL);
      // Input: padded rows r0 .. r0 + rows - 1, each [padded_w][kL]. The padding is zeroed, then
      // the image rows iy0 .. iy1 - 1 in it are transposed in kL pixels at a time (pixels in
      // the order of the channel planes, each to its padded row and column).
      const int64_t r0 = oy0 * a.sh, rows = in_rows(oy1 - oy0);
      const int64_t iy0 = std::max<int64_t>(0, r0 - a.ph), iy1 = std::min(a.ih, r0 + rows - a.ph);
      for (int64_t r = 0; r < rows; ++r) {
        float* row = xb + r * row_floats;
        const int64_t iy = r0 + r - a.ph;
        if (iy < iy0 || iy >= iy1) {
          std::fill(row, row + row_floats, 0.f);
        } else {
          std::fill(row, row + a.pw * kL, 0.f);
          std::fill(row + (a.pw + a.iw) * kL, row + row_floats, 0.f);
        }
      }
      {
        // (The geometry in locals: the stores would otherwise reload it for every pixel.)
        const int64_t iw = a.iw, skip = (padded_w - iw) * kL;
        const float* src = a.x + c0 * plane;
        float* dst = xb + (iy0 + a.ph - r0) * row_floats + a.pw * kL;  // pixel (iy0, 0)
        int64_t ix = 0;
        for (int64_t p = iy0 * iw, end = iy1 * iw; p < end; p += kL) {
          const int64_t n = std::min<int64_t>(kL, end - p);
          LoadRows(src + p, plane, nch, n, v);
          TransposeStages<kL / 2>(v);
          for (int64_t q = 0; q < n; ++q) {
            hn::Store(v[q], d, dst);
            dst += kL;
            if (++ix == iw) ix = 0, dst += skip;
          }
        }
      }
      // Outputs, kBlockU at a time along each row, into [rows][ow][kL].
      for (int64_t oy = oy0; oy < oy1; ++oy) {
        const float* in = xb + (oy - oy0) * a.sh * row_floats;
        float* out = yb + (oy - oy0) * a.ow * kL;
        int64_t ox = 0;
        for (; ox + kBlockU <= a.ow; ox += kBlockU)
          DwBlockRow<kBlockU>(in, a.dh * row_floats, wb, wb + taps * kL, a.kh, a.kw, a.sw, a.dw, ox, a.act,
                              out + ox * kL);
        if (ox < a.ow)
          DwBlockRowUpTo<kBlockU - 1>(a.ow - ox, in, a.dh * row_floats, wb, wb + taps * kL, a.kh, a.kw, a.sw, a.dw,
                                      ox, a.act, out + ox * kL);
      }
      const int64_t outs = (oy1 - oy0) * a.ow;
      if (!cheap) ActivateSpan(d, yb, outs * kL, a.act);
      // Back to channel-major, kL outputs (in the planes' order) at a time.
      float* dst = a.y + c0 * out_plane + oy0 * a.ow;
      for (int64_t f = 0; f < outs; f += kL) {
        const int64_t n = std::min<int64_t>(kL, outs - f);
        HWY_UNROLL(16)
        for (int q = 0; q < kL; ++q) v[q] = hn::Load(d, yb + (f + q) * kL);
        TransposeStages<kL / 2>(v);
        StoreRows(v, nch, n, dst + f, out_plane);
      }
    }
  });
}

#endif  // HWY_TARGET != HWY_SCALAR

// Which kernel (conv.h). The blocked one on images narrower than 32 columns: the flat one
// copies the image row by row and computes each output row's overhang (a 7-wide row of a
// 5 x 5 kernel: 7 of 11 flat positions kept), both large against short rows, while the
// blocked one's loads are whole pixels. On wide images the flat one wins: its copies are whole
// vectors and its overhang small, and the blocked one pays two transpositions. Measured with
// bench/cpu_depthwise.cpp on AVX-512 at 1 and 2 threads (docs/cpu-speed.md), flat against
// blocked at 1 thread: 7 x 7 with 960 channels and 5 x 5 taps 73 against 38 us, 28 x 28 with 120
// channels and 5 x 5 taps 92 against 88, 56 x 56 at stride 2 with 72 channels 70 against 77,
// 56 x 56 with 64 channels and 3 x 3 taps 81 against 110.
void DepthwiseImpl(const DepthwiseConv2d* ap) {
  const DepthwiseConv2d& a = *ap;
  const bool blocked = a.path == DepthwiseConv2d::Path::kAuto ? a.iw < 32 : a.path == DepthwiseConv2d::Path::kBlocked;
#if HWY_TARGET != HWY_SCALAR
  if (blocked) return DepthwiseBlocked(a);
#endif
  (void)blocked;
  DepthwiseFlat(a);
}

// The max-pool row helpers (conv.h).
void SplitRow2Impl(const float* src, int64_t n, float* even, float* odd) { SplitRow2(src, n, even, odd); }

void MaxNanIntoImpl(float* HWY_RESTRICT best, const float* HWY_RESTRICT v, int64_t n) {
  const DF d;
  int64_t j = 0;
  // v where v > best or v is NaN, else best: a NaN taken once is kept (nothing compares above it).
  for (; j + kL <= n; j += kL) {
    const VF b = hn::LoadU(d, best + j), x = hn::LoadU(d, v + j);
    hn::StoreU(hn::IfThenElse(hn::Or(hn::Gt(x, b), hn::IsNaN(x)), x, b), d, best + j);
  }
  if (j == n) return;
#if ONYX_DW_SAFE_MASKED_LOAD
  const auto m = hn::FirstN(d, static_cast<size_t>(n - j));
  const VF b = hn::MaskedLoad(m, d, best + j), x = hn::MaskedLoad(m, d, v + j);
  hn::BlendedStore(hn::IfThenElse(hn::Or(hn::Gt(x, b), hn::IsNaN(x)), x, b), m, d, best + j);
#else
  for (; j < n; ++j) best[j] = v[j] > best[j] || v[j] != v[j] ? v[j] : best[j];
#endif
}

// dst[j] = the max_nan fold over taps t < count of src[t * step + j], j < n, taps in order.
void MaxNanTapsImpl(const float* const* taps, int64_t count, int64_t n, float* HWY_RESTRICT dst) {
  const DF d;
  int64_t j = 0;
  for (; j + kL <= n; j += kL) {
    VF b = hn::LoadU(d, taps[0] + j);
    for (int64_t t = 1; t < count; ++t) {
      const VF x = hn::LoadU(d, taps[t] + j);
      b = hn::IfThenElse(hn::Or(hn::Gt(x, b), hn::IsNaN(x)), x, b);
    }
    hn::StoreU(b, d, dst + j);
  }
  if (j == n) return;
#if ONYX_DW_SAFE_MASKED_LOAD
  const auto m = hn::FirstN(d, static_cast<size_t>(n - j));
  VF b = hn::MaskedLoad(m, d, taps[0] + j);
  for (int64_t t = 1; t < count; ++t) {
    const VF x = hn::MaskedLoad(m, d, taps[t] + j);
    b = hn::IfThenElse(hn::Or(hn::Gt(x, b), hn::IsNaN(x)), x, b);
  }
  hn::BlendedStore(b, m, d, dst + j);
#else
  for (; j < n; ++j) {
    float b = taps[0][j];
    for (int64_t t = 1; t < count; ++t) b = taps[t][j] > b || taps[t][j] != taps[t][j] ? taps[t][j] : b;
    dst[j] = b;
  }
#endif
}

}  // namespace onyx::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace onyx::cpu {

HWY_EXPORT(DepthwiseImpl);
HWY_EXPORT(SplitRow2Impl);
HWY_EXPORT(MaxNanIntoImpl);
HWY_EXPORT(MaxNanTapsImpl);

void split_row2(const float* src, int64_t n, float* even, float* odd) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(SplitRow2Impl)(src, n, even, odd);
}

void max_nan_taps(const float* const* taps, int64_t count, int64_t n, float* dst) {
  if (n > 0 && count > 0) HWY_DYNAMIC_DISPATCH(MaxNanTapsImpl)(taps, count, n, dst);
}

void max_nan_into(float* best, const float* v, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(MaxNanIntoImpl)(best, v, n);
}

void depthwise_conv2d(const DepthwiseConv2d& a) {
  if (a.channels <= 0 || a.oh <= 0 || a.ow <= 0) return;
  HWY_DYNAMIC_DISPATCH(DepthwiseImpl)(&a);
}

}  // namespace onyx::cpu
#endif  // HWY_ONCE
