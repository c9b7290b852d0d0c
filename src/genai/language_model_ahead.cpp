// LanguageModel's run-ahead (language_model.h, step()): a decode step launched before the step
// before it has given its tokens to the host, fed those tokens on the device, so that the
// device goes from one step to the next without waiting for the host's round trip (the copy
// of the tokens, the wake-up, the next step's feeds and launch).
#include <algorithm>
#include <cstring>
#include <functional>

#include "genai/language_model.h"
#include "genai/language_model_parts.h"
#include "ops/sampling.h"

namespace onyx::genai {

namespace {

// The draw of the step after one drawn with `d` over `tokens`: the draw's counter one further,
// or where the sequences have counters of their own (serving), each of theirs (a row whose
// token is -1 takes no step: its counter stays).
Draw following(const Draw& d, const std::vector<int64_t>& tokens) {
  Draw n = d;
  if (n.counters.empty()) ++n.counter;
  for (size_t r = 0; r < n.counters.size(); ++r)
    if (r >= tokens.size() || tokens[r] >= 0) ++n.counters[r];
  return n;
}

}  // namespace

bool LanguageModel::can_run_ahead(const Draw& draw, int64_t rows) {
  if (!draw.more || draw.logits || !backend_ || ranks_ || options_.tensor_parallel_world > 1 ||
      mode_ == CacheMode::kGrowing || rows > Ahead::kMaxRows)
    return false;
  // A penalty reads the history, which the step ahead would need before its tokens are known.
  for (const auto& o : draw.options)
    if (sampling::repetition_applies(o.data()) || sampling::counts_apply(o.data())) return false;
  if (!ahead_) {
    auto a = std::make_unique<Ahead>();
    for (auto& r : a->readback) {
      r = backend_->make_readback(static_cast<size_t>(Ahead::kMaxRows) * sizeof(int64_t));
      if (!r) return false;  // this backend has no readback: every step waits for its tokens
    }
    ahead_ = std::move(a);
  }
  return true;
}

bool LanguageModel::takes_ahead(const std::vector<int64_t>& tokens, const Draw& draw, bool serving) const {
  if (!ahead_ || !ahead_->live || ahead_->serving != serving || draw.logits) return false;
  const Draw& a = ahead_->draw;
  return tokens == ahead_->fed && draw.options == a.options && draw.seeds == a.seeds && draw.counter == a.counter &&
         draw.counters == a.counters;
}

// `feeds`' token ids replaced by `ids` ([rows] int64 on the device: a step's drawn tokens).
void LanguageModel::feed_device_ids(Feeds& feeds, const Tensor& ids, int64_t rows) const {
  for (auto& [name, t] : feeds)
    if (name == folder_.input_ids)
      t = Tensor::borrow(DType::kInt64, Shape{rows, 1}, ids.raw(), ids.storage(), ids.device());
}

void LanguageModel::start_readback(const Tensor& drawn, int64_t rows, int slot) {
  ONYX_ASSERT(drawn.dtype() == DType::kInt64 && drawn.numel() == rows && !drawn.on_host(),
              "the decoder's drawn tokens are ", drawn.type_str(), ", not ", rows, " int64 on the device");
  DeviceReadback& rb = *ahead_->readback[slot];
  if (rb.pending()) rb.wait(nullptr);  // a step whose tokens no one took (a launch after it failed)
  rb.start(drawn.raw(), drawn.bytes());
  ahead_->next_slot = slot ^ 1;
}

const int64_t* LanguageModel::wait_tokens(int slot) {
  unsigned word = 0;
  const void* got = ahead_->readback[slot]->wait(&word);
  if (word) {
    // An op met an out-of-range index in this step or one before it: nothing launched since is
    // taken either.
    settle();
    const std::string errors = backend_->finish();
    throw Error(cat("the device reported: ", errors.empty() ? "an error" : errors));
  }
  return static_cast<const int64_t*>(got);
}

void LanguageModel::record_ahead(int slot, Tensor drawn, Draw draw, bool serving, std::vector<int64_t> active) {
  Ahead& a = *ahead_;
  a.live = true;
  a.serving = serving;
  a.active = std::move(active);
  a.slot = slot;
  a.tokens = std::move(drawn);
  a.draw = std::move(draw);
  a.fed.clear();  // known once the step before it gives its tokens
  ++run_ahead_counts_.launched;
}

Tensor LanguageModel::enqueue_step(Feeds feeds, const Draw& draw, int slot) {
  Batch& bt = *batch_;
  std::vector<Tensor> presents;
  Tensor drawn;
  execute(*step_, std::move(feeds), bt, false, draw, &bt.cache, &presents, &drawn);
  start_readback(drawn, bt.size, slot);
  ++bt.steps;
  for (auto& n : bt.length) ++n;
  return drawn;
}

void LanguageModel::launch_ahead(const Tensor& tokens, const Draw& draw) {
  Batch& bt = *batch_;
  const int64_t next = *std::max_element(bt.length.begin(), bt.length.end());
  // A step whose position needs a larger cache (or is past the context) is not launched ahead:
  // the call that takes it grows the cache first, or says the context is full.
  if (next >= folder_.context_length || next >= bt.capacity) return;
  Feeds feeds = step_feeds(std::vector<int64_t>(bt.size, 0));
  feed_device_ids(feeds, tokens, bt.size);
  const int slot = ahead_->next_slot;
  Draw d = following(draw, {});
  Tensor drawn = enqueue_step(std::move(feeds), d, slot);
  record_ahead(slot, std::move(drawn), std::move(d), false, {});
}

Next LanguageModel::take_tokens(int slot) {
  const int64_t* got = wait_tokens(slot);
  Next next;
  next.tokens.assign(got, got + batch_->rows);
  if (ahead_->live) ahead_->fed = next.tokens;  // what the step launched after this one was fed
  return next;
}

Next LanguageModel::take_ahead(const Draw& draw) {
  Ahead& a = *ahead_;
  const int slot = a.slot;
  const Tensor drawn = a.tokens;
  a.live = false;
  a.tokens = Tensor();
  ++run_ahead_counts_.taken;
  if (can_run_ahead(draw, batch_->size))  // the next one, before the wait for these tokens
    launch_after(slot, [&] { launch_ahead(drawn, draw); });
  return take_tokens(slot);
}

void LanguageModel::launch_after(int slot, const std::function<void()>& launch) {
  try {
    launch();
  } catch (...) {
    // The step in `slot` stays in the stream; its tokens are waited for (and dropped) before
    // the error goes to the caller, so that no readback is left pending.
    ahead_->readback[slot]->wait(nullptr);
    throw;
  }
}

void LanguageModel::settle() {
  if (!ahead_ || !ahead_->live) return;
  Ahead& a = *ahead_;
  a.live = false;
  a.tokens = Tensor();
  a.fed.clear();
  if (a.readback[a.slot]->pending()) a.readback[a.slot]->wait(nullptr);
  if (a.serving) {
    if (slots_)
      for (int64_t r : a.active) --slots_->filled[r];
  } else if (batch_) {
    --batch_->steps;
    for (auto& n : batch_->length) --n;
  }
}

// ---- Serving (decode()) ----

Tensor LanguageModel::enqueue_decode(const std::vector<int64_t>& tokens, const Draw& draw, int64_t B, int slot,
                                     const Tensor* device_ids) {
  Slots& sl = *slots_;
  DecodeFeeds f = decode_feeds(tokens, B);
  if (device_ids) feed_device_ids(f.feeds, *device_ids, B);
  Batch bt;
  bt.size = bt.rows = B;
  bt.capacity = sl.capacity;
  Tensor drawn;
  execute(*step_, std::move(f.feeds), bt, false, padded_draw(draw, B), &f.rows, nullptr, &drawn);
  start_readback(drawn, B, slot);
  for (size_t r = 0; r < tokens.size(); ++r)
    if (tokens[r] >= 0) ++sl.filled[r];
  return drawn;
}

void LanguageModel::launch_decode_ahead(const Tensor& drawn, const std::vector<int64_t>& tokens, const Draw& draw) {
  Slots& sl = *slots_;
  std::vector<int64_t> active;
  for (size_t r = 0; r < tokens.size(); ++r)
    if (tokens[r] >= 0) {
      if (sl.filled[r] >= sl.capacity) return;  // full: the call that takes this step says so
      active.push_back(static_cast<int64_t>(r));
    }
  const int64_t B = std::min(bucket_for(static_cast<int64_t>(tokens.size())), sl.count);
  const int slot = ahead_->next_slot;
  Draw d = following(draw, tokens);
  Tensor next = enqueue_decode(tokens, d, B, slot, &drawn);
  record_ahead(slot, std::move(next), std::move(d), true, std::move(active));
}

std::vector<int64_t> LanguageModel::take_decode_tokens(int slot, const std::vector<int64_t>& tokens) {
  const int64_t* got = wait_tokens(slot);
  std::vector<int64_t> next(tokens.size());
  for (size_t r = 0; r < tokens.size(); ++r) next[r] = tokens[r] >= 0 ? got[r] : -1;
  if (ahead_->live) ahead_->fed = next;
  return next;
}

std::vector<int64_t> LanguageModel::take_decode_ahead(const Draw& draw) {
  Ahead& a = *ahead_;
  const int slot = a.slot;
  const Tensor drawn = a.tokens;
  const std::vector<int64_t> fed = a.fed;  // this step's tokens: which rows are active
  a.live = false;
  a.tokens = Tensor();
  ++run_ahead_counts_.taken;
  const int64_t B = std::min(bucket_for(static_cast<int64_t>(fed.size())), slots_->count);
  if (can_run_ahead(draw, B)) launch_after(slot, [&] { launch_decode_ahead(drawn, fed, draw); });
  return take_decode_tokens(slot, fed);
}

}  // namespace onyx::genai
