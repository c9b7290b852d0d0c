// Encoded images (JPEG, PNG, TIFF, WebP, JPEG 2000, BMP, binary PNM) to 8-bit RGB, as the
// ImageDecoder op and the vision pipelines (genai/image.h) read them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace onyx {

// An RGB image, 8 bits a channel, rows top to bottom ([h, w, 3]).
struct RgbImage {
  int64_t h = 0, w = 0;
  std::vector<uint8_t> px;
};

// The format is read from the bytes' signature; data that is no image onyx decodes, or a
// header declaring more than 2^27 pixels, is an error naming the format.
RgbImage decode_image(const uint8_t* data, size_t size);

}  // namespace onyx
