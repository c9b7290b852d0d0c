#include "serve/engine.h"

#include <algorithm>
#include <cstring>

#include "genai/token_stream.h"
#include "genai/tokenizer.h"

namespace onyx::serve {

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Whether the draw reads the sequence's ids (prompt and generated).
bool penalized(const genai::SearchOptions& o) {
  return o.repetition_penalty != 1.0 || o.presence_penalty != 0.0 || o.frequency_penalty != 0.0;
}

}  // namespace

std::string_view finish_reason(Finish f) {
  switch (f) {
    case Finish::kRunning: return "running";
    case Finish::kStop: return "stop";
    case Finish::kLength: return "length";
    case Finish::kCancelled: return "cancelled";
    case Finish::kError: return "error";
  }
  return "?";
}

// ---- Ticket ----

std::string Ticket::wait(std::chrono::milliseconds timeout, bool& finished) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return !pending_.empty() || ended_; });
  std::string text = std::move(pending_);
  pending_.clear();
  finished = ended_;
  return text;
}

void Ticket::push(const std::string& text) {
  if (text.empty()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_ += text;
  }
  cv_.notify_all();
}

void Ticket::end(Finish f, std::string why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    finish = f;
    error = std::move(why);
    ended_ = true;
  }
  cv_.notify_all();
}

// ---- Engine ----

// A request on its way: waiting, then in a slot (prefilling while fed < prompt, then
// decoding: `last` is the token drawn last, fed to the next step).
struct Engine::Sequence {
  std::shared_ptr<Ticket> ticket;
  Completion req;
  std::vector<int64_t> ids;  // prompt, then the generated tokens
  std::vector<std::vector<int64_t>> history;  // [ids] for the repetition penalty (a Draw points at it)
  int64_t fed = 0;           // prompt tokens whose cache entries the slot holds
  int64_t last = -1;
  int64_t generated = 0;
  std::unique_ptr<genai::TokenStream> stream;
  std::string text;          // the generated text so far
  size_t emitted = 0;        // bytes of text the ticket has had
  Clock::time_point arrived, last_token;
  Tensor image_rows;         // a vision-language prompt's image features, [its image tokens, hidden]
  bool decoding() const { return last >= 0; }
};

