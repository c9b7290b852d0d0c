// The vectorized CPU kernels (src/cpu) against float64 references, on every SIMD target this
// machine runs (AVX-512, AVX2, the portable 128-bit one), at sizes that leave tails of every
// vector width and register tile; and the intra-op thread pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cpu/activation.h"
#include "cpu/conv.h"
#include "cpu/gemm.h"
#include "cpu/int8_gemm.h"
#include "cpu/rowwise.h"
#include "cpu/thread_pool.h"
#include "hwy/targets.h"

namespace onyx::cpu {
namespace {

std::vector<float> random_floats(size_t n, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// B's k rows of n (b, row-major) each placed at a random offset (0-15) of one buffer, row p at
// koff[p]: a convolution's shifted views of its image, for gemm_indirect.
std::vector<float> scatter_rows(const std::vector<float>& b, int64_t k, int64_t n, std::mt19937& rng,
                                std::vector<int64_t>& koff) {
  const int64_t stride = n + 16;
  std::vector<float> buf(k * stride + 16, 0.f);
  koff.resize(k);
  for (int64_t p = 0; p < k; ++p) {
    koff[p] = p * stride + std::uniform_int_distribution<int64_t>(0, 15)(rng);
    std::copy(b.begin() + p * n, b.begin() + (p + 1) * n, buf.begin() + koff[p]);
  }
  return buf;
}

// The targets to run each test on: those the CPU supports among AVX3, AVX2 and EMU128.
std::vector<int64_t> targets() {
  std::vector<int64_t> out;
  for (int64_t t : {int64_t(HWY_AVX3), int64_t(HWY_AVX2), int64_t(HWY_EMU128)})
    if (hwy::SupportedTargets() & t) out.push_back(t);
  return out;
}

struct ForceTarget {
  explicit ForceTarget(int64_t t) { force_simd_targets_for_test(t); }
  ~ForceTarget() { force_simd_targets_for_test(0); }
};

// C = act(A B + bias (+ C0)) in double.
std::vector<double> reference_gemm(int64_t m, int64_t n, int64_t k, const std::vector<float>& a,
                                   const std::vector<float>& b, const float* bias, const std::vector<float>* c0,
                                   const Activation& act, std::vector<double>* magnitude,
                                   const float* row_bias = nullptr, const float* residual = nullptr) {
  std::vector<double> c(static_cast<size_t>(m * n));
  magnitude->assign(c.size(), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        s += double(a[i * k + p]) * b[p * n + j];
        mag += std::fabs(double(a[i * k + p]) * b[p * n + j]);
      }
      if (c0) s += (*c0)[i * n + j], mag += std::fabs((*c0)[i * n + j]);
      if (bias) s += bias[j], mag += std::fabs(bias[j]);
      if (row_bias) s += row_bias[i], mag += std::fabs(row_bias[i]);
      if (residual) s += residual[i * n + j], mag += std::fabs(residual[i * n + j]);
      c[i * n + j] = activate_reference(static_cast<float>(s), act);
      (*magnitude)[i * n + j] = mag;
    }
  return c;
}

// gemm_packed over fresh random operands, with the epilogue's terms asked for, against the
// float64 reference (each output within 1e-6 of its terms' magnitude).
void expect_gemm_packed_matches(int64_t m, int64_t n, int64_t k, const Activation& act, bool accumulate,
                                bool with_bias, bool with_row_bias, bool with_residual, std::mt19937& rng) {
  auto a = random_floats(m * k, rng), b = random_floats(k * n, rng), bias = random_floats(n, rng);
  auto row_bias = random_floats(m, rng), residual = random_floats(m * n, rng), c0 = random_floats(m * n, rng);
  std::vector<float> packed(packed_size(k, n)), c = c0;
  pack_b(b.data(), n, false, k, n, packed.data());
  Epilogue ep;
  ep.bias = with_bias ? bias.data() : nullptr;
  ep.row_bias = with_row_bias ? row_bias.data() : nullptr;
  ep.residual = with_residual ? residual.data() : nullptr;
  ep.ldr = n;
  ep.act = act;
  ep.accumulate = accumulate;
  gemm_packed(m, n, k, a.data(), k, packed.data(), c.data(), n, ep);
  std::vector<double> mag;
  auto want = reference_gemm(m, n, k, a, b, ep.bias, accumulate ? &c0 : nullptr, act, &mag, ep.row_bias, ep.residual);
  for (size_t i = 0; i < c.size(); ++i)
    ASSERT_NEAR(c[i], want[i], 1e-6 * mag[i] + 1e-6)
        << "m " << m << " k " << k << " n " << n << " act " << act_name(act.kind) << " accumulate " << accumulate
        << " bias " << with_bias << " row bias " << with_row_bias << " residual " << with_residual << " at " << i;
}

TEST(CpuGemm, PackedMatchesFloat64OnEveryTargetAndTail) {
  std::mt19937 rng(7);
  const Activation acts[] = {{Act::kNone}, {Act::kRelu}, {Act::kGelu}, {Act::kClip, -0.5f, 0.25f}};
  for (int64_t target : targets()) {
    ForceTarget force(target);
    SCOPED_TRACE(simd_target());
    int case_no = 0;
    for (int64_t m : {1, 2, 3, 4, 5, 7, 13, 25})
      for (int64_t k : {int64_t{1}, int64_t{7}, int64_t{16}, kBlockK + 44})  // the last: two blocks of K
        for (int64_t n : {1, 15, 16, 17, 33, 70}) {
          const Activation act = acts[case_no % 4];
          const bool with_bias = case_no % 3 != 0, accumulate = case_no % 5 == 0;
          ++case_no;
          const bool with_row_bias = case_no % 4 == 1, with_residual = case_no % 7 == 3;
          expect_gemm_packed_matches(m, n, k, act, accumulate, with_bias, with_row_bias, with_residual, rng);
          if (testing::Test::HasFatalFailure()) return;
        }
  }
}

TEST(CpuGemm, FullTilesApplyEveryTermAndCheapActivation) {
  // Whole register tiles (rows and columns multiples of the large tile's) take the epilogue
  // that runs as passes over the registers: each cheap activation, with every combination of
  // accumulate, column bias, row bias and residual, K of one pass and of two.
  std::mt19937 rng(17);
  const Activation acts[] = {{Act::kNone},          {Act::kRelu},      {Act::kLeakyRelu, 0.1f},
                             {Act::kClip, -0.5f, 0.25f}, {Act::kHardSigmoid, 0.2f, 0.5f}, {Act::kHardSwish}};
  for (int64_t target : targets()) {
    ForceTarget force(target);
    SCOPED_TRACE(simd_target());
    for (const Activation& act : acts)
      for (int terms = 0; terms < 16; ++terms)
        for (int64_t k : {24, 300}) {
          expect_gemm_packed_matches(24, 64, k, act, terms & 1, terms & 2, terms & 4, terms & 8, rng);
          if (testing::Test::HasFatalFailure()) return;
        }
  }
}

TEST(CpuGemm, IndirectRowsMatchFloat64) {
  // B's rows found through offsets into one buffer (a stride-1 convolution's shifted views of
  // its padded image, here also random and overlapping), read up to n rounded up to 16.
  std::mt19937 rng(17);
  const Activation acts[] = {{Act::kNone}, {Act::kRelu}, {Act::kHardSwish}, {Act::kGelu}};
  for (int64_t target : targets()) {
    ForceTarget force(target);
    SCOPED_TRACE(simd_target());
    int case_no = 0;
    for (int64_t m : {1, 3, 5, 12, 13, 29})
      for (int64_t k : {int64_t{1}, int64_t{9}, int64_t{27}, kBlockK + 44})
        for (int64_t n : {1, 16, 17, 45, 100}) {
          const Activation act = acts[case_no % 4];
          const bool with_row_bias = case_no % 3 != 1;
          ++case_no;
          const int64_t span = 3 * n + 40, readable = (n + 15) / 16 * 16;
          auto buf = random_floats(span + readable, rng);
          std::vector<int64_t> koff(k);
          for (int64_t p = 0; p < k; ++p) koff[p] = std::uniform_int_distribution<int64_t>(0, span)(rng);
          std::vector<float> b(k * n);  // the same rows, gathered, for the reference
          for (int64_t p = 0; p < k; ++p)
            for (int64_t j = 0; j < n; ++j) b[p * n + j] = buf[koff[p] + j];
          auto a = random_floats(m * k, rng), row_bias = random_floats(m, rng);
          const int64_t ldc = n + 3;
          std::vector<float> c(m * ldc, -7.f);
          Epilogue ep;
          ep.act = act;
          ep.row_bias = with_row_bias ? row_bias.data() : nullptr;
          gemm_indirect(m, n, k, a.data(), k, buf.data(), koff.data(), c.data(), ldc, ep);
          std::vector<double> mag;
          auto want = reference_gemm(m, n, k, a, b, nullptr, nullptr, act, &mag, ep.row_bias);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j)
              ASSERT_NEAR(c[i * ldc + j], want[i * n + j], 1e-6 * mag[i * n + j] + 1e-6)
                  << "m " << m << " k " << k << " n " << n << " act " << act_name(act.kind) << " at " << i << "," << j;
            for (int64_t j = n; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], -7.f) << "wrote past column n";
          }
        }
  }
}

