// The narrow element types (core/narrow_types.h): every code of each 8- and 4-bit float read
// and written back, values worked out by hand from each format's definition (bias, specials),
// round half to even at the ties, saturation, and the packing of 4- and 2-bit elements.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/narrow_types.h"
#include "op_test_util.h"

namespace onyx {

namespace {

const DType kFloats[] = {DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2, DType::kFloat8E5M2FNUZ,
                         DType::kFloat4E2M1};

TEST(NarrowTypes, EveryCodeReadsBackToItself) {
  for (DType t : kFloats) {
    const int codes = narrow_bits(t) == 8 ? 256 : 16;
    for (int c = 0; c < codes; ++c) {
      const double v = narrow_to_double(t, static_cast<uint8_t>(c));
      if (std::isnan(v)) continue;
      const uint8_t back = narrow_from_double(t, v, /*saturate=*/false);
      // -0 has no code of its own in the fnuz types; everything else is exact.
      if (v == 0) EXPECT_EQ(narrow_to_double(t, back), 0.0) << dtype_name(t) << " code " << c;
      else EXPECT_EQ(back, c) << dtype_name(t) << " code " << c << " = " << v;
    }
  }
}

TEST(NarrowTypes, KnownValuesAndSpecials) {
  // e4m3fn: bias 7, no infinity, S.1111.111 is NaN; largest 1.75 * 2^8.
  EXPECT_EQ(narrow_to_double(DType::kFloat8E4M3FN, 0x7e), 448.0);
  EXPECT_EQ(narrow_to_double(DType::kFloat8E4M3FN, 0x08), std::ldexp(1.0, -6));  // smallest normal
  EXPECT_EQ(narrow_to_double(DType::kFloat8E4M3FN, 0x01), std::ldexp(1.0, -9));  // smallest subnormal
  EXPECT_TRUE(std::isnan(narrow_to_double(DType::kFloat8E4M3FN, 0xff)));
  // e4m3fnuz: bias 8, 0x80 the only NaN; largest 1.875 * 2^7.
  EXPECT_EQ(narrow_to_double(DType::kFloat8E4M3FNUZ, 0x7f), 240.0);
  EXPECT_TRUE(std::isnan(narrow_to_double(DType::kFloat8E4M3FNUZ, 0x80)));
  // e5m2: IEEE-like, bias 15, with infinities.
  EXPECT_EQ(narrow_to_double(DType::kFloat8E5M2, 0x7b), 57344.0);
  EXPECT_EQ(narrow_to_double(DType::kFloat8E5M2, 0xfc), -INFINITY);
  EXPECT_EQ(narrow_to_double(DType::kFloat8E5M2FNUZ, 0x7f), 57344.0);
  // e2m1: 0, 0.5, 1, 1.5, 2, 3, 4, 6.
  const double e2m1[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(narrow_to_double(DType::kFloat4E2M1, static_cast<uint8_t>(c)), e2m1[c]);
    EXPECT_EQ(narrow_to_double(DType::kFloat4E2M1, static_cast<uint8_t>(c | 8)), -e2m1[c]);
  }
  // e8m0: 2^(code - 127), 0xff NaN.
  EXPECT_EQ(narrow_to_double(DType::kFloat8E8M0, 127), 1.0);
  EXPECT_EQ(narrow_to_double(DType::kFloat8E8M0, 0), std::ldexp(1.0, -127));
  EXPECT_TRUE(std::isnan(narrow_to_double(DType::kFloat8E8M0, 0xff)));
}

TEST(NarrowTypes, RoundsHalfToEvenAndSaturates) {
  const DType fn = DType::kFloat8E4M3FN;
  // Between 1 (0x38) and 1.125 (0x39) the tie goes to the even code; so between 1.125 and 1.25.
  EXPECT_EQ(narrow_from_double(fn, 1.0625), 0x38);
  EXPECT_EQ(narrow_from_double(fn, 1.1875), 0x3a);
  EXPECT_EQ(narrow_from_double(fn, 1.07), 0x39);
  // Past the largest value: 464 ties between 448 and the next step (480) and stays at 448;
  // beyond it, NaN without saturation (e4m3fn has no infinity) and 448 with it.
  EXPECT_EQ(narrow_from_double(fn, 464.0, false), 0x7e);
  EXPECT_TRUE(std::isnan(narrow_to_double(fn, narrow_from_double(fn, 470.0, false))));
  EXPECT_EQ(narrow_from_double(fn, 1e9, true), 0x7e);
  EXPECT_EQ(narrow_from_double(fn, -INFINITY, true), 0xfe);
  // e5m2 overflows to infinity when not saturating; the fnuz types to their NaN.
  EXPECT_EQ(narrow_from_double(DType::kFloat8E5M2, 1e9, false), 0x7c);
  EXPECT_EQ(narrow_from_double(DType::kFloat8E5M2FNUZ, 1e9, false), 0x80);
  // A negative value that rounds to zero is +0 in the fnuz types (0x80 would be NaN).
  EXPECT_EQ(narrow_from_double(DType::kFloat8E4M3FNUZ, -1e-9), 0x00);
  EXPECT_EQ(narrow_from_double(DType::kFloat8E4M3FN, -1e-9), 0x80);
  // e2m1 always saturates; 0.25 ties between 0 and 0.5 and goes to 0.
  EXPECT_EQ(narrow_from_double(DType::kFloat4E2M1, 100.0, false), 0x7);
  EXPECT_EQ(narrow_from_double(DType::kFloat4E2M1, 0.25), 0x0);
  EXPECT_EQ(narrow_from_double(DType::kFloat4E2M1, -2.5), 0xc);  // between 2 (0x4) and 3 (0x5): even
  // e8m0 by round mode: 3 lies between 2 (128) and 4 (129).
  EXPECT_EQ(narrow_from_double(DType::kFloat8E8M0, 3.0, true, E8M0Round::kUp), 129);
  EXPECT_EQ(narrow_from_double(DType::kFloat8E8M0, 3.0, true, E8M0Round::kDown), 128);
}

TEST(NarrowTypes, IntegersWrapLikeACast) {
  EXPECT_EQ(static_cast<int8_t>(narrow_from_int64(DType::kInt4, 8)), -8);
  EXPECT_EQ(static_cast<int8_t>(narrow_from_int64(DType::kInt4, -9)), 7);
  EXPECT_EQ(narrow_from_int64(DType::kUInt4, 17), 1);
  EXPECT_EQ(static_cast<int8_t>(narrow_from_int64(DType::kInt2, 2)), -2);
  EXPECT_EQ(narrow_from_int64(DType::kUInt2, -1), 3);
  EXPECT_EQ(static_cast<int8_t>(narrow_from_double(DType::kInt4, -3.9)), -3);  // truncation toward zero
}

TEST(NarrowTypes, PackingPutsTheFirstElementInTheLowBits) {
  // int4 [-8 .. 6] (15 elements, an odd count): 8 bytes, the last half empty.
  std::vector<uint8_t> v;
  for (int i = -8; i <= 6; ++i) v.push_back(narrow_from_int64(DType::kInt4, i));
  std::vector<uint8_t> packed(static_cast<size_t>(narrow_packed_bytes(DType::kInt4, 15)));
  ASSERT_EQ(packed.size(), 8u);
  pack_narrow(DType::kInt4, v.data(), 15, packed.data());
  EXPECT_EQ(packed[0], 0x98);  // -8 (0x8) low, -7 (0x9) high
  EXPECT_EQ(packed[7], 0x06);
  std::vector<uint8_t> back(15);
  unpack_narrow(DType::kInt4, packed.data(), 15, back.data());
  EXPECT_EQ(back, v);
  // uint2: four to a byte.
  const std::vector<uint8_t> u2 = {1, 2, 3, 0, 3};
  std::vector<uint8_t> p2(2);
  pack_narrow(DType::kUInt2, u2.data(), 5, p2.data());
  EXPECT_EQ(p2[0], 0x39);
  EXPECT_EQ(p2[1], 0x03);
}

TEST(NarrowTypes, CastAndQuantizeGoThroughTheNarrowValues) {
  // float -> float8e4m3fn -> float: the values the format holds come back; others round.
  Tensor x = Tensor::from_vector<float>({0.f, 1.0625f, -3.3f, 500.f, 448.f}, Shape{5});
  Tensor to_f8 = test::run_op("Cast", {x}, {test::attr_int("to", 17)}, 1, 21)[0];
  ASSERT_EQ(to_f8.dtype(), DType::kFloat8E4M3FN);
  Tensor back = test::run_op("Cast", {to_f8}, {test::attr_int("to", 1)}, 1, 21)[0];
  const float want[] = {0.f, 1.f, -3.25f, 448.f, 448.f};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(back.data<float>()[i], want[i]) << "element " << i;
  // QuantizeLinear to int4 saturates to [-8, 7]; DequantizeLinear reads the values back.
  Tensor y = Tensor::from_vector<float>({-20.f, -3.f, 2.f, 50.f}, Shape{4});
  Tensor zp(DType::kInt4, Shape{});
  *static_cast<uint8_t*>(zp.raw()) = narrow_from_int64(DType::kInt4, 1);
  Tensor q = test::run_op("QuantizeLinear", {y, Tensor::scalar<float>(2.f), zp}, {}, 1, 21)[0];
  ASSERT_EQ(q.dtype(), DType::kInt4);
  const double want_q[] = {-8, -1, 2, 7};  // rint(x / 2) + 1, saturated
  for (int i = 0; i < 4; ++i) EXPECT_EQ(q.get_as_double(i), want_q[i]) << "element " << i;
  Tensor d = test::run_op("DequantizeLinear", {q, Tensor::scalar<float>(2.f), zp}, {}, 1, 21)[0];
  const float want_d[] = {-18.f, -4.f, 2.f, 12.f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(d.data<float>()[i], want_d[i]) << "element " << i;
}

TEST(NarrowTypes, BitCastKeepsTheBitsOfSubByteElements) {
  Tensor x(DType::kUInt4, Shape{3});
  const uint8_t bits[] = {0xf, 0x8, 0x7};
  std::memcpy(x.raw(), bits, 3);
  Tensor y = test::run_op("BitCast", {x}, {test::attr_int("to", 22)}, 1, 26)[0];  // to int4
  ASSERT_EQ(y.dtype(), DType::kInt4);
  EXPECT_EQ(y.get_as_double(0), -1);
  EXPECT_EQ(y.get_as_double(1), -8);
  EXPECT_EQ(y.get_as_double(2), 7);
  EXPECT_THROW(test::run_op("BitCast", {x}, {test::attr_int("to", 3)}, 1, 26), Error);  // 4 bits vs 8
}

}  // namespace

}  // namespace onyx
