// The 8-bit product (int8_gemm.h) with AVX-512 VNNI intrinsics; the functions that use them carry
// their target, so this file builds for the baseline and runs them only where has_int8_dot().
//
// VPDPBUSD multiplies unsigned bytes by signed bytes, so both operands are shifted into those
// types first (int8 A: a + 128; uint8 B: b - 128) and the shifts and zero points are taken out
// after the sum, exactly, with the operands' row and column sums:
//   sum (a - za)(b - zb) = S + RA (cb - zb) - (ca + za) (CB + k (cb - zb))
// where a = au - ca, b = bs + cb, S = sum au bs, RA = sum au (per row), CB = sum bs (per column).
// Everything is modulo 2^32, as the reference's int32 sums are.
//
// B is packed per call into panels of 16 columns: for each group of 4 rows of K, 16 columns x 4
// bytes (one 64-byte vector, the 4 bytes of a lane being the 4 rows); A is copied with K padded
// to a multiple of 4, so a broadcast of 4 bytes is a lane's 4 rows. A register tile of up to 12
// rows by 2 panels (24 int32 accumulators) or, for up to 4 rows, 4 panels, runs over all of K.
#include "cpu/int8_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/thread_pool.h"

#define ONYX_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

namespace onyx::cpu {

bool has_int8_dot() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return yes;
}

namespace {

constexpr int64_t kCols = 16;       // columns per panel: one vector of int32 lanes
constexpr int64_t kGroupBytes = 64;  // one group of 4 rows of a panel
constexpr int kBigMR = 12, kBigNP = 2, kSmallNP = 4;

struct TileArgs {
  const uint8_t* a;  // the tile's first row of the shifted A (row stride lda bytes)
  int64_t lda;
  const int8_t* b;  // the tile's first panel of the packed B
  int64_t pstride;  // bytes between panels
  int64_t groups;   // groups of 4 rows of K
  int32_t* c;       // C at the tile's first element
  int64_t ldc;
  int64_t ncols;           // valid columns of the tile
  const int32_t* row_sum;  // RA, at the tile's first row
  const int32_t* row_off;  // ca + za
  const int32_t* col_off;  // cb - zb, at the tile's first column (padded to whole panels)
  const int32_t* col_term; // CB + k (cb - zb)
};

template <int MR, int NP>
ONYX_VNNI void Tile(const TileArgs& t) {
  __m512i acc[MR][NP];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NP; ++v) acc[r][v] = _mm512_setzero_si512();
  const uint8_t* a = t.a;
  const int8_t* b = t.b;
  for (int64_t g = 0; g < t.groups; ++g) {
    __m512i bv[NP];
#pragma GCC unroll 4
    for (int v = 0; v < NP; ++v) bv[v] = _mm512_loadu_si512(b + v * t.pstride + g * kGroupBytes);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      int32_t four;
      std::memcpy(&four, a + r * t.lda + g * 4, sizeof four);
      const __m512i av = _mm512_set1_epi32(four);
#pragma GCC unroll 4
      for (int v = 0; v < NP; ++v) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], av, bv[v]);
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < NP; ++v) {
    const int64_t valid = std::clamp<int64_t>(t.ncols - v * kCols, 0, kCols);
    if (valid == 0) break;
    const __mmask16 mask = valid == kCols ? __mmask16(0xFFFF) : __mmask16((1u << valid) - 1);
    const __m512i co = _mm512_loadu_si512(t.col_off + v * kCols);
    const __m512i ct = _mm512_loadu_si512(t.col_term + v * kCols);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      __m512i x = _mm512_add_epi32(acc[r][v], _mm512_mullo_epi32(_mm512_set1_epi32(t.row_sum[r]), co));
      x = _mm512_sub_epi32(x, _mm512_mullo_epi32(_mm512_set1_epi32(t.row_off[r]), ct));
      _mm512_mask_storeu_epi32(t.c + r * t.ldc + v * kCols, mask, x);
    }
  }
}

using TileFn = void (*)(const TileArgs&);

template <int MR>
constexpr TileFn tile_for(int np) {
  switch (np) {
    case 1: return &Tile<MR, 1>;
    case 2: return &Tile<MR, 2>;
    case 3: if constexpr (MR <= 4) return &Tile<MR, 3>; else return nullptr;
    case 4: if constexpr (MR <= 4) return &Tile<MR, 4>; else return nullptr;
  }
  return nullptr;
}

TileFn tile(int mr, int np) {
  switch (mr) {
    case 1: return tile_for<1>(np);
    case 2: return tile_for<2>(np);
    case 3: return tile_for<3>(np);
    case 4: return tile_for<4>(np);
    case 5: return tile_for<5>(np);
    case 6: return tile_for<6>(np);
    case 7: return tile_for<7>(np);
    case 8: return tile_for<8>(np);
    case 9: return tile_for<9>(np);
    case 10: return tile_for<10>(np);
    case 11: return tile_for<11>(np);
    case 12: return tile_for<12>(np);
  }
  return nullptr;
}

