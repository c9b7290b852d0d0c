#include "genai/image.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "genai/json_util.h"
#include "genai/model_folder.h"
#include "onyx/error.h"

namespace onyx::genai {

namespace {

constexpr double kPi = 3.14159265358979323846;

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= kPi;
  return std::sin(x) / x;
}

// Pillow's filters: their support (in input pixels at scale 1) and weight at distance x.
double filter_support(Resample f) {
  switch (f) {
    case Resample::kBox: return 0.5;
    case Resample::kBilinear: return 1.0;
    case Resample::kHamming: return 1.0;
    case Resample::kBicubic: return 2.0;
    case Resample::kLanczos: return 3.0;
    case Resample::kNearest: break;
  }
  return 0.0;
}

double filter_weight(Resample f, double x) {
  switch (f) {
    case Resample::kBox: return x > -0.5 && x <= 0.5 ? 1.0 : 0.0;
    case Resample::kBilinear:
      x = std::abs(x);
      return x < 1.0 ? 1.0 - x : 0.0;
    case Resample::kHamming:
      x = std::abs(x);
      if (x == 0.0) return 1.0;
      if (x >= 1.0) return 0.0;
      return sinc(x) * (0.54 + 0.46 * std::cos(kPi * x));
    case Resample::kBicubic: {
      constexpr double a = -0.5;  // Pillow's choice of the cubic's free parameter
      x = std::abs(x);
      if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
      if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
      return 0.0;
    }
    case Resample::kLanczos:
      return x > -3.0 && x < 3.0 ? sinc(x) * sinc(x / 3.0) : 0.0;
    case Resample::kNearest: break;
  }
  return 0.0;
}

// Weights in fixed point with 22 fractional bits (8-bit samples times the weights, summed,
// stay inside 32 bits), as Pillow's 8-bit passes use them.
constexpr int kPrecisionBits = 32 - 8 - 2;

// One output sample's window of input samples and their weights.
struct Taps {
  std::vector<int64_t> first, count;
  std::vector<int32_t> weights;  // count[i] of them from i * width
  int64_t width = 0;
};

Taps taps(int64_t in, int64_t out, Resample f) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double widen = std::max(scale, 1.0);  // shrinking widens the filter over the input
  const double support = filter_support(f) * widen;
  Taps t;
  t.width = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(out);
  t.count.resize(out);
  t.weights.assign(static_cast<size_t>(out * t.width), 0);
  std::vector<double> w(static_cast<size_t>(t.width));
  for (int64_t o = 0; o < out; ++o) {
    const double center = (static_cast<double>(o) + 0.5) * scale;
    // The window's ends rounded by truncation, as Pillow's int conversion does.
    const int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(center - support + 0.5));
    const int64_t hi = std::min<int64_t>(in, static_cast<int64_t>(center + support + 0.5));
    const int64_t n = std::min<int64_t>(hi - lo, t.width);
    double sum = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      w[k] = filter_weight(f, (static_cast<double>(k + lo) - center + 0.5) / widen);
      sum += w[k];
    }
    for (int64_t k = 0; k < n; ++k) {
      const double v = sum != 0.0 ? w[k] / sum : w[k];
      const double fixed = v * static_cast<double>(1 << kPrecisionBits);
      t.weights[o * t.width + k] = static_cast<int32_t>(fixed < 0 ? fixed - 0.5 : fixed + 0.5);
    }
    t.first[o] = lo;
    t.count[o] = n;
  }
  return t;
}

uint8_t round_sample(int64_t acc) {
  const int64_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255));
}

// One pass along the rows (horizontal) or the columns (vertical) of an RGB image.
RgbImage resample_pass(const RgbImage& in, int64_t out_len, Resample f, bool horizontal) {
  RgbImage out;
  out.h = horizontal ? in.h : out_len;
  out.w = horizontal ? out_len : in.w;
  out.px.resize(static_cast<size_t>(out.h * out.w * 3));
  const Taps t = taps(horizontal ? in.w : in.h, out_len, f);
  const int64_t half = int64_t{1} << (kPrecisionBits - 1);
  for (int64_t y = 0; y < out.h; ++y)
    for (int64_t x = 0; x < out.w; ++x) {
      const int64_t o = horizontal ? x : y;
      const int32_t* k = &t.weights[o * t.width];
      for (int c = 0; c < 3; ++c) {
        int64_t acc = half;
        for (int64_t j = 0; j < t.count[o]; ++j) {
          const int64_t s = t.first[o] + j;
          const int64_t at = horizontal ? (y * in.w + s) : (s * in.w + x);
          acc += static_cast<int64_t>(in.px[at * 3 + c]) * k[j];
        }
        out.px[(y * out.w + x) * 3 + c] = round_sample(acc);
      }
    }
  return out;
}

