// The packed-panel matrix product (gemm.h). Per Highway target: a register tile of MR rows by
// NP panels, accumulated over a block of K with one broadcast of A and NP * 16 / lanes loads of
// B per step, stored once with the epilogue applied in registers.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/gemm.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/thread_pool.h"
#include "cpu/vec_math-inl.h"
#include "hwy/aligned_allocator.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace onyx::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

constexpr int kL = HWY_LANES(float);
constexpr int kVPP = static_cast<int>(kPanel) / kL;  // vectors per panel row
// The large tile: rows x panels, sized to the register file (32 vector registers with AVX-512,
// 16 below it): accumulators + the B vectors of one step + one broadcast.
constexpr int kBigMR = kL >= 16 ? 12 : (kL == 8 ? 6 : 4);
constexpr int kBigNP = kL >= 16 ? 2 : 1;
constexpr int kRegs = kL >= 16 ? 32 : 16;
// Panels per tile for a product of few rows (GEMV-like): as many accumulators as fit.
constexpr int SmallNP(int mr) {
  int np = 8;
  while (np > 1 && mr * np * kVPP + np * kVPP + 1 > kRegs - 1) --np;
  return np;
}
// A larger than kAInL2 bytes is read in blocks of kABlock bytes held in L2 across the column
// tiles, K outermost, where C is read once or fits in kCInL2 bytes (read again per block of K).
constexpr int64_t kAInL2 = int64_t{512} << 10;
constexpr int64_t kABlock = int64_t{512} << 10;
constexpr int64_t kCInL2 = int64_t{1} << 20;
// B's bytes a group of column tiles reads, held in L2 across blocks of rows (one block of K
// over a large image read in place).
constexpr int64_t kBGroup = int64_t{256} << 10;

struct TileArgs {
  int64_t kb;         // rows of B (columns of A) in this pass
  const float* a;     // A at (row 0 of the tile, this pass's first column)
  int64_t lda;        // floats between A's rows; A column-major (ColsA), between its columns
  const float* b;     // packed B at (the tile's first panel, this pass's first row)
  int64_t pstride;    // floats between panels (16 K packed; 16 for B read in place, row-major)
  int64_t kstride;    // floats between B's rows within a panel (16 packed; ldb in place)
  const int64_t* koff;  // Indirect tiles: B's row p at b + koff[p] (this pass's offsets)
  float* c;           // C at the tile's first element
  int64_t ldc;
  int64_t ncols;      // valid columns of the tile (<= NP * 16)
  bool accumulate;    // add C's values
  bool last;          // the final pass over K: apply bias and activation
  const float* bias;      // at the tile's first column, or null
  const float* row_bias;  // at the tile's first row, or null
  const float* residual;  // at the tile's first element, or null
  int64_t ldr;
  const Activation* act;
  // Rows of the B slice the next tiles will read, asked into L2 one row per step over the
  // first pf_rows steps (pf_rows 0: none): row i at pf_b + i * pf_kstride, or at pf_b + pf_koff[i]
  // (Indirect); its panels pf_pstride apart.
  int64_t pf_rows;
  const float* pf_b;
  int64_t pf_pstride, pf_kstride;
  const int64_t* pf_koff;
};

