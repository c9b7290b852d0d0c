#include "genai/generator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "genai/token_stream.h"

namespace onyx::genai {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<SequenceResult> Generator::generate(const std::vector<std::vector<int64_t>>& prompts,
                                                const SearchOptions& search,
                                                const std::function<void(size_t, const std::string&)>& on_text,
                                                const std::atomic<bool>* interrupt) {
  check_search_options(search);
  const ModelFolder& f = model_.folder();
  const size_t B = prompts.size();
  stats_ = GenerationStats{};
  stats_.sequences = static_cast<int64_t>(B);
  std::vector<SequenceResult> out(B);
  size_t longest = 0;
  for (size_t b = 0; b < B; ++b) {
    out[b].prompt_ids = prompts[b];
    stats_.prompt_tokens += static_cast<int64_t>(prompts[b].size());
    longest = std::max(longest, prompts[b].size());
  }
  // Text is decoded when someone reads it: a stream callback or stop strings.
  const bool text = on_text || !search.stop.empty();
  std::vector<std::unique_ptr<TokenStream>> streams;
  if (text)
    for (size_t b = 0; b < B; ++b) streams.push_back(std::make_unique<TokenStream>(model_.tokenizer(), true));
  if (search.max_new_tokens == 0) {
    for (auto& r : out) r.stop_reason = "max_new_tokens";
    return out;
  }

  auto t0 = std::chrono::steady_clock::now();
  Tensor logits = model_.start(prompts, static_cast<int64_t>(longest) + search.max_new_tokens);
  stats_.prefill_seconds = seconds_since(t0);
  stats_.kv_cache_bytes = model_.cache_bytes();
  const int64_t V = logits.shape()[1];
  std::vector<Sampler> samplers;
  for (size_t b = 0; b < B; ++b) samplers.emplace_back(search, b);
  std::vector<std::vector<int64_t>> history(prompts.begin(), prompts.end());
  std::vector<bool> active(B, true);
  std::vector<int64_t> tokens(B, 0);
  auto finish = [&](size_t b, const char* why) {
    active[b] = false;
    out[b].stop_reason = why;
    if (!streams.empty()) {
      std::string rest = streams[b]->finish();
      if (!rest.empty() && out[b].stop_reason != "stop_string") {
        out[b].text += rest;
        if (on_text) on_text(b, rest);
      }
    }
  };
  auto t1 = std::chrono::steady_clock::now();
  for (int64_t step = 0;; ++step) {
    for (size_t b = 0; b < B; ++b) {
      if (!active[b]) continue;
      std::span<float> row(logits.data<float>() + b * V, static_cast<size_t>(V));
      const int64_t id = samplers[b].next(row, history[b]);
      tokens[b] = id;
      history[b].push_back(id);
      out[b].generated_ids.push_back(id);
      ++stats_.generated_tokens;
      if (!streams.empty()) {
        std::string piece = streams[b]->step(static_cast<int32_t>(id));
        const size_t before = out[b].text.size();
        out[b].text += piece;
        size_t cut = std::string::npos;
        for (const auto& s : search.stop) {
          // A stop string may start in text already streamed: search from where it could.
          const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
          const size_t at = out[b].text.find(s, from);
          if (at != std::string::npos) cut = std::min(cut, at);
        }
        if (cut != std::string::npos) {
          if (on_text && cut > before) on_text(b, out[b].text.substr(before, cut - before));
          out[b].text.resize(cut);
          finish(b, "stop_string");
          continue;
        }
        if (on_text && !piece.empty()) on_text(b, piece);
      }
      if (std::find(f.eos_ids.begin(), f.eos_ids.end(), id) != f.eos_ids.end()) finish(b, "eos");
      else if (static_cast<int64_t>(out[b].generated_ids.size()) >= search.max_new_tokens) finish(b, "max_new_tokens");
      else if (static_cast<int64_t>(history[b].size()) >= f.context_length) finish(b, "context_full");
    }
    const bool stop = interrupt && interrupt->load();
    if (stop)
      for (size_t b = 0; b < B; ++b)
        if (active[b]) finish(b, "interrupted");
    if (std::none_of(active.begin(), active.end(), [](bool a) { return a; })) break;
    logits = model_.step(tokens);  // a finished sequence repeats its last token; its logits go unread
    ++stats_.decode_steps;
  }
  stats_.decode_seconds = seconds_since(t1);
  stats_.capture = model_.capture_report();
  return out;
}

std::vector<double> compare_with_growing_cache(LanguageModel& model, const std::vector<int64_t>& prompt,
                                               int64_t steps) {
  const int64_t capacity = static_cast<int64_t>(prompt.size()) + steps + 1;
  std::vector<Tensor> want;
  std::vector<int64_t> tokens;
  model.use_growing_cache(false);
  Tensor logits = model.start({prompt}, capacity);
  for (int64_t t = 0;; ++t) {
    want.push_back(logits);
    const float* row = logits.data<float>();
    tokens.push_back(std::max_element(row, row + logits.shape()[1]) - row);
    if (t == steps) break;
    logits = model.step({tokens.back()});
  }
  std::vector<double> diff;
  model.use_growing_cache(true);
  try {
    logits = model.start({prompt}, capacity);
    for (int64_t t = 0;; ++t) {
      double d = 0, scale = 0;
      for (int64_t i = 0; i < logits.numel(); ++i) {
        d = std::max(d, std::abs(double(logits.data<float>()[i]) - double(want[t].data<float>()[i])));
        scale = std::max(scale, std::abs(double(want[t].data<float>()[i])));
      }
      diff.push_back(d / std::max(scale, 1e-30));
      if (t == steps) break;
      logits = model.step({tokens[t]});
    }
  } catch (...) {
    model.use_growing_cache(false);
    throw;
  }
  model.use_growing_cache(false);
  return diff;
}

}  // namespace onyx::genai