TEST(CpuGemm, ColumnMajorLeftOperandMatchesFloat64) {
  // gemm_packed_cols: A column-major (a convolution's image as the left operand, lda past m),
  // B packed; few rows (gathered for the few-row tiles), partial tiles, the last rows split in
  // two blocks, several blocks of K, every epilogue.
  std::mt19937 rng(29);
  const Activation acts[] = {{Act::kNone}, {Act::kRelu}, {Act::kHardSwish}, {Act::kClip, -0.5f, 0.25f}};
  for (int64_t target : targets()) {
    ForceTarget force(target);
    SCOPED_TRACE(simd_target());
    int case_no = 0;
    for (int64_t m : {1, 3, 5, 12, 13, 29, 49, 64})
      for (int64_t k : {int64_t{1}, int64_t{9}, kBlockK + 44})
        for (int64_t n : {16, 17, 48, 70}) {
          const Activation act = acts[case_no % 4];
          ++case_no;
          const int64_t lda = m + 3;
          auto a = random_floats(m * k, rng), b = random_floats(k * n, rng), bias = random_floats(n, rng);
          auto residual = random_floats(m * n, rng), c0 = random_floats(m * n, rng);
          std::vector<float> cols(k * lda, 0.f), packed(packed_size(k, n));
          for (int64_t i = 0; i < m; ++i)
            for (int64_t p = 0; p < k; ++p) cols[p * lda + i] = a[i * k + p];
          pack_b(b.data(), n, false, k, n, packed.data());
          Epilogue ep;
          ep.act = act;
          ep.bias = case_no % 3 != 0 ? bias.data() : nullptr;
          ep.residual = case_no % 4 == 1 ? residual.data() : nullptr;
          ep.ldr = n;
          ep.accumulate = case_no % 5 == 2;
          std::vector<float> c = c0;
          gemm_packed_cols(m, n, k, cols.data(), lda, packed.data(), c.data(), n, ep);
          std::vector<double> mag;
          auto want = reference_gemm(m, n, k, a, b, ep.bias, ep.accumulate ? &c0 : nullptr, act, &mag, nullptr,
                                     ep.residual);
          for (size_t i = 0; i < c.size(); ++i)
            ASSERT_NEAR(c[i], want[i], 1e-6 * mag[i] + 1e-6)
                << "m " << m << " k " << k << " n " << n << " act " << act_name(act.kind) << " at " << i;
        }
  }
}