// Indirect: B's rows are found through t.koff (gemm_indirect) instead of a fixed stride.
// ColsA: A column-major (gemm_packed_cols): a step's MR values side by side, t.lda floats after
// the previous step's.
template <int MR, int NP, bool Indirect, bool ColsA = false>
HWY_NOINLINE void Tile(const TileArgs& t) {
  constexpr int NV = NP * kVPP;
  const DF d;
  VF acc[MR][NV];
  HWY_UNROLL(16)
  for (int r = 0; r < MR; ++r)
    HWY_UNROLL(16)
    for (int v = 0; v < NV; ++v) acc[r][v] = hn::Zero(d);
  const float* HWY_RESTRICT a = t.a;
  const float* HWY_RESTRICT b = t.b;
  const int64_t* HWY_RESTRICT koff = t.koff;
  // C's lines (and the residual's, in the last pass), asked for while the tile computes:
  // stored cold, each would wait on its read for ownership at the end.
  const float* HWY_RESTRICT res = t.last ? t.residual : nullptr;
  for (int64_t p = 0; p < t.kb; ++p) {
    if (p < MR) {
      float* out = t.c + p * t.ldc;
      HWY_UNROLL(8)
      for (int q = 0; q < NP; ++q) __builtin_prefetch(out + q * kPanel, 1, 3);
      __builtin_prefetch(out + NP * kPanel - 1, 1, 3);
      if (res) {
        HWY_UNROLL(8)
        for (int q = 0; q < NP; ++q) __builtin_prefetch(res + p * t.ldr + q * kPanel, 0, 3);
      }
    }
    if (p < t.pf_rows) {
      const float* row = t.pf_b + (Indirect ? t.pf_koff[p] : p * t.pf_kstride);
      HWY_UNROLL(8)
      for (int q = 0; q < NP; ++q) __builtin_prefetch(row + q * t.pf_pstride, 0, 2);
      __builtin_prefetch(row + (NP - 1) * t.pf_pstride + kPanel - 1, 0, 2);
    }
    VF bv[NV];
    if constexpr (Indirect) {
      // B read where koff says (a convolution's image, each row a tap's shifted view): the
      // next rows' lines asked for a few steps ahead.
      const float* row = b + koff[p];
      if (p + 4 < t.kb) hwy::Prefetch(b + koff[p + 4]);
      HWY_UNROLL(16)
      for (int v = 0; v < NV; ++v) bv[v] = hn::LoadU(d, row + v * kL);
    } else {
      // B streams from memory when it is an activation packed per call (a convolution's
      // im2col): ask for each panel's line 8 steps ahead.
      HWY_UNROLL(8)
      for (int q = 0; q < NP; ++q) hwy::Prefetch(b + q * t.pstride + (p + 8) * t.kstride);
      HWY_UNROLL(16)
      for (int v = 0; v < NV; ++v) bv[v] = hn::LoadU(d, b + (v / kVPP) * t.pstride + p * t.kstride + (v % kVPP) * kL);
    }
    HWY_UNROLL(16)
    for (int r = 0; r < MR; ++r) {
      const VF ar = hn::Set(d, ColsA ? a[r] : a[r * t.lda + p]);
      HWY_UNROLL(16)
      for (int v = 0; v < NV; ++v) acc[r][v] = hn::MulAdd(ar, bv[v], acc[r][v]);
    }
    if constexpr (ColsA) a += t.lda;
  }
  const bool full = t.ncols == NP * kPanel;
  const bool epi = t.last && (t.bias || t.row_bias || t.residual || t.act->kind != Act::kNone);
  const bool cheap = IsCheap(t.act->kind);
  if (full) {
    // The epilogue as passes over the registers, each under one test, with t's fields in
    // locals: stores through c may alias t, so read per vector they were loaded again after
    // every store (a tile of few steps, K 16-72, spent about a third of its time there).
    float* HWY_RESTRICT const c = t.c;
    const int64_t ldc = t.ldc;
    if (t.accumulate) {
      HWY_UNROLL(16)
      for (int r = 0; r < MR; ++r)
        HWY_UNROLL(16)
        for (int v = 0; v < NV; ++v) acc[r][v] = hn::Add(hn::LoadU(d, c + r * ldc + v * kL), acc[r][v]);
    }
    if (epi) {
      if (const float* HWY_RESTRICT bias = t.bias) {
        HWY_UNROLL(16)
        for (int v = 0; v < NV; ++v) {
          const VF bv = hn::LoadU(d, bias + v * kL);
          HWY_UNROLL(16)
          for (int r = 0; r < MR; ++r) acc[r][v] = hn::Add(acc[r][v], bv);
        }
      }
      if (const float* HWY_RESTRICT row_bias = t.row_bias) {
        HWY_UNROLL(16)
        for (int r = 0; r < MR; ++r) {
          const VF rb = hn::Set(d, row_bias[r]);
          HWY_UNROLL(16)
          for (int v = 0; v < NV; ++v) acc[r][v] = hn::Add(acc[r][v], rb);
        }
      }
      if (const float* HWY_RESTRICT residual = t.residual) {
        const int64_t ldr = t.ldr;
        HWY_UNROLL(16)
        for (int r = 0; r < MR; ++r)
          HWY_UNROLL(16)
          for (int v = 0; v < NV; ++v) acc[r][v] = hn::Add(acc[r][v], hn::LoadU(d, residual + r * ldr + v * kL));
      }
      if (cheap) ActivateCheapAll<MR * NV>(d, &acc[0][0], *t.act);
    }
    HWY_UNROLL(16)
    for (int r = 0; r < MR; ++r)
      HWY_UNROLL(16)
      for (int v = 0; v < NV; ++v) hn::StoreU(acc[r][v], d, c + r * ldc + v * kL);
    if (epi && !cheap)
      for (int r = 0; r < MR; ++r) ActivateSpan(d, c + r * ldc, NV * kL, *t.act);
    return;
  }
  // A partial tile (the last columns): through a buffer, so no load or store passes column n.
  HWY_ALIGN float buf[MR][NP * kPanel];
  HWY_ALIGN float bias[NP * kPanel] = {};
  if (epi && t.bias) std::memcpy(bias, t.bias, t.ncols * sizeof(float));
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < NV; ++v) hn::Store(acc[r][v], d, buf[r] + v * kL);
    if (t.accumulate)
      for (int64_t j = 0; j < t.ncols; ++j) buf[r][j] += t.c[r * t.ldc + j];
    if (epi && t.residual)
      for (int64_t j = 0; j < t.ncols; ++j) buf[r][j] += t.residual[r * t.ldr + j];
    if (epi)
      for (int v = 0; v < NV; ++v) {
        VF x = hn::Load(d, buf[r] + v * kL);
        if (t.bias) x = hn::Add(x, hn::Load(d, bias + v * kL));
        if (t.row_bias) x = hn::Add(x, hn::Set(d, t.row_bias[r]));
        if (cheap) x = ActivateCheap(d, x, *t.act);
        hn::Store(x, d, buf[r] + v * kL);
      }
    if (epi && !cheap) ActivateSpan(d, buf[r], t.ncols, *t.act);
    std::memcpy(t.c + r * t.ldc, buf[r], t.ncols * sizeof(float));
  }
}

