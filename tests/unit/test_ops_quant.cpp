// The quantization ops' edge cases that the ONNX node tests do not reach: ties, saturation,
// NaN, int32 wrap-around, and errors that name what does not fit. Expected values follow
// from the specs' formulas by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

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

}  // namespace

}  // namespace onyx

namespace onyx {

// The float path of the integer products (slices of K over which every partial sum stays below
// 2^24) against the plain int32 loop, on random 8-bit values and on the extremes that make the
// largest sums (at k 70000 past int32, where both wrap), with zero points per row and per column.
TEST(OpsQuant, IntegerProductsInFloatSlicesEqualTheReferenceLoop) {
  for (int64_t k : {5, 300, 1100, 70000}) {
    for (bool extremes : {false, true}) {
      Tensor a = extremes ? Tensor(DType::kUInt8, Shape{2, 7, k}) : test::random_tensor<uint8_t>(Shape{2, 7, k}, 0, 255);
      Tensor b = extremes ? Tensor(DType::kInt8, Shape{k, 9}) : test::random_tensor<int8_t>(Shape{k, 9}, -128, 127);
      if (extremes) {  // a = 255 against zero point 0, b = -128: every product is -32640
        std::fill_n(a.data<uint8_t>(), a.numel(), uint8_t{255});
        std::fill_n(b.data<int8_t>(), b.numel(), int8_t{-128});
      }
      const MatmulPlan p = plan_matmul(a.shape(), b.shape());
      std::vector<int32_t> za(static_cast<size_t>(p.m)), zb(static_cast<size_t>(p.n));
      for (auto& z : za) z = extremes ? 0 : static_cast<int32_t>(test::rng()() % 256);
      for (auto& z : zb) z = extremes ? 0 : static_cast<int32_t>(test::rng()() % 256) - 128;
      const auto ref = integer_products(a, b, p, za, zb, nullptr, IntegerProducts::kReference);
      const auto fast = integer_products(a, b, p, za, zb, nullptr, IntegerProducts::kFloat);
      ASSERT_EQ(ref.size(), fast.size());
      for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(fast[i], ref[i]) << "k " << k << " element " << i;
      if (extremes) EXPECT_EQ(ref[0], static_cast<int32_t>(static_cast<uint32_t>(-32640 * k)));
    }
  }
}

}  // namespace onyx
