// Images for vision pipelines: a file decoded to 8-bit RGB (ops/image_decode.h), then the
// preprocessing a model folder's preprocessor_config.json specifies, computed as Hugging Face's
// image processors compute it on their PIL path (CLIPImageProcessor, SiglipImageProcessor,
// ViTImageProcessor): resize (the shortest edge to a length, or to a fixed size) by Pillow's
// resampling filters in 8 bits, center crop (zero-padded where the image is smaller), rescale
// and normalize per channel, channels first.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "onyx/tensor.h"
#include "ops/image_decode.h"

namespace onyx::genai {

// Pillow's resampling filters, by its numbering (preprocessor_config.json's "resample").
enum class Resample : int { kNearest = 0, kLanczos = 1, kBilinear = 2, kBicubic = 3, kBox = 4, kHamming = 5 };

struct ImageProcessor {
  std::string type;  // image_processor_type
  bool do_resize = true;
  int64_t shortest_edge = 0;      // resize so that the shorter side is this long (aspect kept), or
  int64_t height = 0, width = 0;  // to exactly this size
  Resample resample = Resample::kBicubic;
  bool do_center_crop = false;
  int64_t crop_height = 0, crop_width = 0;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<double, 3> mean{0.5, 0.5, 0.5}, std{0.5, 0.5, 0.5};
  // The size of every preprocessed image when it does not depend on the input (a crop or a
  // fixed resize); 0 otherwise.
  int64_t out_height() const;
  int64_t out_width() const;
};

// Reads preprocessor_config.json (an error names the file and the key it cannot use: a
// processor type whose preprocessing onyx does not follow, such as tiling or padding).
ImageProcessor read_image_processor(const std::string& path);

// An image file (JPEG, PNG, TIFF, WebP, JPEG 2000, BMP, PNM) as 8-bit RGB.
RgbImage read_image(const std::string& path);

// `img` resampled to height x width by `filter`, as Pillow's Image.resize computes it for an RGB
// image (separable passes, horizontal first, each rounded to 8 bits; the filter widened by the
// scale when shrinking).
RgbImage resize_image(const RgbImage& img, int64_t height, int64_t width, Resample filter);

// The output size of transformers' get_resize_output_image_size for a shortest-edge resize.
std::array<int64_t, 2> shortest_edge_size(int64_t height, int64_t width, int64_t shortest_edge);

// `img` preprocessed by `p`: float32 [3, height, width].
Tensor preprocess_image(const RgbImage& img, const ImageProcessor& p);

}  // namespace onyx::genai
