// An encoder-decoder folder as Optimum exports it (T5, BART, Whisper): encoder_model.onnx, and
// the decoder as decoder_model.onnx (the first run) with decoder_with_past_model.onnx (the
// steps), or as decoder_model_merged.onnx (one graph, use_cache_branch choosing the first run
// or the steps; used when the split pair is absent); config.json, generation_config.json and the
// tokenizer files. The roles of the inputs and outputs are found by their names. Or
// onnxruntime-genai's Whisper folder: genai_config.json naming the encoder and the decoder and
// their inputs and outputs by role, beside the same Hugging Face files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "genai/audio.h"
#include "genai/model_folder.h"

namespace onyx::genai {

struct EncoderDecoderFolder {
  // The decoder's generation facts (eos, pad, vocabulary, context, search defaults, its
  // self-attention cache names and geometry), as a decoder-only folder has them.
  ModelFolder decoder;
  std::string model_type;  // config.json's, e.g. "t5", "bart"

  std::string encoder_path;
  // input_ids (text encoders) or input_features (speech encoders: a log-mel spectrogram,
  // [batch, mels, frames], computed as `audio` says).
  std::string encoder_input;
  bool audio = false;
  AudioFeatureConfig audio_features;
  std::string encoder_mask;            // attention_mask ("" when the encoder has none)
  std::string encoder_output;          // last_hidden_state

  // The decoder graphs: `first_path` runs the start token with no past and returns the
  // cross-attention cache; `step_path` runs each step with both caches as past. The same
  // file when merged (then `use_cache_branch` names the switch).
  std::string first_path, step_path;
  bool merged = false;
  // onnxruntime-genai's Whisper form (genai_config.json naming an encoder): the encoder returns
  // every layer's cross-attention keys and values itself (`cross[i].present_*` name its
  // outputs), and one decoder graph (first_path == step_path) runs the first run, with an empty
  // self-attention past, and the steps.
  bool genai = false;
  std::string decoder_encoder_mask;    // encoder_attention_mask ("" when the decoder has none)
  std::string decoder_hidden_states;   // encoder_hidden_states (the first run's; the merged graph's every run)
  std::vector<CacheNames> cross;       // per layer: past_key_values.N.encoder.*, present.N.encoder.*
  int64_t cross_heads = 0, cross_head_size = 0;

  int64_t decoder_start_id = 0;
  // The first generated token, forced (BART's forced_bos_token_id); -1: none. (A forced EOS
  // at the length limit, forced_eos_token_id, is not applied.)
  int64_t forced_bos_id = -1;
  int64_t encoder_context = 0;         // the longest prompt the encoder takes (0: no limit known)

  // generation_config.json's logit processors: ids never drawn, and ids not drawn as the first
  // generated token (transformers' SuppressTokens and SuppressTokensAtBegin).
  std::vector<int64_t> suppress_ids, begin_suppress_ids;

  // A speech decoder's prompt (Whisper's generation_config.json): the start token, then the
  // forced ids at positions 1, 2, ... (-1 where null: to be filled), the language and task
  // tokens by name, and the token that asks for text without timestamps (-1: none).
  std::vector<int64_t> forced_prefix;
  std::vector<std::pair<std::string, int64_t>> lang_to_id, task_to_id;
  int64_t no_timestamps_id = -1;
};

// The decoder's prompt for a speech request, as transformers' Whisper generate builds it:
// the start token; the language token (`language` as "en" or "<|en|>"; "" takes the forced one,
// else `detected`, the token language detection chose, -1 when not run); the task token
// ("transcribe" or "translate"; "" takes the forced one, or transcribe when a language was
// given); the no-timestamps token. An unknown language or task is an error listing the known.
std::vector<int64_t> speech_prompt(const EncoderDecoderFolder& f, const std::string& language,
                                   const std::string& task, int64_t detected);
// Whether speech_prompt needs a detected language: the folder knows languages and neither the
// caller nor the forced ids choose one.
bool speech_needs_language(const EncoderDecoderFolder& f, const std::string& language);

// Whether `dir` holds an encoder-decoder export (an encoder_model.onnx, or a genai_config.json
// naming an encoder).
bool is_encoder_decoder_folder(const std::string& dir);

// Reads `dir`. A folder it cannot use is an error naming what is missing.
EncoderDecoderFolder load_encoder_decoder_folder(const std::string& dir);

}  // namespace onyx::genai
