// A model folder loaded to generate: the decoder on its device, the way its KV cache is
// kept, and the runs a generation is made of. One generation at a time (start/step/keep), or
// serving (open_slots/prefill/decode): a fixed set of cache slots that sequences enter and
// leave between decode steps (continuous batching).
//
// The cache, by the decoder's form:
//   shared   past and present are one buffer of fixed capacity, written in place by the
//            model (GroupQueryAttention, as onnxruntime-genai's builder makes it)
//   static   present = Concat(past, new): a rewritten twin of the decoder writes the new
//            entries in place into a buffer of fixed capacity (onyx.genai::CacheUpdate),
//            with the attention mask over all of it; the prompt runs the original graph
//   growing  no rewrite was possible: each step's present is the next step's past (on the
//            device), one input shape per step, never captured; `cache_note` says why
// In the shared and static forms a decode step has one input signature for a whole
// generation (DESIGN L11): on a GPU it is captured once and replayed.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec/executor.h"
#include "genai/image.h"
#include "genai/model_folder.h"
#include "genai/token_model.h"
#include "genai/tokenizer.h"
#include "model/ir.h"
#include "onyx/communicator.h"
#include "passes/position_tables.h"

namespace onyx::genai {

class LanguageModel : public TokenModel {
 public:
  LanguageModel(const std::string& dir, const SessionOptions& options);
  ~LanguageModel() override;
  LanguageModel(const LanguageModel&) = delete;
  LanguageModel& operator=(const LanguageModel&) = delete;

  const ModelFolder& folder() const override { return folder_; }
  // The folder's tokenizer, read on first use (an error names the file it lacks).
  const Tokenizer& tokenizer() override;
  CacheMode cache_mode() const override { return mode_; }
  void use_growing_cache(bool growing) override;
  const std::string& cache_note() const override { return note_; }
  Device device() const override { return device_; }

  // Runs the prompts (token ids per sequence) and makes a cache for `capacity` positions
  // (prompt and new tokens); draws each sequence's first new token. The batch runs padded to
  // a bucket (1, 2, 4, 8, ...): each bucket is one signature of the decode step.
  Next start(const std::vector<std::vector<int64_t>>& prompts, int64_t capacity, const Draw& draw) override;
  // One decode step: each sequence's new token in, its next token out. A full cache first
  // grows by a block of 64 positions (to the context length at most), its contents kept.
  //
  // Run-ahead (a GPU, the shared or static cache, Draw::more, no penalties or logits asked
  // for): the step also launches the step after it, fed on the device with the tokens this one
  // draws, before it waits for those tokens; a next call with those tokens and the draw one
  // further takes that step (already running) instead of launching one, and launches the one
  // after it in turn. The device never waits for the host between steps. A next call with other
  // tokens or another draw, and every other call that runs the decoder or changes the cache,
  // first waits for the step ahead and forgets it (its cache writes, one position past the
  // sequences, are overwritten by the step that takes that position).
  Next step(const std::vector<int64_t>& tokens, const Draw& draw) override;
  // Steps launched ahead so far, and of them those taken (the rest were forgotten).
  struct RunAheadCounts {
    int64_t launched = 0, taken = 0;
  };
  RunAheadCounts run_ahead_counts() const { return run_ahead_counts_; }
  // The decode step's onyx::RotaryCacheAttention nodes (the rotary-attention fusion after the cache
  // rewrite; 0 where it is off or found nothing to fuse).
  int rotary_attention_nodes() const { return rotary_attention_nodes_; }
  // The tables made at load of what the decoder computes from each position alone (its rotary
  // cos and sin: passes/position_tables.h), read by a Gather each run.
  const PositionTableReport& position_tables() const { return position_tables_; }
  // What the latest decode step ran, by op ("domain::op" outside the default domain): the steps of
  // its plan that have a kernel (not the views, nor the nodes computed while planning), those on
  // the CPU in a device model marked " (host)". Empty before the first step.
  std::map<std::string, int> step_kernels() const;
  // Keeps only the sequences `keep` (ascending indexes into the current ones; the rest have
  // finished), moving the batch to the smallest bucket that holds them.
  void keep(const std::vector<size_t>& keep) override;
  // The bucket the batch in flight runs in.
  int64_t bucket() const override;

