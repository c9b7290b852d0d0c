// A language-model folder as exporters write it: onnxruntime-genai's (genai_config.json,
// the decoder .onnx, tokenizer files), or Optimum's and torch.onnx's (a decoder .onnx with
// past/present inputs and outputs, config.json, tokenizer files), whose roles are then
// inferred from the decoder's input and output names.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "genai/json_util.h"
#include "onyx/dtype.h"

namespace onyx::genai {

// The names of one decoder layer's cache: what is fed back, and what comes out.
struct CacheNames {
  std::string past_key, past_value, present_key, present_value;
};

// The search options a folder sets as defaults (genai_config.json "search",
// generation_config.json), overridden by the caller.
struct SearchDefaults {
  bool do_sample = false;
  double temperature = 1.0;
  int top_k = 50;
  double top_p = 1.0;
  double min_p = 0.0;
  double repetition_penalty = 1.0;
  int64_t max_length = 0;  // prompt + new tokens; 0: the context length
};

// A vision-language folder (onnxruntime-genai's multi-model genai_config.json with "vision"
// and "embedding" components): the vision model turns preprocessed images into features, the
// embedding model turns token ids into the embeddings the decoder reads, each image's
// features in place of its image tokens. onyx joins the embedding model to the front of the
// decoder at load (one graph: planned and captured as one), so the decoder's token input is
// the embedding model's.
struct VisionFolder {
  std::string vision_path, embedding_path, processor_path;
  std::string pixel_values;            // the vision model's input
  std::string vision_features;         // its output: [images, tokens, hidden] or [images * tokens, hidden]
  std::string embedding_ids;           // the embedding model's inputs: token ids ...
  std::string embedding_features;      // ... and image features [tokens, hidden]
  std::string embedding_output;        // its output ...
  std::string decoder_embeds;          // ... which the decoder reads as this input
  int64_t image_token_id = -1;         // the token each image's features take the place of
};

struct ModelFolder {
  std::string dir;
  std::string decoder_path;
  std::string source;  // where the roles came from: "genai_config.json" or "inferred from the decoder"

  // Decoder inputs and outputs ("" where the decoder has none).
  std::string input_ids, attention_mask, position_ids, logits;
  std::string use_cache_branch;  // Optimum's merged decoders: true once there is a past
  std::vector<CacheNames> layers;

  // The cache: [batch, kv_heads, positions, head_size] per layer.
  int64_t kv_heads = 0, head_size = 0;
  DType kv_dtype = DType::kFloat32;
  // The past is fed at the full cache length and written in place (GroupQueryAttention in a
  // shared buffer, as onnxruntime-genai's builder makes it), rather than concatenated.
  bool shared_buffer = false;

  int64_t vocab_size = 0;
  int64_t context_length = 0;
  std::vector<int64_t> eos_ids;
  int64_t bos_id = -1, pad_id = -1;
  SearchDefaults search;
  bool has_vision = false;
  VisionFolder vision;
};

// Reads `dir`. A folder it cannot use is an error that names what is missing or ambiguous.
ModelFolder load_model_folder(const std::string& dir);

// For the folder readers: a JSON file (an error names the file), a JSON id or list of ids
// (eos_token_id takes both), and what config.json and generation_config.json say of a decoder
// (ids, vocabulary, context, sampling defaults) where `f` does not say it already.
Json read_json_file(const std::string& path);
std::vector<int64_t> json_ids(const JsonNode& n);
// `pattern` ("past_key_values.%d.key") for layer `layer`.
std::string format_name(const std::string& pattern, int layer);
// onnxruntime-genai's genai_config.json at `path` into `f` (whose dir is set): the decoder's file,
// input and output names by role, layers, ids, context, vocabulary, search defaults, and a
// vision-language folder's vision and embedding models.
void read_genai_config(ModelFolder& f, const std::filesystem::path& path);
void read_hf_configs(ModelFolder& f, int64_t& num_heads, int64_t& hidden);

}  // namespace onyx::genai