// The operands in the kernel's form, per thread and reused across calls.
struct Scratch {
  std::vector<uint8_t> a;
  std::vector<int8_t> b;
  std::vector<int32_t> row_sum, row_off, col_off, col_term;
};

template <class T>
void pack_a(const T* a, int64_t lda, int64_t m, int64_t k, int64_t kp, const int32_t* za, int32_t ca, Scratch& s) {
  s.a.assign(static_cast<size_t>(m * kp), 0);
  s.row_sum.resize(static_cast<size_t>(m));
  s.row_off.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    uint8_t* dst = s.a.data() + i * kp;
    const T* src = a + i * lda;
    uint32_t sum = 0;
    for (int64_t q = 0; q < k; ++q) {
      const uint8_t u = static_cast<uint8_t>(static_cast<int32_t>(src[q]) + ca);  // int8: + 128
      dst[q] = u;
      sum += u;
    }
    s.row_sum[i] = static_cast<int32_t>(sum);
    s.row_off[i] = static_cast<int32_t>(static_cast<uint32_t>(ca) + static_cast<uint32_t>(za ? za[i] : 0));
  }
}

// Four rows of 16 bytes (one panel's columns) as the kernel's 64-byte group: column c's lane
// holds rows 0..3 of that column. `flip` (0x80 for uint8) turns uint8 into int8 minus 128.
// Returns the group; its lanes' sums (per column) are added to `sums`.
ONYX_VNNI inline __m512i interleave4(const void* r0, const void* r1, const void* r2, const void* r3, __m128i flip,
                                     __m512i& sums) {
  const __m128i a = _mm_xor_si128(_mm_loadu_si128(static_cast<const __m128i*>(r0)), flip);
  const __m128i b = _mm_xor_si128(_mm_loadu_si128(static_cast<const __m128i*>(r1)), flip);
  const __m128i c = _mm_xor_si128(_mm_loadu_si128(static_cast<const __m128i*>(r2)), flip);
  const __m128i d = _mm_xor_si128(_mm_loadu_si128(static_cast<const __m128i*>(r3)), flip);
  const __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b);
  const __m128i cd_lo = _mm_unpacklo_epi8(c, d), cd_hi = _mm_unpackhi_epi8(c, d);
  __m512i g = _mm512_castsi128_si512(_mm_unpacklo_epi16(ab_lo, cd_lo));  // columns 0-3
  g = _mm512_inserti32x4(g, _mm_unpackhi_epi16(ab_lo, cd_lo), 1);         // 4-7
  g = _mm512_inserti32x4(g, _mm_unpacklo_epi16(ab_hi, cd_hi), 2);         // 8-11
  g = _mm512_inserti32x4(g, _mm_unpackhi_epi16(ab_hi, cd_hi), 3);         // 12-15
  sums = _mm512_dpbusd_epi32(sums, _mm512_set1_epi8(1), g);  // 1 x each signed byte, 4 per lane
  return g;
}

// Panel p of B packed (zeros past B), with its columns' offsets for the epilogue.
template <class T>
ONYX_VNNI void pack_panel(const T* b, int64_t ldb, int64_t k, int64_t n, int64_t groups, int64_t p,
                          const int32_t* zb, int32_t cb, Scratch& s) {
  const __m128i flip = _mm_set1_epi8(static_cast<char>(cb));  // cb is 0 or 128
  const int64_t j0 = p * kCols, cols = std::min(kCols, n - j0);
  int8_t* panel = s.b.data() + p * groups * kGroupBytes;
  __m512i sums = _mm512_setzero_si512();
  int64_t g = 0;
  if (cols == kCols) {  // whole groups of whole columns: four 16-byte rows interleaved
    for (; 4 * g + 4 <= k; ++g) {
      const T* row = b + 4 * g * ldb + j0;
      _mm512_storeu_si512(panel + g * kGroupBytes, interleave4(row, row + ldb, row + 2 * ldb, row + 3 * ldb, flip, sums));
    }
  }
  alignas(64) uint32_t lane_sums[kCols];
  _mm512_store_si512(lane_sums, sums);
  // The rest (the last rows, or a panel of fewer columns), one byte at a time; zeros past B.
  std::memset(panel + g * kGroupBytes, 0, static_cast<size_t>((groups - g) * kGroupBytes));
  for (int64_t q = 4 * g; q < k; ++q) {
    const T* row = b + q * ldb + j0;
    int8_t* dst = panel + (q / 4) * kGroupBytes + (q % 4);
    for (int64_t c = 0; c < cols; ++c) {
      const int8_t v = static_cast<int8_t>(static_cast<int32_t>(row[c]) - cb);  // uint8: - 128
      dst[c * 4] = v;
      lane_sums[c] += static_cast<uint32_t>(static_cast<int32_t>(v));
    }
  }
  for (int64_t c = 0; c < cols; ++c) {
    const uint32_t off = static_cast<uint32_t>(cb) - static_cast<uint32_t>(zb ? zb[j0 + c] : 0);
    s.col_off[j0 + c] = static_cast<int32_t>(off);
    s.col_term[j0 + c] = static_cast<int32_t>(lane_sums[c] + static_cast<uint32_t>(k) * off);
  }
}