  // ---- Serving: slots ----
  // One cache of `slots` rows of `capacity` positions (rounded up to a block of 64, at most
  // the context length), each row a slot that holds one sequence; a slot keeps its positions
  // when its sequence leaves, for the next one that shares its prefix. Decode steps run over
  // slots [0, n) in the smallest bucket (1, 2, 4, ..) that holds them, as views of the first
  // rows of the one cache, so each bucket's captured step replays. Ends any generation in
  // flight; start() ends the slots. Needs the shared or static cache form.
  void open_slots(int64_t slots, int64_t capacity);
  int64_t slot_count() const;
  int64_t slot_capacity() const;
  // Positions of slot s's cache that hold its sequence's entries.
  int64_t slot_filled(int64_t slot) const;
  // Runs positions [from, from + ids.size()) of the sequence in `slot`, whose positions [0,
  // from) are already in the cache (a shared prefix, or the chunks before); draws its next
  // token (one-row `draw`). Positions from `from` on are overwritten.
  int64_t prefill(int64_t slot, const std::vector<int64_t>& ids, int64_t from, const Draw& draw);
  // One decode step of the sequences in slots [0, tokens.size()): each one's new token in (it
  // takes position slot_filled), its next token out; `draw` has a row per slot. A slot whose
  // token is -1 (one between prefill chunks) is padding, as are the bucket's slots past
  // them: they write one past their kept positions, which they keep (one fewer when full),
  // and get -1.
  std::vector<int64_t> decode(const std::vector<int64_t>& tokens, const Draw& draw);
  // Exchanges the contents of two slots (cache rows and filled positions).
  void swap_slots(int64_t a, int64_t b);
  // Forgets what slot s holds from position `keep` on.
  void truncate_slot(int64_t slot, int64_t keep);

  // ---- Vision-language folders (ModelFolder::has_vision) ----
  // The images' preprocessing (preprocessor_config.json).
  const ImageProcessor& image_processor() const;
  // Each image's features ([tokens, hidden], on the host): the vision model run over the
  // images, preprocessed by preprocess_image (each [3, height, width]). The run's memory is
  // planned (its live set) and given back after it.
  std::vector<Tensor> encode_images(const std::vector<Tensor>& pixels);
  // The features the next start() puts in place of its prompts' image tokens: per sequence,
  // its images' features in the order of its image tokens (each token expanded first to as
  // many as its image has feature rows: expand_image_tokens). A sequence without images gets
  // an empty list. start() checks the counts and consumes them.
  void set_image_features(std::vector<std::vector<Tensor>> per_sequence);
  // Serving: the feature rows of the image tokens of the next prefill's ids ([tokens, hidden],
  // in order); prefill() checks the count and consumes them.
  void set_image_rows(Tensor rows);

  // ---- Tensor parallelism (docs/tensor-parallel.md) ----
  // Makes this model rank 0 of a group whose other ranks are `others` (rank r at others[r - 1],
  // each loaded from the same folder with the group's SessionOptions). From then on every call
  // that runs the decoder or changes the cache (start, step, keep, open_slots, truncate_slot,
  // swap_slots, prefill, decode) runs on every rank at once, the others each on a thread of
  // their own, and returns rank 0's result; the ranks' collectives join them. A rank that fails
  // aborts the group, so that no rank waits for it; the call then throws the first rank's own
  // error. A group of threads on the CPU is whole again after that call; a GPU group stays broken.
  void lead_ranks(std::vector<std::unique_ptr<LanguageModel>> others, std::shared_ptr<Communicator> group);
  int tensor_parallel_ranks() const;  // 1 unless leading a group

  size_t cache_bytes() const override;
  // Times the cache of the generation in flight grew.
  int64_t cache_grows() const override;
  // The most device memory leased at once so far (0 on the CPU).
  size_t peak_device_bytes() const override;
  CaptureReport capture_report() const override;
  std::string memory_report() const override;

