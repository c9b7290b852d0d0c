// An encoder-decoder pipeline loaded to generate (T5, BART, Whisper, as Optimum exports them). A
// request runs the encoder once over its prompt (planned memory: one arena at fixed offsets,
// sized to the live set, given back once the encoder has run), then the decoder from its start
// token: the first run computes every layer's cross-attention keys and values from the encoder's
// output, which the request keeps and feeds to each step beside the self-attention cache.
//
// The self-attention cache, as for a decoder-only model (language_model.h):
//   static   the split decoder's step graph is rewritten to write each step's keys and values in
//            place into a buffer of fixed capacity (onyx.genai::CacheUpdate), the positions the
//            exported decoder derives from the past's length rewritten to start at the filled
//            length (passes/kv_cache.h); kept only when a first run and a step through the
//            rewrite give the original's logits. Every step then has one input signature: one
//            plan, and on a GPU one captured graph replayed.
//   growing  each step's present is the next step's past, one shape a step (a merged decoder,
//            whose steps run inside an If, or a rewrite that failed; `cache_note` says why).
//
// Both components run on the one device the options resolve to, and lease their memory from
// that device's one governor under their own names (genai/pipeline_memory.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "exec/executor.h"
#include "genai/encoder_decoder_folder.h"
#include "genai/pipeline_memory.h"
#include "genai/token_model.h"
#include "model/ir.h"

namespace onyx::genai {

// What one component has used, for the memory report.
struct ComponentUse {
  std::string name;
  size_t weight_bytes = 0;
  // The largest arena its runs planned, that plan's live-set lower bound (the bytes live at its
  // busiest step) and what its intermediates would take each in bytes of its own.
  size_t arena_bytes = 0, arena_lower_bound = 0, arena_no_reuse = 0;
  size_t kv_bytes = 0;                            // KV cache held now (self- and cross-attention)
};

class EncoderDecoderModel : public TokenModel {
 public:
  EncoderDecoderModel(const std::string& dir, const SessionOptions& options);
  ~EncoderDecoderModel() override;

  const EncoderDecoderFolder& pipeline() const { return folder_; }
  const ModelFolder& folder() const override { return folder_.decoder; }
  const Tokenizer& tokenizer() override;
  Device device() const override { return memory_->device(); }
  // A text model's decoder starts from its start token; a speech model's prompts are decoder
  // prompts already (speech_prompt).
  std::vector<int64_t> decoder_prompt(const std::vector<int64_t>& prompt) const override {
    return folder_.audio ? prompt : std::vector<int64_t>{folder_.decoder_start_id};
  }

  // A speech model's input for the next start(): per sequence its log-mel features
  // ([mels, frames] float32, log_mel_spectrogram's). start()'s prompts are then each sequence's
  // decoder prompt (speech_prompt), all of one length.
  void set_audio(std::vector<Tensor> features);
  // Transformers' Whisper language detection for the audio set: the encoder, then the decoder
  // on its start token; per sequence the language token (lang_to_id's) of largest logit. The
  // encoder's output is kept for the start() that follows.
  std::vector<int64_t> detect_languages();

  Next start(const std::vector<std::vector<int64_t>>& prompts, int64_t capacity, const Draw& draw) override;
  Next step(const std::vector<int64_t>& tokens, const Draw& draw) override;
  void keep(const std::vector<size_t>& keep) override;
  int64_t bucket() const override;

  CacheMode cache_mode() const override { return mode_; }
  const std::string& cache_note() const override { return note_; }
  void use_growing_cache(bool growing) override;
  size_t cache_bytes() const override;
  int64_t cache_grows() const override;
  CaptureReport capture_report() const override;
  size_t peak_device_bytes() const override;
  // The governor's holders (every component's weights and values), then per component its
  // weights, the arena of its last run's plan against that plan's live-set lower bound, and
  // the KV cache it holds.
  std::string memory_report() const override;
  std::vector<ComponentUse> component_use() const;

 private:
  struct Runner;
  struct Batch;
  // One decoder run over `ids` ([size, new ids]); `bias`: with the folder's suppressed ids.
  Next run_decoder(Runner& r, bool first, const Tensor& ids, const Draw& draw, bool bias = true);
  // Rewrites the step graph to a fixed-capacity cache and keeps it if verify_static agrees.
  void choose_cache_mode(const PipelineMemory::Component& dc, std::shared_ptr<DeviceWeights> weights);
  // A first run and one step on a made-up encoder output, through the original step graph and
  // through the rewrite: "" when their logits agree, else why not.
  std::string verify_static();
  // The batch's fixed-capacity cache: `capacity` positions, zeros, then the first run's presents
  // at position 0.
  void begin_static_cache(const std::vector<Tensor>& presents, int64_t capacity);
  // The cache grown to hold `need` positions (contents kept; a new step signature).
  void grow_static_cache(int64_t need);
  // Runs the encoder over the prompts (text) or the audio set (speech) in a batch of `size`
  // rows, keeping its output (and, for text, the mask) in the batch.
  void run_encoder(const std::vector<std::vector<int64_t>>& prompts, int64_t size);
  // t[rows[i]] along dimension 0, where t lives (from `alloc` when on the device, if given).
  Tensor take_rows(const Tensor& t, const std::vector<size_t>& rows, Allocator* alloc = nullptr) const;

  EncoderDecoderFolder folder_;
  SessionOptions options_;
  std::unique_ptr<PipelineMemory> memory_;
  std::shared_ptr<Allocator> kv_pool_;  // "decoder kv cache": the presents are written there
  Allocator* decoder_values_ = nullptr;   // "decoder values", where the decoder's other tensors live
  std::unique_ptr<Tokenizer> tokenizer_;
  onyx::Model encoder_model_, first_model_, step_model_;
  std::unique_ptr<Runner> encoder_, first_, step_;
  Graph static_graph_, fill_graph_;        // the rewritten step graph; the first run's presents into the cache
  std::unique_ptr<Runner> static_, fill_;
  std::string index_input_;                // the rewritten graph's cache position input
  CacheMode mode_ = CacheMode::kGrowing, chosen_ = CacheMode::kGrowing;
  std::string note_;
  std::unique_ptr<Batch> batch_;
  std::vector<Tensor> audio_;        // set_audio's, until start() takes it
  Tensor audio_hidden_;              // the encoder's output for audio_, when detect_languages ran it
  std::vector<Tensor> audio_cross_;  // the same, where the encoder returns the cross-attention cache
  Tensor logit_bias_, first_logit_bias_;  // [vocab] float32, when the folder suppresses ids
  ComponentUse encoder_use_, decoder_use_;
};

// The model a folder holds: an encoder-decoder pipeline when it has encoder_model.onnx, else
// a decoder-only LanguageModel.
std::unique_ptr<TokenModel> load_token_model(const std::string& dir, const SessionOptions& options);

}  // namespace onyx::genai