template <class T>
void pack_b(const T* b, int64_t ldb, int64_t k, int64_t n, int64_t groups, int64_t panels, const int32_t* zb,
            int32_t cb, Scratch& s) {
  s.b.resize(static_cast<size_t>(panels * groups * kGroupBytes));
  s.col_off.assign(static_cast<size_t>(panels * kCols), 0);
  s.col_term.assign(static_cast<size_t>(panels * kCols), 0);
  parallel_for(panels, std::max<int64_t>(1, 16384 / (k * kCols + 1)), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) pack_panel(b, ldb, k, n, groups, p, zb, cb, s);
  });
}

}  // namespace

void gemm_int8(int64_t m, int64_t n, int64_t k, const Int8Operand& a, const Int8Operand& b, int32_t* c,
               int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  // The calling thread's buffers, named through a reference: inside the lambdas below a
  // thread_local's own name would mean the running worker's (empty) copy.
  thread_local Scratch scratch;
  Scratch& s = scratch;
  const int64_t groups = (k + 3) / 4, kp = groups * 4;
  const int64_t panels = (n + kCols - 1) / kCols;
  const int32_t ca = a.is_signed ? 128 : 0, cb = b.is_signed ? 0 : 128;
  if (a.is_signed) pack_a(static_cast<const int8_t*>(a.data), a.ld, m, k, kp, a.zero, ca, s);
  else pack_a(static_cast<const uint8_t*>(a.data), a.ld, m, k, kp, a.zero, ca, s);
  if (b.is_signed) pack_b(static_cast<const int8_t*>(b.data), b.ld, k, n, groups, panels, b.zero, cb, s);
  else pack_b(static_cast<const uint8_t*>(b.data), b.ld, k, n, groups, panels, b.zero, cb, s);

  const int64_t pstride = groups * kGroupBytes;
  auto run = [&](int mr, int np, int64_t row, int64_t panel) {
    TileArgs t;
    t.a = s.a.data() + row * kp;
    t.lda = kp;
    t.b = s.b.data() + panel * pstride;
    t.pstride = pstride;
    t.groups = groups;
    t.c = c + row * ldc + panel * kCols;
    t.ldc = ldc;
    t.ncols = std::min<int64_t>(np * kCols, n - panel * kCols);
    t.row_sum = s.row_sum.data() + row;
    t.row_off = s.row_off.data() + row;
    t.col_off = s.col_off.data() + panel * kCols;
    t.col_term = s.col_term.data() + panel * kCols;
    tile(mr, np)(t);
  };
  if (m <= 4) {  // few rows: each task streams 4 panels over all of K
    const int64_t tasks = (panels + kSmallNP - 1) / kSmallNP;
    parallel_for(tasks, std::max<int64_t>(1, 65536 / (k * kSmallNP * kCols + 1)), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t p0 = t * kSmallNP;
        run(static_cast<int>(m), static_cast<int>(std::min<int64_t>(kSmallNP, panels - p0)), 0, p0);
      }
    });
    return;
  }
  // Tasks are (column tile, chunk of row blocks); a tile's panels (groups x 128 bytes) stay in
  // cache while the chunk's rows pass over them.
  const int64_t ntiles = (panels + kBigNP - 1) / kBigNP;
  const int64_t mblocks = (m + kBigMR - 1) / kBigMR;
  const int64_t mchunks = row_chunks(ntiles, mblocks);
  const int64_t per_chunk = (mblocks + mchunks - 1) / mchunks;
  const int64_t work = per_chunk * kBigMR * k * kBigNP * kCols;
  parallel_for(ntiles * mchunks, std::max<int64_t>(1, 262144 / (work + 1)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t tile_no = t / mchunks, chunk = t % mchunks;
      const int64_t p0 = tile_no * kBigNP;
      const int np = static_cast<int>(std::min<int64_t>(kBigNP, panels - p0));
      const int64_t r0 = chunk * per_chunk * kBigMR, r1 = std::min(m, r0 + per_chunk * kBigMR);
      for (int64_t row = r0; row < r1; row += kBigMR) run(static_cast<int>(std::min<int64_t>(kBigMR, r1 - row)), np, row, p0);
    }
  });
}

}  // namespace onyx::cpu
