// A model folder loaded to generate: the decoder on its device, the way its KV cache is
// kept, and the runs a generation is made of. One generation at a time.
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
#include <memory>
#include <string>
#include <vector>

#include "exec/executor.h"
#include "genai/model_folder.h"
#include "genai/tokenizer.h"
#include "model/ir.h"

namespace onyx::genai {

enum class CacheMode { kShared, kStatic, kGrowing };
std::string_view cache_mode_name(CacheMode m);

// How each sequence's next token is drawn, by the onyx.genai::Sample node that onyx appends
// to the decoder (on the decoder's device: only token ids leave it).
struct Draw {
  std::vector<std::array<float, 7>> options;  // per sequence, in ops/sampling.h's order
  std::vector<uint64_t> seeds;                // per sequence
  int64_t counter = 0;                        // which draw of the sequences this is
  // Per sequence: its ids so far, prompt then generated, for the penalties (read when a
  // sequence's options have one); null: no penalty applies.
  const std::vector<std::vector<int64_t>>* history = nullptr;
  // Per sequence: how many of the first ids of its history are its prompt (the repetition
  // penalty looks at all of them, the presence and frequency penalties only at the generated
  // ones after). Empty: each history is all prompt, none of it counted.
  std::vector<int64_t> prompt_lengths;
  bool logits = false;                        // also return the logits drawn from
};

struct Next {
  std::vector<int64_t> tokens;  // per sequence
  Tensor logits;                // [sequences, vocab] float32, when asked
};

class LanguageModel {
 public:
  LanguageModel(const std::string& dir, const SessionOptions& options);
  ~LanguageModel();
  LanguageModel(const LanguageModel&) = delete;
  LanguageModel& operator=(const LanguageModel&) = delete;

  const ModelFolder& folder() const { return folder_; }
  // The folder's tokenizer, read on first use (an error names the file it lacks).
  const Tokenizer& tokenizer();
  CacheMode cache_mode() const { return mode_; }
  // Runs the next generations with the growing cache (always possible), or back in the form
  // chosen at load; for comparing the two.
  void use_growing_cache(bool growing);
  const std::string& cache_note() const { return note_; }
  Device device() const { return device_; }

  // Runs the prompts (token ids per sequence) and makes a cache for `capacity` positions
  // (prompt and new tokens); draws each sequence's first new token. The batch runs padded to
  // a bucket (1, 2, 4, 8, ...): each bucket is one signature of the decode step.
  Next start(const std::vector<std::vector<int64_t>>& prompts, int64_t capacity, const Draw& draw);
  // One decode step: each sequence's new token in, its next token out. A full cache first
  // grows by a block of 64 positions (to the context length at most), its contents kept.
  Next step(const std::vector<int64_t>& tokens, const Draw& draw);
  // Keeps only the sequences `keep` (ascending indexes into the current ones; the rest have
  // finished), moving the batch to the smallest bucket that holds them.
  void keep(const std::vector<size_t>& keep);
  // The bucket the batch in flight runs in.
  int64_t bucket() const;

  size_t cache_bytes() const;
  // Times the cache of the generation in flight grew.
  int64_t cache_grows() const;
  // The most device memory leased at once so far (0 on the CPU).
  size_t peak_device_bytes() const;
  CaptureReport capture_report() const;
  std::string memory_report() const;

 private:
  struct Batch;
  struct Runner;
  void choose_cache_mode();
  std::string verify_static();
  Next run(Runner& r, std::vector<std::pair<std::string, Tensor>> feeds, bool prompt, const Draw& draw);
  std::vector<std::pair<std::string, Tensor>> prompt_feeds(const std::vector<std::vector<int64_t>>& prompts);
  std::vector<std::pair<std::string, Tensor>> step_feeds(const std::vector<int64_t>& tokens);
  void add_draw_feeds(std::vector<std::pair<std::string, Tensor>>& feeds, bool prompt, const Draw& draw) const;
  Tensor cache_tensor(int64_t batch, int64_t capacity);
  // The cache buffers (key, value per layer) for a bucket and capacity: a retired set of that
  // geometry when there is one (zeroed), so that a captured decode step finds the buffers it
  // was captured with and replays, else new ones.
  std::vector<Tensor> cache_set(int64_t batch, int64_t capacity);
  void retire_cache();
  Tensor take_rows(const Tensor& t, const std::vector<size_t>& rows);
  void copy_rows(const Tensor& t, const std::vector<size_t>& rows, Tensor& out);
  void grow(int64_t need);

  SessionOptions options_;
  Device device_;
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<Allocator> host_;
  std::shared_ptr<Allocator> kv_pool_;
  ModelFolder folder_;
  std::unique_ptr<Tokenizer> tokenizer_;
  Model model_;
  Graph step_graph_;   // the rewritten decoder (static cache)
  Graph fill_graph_;   // writes a prompt's presents into the static cache
  std::shared_ptr<DeviceWeights> weights_;
  std::unique_ptr<Runner> prompt_, step_, fill_;
  CacheMode mode_ = CacheMode::kGrowing;
  CacheMode chosen_ = CacheMode::kGrowing;
  std::string note_;
  std::string index_input_;
  std::unique_ptr<Batch> batch_;
  // Cache sets of finished generations by (bucket, capacity), most recent first (at most
  // kSpareCacheSets): kept in the "kv cache" lease for the next generation of that geometry.
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::vector<Tensor>>> spare_caches_;
};

}  // namespace onyx::genai