std::array<int64_t, 2> size_of(const JsonNode& n, bool square) {
  if (!n.is_object()) {
    const int64_t v = n.as_int();
    return square ? std::array<int64_t, 2>{v, v} : std::array<int64_t, 2>{0, v};
  }
  if (n.has("shortest_edge")) return {0, n.at("shortest_edge").as_int()};
  return {n.at("height").as_int(), n.at("width").as_int()};
}

std::array<double, 3> triple(const JsonNode& n) {
  if (!n.is_array()) {
    const double v = n.as_number();
    return {v, v, v};
  }
  if (n.size() != 3) n.fail(cat("has ", n.size(), " values; an RGB image needs 3"));
  return {n.at(size_t{0}).as_number(), n.at(size_t{1}).as_number(), n.at(size_t{2}).as_number()};
}

}  // namespace

int64_t ImageProcessor::out_height() const {
  if (do_center_crop) return crop_height;
  return do_resize && !shortest_edge ? height : 0;
}

int64_t ImageProcessor::out_width() const {
  if (do_center_crop) return crop_width;
  return do_resize && !shortest_edge ? width : 0;
}

ImageProcessor read_image_processor(const std::string& path) {
  return with_context(cat("'", path, "'"), [&] {
    Json doc = read_json_file(path);
    JsonNode root(doc, "");
    root.expect_object();
    ImageProcessor p;
    p.type = root.string_or("image_processor_type", "");
    // The processors whose preprocessing is resize, crop, rescale and normalize. Their "Fast"
    // twins resize through torchvision, whose values differ from Pillow's by a few levels: onyx
    // follows the Pillow path of the slow class.
    std::string base = p.type;
    if (base.size() > 4 && base.compare(base.size() - 4, 4, "Fast") == 0) base.resize(base.size() - 4);
    const bool clip_like = base == "CLIPImageProcessor";
    if (!(clip_like || base == "SiglipImageProcessor" || base == "ViTImageProcessor" || base.empty()))
      root.at("image_processor_type").fail(cat("\"", p.type, "\" is not an image processor onyx follows (it follows "
                                               "CLIPImageProcessor, SiglipImageProcessor and ViTImageProcessor: "
                                               "resize, center crop, rescale, normalize)"));
    for (const char* unsupported : {"do_pad", "image_grid_pinpoints", "do_image_splitting"})
      if (root.has(unsupported) && !root.at(unsupported).is_null() &&
          !(root.at(unsupported).value().is_boolean() && !root.at(unsupported).as_bool()))
        root.at(unsupported).fail("is a preprocessing step onyx does not follow (padding or tiling of images)");
    p.do_resize = root.bool_or("do_resize", true);
    if (p.do_resize) {
      JsonNode size = root.at("size");
      const auto hw = size_of(size, !clip_like);
      if (hw[0] == 0) p.shortest_edge = hw[1];
      else {
        p.height = hw[0];
        p.width = hw[1];
      }
      if ((p.shortest_edge == 0 && (p.height <= 0 || p.width <= 0)) || p.shortest_edge < 0)
        size.fail("is not a size to resize to");
    }
    const int64_t resample = root.int_or("resample", 3);
    if (resample < 0 || resample > 5) root.at("resample").fail(cat(resample, " is not one of Pillow's filters (0-5)"));
    p.resample = static_cast<Resample>(resample);
    p.do_center_crop = root.bool_or("do_center_crop", false);
    if (p.do_center_crop) {
      const auto hw = size_of(root.at("crop_size"), true);
      p.crop_height = hw[0];
      p.crop_width = hw[1];
      if (p.crop_height <= 0 || p.crop_width <= 0) root.at("crop_size").fail("is not a size to crop to");
    }
    p.do_rescale = root.bool_or("do_rescale", true);
    if (root.has("rescale_factor")) p.rescale_factor = root.at("rescale_factor").as_number();
    p.do_normalize = root.bool_or("do_normalize", true);
    if (p.do_normalize) {
      p.mean = triple(root.at("image_mean"));
      p.std = triple(root.at("image_std"));
      for (double s : p.std)
        if (!(s != 0.0)) root.at("image_std").fail("has a zero (or NaN) standard deviation");
    }
    return p;
  });
}