TEST(CpuGemm, UnpackedOperandsAndTranspositions) {
  std::mt19937 rng(8);
  for (int64_t target : targets()) {
    ForceTarget force(target);
    SCOPED_TRACE(simd_target());
    for (int64_t m : {1, 3, 14})
      for (int64_t k : {5, 64, 129})
        for (int64_t n : {1, 9, 40, 130})
          for (int trans = 0; trans < 4; ++trans) {
            const bool ta = trans & 1, tb = trans & 2;
            auto a = random_floats(m * k, rng), b = random_floats(k * n, rng);
            // Stored transposed when asked: A as k x m, B as n x k.
            std::vector<float> as = a, bs = b;
            if (ta)
              for (int64_t i = 0; i < m; ++i)
                for (int64_t p = 0; p < k; ++p) as[p * m + i] = a[i * k + p];
            if (tb)
              for (int64_t p = 0; p < k; ++p)
                for (int64_t j = 0; j < n; ++j) bs[j * k + p] = b[p * n + j];
            std::vector<float> c(m * n, 0.f);
            gemm(ta, tb, m, n, k, as.data(), ta ? m : k, bs.data(), tb ? k : n, c.data(), n);
            std::vector<double> mag;
            auto want = reference_gemm(m, n, k, a, b, nullptr, nullptr, Activation{}, &mag);
            for (size_t i = 0; i < c.size(); ++i)
              ASSERT_NEAR(c[i], want[i], 1e-6 * mag[i] + 1e-6) << "m " << m << " k " << k << " n " << n
                                                                 << " trans " << trans;
          }
  }
}

// The many-row product's two orders: A larger than L2 (517 x 300 floats, 620 KB) read K block
// by K block in chunks of rows held across the column tiles (two chunks here), and a small A
// (37 or 60 rows) with B read once; with a partial K block and partial tiles of rows and
// columns, B packed, read in place (229 columns: rows not 64-byte aligned, copied per slice)
// or packed per call (100 columns), and through offsets, the whole epilogue or accumulating,
// against float64; and on a pool of 4 threads with the same sums (60 x 100: four chunks of
// rows of which the last is empty with AVX-512).
TEST(CpuGemm, ManyRowOrdersMatchFloat64) {
  std::mt19937 rng(27);
  // (517 rows by two blocks of K: A past L2, K in blocks outermost; with 63 columns, two column
  // tiles, its rows chunked too: each thread's tasks one contiguous range over every block of K.)
  // (Plain variables, not structured bindings: the lambdas below capture them, which clang 14,
  // scripts/tsan.sh's compiler, does not allow for bindings.)
  for (const auto& shape : {std::pair<int64_t, int64_t>{517, 229}, {517, 63}, {37, 229}, {60, 100}}) {
    const int64_t m = shape.first, n = shape.second;
    const int64_t k = kBlockK + 44;
    SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n));
    auto a = random_floats(m * k, rng), b = random_floats(k * n, rng), bias = random_floats(n, rng);
    auto row_bias = random_floats(m, rng), residual = random_floats(m * n, rng), c0 = random_floats(m * n, rng);
    std::vector<float> packed(packed_size(k, n));
    pack_b(b.data(), n, false, k, n, packed.data());
    std::vector<int64_t> koff;  // B's rows through offsets
    const std::vector<float> buf = scatter_rows(b, k, n, rng, koff);
    std::vector<double> mag;
    Epilogue ep;
    ep.bias = bias.data();
    ep.row_bias = row_bias.data();
    ep.residual = residual.data();
    ep.ldr = n;
    ep.act = Activation{Act::kGelu};
    const auto want = reference_gemm(m, n, k, a, b, ep.bias, nullptr, ep.act, &mag, ep.row_bias, ep.residual);
    Epilogue acc;  // C (+)= A B, nothing else
    acc.accumulate = true;
    std::vector<double> mag_acc;
    const auto want_acc = reference_gemm(m, n, k, a, b, nullptr, &c0, Activation{}, &mag_acc);
    for (int64_t target : targets()) {
      ForceTarget force(target);
      SCOPED_TRACE(simd_target());
      for (int mode = 0; mode < 3; ++mode) {
        auto run = [&](const Epilogue& e, std::vector<float>& c) {
          if (mode == 0) gemm_packed(m, n, k, a.data(), k, packed.data(), c.data(), n, e);
          else if (mode == 1) gemm(false, false, m, n, k, a.data(), k, b.data(), n, c.data(), n, e);
          else gemm_indirect(m, n, k, a.data(), k, buf.data(), koff.data(), c.data(), n, e);
        };
        std::vector<float> c(m * n, -7.f), c_acc = c0;
        run(ep, c);
        run(acc, c_acc);
        for (size_t i = 0; i < c.size(); ++i) {
          ASSERT_NEAR(c[i], want[i], 1e-6 * mag[i] + 1e-6) << "mode " << mode << " at " << i;
          ASSERT_NEAR(c_acc[i], want_acc[i], 1e-6 * mag_acc[i] + 1e-6) << "mode " << mode << " accumulating, at " << i;
        }
        for (int threads : {2, 3, 4}) {
          ThreadPool pool(threads);
          PoolScope scope(&pool);
          std::vector<float> split(m * n, -7.f), split_acc = c0;
          run(ep, split);
          run(acc, split_acc);
          EXPECT_EQ(c, split) << "mode " << mode << " threads " << threads;
          EXPECT_EQ(c_acc, split_acc) << "mode " << mode << " threads " << threads << " accumulating";
        }
      }
    }
  }
}

