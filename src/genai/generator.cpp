#include "genai/generator.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>

#include "genai/token_stream.h"

namespace onyx::genai {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// One generation in flight: what each row of the model's batch holds (a sequence, or kDone
// once it has finished and until the rows are compacted), the tokens drawn last, and each
// sequence's history, stream and result.
struct Generator::State {
  static constexpr size_t kDone = static_cast<size_t>(-1);
  SearchOptions search;
  std::vector<SequenceResult> out;
  std::vector<size_t> rows;
  std::vector<std::vector<int64_t>> history;      // per sequence: the decoder's prompt, then generated ids
  std::vector<int64_t> prompt_lengths;            // per sequence: the decoder prompt's ids in history
  std::vector<std::vector<int64_t>> row_history;  // the history by row (the penalties)
  std::vector<std::unique_ptr<TokenStream>> streams;
  // Per sequence: how much of its text has gone to on_text. Text that could be the start of a
  // stop string is held back until the next tokens show whether it is.
  std::vector<size_t> emitted;
  std::vector<int64_t> tokens;  // per row: the token it feeds the next step
  Next next;                    // the tokens drawn last, per row
  int64_t step = 0;
  bool done = false;
  std::chrono::steady_clock::time_point t_decode;

  // Sends sequence s's text up to `upto` that on_text has not had yet.
  void emit(size_t s, size_t upto, const std::function<void(size_t, const std::string&)>& on_text) {
    const std::string& text = out[s].text;
    upto = std::min(upto, text.size());
    if (upto <= emitted[s]) return;
    if (on_text) on_text(s, text.substr(emitted[s], upto - emitted[s]));
    emitted[s] = upto;
  }
  // How many bytes at the end of `text` could begin a stop string.
  size_t held_back(const std::string& text) const {
    size_t hold = 0;
    for (const auto& stop : search.stop)
      for (size_t k = std::min(stop.size() - 1, text.size()); k > hold; --k)
        if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
          hold = k;
          break;
        }
    return hold;
  }

  Draw draw_for(int64_t counter) {
    static const SearchOptions greedy_options;
    Draw d;
    d.counter = counter;
    d.logits = search.return_logits;
    for (size_t s : rows) {
      d.options.push_back(draw_options(s == kDone ? greedy_options : search));
      d.seeds.push_back(s == kDone ? 0 : sequence_seed(search.seed, s));
    }
    if (search.repetition_penalty != 1.0 || search.presence_penalty != 0.0 || search.frequency_penalty != 0.0) {
      row_history.clear();
      for (size_t s : rows) {
        row_history.push_back(s == kDone ? std::vector<int64_t>{} : history[s]);
        d.prompt_lengths.push_back(s == kDone ? 0 : prompt_lengths[s]);
      }
      d.history = &row_history;
    }
    return d;
  }
};

Generator::Generator(TokenModel& model) : model_(model) {}
Generator::~Generator() = default;

void Generator::begin(const std::vector<std::vector<int64_t>>& prompts, const SearchOptions& search, bool text) {
  check_search_options(search);
  ONYX_CHECK(!prompts.empty(), "no prompts to generate from");
  for (size_t s = 0; s < prompts.size(); ++s)
    ONYX_CHECK(!prompts[s].empty(), "prompt ", s, " has no tokens");
  st_ = std::make_unique<State>();
  State& st = *st_;
  st.search = search;
  const size_t n = prompts.size();
  stats_ = GenerationStats{};
  stats_.sequences = static_cast<int64_t>(n);
  st.out.resize(n);
  size_t longest = 0;
  for (size_t s = 0; s < n; ++s) {
    st.out[s].prompt_ids = prompts[s];
    stats_.prompt_tokens += static_cast<int64_t>(prompts[s].size());
    longest = std::max(longest, prompts[s].size());
  }
  // Text is decoded when someone reads it: a stream, the results' text, or stop strings.
  if (text || !search.stop.empty())
    for (size_t s = 0; s < n; ++s) st.streams.push_back(std::make_unique<TokenStream>(model_.tokenizer(), true));
  st.emitted.assign(n, 0);
  if (search.max_new_tokens == 0) {
    for (auto& r : st.out) r.stop_reason = "max_new_tokens";
    st.done = true;
    return;
  }
  st.rows.resize(n);
  for (size_t s = 0; s < n; ++s) st.rows[s] = s;
  for (const auto& p : prompts) {
    st.history.push_back(model_.decoder_prompt(p));
    st.prompt_lengths.push_back(static_cast<int64_t>(st.history.back().size()));
  }
  st.tokens.assign(n, 0);
  auto t0 = std::chrono::steady_clock::now();
  const int64_t capacity =
      search.kv_capacity > 0 ? search.kv_capacity : static_cast<int64_t>(longest) + search.max_new_tokens;
  st.next = model_.start(prompts, capacity, st.draw_for(0));
  stats_.prefill_seconds = seconds_since(t0);
  stats_.kv_cache_bytes = model_.cache_bytes();
  st.t_decode = std::chrono::steady_clock::now();
}