Engine::Engine(genai::LanguageModel& model, const EngineOptions& options, Metrics& metrics)
    : model_(model), options_(options), metrics_(metrics) {
  ONYX_CHECK(options.max_batch >= 1, "max_batch must be at least 1, got ", options.max_batch);
  ONYX_CHECK(options.max_queue >= 0, "max_queue must not be negative, got ", options.max_queue);
  ONYX_CHECK(options.prefill_chunk >= 1, "prefill_chunk must be at least 1, got ", options.prefill_chunk);
  const auto& folder = model.folder();
  int64_t context = options.max_context > 0 ? options.max_context : std::min<int64_t>(folder.context_length, 4096);
  ONYX_CHECK(context <= folder.context_length, "max_context ", context, " exceeds the model's context length of ",
             folder.context_length);
  model.tokenizer();  // serving text needs it: an error now names the missing file
  eos_ = folder.eos_ids;
  int64_t slots = options.max_batch;
  if (options.kv_cache_bytes > 0) {
    // The cache of one slot: key and value per layer, [kv heads, positions, head size].
    const int64_t positions = (context + 63) / 64 * 64;
    const size_t per_slot = 2 * folder.layers.size() * static_cast<size_t>(folder.kv_heads) *
                            static_cast<size_t>(positions) * static_cast<size_t>(folder.head_size) *
                            dtype_size(folder.kv_dtype);
    // One slot's worth more is held as the spare row that swaps go through.
    const int64_t fit = static_cast<int64_t>(options.kv_cache_bytes / per_slot) - 1;
    ONYX_CHECK(fit >= 1, "kv_cache_bytes ", options.kv_cache_bytes, " holds no slot: a slot of ", positions,
               " positions takes ", per_slot, " bytes (and one more slot's worth is the spare for swaps)");
    slots = std::min(slots, fit);
  }
  model.open_slots(slots, context);
  slots_ = model.slot_count();
  capacity_ = model.slot_capacity();
  seq_.resize(slots_);
  held_.resize(slots_);
  metrics_.set("onyx_slots", static_cast<double>(slots_));
  metrics_.set("onyx_kv_cache_positions", static_cast<double>(slots_ * capacity_));
  metrics_.set("onyx_kv_cache_bytes", static_cast<double>(model.cache_bytes()));
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<Ticket> Engine::submit(Completion req) {
  ONYX_CHECK(!req.prompt.empty(), "the prompt has no tokens");
  const int64_t n = static_cast<int64_t>(req.prompt.size());
  ONYX_CHECK(n < capacity_, "the prompt has ", n, " tokens, and the server's context is ", capacity_,
             " positions (prompt and generated tokens)");
  const int64_t vocab = model_.folder().vocab_size;
  for (int64_t id : req.prompt)
    ONYX_CHECK(id >= 0 && (vocab <= 0 || id < vocab), "prompt token ", id, " is outside the vocabulary of ", vocab);
  genai::check_search_options(req.search);
  auto s = std::make_unique<Sequence>();
  s->ticket = std::make_shared<Ticket>();
  s->ticket->prompt_tokens = n;
  s->ids = req.prompt;
  s->req = std::move(req);
  s->arrived = Clock::now();
  s->stream = std::make_unique<genai::TokenStream>(model_.tokenizer(), true);
  std::shared_ptr<Ticket> t = s->ticket;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ONYX_CHECK(!stopping_, "the server is shutting down");
    if (static_cast<int64_t>(queue_.size()) >= options_.max_queue && busy_ >= slots_) {
      metrics_.add("onyx_requests_rejected_total");
      throw Overloaded(cat("the server is at capacity: ", slots_, " sequences running and ", queue_.size(),
                           " requests waiting (--max-queue ", options_.max_queue, "); try again later"));
    }
    queue_.push_back(std::move(s));
    metrics_.set("onyx_requests_waiting", static_cast<double>(queue_.size()));
  }
  cv_.notify_all();
  return t;
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty() || busy_ > 0; });
      if (stopping_) {
        for (auto& s : queue_) s->ticket->end(Finish::kCancelled, "the server shut down");
        queue_.clear();
        break;
      }
    }
    try {
      reap();
      admit();
      const bool prefilled = prefill_one();
      decode_step();
      release_finished();
      if (!prefilled) std::this_thread::yield();
    } catch (const std::exception& e) {
      fail_all(e.what());
    }
    int64_t used = 0;
    for (int64_t s = 0; s < busy_; ++s) used += model_.slot_filled(s);
    metrics_.set("onyx_sequences_running", static_cast<double>(busy_));
    metrics_.set("onyx_kv_cache_positions_used", static_cast<double>(used));
    metrics_.set("onyx_kv_cache_usage_ratio", static_cast<double>(used) / static_cast<double>(slots_ * capacity_));
    const CaptureReport cap = model_.capture_report();
    metrics_.set("onyx_decode_replays_total", static_cast<double>(cap.replays));
    metrics_.set("onyx_decode_eager_total", static_cast<double>(cap.eager_runs));
  }
  for (int64_t s = 0; s < busy_; ++s)
    if (seq_[s]) seq_[s]->ticket->end(Finish::kCancelled, "the server shut down");
}

// A run that failed leaves the slots' contents unknown: every sequence in a slot ends with the
// error, the slots forget what they held, and the engine goes on with the queue.
void Engine::fail_all(const std::string& what) {
  for (int64_t s = 0; s < busy_; ++s)
    if (seq_[s]) {
      seq_[s]->ticket->end(Finish::kError, what);
      metrics_.add("onyx_sequences_finished_total{reason=\"error\"}");
      seq_[s].reset();
    }
  for (int64_t s = 0; s < slots_; ++s) {
    model_.truncate_slot(s, 0);
    held_[s].clear();
  }
  busy_ = 0;
  finished_.clear();
}

