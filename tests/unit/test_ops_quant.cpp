// The quantization ops' edge cases that the ONNX node tests do not reach: ties, saturation,
// NaN, int32 wrap-around, and errors that name what does not fit. Expected values follow
// from the specs' formulas by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "cpu/int8_gemm.h"
#include "op_test_util.h"
#include "ops/matmul_plan.h"
#include "ops/quantize.h"

namespace onyx {

namespace {

using test::attr_int;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(OpsQuant, QuantizeRoundsHalfToEvenAndSaturates) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_vector<float>({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 300.f, -300.f, nan}, Shape{9});
  auto out = test::run_op("QuantizeLinear", {x, Tensor::scalar<float>(1.f), Tensor::scalar<int8_t>(0)}, {}, 1, 21);
  ASSERT_EQ(out[0].dtype(), DType::kInt8);
  const std::vector<int8_t> want = {0, 2, 2, 0, -2, -2, 127, -128, 0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(out[0].data<int8_t>()[i], want[i]) << "element " << i;
  // uint8 by default; the zero point is added after rounding: rint(x / 2) + 10.
  Tensor y = Tensor::from_vector<float>({1.f, 3.f, -30.f, 600.f}, Shape{4});
  out = test::run_op("QuantizeLinear", {y, Tensor::scalar<float>(2.f), Tensor::scalar<uint8_t>(10)}, {}, 1, 13);
  const std::vector<uint8_t> want_u8 = {10, 12, 0, 255};
  for (size_t i = 0; i < want_u8.size(); ++i) EXPECT_EQ(out[0].data<uint8_t>()[i], want_u8[i]) << "element " << i;
}

TEST(OpsQuant, QuantizePerAxisMatchesTheFormulaOnRandomValues) {
  // Fresh random values, ties (x / scale = k + 0.5 exactly), infinities, NaN and values past
  // the range; per-axis scales and zero points: q = clamp(rint(float(x / scale)) + zp).
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = test::random_tensor<float>(Shape{3, 64}, -200, 200);
  float* px = x.data<float>();
  px[0] = 1.25f, px[1] = -0.75f, px[2] = inf, px[3] = -inf, px[4] = 3e9f, px[65] = 2.5f, px[130] = -1.5f;
  px[6] = std::numeric_limits<float>::quiet_NaN();  // takes the zero point
  const std::vector<float> scales = {0.5f, 1.f, 0.37f};
  for (auto [dt, lo, hi] : {std::tuple{DType::kInt8, -128.0, 127.0}, std::tuple{DType::kUInt8, 0.0, 255.0}}) {
    const std::vector<int64_t> zeros = dt == DType::kInt8 ? std::vector<int64_t>{-3, 0, 7} : std::vector<int64_t>{128, 0, 250};
    Tensor zp(dt, Shape{3});
    for (int64_t a = 0; a < 3; ++a) {
      if (dt == DType::kInt8) zp.data<int8_t>()[a] = static_cast<int8_t>(zeros[a]);
      else zp.data<uint8_t>()[a] = static_cast<uint8_t>(zeros[a]);
    }
    auto out = test::run_op("QuantizeLinear", {x, Tensor::from_vector<float>(scales, Shape{3}), zp}, {attr_int("axis", 0)},
                            1, 21)[0];
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t a = i / 64;
      const double q = std::nearbyint(static_cast<double>(px[i] / scales[a]));
      const double want = std::clamp(std::isnan(q) ? static_cast<double>(zeros[a]) : q + static_cast<double>(zeros[a]), lo, hi);
      ASSERT_EQ(out.get_as_double(i), want) << "element " << i << " x " << px[i] << " " << dtype_name(dt);
    }
  }
}

TEST(OpsQuant, DequantizeBlockedUsesOneScalePerBlockWithAShortLastBlock) {
  // x [2, 5] blocked by 2 along axis 1: scale [2, 3], the last block holds one column.
  Tensor x = Tensor::from_vector<int16_t>({1, 2, 3, 4, 5, -1, -2, -3, -4, -5}, Shape{2, 5});
  Tensor scale = Tensor::from_vector<float>({1.f, 10.f, 100.f, 2.f, 20.f, 200.f}, Shape{2, 3});
  Tensor zp = Tensor::from_vector<int16_t>({0, 1, 2, 0, -1, -2}, Shape{2, 3});
  auto out = test::run_op("DequantizeLinear", {x, scale, zp}, {attr_int("axis", 1), attr_int("block_size", 2)}, 1, 21);
  const std::vector<float> want = {1, 2, 20, 30, 300, -2, -4, -40, -60, -600};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(out[0].data<float>()[i], want[i]) << "element " << i;
}

TEST(OpsQuant, ScalesThatDoNotFitAreNamed) {
  Tensor x = test::random_tensor<float>(Shape{2, 4});
  EXPECT_NE(error_of([&] { test::run_op("QuantizeLinear", {x, Tensor::from_vector<float>({1, 2, 3}, Shape{3})}, {}, 1, 13); })
                .find("a per-axis scale must be 1-D of x's dimension 4 on axis 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { test::run_op("QuantizeLinear", {x, Tensor::from_vector<float>({1, 2}, Shape{2})}, {}, 1, 10); })
                .find("the scale must be a scalar at this opset"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              test::run_op("DequantizeLinear", {Tensor::from_vector<int8_t>({1, 2, 3, 4}, Shape{1, 4}),
                                                Tensor::from_vector<float>({1, 2, 3}, Shape{1, 3})},
                           {attr_int("block_size", 2)}, 1, 21);
            }).find("must have x's shape with dimension 1 = ceil(4 / 2)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { test::run_op("QuantizeLinear", {x, Tensor::scalar<float>(1.f), Tensor::scalar<int32_t>(0)}, {}, 1, 21); })
                .find("quantized type int32 is not supported"),
            std::string::npos);
}

TEST(OpsQuant, MatMulIntegerSubtractsZeroPointsPerRowAndColumn) {
  // A [2, 3] uint8 with per-row zero points; B [3, 2] int8 with per-column zero points.
  Tensor a = Tensor::from_vector<uint8_t>({10, 11, 12, 200, 0, 255}, Shape{2, 3});
  Tensor b = Tensor::from_vector<int8_t>({1, -128, 2, 127, 3, 0}, Shape{3, 2});
  Tensor za = Tensor::from_vector<uint8_t>({10, 100}, Shape{2});
  Tensor zb = Tensor::from_vector<int8_t>({1, -1}, Shape{2});
  auto out = test::run_op("MatMulInteger", {a, b, za, zb}, {}, 1, 10);
  // rows (0, 1, 2), (100, -100, 155); columns (0, 1, 2), (-127, 128, 1).
  const std::vector<int32_t> want = {0 + 1 + 4, 0 + 128 + 2, 0 - 100 + 310, -12700 - 12800 + 155};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(out[0].data<int32_t>()[i], want[i]) << "element " << i;
}

TEST(OpsQuant, QLinearMatMulRequantizesWithTheScaleProduct) {
  Tensor a = Tensor::from_vector<uint8_t>({130, 128, 126, 128}, Shape{2, 2});
  Tensor b = Tensor::from_vector<int8_t>({3, 1, 5, -7}, Shape{2, 2});
  // (a - 128) = [[2, 0], [-2, 0]]; x b = [[6, 2], [-6, -2]]; times 0.5 * 0.25 / 0.125 = 1; + 5.
  auto out = test::run_op("QLinearMatMul",
                          {a, Tensor::scalar<float>(0.5f), Tensor::scalar<uint8_t>(128), b, Tensor::scalar<float>(0.25f),
                           Tensor::scalar<int8_t>(0), Tensor::scalar<float>(0.125f), Tensor::scalar<int8_t>(5)},
                          {}, 1, 21);
  ASSERT_EQ(out[0].dtype(), DType::kInt8);
  const std::vector<int8_t> want = {11, 7, -1, 3};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(out[0].data<int8_t>()[i], want[i]) << "element " << i;
}

// QLinearMatMul at sizes where its requantization runs vectorized, against the formula in double:
// y = clamp(rint(acc * float(float(a_scale * b_scale[j]) / y_scale)) + y_zero_point), with
// per-column scales and zero points of B, a multiplier of exactly 0.5 (every odd sum a tie, which rounds to
// even), int8 and uint8 outputs, and sums past the range (saturation).
TEST(OpsQuant, QLinearMatMulRequantizationMatchesTheFormulaAtVectorSizes) {
  const int64_t m = 5, k = 37, n = 40;
  for (bool ties : {false, true}) {
    for (DType yt : {DType::kInt8, DType::kUInt8}) {
      // With ties, A near its zero point keeps most sums inside the output's range.
      Tensor a = ties ? test::random_tensor<uint8_t>(Shape{m, k}, 119, 123) : test::random_tensor<uint8_t>(Shape{m, k}, 0, 255);
      Tensor b = test::random_tensor<int8_t>(Shape{k, n}, -128, 127);
      std::vector<float> sb(static_cast<size_t>(n));
      for (auto& v : sb) v = ties ? 0.25f : 0.001f + static_cast<float>(test::rng()() % 1000) * 1e-5f;
      const float sa = 0.5f, sy = ties ? 0.25f : 0.37f;
      const int32_t za = 121, zy = yt == DType::kInt8 ? -3 : 140;
      Tensor zb = test::random_tensor<int8_t>(Shape{n}, -20, 20);
      Tensor zyt = yt == DType::kInt8 ? Tensor::scalar<int8_t>(static_cast<int8_t>(zy)) : Tensor::scalar<uint8_t>(static_cast<uint8_t>(zy));
      auto out = test::run_op("QLinearMatMul",
                              {a, Tensor::scalar<float>(sa), Tensor::scalar<uint8_t>(static_cast<uint8_t>(za)), b,
                               Tensor::from_vector<float>(sb, Shape{n}), zb,
                               Tensor::scalar<float>(sy), zyt},
                              {}, 1, 21)[0];
      ASSERT_EQ(out.dtype(), yt);
      const double lo = yt == DType::kInt8 ? -128 : 0, hi = yt == DType::kInt8 ? 127 : 255;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          int64_t acc = 0;
          for (int64_t q = 0; q < k; ++q)
            acc += (int64_t{a.data<uint8_t>()[i * k + q]} - za) * (int64_t{b.data<int8_t>()[q * n + j]} - zb.data<int8_t>()[j]);
          const double mult = static_cast<float>(static_cast<float>(sa * sb[j]) / sy);
          const double want = std::clamp(std::nearbyint(static_cast<double>(acc) * mult) + zy, lo, hi);
          ASSERT_EQ(out.get_as_double(i * n + j), want)
              << "row " << i << " column " << j << " sum " << acc << " " << dtype_name(yt) << (ties ? " ties" : "");
        }
    }
  }
}

}  // namespace

}  // namespace onyx

