// The speech front end (genai/audio.h): the log-mel features of the fixture's clips against
// transformers' WhisperFeatureExtractor (tests/fixtures/speech, made by
// tools/make_whisper_fixture.py), the mel filters against their float64 definition, decoding,
// channel mixing and rate conversion of files written here, and the errors.
#include <gtest/gtest.h>
#include <sndfile.h>

#include <cmath>
#include <complex>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "genai/audio.h"
#include "onyx/error.h"
#include "onyx/npy.h"

namespace onyx::genai {
namespace {

const std::string kFixture = std::string(ONYX_SOURCE_DIR) + "/tests/fixtures/speech/whisper-optimum";
constexpr double kPi = 3.14159265358979323846;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / cat("onyx_test_audio_", ::getpid(), "_", name)).string();
}

// Writes `frames` x `channels` interleaved float samples as 16-bit PCM WAV.
void write_wav(const std::string& path, const std::vector<float>& interleaved, int channels, int rate) {
  SF_INFO info{};
  info.channels = channels;
  info.samplerate = rate;
  info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  ASSERT_NE(f, nullptr) << sf_strerror(nullptr);
  sf_writef_float(f, interleaved.data(), static_cast<sf_count_t>(interleaved.size() / channels));
  sf_close(f);
}

TEST(Audio, FeaturesEqualTransformersExtractor) {
  const AudioFeatureConfig config = AudioFeatureConfig::from_folder(kFixture);
  EXPECT_EQ(config.feature_size, 80);
  EXPECT_EQ(config.nb_max_frames, 3000);
  const Tensor want = read_npy(kFixture + "/reference_features.npy");  // [clips, 80, frames kept]
  ASSERT_EQ(want.shape().rank(), 3);
  const int64_t kept = want.shape()[2];
  int row = 0;
  for (const char* clip : {"tones.wav", "short.wav"}) {
    SCOPED_TRACE(clip);
    const std::vector<float> samples = read_audio(kFixture + "/" + clip, config.sampling_rate);
    const Tensor got = log_mel_spectrogram(samples, config);
    ASSERT_EQ(got.shape(), Shape({80, 3000}));
    const float* g = got.data<float>();
    const float* w = want.data<float>() + row * 80 * kept;
    double worst = 0;
    for (int64_t m = 0; m < 80; ++m)
      for (int64_t t = 0; t < kept; ++t) worst = std::max(worst, std::abs(double(g[m * 3000 + t]) - w[m * kept + t]));
    // float32 transforms against numpy's float64 ones: the features are O(1).
    std::printf("%s: largest difference from the extractor %.3g\n", clip, worst);
    EXPECT_LT(worst, 2e-4);
    // Past the clip, every frame is the padding's floor (the largest value less 8, scaled).
    const int64_t last_audio_frame = static_cast<int64_t>(samples.size()) / 160 + 3;
    const float floor = g[0 * 3000 + 2999];
    for (int64_t m = 0; m < 80; ++m)
      for (int64_t t = last_audio_frame; t < 3000; ++t) ASSERT_EQ(g[m * 3000 + t], floor) << m << " " << t;
    EXPECT_NEAR(floor, w[kept - 1], 2e-4) << "the last kept reference frame is padding too";
    ++row;
  }
}

TEST(Audio, MelFiltersMatchTheirDefinition) {
  // Slaney's scale, computed here in float64 from the formula, at two sizes.
  for (auto [n_fft, mels, rate] : {std::tuple{400, 80, 16000}, std::tuple{400, 128, 16000}, std::tuple{512, 40, 8000}}) {
    const std::vector<float> bank = mel_filter_bank(n_fft, mels, rate);
    auto mel = [](double hz) { return hz < 1000 ? hz * 3 / 200 : 15 + std::log(hz / 1000) * 27 / std::log(6.4); };
    auto hz = [](double m) { return m < 15 ? m * 200 / 3 : 1000 * std::exp((m - 15) * std::log(6.4) / 27); };
    const int bins = n_fft / 2 + 1;
    double worst = 0, area_min = 1e9, area_max = 0;
    for (int m = 0; m < mels; ++m) {
      const double top = mel(rate / 2.0);
      const double l = hz(top * m / (mels + 1)), c = hz(top * (m + 1) / (mels + 1)), r = hz(top * (m + 2) / (mels + 1));
      double area = 0;
      for (int k = 0; k < bins; ++k) {
        const double f = (rate / 2) * double(k) / (bins - 1);
        const double want = std::max(0.0, std::min((f - l) / (c - l), (r - f) / (r - c))) * 2 / (r - l);
        worst = std::max(worst, std::abs(want - bank[k * mels + m]) / (2 / (r - l)));
        area += bank[k * mels + m];
      }
      area_min = std::min(area_min, area);
      area_max = std::max(area_max, area);
    }
    EXPECT_LT(worst, 1e-6) << n_fft << " " << mels;
    EXPECT_GT(area_min, 0.0) << "every filter covers some bin";
  }
}