// Cancelled requests leave: waiting ones at once, running ones at this step boundary.
void Engine::reap() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto it = queue_.begin(); it != queue_.end();)
      if ((*it)->ticket->cancelled()) {
        (*it)->ticket->end(Finish::kCancelled, "");
        metrics_.add("onyx_sequences_finished_total{reason=\"cancelled\"}");
        it = queue_.erase(it);
      } else {
        ++it;
      }
    metrics_.set("onyx_requests_waiting", static_cast<double>(queue_.size()));
  }
  for (int64_t s = 0; s < busy_; ++s)
    if (seq_[s]->ticket->cancelled()) finish(s, Finish::kCancelled);
  release_finished();
}

// Waiting requests into free slots, each into the free slot that holds the longest prefix of
// its prompt (moved to the first free row, so busy slots stay packed).
void Engine::admit() {
  for (;;) {
    std::unique_ptr<Sequence> s;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (queue_.empty() || busy_ >= slots_) return;
      s = std::move(queue_.front());
      queue_.pop_front();
      metrics_.set("onyx_requests_waiting", static_cast<double>(queue_.size()));
    }
    if (!attach_images(*s)) continue;
    const auto& p = s->ids;
    // A prefix is shared up to the first image token at most: the same ids there may stand
    // for another image.
    int64_t shareable = static_cast<int64_t>(p.size());
    if (model_.folder().has_vision)
      shareable = std::find(p.begin(), p.end(), model_.folder().vision.image_token_id) - p.begin();
    int64_t best = busy_, best_len = -1;
    for (int64_t f = busy_; f < slots_; ++f) {
      const int64_t kept = std::min<int64_t>(model_.slot_filled(f), static_cast<int64_t>(held_[f].size()));
      // At least the prompt's last token runs: its logits draw the first new token.
      const int64_t limit = std::min<int64_t>({kept, static_cast<int64_t>(p.size()) - 1, shareable});
      int64_t n = 0;
      while (n < limit && held_[f][n] == p[n]) ++n;
      if (n > best_len) best = f, best_len = n;
    }
    if (best != busy_) {
      model_.swap_slots(best, busy_);
      std::swap(held_[best], held_[busy_]);
    }
    const int64_t slot = busy_++;
    s->fed = std::max<int64_t>(best_len, 0);
    held_[slot].resize(s->fed);
    model_.truncate_slot(slot, s->fed);
    s->ticket->cached_tokens = s->fed;
    metrics_.add("onyx_prompt_tokens_total", static_cast<double>(p.size()));
    metrics_.add("onyx_prompt_tokens_cached_total", static_cast<double>(s->fed));
    metrics_.observe("onyx_queue_wait_seconds", seconds(s->arrived, Clock::now()));
    seq_[slot] = std::move(s);
  }
}

// A vision-language request, as it takes a slot (on the engine's thread, which owns the
// model): its images through the vision model, each image token of its prompt expanded to its
// image's rows. False when the request failed here (its ticket has ended with the error).
bool Engine::attach_images(Sequence& s) {
  if (!model_.folder().has_vision) return true;
  try {
    std::vector<Tensor> features = s.req.pixels.empty() ? std::vector<Tensor>{} : model_.encode_images(s.req.pixels);
    s.req.pixels.clear();
    std::vector<int64_t> rows;
    int64_t total = 0;
    for (const Tensor& t : features) total += rows.emplace_back(t.shape()[0]);
    std::vector<int64_t> ids = genai::expand_image_tokens(s.req.prompt, model_.folder().vision.image_token_id, rows);
    const int64_t n = static_cast<int64_t>(ids.size());
    ONYX_CHECK(n < capacity_, "the prompt has ", n, " tokens with its images' and the server's context is ", capacity_,
               " positions (--max-context), so no token could be generated");
    s.req.search.max_new_tokens = std::min<int64_t>(s.req.search.max_new_tokens, capacity_ - n);
    if (total) {
      s.image_rows = Tensor(features[0].dtype(), Shape{total, features[0].shape()[1]});
      size_t at = 0;
      for (const Tensor& t : features) {
        std::memcpy(static_cast<char*>(s.image_rows.raw()) + at, t.raw(), t.bytes());
        at += t.bytes();
      }
    }
    s.req.prompt = ids;
    s.ids = std::move(ids);
    s.ticket->prompt_tokens = n;
    return true;
  } catch (const Error& e) {
    s.ticket->end(Finish::kError, e.what());
    return false;
  }
}

