// Generation: prompts in, tokens out, one decode step at a time on a TokenModel (a
// decoder-only LanguageModel or an encoder-decoder pipeline), with
// the next token of each sequence chosen by its Sampler, text streamed as it completes,
// and each sequence stopped at an end-of-sequence id, its token budget, a stop string, a
// full context, or an interrupt.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "genai/language_model.h"
#include "onyx/communicator.h"
#include "genai/search.h"

namespace onyx::genai {

struct SequenceResult {
  std::vector<int64_t> prompt_ids;
  std::vector<int64_t> generated_ids;  // with the end-of-sequence id when it ended there
  std::string text;                    // the generated text (with a tokenizer), cut before a stop string
  std::string stop_reason;             // eos, max_new_tokens, stop_string, context_full, interrupted
  // With SearchOptions::return_logits: per generated id, the vocabulary's logits it was drawn
  // from, one row after another (float32).
  std::vector<float> logits;
};

struct GenerationStats {
  int64_t sequences = 0, prompt_tokens = 0, generated_tokens = 0, decode_steps = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  size_t kv_cache_bytes = 0;    // at the end (after any growth)
  int64_t kv_cache_grows = 0;   // times the cache grew by a block
  CaptureReport capture;  // the decode steps' (in a capture session)
};

class Generator {
 public:
  explicit Generator(TokenModel& model);
  ~Generator();
  // `on_text(sequence, text)` receives each sequence's text as it completes (needs the
  // tokenizer). `interrupt`, when set, ends every sequence after the step in flight.
  std::vector<SequenceResult> generate(const std::vector<std::vector<int64_t>>& prompts, const SearchOptions& search,
                                       const std::function<void(size_t, const std::string&)>& on_text = {},
                                       const std::atomic<bool>* interrupt = nullptr);

  // The same generation one token at a time (generate() is a loop over these). begin() runs
  // the prompts and draws each sequence's first token; next() takes the tokens drawn (those of
  // the sequences still going), and unless every sequence has finished, runs the decode step
  // that draws the following ones. It returns per sequence the token taken, or -1 for a
  // sequence that had finished before. `text` keeps each sequence's text (decoded as tokens
  // come) in its result and checks stop strings, which need it anyway.
  void begin(const std::vector<std::vector<int64_t>>& prompts, const SearchOptions& search, bool text = false);
  std::vector<int64_t> next(const std::function<void(size_t, const std::string&)>& on_text = {});
  bool done() const;
  // Ends every sequence still going ("interrupted"), flushing its text to on_text.
  void stop(const std::function<void(size_t, const std::string&)>& on_text = {});
  // Every sequence's result so far (final once done()).
  const std::vector<SequenceResult>& results() const;
  const GenerationStats& stats() const { return stats_; }
  // The decode time and the model's cache and capture figures into stats() (generate() does
  // it at its end; a caller driving begin() and next() calls it when done).
  void finish_stats();

 private:
  struct State;
  TokenModel& model_;
  GenerationStats stats_;
  std::unique_ptr<State> st_;
};

// The ranks of a tensor-parallel group generating at once, one Generator on each rank's model
// (SessionOptions::tensor_parallel_rank): rank 0 on the calling thread, streaming to on_text, the
// others on threads of their own. The ranks take each step together; an interrupt, read by rank
// 0, ends every rank's sequences at the same step; a rank that fails aborts `group` so that no
// other rank waits for it. Returns rank 0's results, having checked that every rank drew the same
// tokens (their logits are the same bytes: the LM head's AllGather).
std::vector<SequenceResult> generate_on_ranks(const std::vector<Generator*>& ranks, Communicator& group,
                                              const std::vector<std::vector<int64_t>>& prompts,
                                              const SearchOptions& search,
                                              const std::function<void(size_t, const std::string&)>& on_text = {},
                                              const std::atomic<bool>* interrupt = nullptr);

// The model's cache form against the growing cache (the decoder as exported), teacher
// forced: the greedy tokens of `steps` steps from `prompt`, then the same tokens through the
// growing cache. Returns per step (the prompt first) the largest logit difference divided by
// the largest logit magnitude. `before_start`, when given, runs before each of the two starts
// (a speech model's audio is given again there: a start takes it).
std::vector<double> compare_with_growing_cache(TokenModel& model, const std::vector<int64_t>& prompt, int64_t steps,
                                               const std::function<void()>& before_start = {});

}  // namespace onyx::genai