 private:
  struct Batch;
  struct Runner;
  struct Slots;
  void choose_cache_mode();
  std::string verify_static();
  Next run(Runner& r, std::vector<std::pair<std::string, Tensor>> feeds, bool prompt, const Draw& draw);
  std::vector<std::pair<std::string, Tensor>> prompt_feeds(const std::vector<std::vector<int64_t>>& prompts);
  std::vector<std::pair<std::string, Tensor>> step_feeds(const std::vector<int64_t>& tokens);
  void add_draw_feeds(std::vector<std::pair<std::string, Tensor>>& feeds, const Batch& bt, bool prompt,
                      const Draw& draw) const;
  std::vector<Tensor> slot_views(int64_t begin, int64_t count) const;
  // `device_tokens` (a step's run-ahead): the drawn tokens stay on the device, there, and the
  // run returns with its work enqueued (the Next returned is empty).
  Next execute(Runner& r, std::vector<std::pair<std::string, Tensor>> feeds, const Batch& bt, bool prompt,
               const Draw& draw, const std::vector<Tensor>* in_place, std::vector<Tensor>* presents,
               Tensor* device_tokens = nullptr);
  // ---- Run-ahead (language_model_ahead.cpp) ----
  struct Ahead;
  bool can_run_ahead(const Draw& draw, int64_t rows);
  // Whether the step in flight is the one a call with `tokens` and `draw` asks for.
  bool takes_ahead(const std::vector<int64_t>& tokens, const Draw& draw, bool serving) const;
  void feed_device_ids(std::vector<std::pair<std::string, Tensor>>& feeds, const Tensor& ids, int64_t rows) const;
  // Starts the copy of a step's `rows` drawn tokens into readback `slot` (the next launch's is
  // the other); wait_tokens waits for them (an error when the device reported one).
  void start_readback(const Tensor& drawn, int64_t rows, int slot);
  const int64_t* wait_tokens(int slot);
  void record_ahead(int slot, Tensor drawn, Draw draw, bool serving, std::vector<int64_t> active);
  // Enqueues a decode step of the batch (its cache in place) fed `feeds`, with its drawn tokens
  // on their way to the host in readback `slot`; returns them on the device.
  Tensor enqueue_step(std::vector<std::pair<std::string, Tensor>> feeds, const Draw& draw, int slot);
  // Launches the step after the one whose drawn tokens are `tokens` (on the device), when the
  // cache holds its position without growing.
  void launch_ahead(const Tensor& tokens, const Draw& draw);
  // Runs `launch` (a launch ahead) after the step in readback `slot`; if it throws, that step's
  // tokens are waited for first.
  void launch_after(int slot, const std::function<void()>& launch);
  // Serving's decode steps run ahead the same way (language_model_slots.cpp).
  struct DecodeFeeds {
    std::vector<std::pair<std::string, Tensor>> feeds;
    std::vector<Tensor> rows;  // the cache views of slots [0, B)
  };
  DecodeFeeds decode_feeds(const std::vector<int64_t>& tokens, int64_t B);
  // Enqueues a decode step of slots [0, B) (row r active where tokens[r] >= 0), its tokens on
  // their way to the host in readback `slot`; `device_ids` (when given) replaces the ids.
  Tensor enqueue_decode(const std::vector<int64_t>& tokens, const Draw& draw, int64_t B, int slot,
                        const Tensor* device_ids);
  void launch_decode_ahead(const Tensor& drawn, const std::vector<int64_t>& tokens, const Draw& draw);
  std::vector<int64_t> take_decode_tokens(int slot, const std::vector<int64_t>& tokens);
  std::vector<int64_t> take_decode_ahead(const Draw& draw);
  // The tokens of the step in readback `slot` (rows of the batch).
  Next take_tokens(int slot);
  Next take_ahead(const Draw& draw);
  // Waits for the step ahead, if any, and forgets it.
  void settle();
  void fill_cache(const std::vector<Tensor>& cache, const std::vector<Tensor>& presents);
  Tensor cache_tensor(int64_t batch, int64_t capacity);
  // The cache buffers (key, value per layer) for a bucket and capacity: a retired set of that
  // geometry when there is one (zeroed), so that a captured decode step finds the buffers it
  // was captured with and replays, else new ones.
  std::vector<Tensor> cache_set(int64_t batch, int64_t capacity);
  void retire_cache();
  Tensor take_rows(const Tensor& t, const std::vector<size_t>& rows);
  void copy_rows(const Tensor& t, const std::vector<size_t>& rows, Tensor& out);
  void grow(int64_t need);
  void load_vision(Graph& decoder);
  void add_image_feeds(std::vector<std::pair<std::string, Tensor>>& feeds, bool prompt);
  void take_image_features(const std::vector<std::vector<int64_t>>& rows, size_t sequences);
  void check_prefill_images(const std::vector<int64_t>& ids);
  std::string vision_report() const;

  SessionOptions options_;
  Device device_;
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<Allocator> host_;
  std::shared_ptr<Allocator> kv_pool_;
  ModelFolder folder_;
  std::unique_ptr<Tokenizer> tokenizer_;
  Model model_;
  Graph prompt_graph_;  // the decoder for prompts: the LM head on each row's last position (slice_prompt_logits)
  Graph step_graph_;   // the rewritten decoder (static cache)
  Graph fill_graph_;   // writes a prompt's presents into the static cache
  std::shared_ptr<DeviceWeights> weights_;
  std::unique_ptr<Runner> prompt_, step_, fill_;
  CacheMode mode_ = CacheMode::kGrowing;
  CacheMode chosen_ = CacheMode::kGrowing;
  std::string note_;
  std::string index_input_;
  int rotary_attention_nodes_ = 0;
  PositionTableReport position_tables_;
  std::unique_ptr<Batch> batch_;
  std::unique_ptr<Slots> slots_;
  // Cache sets of finished generations by (bucket, capacity), most recent first (at most
  // kSpareCacheSets): kept in the "kv cache" lease for the next generation of that geometry.
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::vector<Tensor>>> spare_caches_;
  // Vision-language folders: the vision model's executor (on its own pools of the one
  // governor on a GPU), what it has used, and the features waiting for start().
  struct Vision;
  std::unique_ptr<Vision> vision_;
  // Tensor parallelism: the other ranks and their threads (lead_ranks); `fanning_` while a call
  // runs on every rank (rank 0's own part then runs the call's body).
  struct Ranks;
  std::unique_ptr<Ranks> ranks_;
  bool fanning_ = false;
  template <class F>
  auto on_every_rank(F f) -> decltype(f(*this));
  // The step launched ahead (destroyed first: it waits for the device before the cache goes).
  RunAheadCounts run_ahead_counts_;
  std::unique_ptr<Ahead> ahead_;
};

// `prompt` with its image tokens expanded: the k-th occurrence of `image_token` becomes
// tokens_per_image[k] copies of it. An error when the prompt holds a different number of image
// tokens than there are images.
std::vector<int64_t> expand_image_tokens(const std::vector<int64_t>& prompt, int64_t image_token,
                                         const std::vector<int64_t>& tokens_per_image);

}  // namespace onyx::genai