genai::Draw Engine::draw_for(const std::vector<Sequence*>& rows) const {
  static const genai::SearchOptions greedy;
  genai::Draw d;
  for (Sequence* s : rows) {
    const genai::SearchOptions& o = s ? s->req.search : greedy;
    d.options.push_back(genai::draw_options(o));
    d.seeds.push_back(s ? genai::sequence_seed(o.seed, 0) : 0);
    d.counters.push_back(s ? s->generated : 0);
    d.prompt_lengths.push_back(s ? static_cast<int64_t>(s->req.prompt.size()) : 0);
  }
  return d;
}

// One chunk of the first prompt still being read; true when one ran.
bool Engine::prefill_one() {
  for (int64_t slot = 0; slot < busy_; ++slot) {
    Sequence& s = *seq_[slot];
    const int64_t n = static_cast<int64_t>(s.req.prompt.size());
    if (s.decoding() || s.fed >= n) continue;
    const int64_t end = std::min(n, s.fed + options_.prefill_chunk);
    const std::vector<int64_t> chunk(s.ids.begin() + s.fed, s.ids.begin() + end);
    genai::Draw d = draw_for({&s});
    s.history = {s.ids};
    if (penalized(s.req.search)) d.history = &s.history;
    if (s.image_rows.defined()) {
      // The rows of the image tokens in this chunk: after those of the tokens before it.
      const int64_t token_id = model_.folder().vision.image_token_id;
      const int64_t before = std::count(s.ids.begin(), s.ids.begin() + s.fed, token_id);
      const int64_t here = std::count(chunk.begin(), chunk.end(), token_id);
      if (here > 0) {
        const int64_t hidden = s.image_rows.shape()[1];
        const size_t row_bytes = s.image_rows.bytes() / static_cast<size_t>(s.image_rows.shape()[0]);
        Tensor rows(s.image_rows.dtype(), Shape{here, hidden});
        std::memcpy(rows.raw(), static_cast<const char*>(s.image_rows.raw()) + before * row_bytes, here * row_bytes);
        model_.set_image_rows(std::move(rows));
      }
    }
    const int64_t token = model_.prefill(slot, chunk, s.fed, d);
    metrics_.add("onyx_prefill_runs_total");
    held_[slot].insert(held_[slot].end(), chunk.begin(), chunk.end());
    s.fed = end;
    if (end == n) take(slot, token);  // the prompt's last logits drew the first new token
    return true;
  }
  return false;
}

void Engine::decode_step() {
  std::vector<int64_t> tokens(busy_, -1);
  std::vector<Sequence*> rows(busy_, nullptr);
  bool any = false;
  for (int64_t s = 0; s < busy_; ++s)
    if (seq_[s]->decoding() && std::find(finished_.begin(), finished_.end(), s) == finished_.end()) {
      tokens[s] = seq_[s]->last;
      rows[s] = seq_[s].get();
      any = true;
    }
  if (!any) return;
  genai::Draw d = draw_for(rows);
  std::vector<std::vector<int64_t>> history;
  bool penalty = false;
  for (Sequence* s : rows) {
    history.push_back(s ? s->ids : std::vector<int64_t>{});
    penalty |= s && penalized(s->req.search);
  }
  if (penalty) d.history = &history;
  // Whether the next turn of the loop will decode these sequences again before anything else
  // touches the model: no request waiting for a free slot, no prompt still being read.
  d.more = options_.run_ahead && !penalty;
  for (int64_t s = 0; s < busy_ && d.more; ++s) d.more = seq_[s]->decoding();
  if (d.more && busy_ < slots_) {
    std::lock_guard<std::mutex> lk(mu_);
    d.more = queue_.empty();
  }
  const std::vector<int64_t> next = model_.decode(tokens, d);
  metrics_.add("onyx_decode_steps_total");
  int64_t decoding = 0;
  for (int64_t s = 0; s < busy_; ++s)
    if (rows[s]) {
      ++decoding;
      held_[s].push_back(tokens[s]);
      take(s, next[s]);
    }
  metrics_.observe("onyx_decode_batch_rows", static_cast<double>(decoding));
}