using TileFn = void (*)(const TileArgs&);

// Tiles by (rows, panels): rows 1..kBigMR with 1..kBigNP panels, and rows 1..4 with up to
// SmallNP(rows) panels.
// (Indirect tiles: the same shapes.)
template <int MR, int NP, bool Indirect>
constexpr TileFn tile_at() {
  if constexpr ((MR <= kBigMR && NP <= kBigNP) || (MR <= 4 && NP <= SmallNP(MR))) return &Tile<MR, NP, Indirect>;
  else return nullptr;
}
template <int MR, bool Indirect, int... NPs>
constexpr void fill_row(TileFn* row, std::integer_sequence<int, NPs...>) {
  ((row[NPs] = tile_at<MR, NPs + 1, Indirect>()), ...);
}
template <bool Indirect>
struct TileTable {
  TileFn fn[12][8] = {};
  constexpr TileTable() {
    using S = std::make_integer_sequence<int, 8>;
    fill_row<1, Indirect>(fn[0], S());
    fill_row<2, Indirect>(fn[1], S());
    fill_row<3, Indirect>(fn[2], S());
    fill_row<4, Indirect>(fn[3], S());
    if constexpr (kBigMR >= 5) fill_row<5, Indirect>(fn[4], S());
    if constexpr (kBigMR >= 6) fill_row<6, Indirect>(fn[5], S());
    if constexpr (kBigMR >= 7) fill_row<7, Indirect>(fn[6], S());
    if constexpr (kBigMR >= 8) fill_row<8, Indirect>(fn[7], S());
    if constexpr (kBigMR >= 9) fill_row<9, Indirect>(fn[8], S());
    if constexpr (kBigMR >= 10) fill_row<10, Indirect>(fn[9], S());
    if constexpr (kBigMR >= 11) fill_row<11, Indirect>(fn[10], S());
    if constexpr (kBigMR >= 12) fill_row<12, Indirect>(fn[11], S());
  }
};
constexpr TileTable<false> kTiles;
constexpr TileTable<true> kIndirectTiles;
// A column-major, B packed: the large tile's shapes only (gemm_packed_cols gives few rows to
// gemm_packed).
template <int MR, int... NPs>
constexpr void fill_cols_row(TileFn* row, std::integer_sequence<int, NPs...>) {
  ((row[NPs] = &Tile<MR, NPs + 1, false, true>), ...);
}
template <int... MRs>
constexpr void fill_cols(TileFn (*fn)[kBigNP], std::integer_sequence<int, MRs...>) {
  (fill_cols_row<MRs + 1>(fn[MRs], std::make_integer_sequence<int, kBigNP>()), ...);
}
struct ColsTileTable {
  TileFn fn[kBigMR][kBigNP] = {};
  constexpr ColsTileTable() { fill_cols(fn, std::make_integer_sequence<int, kBigMR>()); }
};
constexpr ColsTileTable kColsTiles;

// Per-thread room for one slice of B packed (kBigNP panels of kBlockK rows), 64-byte aligned.
float* SliceBuffer() {
  thread_local hwy::AlignedFreeUniquePtr<float[]> buf;
  if (!buf) buf = hwy::AllocateAligned<float>(kBigNP * kPanel * kBlockK);
  return buf.get();
}

// The rows of the block that starts `left` rows before the end of its chunk: kBigMR, except
// that the last kBigMR + r rows, r < 2 kBigMR / 3, are two blocks of about equal rows (64 rows:
// 12 x 4 + 8 + 8, not 12 x 5 + 4): a block of few rows costs nearly what a full one does.
int64_t block_rows(int64_t left) {
  if (left > kBigMR && left < kBigMR + 2 * kBigMR / 3) return (left + 1) / 2;
  return std::min<int64_t>(kBigMR, left);
}