TEST(CpuGemm, FewInputChannelsOverALargeImageMatchFloat64) {
  // B read in place or through offsets, one block of K and C past L2 (a pointwise convolution
  // from few input channels over a large image, a stem): each thread's column tiles, in groups
  // whose B stays in L2, swept per block of rows (each shape here has several groups a thread,
  // the last one short). Row counts that end in uneven blocks, a partial last panel; the same
  // values at 1 to 3 threads.
  std::mt19937 rng(41);
  for (const auto& shape : {std::tuple<int64_t, int64_t, int64_t>{64, 12544, 16}, {41, 7001, 24}, {26, 11000, 7}}) {
    const int64_t m = std::get<0>(shape), n = std::get<1>(shape), k = std::get<2>(shape);
    SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k));
    auto a = random_floats(m * k, rng), b = random_floats(k * n, rng), row_bias = random_floats(m, rng);
    auto residual = random_floats(m * n, rng);
    std::vector<int64_t> koff;  // B's rows through offsets
    const std::vector<float> buf = scatter_rows(b, k, n, rng, koff);
    Epilogue ep;
    ep.row_bias = row_bias.data();
    ep.residual = residual.data();
    ep.ldr = n;
    ep.act = Activation{Act::kHardSwish};
    std::vector<double> mag;
    const auto want = reference_gemm(m, n, k, a, b, nullptr, nullptr, ep.act, &mag, ep.row_bias, ep.residual);
    for (int64_t target : targets()) {
      ForceTarget force(target);
      SCOPED_TRACE(simd_target());
      for (int mode = 0; mode < 2; ++mode) {  // B in place; B's rows through offsets
        auto run = [&](std::vector<float>& c) {
          if (mode == 0) gemm(false, false, m, n, k, a.data(), k, b.data(), n, c.data(), n, ep);
          else gemm_indirect(m, n, k, a.data(), k, buf.data(), koff.data(), c.data(), n, ep);
        };
        std::vector<float> one(m * n, -7.f);
        run(one);
        for (size_t i = 0; i < one.size(); ++i)
          ASSERT_NEAR(one[i], want[i], 1e-6 * mag[i] + 1e-6) << "mode " << mode << " at " << i;
        for (int threads : {2, 3}) {
          ThreadPool pool(threads);
          PoolScope scope(&pool);
          std::vector<float> split(m * n, -7.f);
          run(split);
          EXPECT_EQ(one, split) << "mode " << mode << " threads " << threads;
        }
      }
    }
  }
}

TEST(CpuGemm, SplitsOverThePoolWithTheSameResult) {
  std::mt19937 rng(9);
  const int64_t m = 37, k = 200, n = 300;
  auto a = random_floats(m * k, rng), b = random_floats(k * n, rng);
  std::vector<float> packed(packed_size(k, n)), one(m * n), four(m * n), row1(n), row4(n);
  pack_b(b.data(), n, false, k, n, packed.data());
  gemm_packed(m, n, k, a.data(), k, packed.data(), one.data(), n);
  gemm_packed(1, n, k, a.data(), k, packed.data(), row1.data(), n);
  ThreadPool pool(4);
  PoolScope scope(&pool);
  gemm_packed(m, n, k, a.data(), k, packed.data(), four.data(), n);
  gemm_packed(1, n, k, a.data(), k, packed.data(), row4.data(), n);
  EXPECT_EQ(one, four);  // each element is summed in the same order whoever computes it
  EXPECT_EQ(row1, row4);
}

// The 8-bit product over a pool of 4 threads (row chunks, column tiles, B packed by panels in
// parallel) gives the same sums as on one thread, at one row and at many (with few column tiles,
// so that rows are chunked too).
TEST(CpuGemm, Int8SplitsOverThePoolWithTheSameResult) {
  if (!has_int8_dot()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI";
  std::mt19937 rng(10);
  std::uniform_int_distribution<int> byte(-128, 127);
  for (const auto& shape : {std::pair<int64_t, int64_t>{1, 300}, {37, 300}, {61, 40}}) {
    const int64_t m = shape.first, n = shape.second;
    const int64_t k = 203;
    std::vector<int8_t> a(m * k), b(k * n);
    for (auto& v : a) v = static_cast<int8_t>(byte(rng));
    for (auto& v : b) v = static_cast<int8_t>(byte(rng));
    std::vector<int32_t> za(m), zb(n);
    for (auto& z : za) z = byte(rng);
    for (auto& z : zb) z = byte(rng);
    std::vector<int32_t> one(m * n), four(m * n);
    const Int8Operand ao{a.data(), true, k, za.data()}, bo{b.data(), true, n, zb.data()};
    gemm_int8(m, n, k, ao, bo, one.data(), n);
    {
      ThreadPool pool(4);
      PoolScope scope(&pool);
      gemm_int8(m, n, k, ao, bo, four.data(), n);
    }
    EXPECT_EQ(one, four) << "m " << m << " n " << n;
    int64_t want = 0;  // and element (0, 0) against the formula
    for (int64_t q = 0; q < k; ++q) want += (int64_t{a[q]} - za[0]) * (int64_t{b[q * n]} - zb[0]);
    EXPECT_EQ(one[0], static_cast<int32_t>(want)) << "m " << m << " n " << n;
  }
}

TEST(CpuActivation, MatchesTheScalarDefinition) {
  std::vector<float> x;
  for (int i = -2000; i <= 2000; ++i) x.push_back(i * 0.01f);
  for (float v : {-100.f, -90.f, 90.f, 100.f, 1e-30f, -1e-30f}) x.push_back(v);
  const Activation acts[] = {{Act::kRelu},    {Act::kLeakyRelu, 0.1f}, {Act::kClip, -1.f, 6.f}, {Act::kSigmoid},
                             {Act::kTanh},    {Act::kGelu},            {Act::kGeluTanh},        {Act::kSilu},
                             {Act::kHardSigmoid, 0.2f, 0.5f}, {Act::kHardSwish}, {Act::kErf}};
  for (int64_t target : targets()) {
    ForceTarget force(target);
    SCOPED_TRACE(simd_target());
    for (const Activation& act : acts) {
      std::vector<float> y(x.size());
      activate(x.data(), y.data(), static_cast<int64_t>(x.size()), act);
      for (size_t i = 0; i < x.size(); ++i) {
        const float want = activate_reference(x[i], act);
        ASSERT_NEAR(y[i], want, 2e-6f + 2e-6f * std::fabs(want)) << act_name(act.kind) << " at x = " << x[i];
      }
    }
  }
}

// The Erf op's float32 kernel against erf in double: within 2.5 float ulps of the value on a fine
// grid over both regions of its approximation and their border, on tiny and subnormal inputs
// (relative accuracy), and exactly at 0, the infinities and NaN.
TEST(CpuActivation, ErfIsWithinTwoAndAHalfUlps) {
  std::vector<float> x;
  for (int i = -60000; i <= 60000; ++i) x.push_back(i * 1e-4f);
  for (float v : {1e-30f, -1e-30f, 1e-40f, 3e-8f, 0.999999f, 1.000001f, 3.9f, 4.f, 4.1f, 10.f, -10.f}) x.push_back(v);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t target : targets()) {
    ForceTarget force(target);
    SCOPED_TRACE(simd_target());
    std::vector<float> y(x.size());
    activate(x.data(), y.data(), static_cast<int64_t>(x.size()), Activation{Act::kErf});
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = std::erf(static_cast<double>(x[i]));
      const double ulp = std::fabs(std::nextafter(static_cast<float>(want), inf) - static_cast<float>(want));
      ASSERT_LE(std::fabs(y[i] - want), 2.5 * ulp) << "erf at x = " << x[i] << ": " << y[i] << " against " << want;
    }
    const float special[] = {0.f, inf, -inf, std::numeric_limits<float>::quiet_NaN()};
    float out[4];
    activate(special, out, 4, Activation{Act::kErf});
    EXPECT_EQ(out[0], 0.f);
    EXPECT_EQ(out[1], 1.f);
    EXPECT_EQ(out[2], -1.f);
    EXPECT_TRUE(std::isnan(out[3]));
  }
}

