#include "genai/audio.h"

#include <kissfft/kiss_fftr.h>
#include <sndfile.h>
#include <soxr.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>

#include "genai/model_folder.h"

namespace onyx::genai {

namespace {

constexpr double kPi = 3.14159265358979323846;

// Slaney's mel scale: linear below 1 kHz, logarithmic above.
double hz_to_mel(double hz) {
  constexpr double f_sp = 200.0 / 3, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp;
  const double logstep = std::log(6.4) / 27.0;
  return hz < min_log_hz ? hz / f_sp : min_log_mel + std::log(hz / min_log_hz) / logstep;
}

double mel_to_hz(double mel) {
  constexpr double f_sp = 200.0 / 3, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp;
  const double logstep = std::log(6.4) / 27.0;
  return mel < min_log_mel ? mel * f_sp : min_log_hz * std::exp(logstep * (mel - min_log_mel));
}

struct FftrDeleter {
  void operator()(kiss_fftr_cfg c) const { kiss_fftr_free(c); }
};

}  // namespace

namespace {

// The settings both configuration files give, checked alike (`bins` names the mel bins' key).
void check_ranges(const AudioFeatureConfig& a, const char* bins) {
  ONYX_CHECK(a.feature_size > 0 && a.feature_size <= 1024, bins, " ", a.feature_size, " is out of range");
  ONYX_CHECK(a.sampling_rate >= 1000 && a.sampling_rate <= 384000, "sampling_rate ", a.sampling_rate,
             " is out of range");
  ONYX_CHECK(a.n_fft >= 16 && a.n_fft % 2 == 0 && a.n_fft <= 65536, "n_fft ", a.n_fft,
             " must be even and between 16 and 65536");
  ONYX_CHECK(a.hop_length > 0 && a.hop_length <= a.n_fft, "hop_length ", a.hop_length, " must be in 1..n_fft");
  ONYX_CHECK(a.n_samples >= a.n_fft && a.n_samples <= int64_t{1} << 28, "n_samples ", a.n_samples,
             " is out of range");
  ONYX_CHECK(a.nb_max_frames == a.n_samples / a.hop_length, "nb_max_frames ", a.nb_max_frames,
             " is not n_samples / hop_length (", a.n_samples, " / ", a.hop_length, ")");
}

}  // namespace

AudioFeatureConfig AudioFeatureConfig::from_folder(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "preprocessor_config.json").string();
  return with_context(cat("'", path, "'"), [&] {
    ONYX_CHECK(std::filesystem::exists(path),
               "is missing: a speech model's folder needs its feature extractor's settings (the log-mel "
               "spectrogram's bins, rate, window and hop)");
    Json doc = read_json_file(path);
    JsonNode c(doc, "preprocessor_config.json");
    c.expect_object();
    const std::string type = c.string_or("feature_extractor_type", "");
    ONYX_CHECK(type.empty() || type == "WhisperFeatureExtractor", "feature_extractor_type is '", type,
               "': onyx computes WhisperFeatureExtractor's log-mel features only");
    AudioFeatureConfig a;
    a.feature_size = c.int_or("feature_size", a.feature_size);
    a.sampling_rate = c.int_or("sampling_rate", a.sampling_rate);
    a.hop_length = c.int_or("hop_length", a.hop_length);
    a.n_fft = c.int_or("n_fft", a.n_fft);
    a.chunk_length = c.int_or("chunk_length", a.chunk_length);
    a.n_samples = c.int_or("n_samples", a.chunk_length * a.sampling_rate);
    a.nb_max_frames = c.int_or("nb_max_frames", a.n_samples / std::max<int64_t>(a.hop_length, 1));
    if (c.has("padding_value") && !c.at("padding_value").is_null()) a.padding_value = c.at("padding_value").as_number();
    a.do_normalize = c.bool_or("do_normalize", false);
    check_ranges(a, "feature_size");
    return a;
  });
}

AudioFeatureConfig AudioFeatureConfig::from_genai_folder(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "audio_processor_config.json").string();
  return with_context(cat("'", path, "'"), [&] {
    ONYX_CHECK(std::filesystem::exists(path),
               "is missing (and so is preprocessor_config.json): a speech model's folder needs its feature "
               "extractor's settings (the log-mel spectrogram's bins, window and hop)");
    Json doc = read_json_file(path);
    JsonNode root(doc, "audio_processor_config.json");
    root.expect_object();
    JsonNode seq = root.at("feature_extraction").at("sequence");
    seq.expect_array();
    AudioFeatureConfig a;
    bool found = false;
    for (size_t i = 0; i < seq.size(); ++i) {
      JsonNode op = seq.at(i).at("operation");
      if (op.string_or("type", "") != "LogMelSpectrum") continue;
      JsonNode attrs = op.at("attrs");
      a.feature_size = attrs.int_or("n_mel", a.feature_size);
      a.n_fft = attrs.int_or("n_fft", a.n_fft);
      a.hop_length = attrs.int_or("hop_length", a.hop_length);
      a.chunk_length = attrs.int_or("chunk_size", a.chunk_length);
      found = true;
    }
    ONYX_CHECK(found, "feature_extraction has no LogMelSpectrum operation: onyx computes Whisper's log-mel features");
    ONYX_CHECK(a.chunk_length > 0 && a.chunk_length <= 3600, "chunk_size ", a.chunk_length, " is out of range");
    ONYX_CHECK(a.hop_length > 0, "hop_length ", a.hop_length, " must be positive");
    a.n_samples = a.chunk_length * a.sampling_rate;
    a.nb_max_frames = a.n_samples / a.hop_length;
    check_ranges(a, "n_mel");
    return a;
  });
}