// B as the product reads it: packed panels (ldb 0), or row-major in place (row stride ldb) with
// its last, partial panel packed apart (`tail`, K rows of 16), so no load passes column n; or,
// with `koff`, row p at b + koff[p] (read up to column n rounded up to 16).
// A row-major (row stride lda), or column-major when `a_cols` (element (i, p) at a[p lda + i];
// B packed, m > 4).
void GemmImpl(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool a_cols, const float* b, int64_t ldb,
              const float* tail, const int64_t* koff, float* c, int64_t ldc, const Epilogue* ep) {
  struct {
    const float* b;
    int64_t ldb;
    const float* tail;
  } src{b, ldb, tail};
  if (m <= 0 || n <= 0) return;
  const int64_t panels = (n + kPanel - 1) / kPanel;
  const int64_t pstride = kPanel * k;
  const bool in_place = src.ldb > 0;
  const int64_t tail_panel = in_place && n % kPanel ? panels - 1 : -1;
  const Activation* act = &ep->act;
  if (k == 0) {  // an empty sum: C is 0 (or kept), then the epilogue
    std::vector<float> zero_a(static_cast<size_t>(m), 0.f);
    std::vector<float> zero_b(static_cast<size_t>(panels * kPanel), 0.f);
    GemmImpl(m, n, 1, zero_a.data(), 1, false, zero_b.data(), 0, nullptr, nullptr, c, ldc, ep);
    return;
  }
  // A tile of mr rows by np panels over B's rows [k0, k0 + kb).
  // Where B's rows [k0, ...) of `panel` (and the panels after it) are read.
  struct View {
    const float* b;
    int64_t pstride, kstride;
    const int64_t* koff;
  };
  auto view = [&](int64_t panel, int64_t k0) -> View {
    if (koff) return {src.b + panel * kPanel, kPanel, 0, koff + k0};
    if (!in_place) return {src.b + panel * pstride + k0 * kPanel, pstride, kPanel, nullptr};
    if (panel == tail_panel) return {src.tail + k0 * kPanel, pstride, kPanel, nullptr};
    return {src.b + k0 * src.ldb + panel * kPanel, kPanel, src.ldb, nullptr};
  };
  // The slice to prefetch while a tile runs (none: pf.rows 0).
  struct Prefetch {
    int64_t rows = 0;
    View v{};
  };
  // (`packed`: the slice as PackSlice left it, instead of B where view() says.)
  auto run_one = [&](int mr, int np, int64_t row, int64_t panel, int64_t k0, int64_t kb, const Prefetch& pf,
                     const View* packed = nullptr) {
    TileArgs t;
    t.kb = kb;
    t.a = a_cols ? a + k0 * lda + row : a + row * lda + k0;
    t.lda = lda;
    const View v = packed ? *packed : view(panel, k0);
    t.b = v.b;
    t.pstride = v.pstride;
    t.kstride = v.kstride;
    t.koff = v.koff;
    t.pf_rows = pf.rows;
    t.pf_b = pf.v.b;
    t.pf_pstride = pf.v.pstride;
    t.pf_kstride = pf.v.kstride;
    t.pf_koff = pf.v.koff;
    t.c = c + row * ldc + panel * kPanel;
    t.ldc = ldc;
    t.ncols = std::min<int64_t>(np * kPanel, n - panel * kPanel);
    t.accumulate = ep->accumulate || k0 > 0;
    t.last = k0 + kb == k;
    t.bias = ep->bias ? ep->bias + panel * kPanel : nullptr;
    t.row_bias = ep->row_bias ? ep->row_bias + row : nullptr;
    t.residual = ep->residual ? ep->residual + row * ep->ldr + panel * kPanel : nullptr;
    t.ldr = ep->ldr;
    t.act = act;
    if (a_cols) kColsTiles.fn[mr - 1][np - 1](t);
    else (koff ? kIndirectTiles.fn : kTiles.fn)[mr - 1][np - 1](t);
  };
  // Panels read in place never share a tile with the packed tail.
  auto run_tile = [&](int mr, int np, int64_t row, int64_t panel, int64_t k0, int64_t kb, const Prefetch& pf) {
    if (tail_panel >= 0 && panel < tail_panel && panel + np > tail_panel) {
      const int head = static_cast<int>(tail_panel - panel);
      run_one(mr, head, row, panel, k0, kb, pf);
      run_one(mr, np - head, row, tail_panel, k0, kb, pf);
      return;
    }
    run_one(mr, np, row, panel, k0, kb, pf);
  };
  if (m <= 4) {
    // Few rows: each task streams a group of panels over all of K once.
    const int mr = static_cast<int>(m);
    const int np_max = SmallNP(mr);
    const int64_t groups = (panels + np_max - 1) / np_max;
    const int64_t grain = std::max<int64_t>(1, 32768 / (k * np_max * kPanel + 1));
    parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t p0 = g * np_max;
        const int np = static_cast<int>(std::min<int64_t>(np_max, panels - p0));
        run_tile(mr, np, 0, p0, 0, k, Prefetch{});
      }
    });
    return;
  }
  // The rows [r0, r1) over one slice of B (panels p0.., rows [k0, k0 + kb)): blocks of rows
  // streaming past the slice (in L1 or L2), each asking into L2 its share of the next slice
  // (panels np0.., rows nk0..; none when np0 is past the last panel), so the next slice's first
  // block of rows does not wait on memory.
  auto run_slice = [&](int64_t p0, int64_t r0, int64_t r1, int64_t k0, int64_t np0, int64_t nk0) {
    if (r0 >= r1) return;  // a chunk of rows past m (the last chunks, split over threads)
    const int np = static_cast<int>(std::min<int64_t>(kBigNP, panels - p0));
    const int64_t kb = std::min(kBlockK, k - k0);
    const int64_t nblocks = (r1 - r0 + kBigMR - 1) / kBigMR;
    const int64_t nkb = np0 < panels ? std::min(kBlockK, k - nk0) : 0;
    const int64_t share = (nkb + nblocks - 1) / nblocks;
    // B read in place with rows not 64-byte aligned (n not a multiple of 16: 196 or 49 pixels)
    // is copied into packed panels once per slice when several blocks of rows read it: a
    // tile's row then spans three lines and its loads split across lines, a packed one two.
    View packed{};
    const bool pack = in_place && nblocks > 1 && src.ldb % kPanel != 0;
    if (pack) {
      float* buf = SliceBuffer();
      for (int q = 0; q < np; ++q) {
        float* dst = buf + q * kb * kPanel;
        if (p0 + q == tail_panel) {
          std::memcpy(dst, src.tail + k0 * kPanel, kb * kPanel * sizeof(float));
          continue;
        }
        const float* from = src.b + k0 * src.ldb + (p0 + q) * kPanel;
        for (int64_t p = 0; p < kb; ++p) std::memcpy(dst + p * kPanel, from + p * src.ldb, kPanel * sizeof(float));
      }
      packed = {buf, kb * kPanel, kPanel, nullptr};
    }
    for (int64_t i = 0, row = r0, mr = 0; row < r1; ++i, row += mr) {
      mr = block_rows(r1 - row);
      Prefetch pf;
      const int64_t f0 = std::min(nkb, i * share);
      pf.rows = std::min(nkb, f0 + share) - f0;
      if (pf.rows > 0) {
        pf.v = view(np0, nk0);
        if (pf.v.koff) pf.v.koff += f0;
        else pf.v.b += f0 * pf.v.kstride;
      }
      if (pack) run_one(static_cast<int>(mr), np, row, p0, k0, kb, pf, &packed);
      else run_tile(static_cast<int>(mr), np, row, p0, k0, kb, pf);
    }
  };
  const int64_t ntiles = (panels + kBigNP - 1) / kBigNP;
  const int64_t mblocks = (m + kBigMR - 1) / kBigMR;
  const int64_t fsize = sizeof(float);
  if (ntiles > 1 && m * k * fsize > kAInL2 && (k <= kBlockK || m * n * fsize <= kCInL2)) {
    // A larger than L2 (a deep convolution's weights and few pixels; a transformer's
    // down-projection): K in blocks outermost, and in each, chunks of rows whose block of A
    // stays in L2 while the column tiles pass, so A is read from memory once instead of once
    // per column tile (B once per chunk, C once per block of K).
    const int64_t want = std::max<int64_t>(1, kABlock / (kBlockK * int64_t{sizeof(float)} * kBigMR));
    // (At least as many chunks as the other order splits rows into for the pool's threads.)
    const int64_t achunks = std::max((mblocks + want - 1) / want, row_chunks(ntiles, mblocks));
    const int64_t per_chunk = (mblocks + achunks - 1) / achunks;  // blocks of rows per chunk
    // The tasks (chunk of rows, column tile) in one contiguous range per thread, each thread
    // passing over K in blocks over its own range: a task's tile of C stays in the L2 of the
    // thread that accumulates it over every block of K. (A fork per block of K handed the
    // tasks out afresh each time, and C's partial sums crossed between the cores' caches.)
    const int64_t tasks = achunks * ntiles;
    const int64_t parts = std::min<int64_t>(tasks, parallelism());
    parallel_for(parts, 1, [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t t0 = q * tasks / parts, t1 = (q + 1) * tasks / parts;
        for (int64_t k0 = 0; k0 < k; k0 += kBlockK)
          for (int64_t task = t0; task < t1; ++task) {
            const int64_t chunk = task / ntiles, tile = task % ntiles;
            const int64_t r0 = chunk * per_chunk * kBigMR, r1 = std::min(m, r0 + per_chunk * kBigMR);
            run_slice(tile * kBigNP, r0, r1, k0, tile + 1 < ntiles ? (tile + 1) * kBigNP : panels, k0);
          }
      }
    });
    return;
  }
  // Otherwise: tasks are (column tile, chunk of rows); in each, K in blocks whose B slice
  // stays in cache while the rows stream past it, B read from memory once. (Copying A's rows
  // side by side first, so a step's broadcasts read one cache line, cost more than it saved: a
  // transposing copy is slow next to the tile it feeds.)
  const int64_t mchunks = row_chunks(ntiles, mblocks);
  const int64_t blocks_per_chunk = (mblocks + mchunks - 1) / mchunks;
  const int64_t tasks = ntiles * mchunks;
  const int64_t work = m * k * kBigNP * kPanel / std::max<int64_t>(mchunks, 1);
  const int64_t grain = std::max<int64_t>(1, 65536 / (work + 1));
  auto run_tasks = [&](int64_t t0, int64_t t1) {
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t tile = task / mchunks, chunk = task % mchunks;
      const int64_t p0 = tile * kBigNP;
      const int64_t r0 = chunk * blocks_per_chunk * kBigMR, r1 = std::min(m, r0 + blocks_per_chunk * kBigMR);
      for (int64_t k0 = 0; k0 < k; k0 += kBlockK) {
        // The next slice: this tile's next block of K, or the next tile's first.
        if (k0 + kBlockK < k) run_slice(p0, r0, r1, k0, p0, k0 + kBlockK);
        else run_slice(p0, r0, r1, k0, p0 + kBigNP, 0);
      }
    }
  };
  const int64_t parts = parallelism();
  if ((in_place || koff) && mchunks == 1 && k <= kBlockK && m > kBigMR && m * n * fsize > kCInL2) {
    // One block of K over a large image read in place or through offsets (a pointwise
    // convolution of few input channels, a stem's, its C past L2): each thread's column tiles
    // (one contiguous range of pixels) swept per block of rows, so C is written as kBigMR
    // streams at a time instead of all m rows' at once (mobilenet_v3's 16 -> 64 channels over
    // 112 x 112: 250-290 -> 190 us at 2 threads, 360 -> 340 at 1; resnet50's 7 x 7 stem
    // 2.63 -> 2.51 ms at 1 thread). The tiles and their sums are the same.
    // The range in groups of tiles whose B (about kBGroup bytes) stays in L2 while every block
    // of rows passes over it, so B is read from memory once, not once per block of rows
    // (resnet50's 64 -> 256 channels over 56 x 56 with its residual, alone, caches flushed, one
    // core of an AMD EPYC: medians of 5 alternations 1.43 -> 1.31 ms; in the network within
    // the machine's spread).
    const int64_t group = std::max<int64_t>(1, kBGroup / (k * kBigNP * kPanel * fsize));
    parallel_for(parts, 1, [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t c0 = q * ntiles / parts, c1 = (q + 1) * ntiles / parts;
        for (int64_t g0 = c0; g0 < c1; g0 += group) {
          const int64_t g1 = std::min(c1, g0 + group);
          for (int64_t row = 0, mr = 0; row < m; row += mr) {
            mr = block_rows(m - row);
            for (int64_t tile = g0; tile < g1; ++tile)
              run_slice(tile * kBigNP, row, row + mr, 0, tile + 1 < g1 ? (tile + 1) * kBigNP : panels, 0);
          }
        }
      }
    });
    return;
  }
  parallel_for(tasks, grain, run_tasks);
}