TEST(CpuActivation, GatedUnitMatchesTheScalarDefinition) {
  std::mt19937 rng(13);
  for (int64_t target : targets()) {
    ForceTarget force(target);
    SCOPED_TRACE(simd_target());
    for (int64_t n : {1, 5, 16, 37, 5000}) {
      auto g = random_floats(n, rng, -6.f, 6.f), u = random_floats(n, rng);
      std::vector<float> y(n);
      gated(g.data(), u.data(), y.data(), n, Activation{Act::kSilu});
      for (int64_t i = 0; i < n; ++i) {
        const double want = double(activate_reference(g[i], Activation{Act::kSilu})) * u[i];
        ASSERT_NEAR(y[i], want, 2e-6 + 2e-6 * std::fabs(want)) << "n " << n << " at " << i;
      }
    }
  }
}

TEST(CpuRows, SoftmaxMatchesFloat64WithMaskedAndTailColumns) {
  std::mt19937 rng(10);
  for (int64_t target : targets()) {
    ForceTarget force(target);
    SCOPED_TRACE(simd_target());
    for (int64_t n : {1, 3, 16, 17, 100})
      for (bool log : {false, true}) {
        const int64_t rows = 5;
        auto x = random_floats(rows * n, rng, -8.f, 8.f);
        if (n > 1) x[0] = -std::numeric_limits<float>::infinity();  // a masked score
        if (n > 2) x[n + 1] = std::numeric_limits<float>::lowest();
        std::vector<float> y(x.size());
        softmax_rows(x.data(), y.data(), rows, n, log);
        for (int64_t r = 0; r < rows; ++r) {
          double mx = -INFINITY, sum = 0;
          for (int64_t j = 0; j < n; ++j) mx = std::max(mx, double(x[r * n + j]));
          for (int64_t j = 0; j < n; ++j) sum += std::exp(double(x[r * n + j]) - mx);
          for (int64_t j = 0; j < n; ++j) {
            const double v = double(x[r * n + j]) - mx;
            const double want = log ? v - std::log(sum) : std::exp(v) / sum;
            if (log && std::isinf(want)) {
              EXPECT_TRUE(std::isinf(y[r * n + j]) || y[r * n + j] < -1e30f);
              continue;
            }
            ASSERT_NEAR(y[r * n + j], want, 2e-6 + 2e-6 * std::fabs(want)) << "n " << n << " row " << r << " col " << j;
          }
        }
      }
  }
}

TEST(CpuRows, NormalizationsMatchFloat64) {
  std::mt19937 rng(11);
  for (int64_t target : targets()) {
    ForceTarget force(target);
    SCOPED_TRACE(simd_target());
    for (int64_t n : {1, 7, 16, 33, 768})
      for (int variant = 0; variant < 4; ++variant) {
        const int64_t rows = 3;
        const bool center = variant & 1, with_skip = variant & 2;
        auto x = random_floats(rows * n, rng, -3.f, 5.f), skip = random_floats(rows * n, rng);
        auto bias = random_floats(n, rng), scale = random_floats(n, rng), shift = random_floats(n, rng);
        std::vector<float> y(x.size()), sum(x.size()), mean(rows), inv(rows);
        NormRows a;
        a.x = x.data();
        a.skip = with_skip ? skip.data() : nullptr;
        a.bias = with_skip ? bias.data() : nullptr;
        a.sum = with_skip ? sum.data() : nullptr;
        a.scale = scale.data();
        a.shift = center ? shift.data() : nullptr;
        a.y = y.data();
        a.mean = mean.data();
        a.inv_std = inv.data();
        a.rows = rows;
        a.n = n;
        a.epsilon = 1e-5f;
        a.center = center;
        norm_rows(a);
        for (int64_t r = 0; r < rows; ++r) {
          std::vector<double> v(n);
          double mu = 0, q = 0;
          for (int64_t j = 0; j < n; ++j) {
            v[j] = double(x[r * n + j]) + (with_skip ? double(skip[r * n + j]) + bias[j] : 0.0);
            mu += v[j];
          }
          mu = center ? mu / n : 0.0;
          for (int64_t j = 0; j < n; ++j) q += (v[j] - mu) * (v[j] - mu);
          const double is = 1 / std::sqrt(q / n + 1e-5);
          EXPECT_NEAR(inv[r], is, 1e-5 * is);
          if (center) EXPECT_NEAR(mean[r], mu, 1e-5 + 1e-6 * std::fabs(mu));
          for (int64_t j = 0; j < n; ++j) {
            if (with_skip) ASSERT_NEAR(sum[r * n + j], v[j], 1e-6 + 1e-6 * std::fabs(v[j]));
            const double want = (v[j] - mu) * is * scale[j] + (center ? shift[j] : 0.0);
            ASSERT_NEAR(y[r * n + j], want, 1e-5 + 1e-5 * std::fabs(want)) << "n " << n << " variant " << variant;
          }
        }
      }
  }
}