bool Generator::done() const { return !st_ || st_->done; }

const std::vector<SequenceResult>& Generator::results() const {
  static const std::vector<SequenceResult> none;
  return st_ ? st_->out : none;
}

void Generator::stop(const std::function<void(size_t, const std::string&)>& on_text) {
  if (done()) return;
  State& st = *st_;
  for (size_t s : st.rows) {
    if (s == State::kDone) continue;
    st.out[s].stop_reason = "interrupted";
    if (st.streams.empty()) continue;
    st.out[s].text += st.streams[s]->finish();
    st.emit(s, st.out[s].text.size(), on_text);
  }
  st.done = true;
}

std::vector<int64_t> Generator::next(const std::function<void(size_t, const std::string&)>& on_text) {
  ONYX_CHECK(st_, "next(): no generation begun");
  State& st = *st_;
  std::vector<int64_t> taken(st.out.size(), -1);
  if (st.done) return taken;
  const ModelFolder& f = model_.folder();
  auto finish = [&](size_t s, const char* why) {
    st.out[s].stop_reason = why;
    if (!st.streams.empty()) {
      if (st.out[s].stop_reason != "stop_string") st.out[s].text += st.streams[s]->finish();
      st.emit(s, st.out[s].text.size(), on_text);
    }
  };
  // Takes sequence s's new token; returns whether it goes on.
  auto take = [&](size_t s, int64_t id) {
    SequenceResult& r = st.out[s];
    st.history[s].push_back(id);
    r.generated_ids.push_back(id);
    taken[s] = id;
    ++stats_.generated_tokens;
    if (!st.streams.empty()) {
      std::string piece = st.streams[s]->step(static_cast<int32_t>(id));
      const size_t before = r.text.size();
      r.text += piece;
      size_t cut = std::string::npos;
      for (const auto& stop : st.search.stop) {
        // A stop string may start in text already streamed: search from where it could.
        const size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
        const size_t at = r.text.find(stop, from);
        if (at != std::string::npos) cut = std::min(cut, at);
      }
      if (cut != std::string::npos) {
        r.text.resize(cut);
        finish(s, "stop_string");
        return false;
      }
      st.emit(s, r.text.size() - st.held_back(r.text), on_text);
    }
    if (std::find(f.eos_ids.begin(), f.eos_ids.end(), id) != f.eos_ids.end()) finish(s, "eos");
    else if (static_cast<int64_t>(r.generated_ids.size()) >= st.search.max_new_tokens) finish(s, "max_new_tokens");
    else if (static_cast<int64_t>(st.history[s].size()) >= f.context_length) finish(s, "context_full");
    else return true;
    return false;
  };

  std::vector<size_t> going;  // rows whose sequence goes on
  for (size_t row = 0; row < st.rows.size(); ++row) {
    // A finished row is fed what it drew, as the others are (a step launched ahead was); its
    // draws go unread.
    st.tokens[row] = st.next.tokens[row];
    if (st.rows[row] == State::kDone) continue;
    if (st.search.return_logits) {
      const int64_t V = st.next.logits.shape()[1];
      const float* l = st.next.logits.data<float>() + static_cast<int64_t>(row) * V;
      st.out[st.rows[row]].logits.insert(st.out[st.rows[row]].logits.end(), l, l + V);
    }
    if (take(st.rows[row], st.next.tokens[row])) going.push_back(row);
    else st.rows[row] = State::kDone;
  }
  if (going.empty()) {
    st.done = true;
    stats_.decode_seconds = seconds_since(st.t_decode);
    stats_.capture = model_.capture_report();
    stats_.kv_cache_bytes = std::max(stats_.kv_cache_bytes, model_.cache_bytes());
    stats_.kv_cache_grows = model_.cache_grows();
    return taken;
  }
  // Finished sequences stop costing work once the rest fit a smaller bucket.
  if (static_cast<int64_t>(going.size()) <= model_.bucket() / 2) {
    model_.keep(going);
    std::vector<size_t> kept;
    std::vector<int64_t> kept_tokens;
    for (size_t row : going) {
      kept.push_back(st.rows[row]);
      kept_tokens.push_back(st.tokens[row]);
    }
    st.rows = std::move(kept);
    st.tokens = std::move(kept_tokens);
  }
  ++st.step;
  Draw draw = st.draw_for(st.step);
  // Whether a step may follow this one: some sequence's token from it would not be its last.
  if (st.search.run_ahead)
    for (size_t row = 0; row < st.rows.size() && !draw.more; ++row) {
      const size_t s = st.rows[row];
      draw.more = s != State::kDone &&
                  static_cast<int64_t>(st.out[s].generated_ids.size()) + 1 < st.search.max_new_tokens &&
                  static_cast<int64_t>(st.history[s].size()) + 1 < f.context_length;
    }
  st.next = model_.step(st.tokens, draw);
  ++stats_.decode_steps;
  return taken;
}