// Sequence `slot` drew `token`: its text, then whether it ends here.
void Engine::take(int64_t slot, int64_t token) {
  Sequence& s = *seq_[slot];
  const Clock::time_point now = Clock::now();
  if (s.generated == 0) metrics_.observe("onyx_time_to_first_token_seconds", seconds(s.arrived, now));
  else metrics_.observe("onyx_inter_token_latency_seconds", seconds(s.last_token, now));
  s.last_token = now;
  ++s.generated;
  metrics_.add("onyx_generation_tokens_total");
  s.last = -1;
  if (!s.req.ignore_eos && std::find(eos_.begin(), eos_.end(), token) != eos_.end())
    return finish(slot, Finish::kStop);
  s.ids.push_back(token);
  s.ticket->tokens.push_back(token);
  s.text += s.stream->step(static_cast<int32_t>(token));
  const auto& stops = s.req.search.stop;
  size_t cut = std::string::npos;
  for (const auto& stop : stops) {
    // A stop string can only have appeared in what this token added (and the bytes before it
    // that could begin one).
    const size_t from = s.emitted >= stop.size() ? s.emitted - stop.size() : 0;
    const size_t at = s.text.find(stop, from);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    s.text.resize(cut);
    if (s.emitted < s.text.size()) s.ticket->push(s.text.substr(s.emitted));
    s.emitted = s.text.size();
    return finish(slot, Finish::kStop, "", true);
  }
  size_t hold = 0;  // bytes at the end that could begin a stop string
  for (const auto& stop : stops)
    for (size_t k = std::min(stop.size() - 1, s.text.size()); k > hold; --k)
      if (s.text.compare(s.text.size() - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
  const size_t upto = s.text.size() - hold;
  if (upto > s.emitted) {
    s.ticket->push(s.text.substr(s.emitted, upto - s.emitted));
    s.emitted = upto;
  }
  if (s.generated >= s.req.search.max_new_tokens) return finish(slot, Finish::kLength);
  // The next step writes this token at the slot's next position: there must be one.
  if (model_.slot_filled(slot) >= capacity_) return finish(slot, Finish::kLength);
  s.last = token;
}

// Ends the sequence in `slot`: the rest of its text, its figures; the slot is released with the
// others after the step (release_finished).
void Engine::finish(int64_t slot, Finish f, std::string why, bool at_stop_string) {
  Sequence& s = *seq_[slot];
  if (!at_stop_string) {  // what the stream still holds, and anything held back
    s.text += s.stream->finish();
    if (s.emitted < s.text.size()) s.ticket->push(s.text.substr(s.emitted));
    s.emitted = s.text.size();
  }
  s.last = -1;
  s.ticket->completion_tokens = s.generated;  // an end-of-sequence token counts, as it was generated
  metrics_.observe("onyx_request_duration_seconds", seconds(s.arrived, Clock::now()));
  metrics_.add(cat("onyx_sequences_finished_total{reason=\"", finish_reason(f), "\"}"));
  s.ticket->end(f, std::move(why));
  finished_.push_back(slot);
}

// Frees the slots of the sequences that ended, keeping busy slots packed: from the highest,
// each changes places with the last busy slot.
void Engine::release_finished() {
  std::sort(finished_.begin(), finished_.end(), std::greater<>());
  finished_.erase(std::unique(finished_.begin(), finished_.end()), finished_.end());
  for (int64_t slot : finished_) {
    seq_[slot].reset();
    const int64_t last = busy_ - 1;
    if (slot != last) {
      model_.swap_slots(slot, last);
      std::swap(held_[slot], held_[last]);
      std::swap(seq_[slot], seq_[last]);
    }
    --busy_;
  }
  finished_.clear();
}

}  // namespace onyx::serve