TEST(CpuConv, DepthwiseMatchesFloat64AcrossStridesPadsAndDilations) {
  std::mt19937 rng(12);
  struct Case {
    int64_t ih, iw, k, s, p, dil;
  };
  // Wide rows with stride 2 take the vector phase split (odd and even pads, odd widths).
  const Case cases[] = {{7, 9, 3, 1, 1, 1},    {8, 8, 3, 2, 1, 1},   {13, 21, 5, 2, 2, 1}, {6, 37, 3, 1, 0, 2},
                        {5, 5, 5, 1, 2, 1},    {9, 10, 3, 3, 1, 1},  {6, 112, 3, 2, 1, 1}, {5, 71, 5, 2, 2, 1},
                        {4, 67, 3, 2, 0, 1},   {7, 7, 5, 1, 2, 1},   {14, 14, 3, 1, 1, 1}, {9, 50, 3, 2, 2, 2},
                        {6, 45, 3, 2, 3, 1},   {3, 130, 3, 1, 1, 1}};
  for (int64_t target : targets()) {
    ForceTarget force(target);
    SCOPED_TRACE(simd_target());
    for (const Case& c : cases) {
      const int64_t ch = 3;
      const int64_t oh = (c.ih + 2 * c.p - c.dil * (c.k - 1) - 1) / c.s + 1;
      const int64_t ow = (c.iw + 2 * c.p - c.dil * (c.k - 1) - 1) / c.s + 1;
      auto x = random_floats(ch * c.ih * c.iw, rng), w = random_floats(ch * c.k * c.k, rng);
      auto bias = random_floats(ch, rng);
      std::vector<float> y(ch * oh * ow);
      DepthwiseConv2d a;
      a.x = x.data(), a.w = w.data(), a.bias = bias.data(), a.y = y.data();
      a.channels = ch, a.ih = c.ih, a.iw = c.iw, a.oh = oh, a.ow = ow;
      a.kh = a.kw = c.k, a.sh = a.sw = c.s, a.ph = a.pw = c.p, a.dh = a.dw = c.dil;
      // HardSwish and ReLU are applied in registers, GELU by the span pass after the store.
      const Act acts[] = {Act::kHardSwish, Act::kGelu, Act::kRelu, Act::kNone};
      a.act = Activation{acts[(&c - cases) % 4]};
      for (auto path : {DepthwiseConv2d::Path::kFlat, DepthwiseConv2d::Path::kBlocked}) {
      SCOPED_TRACE(path == DepthwiseConv2d::Path::kFlat ? "flat" : "blocked");
      a.path = path;
      std::fill(y.begin(), y.end(), 12345.f);
      depthwise_conv2d(a);
      for (int64_t q = 0; q < ch; ++q)
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < ow; ++j) {
            double s = bias[q];
            for (int64_t u = 0; u < c.k; ++u)
              for (int64_t v = 0; v < c.k; ++v) {
                const int64_t r = i * c.s - c.p + u * c.dil, col = j * c.s - c.p + v * c.dil;
                if (r >= 0 && r < c.ih && col >= 0 && col < c.iw)
                  s += double(x[(q * c.ih + r) * c.iw + col]) * w[(q * c.k + u) * c.k + v];
              }
            const float want = activate_reference(static_cast<float>(s), a.act);
            ASSERT_NEAR(y[(q * oh + i) * ow + j], want, 1e-5 + 1e-5 * std::fabs(want))
                << "ih " << c.ih << " iw " << c.iw << " k " << c.k << " stride " << c.s << " at " << i << "," << j;
          }
      }
    }
  }
}

// y[q, i, j] = act(bias[q] + sum over taps of x at (i sh - ph + u dh, j sw - pw + v dw)), in
// double; positions outside the image read zero (so an output past the image's end is padding).
std::vector<float> depthwise_reference(const std::vector<float>& x, const std::vector<float>& w,
                                       const std::vector<float>& bias, const DepthwiseConv2d& a) {
  std::vector<float> y(static_cast<size_t>(a.channels * a.oh * a.ow));
  for (int64_t q = 0; q < a.channels; ++q)
    for (int64_t i = 0; i < a.oh; ++i)
      for (int64_t j = 0; j < a.ow; ++j) {
        double s = bias[q];
        for (int64_t u = 0; u < a.kh; ++u)
          for (int64_t v = 0; v < a.kw; ++v) {
            const int64_t r = i * a.sh - a.ph + u * a.dh, col = j * a.sw - a.pw + v * a.dw;
            if (r >= 0 && r < a.ih && col >= 0 && col < a.iw)
              s += double(x[(q * a.ih + r) * a.iw + col]) * w[(q * a.kh + u) * a.kw + v];
          }
        y[(q * a.oh + i) * a.ow + j] = activate_reference(static_cast<float>(s), a.act);
      }
  return y;
}

