// ImageDecoder on images built here byte by byte (BMP, PNM: the formats onyx reads itself), and
// bad data: truncated, lying headers, unknown formats are errors that say what is wrong.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace onyx {

namespace {

Tensor bytes(const std::vector<uint8_t>& b) { return Tensor::from_vector<uint8_t>(b, Shape{int64_t(b.size())}); }

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// A 24-bit bottom-up BMP of 2x2 pixels: rows padded to 8 bytes, pixels stored B, G, R.
std::vector<uint8_t> bmp_2x2(int32_t width = 2, int32_t height = 2) {
  std::vector<uint8_t> b(54 + 16, 0);
  b[0] = 'B', b[1] = 'M';
  put32(b, 2, static_cast<uint32_t>(b.size()));
  put32(b, 10, 54);
  put32(b, 14, 40);
  put32(b, 18, static_cast<uint32_t>(width));
  put32(b, 22, static_cast<uint32_t>(height));
  b[26] = 1, b[28] = 24;
  // Bottom row first: (10,20,30) (40,50,60); then the top row: (70,80,90) (100,110,120), as RGB.
  const uint8_t rgb[2][2][3] = {{{10, 20, 30}, {40, 50, 60}}, {{70, 80, 90}, {100, 110, 120}}};
  for (int r = 0; r < 2; ++r)
    for (int x = 0; x < 2; ++x)
      for (int c = 0; c < 3; ++c) b[54 + r * 8 + x * 3 + c] = rgb[r][x][2 - c];
  return b;
}

std::vector<uint8_t> decode(const std::vector<uint8_t>& b, const char* format) {
  Tensor y = test::run_op("ImageDecoder", {bytes(b)}, {test::attr_string("pixel_format", format)}, 1, 20)[0];
  return std::vector<uint8_t>(y.data<uint8_t>(), y.data<uint8_t>() + y.numel());
}

}  // namespace

TEST(ImageDecoder, BmpRowsComeTopDownInEachPixelFormat) {
  EXPECT_EQ(decode(bmp_2x2(), "RGB"), (std::vector<uint8_t>{70, 80, 90, 100, 110, 120, 10, 20, 30, 40, 50, 60}));
  EXPECT_EQ(decode(bmp_2x2(), "BGR"), (std::vector<uint8_t>{90, 80, 70, 120, 110, 100, 30, 20, 10, 60, 50, 40}));
  // Luma (0.299, 0.587, 0.114) rounded: 70*.299 + 80*.587 + 90*.114 = 77.65 -> 78.
  const auto gray = decode(bmp_2x2(), "Grayscale");
  ASSERT_EQ(gray.size(), 4u);
  EXPECT_EQ(gray[0], 78);
  EXPECT_EQ(gray[2], 18);  // 10*.299 + 20*.587 + 30*.114 = 18.15
}

TEST(ImageDecoder, PnmReadsItsHeaderAndScalesToEightBits) {
  const std::string head = "P6\n# a comment\n2 1\n15\n";
  std::vector<uint8_t> b(head.begin(), head.end());
  for (uint8_t v : {0, 15, 5, 1, 2, 3}) b.push_back(v);
  EXPECT_EQ(decode(b, "RGB"), (std::vector<uint8_t>{0, 255, 85, 17, 34, 51}));  // v * 255 / 15
}

TEST(ImageDecoder, BadDataIsAnErrorThatSaysWhat) {
  auto bmp = bmp_2x2();
  EXPECT_NE(error_of([&] { decode(std::vector<uint8_t>(bmp.begin(), bmp.begin() + 60), "RGB"); })
                .find("pixel data runs past the end"),
            std::string::npos);
  EXPECT_NE(error_of([&] { decode(bmp_2x2(200000, 200000), "RGB"); }).find("at most"), std::string::npos);
  EXPECT_NE(error_of([&] { decode({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, "RGB"); }).find("not an image"),
            std::string::npos);
  const std::vector<uint8_t> jpeg_start = {0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0};
  EXPECT_NE(error_of([&] { decode(jpeg_start, "RGB"); }).find("JPEG"), std::string::npos);
  const std::string pnm = "P6\n2 2\n255\n";
  EXPECT_NE(error_of([&] { decode(std::vector<uint8_t>(pnm.begin(), pnm.end()), "RGB"); }).find("runs past the end"),
            std::string::npos);
  EXPECT_NE(error_of([&] { decode(bmp_2x2(), "CMYK"); }).find("pixel_format"), std::string::npos);
}

}  // namespace onyx