std::vector<float> resample_audio(const std::vector<float>& samples, int64_t from, int64_t to) {
  ONYX_CHECK(from > 0 && to > 0, "sample rates must be positive, got ", from, " and ", to);
  if (from == to || samples.empty()) return samples;
  const double ratio = static_cast<double>(to) / static_cast<double>(from);
  std::vector<float> out(static_cast<size_t>(std::ceil(static_cast<double>(samples.size()) * ratio)) + 16);
  size_t done = 0;
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  const soxr_error_t err = soxr_oneshot(static_cast<double>(from), static_cast<double>(to), 1, samples.data(),
                                        samples.size(), nullptr, out.data(), out.size(), &done, nullptr, &quality,
                                        nullptr);
  ONYX_CHECK(!err, "converting audio from ", from, " Hz to ", to, " Hz failed: ", err);
  out.resize(done);
  return out;
}

std::vector<float> read_audio(const std::string& path, int64_t rate) {
  return with_context(cat("audio file '", path, "'"), [&] {
    ONYX_CHECK(std::filesystem::exists(path), "does not exist");
    SF_INFO info{};
    std::unique_ptr<SNDFILE, int (*)(SNDFILE*)> f(sf_open(path.c_str(), SFM_READ, &info), &sf_close);
    ONYX_CHECK(f, "could not be read: ", sf_strerror(nullptr),
               " (onyx reads what libsndfile reads: WAV, FLAC, Ogg Vorbis and Opus, MP3, AIFF and others)");
    ONYX_CHECK(info.channels > 0 && info.samplerate > 0, "declares ", info.channels, " channels at ",
               info.samplerate, " Hz");
    ONYX_CHECK(info.frames >= 0 && info.frames < (int64_t{1} << 31) / info.channels, "holds ", info.frames,
               " frames of ", info.channels, " channels: too long");
    std::vector<float> interleaved(static_cast<size_t>(info.frames) * static_cast<size_t>(info.channels));
    const sf_count_t got = sf_readf_float(f.get(), interleaved.data(), info.frames);
    ONYX_CHECK(got >= 0, "could not be decoded: ", sf_strerror(f.get()));
    std::vector<float> mono(static_cast<size_t>(got));
    for (sf_count_t i = 0; i < got; ++i) {
      double sum = 0;
      for (int c = 0; c < info.channels; ++c) sum += interleaved[static_cast<size_t>(i * info.channels + c)];
      mono[static_cast<size_t>(i)] = static_cast<float>(sum / info.channels);
    }
    return resample_audio(mono, info.samplerate, rate);
  });
}

std::vector<float> mel_filter_bank(int64_t n_fft, int64_t mels, int64_t sampling_rate) {
  const int64_t bins = n_fft / 2 + 1;
  // mels + 2 edges evenly spaced in mels from 0 Hz to the Nyquist frequency, in Hz.
  const double lo = hz_to_mel(0.0), hi = hz_to_mel(static_cast<double>(sampling_rate) / 2);
  std::vector<double> edges(static_cast<size_t>(mels + 2));
  for (int64_t i = 0; i < mels + 2; ++i)
    edges[static_cast<size_t>(i)] = mel_to_hz(lo + (hi - lo) * static_cast<double>(i) / static_cast<double>(mels + 1));
  std::vector<float> bank(static_cast<size_t>(bins * mels));
  for (int64_t k = 0; k < bins; ++k) {
    // The bins' centres evenly spaced from 0 to (integer) half the rate, as the extractor has them.
    const double f = static_cast<double>(sampling_rate / 2) * static_cast<double>(k) / static_cast<double>(bins - 1);
    for (int64_t m = 0; m < mels; ++m) {
      const double left = edges[m], centre = edges[m + 1], right = edges[m + 2];
      const double down = (f - left) / (centre - left), up = (right - f) / (right - centre);
      const double w = std::max(0.0, std::min(down, up)) * 2.0 / (right - left);  // area-normalized
      bank[static_cast<size_t>(k * mels + m)] = static_cast<float>(w);
    }
  }
  return bank;
}