RgbImage read_image(const std::string& path) {
  return with_context(cat("image '", path, "'"), [&] {
    ONYX_CHECK(std::filesystem::exists(path), "does not exist");
    std::ifstream in(path, std::ios::binary);
    ONYX_CHECK(in, "cannot be read");
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ONYX_CHECK(!bytes.empty(), "is empty");
    return decode_image(bytes.data(), bytes.size());
  });
}

RgbImage resize_image(const RgbImage& img, int64_t height, int64_t width, Resample filter) {
  ONYX_CHECK(height > 0 && width > 0, "cannot resize to ", height, "x", width);
  ONYX_CHECK(img.h > 0 && img.w > 0, "cannot resize an empty image");
  if (filter == Resample::kNearest) {
    // Each output pixel takes the input pixel under its center.
    RgbImage out;
    out.h = height;
    out.w = width;
    out.px.resize(static_cast<size_t>(height * width * 3));
    const double sy = static_cast<double>(img.h) / height, sx = static_cast<double>(img.w) / width;
    for (int64_t y = 0; y < height; ++y) {
      const int64_t iy = std::min<int64_t>(img.h - 1, static_cast<int64_t>(std::floor((y + 0.5) * sy)));
      for (int64_t x = 0; x < width; ++x) {
        const int64_t ix = std::min<int64_t>(img.w - 1, static_cast<int64_t>(std::floor((x + 0.5) * sx)));
        std::copy_n(&img.px[(iy * img.w + ix) * 3], 3, &out.px[(y * width + x) * 3]);
      }
    }
    return out;
  }
  RgbImage cur = img;
  if (width != img.w) cur = resample_pass(cur, width, filter, true);
  if (height != img.h) cur = resample_pass(cur, height, filter, false);
  return cur;
}

std::array<int64_t, 2> shortest_edge_size(int64_t height, int64_t width, int64_t shortest_edge) {
  // The longer side scaled in proportion, truncated (transformers' int()).
  if (width <= height) return {static_cast<int64_t>(static_cast<double>(shortest_edge) * height / width), shortest_edge};
  return {shortest_edge, static_cast<int64_t>(static_cast<double>(shortest_edge) * width / height)};
}

Tensor preprocess_image(const RgbImage& input, const ImageProcessor& p) {
  RgbImage img = input;
  if (p.do_resize) {
    const auto hw = p.shortest_edge ? shortest_edge_size(img.h, img.w, p.shortest_edge)
                                    : std::array<int64_t, 2>{p.height, p.width};
    ONYX_CHECK(hw[0] > 0 && hw[1] > 0, "a ", img.w, "x", img.h, " image resizes to nothing");
    if (hw[0] != img.h || hw[1] != img.w) img = resize_image(img, hw[0], hw[1], p.resample);
  }
  // The crop window, in the image's coordinates: centered by floor division, the part outside
  // the image zero.
  int64_t top = 0, left = 0, H = img.h, W = img.w;
  if (p.do_center_crop) {
    H = p.crop_height;
    W = p.crop_width;
    auto floor_half = [](int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); };
    top = floor_half(img.h - H);
    left = floor_half(img.w - W);
    if (top < 0 || left < 0 || top + H > img.h || left + W > img.w) {
      // A smaller image is first padded to at least the crop's size, centered (ceil of half).
      const int64_t ph = std::max(H, img.h), pw = std::max(W, img.w);
      const int64_t pad_top = (ph - img.h + 1) / 2, pad_left = (pw - img.w + 1) / 2;
      top = std::max<int64_t>(0, top + pad_top) - pad_top;
      left = std::max<int64_t>(0, left + pad_left) - pad_left;
    }
  }
  Tensor out(DType::kFloat32, Shape{3, H, W});
  float* o = out.data<float>();
  for (int c = 0; c < 3; ++c) {
    const float mean = static_cast<float>(p.mean[c]), std = static_cast<float>(p.std[c]);
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) {
        const int64_t sy = top + y, sx = left + x;
        const uint8_t v = sy >= 0 && sy < img.h && sx >= 0 && sx < img.w ? img.px[(sy * img.w + sx) * 3 + c] : 0;
        float f = p.do_rescale ? static_cast<float>(static_cast<double>(v) * p.rescale_factor) : static_cast<float>(v);
        if (p.do_normalize) f = (f - mean) / std;
        o[(c * H + y) * W + x] = f;
      }
  }
  return out;
}

}  // namespace onyx::genai