TEST(Audio, ChannelsAreAveragedAndRatesConverted) {
  // Stereo at 44.1 kHz: a 1 kHz tone on the left, a 3 kHz tone at half amplitude on the
  // right. Read at 16 kHz: 2 s become 32000 samples, and the spectrum's two peaks are at
  // 1 and 3 kHz with amplitudes 0.25 and 0.125 (each channel halved by the average).
  const int rate = 44100, n = 2 * rate;
  std::vector<float> st(2 * n);
  for (int i = 0; i < n; ++i) {
    st[2 * i] = 0.5f * std::sin(2 * kPi * 1000.0 * i / rate);
    st[2 * i + 1] = 0.25f * std::sin(2 * kPi * 3000.0 * i / rate);
  }
  const std::string path = temp_path("stereo.wav");
  write_wav(path, st, 2, rate);
  const std::vector<float> x = read_audio(path, 16000);
  std::filesystem::remove(path);
  ASSERT_NEAR(static_cast<double>(x.size()), 32000.0, 2.0);
  // The amplitude at f over a whole number of periods in the middle (away from the filter's edges).
  auto amplitude = [&](double f) {
    std::complex<double> s = 0;
    const int from = 8000, len = 16000;
    for (int i = from; i < from + len; ++i) s += double(x[i]) * std::exp(std::complex<double>(0, -2 * kPi * f * i / 16000));
    return 2 * std::abs(s) / len;
  };
  EXPECT_NEAR(amplitude(1000), 0.25, 0.01);
  EXPECT_NEAR(amplitude(3000), 0.125, 0.01);
  EXPECT_LT(amplitude(2000), 0.01);
  EXPECT_LT(amplitude(5000), 0.01);
}

TEST(Audio, SameRateIsReadAsIs) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.9f, 0.9f);
  std::vector<float> x(4000);
  for (float& v : x) v = std::round(u(rng) * 32767.f) / 32768.f;  // exactly representable in 16 bits
  const std::string path = temp_path("mono.wav");
  write_wav(path, x, 1, 16000);
  const std::vector<float> y = read_audio(path, 16000);
  std::filesystem::remove(path);
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], x[i], 1.0 / 32768) << i;
}

TEST(Audio, Errors) {
  auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { read_audio("/nonexistent/clip.wav", 16000); }).find("does not exist"), std::string::npos);
  const std::string text = temp_path("not_audio.wav");
  std::ofstream(text) << "this is not audio";
  const std::string m = message([&] { read_audio(text, 16000); });
  std::filesystem::remove(text);
  EXPECT_NE(m.find("could not be read"), std::string::npos) << m;
  EXPECT_NE(m.find("not_audio.wav"), std::string::npos) << m;

  AudioFeatureConfig c;
  const std::string too_long = message([&] { log_mel_spectrogram(std::vector<float>(480001, 0.1f), c); });
  EXPECT_NE(too_long.find("longer than the model's window of 30 s"), std::string::npos) << too_long;
  EXPECT_NE(message([&] { log_mel_spectrogram({}, c); }).find("no samples"), std::string::npos);

  const std::filesystem::path dir = temp_path("folder");
  std::filesystem::create_directories(dir);
  EXPECT_NE(message([&] { AudioFeatureConfig::from_folder(dir.string()); }).find("is missing"), std::string::npos);
  std::ofstream(dir / "preprocessor_config.json") << R"({"feature_extractor_type": "Wav2Vec2FeatureExtractor"})";
  EXPECT_NE(message([&] { AudioFeatureConfig::from_folder(dir.string()); }).find("WhisperFeatureExtractor"),
            std::string::npos);
  std::ofstream(dir / "preprocessor_config.json") << R"({"n_fft": 401})";
  EXPECT_NE(message([&] { AudioFeatureConfig::from_folder(dir.string()); }).find("n_fft 401"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Audio, NormalizedFeaturesUseTheClipsOwnStatistics) {
  // do_normalize: the clip scaled and shifted gives the same features as the clip itself.
  AudioFeatureConfig c;
  c.do_normalize = true;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 0.2f);
  std::vector<float> x(8000), y(8000);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = nd(rng) + 0.3f * std::sin(float(i) * 0.05f);
    y[i] = 3.0f * x[i] + 0.5f;
  }
  const Tensor a = log_mel_spectrogram(x, c), b = log_mel_spectrogram(y, c);
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) worst = std::max(worst, std::abs(double(a.data<float>()[i]) - b.data<float>()[i]));
  EXPECT_LT(worst, 1e-3);
  // Without normalization they differ.
  c.do_normalize = false;
  const Tensor a2 = log_mel_spectrogram(x, c), b2 = log_mel_spectrogram(y, c);
  double diff = 0;
  for (int64_t i = 0; i < a2.numel(); ++i) diff = std::max(diff, std::abs(double(a2.data<float>()[i]) - b2.data<float>()[i]));
  EXPECT_GT(diff, 0.1);
}

}  // namespace
}  // namespace onyx::genai