TEST(CpuConv, DepthwiseMatchesFloat64AtUnevenGeometries) {
  // The flat-plane kernel: rectangular kernels, strides and dilations per axis, stride 3, pads
  // at the start and a different reach past the end (outputs read padding past the image),
  // widths that leave every tail of the stride-2 split (odd and even leading pads), one
  // column, one row, many channels split over the pool; on every target.
  std::mt19937 rng(31);
  struct Case {
    int64_t ch, ih, iw, kh, kw, sh, sw, ph, pw, dh, dw, extra_h, extra_w;
  };
  const Case cases[] = {
      {5, 7, 7, 5, 5, 1, 1, 2, 2, 1, 1, 0, 0},     {4, 14, 14, 5, 5, 2, 2, 2, 2, 1, 1, 0, 0},
      {3, 9, 17, 3, 5, 1, 2, 1, 2, 1, 1, 0, 1},    {3, 11, 33, 3, 3, 2, 2, 0, 1, 1, 1, 1, 0},
      {2, 6, 31, 3, 3, 2, 2, 1, 1, 1, 1, 0, 2},    {2, 6, 32, 3, 3, 2, 2, 1, 0, 1, 1, 0, 0},
      {2, 5, 1, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0},     {2, 1, 40, 1, 3, 1, 1, 0, 1, 1, 1, 0, 0},
      {3, 13, 12, 3, 3, 3, 3, 1, 2, 1, 1, 1, 1},   {2, 10, 19, 3, 3, 1, 1, 2, 1, 2, 3, 0, 0},
      {2, 12, 12, 5, 3, 2, 1, 4, 0, 1, 2, 2, 3},   {37, 15, 15, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0},
      {3, 28, 28, 5, 5, 2, 2, 2, 2, 1, 1, 0, 0},   {2, 16, 113, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0},
      {2, 3, 2, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0},     {2, 8, 70, 7, 7, 1, 1, 3, 3, 1, 1, 0, 0},
  };
  ThreadPool pool(3);
  PoolScope scope(&pool);
  for (int64_t target : targets()) {
    ForceTarget force(target);
    SCOPED_TRACE(simd_target());
    for (const Case& c : cases) {
      SCOPED_TRACE(&c - cases);
      DepthwiseConv2d a;
      a.channels = c.ch, a.ih = c.ih, a.iw = c.iw, a.kh = c.kh, a.kw = c.kw, a.sh = c.sh, a.sw = c.sw;
      a.ph = c.ph, a.pw = c.pw, a.dh = c.dh, a.dw = c.dw;
      // The outputs a symmetric pad gives, plus extra_h, extra_w (an uneven pad at the end).
      a.oh = (c.ih + 2 * c.ph - c.dh * (c.kh - 1) - 1) / c.sh + 1 + c.extra_h;
      a.ow = (c.iw + 2 * c.pw - c.dw * (c.kw - 1) - 1) / c.sw + 1 + c.extra_w;
      auto x = random_floats(c.ch * c.ih * c.iw, rng), w = random_floats(c.ch * c.kh * c.kw, rng);
      auto bias = random_floats(c.ch, rng);
      // Guards on both sides of y: the kernel writes its outputs and nothing else.
      const int64_t guard = 64;
      std::vector<float> y(a.channels * a.oh * a.ow + 2 * guard, 12345.f);
      a.x = x.data(), a.w = w.data(), a.bias = bias.data(), a.y = y.data() + guard;
      const Act acts[] = {Act::kNone, Act::kRelu, Act::kHardSwish, Act::kGelu};
      a.act = Activation{acts[(&c - cases) % 4]};
      const auto want = depthwise_reference(x, w, bias, a);
      for (auto path : {DepthwiseConv2d::Path::kFlat, DepthwiseConv2d::Path::kBlocked}) {
      SCOPED_TRACE(path == DepthwiseConv2d::Path::kFlat ? "flat" : "blocked");
      a.path = path;
      std::fill(y.begin(), y.end(), 12345.f);
      depthwise_conv2d(a);
      for (int64_t i = 0; i < guard; ++i) {
        ASSERT_EQ(y[i], 12345.f) << "written before the output at " << i;
        ASSERT_EQ(y[guard + want.size() + i], 12345.f) << "written past the output at " << i;
      }
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(y[guard + i], want[i], 1e-5 + 1e-5 * std::fabs(want[i]))
            << "output " << i << " of " << a.channels << " x " << a.oh << " x " << a.ow;
      }
    }
  }
}

TEST(CpuConv, DepthwiseFlatPlanesReusedAcrossGeometriesKeepTheirPaddingZero) {
  // The flat kernel keeps its zero-padded planes per thread from call to call and zeroes them
  // again only for another geometry. A 12 x 38 image padded by 1 and a 14 x 40 image unpadded
  // have planes of one size, the second's input covering the first's padding: run in turns on
  // one thread, with inputs of large values, every output against float64.
  std::mt19937 rng(57);
  struct Shape {
    int64_t ih, iw, p;
  };
  const Shape shapes[] = {{12, 38, 1}, {14, 40, 0}, {12, 38, 1}, {14, 40, 0}, {12, 38, 1}};
  for (int64_t target : targets()) {
    ForceTarget force(target);
    SCOPED_TRACE(simd_target());
    for (const Shape& sh : shapes) {
      SCOPED_TRACE(&sh - shapes);
      DepthwiseConv2d a;
      a.channels = 3, a.ih = sh.ih, a.iw = sh.iw, a.kh = a.kw = 3, a.ph = a.pw = sh.p;
      a.oh = sh.ih + 2 * sh.p - 2, a.ow = sh.iw + 2 * sh.p - 2;
      a.path = DepthwiseConv2d::Path::kFlat;
      auto x = random_floats(a.channels * a.ih * a.iw, rng), w = random_floats(a.channels * 9, rng);
      for (float& v : x) v = 100.f + 50.f * v;  // stale values in the padding would show
      auto bias = random_floats(a.channels, rng);
      std::vector<float> y(a.channels * a.oh * a.ow, 12345.f);
      a.x = x.data(), a.w = w.data(), a.bias = bias.data(), a.y = y.data();
      depthwise_conv2d(a);
      const auto want = depthwise_reference(x, w, bias, a);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(y[i], want[i], 1e-4 + 1e-5 * std::fabs(want[i])) << "output " << i;
    }
  }
}