// y[j0, j0 + NV lanes) (+)= a B over those columns, held in NV registers.
template <int NV>
HWY_INLINE void GemvRowsBlock(int64_t k, const float* a, const float* b, int64_t ldb, float* y, bool accumulate) {
  const DF d;
  VF acc[NV];
  HWY_UNROLL(8)
  for (int v = 0; v < NV; ++v) acc[v] = accumulate ? hn::LoadU(d, y + v * kL) : hn::Zero(d);
  for (int64_t p = 0; p < k; ++p) {
    const VF ap = hn::Set(d, a[p]);
    const float* row = b + p * ldb;
    HWY_UNROLL(8)
    for (int v = 0; v < NV; ++v) acc[v] = hn::MulAdd(ap, hn::LoadU(d, row + v * kL), acc[v]);
  }
  HWY_UNROLL(8)
  for (int v = 0; v < NV; ++v) hn::StoreU(acc[v], d, y + v * kL);
}

// y[0, n) (+)= a[0, k) B, B row-major k x n (row stride ldb): rows of B added in, a block of
// up to 8 vectors of columns held in registers; the last columns (fewer than a vector) scalar.
void GemvRowsImpl(int64_t n, int64_t k, const float* a, const float* b, int64_t ldb, float* y, bool accumulate) {
  constexpr int64_t kCols = 8 * kL;
  parallel_for((n + kCols - 1) / kCols, std::max<int64_t>(1, 16384 / (k * kCols + 1)), [&](int64_t c0, int64_t c1) {
    for (int64_t cb = c0; cb < c1; ++cb) {
      const int64_t j0 = cb * kCols, cols = std::min(kCols, n - j0);
      const float* bj = b + j0;
      float* yj = y + j0;
      switch (cols / kL) {
        case 8: GemvRowsBlock<8>(k, a, bj, ldb, yj, accumulate); break;
        case 7: GemvRowsBlock<7>(k, a, bj, ldb, yj, accumulate); break;
        case 6: GemvRowsBlock<6>(k, a, bj, ldb, yj, accumulate); break;
        case 5: GemvRowsBlock<5>(k, a, bj, ldb, yj, accumulate); break;
        case 4: GemvRowsBlock<4>(k, a, bj, ldb, yj, accumulate); break;
        case 3: GemvRowsBlock<3>(k, a, bj, ldb, yj, accumulate); break;
        case 2: GemvRowsBlock<2>(k, a, bj, ldb, yj, accumulate); break;
        case 1: GemvRowsBlock<1>(k, a, bj, ldb, yj, accumulate); break;
        default: break;
      }
      for (int64_t j = cols / kL * kL; j < cols; ++j) {
        float s = accumulate ? yj[j] : 0.f;
        for (int64_t p = 0; p < k; ++p) s += a[p] * bj[p * ldb + j];
        yj[j] = s;
      }
    }
  });
}

