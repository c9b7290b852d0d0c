#include <gtest/gtest.h>

#include <random>

#include "onyx/error.h"
#include "onyx/tensor.h"

namespace onyx {

TEST(Error, ChainPrintsOutermostFirst) {
  try {
    with_context("loading m.onnx", [] {
      with_context("node 'n' (Concat)", [] { throw Error("input 2: shape [1,8] vs [1,9]"); });
    });
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "loading m.onnx: node 'n' (Concat): input 2: shape [1,8] vs [1,9]");
    EXPECT_EQ(e.chain().size(), 3u);
    EXPECT_EQ(e.message(), "input 2: shape [1,8] vs [1,9]");
  }
}

TEST(Error, ForeignExceptionsKeepContext) {
  try {
    with_context("outer", [] { throw std::runtime_error("boom"); });
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "outer: boom");
  }
}

TEST(Float16, RoundTripsEveryHalf) {
  // Every finite half converts to float and back to the same bits.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t bits = static_cast<uint16_t>(h);
    if ((bits & 0x7c00) == 0x7c00 && (bits & 0x3ff)) continue;  // NaN payloads
    float f = Float16::to_float(bits);
    EXPECT_EQ(Float16::from_float(f), bits) << "half 0x" << std::hex << h;
  }
}

TEST(Float16, RoundsToNearestAgainstDouble) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-70000.f, 70000.f);
  for (int i = 0; i < 20000; ++i) {
    float f = dist(rng) * (i % 3 == 0 ? 1e-4f : 1.f);
    float h = Float16(f);
    if (std::abs(f) > 65504.f) continue;
    // The nearest half is at most half an ulp away: find both neighbours.
    uint16_t b = Float16::from_float(f);
    float lo = Float16::to_float(static_cast<uint16_t>(b - 1)), hi = Float16::to_float(static_cast<uint16_t>(b + 1));
    EXPECT_LE(std::abs(static_cast<double>(h) - f), std::abs(static_cast<double>(lo) - f) + 1e-12);
    EXPECT_LE(std::abs(static_cast<double>(h) - f), std::abs(static_cast<double>(hi) - f) + 1e-12);
  }
}

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  // 1 + 2^-8 lies exactly between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(BFloat16(1.0f + 1.0f / 256).bits, 0x3f80);
  EXPECT_EQ(BFloat16(1.0f + 3.0f / 256).bits, 0x3f82);
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::nanf("")))));
}

TEST(Shape, Broadcast) {
  EXPECT_EQ(broadcast_shapes(Shape{2, 1, 4}, Shape{3, 1}), (Shape{2, 3, 4}));
  EXPECT_THROW(broadcast_shapes(Shape{2, 3}, Shape{4}), Error);
  PartialShape a = PartialShape::of_rank(2);
  a.dims[1] = 5;
  PartialShape out = broadcast_shapes(a, PartialShape(Shape{1, 5}));
  EXPECT_EQ(out.dims[0], PartialShape::kUnknown);
  EXPECT_EQ(out.dims[1], 5);
}

TEST(Tensor, StorageGoesBackToItsAllocator) {
  auto alloc = make_cpu_allocator();
  {
    Tensor t(DType::kFloat32, Shape{256, 256}, *alloc);
    Tensor v = t.view(Shape{65536});
    EXPECT_EQ(alloc->stats().in_use_bytes, 256u * 256 * 4);
    t = Tensor();
    EXPECT_EQ(alloc->stats().in_use_bytes, 256u * 256 * 4) << "a view keeps its source's bytes";
  }
  EXPECT_EQ(alloc->stats().in_use_bytes, 0u);
  EXPECT_EQ(alloc->stats().high_water_bytes, 256u * 256 * 4);
}

TEST(Tensor, OutlivesASharedAllocator) {
  Tensor t;
  {
    auto alloc = make_cpu_allocator();
    t = Tensor(DType::kInt64, Shape{3}, *alloc);
  }
  t.data<int64_t>()[2] = 7;  // the storage still holds its allocator
  EXPECT_EQ(t.get_as_int64(2), 7);
}

TEST(Tensor, StringsAreConstructedAndDestroyed) {
  Tensor t(DType::kString, Shape{4});
  t.data<std::string>()[3] = std::string(100, 'x');
  Tensor c = t.clone();
  EXPECT_EQ(c.data<std::string>()[3].size(), 100u);
}

}  // namespace onyx
