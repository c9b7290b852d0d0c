// The serving engine: requests from any thread, one engine thread that owns the model and
// runs continuous batching over its slots (genai::LanguageModel's serving side):
//   - a request waits in a bounded queue until a slot is free; it takes the free slot whose
//     kept positions share the longest prefix with its prompt, and prefills only the rest;
//   - prompts run in chunks (prefill_chunk tokens), one chunk between decode steps, so the
//     sequences already decoding keep getting tokens while a long prompt is read;
//   - each decode step runs every decoding sequence at once, in the bucket of the slots in use
//     (slots are kept packed at the low rows: a finished sequence's slot changes places with
//     the last busy one); on a GPU each bucket's step is one captured graph, replayed;
//   - a cancelled request (its client went away) leaves at the next step boundary and its
//     slot is free at once.
// Text reaches each request's Ticket as it completes (stop strings held back until they are
// decided), so a server thread can stream it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "genai/language_model.h"
#include "genai/search.h"
#include "serve/metrics.h"

namespace onyx::serve {

struct EngineOptions {
  int64_t max_batch = 16;       // slots: sequences decoding at once
  int64_t max_context = 0;      // positions per slot (prompt and generated); 0: the model's context, at most 4096
  size_t kv_cache_bytes = 0;    // a bound on the slots' cache bytes (fewer slots when it binds); 0: none
  int64_t max_queue = 64;       // requests waiting for a slot; past it submit() refuses (Overloaded)
  int64_t prefill_chunk = 256;  // prompt tokens per prefill run between decode steps
  // On a GPU: a decode step that the next loop turn will follow with another (no request waiting
  // for a slot, no prompt being read, no penalty) launches that step before its own tokens reach
  // the host (LanguageModel's run-ahead); the tokens are the same either way.
  bool run_ahead = true;
};

struct Completion {
  std::vector<int64_t> prompt;  // token ids
  genai::SearchOptions search;  // max_new_tokens, sampling, seed, stop strings
  bool ignore_eos = false;      // go on past end-of-sequence tokens (load tests: fixed lengths)
  // A vision-language model's images, preprocessed ([3, height, width] each), one per image
  // token of the prompt in order: the engine runs the vision model when the request takes a
  // slot and expands each image token to its image's rows of features.
  std::vector<Tensor> pixels;
};

// Why a sequence ended: OpenAI's finish_reason where one applies.
enum class Finish { kRunning, kStop, kLength, kCancelled, kError };
std::string_view finish_reason(Finish f);  // "stop", "length", "cancelled", "error"

// One request's side of the engine: text as it completes, then the end.
class Ticket {
 public:
  // Waits up to `timeout` for text or the end. Returns the text that came (possibly empty);
  // `finished` is set once the sequence has ended and every piece of text was returned.
  std::string wait(std::chrono::milliseconds timeout, bool& finished);
  // Asks the engine to end the sequence (at the next step boundary; its slot is freed).
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  // Valid once finished.
  Finish finish = Finish::kRunning;
  std::string error;                 // kError: what went wrong
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;     // tokens the model generated (an end-of-sequence token included)
  int64_t cached_tokens = 0;         // prompt tokens whose cache entries a slot already held
  std::vector<int64_t> tokens;       // the generated ids (an end-of-sequence id not included)

 private:
  friend class Engine;
  void push(const std::string& text);
  void end(Finish f, std::string error);
  std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_;
  bool ended_ = false;
  std::atomic<bool> cancelled_{false};
};

// submit() when the queue is full.
struct Overloaded : Error {
  using Error::Error;
};

class Engine {
 public:
  // Opens the model's slots and starts the engine thread. The model must outlive the engine.
  Engine(genai::LanguageModel& model, const EngineOptions& options, Metrics& metrics);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request (checked first: a prompt that does not fit, bad options: Error, naming
  // what). Throws Overloaded when max_queue requests already wait.
  std::shared_ptr<Ticket> submit(Completion request);
  // Positions per slot, and the slots.
  int64_t context() const { return capacity_; }
  int64_t slots() const { return slots_; }
  int64_t queue_limit() const { return options_.max_queue; }
  // Stops the engine thread: sequences in flight and waiting end as cancelled.
  void shutdown();

 private:
  struct Sequence;
  void loop();
  void admit();
  void reap();
  bool prefill_one();
  void decode_step();
  void take(int64_t slot, int64_t token);
  void finish(int64_t slot, Finish f, std::string error = "", bool at_stop_string = false);
  void release_finished();
  void fail_all(const std::string& what);
  bool attach_images(Sequence& s);
  genai::Draw draw_for(const std::vector<Sequence*>& rows) const;

  genai::LanguageModel& model_;
  EngineOptions options_;
  Metrics& metrics_;
  int64_t slots_ = 0, capacity_ = 0;
  std::vector<int64_t> eos_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> queue_;
  bool stopping_ = false;

  // The engine thread's own: the sequence in each slot (busy slots are [0, busy_)), and
  // the token ids whose cache entries each slot holds.
  std::vector<std::unique_ptr<Sequence>> seq_;
  std::vector<std::vector<int64_t>> held_;
  std::atomic<int64_t> busy_{0};
  std::vector<int64_t> finished_;  // slots whose sequences ended this round
  std::thread thread_;
};

}  // namespace onyx::serve
