// Audio in for speech models: a file decoded to mono samples at the model's rate, and the
// log-mel spectrogram a Whisper encoder reads (`input_features`), as the folder's
// preprocessor_config.json specifies it (WhisperFeatureExtractor's fields).
//
// Decoding through libsndfile (WAV, FLAC, Ogg Vorbis/Opus, MP3 and the other formats it
// reads), rate conversion through libsoxr, the short-time Fourier transform through kissfft.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onyx/tensor.h"

namespace onyx::genai {

// The log-mel front end's parameters (preprocessor_config.json).
struct AudioFeatureConfig {
  int64_t feature_size = 80;      // mel bins
  int64_t sampling_rate = 16000;  // Hz
  int64_t hop_length = 160;       // samples between frames
  int64_t n_fft = 400;            // window and transform length
  int64_t chunk_length = 30;      // seconds in one encoder input
  int64_t n_samples = 480000;     // chunk_length * sampling_rate: audio is cut or padded to this
  int64_t nb_max_frames = 3000;   // n_samples / hop_length: the encoder input's frames
  double padding_value = 0.0;
  bool do_normalize = false;      // zero mean, unit variance per waveform before the transform

  // preprocessor_config.json in `dir`; an error names the file and the field when the
  // extractor is not Whisper's or a field is out of range.
  static AudioFeatureConfig from_folder(const std::string& dir);
  // audio_processor_config.json in `dir` (onnxruntime-genai's Whisper folders): its
  // LogMelSpectrum operation's n_mel, n_fft, hop_length and chunk_size (16 kHz audio, as
  // Whisper's); an error names the file and what it lacks.
  static AudioFeatureConfig from_genai_folder(const std::string& dir);
};

// Mono float samples in [-1, 1] at `rate` Hz: the file's channels averaged, its rate converted
// (libsoxr's high quality). An error names the file and what failed.
std::vector<float> read_audio(const std::string& path, int64_t rate);

// Samples at `from` Hz to `to` Hz (libsoxr, high quality).
std::vector<float> resample_audio(const std::vector<float>& samples, int64_t from, int64_t to);

// The mel filter bank [n_fft / 2 + 1, mels] (Slaney's mel scale and area normalization, from 0
// Hz to half the sampling rate), as Whisper's extractor builds it.
std::vector<float> mel_filter_bank(int64_t n_fft, int64_t mels, int64_t sampling_rate);

// The log-mel spectrogram of `samples` (at the config's rate): cut or padded to n_samples,
// a periodic Hann window of n_fft every hop_length samples over the waveform reflected by
// n_fft / 2 at both ends, the power spectrum through the mel filters, log10 (floored at
// 1e-10), floored at the largest value minus 8, then (x + 4) / 4. [feature_size,
// nb_max_frames] float32. Audio longer than one chunk is an error (onyx reads one chunk).
Tensor log_mel_spectrogram(const std::vector<float>& samples, const AudioFeatureConfig& config);

}  // namespace onyx::genai