// y[j] (+)= dot(a, B[j, 0:k)) for j < n, B row-major n x k: four rows at a time.
void GemvDotsImpl(int64_t n, int64_t k, const float* a, const float* b, int64_t ldb, float* y, bool accumulate) {
  const DF d;
  parallel_for((n + 3) / 4, std::max<int64_t>(1, 16384 / (4 * k + 1)), [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t j0 = q * 4, rows = std::min<int64_t>(4, n - j0);
      VF acc[4] = {hn::Zero(d), hn::Zero(d), hn::Zero(d), hn::Zero(d)};
      int64_t p = 0;
      for (; p + kL <= k; p += kL) {
        const VF av = hn::LoadU(d, a + p);
        HWY_UNROLL(8)
        for (int r = 0; r < 4; ++r)
          if (r < rows) acc[r] = hn::MulAdd(av, hn::LoadU(d, b + (j0 + r) * ldb + p), acc[r]);
      }
      for (int r = 0; r < rows; ++r) {
        float s = hn::GetLane(hn::SumOfLanes(d, acc[r]));
        for (int64_t pp = p; pp < k; ++pp) s += a[pp] * b[(j0 + r) * ldb + pp];
        y[j0 + r] = accumulate ? y[j0 + r] + s : s;
      }
    }
  });
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace onyx::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace onyx::cpu {

HWY_EXPORT(GemmImpl);
HWY_EXPORT(GemvRowsImpl);
HWY_EXPORT(GemvDotsImpl);
HWY_EXPORT(TargetName);

int64_t packed_size(int64_t k, int64_t n) { return (n + kPanel - 1) / kPanel * kPanel * k; }

void pack_b(const float* b, int64_t ldb, bool trans, int64_t k, int64_t n, float* packed) {
  const int64_t panels = (n + kPanel - 1) / kPanel;
  // Panels split over the pool: packing an operand per call is part of that call's work.
  parallel_for(panels, std::max<int64_t>(1, 8192 / (k * kPanel + 1)), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      float* dst = packed + p * kPanel * k;
      const int64_t j0 = p * kPanel, cols = std::min(kPanel, n - j0);
      if (!trans && cols == kPanel) {  // whole panels: fixed-size row copies, inlined
        for (int64_t r = 0; r < k; ++r) std::memcpy(dst + r * kPanel, b + r * ldb + j0, kPanel * sizeof(float));
        continue;
      }
      for (int64_t r = 0; r < k; ++r) {
        float* row = dst + r * kPanel;
        if (trans)
          for (int64_t j = 0; j < cols; ++j) row[j] = b[(j0 + j) * ldb + r];
        else
          std::memcpy(row, b + r * ldb + j0, cols * sizeof(float));
        for (int64_t j = cols; j < kPanel; ++j) row[j] = 0.f;
      }
    }
  });
}

