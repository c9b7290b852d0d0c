// Vision-language models: the image front end (genai/image.h) against Pillow and
// transformers' CLIPImageProcessor, and the LLaVA-style fixture (tests/fixtures/vision, made by
// tools/make_vision_fixture.py) generating with images, several sequences at once, against
// transformers' greedy tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "genai/generator.h"
#include "genai/image.h"
#include "genai/language_model.h"
#include "onyx/error.h"
#include "onyx/npy.h"
#include "genai/json_util.h"
#include "genai/model_folder.h"

namespace onyx::genai {
namespace {

const std::string kFixture = std::string(ONYX_SOURCE_DIR) + "/tests/fixtures/vision/llava-genai";

std::string message(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

RgbImage from_npy(const Tensor& t) {
  RgbImage img;
  img.h = t.shape()[0];
  img.w = t.shape()[1];
  img.px.assign(t.data<uint8_t>(), t.data<uint8_t>() + t.numel());
  return img;
}

TEST(Image, ResizeEqualsPillowForEveryFilter) {
  const RgbImage src = from_npy(read_npy(kFixture + "/resize/source.npy"));
  ASSERT_EQ(src.w, 37);
  ASSERT_EQ(src.h, 23);
  const std::pair<const char*, Resample> filters[] = {{"nearest", Resample::kNearest}, {"lanczos", Resample::kLanczos},
                                                      {"bilinear", Resample::kBilinear}, {"bicubic", Resample::kBicubic},
                                                      {"box", Resample::kBox}, {"hamming", Resample::kHamming}};
  const std::pair<int, int> sizes[] = {{16, 11}, {80, 45}, {37, 9}, {5, 50}};
  for (const auto& [name, filter] : filters)
    for (const auto& [w, h] : sizes) {
      SCOPED_TRACE(cat(name, " to ", w, "x", h));
      const RgbImage want = from_npy(read_npy(cat(kFixture, "/resize/", name, "_", w, "x", h, ".npy")));
      const RgbImage got = resize_image(src, h, w, filter);
      ASSERT_EQ(got.h, h);
      ASSERT_EQ(got.w, w);
      int worst = 0;
      size_t differ = 0;
      for (size_t i = 0; i < got.px.size(); ++i) {
        const int d = std::abs(int(got.px[i]) - int(want.px[i]));
        worst = std::max(worst, d);
        differ += d != 0;
      }
      // Pillow's 8-bit passes are integer arithmetic over the same weights: equal.
      EXPECT_EQ(worst, 0) << differ << " of " << got.px.size() << " samples differ";
    }
}

TEST(Image, PreprocessingEqualsClipImageProcessor) {
  const ImageProcessor p = read_image_processor(kFixture + "/preprocessor_config.json");
  EXPECT_EQ(p.shortest_edge, 32);
  EXPECT_EQ(p.resample, Resample::kBicubic);
  EXPECT_TRUE(p.do_center_crop);
  const Tensor want = read_npy(kFixture + "/reference_pixels.npy");  // [images, 3, 32, 32]
  ASSERT_EQ(want.shape(), Shape({3, 3, 32, 32}));
  int row = 0;
  for (const char* name : {"wide.png", "tall.png", "large.png"}) {
    SCOPED_TRACE(name);
    const Tensor got = preprocess_image(read_image(kFixture + "/images/" + name), p);
    ASSERT_EQ(got.shape(), Shape({3, 32, 32}));
    double worst = 0;
    for (int64_t i = 0; i < got.numel(); ++i)
      worst = std::max(worst, std::abs(double(got.data<float>()[i]) - want.data<float>()[row * got.numel() + i]));
    EXPECT_LE(worst, 1e-6);
    ++row;
  }
}

TEST(Image, ShortestEdgeAndCenterCropFollowTransformers) {
  // The longer side scaled and truncated, the shorter one the requested length.
  EXPECT_EQ(shortest_edge_size(29, 45, 32), (std::array<int64_t, 2>{32, 49}));   // 45 * 32 / 29 = 49.66
  EXPECT_EQ(shortest_edge_size(52, 20, 32), (std::array<int64_t, 2>{83, 32}));   // 52 * 32 / 20 = 83.2
  EXPECT_EQ(shortest_edge_size(10, 10, 7), (std::array<int64_t, 2>{7, 7}));
  // A crop larger than the image: the image centered (padding's larger half first), zeros around.
  RgbImage img;
  img.h = 3;
  img.w = 2;
  for (int i = 0; i < 18; ++i) img.px.push_back(static_cast<uint8_t>(10 + i));
  ImageProcessor p;
  p.do_resize = false;
  p.do_center_crop = true;
  p.crop_height = 6;
  p.crop_width = 5;
  p.do_rescale = false;
  p.do_normalize = false;
  const Tensor t = preprocess_image(img, p);
  ASSERT_EQ(t.shape(), Shape({3, 6, 5}));
  // Rows: pad top ceil(3/2) = 2; columns: pad left ceil(3/2) = 2.
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 6; ++y)
      for (int x = 0; x < 5; ++x) {
        const int sy = y - 2, sx = x - 2;
        const float want = sy >= 0 && sy < 3 && sx >= 0 && sx < 2 ? float(img.px[(sy * 2 + sx) * 3 + c]) : 0.f;
        EXPECT_EQ(t.data<float>()[(c * 6 + y) * 5 + x], want) << c << " " << y << " " << x;
      }
  // A crop smaller than the image: the window starts at the floor of half the difference.
  p.crop_height = 2;
  p.crop_width = 1;
  const Tensor s = preprocess_image(img, p);
  ASSERT_EQ(s.shape(), Shape({3, 2, 1}));
  EXPECT_EQ(s.data<float>()[0], float(img.px[(0 * 2 + 0) * 3]));  // top (3-2)//2 = 0, left (2-1)//2 = 0
  EXPECT_EQ(s.data<float>()[1], float(img.px[(1 * 2 + 0) * 3]));
}

TEST(Image, ErrorsNameWhatIsWrong) {
  const std::string dir = (std::filesystem::temp_directory_path() / cat("onyx_test_image_", ::getpid())).string();
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  const std::string tiles = write("a.json", R"({"image_processor_type": "LlavaNextImageProcessor", "size": 336})");
  EXPECT_NE(message([&] { read_image_processor(tiles); }).find("LlavaNextImageProcessor"), std::string::npos);
  const std::string pad = write("b.json", R"({"image_processor_type": "CLIPImageProcessor", "size": 336, "do_pad": true,
                                              "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]})");
  EXPECT_NE(message([&] { read_image_processor(pad); }).find("do_pad"), std::string::npos);
  const std::string std0 = write("c.json", R"({"size": {"height": 8, "width": 8}, "image_mean": 0.5, "image_std": [1, 0, 1]})");
  EXPECT_NE(message([&] { read_image_processor(std0); }).find("standard deviation"), std::string::npos);
  const std::string text = write("d.png", "not an image");
  EXPECT_NE(message([&] { read_image(text); }).find("not an image"), std::string::npos);
  EXPECT_NE(message([&] { read_image(dir + "/missing.png"); }).find("missing.png"), std::string::npos);
  std::filesystem::remove_all(dir);
  // A square config ("size": N) and a shortest-edge one both read.
  const ImageProcessor clip = read_image_processor(kFixture + "/preprocessor_config.json");
  EXPECT_EQ(clip.out_height(), 32);
}

TEST(Image, ExpandImageTokens) {
  EXPECT_EQ(expand_image_tokens({1, 9, 2, 9, 3}, 9, {2, 3}), (std::vector<int64_t>{1, 9, 9, 2, 9, 9, 9, 3}));
  EXPECT_EQ(expand_image_tokens({1, 2}, 9, {}), (std::vector<int64_t>{1, 2}));
  EXPECT_NE(message([] { expand_image_tokens({1, 9, 2}, 9, {2, 2}); }).find("1 image token (id 9) for 2 images"),
            std::string::npos);
}

// The fixture's cases, all at once and each alone: transformers' greedy tokens.
TEST(Image, LlavaFixtureGeneratesTransformersTokensInABatch) {
  Json doc = read_json_file(kFixture + "/reference.json");
  JsonNode ref(doc, "");
  SessionOptions opt;
  opt.device = "cpu";
  LanguageModel lm(kFixture, opt);
  ASSERT_TRUE(lm.folder().has_vision);
  EXPECT_EQ(lm.folder().vision.image_token_id, ref.at("image_token_id").as_int());
  std::vector<std::vector<int64_t>> prompts, want;
  std::vector<std::vector<Tensor>> features;
  for (size_t c = 0; c < ref.at("cases").size(); ++c) {
    JsonNode k = ref.at("cases").at(c);
    std::vector<Tensor> pixels;
    for (size_t i = 0; i < k.at("images").size(); ++i)
      pixels.push_back(preprocess_image(read_image(kFixture + "/images/" + k.at("images").at(i).as_string()),
                                        lm.image_processor()));
    std::vector<Tensor> f = pixels.empty() ? std::vector<Tensor>{} : lm.encode_images(pixels);
    std::vector<int64_t> rows;
    for (const Tensor& t : f) rows.push_back(t.shape()[0]);
    std::vector<int64_t> ids = json_ids(k.at("prompt_ids"));
    // The reference's prompt has its image tokens expanded already: collapse, then expand again.
    std::vector<int64_t> collapsed;
    for (size_t i = 0; i < ids.size(); ++i)
      if (!(ids[i] == lm.folder().vision.image_token_id && i > 0 && ids[i - 1] == ids[i])) collapsed.push_back(ids[i]);
    EXPECT_EQ(expand_image_tokens(collapsed, lm.folder().vision.image_token_id, rows), ids);
    prompts.push_back(ids);
    want.push_back(json_ids(k.at("generated_ids")));
    features.push_back(std::move(f));
  }
  SearchOptions s;
  s.max_new_tokens = ref.at("max_new_tokens").as_int();
  lm.set_image_features(features);
  std::vector<SequenceResult> all = Generator(lm).generate(prompts, s);
  for (size_t c = 0; c < prompts.size(); ++c) {
    SCOPED_TRACE(cat("case ", c, " in a batch of ", prompts.size()));
    EXPECT_EQ(all[c].generated_ids, want[c]);
  }
  for (size_t c = 0; c < prompts.size(); ++c) {
    SCOPED_TRACE(cat("case ", c, " alone"));
    lm.set_image_features({features[c]});
    EXPECT_EQ(Generator(lm).generate({prompts[c]}, s)[0].generated_ids, want[c]);
  }
  // Features that do not match the prompt's image tokens are refused, and the model stays usable.
  lm.set_image_features({});
  EXPECT_NE(message([&] { Generator(lm).generate({prompts[0]}, s); }).find("image tokens"), std::string::npos);
  lm.set_image_features({features[3]});
  EXPECT_EQ(Generator(lm).generate({prompts[3]}, s)[0].generated_ids, want[3]);
}

}  // namespace
}  // namespace onyx::genai