Tensor log_mel_spectrogram(const std::vector<float>& samples, const AudioFeatureConfig& c) {
  const int64_t n = static_cast<int64_t>(samples.size());
  ONYX_CHECK(n <= c.n_samples, "the audio is ", static_cast<double>(n) / static_cast<double>(c.sampling_rate),
             " s long, longer than the model's window of ", static_cast<double>(c.n_samples) / c.sampling_rate,
             " s: onyx transcribes one window (cut the audio into pieces of at most that length)");
  ONYX_CHECK(n > 0, "the audio has no samples");
  // The waveform padded to the window (normalized first over its own length, when asked).
  std::vector<double> wave(static_cast<size_t>(c.n_samples), c.padding_value);
  double mean = 0, var = 0;
  if (c.do_normalize) {
    for (float s : samples) mean += s;
    mean /= static_cast<double>(n);
    for (float s : samples) var += (s - mean) * (s - mean);
    var /= static_cast<double>(n);
  }
  for (int64_t i = 0; i < n; ++i)
    wave[static_cast<size_t>(i)] =
        c.do_normalize ? (samples[static_cast<size_t>(i)] - mean) / std::sqrt(var + 1e-7) : samples[static_cast<size_t>(i)];

  const int64_t nfft = c.n_fft, half = nfft / 2, bins = half + 1, hop = c.hop_length, mels = c.feature_size;
  // Reflected at both ends by n_fft / 2 (the edge sample is not repeated).
  const int64_t total = c.n_samples + 2 * half;
  auto at = [&](int64_t i) {
    i -= half;
    if (i < 0) i = -i;
    if (i >= c.n_samples) i = 2 * (c.n_samples - 1) - i;
    return wave[static_cast<size_t>(i)];
  };
  const int64_t frames = 1 + (total - nfft) / hop - 1;  // the last frame is dropped, as the extractor does
  ONYX_CHECK(frames == c.nb_max_frames, "the window gives ", frames, " frames, not nb_max_frames ", c.nb_max_frames);

  std::vector<float> window(static_cast<size_t>(nfft));
  for (int64_t i = 0; i < nfft; ++i)
    window[static_cast<size_t>(i)] =
        static_cast<float>(0.5 - 0.5 * std::cos(2.0 * kPi * static_cast<double>(i) / static_cast<double>(nfft)));
  const std::vector<float> bank = mel_filter_bank(nfft, mels, c.sampling_rate);
  std::unique_ptr<std::remove_pointer_t<kiss_fftr_cfg>, FftrDeleter> cfg(
      kiss_fftr_alloc(static_cast<int>(nfft), 0, nullptr, nullptr));
  ONYX_CHECK(cfg, "the FFT of ", nfft, " points could not be set up");

  Tensor out(DType::kFloat32, Shape{mels, frames});
  float* o = out.data<float>();
  std::vector<float> frame(static_cast<size_t>(nfft));
  std::vector<kiss_fft_cpx> spec(static_cast<size_t>(bins));
  std::vector<double> power(static_cast<size_t>(bins));
  // Each filter is nonzero over a few bins: its range, so that the product skips the zeros.
  std::vector<std::pair<int64_t, int64_t>> span(static_cast<size_t>(mels), {0, 0});
  for (int64_t m = 0; m < mels; ++m) {
    int64_t first = bins, last = 0;
    for (int64_t k = 0; k < bins; ++k)
      if (bank[static_cast<size_t>(k * mels + m)] != 0.0f) first = std::min(first, k), last = k + 1;
    span[static_cast<size_t>(m)] = {first, std::max(first, last)};
  }
  for (int64_t t = 0; t < frames; ++t) {
    for (int64_t i = 0; i < nfft; ++i)
      frame[static_cast<size_t>(i)] = static_cast<float>(at(t * hop + i)) * window[static_cast<size_t>(i)];
    kiss_fftr(cfg.get(), frame.data(), spec.data());
    for (int64_t k = 0; k < bins; ++k) {
      const double re = spec[static_cast<size_t>(k)].r, im = spec[static_cast<size_t>(k)].i;
      power[static_cast<size_t>(k)] = re * re + im * im;
    }
    for (int64_t m = 0; m < mels; ++m) {
      double e = 0;
      for (int64_t k = span[static_cast<size_t>(m)].first; k < span[static_cast<size_t>(m)].second; ++k)
        e += bank[static_cast<size_t>(k * mels + m)] * power[static_cast<size_t>(k)];
      o[m * frames + t] = static_cast<float>(std::log10(std::max(e, 1e-10)));
    }
  }
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < mels * frames; ++i) top = std::max(top, o[i]);
  for (int64_t i = 0; i < mels * frames; ++i) o[i] = (std::max(o[i], top - 8.0f) + 4.0f) / 4.0f;
  return out;
}

}  // namespace onyx::genai