namespace onyx {

// The fast paths of the integer products (the float kernel in slices of K over which every
// partial sum stays below 2^24; the 8-bit dot-product kernel where this CPU has it) against the
// plain int32 loop: random values and zero points (per row of A, per column of B) of every pair of
// 8-bit types, row counts on both sides of the kernels' tile heights, column counts around whole
// panels, K not a multiple of 4; and the extremes that make the largest sums (k 70000, past
// int32, where every path wraps).
TEST(OpsQuant, IntegerProductsOfEveryPathEqualTheReferenceLoop) {
  std::vector<IntegerProducts> paths = {IntegerProducts::kFloat};
  if (cpu::has_int8_dot()) paths.push_back(IntegerProducts::kInt8Dot);
  auto check = [&](const Tensor& a, const Tensor& b, const std::vector<int32_t>& za, const std::vector<int32_t>& zb,
                   const std::string& what, std::vector<int32_t>* reference = nullptr) {
    const MatmulPlan p = plan_matmul(a.shape(), b.shape());
    const auto ref = integer_products(a, b, p, za, zb, nullptr, IntegerProducts::kReference);
    if (reference) *reference = ref;
    for (IntegerProducts how : paths) {
      const auto fast = integer_products(a, b, p, za, zb, nullptr, how);
      ASSERT_EQ(ref.size(), fast.size());
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_EQ(fast[i], ref[i]) << what << (how == IntegerProducts::kFloat ? " float" : " int8 dot") << " element " << i;
    }
  };
  auto values = [](DType t, const Shape& s) {
    return t == DType::kUInt8 ? test::random_tensor<uint8_t>(s, 0, 255) : test::random_tensor<int8_t>(s, -128, 127);
  };
  auto zero = [](DType t) {
    return t == DType::kUInt8 ? static_cast<int32_t>(test::rng()() % 256) : static_cast<int32_t>(test::rng()() % 256) - 128;
  };
  for (DType ta : {DType::kUInt8, DType::kInt8})
    for (DType tb : {DType::kUInt8, DType::kInt8})
      for (int64_t m : {1, 3, 5, 13, 25})
        for (int64_t n : {1, 17, 40})
          for (int64_t k : {3, 300, 1101}) {
            const Tensor a = values(ta, Shape{2, m, k}), b = values(tb, Shape{k, n});
            std::vector<int32_t> za(static_cast<size_t>(m)), zb(static_cast<size_t>(n));
            for (auto& z : za) z = zero(ta);
            for (auto& z : zb) z = zero(tb);
            check(a, b, za, zb,
                  "A " + std::string(dtype_name(ta)) + " B " + std::string(dtype_name(tb)) + " m " + std::to_string(m) +
                      " n " + std::to_string(n) + " k " + std::to_string(k));
          }
  for (int64_t k : {5, 70000}) {  // a = 255 against zero point 0, b = -128: every product is -32640
    Tensor a(DType::kUInt8, Shape{2, 7, k}), b(DType::kInt8, Shape{k, 9});
    std::fill_n(a.data<uint8_t>(), a.numel(), uint8_t{255});
    std::fill_n(b.data<int8_t>(), b.numel(), int8_t{-128});
    std::vector<int32_t> ref;
    check(a, b, std::vector<int32_t>(7, 0), std::vector<int32_t>(9, 0), "extremes k " + std::to_string(k), &ref);
    EXPECT_EQ(ref[0], static_cast<int32_t>(static_cast<uint32_t>(-32640 * k)));
  }
}

// DynamicQuantizeLinear's vectorized range and quantization against their scalar definition
// (quantize_scaled over x / scale, the range of 0 and every value but NaN), at lengths around the
// vector width and past the threads' chunk, on random values, on halves that tie when divided by
// the scale (which rounds to even), and with NaN and infinity among them.
TEST(OpsQuant, DynamicQuantizationMatchesItsScalarDefinition) {
  std::uniform_real_distribution<float> u(-3.f, 7.f);
  for (int64_t n : {1, 15, 16, 17, 1000, 40000}) {
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<float> x(static_cast<size_t>(n));
      for (size_t i = 0; i < x.size(); ++i) {
        if (kind == 1) x[i] = static_cast<float>(static_cast<int>(test::rng()() % 256) - 128) + 0.5f;  // ties at scale 1
        else x[i] = u(test::rng());
      }
      if (kind == 1) x[0] = -127.5f, x[n - 1] = 127.5f;  // the range 255 wide: scale 1
      if (kind == 2) {
        x[test::rng()() % n] = std::numeric_limits<float>::quiet_NaN();
        if (n > 16) x[test::rng()() % n] = std::numeric_limits<float>::infinity();
      }
      float lo = 0.f, hi = 0.f;
      for (float v : x) lo = std::min(lo, v), hi = std::max(hi, v);
      const DynamicQuantParams p = dynamic_quant_params(x.data(), n);
      const float scale = hi == lo ? 1.f : (hi - lo) / 255.f;
      ASSERT_EQ(p.scale, scale) << "n " << n << " kind " << kind;
      ASSERT_EQ(p.zero_point, quantize_scaled(0.f - lo / scale, 0, {0, 255})) << "n " << n << " kind " << kind;
      std::vector<uint8_t> y(static_cast<size_t>(n));
      dynamic_quantize(x.data(), n, p, y.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(y[i], quantize_scaled(x[i] / p.scale, p.zero_point, {0, 255}))
            << "n " << n << " kind " << kind << " x " << x[i] << " at " << i;
    }
  }
}

}  // namespace onyx
