// What a Generator drives: a model that runs prompts, then one decode step at a time, drawing
// each sequence's next token on its device. A decoder-only LanguageModel is one; an
// encoder-decoder pipeline (EncoderDecoderModel) is another.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "exec/capture.h"
#include "genai/model_folder.h"
#include "genai/tokenizer.h"
#include "onyx/device.h"
#include "onyx/error.h"
#include "onyx/tensor.h"

namespace onyx::genai {

// How each sequence's next token is drawn, by the onyx.genai::Sample node that onyx appends
// to the decoder (on the decoder's device: only token ids leave it).
struct Draw {
  std::vector<std::array<float, 7>> options;  // per sequence, in ops/sampling.h's order
  std::vector<uint64_t> seeds;                // per sequence
  int64_t counter = 0;                        // which draw of the sequences this is
  std::vector<int64_t> counters;              // per sequence, when they differ (serving); else `counter`
  // Per sequence: its ids so far, prompt then generated, for the penalties (read when a
  // sequence's options have one); null: no penalty applies.
  const std::vector<std::vector<int64_t>>* history = nullptr;
  // Per sequence: how many of the first ids of its history are its prompt (the repetition
  // penalty looks at all of them, the presence and frequency penalties only at the generated
  // ones after). Empty: each history is all prompt, none of it counted.
  std::vector<int64_t> prompt_lengths;
  bool logits = false;                        // also return the logits drawn from
  // The caller means to take another step after this one, fed the tokens this one draws, with
  // this draw's counters one further: a model on a GPU may launch that step before this one's
  // tokens reach the host (LanguageModel's run-ahead), and takes it if the next call is that.
  bool more = false;
};

struct Next {
  std::vector<int64_t> tokens;  // per sequence
  Tensor logits;                // [sequences, vocab] float32, when asked
};

// The rows a batch of `rows` sequences runs in: the next power of two (the buckets steps are
// planned and captured for).
inline int64_t bucket_for(int64_t rows) {
  int64_t size = 1;
  while (size < rows) size *= 2;
  return size;
}

// The rows a model's batch keeps for TokenModel::keep: `keep` checked (ascending indexes below
// `rows`), then padded to the next power of two by repeating the first (the bucket the smaller
// batch runs in).
inline std::vector<size_t> kept_rows(const std::vector<size_t>& keep, int64_t rows) {
  ONYX_CHECK(!keep.empty(), "nothing to keep");
  for (size_t i = 0; i < keep.size(); ++i)
    ONYX_CHECK(static_cast<int64_t>(keep[i]) < rows && (i == 0 || keep[i] > keep[i - 1]),
               "keep takes ascending sequence indexes");
  std::vector<size_t> out(keep.begin(), keep.end());
  out.resize(static_cast<size_t>(bucket_for(static_cast<int64_t>(keep.size()))), keep[0]);
  return out;
}

// How a decoder's KV cache is kept between runs (language_model.h describes the forms).
enum class CacheMode { kShared, kStatic, kGrowing };
std::string_view cache_mode_name(CacheMode m);

class TokenModel {
 public:
  virtual ~TokenModel() = default;

  // The decoder's facts: end-of-sequence ids, context length, vocabulary, search defaults.
  virtual const ModelFolder& folder() const = 0;
  // The folder's tokenizer, read on first use (an error names the file it lacks).
  virtual const Tokenizer& tokenizer() = 0;
  virtual Device device() const = 0;

  // The ids the decoder has seen before its first new token, for the prompt `prompt`: the
  // prompt itself for a decoder-only model, the decoder's start id for an encoder-decoder one.
  // The penalties and the context limit count these and the generated ids.
  virtual std::vector<int64_t> decoder_prompt(const std::vector<int64_t>& prompt) const { return prompt; }

  // Runs the prompts and draws each sequence's first new token; `capacity` is the positions
  // (prompt and new tokens) the cache should start with.
  virtual Next start(const std::vector<std::vector<int64_t>>& prompts, int64_t capacity, const Draw& draw) = 0;
  // One decode step: each sequence's new token in, its next token out.
  virtual Next step(const std::vector<int64_t>& tokens, const Draw& draw) = 0;
  // Keeps only the sequences `keep` (ascending indexes into the current ones).
  virtual void keep(const std::vector<size_t>& keep) = 0;
  // The rows the batch in flight runs in.
  virtual int64_t bucket() const = 0;

  // The cache's form, and why it is growing when it is (the decoder could not be rewritten to a
  // fixed capacity, or the rewrite's logits differed from the decoder's).
  virtual CacheMode cache_mode() const = 0;
  virtual const std::string& cache_note() const = 0;
  // Runs the next generations with the growing cache (always possible), or back in the form
  // chosen at load; for comparing the two.
  virtual void use_growing_cache(bool growing) = 0;
  virtual size_t cache_bytes() const = 0;
  virtual int64_t cache_grows() const = 0;
  virtual CaptureReport capture_report() const = 0;
  // The most device memory leased at once so far (0 on the CPU).
  virtual size_t peak_device_bytes() const = 0;
  virtual std::string memory_report() const = 0;
};

}  // namespace onyx::genai