TEST(CpuConv, MaxPoolRowStepsMatchScalarWithNaNs) {
  // split_row2, max_nan_into and max_nan_taps (the float max pool's row steps) on every target, every length
  // up to a few vectors past a tail: even and odd columns; the larger value, a NaN in v taken,
  // a NaN in best kept, ties keeping best.
  std::mt19937 rng(53);
  for (int64_t target : targets()) {
    ForceTarget force(target);
    SCOPED_TRACE(simd_target());
    for (int64_t n = 1; n <= 70; ++n) {
      auto src = random_floats(n, rng), best = random_floats(n, rng), v = random_floats(n, rng);
      for (int64_t j = 0; j < n; j += 7) v[j] = std::numeric_limits<float>::quiet_NaN();
      for (int64_t j = 3; j < n; j += 11) best[j] = std::numeric_limits<float>::quiet_NaN();
      for (int64_t j = 5; j < n; j += 13) v[j] = best[j];
      std::vector<float> even((n + 1) / 2 + 1, 9.f), odd(n / 2 + 1, 9.f);
      split_row2(src.data(), n, even.data(), odd.data());
      for (int64_t q = 0; q < n; ++q) ASSERT_EQ((q % 2 ? odd : even)[q / 2], src[q]) << "n " << n << " at " << q;
      ASSERT_EQ(even[(n + 1) / 2], 9.f) << "written past the even columns, n " << n;
      ASSERT_EQ(odd[n / 2], 9.f) << "written past the odd columns, n " << n;
      std::vector<float> got = best;
      got.push_back(9.f);
      max_nan_into(got.data(), v.data(), n);
      ASSERT_EQ(got[n], 9.f) << "written past n " << n;
      for (int64_t j = 0; j < n; ++j) {
        const float want = v[j] > best[j] || std::isnan(v[j]) ? v[j] : best[j];
        if (std::isnan(want)) ASSERT_TRUE(std::isnan(got[j])) << "n " << n << " at " << j;
        else ASSERT_EQ(got[j], want) << "n " << n << " at " << j;
      }
      // max_nan_taps: 1 to 4 taps folded in order, as max_nan_into one after another.
      const std::vector<float>* rows[4] = {&best, &v, &src, &v};
      for (int64_t count = 1; count <= 4; ++count) {
        const float* taps[4];
        for (int64_t t = 0; t < count; ++t) taps[t] = rows[t]->data();
        std::vector<float> folded(rows[0]->begin(), rows[0]->end());
        for (int64_t t = 1; t < count; ++t) max_nan_into(folded.data(), taps[t], n);
        std::vector<float> fused(n + 1, 9.f);
        max_nan_taps(taps, count, n, fused.data());
        ASSERT_EQ(fused[n], 9.f) << "written past n " << n;
        for (int64_t j = 0; j < n; ++j) {
          if (std::isnan(folded[j])) ASSERT_TRUE(std::isnan(fused[j])) << "taps " << count << " at " << j;
          else ASSERT_EQ(fused[j], folded[j]) << "n " << n << " taps " << count << " at " << j;
        }
      }
    }
  }
}

TEST(ThreadPool, CoversEveryIndexOnceAndRethrows) {
  ThreadPool pool(3);
  PoolScope scope(&pool);
  EXPECT_EQ(parallelism(), 3);
  for (int64_t n : {1, 2, 7, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    parallel_for(n, 1, [&](int64_t b, int64_t e) {
      if (n > 1) EXPECT_EQ(parallelism(), 1);  // inside a pool's chunk: nested work runs serially
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " index " << i;
  }
  EXPECT_THROW(parallel_for(100, 1, [&](int64_t b, int64_t) {
                 if (b == 0) throw std::runtime_error("chunk failed");
               }),
               std::runtime_error);
  // After a failure the pool still works.
  std::atomic<int64_t> total{0};
  parallel_for(100, 1, [&](int64_t b, int64_t e) { total += e - b; });
  EXPECT_EQ(total.load(), 100);
}

// Each thread takes its own run of chunks first, in order: of 8 chunks on 2 threads the caller
// starts with chunks 0-3 and the worker with 4-7 (each chunk sleeps, so neither
// reaches the other's run before it has started its own), so kernels splitting the same items
// the same way give each thread the same items.
TEST(ThreadPool, EachThreadTakesItsOwnRunOfChunksFirst) {
  ThreadPool pool(2);
  PoolScope scope(&pool);
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex m;
  std::vector<std::pair<int64_t, std::thread::id>> order;
  parallel_for(8, 1, [&](int64_t b, int64_t e) {
    ASSERT_EQ(e, b + 1);
    {
      std::lock_guard<std::mutex> lk(m);
      order.emplace_back(b, std::this_thread::get_id());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  ASSERT_EQ(order.size(), 8u);
  std::vector<int64_t> by_caller, by_worker;
  for (const auto& [chunk, id] : order) (id == caller ? by_caller : by_worker).push_back(chunk);
  ASSERT_FALSE(by_caller.empty());
  ASSERT_FALSE(by_worker.empty());
  EXPECT_EQ(by_caller.front(), 0);
  EXPECT_EQ(by_worker.front(), 4);
  EXPECT_TRUE(std::is_sorted(by_caller.begin(), by_caller.end()));
}

// A small job splits into as many chunks as the pool allows, of sizes differing by at most one
// item, so two threads can share it evenly (14 tasks as 8 chunks: 7 against 7, not 7 chunks of
// 2: 8 against 6).
TEST(ThreadPool, SplitsIntoEvenChunks) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    PoolScope scope(&pool);
    for (int64_t n : {5, 13, 14, 25, 1001}) {
      for (int64_t grain : {1, 2, 3}) {
        std::mutex m;
        std::vector<std::pair<int64_t, int64_t>> chunks;
        parallel_for(n, grain, [&](int64_t b, int64_t e) {
          std::lock_guard<std::mutex> lk(m);
          chunks.emplace_back(b, e);
        });
        if (n <= grain) continue;
        const int64_t want = std::min<int64_t>(4 * threads, n / grain);
        ASSERT_EQ(static_cast<int64_t>(chunks.size()), want) << "threads " << threads << " n " << n << " grain " << grain;
        std::sort(chunks.begin(), chunks.end());
        int64_t lo = n, hi = 0, at = 0;
        for (auto [b, e] : chunks) {
          ASSERT_EQ(b, at);
          lo = std::min(lo, e - b);
          hi = std::max(hi, e - b);
          at = e;
        }
        EXPECT_EQ(at, n);
        EXPECT_LE(hi - lo, 1) << "threads " << threads << " n " << n << " grain " << grain;
        EXPECT_GE(lo, grain);
      }
    }
  }
}

TEST(ThreadPool, TwoCallersAtOnceBothFinish) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  auto work = [&] {
    PoolScope scope(&pool);
    for (int rep = 0; rep < 200; ++rep) parallel_for(64, 1, [&](int64_t b, int64_t e) { total += e - b; });
  };
  std::thread t1(work), t2(work);
  t1.join();
  t2.join();
  EXPECT_EQ(total.load(), 2 * 200 * 64);
}

}  // namespace
}  // namespace onyx::cpu