void gemm_packed(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* packed_b, float* c,
                 int64_t ldc, const Epilogue& ep) {
  HWY_DYNAMIC_DISPATCH(GemmImpl)(m, n, k, a, lda, false, packed_b, 0, nullptr, nullptr, c, ldc, &ep);
}

namespace {
// Per-thread scratch for operands packed or transposed per call: grows, never shrinks, so a
// planned run allocates nothing once its shapes have run once.
float* scratch(std::vector<float>& v, int64_t floats) {
  if (static_cast<int64_t>(v.size()) < floats) v.resize(static_cast<size_t>(floats));
  return v.data();
}
thread_local std::vector<float> t_packed, t_a, t_out;
}  // namespace

bool conv_panels_pay(int64_t m, int64_t k) {
  return m % kPanel == 0 && k > 0 && m * k * int64_t{sizeof(float)} >= (int64_t{4} << 20);
}

bool conv_panels_pay_for(int64_t m, int64_t k, int64_t pixels) {
  return m % kPanel == 0 && pixels > 0 &&
         (pixels <= 64 || (pixels <= 256 && k >= 2 * m && m * k * int64_t{sizeof(float)} > (int64_t{512} << 10)));
}

void gemm_packed_cols(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* packed_b, float* c,
                      int64_t ldc, const Epilogue& ep) {
  if (m <= 0 || n <= 0) return;
  if (m <= 4) {  // few rows (pixels): gathered row-major for the few-row tiles
    float* at = scratch(t_a, m * k);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) at[i * k + p] = a[p * lda + i];
    gemm_packed(m, n, k, at, k, packed_b, c, ldc, ep);
    return;
  }
  HWY_DYNAMIC_DISPATCH(GemmImpl)(m, n, k, a, lda, true, packed_b, 0, nullptr, nullptr, c, ldc, &ep);
}

