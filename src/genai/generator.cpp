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
  const size_t n = prompts.size();
  stats_ = GenerationStats{};
  stats_.sequences = static_cast<int64_t>(n);
  std::vector<SequenceResult> out(n);
  size_t longest = 0;
  for (size_t s = 0; s < n; ++s) {
    out[s].prompt_ids = prompts[s];
    stats_.prompt_tokens += static_cast<int64_t>(prompts[s].size());
    longest = std::max(longest, prompts[s].size());
  }
  // Text is decoded when someone reads it: a stream callback or stop strings.
  const bool text = on_text || !search.stop.empty();
  std::vector<std::unique_ptr<TokenStream>> streams;
  if (text)
    for (size_t s = 0; s < n; ++s) streams.push_back(std::make_unique<TokenStream>(model_.tokenizer(), true));
  if (search.max_new_tokens == 0) {
    for (auto& r : out) r.stop_reason = "max_new_tokens";
    return out;
  }

  // What each row of the model's batch holds: a sequence, or kDone once it has finished and
  // until the rows are compacted.
  constexpr size_t kDone = static_cast<size_t>(-1);
  std::vector<size_t> rows(n);
  for (size_t s = 0; s < n; ++s) rows[s] = s;
  std::vector<std::vector<int64_t>> history(prompts.begin(), prompts.end());
  std::vector<std::vector<int64_t>> row_history;  // the history by row (repetition penalty)
  const SearchOptions greedy_options;
  auto draw_for = [&](int64_t counter) {
    Draw d;
    d.counter = counter;
    for (size_t s : rows) {
      d.options.push_back(draw_options(s == kDone ? greedy_options : search));
      d.seeds.push_back(s == kDone ? 0 : sequence_seed(search.seed, s));
    }
    if (search.repetition_penalty != 1.0) {
      row_history.clear();
      for (size_t s : rows) row_history.push_back(s == kDone ? std::vector<int64_t>{} : history[s]);
      d.history = &row_history;
    }
    return d;
  };
  auto finish = [&](size_t s, const char* why) {
    out[s].stop_reason = why;
    if (!streams.empty()) {
      std::string rest = streams[s]->finish();
      if (!rest.empty() && out[s].stop_reason != "stop_string") {
        out[s].text += rest;
        if (on_text) on_text(s, rest);
      }
    }
  };
  // Takes sequence s's new token; returns whether it goes on.
  auto take = [&](size_t s, int64_t id) {
    history[s].push_back(id);
    out[s].generated_ids.push_back(id);
    ++stats_.generated_tokens;
    if (!streams.empty()) {
      std::string piece = streams[s]->step(static_cast<int32_t>(id));
      const size_t before = out[s].text.size();
      out[s].text += piece;
      size_t cut = std::string::npos;
      for (const auto& stop : search.stop) {
        // A stop string may start in text already streamed: search from where it could.
        const size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
        const size_t at = out[s].text.find(stop, from);
        if (at != std::string::npos) cut = std::min(cut, at);
      }
      if (cut != std::string::npos) {
        if (on_text && cut > before) on_text(s, out[s].text.substr(before, cut - before));
        out[s].text.resize(cut);
        finish(s, "stop_string");
        return false;
      }
      if (on_text && !piece.empty()) on_text(s, piece);
    }
    if (std::find(f.eos_ids.begin(), f.eos_ids.end(), id) != f.eos_ids.end()) finish(s, "eos");
    else if (static_cast<int64_t>(out[s].generated_ids.size()) >= search.max_new_tokens) finish(s, "max_new_tokens");
    else if (static_cast<int64_t>(history[s].size()) >= f.context_length) finish(s, "context_full");
    else return true;
    return false;
  };

  auto t0 = std::chrono::steady_clock::now();
  const int64_t capacity = search.kv_capacity > 0 ? search.kv_capacity : static_cast<int64_t>(longest) + search.max_new_tokens;
  Next next = model_.start(prompts, capacity, draw_for(0));
  stats_.prefill_seconds = seconds_since(t0);
  stats_.kv_cache_bytes = model_.cache_bytes();
  std::vector<int64_t> tokens(n, 0);
  auto t1 = std::chrono::steady_clock::now();
  for (int64_t step = 1;; ++step) {
    std::vector<size_t> going;  // rows whose sequence goes on
    for (size_t row = 0; row < rows.size(); ++row) {
      if (rows[row] == kDone) continue;  // repeats its last token; its draws go unread
      tokens[row] = next.tokens[row];
      if (take(rows[row], next.tokens[row])) going.push_back(row);
      else rows[row] = kDone;
    }
    if (interrupt && interrupt->load()) {
      for (size_t row : going) finish(rows[row], "interrupted");
      going.clear();
    }
    if (going.empty()) break;
    // Finished sequences stop costing work once the rest fit a smaller bucket.
    if (static_cast<int64_t>(going.size()) <= model_.bucket() / 2) {
      model_.keep(going);
      std::vector<size_t> kept;
      std::vector<int64_t> kept_tokens;
      for (size_t row : going) {
        kept.push_back(rows[row]);
        kept_tokens.push_back(tokens[row]);
      }
      rows = std::move(kept);
      tokens = std::move(kept_tokens);
    }
    next = model_.step(tokens, draw_for(step));
    ++stats_.decode_steps;
  }
  stats_.decode_seconds = seconds_since(t1);
  stats_.capture = model_.capture_report();
  stats_.kv_cache_bytes = std::max(stats_.kv_cache_bytes, model_.cache_bytes());
  stats_.kv_cache_grows = model_.cache_grows();
  return out;
}

std::vector<double> compare_with_growing_cache(LanguageModel& model, const std::vector<int64_t>& prompt,
                                               int64_t steps) {
  const int64_t capacity = static_cast<int64_t>(prompt.size()) + steps + 1;
  Draw greedy;
  greedy.options = {draw_options(SearchOptions{})};
  greedy.seeds = {0};
  greedy.logits = true;
  std::vector<Tensor> want;
  std::vector<int64_t> tokens;
  model.use_growing_cache(false);
  Next next = model.start({prompt}, capacity, greedy);
  for (int64_t t = 0;; ++t) {
    want.push_back(next.logits);
    tokens.push_back(next.tokens[0]);
    if (t == steps) break;
    next = model.step({tokens.back()}, greedy);
  }
  std::vector<double> diff;
  model.use_growing_cache(true);
  try {
    next = model.start({prompt}, capacity, greedy);
    for (int64_t t = 0;; ++t) {
      double d = 0, scale = 0;
      for (int64_t i = 0; i < next.logits.numel(); ++i) {
        d = std::max(d, std::abs(double(next.logits.data<float>()[i]) - double(want[t].data<float>()[i])));
        scale = std::max(scale, std::abs(double(want[t].data<float>()[i])));
      }
      diff.push_back(d / std::max(scale, 1e-30));
      if (t == steps) break;
      next = model.step({tokens[t]}, greedy);
    }
  } catch (...) {
    model.use_growing_cache(false);
    throw;
  }
  model.use_growing_cache(false);
  return diff;
}

}  // namespace onyx::genai