std::vector<SequenceResult> Generator::generate(const std::vector<std::vector<int64_t>>& prompts,
                                                const SearchOptions& search,
                                                const std::function<void(size_t, const std::string&)>& on_text,
                                                const std::atomic<bool>* interrupt) {
  begin(prompts, search, static_cast<bool>(on_text));
  while (!done()) {
    next(on_text);
    // The step in flight has drawn tokens no one will take: the sequences end here.
    if (!done() && interrupt && interrupt->load()) stop(on_text);
  }
  finish_stats();
  return st_->out;
}

void Generator::finish_stats() {
  stats_.decode_seconds = st_->t_decode.time_since_epoch().count() ? seconds_since(st_->t_decode) : 0;
  stats_.capture = model_.capture_report();
  stats_.kv_cache_bytes = std::max(stats_.kv_cache_bytes, model_.cache_bytes());
  stats_.kv_cache_grows = model_.cache_grows();
}

std::vector<SequenceResult> generate_on_ranks(const std::vector<Generator*>& ranks, Communicator& group,
                                              const std::vector<std::vector<int64_t>>& prompts,
                                              const SearchOptions& search,
                                              const std::function<void(size_t, const std::string&)>& on_text,
                                              const std::atomic<bool>* interrupt) {
  ONYX_CHECK(!ranks.empty() && static_cast<int>(ranks.size()) == group.world(), "generation on ",
             ranks.size(), " ranks of a group of ", group.world());
  const std::ptrdiff_t n = static_cast<std::ptrdiff_t>(ranks.size());
  std::barrier sync(n);
  std::atomic<bool> stop_now{false}, failed{false};
  std::vector<std::string> errors(ranks.size());
  const std::function<void(size_t, const std::string&)> none;
  auto run = [&](size_t r) {
    try {
      Generator& g = *ranks[r];
      const auto& text = r == 0 ? on_text : none;
      g.begin(prompts, search, static_cast<bool>(on_text));  // every rank keeps text: stop strings end them alike
      while (true) {
        if (r == 0) stop_now = interrupt && interrupt->load();
        sync.arrive_and_wait();
        const bool stop = stop_now.load();
        sync.arrive_and_wait();  // read by all before rank 0 writes it again
        if (failed) throw Error("another rank failed");
        if (g.done()) {
          g.finish_stats();
          break;
        }
        if (stop) {
          g.stop(text);
          g.finish_stats();
          break;
        }
        g.next(text);
      }
      // Out of the steps: no rank waits for this one at the barrier (they all leave at the same
      // step, their tokens being the same; one that did not would meet the group's timeout).
      sync.arrive_and_drop();
    } catch (const std::exception& e) {
      errors[r] = e.what();
      failed = true;
      group.abort(cat("rank ", r, " failed: ", e.what()));
      sync.arrive_and_drop();
    }
  };
  std::vector<std::thread> threads;
  for (size_t r = 1; r < ranks.size(); ++r) threads.emplace_back(run, r);
  run(0);
  for (auto& t : threads) t.join();
  // The first rank's own error (the others' are that it failed), else any.
  for (size_t r = 0; r < ranks.size(); ++r)
    if (!errors[r].empty() && errors[r] != "another rank failed" &&
        errors[r].find("group is broken") == std::string::npos)
      throw Error(cat("tensor-parallel rank ", r, ": ", errors[r]));
  for (size_t r = 0; r < ranks.size(); ++r)
    if (!errors[r].empty()) throw Error(cat("tensor-parallel rank ", r, ": ", errors[r]));
  const std::vector<SequenceResult>& want = ranks[0]->results();
  for (size_t r = 1; r < ranks.size(); ++r)
    for (size_t i = 0; i < want.size(); ++i)
      ONYX_CHECK(ranks[r]->results()[i].generated_ids == want[i].generated_ids, "tensor-parallel rank ", r,
                 " drew other tokens than rank 0 for sequence ", i);
  return want;
}

std::vector<double> compare_with_growing_cache(TokenModel& model, const std::vector<int64_t>& prompt, int64_t steps,
                                               const std::function<void()>& before_start) {
  const int64_t capacity = static_cast<int64_t>(prompt.size()) + steps + 1;
  Draw greedy;
  greedy.options = {draw_options(SearchOptions{})};
  greedy.seeds = {0};
  greedy.logits = true;
  std::vector<Tensor> want;
  std::vector<int64_t> tokens;
  model.use_growing_cache(false);
  if (before_start) before_start();
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
    if (before_start) before_start();
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