void gemm_indirect(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, const int64_t* koff,
                   float* c, int64_t ldc, const Epilogue& ep) {
  HWY_DYNAMIC_DISPATCH(GemmImpl)(m, n, k, a, lda, false, b, 0, nullptr, koff, c, ldc, &ep);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
          int64_t ldb, float* c, int64_t ldc, const Epilogue& ep) {
  if (m <= 0 || n <= 0) return;
  if (trans_a) {  // A given as k x m: rows of op(A) gathered once
    float* at = scratch(t_a, m * k);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) at[i * k + p] = a[p * lda + i];
    a = at;
    lda = k;
  }
  if (m == 1 && k > 0) {
    if (trans_b) HWY_DYNAMIC_DISPATCH(GemvDotsImpl)(n, k, a, b, ldb, c, ep.accumulate);
    else HWY_DYNAMIC_DISPATCH(GemvRowsImpl)(n, k, a, b, ldb, c, ep.accumulate);
    if (ep.bias || ep.row_bias || ep.residual) {
      for (int64_t j = 0; j < n; ++j)
        c[j] += (ep.bias ? ep.bias[j] : 0.f) + (ep.row_bias ? ep.row_bias[0] : 0.f) + (ep.residual ? ep.residual[j] : 0.f);
    }
    if (ep.act.kind != Act::kNone) activate(c, c, n, ep.act);
    return;
  }
  if (n == 1 && k > 0 && !ep.accumulate) {
    // One column (a convolution over a 1 x 1 image: squeeze-and-excitation): dot products of
    // A's rows with B's column, instead of a packed panel 16 times wider than needed.
    const float* col = b;
    if (!trans_b && ldb != 1) {
      float* g = scratch(t_packed, k);
      for (int64_t p = 0; p < k; ++p) g[p] = b[p * ldb];
      col = g;
    }
    float* out = c;
    if (ldc != 1) out = scratch(t_out, m);
    HWY_DYNAMIC_DISPATCH(GemvDotsImpl)(m, k, col, a, lda, out, false);
    for (int64_t i = 0; i < m; ++i) {
      float v = out[i] + (ep.bias ? ep.bias[0] : 0.f) + (ep.row_bias ? ep.row_bias[i] : 0.f) +
                (ep.residual ? ep.residual[i * ep.ldr] : 0.f);
      out[i] = v;
    }
    if (ep.act.kind != Act::kNone) activate(out, out, m, ep.act);
    if (out != c)
      for (int64_t i = 0; i < m; ++i) c[i * ldc] = out[i];
    return;
  }
  if (!trans_b && ldb % 1024 != 0 && k * n >= (int64_t{1} << 16)) {
    // A large B read in place, its last partial panel packed apart: packing would copy it all
    // (a pointwise convolution's image). Small ones (attention's per-head operands) are
    // packed: measured faster there. Rows 4 KiB apart would share L1 sets: those are packed.
    const float* tail = nullptr;
    if (n % kPanel) {
      float* t = scratch(t_packed, kPanel * k);
      const int64_t j0 = n / kPanel * kPanel;
      for (int64_t p = 0; p < k; ++p) {
        for (int64_t j = 0; j < kPanel; ++j) t[p * kPanel + j] = j0 + j < n ? b[p * ldb + j0 + j] : 0.f;
      }
      tail = t;
    }
    HWY_DYNAMIC_DISPATCH(GemmImpl)(m, n, k, a, lda, false, b, ldb, tail, nullptr, c, ldc, &ep);
    return;
  }
  float* pb = scratch(t_packed, packed_size(k, n));
  pack_b(b, ldb, trans_b, k, n, pb);
  gemm_packed(m, n, k, a, lda, pb, c, ldc, ep);
}

const char* simd_target() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

void force_simd_targets_for_test(int64_t mask) {
  hwy::SetSupportedTargetsForTest(mask);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

}  // namespace onyx::cpu
#endif  // HWY_ONCE
